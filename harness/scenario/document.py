"""The whole file, `ScenarioFile`: its top-level keys validated in order, each later one reading
what earlier ones resolved (the protocol, the node names, the config, the checks)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    ValidationInfo,
    model_validator,
)

from splitbrain.harness.names import INJECTORS
from splitbrain.harness.scenario.model import FaultStep, Scenario, Stream
from splitbrain.harness.scenario.refs import CHECK_RE, NodeNames
from splitbrain.harness.scenario.refusals import injector_problem
from splitbrain.harness.scenario.steps import StepSpec, resolve_schedule
from splitbrain.harness.scenario.vocabulary import (
    ALWAYS_CHECKS,
    DEFAULT_CHECKS,
    DEFAULT_SETTLE_S,
    default_checks,
)
from splitbrain.harness.scenario.workload import StreamSpec, resolve_workload
from splitbrain.harness.validation import (
    InputModel,
    NonNegative,
    NonNegativeInt,
    Problems,
    choice,
    context,
    explain,
    fail,
    problem,
    remember,
)
from splitbrain.node import protocols
from splitbrain.node.compose import recovery_bound_s
from splitbrain.node.errors import SettingError
from splitbrain.node.runtime.config import TRANSPORTS

# ---- the file ---------------------------------------------------------------------------------


def _protocol(raw: Any) -> str:
    """A registered protocol (the registry may grow at run time, so this asks it each time)."""
    if protocols.is_protocol(raw):
        return raw  # without listing (and so importing) every protocol
    known = protocols.names()
    if raw not in known:
        raise problem(f"must be one of {', '.join(known)}, got {raw!r}")
    return raw


def _membership(raw: Any, info: ValidationInfo) -> str:
    """static, or a registered membership protocol (gms); a real implementation brings its own."""
    known = ("static", *protocols.membership_names())
    if raw not in known:
        raise problem(f"must be one of {', '.join(known)}, got {raw!r}")
    protocol = context(info).get("protocol")
    if raw != "static" and protocol is not None and protocols.get(protocol).external:
        raise problem(f"{protocol} brings its own membership (its stack's): leave membership out")
    return raw


def _transport_fits(transport: str, info: ValidationInfo) -> str:
    protocol = context(info).get("protocol")
    if transport != "udp" and protocol is not None and protocols.get(protocol).external:
        raise problem(f"{protocol} nodes run the transport of their stack: leave transport out")
    return transport


def _protocol_settings(config: dict | None, info: ValidationInfo) -> dict:
    """Check the settings with the protocol itself, so a bad one is reported before anything
    starts, as config.<key>; keep the recovery bound they give."""
    config = dict(config or {})
    ctx = context(info)
    ctx["config"] = config
    if "protocol" in ctx:
        try:
            ctx["recovery_bound"] = recovery_bound_s(ctx["protocol"], config, ctx.get("membership", "static"))
        except SettingError as exc:
            fail(exc.message, exc.key)
        except ValueError as exc:
            raise problem(str(exc)) from None
    return config


def _checks(checks: list[str] | None, info: ValidationInfo) -> tuple[str, ...]:
    """Check names against harness.checks (it owns the list); add the checks every run gets. No
    list: the protocol's default checks."""
    from splitbrain.harness.checks import KNOWN_CHECKS

    if checks is None:
        protocol = context(info).get("protocol")
        membership = context(info).get("membership", "static")
        return DEFAULT_CHECKS if protocol is None else default_checks(protocol, membership)
    problems = Problems()
    for i, c in enumerate(checks):
        if c in checks[:i]:
            problems.add(f"{c!r} is listed twice", i)
        elif c not in KNOWN_CHECKS:
            problems.add(f"unknown check {c!r} (known: {', '.join(KNOWN_CHECKS)})", i)
    problems.raise_any()
    return tuple(checks) + tuple(c for c in ALWAYS_CHECKS if c not in checks)


class ExpectFail(InputModel):
    fail: Annotated[str, Field(min_length=1)]


def _expect(raw: Any, info: ValidationInfo) -> str | None:
    if raw == "pass":
        return None
    if not isinstance(raw, dict):
        raise problem(f"must be 'pass' or {{fail: CHECK}}, got {raw!r}")
    name = ExpectFail.model_validate(raw, context=info.context).fail
    checks = context(info).get("checks")
    if checks is not None and name not in checks:
        fail(f"{name!r} is not among the checks ({', '.join(checks)})", "fail")
    return name


def _injector_fits(injector: str, info: ValidationInfo) -> str:
    ctx = context(info)
    if "transport" in ctx:
        why = injector_problem(injector, ctx["transport"], ctx.get("schedule", ()))
        if why:
            raise problem(why)
    return injector


