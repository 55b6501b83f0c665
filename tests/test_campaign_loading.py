"""A campaign's module name (which keys its kernels' autotune records) holds no machine-specific path; what a
campaign declares at module level is checked as it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_abbench.campaign.loader import load_campaign, module_name_for
from pytest_abbench.campaign.model import CampaignError

CAMPAIGN = "from pytest_abbench import Op\n\nOPS = [Op('one', build=lambda shape, device: (lambda: None), shapes={'smoke': [{}]})]\n"


def write_campaign(rootdir: Path, relative: str) -> Path:
    path = rootdir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CAMPAIGN)
    return path


def test_the_same_campaign_in_two_checkouts_gets_one_module_name(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "elsewhere" / "moved"
    names = {module_name_for(write_campaign(root, "campaigns/mm.py"), root) for root in (here, there)}
    assert names == {"abbench_campaign__campaigns__mm"}


def test_loaded_module_is_named_from_the_rootdir_and_distinct_per_file(tmp_path: Path) -> None:
    first = load_campaign(write_campaign(tmp_path, "campaigns/mm.py"), rootdir=tmp_path)
    second = load_campaign(write_campaign(tmp_path, "other/mm.py"), rootdir=tmp_path)
    assert first.module.__name__ == "abbench_campaign__campaigns__mm"
    assert second.module.__name__ == "abbench_campaign__other__mm"
    outside = module_name_for(write_campaign(tmp_path / "a", "x-y.py"), tmp_path / "b")
    assert outside == "abbench_campaign__up__a__x_y" and str(tmp_path) not in outside


def test_a_cell_loads_under_the_name_the_session_gave(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, "c.py")
    assert load_campaign(path, module_name="abbench_campaign__given").module.__name__ == "abbench_campaign__given"


@pytest.mark.parametrize("attribute, value, message", [
    ("SERVER_IMPORTS", '"flag_gems"', "SERVER_IMPORTS is str, not a tuple of module names"),
    ("SERVER_IMPORTS", '("flag_gems", 3)', "SERVER_IMPORTS[1] is 3, not a module name"),
    ("SERVER_IMPORTS", '("flag gems",)', "SERVER_IMPORTS[0] is 'flag gems', not a module name"),
    ("SERVER_IMPORTS", '("a.b", "a.b")', "SERVER_IMPORTS names 'a.b' twice"),
    ("UNUSED_IMPORTS", '"peft"',
     "UNUSED_IMPORTS is str, not a tuple of module names (e.g. UNUSED_IMPORTS = (\"peft\",))"),
    ("UNUSED_IMPORTS", '("peft", "-x")', "UNUSED_IMPORTS[1] is '-x', not a module name"),
    ("UNUSED_IMPORTS", '("peft", "peft")', "UNUSED_IMPORTS names 'peft' twice"),
])
def test_server_and_unused_imports_name_the_bad_value(tmp_path: Path, attribute: str, value: str,
                                                       message: str) -> None:
    path = tmp_path / "c.py"
    path.write_text(f"{CAMPAIGN}{attribute} = {value}\n")
    with pytest.raises(CampaignError) as raised:
        load_campaign(path)
    assert str(raised.value).startswith(f"{path}: {message}"), raised.value


def test_unused_imports_go_first_marked_and_a_module_in_both_lists_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text(f"{CAMPAIGN}SERVER_IMPORTS = ('liger_kernel.ops',)\nUNUSED_IMPORTS = ['peft']\n")
    assert load_campaign(path).server_imports == ("!peft", "liger_kernel.ops")
    for server, unused in (("peft", "peft"), ("liger_kernel.ops", "liger_kernel"), ("peft", "peft.tuners")):
        path.write_text(f"{CAMPAIGN}SERVER_IMPORTS = ({server!r},)\nUNUSED_IMPORTS = [{unused!r}]\n")
        with pytest.raises(CampaignError, match=f"UNUSED_IMPORTS keeps '{unused}' out, and SERVER_IMPORTS imports "
                                                f"'{server}'"):
            load_campaign(path)


def test_server_imports_are_read_in_order(tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text(f"{CAMPAIGN}SERVER_IMPORTS = ['networkx', 'flag_gems.ops']\n")
    assert load_campaign(path).server_imports == ("networkx", "flag_gems.ops")
    assert load_campaign(write_campaign(tmp_path, "d.py")).server_imports == ()
