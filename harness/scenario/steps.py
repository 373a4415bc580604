"""The file's `schedule:`: one model per kind of step, validated into the FaultStep objects the
runners use, sorted by time, with `heal: N` resolved to sorted positions."""

from __future__ import annotations

import random
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)

from splitbrain.harness.scenario.model import (
    ConfigStep,
    Delay,
    Drop,
    FaultStep,
    Heal,
    LinkProbability,
    NodeTarget,
    Partition,
    Reorder,
    StepParams,
    SyncStep,
    Toxic,
    View,
)
from splitbrain.harness.scenario.refs import NODE_LIST, Link, NodeRef, NodesOrAll
from splitbrain.harness.scenario.schedule import config_step_problems, drop_type_problems, lifecycle_problems
from splitbrain.harness.scenario.vocabulary import (
    DEFAULT_REORDER_MS,
    DROP_ACTIONS,
    HEALABLE_KINDS,
    STEP_KINDS,
    TOXIC_TYPES,
)
from splitbrain.harness.validation import (
    InputModel,
    NonNegative,
    NonNegativeInt,
    Positive,
    PositiveInt,
    Probability,
    Problems,
    choice,
    context,
    explain,
    fail,
    problem,
    type_name,
    validate_part,
)
from splitbrain.node import protocols
from splitbrain.node.compose import STATIC, refusal
from splitbrain.node.layer import SyncPeer

# ---- schedule steps ---------------------------------------------------------------------------


class OneWaySpec(InputModel):
    """partition: {from: X, to: Y}: nothing from X reaches Y."""

    src: NodesOrAll = Field(alias="from")
    dest: NodesOrAll = Field(alias="to")


TwoWaySpec = Annotated[list[Annotated[list[str], Field(min_length=1)]], Field(min_length=2)]


def _partition(raw: Any, info: ValidationInfo) -> Partition:
    if isinstance(raw, dict):
        one_way = OneWaySpec.model_validate(raw, context=info.context)
        links = tuple((a, b) for a in one_way.src for b in one_way.dest if a != b)
        if not links:
            raise problem("blocks no link (from and to are the same node)")
        return Partition(one_way=True, groups=(one_way.src, one_way.dest), links=links)
    if not isinstance(raw, list):
        raise problem("must be {from: X, to: Y} (one-way) or a list of groups [[A], [B, C]] (two-way)")
    if len(raw) < 2:
        raise problem("a two-way partition needs at least two groups")
    problems = Problems()
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for g, group in enumerate(raw):
        if not isinstance(group, list) or not group:
            problems.add("must be a non-empty list of nodes", g)
            continue
        try:
            members = tuple(validate_part(NODE_LIST, group, info))
        except ValidationError as exc:
            problems.collect(exc, g)
            continue
        for j, n in enumerate(members):
            if n in seen:
                problems.add(f"{n} is in more than one group", g, j)
            seen.add(n)
        groups.append(members)
    problems.raise_any()
    links = tuple(
        (a, b) for gi, ga in enumerate(groups) for gj, gb in enumerate(groups) if gi != gj for a in ga for b in gb
    )
    return Partition(one_way=False, groups=tuple(groups), links=links)


class LinkProbabilitySpec(InputModel):
    """loss, duplicate: probability p per frame on the links named by `link`."""

    link: Link
    p: Probability

    def build(self) -> LinkProbability:
        return LinkProbability(link=self.link[0], links=self.link[1], p=self.p)


class DelaySpec(InputModel):
    """Latency `ms` plus or minus a uniform `jitter_ms` on the links named by `link`."""

    link: Link
    ms: NonNegative
    jitter_ms: NonNegative = 0.0

    def build(self) -> Delay:
        return Delay(link=self.link[0], links=self.link[1], ms=self.ms, jitter_ms=self.jitter_ms)


class ReorderSpec(InputModel):
    """With probability p a frame is held back by an extra uniform delay of up to `ms`."""

    link: Link
    p: Probability
    ms: Positive = DEFAULT_REORDER_MS

    def build(self) -> Reorder:
        return Reorder(link=self.link[0], links=self.link[1], p=self.p, ms=self.ms)


MessageType = Annotated[
    str, Strict(), Field(pattern=r"^[A-Z][A-Z0-9_-]*$"), explain("{!r} is not a message type (like DATA, ACK)")
]
_TYPE = TypeAdapter(MessageType)
_TYPE_LIST = TypeAdapter(list[MessageType])


