"""Fixtures shared by the project's tests, and what pytest must not collect (helpers to import: helpers.py)."""

from __future__ import annotations

import pytest

# helpers.py holds campaign sources as strings (lines starting "OPS =") and imports
# pytest_abbench: the plugin's looks_like_campaign would collect it as a campaign.
collect_ignore = ["helpers.py"]


@pytest.fixture
def campaign_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    return pytester
