"""Campaign input checked at collection: shapes, the run's level, files that are not campaigns, --ab-rounds."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import simple_campaign


def shapes_campaign(shapes: str, name: str = "x") -> str:
    return textwrap.dedent(f'''
        from pytest_abbench import Case, Op, Shape, Switch

        def build(shape, device):
            return lambda: None

        OPS = [Op({name!r}, build=build, shapes={shapes})]
        SWITCH = Switch(env_b={{"ABBENCH_TEST_SWITCH": "1"}})
    ''')


@pytest.mark.parametrize("shapes, message", [
    # The README's own placeholder, copied as is.
    ('{"smoke": [...]}', ", shape 0: Ellipsis is a ellipsis, not a mapping of parameter names to values*"),
    ('{"smoke": [{"n": object()}]}', ", shape 0, parameter 'n': <object object at *> is a object, not JSON data*"),
    ('{"smoke": [{"n": 1}, {"n": [1, {"k": object()}]}]}', ", shape 1, parameter 'n'[[]1[]][[]'k'[]]: <object*"),
    ('{"smoke": [{"n": "a\\tb"}]}', ", shape 0, parameter 'n': 'a\\tb' contains the control character '\\t'*"),
    ('{"smoke": [{"n\\nm": 1}]}', ", shape 0: parameter name 'n\\nm' contains the control character '\\n'*"),
    ('{"smoke": [{1: 1}]}', ", shape 0: parameter name 1 is a int, not a str*"),
    ('{"smoke": [{"n": float("nan")}]}', ", shape 0, parameter 'n': nan is not a finite number*"),
    ('{"smoke": [Shape("a\\rb", {"n": 1})]}', ", shape 0: shape id 'a\\rb' must be a str without control*"),
    ('{"smoke": {"n": 1}}', ": {'n': 1} is a dict, not a list of shapes*"),
    # A perf_report's x_vals [8, 32, 64, 32] gave "duplicate shape ids at level 'core'", naming neither.
    ('{"smoke": [{"n": 8}, {"n": 32}, {"n": 64}, {"n": 32}]}',
     ": shape 'n=32' is declared 2 times (shape ids must be unique within a level: each is a cell's row)*"),
])
def test_bad_shape_value_names_file_op_level_and_value(campaign_dir: pytest.Pytester, shapes: str,
                                                       message: str) -> None:
    campaign_dir.makepyfile(bad=shapes_campaign(shapes))
    result = campaign_dir.runpytest("bad.py", "--collect-only", "--ab-level", "smoke")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*campaign error: *bad.py: op 'x', level 'smoke'{message}"])
    assert "TypeError" not in result.stdout.str()


def test_json_data_shapes_are_accepted(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(good=shapes_campaign(
        '{"smoke": [{"dims": [1, 2], "dtype": "float16", "alpha": 0.5, "flag": True, "none": None, "m": {"a": 1}}]}'))
    result = campaign_dir.runpytest("good.py", "--collect-only", "-q", "--ab-rounds", "1", "--ab-level", "smoke")
    result.stdout.fnmatch_lines(["2 tests collected*"])


def test_op_without_shapes_for_the_level_is_reported_at_collection(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(lv=textwrap.dedent('''
        from pytest_abbench import Op
        def build(shape, device):
            return lambda: None
        OPS = [Op("x", build=build, shapes={"smoke": [{"n": 1}]}),
               Op("y", build=build, shapes={"core": [{"n": 1}, {"n": 2}]})]
    '''))
    result = campaign_dir.runpytest("lv.py", "--collect-only", "--ab-level", "smoke")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*campaign error: *lv.py: op 'y' has no shapes for level 'smoke', the level this "
                                 "run measures (it has: core (2 shapes))*"])


def test_named_file_without_ops_says_why(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(noops="from pytest_abbench import Op\nops = []\n")
    result = campaign_dir.runpytest("noops.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*noops.py is not a campaign: it has no top-level `OPS = [[]...[]]` line*"])


def test_named_campaign_called_test_star_says_why(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(test_mine=simple_campaign('"only"'))
    result = campaign_dir.runpytest("test_mine.py", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_mine.py is not a campaign: test_mine.py is collected as a test module*"])


def test_named_ordinary_test_files_are_collected_as_before(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(plain="import pytest_abbench\n\ndef test_x():\n    pass\n", other="X = 1\n")
    assert campaign_dir.runpytest("plain.py").ret == pytest.ExitCode.OK
    assert campaign_dir.runpytest("other.py").ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_named_campaign_is_imported_once(campaign_dir: pytest.Pytester) -> None:
    count = 'import pathlib\nwith open(pathlib.Path(__file__).with_name("imports.txt"), "a") as f:\n    f.write("x")\n'
    campaign_dir.makepyfile(once=simple_campaign('"only"', extra="") + count)
    result = campaign_dir.runpytest("once.py", "--collect-only", "-q", "--ab-rounds", "1")
    result.stdout.fnmatch_lines(["2 tests collected*"])
    assert (campaign_dir.path / "imports.txt").read_text() == "x"


@pytest.mark.parametrize("source, message", [
    ("from pytest_abbench import Op\nOPS = [Op('x', build=print, shapes={}\n", "*syn.py:2: syntax error: *"),
    ("import pytest_abbench\nimport no_such_module_abbench\nOPS = []\n",
     "*syn.py: importing it raised ModuleNotFoundError: No module named 'no_such_module_abbench'"),
])
def test_named_campaign_import_error_reported_once(campaign_dir: pytest.Pytester, source: str, message: str) -> None:
    campaign_dir.makepyfile(syn=source)
    result = campaign_dir.runpytest("syn.py", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([message])
    assert result.stdout.str().count("ERROR collecting syn.py") == 1
    assert "_bootstrap" not in result.stdout.str()


@pytest.mark.parametrize("args, ini, message", [
    (["--ab-rounds", "1001"], "", "*--ab-rounds*must be at most 1000 rounds, got '1001'*"),
    (["--ab-rounds", "1000000000000"], "", "*--ab-rounds*must be at most 1000 rounds, got '1000000000000'*"),
    ([], "ab_rounds = 5000", "*ini option ab_rounds='5000': must be at most 1000 rounds, got '5000'*"),
])
def test_ab_rounds_is_bounded(campaign_dir: pytest.Pytester, args: list[str], ini: str, message: str) -> None:
    campaign_dir.makeini(f"[pytest]\n{ini}\n")
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    result = campaign_dir.runpytest("c.py", "--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_op_name_starting_with_a_dash_is_a_campaign_error(campaign_dir: pytest.Pytester) -> None:
    # Before any cell runs: such a name reads as an option to a shell, to pytest's -k and to the child.
    campaign_dir.makepyfile(dash=shapes_campaign('{"smoke": [{"n": 1}]}', name="-neg"))
    result = campaign_dir.runpytest("dash.py", "--collect-only", "--ab-level", "smoke")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*campaign error: *dash.py: op name '-neg' is not allowed: it starts with '-'*"])


@pytest.mark.parametrize("name, message", [
    ("x" * 300, "op name 'xxxxx*... is 300 characters long; at most 100 are allowed*"),
    ("matm\u00fcl", "op name 'matm\u00fcl' is not allowed: use ASCII letters, digits*"),
])
def test_op_name_that_cannot_be_a_folder_is_a_campaign_error(campaign_dir: pytest.Pytester, name: str,
                                                              message: str) -> None:
    # A 300-character name gave "File name too long" from inside a cell; a non-ASCII one did not say why.
    campaign_dir.makepyfile(named=shapes_campaign('{"smoke": [{"n": 1}]}', name=name))
    result = campaign_dir.runpytest("named.py", "--collect-only", "--ab-level", "smoke")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*campaign error: *named.py: {message}"])


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing" / "python", "SWITCH.python_b '{p}' does not exist"),
    (lambda d: d, "SWITCH.python_b '{p}' is not an executable file (it is a folder)"),
    (lambda d: _script(d / "python", "", mode=0o644), "SWITCH.python_b '{p}' is not an executable file "
                                                      "(no execute permission)"),
    # The venv's interpreter without its site-packages: it runs, but finds neither torch nor triton.
    (lambda d: _script(d / "python", f'exec {sys.executable} -S "$@"'),
     "SWITCH.python_b '{p}' cannot import torch, triton (not installed for that interpreter)"),
])
def test_switch_interpreter_is_checked_at_collection(campaign_dir: pytest.Pytester, make: Any,
                                                     message: str) -> None:
    python = make(campaign_dir.path)
    campaign_dir.makepyfile(py=simple_campaign('"one"', switch=f'Switch(python_b={str(python)!r})'))
    result = campaign_dir.runpytest("py.py", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*campaign error: *py.py: {message.format(p=python)}*"])
    assert "FileNotFoundError" not in result.stdout.str()


def test_switch_interpreter_that_has_torch_and_triton_is_accepted(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(py=simple_campaign('"one"', switch=f'Switch(python_b={sys.executable!r})'))
    campaign_dir.runpytest("py.py", "--collect-only", "-q", "--ab-rounds", "1").stdout.fnmatch_lines(
        ["2 tests collected*"])


def helper_folder_campaign(who: str) -> str:
    """A campaign in folder ``who`` whose switch hook and build come from its own ``_kernels`` package."""
    return textwrap.dedent(f'''
        from pytest_abbench import Case, Op, Switch
        from _kernels.switches import {who}_hook

        def build(shape, device):
            import torch
            from _kernels import switches  # a build imports its kernels in the cell
            print(f"BUILD {{switches.WHO}}")
            x = torch.arange(shape["n"], dtype=torch.float32)
            return Case(run=lambda: x + 1, expected=lambda: x + 1)

        OPS = [Op("{who}_op", build=build, shapes={{"smoke": [{{"n": 8}}]}})]
        SWITCH = Switch(setup_b={who}_hook)
    ''')


def test_two_campaign_folders_each_with_its_own_kernels_package(campaign_dir: pytest.Pytester,
                                                                tmp_path: Path) -> None:
    # Both folders have a _kernels.switches, with different names in it: each campaign must see its own,
    # at collection (one process imports both) and in its cells (each imports one).
    for who in ("alpha", "beta"):
        kernels = campaign_dir.path / who / "_kernels"
        kernels.mkdir(parents=True)
        (kernels / "__init__.py").write_text("")
        (kernels / "switches.py").write_text(f'WHO = "{who}"\n\ndef {who}_hook():\n    print("HOOK {who}")\n')
        (campaign_dir.path / who / f"{who}_camp.py").write_text(helper_folder_campaign(who))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("alpha", "beta", "--ab-rounds", "1", "--ab-level", "smoke",
                                               "--ab-root", str(root), "--ab-ir-target", "none",
                                               "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    for who in ("alpha", "beta"):
        for side in ("A", "B"):
            log = (root / f"r1_{side}" / f"{who}_op" / "run.log").read_text()
            assert f"BUILD {who}\n" in log, log
            assert (f"HOOK {who}\n" in log) == (side == "B"), log


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path