def _message_types(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return (validate_part(_TYPE, raw, info),)
    if not raw:
        raise problem("must name at least one message type")
    return tuple(validate_part(_TYPE_LIST, raw, info))


def _seqnos(raw: Any) -> tuple[int, int]:
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or any(isinstance(x, bool) or not isinstance(x, int) for x in raw)
        or not 0 <= raw[0] <= raw[1]
    ):
        raise problem(f"must be [lo, hi] with 0 <= lo <= hi, got {raw!r}")
    return raw[0], raw[1]


_Direction = choice(("up", "down"))


class DropSpec(InputModel):
    """An in-process rule at `at` (see Drop)."""

    at: NodeRef
    src: NodeRef | None = Field(None, alias="from")
    dest: NodeRef | None = Field(None, alias="to")
    type: Annotated[
        tuple[str, ...] | None,
        PlainValidator(
            _message_types, json_schema_input_type=Union[MessageType, Annotated[list[MessageType], Field(min_length=1)]]
        ),
    ] = None
    direction: _Direction = "up"
    p: Probability = 1.0
    count: PositiveInt | None = None
    after: NonNegativeInt = 0
    seqnos: Annotated[
        tuple[int, int] | None,
        PlainValidator(
            _seqnos,
            json_schema_input_type=Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)],
        ),
    ] = None
    until: float | None = None
    action: choice(DROP_ACTIONS) = "drop"
    delay_ms: NonNegative = 0.0
    jitter_ms: NonNegative = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> DropSpec:
        if self.direction == "up" and self.dest is not None:
            fail("only with direction: down (received messages use from:)", "to")
        if self.direction == "down" and self.src is not None:
            fail("only with direction: up (sent messages use to:)", "from")
        if self.peer == self.at:
            fail(f"a rule at {self.at} cannot name {self.at} as its peer")
        for key in ("delay_ms", "jitter_ms"):
            if getattr(self, key) and self.action != "delay":
                fail("only with action: delay", key)
        if self.action == "delay" and not self.delay_ms and not self.jitter_ms:
            fail("a delay needs delay_ms (or jitter_ms) greater than 0", "delay_ms")
        return self

    @property
    def peer(self) -> str | None:
        return self.src if self.direction == "up" else self.dest

    def build(self) -> Drop:
        return Drop(
            node=self.at,
            direction=self.direction,
            peer=self.peer,
            types=self.type,
            p=self.p,
            count=self.count,
            after=self.after,
            seqnos=self.seqnos,
            until=self.until,
            action=self.action,
            delay_ms=self.delay_ms,
            jitter_ms=self.jitter_ms,
        )


class ViewSpec(InputModel):
    """Inject a membership view at `at`; it must contain `at`."""

    at: NodeRef
    members: Annotated[list[NodeRef], Field(min_length=1), explain("must be a non-empty list of nodes")]

    @model_validator(mode="after")
    def _contains_at(self) -> ViewSpec:
        if len(set(self.members)) != len(self.members):
            fail("lists a node twice", "members")
        if self.at not in self.members:
            fail(f"a view installed at {self.at} must contain {self.at}", "members")
        return self

    def build(self) -> View:
        return View(node=self.at, members=tuple(self.members))


class SyncSpec(InputModel):
    """The SYNC admin operation: `at`, as receiver, resyncs with sender `peer`."""

    at: NodeRef
    peer: NodeRef

    @model_validator(mode="after")
    def _two_nodes(self) -> SyncSpec:
        if self.peer == self.at:
            fail(f"{self.at} cannot sync with itself", "peer")
        return self

    def build(self) -> SyncStep:
        return SyncStep(node=self.at, peer=self.peer)


class ConfigSpec(InputModel):
    """Change protocol settings at `at` at run time (as admin POST /config): `set` maps settings to
    their new values, validated by the protocol like the scenario's `config:`."""

    at: NodeRef
    set: Annotated[dict[str, Any], Field(min_length=1)]

    def build(self) -> ConfigStep:
        return ConfigStep(node=self.at, values=tuple(sorted(self.set.items())))


def _heal(raw: Any, info: ValidationInfo) -> Heal:
    if raw == "all":
        return Heal(target="all")
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise problem(f"must be 'all' or the index of a schedule step, got {raw!r}")
    steps = context(info).get("schedule_len", 0)
    if not 0 <= raw < steps:
        raise problem(f"no schedule step {raw} (the schedule has {steps})")
    return Heal(target=raw)