def _recovery_bound(bound: float | None, info: ValidationInfo) -> float | None:
    """The scenario's own bound, or the protocol's from its settings. A real implementation's
    timers are its stack's, which splitbrain does not read: its scenarios say how soon it must recover."""
    protocol = context(info).get("protocol")
    if bound is None and protocol is not None and protocols.get(protocol).external:
        raise problem(
            f"required with protocol {protocol}: the seconds within which your stack must deliver what was sent "
            "once both ends are up and connected (no_loss owes a message after that long)"
        )
    return context(info).get("recovery_bound") if bound is None else bound


def _resync_bound(bound: int | None, info: ValidationInfo) -> int | None:
    """Given exactly when the resync_traffic check is listed (it is that check's bound)."""
    checks = context(info).get("checks")
    if checks is None:
        return bound
    if bound is None and "resync_traffic" in checks:
        raise problem("required by the check resync_traffic (the most resync messages between two nodes)")
    if bound is not None and "resync_traffic" not in checks:
        raise problem("only the check resync_traffic uses it, and it is not among the checks")
    return bound


def _xmit_bound(bound: int | None, info: ValidationInfo) -> int | None:
    """Given exactly when the xmit_traffic check is listed (it is that check's bound)."""
    checks = context(info).get("checks")
    if checks is None:
        return bound
    if bound is None and "xmit_traffic" in checks:
        raise problem("required by the check xmit_traffic (the most retransmissions over the run)")
    if bound is not None and "xmit_traffic" not in checks:
        raise problem("only the check xmit_traffic uses it, and it is not among the checks")
    return bound


DEFAULT_JGROUPS_JAR = "/usr/share/java/jgroups.jar"


def _is_property_string(stack: str) -> bool:
    """A JGroups property string (`UDP(...):PING(...)...`) rather than the path of an XML file."""
    return "(" in stack or (":" in stack and not stack.endswith(".xml") and "/" not in stack)


def _stack(raw: Any, info: ValidationInfo) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise problem("expected a JGroups property string or the path of a JGroups XML file")
    if _is_property_string(raw):
        return raw
    path = Path(raw)
    if not path.is_absolute():
        path = Path(context(info).get("base_dir", ".")) / path
    if not path.is_file():
        raise problem(f"no such file: {path} (a path is relative to the scenario file)")
    return str(path.resolve())


class JGroupsBlock(InputModel):
    """`jgroups: {stack, jar}` of a protocol jgroups scenario."""

    stack: Annotated[str | None, PlainValidator(_stack, json_schema_input_type=str)] = Field(
        None,
        description="a JGroups property string or the path of a JGroups XML file (relative to the scenario "
        "file); default: the node's documented default stack. The harness sets bind address, ports, "
        "multicast group and cluster name.",
    )
    jar: Annotated[str, Field(min_length=1)] = Field(DEFAULT_JGROUPS_JAR, description="the JGroups jar")

    def resolved(self) -> dict:
        return {"stack": self.stack, "jar": self.jar}


