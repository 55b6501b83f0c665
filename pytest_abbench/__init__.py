"""pytest-abbench: does this switch make this GPU operator faster or slower, and is that answer stable?"""

from pytest_abbench.campaign.model import Case, Op, Shape, Switch, Work

__all__ = ["Case", "Op", "Shape", "Switch", "Work"]
__version__ = "0.1.0"
