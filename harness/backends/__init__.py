"""Backends that run real protocol nodes: `local` (processes on 127.X.Y.Z) and `docker` (one
container per node on a bridge network of its own; harness.backends.docker).

`get_backend(name)` returns a Backend (harness.backends.base); its `create_cluster(scenario,
run_dir, seed=...)` gives a Cluster whose nodes the runner (harness.runner) drives through their
admin API. The simulator is not a backend of this kind: it runs in virtual time (harness.sim).
"""

from __future__ import annotations

from splitbrain.harness.names import BACKENDS as NAMES_BACKENDS

from .admin import AdminClient, AdminError
from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    Cluster,
    ClusterOptions,
    FaultInjector,
    NodeAddressInUse,
    NodeCrashed,
    NodeHandle,
    NodeStartError,
    NodeState,
    NodeStopError,
    signals_deferred,
)


def _local(**kwargs) -> Backend:
    from .local import LocalBackend

    return LocalBackend(**kwargs)


def _docker(**kwargs) -> Backend:
    try:
        from .docker import DockerBackend
    except ImportError as exc:  # pragma: no cover - the docker SDK is an optional dependency
        raise BackendUnavailable(f"backend docker needs the docker SDK (pip install docker): {exc}") from None
    return DockerBackend(**kwargs)


# The registry of live backends: name -> factory (imported only when asked for). A new backend
# is one entry here; the command line, the pytest plugin and harness.run read these names.
LIVE = {"local": _local, "docker": _docker}
LIVE_BACKENDS = tuple(LIVE)
# Every backend a run may name: the simulator (virtual time, harness.sim) and the live ones.
BACKENDS = ("sim", *LIVE_BACKENDS)
assert BACKENDS == NAMES_BACKENDS, "harness/names.py lists the backends too"


def get_backend(name: str, **kwargs) -> Backend:
    """The live backend called `name`; BackendUnavailable if there is none of that name."""
    factory = LIVE.get(name)
    if factory is None:
        raise BackendUnavailable(f"unknown backend {name!r} (live backends: {', '.join(LIVE_BACKENDS)})")
    return factory(**kwargs)


__all__ = [
    "AdminClient",
    "AdminError",
    "Backend",
    "BACKENDS",
    "BackendError",
    "BackendUnavailable",
    "Cluster",
    "ClusterOptions",
    "FaultInjector",
    "LIVE_BACKENDS",
    "NodeAddressInUse",
    "NodeCrashed",
    "NodeHandle",
    "NodeStartError",
    "NodeState",
    "NodeStopError",
    "get_backend",
    "signals_deferred",
]
