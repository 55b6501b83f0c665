"""The autotune pin's refusals for a side's supplement record, on a real @triton.autotune kernel (no GPU needed:
nothing is launched, the pin is asked for its choice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_abbench.child.autotune_pin import AutotunePin, AutotuneRecordError, kernel_name
from pytest_abbench.core.autotunerecord import AutotuneRecord, read_record, write_record

BLOCK_16 = {"kwargs": {"BLOCK": 16}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
BLOCK_99 = {**BLOCK_16, "kwargs": {"BLOCK": 99}}


def _kernel() -> object:
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def side_b_only(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

    return side_b_only


def _pin(tmp_path: Path, main: AutotuneRecord, side: AutotuneRecord | None, side_mode: str = "replay") -> AutotunePin:
    write_record(tmp_path / "op.json", main)
    if side is not None:
        write_record(tmp_path / "side-B" / "op.json", side)
    return AutotunePin("replay", tmp_path / "op.json", lambda _: None, lambda _: False, side_mode=side_mode,
                       side_path=tmp_path / "side-B" / "op.json", side="B", cell="r2-B")


def test_a_supplement_config_no_longer_in_the_list_is_refused_naming_the_file(tmp_path: Path) -> None:
    kernel = _kernel()
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    pin = _pin(tmp_path, AutotuneRecord(), AutotuneRecord({ident: BLOCK_99}, "B", "r1-B"))
    with pytest.raises(AutotuneRecordError, match=r"side-B/op.json: kernel .*side_b_only key \['40', 'torch.float32'\]"
                                                  r": recorded config .*99.* is not in the kernel's config list"):
        pin.choose(kernel, (40, "torch.float32"), kernel.configs)  # type: ignore[attr-defined]
    pin = _pin(tmp_path, AutotuneRecord(), AutotuneRecord({ident: BLOCK_16}, "B", "r1-B"))
    assert pin.choose(kernel, (40, "torch.float32"), kernel.configs).kwargs == {"BLOCK": 16}  # type: ignore


def test_two_records_pinning_one_key_differently_are_refused(tmp_path: Path) -> None:
    ident = ("mod:kernel", ("40",))
    with pytest.raises(AutotuneRecordError, match=r"record/record conflict: kernel mod:kernel key \['40'\]"):
        _pin(tmp_path, AutotuneRecord({ident: BLOCK_16}), AutotuneRecord({ident: BLOCK_99}, "B", "r1-B"))
    _pin(tmp_path, AutotuneRecord({ident: BLOCK_16}), AutotuneRecord({ident: BLOCK_16}, "B", "r1-B"))  # the same


def test_the_recording_cell_writes_an_empty_supplement_and_a_bad_one_is_named(tmp_path: Path) -> None:
    pin = _pin(tmp_path, AutotuneRecord(), None, side_mode="record")
    pin.save()
    written = read_record(tmp_path / "side-B" / "op.json")
    assert (written.entries, written.side, written.recorded_by) == ({}, "B", "r2-B")
    (tmp_path / "side-B" / "op.json").write_text('{"schema": 1, "entries": [{"kernel": "k", "key": "40"}]}')
    with pytest.raises(AutotuneRecordError, match=r"side-B/op.json.*field 'entries\[0\].key': expected a list of text"):
        _pin(tmp_path, AutotuneRecord(), None)


def test_a_carried_config_the_kernel_still_has_is_taken_untuned_and_one_it_lost_is_tuned(tmp_path: Path) -> None:
    kernel = _kernel()
    key = (40, "torch.float32")
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    lines: list[str] = []
    for seed, wanted, carried in ((BLOCK_16, {"BLOCK": 16}, 1), (BLOCK_99, None, 0)):
        write_record(tmp_path / "earlier.json", AutotuneRecord({ident: seed}, recorded_by="r1-A"))
        pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, cell="r1-A",
                          seed_path=tmp_path / "earlier.json")
        chosen = pin.choose(kernel, key, kernel.configs)  # type: ignore[attr-defined]
        assert (chosen.kwargs if chosen is not None else None) == wanted  # None: the autotuner tunes it
        pin.note(kernel, key, kernel.configs[1])  # type: ignore[attr-defined]  # tuning (or the carry) chose
        pin.save()
        assert read_record(tmp_path / "op.json").carried == carried
    assert "carried from" in lines[1] and "not in the kernel's config list any more: tuned here" in lines[3]
    pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, seed_path=tmp_path / "none.json")
    assert "nothing to carry" in lines[-1] and pin.seed == {}
    (tmp_path / "bad.json").write_text('{"schema": 1, "entries": [], "carried": 3}')
    with pytest.raises(AutotuneRecordError, match=r"bad.json.*carried"):
        AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, seed_path=tmp_path / "bad.json")
