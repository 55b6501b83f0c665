"""``python -m pytest_abbench.child``: the command the plugin runs for each cell."""

import sys

from pytest_abbench.child.measure import main

sys.exit(main())
