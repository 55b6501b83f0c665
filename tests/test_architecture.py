"""The house's rules hold: dependencies run one way, only the pytest side imports pytest, the package stays shallow.

The rules themselves are import-linter contracts in setup.cfg; these tests run
the real ``lint-imports`` on this checkout, and once on a copy with a rule
broken on purpose, so a contract that could never fail is caught too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pytest_abbench"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # cwd first on the path: the package analysed is the one in cwd, not an installed copy.
    return subprocess.run([str(LINT_IMPORTS), "--config", "setup.cfg", "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_import_contracts_hold() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_report_module_that_imports_pytest_breaks_a_contract(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "pytest_abbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "setup.cfg", tmp_path / "setup.cfg")
    stats = tmp_path / "pytest_abbench" / "report" / "stats.py"
    stats.write_text(stats.read_text() + "\nimport pytest  # a report that needs pytest to run\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Only the pytest side" in result.stdout and "BROKEN" in result.stdout
    assert "pytest_abbench.report.stats -> pytest" in result.stdout


def test_few_modules_directly_in_the_package() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 15, f"{len(top)} modules directly in pytest_abbench/: {top}; put them in a role package"
