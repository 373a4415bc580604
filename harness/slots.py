"""A workload stream's send slots: slot k of a stream is due at start + k / rate, before its end.

Both drivers number messages by these slots (the simulator in virtual time, the live runner in
each sender's POST /send), so that every backend sends the same app ids.
"""

from __future__ import annotations

import math

from splitbrain.harness.scenario import Stream

_EPS = 1e-9


def planned_count(stream: Stream, scenario_duration: float) -> int:
    """How many slots a stream has: those due before the stream's end (its duration, or the
    scenario's), capped by its count."""
    stop = scenario_duration if stream.duration is None else min(scenario_duration, stream.start + stream.duration)
    limit = max(0, int((stop - stream.start) * stream.rate) + 1)
    while limit > 0 and stream.start + (limit - 1) / stream.rate >= stop - _EPS:
        limit -= 1
    if stream.count is not None:
        limit = min(limit, stream.count)
    return limit


def slots_before(stream: Stream, t: float) -> int:
    """Slots of a stream due before scenario time t (what a sender that was away missed)."""
    if t <= stream.start:
        return 0
    return int(math.ceil((t - stream.start) * stream.rate - 1e-9))
