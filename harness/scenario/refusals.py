"""What a backend or an injector cannot run, refused before a node starts, naming the field."""

from __future__ import annotations

from splitbrain.harness.scenario.model import (
    FaultStep,
    Scenario,
)
from splitbrain.harness.scenario.vocabulary import (
    ScenarioError,
)
from splitbrain.node import protocols


def check_backend(scenario: Scenario, backend: str, injector: str | None = None) -> None:
    """Raise ScenarioError (naming the field) when `backend` cannot run what the scenario asks.

    Toxic steps need the docker backend (with transport tcp). The scenario's `injector` key is a
    preference of the docker backend: sim and local run the same file with their own injector
    (the network model, the in-process fault layer), so that one file gives one verdict on every
    backend. `injector` (a command-line flag) is a demand: iptables or toxiproxy off docker is
    refused."""
    if protocols.get(scenario.protocol).external:
        _external_fits(scenario, backend)
    chosen = scenario.injector if injector in (None, "auto") else injector
    where = "injector" if injector in (None, "auto") else "--injector"
    if backend != "docker":
        for step in scenario.schedule:
            if step.kind == "toxic":
                raise ScenarioError(
                    f"schedule[{step.source_index}].toxic",
                    f"needs the docker backend with transport tcp (backend {backend} has no Toxiproxy in its links)",
                )
        if injector in ("iptables", "toxiproxy"):
            how = "in its network model" if backend == "sim" else "in-process"
            raise ScenarioError(
                where, f"{injector} needs the docker backend (backend {backend} applies network faults {how})"
            )
    why = injector_problem(chosen, scenario.transport, scenario.schedule)
    if why:
        raise ScenarioError(where, why)
    if scenario.ip_multicast and backend == "local":
        from splitbrain.harness.mcastprobe import loopback_status

        works, why = loopback_status()
        if not works:
            raise ScenarioError(
                "ip_multicast", f"the local backend cannot use IP multicast here: {why} (splitbrain doctor)"
            )


def _external_fits(scenario: Scenario, backend: str) -> None:
    """A real implementation runs on live backends only, and needs its runtime on this host."""
    if backend == "sim":
        raise ScenarioError(
            "protocol",
            f"{scenario.protocol} is a real implementation (its own processes): the simulator cannot run it; "
            "use --backend local or --backend docker",
        )
    if backend == "local":
        from splitbrain.node.jgroups.launch import runtime_problem

        why = runtime_problem((scenario.jgroups or {}).get("jar"))
        if why:
            raise ScenarioError("jgroups.jar", why)
    if backend == "docker":
        from splitbrain.node.jgroups.launch import DEFAULT_JAR

        jar = (scenario.jgroups or {}).get("jar") or DEFAULT_JAR
        if jar != DEFAULT_JAR:
            raise ScenarioError(
                "jgroups.jar",
                f"the docker backend runs the jar of its JGroups node image ({DEFAULT_JAR}); {jar} needs an "
                "image of its own (node/jgroups/Dockerfile on a base that has it), or --backend local",
            )


def injector_problem(injector: str, transport: str, schedule: tuple[FaultStep, ...]) -> str | None:
    if injector == "toxiproxy" and transport != "tcp":
        return f"toxiproxy needs transport: tcp (this scenario uses {transport})"
    if injector == "iptables" and any(step.kind == "toxic" for step in schedule):
        return (
            "iptables cannot tell apart TCP links routed through Toxiproxy, which toxic steps need: "
            "use injector auto, toxiproxy or inprocess"
        )
    return None
