"""Names for a cell child's exit code, in the shell's convention."""

from __future__ import annotations

import signal

TIMEOUT = 124
KILLED = 137
SEGFAULT = 139

# Session exit codes of the plugin (README "Exit codes").
EXIT_CALIBER = 4
# pytest owns 0-5; ours start above them so CI can tell them apart.
EXIT_ROOT = 6  # the root cannot be written, or another session holds it
EXIT_SLOWER = 7  # --ab-fail-if-slower tripped


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