class ScenarioFile(InputModel):
    """A scenario file. Fields are validated in this order; later ones use what earlier ones
    resolved (the node names, the duration, the checks)."""

    # Each field is named as the Scenario field it resolves to (the file's key is its alias where
    # they differ), so the validated model builds the frozen Scenario field by field (scenario()).

    name: Annotated[
        str,
        Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
        explain("use letters, digits, '_', '.' and '-' (it names the run directory)"),
    ]
    protocol: Annotated[str, PlainValidator(_protocol, json_schema_input_type=str), remember("protocol")]
    transport: Annotated[choice(TRANSPORTS), AfterValidator(_transport_fits), remember("transport")] = Field(
        "udp", validate_default=True
    )
    nodes: NodeNames
    membership: Annotated[str, PlainValidator(_membership, json_schema_input_type=str), remember("membership")] = Field(
        "static", description="where views come from: static (view: steps only) or gms (membership protocol)"
    )
    config: Annotated[dict[str, Any] | None, AfterValidator(_protocol_settings)] = Field(
        None, validate_default=True, description="protocol settings (see the protocol's config)"
    )
    duration: Annotated[float, Field(gt=0), remember("duration")] = Field(description="the workload's time budget (s)")
    settle: NonNegative = Field(DEFAULT_SETTLE_S, description="seconds after the last step for the eventual checks")
    streams: Annotated[
        tuple[Stream, ...], PlainValidator(resolve_workload, json_schema_input_type=list[StreamSpec])
    ] = Field(alias="workload")
    schedule: Annotated[
        tuple[FaultStep, ...], PlainValidator(resolve_schedule, json_schema_input_type=list[StepSpec] | None)
    ] = ()
    checks: Annotated[
        list[Annotated[str, Field(pattern=CHECK_RE.pattern), explain("{!r} is not a check name")]] | None,
        AfterValidator(_checks),
        remember("checks"),
    ] = Field(None, validate_default=True, description="default: the protocol's checks; no_errors is always added")
    expect_fail: Annotated[
        str | None, PlainValidator(_expect, json_schema_input_type=Union[Literal["pass"], ExpectFail])
    ] = Field("pass", alias="expect", validate_default=True)
    seed: NonNegativeInt = 0
    injector: Annotated[choice(INJECTORS), AfterValidator(_injector_fits)] = "auto"
    recovery_bound: Annotated[
        Annotated[float, Field(gt=0), explain("must be greater than 0 (seconds)")] | None,
        AfterValidator(_recovery_bound),
    ] = Field(None, validate_default=True)
    resync_bound: Annotated[
        Annotated[int, Field(ge=1), explain("must be a whole number of messages, at least 1")] | None,
        AfterValidator(_resync_bound),
    ] = Field(
        None,
        validate_default=True,
        description="resync_traffic: the most resync messages (both directions) between two nodes",
    )
    xmit_bound: Annotated[
        Annotated[int, Field(ge=0), explain("must be a whole number of requests, 0 or more")] | None,
        AfterValidator(_xmit_bound),
    ] = Field(
        None,
        validate_default=True,
        description="xmit_traffic: the most retransmissions (requests and messages sent again) over the run "
        "(0 on a lossless network)",
    )
    wire: bool = Field(
        False,
        description="sim backend: send frames through the real wire codec instead of passing message "
        "objects (slower; the same seed gives the same run)",
    )

    jgroups: Annotated[
        JGroupsBlock | None, AfterValidator(lambda block: None if block is None else block.resolved())
    ] = Field(None, description="protocol jgroups: the JGroups stack and jar its nodes run (docs/jgroups.md)")

    ip_multicast: bool = Field(
        False,
        description="live backends over UDP: each multicast is one IP multicast datagram to a group "
        "instead of one unicast per member (the simulator's links model either the same way)",
    )

    def scenario(self) -> Scenario:
        """The frozen Scenario the runners execute, built from the validated fields."""
        return Scenario(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Scenario)})

    @model_validator(mode="after")
    def _ip_multicast_fits(self) -> ScenarioFile:
        """IP multicast is a UDP transport for multicast protocols; Toxiproxy carries no UDP."""
        if not self.ip_multicast:
            return self
        problems = Problems()
        if self.transport != "udp":
            problems.add(
                f"needs transport: udp (IP multicast is UDP; this scenario uses {self.transport})", "ip_multicast"
            )
        elif self.injector == "toxiproxy":
            problems.add("toxiproxy proxies TCP links only and cannot carry UDP multicast", "injector")
        if self.protocol in protocols.names() and not protocols.get(self.protocol).multicast:
            multicasting = ", ".join(n for n in protocols.names() if protocols.get(n).multicast)
            problems.add(f"{self.protocol} sends no multicasts: use one that does ({multicasting})", "ip_multicast")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _external_keys(self) -> ScenarioFile:
        """The jgroups block belongs to protocol jgroups; a real implementation multicasts as its
        stack says (its membership, transport and steps are checked at their fields)."""
        problems = Problems()
        try:
            external = protocols.get(self.protocol).external
        except ValueError:
            return self  # reported at protocol already
        if self.jgroups is not None and self.protocol != "jgroups":
            problems.add(f"only with protocol: jgroups (this scenario's protocol is {self.protocol})", "jgroups")
        if external:
            if self.ip_multicast:
                problems.add(f"{self.protocol} multicasts as its stack says: leave ip_multicast out", "ip_multicast")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _safe_settings(self) -> ScenarioFile:
        """A protocol's settings that are unsafe on this transport or with in-process drops
        (node/protocols.py ProtocolSpec.unsafe) are refused, each at its config key."""
        drops = any(s.kind == "drop" and getattr(s.params, "action", "") == "drop" for s in self.schedule)
        try:
            unsafe = protocols.get(self.protocol).unsafe_settings(self.config or {}, self.transport, drops)
        except (SettingError, ValueError):
            return self  # reported at config already
        if unsafe:
            problems = Problems()
            for key, why in unsafe:
                problems.add(why, "config", key)
            problems.raise_any()
        return self
