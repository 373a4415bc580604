"""The file's `workload:`: stream entries validated and expanded into one Stream per sender
and receiver (one per sender for a multicast)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    Field,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)

from splitbrain.harness.scenario.model import (
    Stream,
)
from splitbrain.harness.scenario.refs import NodesOrAll
from splitbrain.harness.scenario.vocabulary import (
    DEFAULT_SIZE,
)
from splitbrain.harness.validation import (
    InputModel,
    NonNegative,
    Positive,
    PositiveInt,
    Problems,
    context,
    explain,
    fail,
    validate_part,
)
from splitbrain.node import protocols
from splitbrain.node.message import MCAST_DEST as GROUP_DEST

# ---- the workload -----------------------------------------------------------------------------


class StreamSpec(InputModel):
    """One entry of `workload`: from each sender to each other receiver, `rate` messages a second."""

    src: NodesOrAll = Field(alias="from")
    dest: NodesOrAll = Field(alias="to")
    rate: Annotated[float, Field(gt=0), explain("must be greater than 0 (messages per second)")]
    count: PositiveInt | None = None
    duration: Positive | None = None
    size: Annotated[
        int, Field(ge=0, le=60_000), explain("must be an integer number of bytes in 0..60000, got {!r}")
    ] = DEFAULT_SIZE
    start: NonNegative = 0.0

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> StreamSpec:
        if self.count is None and self.duration is None:
            fail("needs count or duration (or both)")
        problems = Problems()
        duration = context(info).get("duration")
        if duration is not None:
            # The scenario's duration is the workload's time budget, so a stream must fit in it: a
            # count that cannot be reached would silently shrink the run.
            if self.start >= duration:
                problems.add(f"{self.start:g} is not before the scenario duration {duration:g}", "start")
            elif self.count is not None and self.start + (self.count - 1) / self.rate >= duration:
                problems.add(
                    f"{self.count} messages at {self.rate:g}/s from t={self.start:g} do not fit in "
                    f"duration {duration:g}s",
                    "count",
                )
            elif self.duration is not None and self.start + self.duration > duration + 1e-9:
                problems.add(
                    f"the stream ends at {self.start + self.duration:g}s, after the scenario duration {duration:g}s",
                    "duration",
                )
        if not self.pairs():
            problems.add("a stream needs a sender and a different receiver")
        problems.raise_any()
        return self

    def pairs(self, multicast: bool = False) -> list[tuple[str, str]]:
        """(sender, receiver) per stream; with `multicast`, one stream per sender to MCAST_DEST."""
        if multicast:
            return [(s, GROUP_DEST) for s in self.src if any(r != s for r in self.dest)]
        return [(s, r) for s in self.src for r in self.dest if s != r]


_STREAMS = TypeAdapter(list[StreamSpec])


def resolve_workload(raw: Any, info: ValidationInfo) -> tuple[Stream, ...]:
    specs = validate_part(_STREAMS, raw, info)
    protocol = context(info).get("protocol")
    try:
        multicasts = protocol is not None and protocols.get(protocol).multicast
    except ValueError:
        multicasts = False
    streams: list[Stream] = []
    for entry, spec in zip(raw, specs):
        # `to: all` under a multicast protocol: one stream per sender, each message one multicast
        # to the sender's current view (for a unicast protocol, one stream per receiver).
        multicast = multicasts and isinstance(entry, dict) and entry.get("to") == "all"
        for s, r in spec.pairs(multicast):
            streams.append(
                Stream(
                    src=s,
                    dest=r,
                    rate=spec.rate,
                    count=spec.count,
                    duration=spec.duration,
                    size=spec.size,
                    start=spec.start,
                    index=len(streams),
                )
            )
    return tuple(streams)
