"""The words of a scenario: its step kinds, toxic types, default checks and values, and the
error every problem of a file is reported with."""

from __future__ import annotations

from splitbrain.node import protocols
from splitbrain.node.errors import BadInput

# Checks every run gets, listed or not: an exception inside a protocol layer is always our bug.
ALWAYS_CHECKS = ("no_errors",)
# A scenario without `checks:` is judged by its protocol's default checks (node/protocols.py)
# and ALWAYS_CHECKS; this is that list for the default protocol.
DEFAULT_CHECKS = ("fifo", "no_duplicates", "no_loss", "no_errors")


# Checks a membership protocol adds to the defaults (`membership: gms`): harness.checks.MEMBERSHIP_CHECKS.
MEMBERSHIP_DEFAULT_CHECKS = ("views_agree",)


def default_checks(protocol: str, membership: str = "static") -> tuple[str, ...]:
    """The checks of a scenario without `checks:`: its protocol's, the membership checks when a
    membership protocol makes the views (`membership: gms`), and ALWAYS_CHECKS."""
    own = protocols.get(protocol).default_checks
    extra = MEMBERSHIP_DEFAULT_CHECKS if membership != "static" else ()
    own = (*own, *(c for c in extra if c not in own))
    return (*own, *(c for c in ALWAYS_CHECKS if c not in own))


DEFAULT_SETTLE_S = 5.0
DEFAULT_SIZE = 100
DEFAULT_REORDER_MS = 10.0
# What an in-process rule (a drop step) does to a matching message (node.faultlayer.ACTIONS).
DROP_ACTIONS = ("drop", "delay", "duplicate")
MAX_NODES = 26 * 27  # A..Z, then AA..ZZ

# Steps that change the network or the in-process fault layer, and can be undone by `heal: N`.
NETWORK_KINDS = ("partition", "loss", "delay", "duplicate", "reorder")
HEALABLE_KINDS = frozenset(NETWORK_KINDS + ("drop",))
NODE_KINDS = ("kill", "pause", "resume", "restart")
# Toxiproxy toxics on TCP links (docker backend, transport tcp only) are healable like network faults.
STEP_KINDS = NETWORK_KINDS + ("drop", "view", "sync", "config") + NODE_KINDS + ("heal", "toxic")
HEALABLE_KINDS = HEALABLE_KINDS | {"toxic"}
# Toxic types and their attributes (Toxiproxy's names and units, with its defaults). "jitter" is a
# latency toxic whose latency defaults to its jitter (delays uniform in [0, 2 * jitter] ms);
# "down" disables the link's proxies (both directions of the connection, as Toxiproxy does).
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},  # ms
    "jitter": {"jitter": 0, "latency": -1},  # ms; latency -1: the same as jitter
    "bandwidth": {"rate": 0},  # KB/s
    "timeout": {"timeout": 0},  # ms; 0: data is dropped until the toxic is removed
    "reset_peer": {"timeout": 0},  # ms before the connection is reset
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},  # bytes, bytes, microseconds
    "limit_data": {"bytes": 0},
    "slow_close": {"delay": 0},  # ms
    "down": {},
}


class ScenarioError(BadInput, ValueError):
    """A scenario that cannot run. `path` and `reason` are its (first) problem's; `problems` lists
    every (path, reason) of the file, and str() gives one "path: reason" line for each."""

    def __init__(self, path: str, message: str, problems: list[tuple[str, str]] | None = None):
        self.path = path
        self.reason = message
        self.problems = problems or [(path, message)]
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in self.problems))
