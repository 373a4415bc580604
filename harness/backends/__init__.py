"""Backends that run real protocol nodes: `local` (processes on 127.X.Y.Z) and `docker` (one
container per node on a bridge network of its own; harness.backends.docker).

`get_backend(name)` returns a Backend (harness.backends.base); its `create_cluster(scenario,
run_dir, seed=...)` gives a Cluster whose nodes the runner (harness.runner) drives through their
admin API. The simulator is not a backend of this kind: it runs in virtual time (harness.sim).
"""

from __future__ import annotations

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

LIVE_BACKENDS = ("local", "docker")


def get_backend(name: str, **kwargs) -> Backend:
    """The backend called `name`; BackendUnavailable if it is not implemented (yet)."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(**kwargs)
    if name == "docker":
        try:
            from .docker import DockerBackend
        except ImportError as exc:  # pragma: no cover - the docker SDK is an optional dependency
            raise BackendUnavailable(f"backend docker needs the docker SDK (pip install docker): {exc}") from None
        return DockerBackend(**kwargs)
    raise BackendUnavailable(f"unknown backend {name!r} (live backends: {', '.join(LIVE_BACKENDS)})")


__all__ = [
    "AdminClient",
    "AdminError",
    "Backend",
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
