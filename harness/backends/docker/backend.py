"""The docker backend: nodes as containers on a Docker engine, local or remote.

Reaching the nodes. On a local engine the harness talks to each admin API at the container's
address (the host has a leg on every bridge). On a remote engine (`DOCKER_HOST=tcp://...`), or with
`admin="published"`, the admin ports are published on the engine host's 127.0.0.1 (or
`admin_host`). Nothing else assumes one Docker host: the client is injectable, and event logs go
either through a bind-mounted directory (`events="bind"`, the default on a local engine) or are
copied out of each finished container with get_archive (`events="archive"`, the default on a
remote one; the config goes in with put_archive).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import docker
import docker.errors

from splitbrain.harness.scenario import Scenario
from splitbrain.node import protocols

from ..base import Backend, BackendUnavailable, ClusterOptions
from .cluster import DockerCluster
from .images import NodeImageMixin
from .network import NETWORK_ATTEMPTS


def is_local_engine(client) -> bool:
    """Whether the engine runs on this host (a unix socket), so its bridges are reachable."""
    # The SDK names a unix socket (or a Windows pipe) http+docker://localhost; tcp:// is remote.
    return str(getattr(client.api, "base_url", "")).startswith("http+docker://")


class DockerBackend(NodeImageMixin, Backend):
    """Nodes as containers on a Docker engine (local or remote).

    client: a docker.DockerClient (default: docker.from_env()); image: the image to run (default:
    the current content-hash tag of ci/images, built when missing unless build="never");
    jgroups_image: the same for JGroups nodes (protocol: jgroups; default: ci/images jgroups's tag);
    events: "auto" | "bind" | "archive"; admin: "auto" | "direct" | "published"; admin_host: where
    published admin ports are reached (default: 127.0.0.1 for a local engine, the DOCKER_HOST
    host otherwise); iptables_runner: "auto" | "nsenter" | "exec"; build_output: a text stream for
    the image build's progress (default: stderr).
    """

    name = "docker"

    def __init__(
        self,
        *,
        client=None,
        image: str | None = None,
        jgroups_image: str | None = None,
        build: str = "auto",
        events: str = "auto",
        admin: str = "auto",
        admin_host: str | None = None,
        iptables_runner: str = "auto",
        build_output=None,
        network_attempts: int = NETWORK_ATTEMPTS,
    ):
        for what, value, allowed in (
            ("build", build, ("auto", "never")),
            ("events", events, ("auto", "bind", "archive")),
            ("admin", admin, ("auto", "direct", "published")),
            ("iptables_runner", iptables_runner, ("auto", "nsenter", "exec")),
        ):
            if value not in allowed:
                raise ValueError(f"DockerBackend {what}: must be one of {', '.join(allowed)}, got {value!r}")
        self._client = client
        self.image = image
        self.jgroups_image = jgroups_image
        self.build = build
        self._events = events
        self._admin = admin
        self._admin_host = admin_host
        self._iptables_runner = iptables_runner
        self.build_output = build_output
        self.network_attempts = network_attempts
        self.build_seconds: float | None = None  # set when ensure_image() built the image

    # ---- the engine ---------------------------------------------------------------------------

    @property
    def client(self):
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=120)
            except docker.errors.DockerException as exc:
                raise BackendUnavailable(f"no Docker engine reachable: {exc}") from None
        return self._client

    @property
    def local_engine(self) -> bool:
        return is_local_engine(self.client)

    @property
    def events_mode(self) -> str:
        if self._events != "auto":
            return self._events
        return "bind" if self.local_engine else "archive"

    @property
    def admin_mode(self) -> str:
        if self._admin != "auto":
            return self._admin
        return "direct" if self.local_engine else "published"

    @property
    def admin_host(self) -> str:
        if self._admin_host:
            return self._admin_host
        if self.local_engine:
            return "127.0.0.1"
        from urllib.parse import urlparse

        return urlparse(str(self.client.api.base_url)).hostname or "127.0.0.1"

    @property
    def iptables_runner(self) -> str:
        if self._iptables_runner != "auto":
            return self._iptables_runner
        if self.local_engine and os.geteuid() == 0 and shutil.which("nsenter") and shutil.which("iptables"):
            return "nsenter"
        return "exec"

    def check(self, kind: str = "node") -> tuple[bool, str]:
        try:
            client = self.client
            client.ping()
            version = client.version().get("Version", "?")
        except Exception as exc:  # the SDK raises several kinds for an absent engine
            return False, f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:160]})"
        where = "local" if self.local_engine else f"remote {client.api.base_url}"
        return self._check_image(client, version, where, kind)

    def check_jgroups_image(self) -> tuple[bool, str]:
        """Whether JGroups nodes (protocol: jgroups) can run on this engine: its JGroups node image
        is there, or ci/images can build it."""
        return self.check("jgroups")

    def create_cluster(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None = None,
        options: ClusterOptions | None = None,
    ) -> DockerCluster:
        if protocols.get(scenario.protocol).external:
            # JGroups nodes (one JVM per container): harness/backends/docker/jgroups.py.
            from .jgroups import JGroupsDockerCluster

            return JGroupsDockerCluster(scenario, run_dir, seed=seed, epoch=epoch, options=options, backend=self)
        return DockerCluster(scenario, run_dir, seed=seed, epoch=epoch, options=options, backend=self)
