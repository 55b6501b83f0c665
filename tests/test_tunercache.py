"""Library tuner caches with real SQLite files (what FlagGems' LibTuner writes), and the FlagGems campaign's skip."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pytest_abbench.core import tunercache
from pytest_abbench.core.markers import AUTOTUNE_REPLAY_FALLBACK

REPO = Path(__file__).resolve().parent.parent


def _tune(cache: Path, *keys: str) -> None:
    """Write tuned rows the way a tuner database grows: one row per key."""
    db = cache / tunercache.CONFIG_DIR / "TunedConfig_H200_triton_3_6.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute("create table if not exists mm (key text primary key, config text)")
        conn.executemany("insert into mm values (?, ?)", [(k, "BLOCK_M=128") for k in keys])


def test_record_seeds_every_other_cell_and_growth_is_a_fallback(tmp_path: Path) -> None:
    root = tmp_path / "root"
    recorder = tmp_path / "r1_A" / "tuner_cache"
    _tune(recorder, "1024x1024")
    assert tunercache.keep_record(recorder, root, "mm")

    replayer = tmp_path / "r2_A" / "tuner_cache"
    tunercache.seed_from_record(root, "mm", replayer)
    assert tunercache.content_hash(replayer) == tunercache.content_hash(recorder) is not None
    before = tunercache.row_counts(replayer)
    assert before == {"TunedConfig_H200_triton_3_6.db:mm": 1}

    printed: list[str] = []
    assert tunercache.report_growth(before, tunercache.row_counts(replayer), printed.append,
                                    AUTOTUNE_REPLAY_FALLBACK) == 0
    _tune(replayer, "4096x4096")  # a key the record lacked was tuned in this cell
    assert tunercache.report_growth(before, tunercache.row_counts(replayer), printed.append,
                                    AUTOTUNE_REPLAY_FALLBACK) == 1
    assert printed == [f"{AUTOTUNE_REPLAY_FALLBACK} kernel=libtuner:TunedConfig_H200_triton_3_6.db:mm "
                       "key=+1 rows tuned in this cell"]


def test_a_cell_that_tuned_nothing_leaves_no_record(tmp_path: Path) -> None:
    assert not tunercache.keep_record(tmp_path / "empty", tmp_path / "root", "op")
    tunercache.seed_from_record(tmp_path / "root", "op", tmp_path / "cell")
    assert tunercache.content_hash(tmp_path / "cell") is None


def test_a_corrupt_database_is_counted_not_fatal(tmp_path: Path) -> None:
    db = tmp_path / tunercache.CONFIG_DIR / "broken.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database")
    assert tunercache.row_counts(tmp_path) == {"broken.db:?": -1}


def test_flaggems_campaign_is_skipped_with_one_reason_without_flaggems(pytester: pytest.Pytester) -> None:
    if __import__("importlib").util.find_spec("flag_gems") is not None:
        pytest.skip("FlagGems is installed here: the skip path cannot be shown")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(str(REPO / "campaigns" / "flaggems.py"), "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *flaggems.py: FlagGems is not installed (pip install -e *flaggems*)"])


def test_keys_only_side_b_tunes_become_its_record_and_seed_its_later_cells(tmp_path: Path) -> None:
    root = tmp_path / "root"
    r1_a = tmp_path / "r1_A" / "tuner_cache"
    _tune(r1_a, "1024x1024")
    assert tunercache.keep_record(r1_a, root, "mm")
    r1_b = tmp_path / "r1_B" / "tuner_cache"
    tunercache.seed_from_record(root, "mm", r1_b)  # the first B cell starts from the op's record like any cell
    _tune(r1_b, "4096x4096")  # a key only side B meets
    assert tunercache.keep_side_record(r1_b, root, "mm", "B")
    r2_b, r2_a = tmp_path / "r2_B" / "tuner_cache", tmp_path / "r2_A" / "tuner_cache"
    tunercache.seed_from_record(root, "mm", r2_b, "B")
    tunercache.seed_from_record(root, "mm", r2_a)
    before = tunercache.row_counts(r2_b)
    assert before == {"TunedConfig_H200_triton_3_6.db:mm": 2}, "B's later cells start with B's key tuned"
    assert tunercache.row_counts(r2_a) == {"TunedConfig_H200_triton_3_6.db:mm": 1}
    _tune(r2_b)  # tunes nothing: side B's key was in its record
    assert tunercache.report_growth(before, tunercache.row_counts(r2_b), print, AUTOTUNE_REPLAY_FALLBACK) == 0


def test_a_side_b_cell_that_tuned_nothing_new_leaves_no_side_record(tmp_path: Path) -> None:
    root = tmp_path / "root"
    r1_a = tmp_path / "r1_A" / "tuner_cache"
    _tune(r1_a, "1024x1024")
    tunercache.keep_record(r1_a, root, "mm")
    r1_b = tmp_path / "r1_B" / "tuner_cache"
    tunercache.seed_from_record(root, "mm", r1_b)
    assert not tunercache.keep_side_record(r1_b, root, "mm", "B")
    assert tunercache.seed_source(root, "mm", "B") == tunercache.record_dir(root, "mm")


def test_flaggems_against_aten_times_torch_on_side_a_and_flaggems_on_side_b(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """campaigns/flaggems_aten.py: side A calls the spec's ATen call and never imports FlagGems; side B (the
    switch's variable) calls FlagGems.  A stand-in ``flag_gems`` package takes FlagGems' place (it loads only on
    a GPU) and counts its calls."""
    import sys

    import torch

    from pytest_abbench.campaign.flaggems import AGAINST_ATEN, GEMS, IMPL_VARIABLE, GemsOp, gems_ops
    from pytest_abbench.campaign.model import Shape

    package = tmp_path / "flag_gems"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("CALLS = []\n\ndef mm(a, b):\n    CALLS.append('mm')\n    return a @ b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flag_gems", "flag_gems.ops"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # restored (absent) after the test
    aten_calls = []

    def aten_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        aten_calls.append("mm")
        return a @ b

    spec = GemsOp("mm", inputs=lambda shape, device: (torch.ones(2, 2), torch.ones(2, 2)),
                  call=lambda gems, a, b: gems.mm(a, b), reference=lambda a, b: a @ b, aten=aten_mm)
    [op] = gems_ops([spec], against_aten=True)
    shape = Shape.coerce({"n": 2})
    monkeypatch.delenv(IMPL_VARIABLE, raising=False)  # side A
    op.build(shape, "cpu").run()
    assert aten_calls == ["mm"] and "flag_gems" not in sys.modules
    monkeypatch.setenv(IMPL_VARIABLE, GEMS)  # side B, as the switch sets it
    assert dict(AGAINST_ATEN.env_b) == {IMPL_VARIABLE: GEMS}
    op.build(shape, "cpu").run()
    assert aten_calls == ["mm"] and sys.modules["flag_gems.ops"].CALLS == ["mm"]
    # Without against_aten both sides call FlagGems (the compiler-switch campaign).
    monkeypatch.delenv(IMPL_VARIABLE)
    gems_ops([spec])[0].build(shape, "cpu").run()
    assert sys.modules["flag_gems.ops"].CALLS == ["mm", "mm"]
    with pytest.raises(ValueError, match=r"FlagGems against ATen: mm has no aten call \(GemsOp\(aten=...\)\)"):
        gems_ops([GemsOp("mm", inputs=spec.inputs, call=spec.call, reference=spec.reference)], against_aten=True)