# ---- toxics: one model per Toxiproxy type ----------------------------------------------------

# Toxiproxy counts in integers; a whole float (40.0) is the same number.
_WholeInt = BeforeValidator(lambda v: int(v) if isinstance(v, float) and v.is_integer() else v)


class _ToxicSpec(InputModel):
    """A toxic on the TCP links named by `link`; each type's model adds its attributes."""

    link: Link
    type: str  # each type's model narrows it to its own name
    toxicity: Probability = 1.0

    @model_validator(mode="after")
    def _attributes_fit(self) -> _ToxicSpec:
        a, kind = self.attributes(), self.type
        if kind == "jitter" and a["jitter"] <= 0:
            fail("must be greater than 0", "jitter")
        if kind == "slicer" and a["average_size"] <= 0:
            fail("must be greater than 0 (bytes per slice)", "average_size")
        if kind == "slicer" and a["size_variation"] >= a["average_size"]:
            fail("must be smaller than average_size", "size_variation")
        if kind == "bandwidth" and a["rate"] <= 0:
            fail("must be greater than 0 (KB/s)", "rate")
        if kind == "limit_data" and a["bytes"] <= 0:
            fail("must be greater than 0", "bytes")
        if kind == "down" and self.toxicity != 1.0:
            fail("down disables the proxies: it has no toxicity", "toxicity")
        return self

    def attributes(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in TOXIC_TYPES[self.type]}

    def build(self) -> Toxic:
        attrs = self.attributes()
        if self.type == "jitter" and attrs["latency"] == -1:
            attrs["latency"] = attrs["jitter"]
        return Toxic(
            link=self.link[0],
            links=self.link[1],
            type=self.type,
            attributes=tuple(attrs.items()),
            toxicity=self.toxicity,
        )


def _toxic_model(kind: str, attributes: dict[str, int]) -> type[_ToxicSpec]:
    fields: dict[str, Any] = {"type": (Literal[kind], ...)}
    for key, default in attributes.items():
        # A jitter toxic's latency -1 means "the same as the jitter".
        lowest = -1 if (kind, key) == ("jitter", "latency") else 0
        fields[key] = (Annotated[int, _WholeInt, Field(ge=lowest)], default)
    return create_model(f"Toxic_{kind}", __base__=_ToxicSpec, **fields)


_TOXIC_MODELS = {kind: _toxic_model(kind, attrs) for kind, attrs in TOXIC_TYPES.items()}


def _toxic(raw: Any, info: ValidationInfo) -> Toxic:
    if not isinstance(raw, dict):
        raise problem(f"must be a mapping, got {type_name(raw)}")
    if "type" not in raw:
        fail(f"missing (one of: {', '.join(TOXIC_TYPES)})", "type")
    model = _TOXIC_MODELS.get(raw["type"]) if isinstance(raw["type"], str) else None
    if model is None:
        fail(f"must be one of {', '.join(TOXIC_TYPES)}, got {raw['type']!r}", "type")
    return model.model_validate(raw, context=info.context).build()


# ---- a step and the schedule ------------------------------------------------------------------


def _built(model: type[BaseModel]) -> Any:
    """A step body validated by `model`, kept as the object the runners use."""
    return Annotated[model, AfterValidator(lambda spec: spec.build())]


NodeStep = Annotated[NodeRef, AfterValidator(lambda node: NodeTarget(node=node))]


