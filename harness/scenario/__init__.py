"""Scenario files: a cluster, a workload and a fault schedule, loaded from YAML and validated.

A scenario says which protocol runs on which nodes, what the application sends (streams), which
faults the harness applies when (the schedule), how long the run lasts and which checks judge it.
Every backend (sim, local, docker) runs the same `Scenario` object, so everything is checked
here, once, before a node starts: unknown keys and bad values raise one `ScenarioError` that
lists every problem of the file, each with its field path, e.g. ``schedule[2].loss.p: must be
between 0 and 1``. Paths use the indexes as written in the file, even though the schedule is
stored sorted by time. `json_schema()` (`splitbrain schema`) is the JSON Schema of the files.

The fault vocabulary is shared with the simulator's network model and the real
injectors: partition (one-way or two-way), loss, delay, duplicate, reorder, drop (in-process, by
message type), view (injected), kill, pause, resume, restart, heal; and, for TCP links routed
through Toxiproxy (docker backend, transport tcp), toxic (latency, jitter, bandwidth, timeout,
reset_peer, slicer, limit_data, slow_close, down).

Which injector applies the network faults is the top-level key `injector`: auto (the default:
iptables for partitions and loss on docker over UDP, Toxiproxy for partitions on docker over TCP,
the in-process fault layer everywhere else), inprocess, iptables or toxiproxy. The key is a
preference of the docker backend: the simulator (whose network model is the injector) and the
local backend (in-process) run the same file with their own, so one file gives one verdict
everywhere. `check_backend(scenario, backend)` refuses what a backend cannot do (toxic steps off
docker), naming the field.

The package keeps one job per module: `vocabulary` (step kinds, toxic types, defaults, the error),
`model` (the frozen objects the runners execute), `schedule` (what steps mean: cut links, node
states), `refs`, `workload`, `steps` and `document` (the file as pydantic models, which build
those objects), `loading` (YAML in, JSON Schema out) and `refusals` (what a backend cannot run).
"""

from splitbrain.harness.names import INJECTORS
from splitbrain.harness.scenario.loading import json_schema, load_scenario, parse_scenario, step_params
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
    Scenario,
    StepParams,
    Stream,
    SyncStep,
    Toxic,
    View,
)
from splitbrain.harness.scenario.refusals import check_backend
from splitbrain.harness.scenario.schedule import cut_links, node_links, step_node
from splitbrain.harness.scenario.vocabulary import (
    ALWAYS_CHECKS,
    DEFAULT_CHECKS,
    DEFAULT_REORDER_MS,
    DEFAULT_SETTLE_S,
    DEFAULT_SIZE,
    DROP_ACTIONS,
    HEALABLE_KINDS,
    MAX_NODES,
    MEMBERSHIP_DEFAULT_CHECKS,
    NETWORK_KINDS,
    NODE_KINDS,
    STEP_KINDS,
    TOXIC_TYPES,
    ScenarioError,
    default_checks,
)

__all__ = [
    "ALWAYS_CHECKS",
    "DEFAULT_CHECKS",
    "DEFAULT_REORDER_MS",
    "DEFAULT_SETTLE_S",
    "DEFAULT_SIZE",
    "DROP_ACTIONS",
    "HEALABLE_KINDS",
    "INJECTORS",
    "MAX_NODES",
    "MEMBERSHIP_DEFAULT_CHECKS",
    "NETWORK_KINDS",
    "NODE_KINDS",
    "STEP_KINDS",
    "TOXIC_TYPES",
    "ConfigStep",
    "Delay",
    "Drop",
    "FaultStep",
    "Heal",
    "LinkProbability",
    "NodeTarget",
    "Partition",
    "Reorder",
    "Scenario",
    "ScenarioError",
    "StepParams",
    "Stream",
    "SyncStep",
    "Toxic",
    "View",
    "check_backend",
    "cut_links",
    "default_checks",
    "json_schema",
    "load_scenario",
    "node_links",
    "parse_scenario",
    "step_node",
    "step_params",
]
