"""Names for a cell child's exit code, in the shell's convention."""

from __future__ import annotations

import signal

TIMEOUT = 124
KILLED = 137
SEGFAULT = 139

# Session exit codes of the plugin (README "Exit codes").
EXIT_CELL_FAILED = 1  # pytest's "tests failed": a cell failed, or planned cells never ran
EXIT_CALIBER = 4  # kept from the product's first release although pytest also uses 4 for usage errors
EXIT_ROOT = 6  # the root cannot be written, or another session holds it
EXIT_SLOWER = 7  # --ab-fail-if-slower tripped


def session_exit_code(pytest_status: int, caliber_mismatch: bool, slower: bool,
                      allow_caliber_mismatch: bool) -> int:
    """The exit code of a session or of ``abbench summary``: one rule for both.

    A caliber mismatch wins over everything (the numbers mean different
    things); ``--ab-fail-if-slower`` only replaces a clean run's 0.
    """
    if caliber_mismatch and not allow_caliber_mismatch:
        return EXIT_CALIBER
    if slower and pytest_status == 0:
        return EXIT_SLOWER
    return pytest_status


def shell_rc(returncode: int) -> int:
    """subprocess reports death by signal N as -N; shells and CI say 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def status_word(rc: int) -> str:
    """The one word a status.tsv row and a failure message use for ``rc``."""
    if rc == 0:
        return "ok"
    if rc == TIMEOUT:
        return "TIMEOUT"
    if rc == KILLED:
        return "KILLED"
    if rc == SEGFAULT:
        return "SEGFAULT"
    if rc > 128:
        try:
            return f"SIGNAL_{signal.Signals(rc - 128).name}"
        except ValueError:
            return f"SIGNAL_{rc - 128}"
    return f"EXIT_{rc}"


def describe(rc: int) -> str:
    """A phrase for messages: ``rc 137 KILLED (SIGKILL, often out of memory)``."""
    word = status_word(rc)
    extra = {
        TIMEOUT: " (cell timeout expired; process group killed)",
        KILLED: " (SIGKILL, often out of memory)",
        SEGFAULT: " (SIGSEGV)",
    }.get(rc, "")
    return f"rc {rc} {word}{extra}"


# A cell a root holds a folder of but no status row for: read offline, it may have been interrupted, crashed, or be
# running still; the report cannot tell which, so it never says "failed" of it.
NO_ROW_SUFFIX = " (no status row)"
# A cell that finished but one of whose results records cannot be read: some of what it measured is lost.
UNREADABLE_SUFFIX = " (unreadable results)"


def _cells(what: str, cells: list[str]) -> list[str]:
    return [f"{len(cells)} cell(s) {what}: {', '.join(cells[:5])}" + (", ..." if len(cells) > 5 else "")] if cells else []


def exit_reason(code: int, failed_cells: list[str], complete: bool, caliber_ops: list[str],
                slower_ops: list[str]) -> str:
    """Why a session (or ``abbench summary``) ends with ``code``: the line CI reads to tell the two 4s apart."""
    never_ran = [] if complete else ["planned cells never ran"]
    if code == 0:
        return "clean: every planned cell finished"
    if code == EXIT_CELL_FAILED:
        rowless = [c.removesuffix(NO_ROW_SUFFIX) for c in failed_cells if c.endswith(NO_ROW_SUFFIX)]
        damaged = [c.removesuffix(UNREADABLE_SUFFIX) for c in failed_cells if c.endswith(UNREADABLE_SUFFIX)]
        failed = [c for c in failed_cells if not c.endswith((NO_ROW_SUFFIX, UNREADABLE_SUFFIX))]
        return "; ".join(_cells("failed", failed)
                         + _cells("without a status row (interrupted, crashed or still running)", rowless)
                         + _cells("with a results record that cannot be read (report.md names it)", damaged)
                         + never_ran) or "a test failed"
    if code == 2:
        return "; ".join(["interrupted or a collection error (pytest's code)", *never_ran])
    if code == EXIT_CALIBER:
        if caliber_ops:
            return f"caliber mismatch: the two sides' numbers mean different things for {', '.join(caliber_ops)}"
        return "pytest usage error (not a caliber mismatch)"
    if code == EXIT_ROOT:
        return "the root could not be used (the abbench line above says why)"
    if code == EXIT_SLOWER:
        return f"slower beyond --ab-fail-if-slower: {', '.join(slower_ops)}"
    return f"pytest exit status {code}"