class StepSpec(InputModel):
    """One entry of `schedule`: `at` (seconds from the start) and exactly one kind of step."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 2, "maxProperties": 2})

    at: Annotated[float, Field(ge=0), explain("must not be negative, got {:g}")]
    partition: (
        Annotated[Partition, PlainValidator(_partition, json_schema_input_type=Union[OneWaySpec, TwoWaySpec])] | None
    ) = None
    loss: _built(LinkProbabilitySpec) | None = None
    delay: _built(DelaySpec) | None = None
    duplicate: _built(LinkProbabilitySpec) | None = None
    reorder: _built(ReorderSpec) | None = None
    drop: _built(DropSpec) | None = None
    view: _built(ViewSpec) | None = None
    sync: _built(SyncSpec) | None = None
    config: _built(ConfigSpec) | None = None
    kill: NodeStep | None = None
    pause: NodeStep | None = None
    resume: NodeStep | None = None
    restart: NodeStep | None = None
    heal: (
        Annotated[
            Heal, PlainValidator(_heal, json_schema_input_type=Union[Literal["all"], Annotated[int, Field(ge=0)]])
        ]
        | None
    ) = None
    toxic: (
        Annotated[
            Toxic,
            PlainValidator(
                _toxic,
                json_schema_input_type=Annotated[Union[tuple(_TOXIC_MODELS.values())], Field(discriminator="type")],
            ),
        ]
        | None
    ) = None

    @classmethod
    def unknown_key_message(cls) -> str:
        return f"unknown key (a step has 'at' and one of: {', '.join(STEP_KINDS)})"

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        kinds = [k for k in STEP_KINDS if k in self.model_fields_set]
        if len(kinds) != 1 or getattr(self, kinds[0]) is None:
            fail(f"needs exactly one of {', '.join(STEP_KINDS)}; got {', '.join(kinds) or 'none'}")
        if isinstance(self.params, Drop) and self.params.until is not None and self.params.until < self.at:
            fail(f"{self.params.until:g} is before the step's time {self.at:g}", "drop", "until")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if k in self.model_fields_set)

    @property
    def params(self) -> StepParams:
        return getattr(self, self.kind)


_STEPS = TypeAdapter(list[StepSpec])


def resolve_schedule(raw: Any, info: ValidationInfo) -> tuple[FaultStep, ...]:
    ctx = context(info)
    ctx["schedule_len"] = len(raw) if isinstance(raw, list) else 0
    specs: list[StepSpec] = validate_part(_STEPS, [] if raw is None else raw, info)
    # A stable sort keeps steps with equal times in file order; `heal: N` is written with file
    # indexes and resolved to sorted positions below.
    order = sorted(range(len(specs)), key=lambda i: specs[i].at)
    position = {src: pos for pos, src in enumerate(order)}
    problems = Problems()
    steps: list[FaultStep] = []
    for pos, src in enumerate(order):
        spec = specs[src]
        params = spec.params
        if isinstance(params, Heal) and isinstance(params.target, int):
            written = params.target
            target_kind = specs[written].kind
            if written == src:
                problems.add("a heal cannot undo itself", src, "heal")
            elif target_kind not in HEALABLE_KINDS:
                problems.add(
                    f"schedule[{written}] is a {target_kind} step; heal undoes "
                    f"{', '.join(sorted(HEALABLE_KINDS))} (use resume/restart for nodes)",
                    src,
                    "heal",
                )
            elif position[written] > pos:
                problems.add(f"schedule[{written}] happens after this heal", src, "heal")
            params = Heal(target=position[written])
        external = "protocol" in ctx and protocols.get(ctx["protocol"]).external
        if external and spec.kind in ("sync", "config"):
            # A real implementation has neither: they drive splitbrain's own protocols.
            problems.add(f"{ctx['protocol']} takes no {spec.kind} steps", src, spec.kind)
        elif isinstance(params, SyncStep) and "protocol" in ctx and "config" in ctx:
            why = refusal(
                ctx["protocol"],
                ctx["config"],
                SyncPeer(peer=params.peer),
                random.Random(0),
                ctx.get("membership", "static"),
            )
            if why:
                problems.add(f"the admin sync operation is refused: {why}", src, "sync")
        if isinstance(params, Drop) and params.types is not None and "protocol" in ctx:
            for why in drop_type_problems(ctx["protocol"], ctx.get("membership", STATIC), params.types):
                problems.add(why, src, "drop", "type")
        if isinstance(params, ConfigStep) and "protocol" in ctx and "config" in ctx and not external:
            for key, why in config_step_problems(ctx, dict(params.values), specs):
                problems.add(why, src, "config", "set", key)
        if spec.kind == "toxic" and ctx.get("transport", "tcp") != "tcp":
            problems.add(
                f"needs transport: tcp (Toxiproxy proxies TCP links; this scenario uses {ctx['transport']})",
                src,
                "toxic",
            )
        steps.append(FaultStep(at=spec.at, kind=spec.kind, params=params, index=pos, source_index=src))
    for message, *loc in lifecycle_problems(steps, tuple(ctx.get("nodes", ()))):
        problems.add(message, *loc)
    problems.raise_any()
    ctx["schedule"] = tuple(steps)
    return tuple(steps)
