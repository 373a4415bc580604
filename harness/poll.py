"""The one bounded wait of the harness: `eventually` polls a check until it holds or time runs out,
and then says what was expected and what was last seen.

Every real-time wait (a node answering its health probe, a view forming, a run settling, a test
waiting for deliveries) goes through it, so each reports a timeout the same way. The clock and
the sleep are arguments, so the simulator's virtual time and a test's fake clock wait exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from splitbrain.node.errors import RunFailed

DEFAULT_TIMEOUT_S = 30.0


class EventuallyTimeout(RunFailed, AssertionError):
    """`eventually` ran out of time: the message says what was expected and what was last seen."""


class _NotYet(Exception):
    pass


def eventually(
    check: Callable[[], Any],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.1,
    what: str | None = None,
    describe: Callable[[Any], str] | None = None,
    context: Callable[[], str] | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Any:
    """Call `check()` until it returns something truthy (which is returned) without raising
    AssertionError, for at most `timeout` seconds (tenacity, a fixed `interval` between calls).
    `clock` and `sleep` replace the wall clock and time.sleep (the simulator's virtual time).

    On timeout, raise EventuallyTimeout: "expected <what> within <timeout>s; last seen: <the last
    value, through describe(), or the last AssertionError>", plus `context()` (e.g. log tails).
    Other exceptions propagate at once: they are bugs, not "not yet".
    """
    last: dict[str, Any] = {"value": None, "error": None, "calls": 0}

    def attempt():
        last["calls"] += 1
        try:
            value = check()
        except AssertionError as exc:
            last["error"], last["value"] = exc, None
            raise _NotYet from None
        last["error"], last["value"] = None, value
        if not value:
            raise _NotYet
        return value

    options: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    if clock is None:
        stop: Any = stop_after_delay(timeout)
    else:
        start = clock()

        def stop(_retry_state) -> bool:
            return clock() - start >= timeout

    retrying = Retrying(
        stop=stop, wait=wait_fixed(interval), retry=retry_if_exception_type(_NotYet), reraise=False, **options
    )
    try:
        return retrying(attempt)
    except RetryError:
        pass
    if last["error"] is not None:
        seen = f"{type(last['error']).__name__}: {last['error']}"
    elif describe is not None:
        seen = describe(last["value"])
    else:
        seen = repr(last["value"])
    expected = what or getattr(check, "__name__", "the condition")
    message = f"expected {expected} within {timeout:g}s ({last['calls']} tries); last seen: {seen}"
    if context is not None:
        try:
            extra = context()
        except Exception as exc:  # the context is a courtesy; never hide the real failure
            extra = f"(context unavailable: {exc})"
        if extra:
            message += "\n" + extra
    raise EventuallyTimeout(message)
