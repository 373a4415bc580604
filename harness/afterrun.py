"""Writing and judging a finished simulation, on two processes when there are two cores.

After the loop, writing the event logs and running the checks only read the same events. With
`workers=2` a forked child writes the logs and runs CHILD_CHECKS (no_loss) while this process runs the
other checks; the child sends its results back pickled. Each check state is fed by its own walk
over the same merged log, so a check's result does not depend on which checks run beside it:
the verdict is the one a single process gives (tests/harness/test_afterrun.py compares them).

The child never returns into the caller: it leaves by os._exit, so atexit hooks, buffered output
and the caller's `finally` blocks stay the parent's. A child that raised makes the parent raise
the same exception (or ChildFailed when it cannot be sent back, or the child died) after its
own checks; the caller handles it as it would have handled it in one process. The parent kills and
reaps the child if it is interrupted itself.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from splitbrain.harness.checks import CheckResult, run_scenario_checks
from splitbrain.node.errors import RunFailed

if TYPE_CHECKING:
    from splitbrain.harness.scenario import Scenario

# The child's checks: with the writing, about half of the work (5x60 case, CPU s on busy cores:
# parent 1.2-1.5 and child 1.1-1.5; with windows_synced in the child too, 1.0-1.2 and 1.3-1.5).
# fifo and no_duplicates share one walk's state, so they stay together in the parent.
CHILD_CHECKS = ("no_loss",)
# Below this many events a fork costs more than it saves (and small runs are most of the tests').
MIN_EVENTS = 20_000


class ChildFailed(RunFailed, RuntimeError):
    """The writing child died or raised something that could not be sent back."""


def write_and_check(
    write: Callable[[], object], events: list[dict], scenario: Scenario, *, workers: int = 1
) -> list[CheckResult]:
    """Call write() and run the scenario's checks over the merged log `events`; the results in
    the scenario's order. With workers >= 2 and a big enough log, write() runs in a forked child."""
    names = list(scenario.checks)

    def checks(which: list[str]) -> list[CheckResult]:
        return run_scenario_checks(events, scenario, which)

    # A fork copies only the calling thread: with others running (a test runner's, a live
    # backend's), a lock one of them held would stay locked in the child forever.
    if workers < 2 or not hasattr(os, "fork") or len(events) < MIN_EVENTS or threading.active_count() > 1:
        write()
        return checks(names)
    mine = [n for n in names if n not in CHILD_CHECKS]
    theirs = [n for n in names if n in CHILD_CHECKS]

    def child_work() -> list[CheckResult]:
        write()
        return checks(theirs)

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked process
        os.close(read_end)
        _child(write_end, child_work)
    os.close(write_end)
    reaped = False
    try:
        with os.fdopen(read_end, "rb") as pipe:
            results = dict(zip(mine, checks(mine)))
            payload = pipe.read()  # until the child closes its end: its results or nothing
        _, status = os.waitpid(pid, 0)
        reaped = True
        results.update(zip(theirs, _child_results(payload, status)))
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return [results[n] for n in names]


def _child(
    write_end: int, work: Callable[[], list[CheckResult]]
) -> NoReturn:  # pragma: no cover - runs in the forked process
    """Do the work, send (ok, value) back pickled, and leave the process."""
    code = 0
    try:
        # A collection would write to every tracked object's header, copying the parent's pages.
        gc.disable()
        try:
            payload = pickle.dumps((True, work()))
        except BaseException as exc:  # everything goes back to the parent, KeyboardInterrupt too
            code = 1
            text = "".join(traceback.format_exception(exc))
            try:
                raised: bytes | None = pickle.dumps(exc)
            except Exception:
                raised = None
            payload = pickle.dumps((False, (raised, text)))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)


def _child_results(payload: bytes, status: int) -> list[CheckResult]:
    """The child's check results, or its exception raised here."""
    if not payload:
        raise ChildFailed(f"the process writing the event logs died ({_describe(status)})")
    ok, value = pickle.loads(payload)
    if ok:
        return value
    raised, text = value
    try:  # an exception may pickle and still not unpickle (a constructor with other arguments)
        exc = pickle.loads(raised) if raised is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        raise ChildFailed(f"the process writing the event logs failed:\n{text}")
    exc.add_note(f"in the process writing the event logs:\n{text}")
    raise exc


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
