"""What every command shares: exit codes, how an error or a verdict is said, an interrupted run."""

from __future__ import annotations

import sys
from collections.abc import Callable

from splitbrain.node.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput, RunFailed, exit_code

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "error_exit",
    "interrupted",
    "print_evidence",
    "print_notes",
    "verdict_exit",
]


def error_exit(exc: BadInput | RunFailed, *, where: str = "", failed: str = "") -> int:
    """Say an error the way the command line does and exit by its root: `where` goes before bad
    input's message (the file it is in), `failed` before a failed run's (seed, backend)."""
    code = exit_code(exc)
    if code == EXIT_BAD_INPUT:
        print(f"splitbrain: {where}{exc}", file=sys.stderr)
    else:
        print(f"splitbrain: {failed}{exc}", file=sys.stderr)
        print_notes(exc)
    return code if code is not None else EXIT_FAILED


def verdict_exit(verdict) -> int:
    if verdict.passed:
        return EXIT_OK
    for check in verdict.failures:
        state = "passed" if check.passed else "vacuous" if check.vacuous else "failed"
        print(f"  {check.name} {state}: {check.explanation}")
    return EXIT_FAILED


def interrupted(exc: KeyboardInterrupt) -> int:
    from splitbrain.harness.runner import Terminated

    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    started = any("run directory" in note for note in getattr(exc, "__notes__", ()))
    print(f"splitbrain: {what}" + ("; every node stopped, what exists is written" if started else ""), file=sys.stderr)
    print_notes(exc)
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def print_notes(exc: BaseException) -> None:
    for note in getattr(exc, "__notes__", ()):
        print(f"  {note}", file=sys.stderr)


def print_evidence(verdict, events: Callable[[], list[dict]]) -> None:
    """For a reproduced bug, the failure it expected; for any failure or reproduction, what the
    protocol kept doing at the end and the final windows (harness/evidence.py). `events` gives the
    merged log: it is read only when there is something to show (merging a big run costs)."""
    if verdict.passed and not isinstance(verdict.expect, dict):
        return
    if verdict.passed:
        for check in verdict.checks:
            if check.name == verdict.expect["fail"]:
                print(f"  {check.name} failed (as expected): {check.explanation}")
    from splitbrain.harness.evidence import evidence_lines

    for line in evidence_lines(events()):
        print(f"  evidence: {line}")
