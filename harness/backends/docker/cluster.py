"""A cluster on the docker backend: one container per node, plus Toxiproxy when links are proxied.

Files, as for the local backend: `run_dir/nodes/<name>/` holds `node.yaml` (the current
incarnation's config), `node.log` (each container's output, collected when it ends, introduced by
a header line) and, while an incarnation runs, `events-inc<N>.jsonl`; when it ends, its log (plus
the node_stop the harness writes for a killed node) is appended to `events.jsonl`. In bind mode
that directory is the container's /var/lib/splitbrain/run (made world-writable, since the node
runs as the image's unprivileged user).

Lifecycle: stop is SIGTERM (through docker-init, the containers run with `init`), then SIGKILL
after stop_timeout_s; kill is SIGKILL (the node writes its event log before any ACK leaves, so a kill never loses the
deliveries behind an ACK); pause and resume use the cgroup freezer (docker pause). Crash
detection polls the engine at most every CHECK_ALIVE_INTERVAL_S for all containers at once.

Faults (fault_injectors): the node fault layer (admin API) as on every backend, plus iptables in
each node's network namespace (partitions and loss; `faults.iptables` through nsenter when the
harness is root on the engine's host, else `docker exec -u root`), plus Toxiproxy for TCP
(proxies.py). See harness/backends/injectors.py for which step goes where.

No leftovers: teardown (from `finally`, `with`, and an atexit hook as a last resort) stops the
nodes, removes every container labelled with the cluster id (found by label, so even one whose
bookkeeping an interrupt cut short) and then the network. `keep=True` (`--splitbrain-keep`) leaves
containers and network for inspection; `splitbrain clean` removes them later.

The module stays one piece (a little over 600 lines): DockerCluster is the Cluster hooks of one
backend over one docker client, and what is not a hook (network, files, proxies, multicast, images)
already lives in the modules beside it.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import secrets
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import requests
import yaml
from docker.models.containers import Container

from splitbrain.harness.poll import EventuallyTimeout, eventually
from splitbrain.harness.scenario import Scenario

from ..admin import AdminError
from ..base import (
    BackendError,
    BackendUnavailable,
    Cluster,
    ClusterOptions,
    FaultInjector,
    NodeCrashed,
    NodeHandle,
    NodeStartError,
    NodeState,
    signals_deferred,
)
from . import proxies
from .cleanup import remove_cluster, remove_container
from .files import CONTAINER_DIR, append_output, config_tar, copy_out
from .images import release_own_hold
from .labels import LABEL, LABEL_CLUSTER, LABEL_NODE, LABEL_OWNER, LABEL_ROLE, LABEL_RUN_DIR, owner_label
from .mcast import bridge_status
from .network import (
    ADMIN_PORT,
    FIRST_NODE_HOST,
    MAX_NODES,
    PROTOCOL_PORT,
    TOXIPROXY_HOST,
    create_network,
    endpoint,
    host_address,
)

if TYPE_CHECKING:
    from .backend import DockerBackend  # which imports this module to make clusters

HEALTH_POLL_S = 0.05
STATUS_POLL_S = 0.5  # while waiting for health: how often to ask the engine whether it exited
CHECK_ALIVE_INTERVAL_S = 0.5

_LIVE_CLUSTERS: weakref.WeakSet[DockerCluster] = weakref.WeakSet()


class DockerCluster(Cluster):
    backend_name = "docker"
    image_kind = "node"  # which node image its containers run (images.KINDS)

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None,
        options: ClusterOptions | None,
        backend: DockerBackend,
    ):
        super().__init__(scenario, run_dir, seed=seed, epoch=epoch, options=options)
        if len(scenario.nodes) > MAX_NODES:
            raise BackendError(
                f"the docker backend runs at most {MAX_NODES} nodes per cluster, the scenario has {len(scenario.nodes)}"
            )
        self.backend = backend
        self.client = backend.client
        self.cluster_id = "sb" + secrets.token_hex(4)
        self.network_name = self.cluster_id
        self.events_mode = backend.events_mode
        self.admin_mode = backend.admin_mode
        self.keep = self.options.keep
        self.injector = self._resolve_injector()
        self.proxied = scenario.transport == "tcp" and self.injector != "iptables"
        self.image: str | None = None
        self.network = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.toxiproxy: Container | None = None  # the Toxiproxy container, when the links are proxied
        self.toxiproxy_api: tuple[str, int] | None = None
        self.proxies: dict[tuple[str, str], tuple[str, int]] = {}  # (src, dst) -> (proxy name, listen port)
        self._ips: dict[str, str] = {}
        self._containers: dict[str, Any] = {}  # node -> container of its current incarnation
        self.timings: dict[str, float] = {}
        self._injectors: list[FaultInjector] | None = None
        self._last_alive_check = 0.0
        self._owner = owner_label()
        for name in scenario.nodes:
            # Addresses are known once the network exists (start()).
            self.nodes[name] = NodeHandle(name=name, address="", admin_url="")
        _LIVE_CLUSTERS.add(self)

    # ---- settings -----------------------------------------------------------------------------

    def _resolve_injector(self) -> str:
        requested = self.options.injector if self.options.injector not in (None, "auto") else self.scenario.injector
        transport = self.scenario.transport
        if requested in (None, "auto"):
            return "iptables" if transport == "udp" else "toxiproxy"
        if requested == "toxiproxy" and transport != "tcp":
            raise BackendError(f"injector toxiproxy needs transport tcp (the scenario uses {transport})")
        if requested == "iptables" and any(s.kind == "toxic" for s in self.scenario.schedule):
            raise BackendError(
                "injector iptables cannot tell apart TCP links routed through Toxiproxy, which "
                "toxic steps need: use auto, toxiproxy or inprocess"
            )
        if requested not in ("inprocess", "iptables", "toxiproxy"):
            raise BackendError(f"unknown injector {requested!r} (inprocess, iptables, toxiproxy)")
        return requested

    @property
    def injector_name(self) -> str:
        return self.injector

    def labels(self, role: str, **extra: str) -> dict[str, str]:
        out = {
            LABEL: "1",
            LABEL_CLUSTER: self.cluster_id,
            LABEL_ROLE: role,
            LABEL_OWNER: self._owner,
            LABEL_RUN_DIR: str(self.run_dir),
        }
        out.update(extra)
        return out

    def node_ip(self, name: str) -> str:
        try:
            return self._ips[name]
        except KeyError:
            raise BackendError(f"node {name} has no address yet (the cluster is not started)") from None

    def container(self, name: str):
        """The container of a node's current incarnation (None when it has none)."""
        return self._containers.get(name)

    # ---- starting -----------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        self.image = self.backend.ensure_image(self.image_kind)
        self.timings["image_s"] = time.monotonic() - started
        mark = time.monotonic()
        self._create_network()
        self.timings["network_s"] = time.monotonic() - mark
        if getattr(self.scenario, "ip_multicast", False):
            mark = time.monotonic()
            works, why = bridge_status(self)
            self.timings["mcast_probe_s"] = time.monotonic() - mark
            if not works:
                raise BackendUnavailable(f"ip_multicast: the docker bridge cannot carry IP multicast here: {why}")
        if self.proxied:
            mark = time.monotonic()
            self._start_toxiproxy()
            self.timings["toxiproxy_s"] = time.monotonic() - mark
        mark = time.monotonic()
        for name in self.nodes:
            self._spawn(name, 1)
        self.timings["containers_s"] = time.monotonic() - mark
        mark = time.monotonic()
        for name in self.nodes:
            self._wait_healthy(name)
        self.timings["healthy_s"] = time.monotonic() - mark
        self.timings["start_s"] = time.monotonic() - started

    def _create_network(self) -> None:
        self.network, self.subnet = create_network(
            self.client, self.network_name, labels=self.labels("network"), attempts=self.backend.network_attempts
        )
        for i, name in enumerate(self.nodes):
            ip = host_address(self.subnet, FIRST_NODE_HOST + i)
            self._ips[name] = ip
            self.nodes[name].address = f"{ip}:{PROTOCOL_PORT}"
            if self.admin_mode == "direct":
                self.nodes[name].admin_url = f"http://{ip}:{ADMIN_PORT}"

    def _start_toxiproxy(self) -> None:
        assert self.subnet is not None, "the network is created first"
        ip = host_address(self.subnet, TOXIPROXY_HOST)
        port = proxies.TOXIPROXY_PORT
        kwargs = dict(
            image=self.image,
            entrypoint=["python", "-m", "splitbrain.faults.toxiproxy"],
            command=["-host", "0.0.0.0", "-port", str(port), "-seed", str(self.seed)],
            name=f"{self.cluster_id}-toxiproxy",
            labels=self.labels("toxiproxy"),
            init=True,
            detach=True,
            network=self.network_name,
            networking_config=endpoint(self.client, self.network_name, ip),
            environment={"LOG_LEVEL": "WARNING"},
            healthcheck={"test": ["NONE"]},
        )
        if self.admin_mode == "published":
            kwargs["ports"] = {f"{port}/tcp": ("127.0.0.1" if self.backend.local_engine else "0.0.0.0", None)}
        with signals_deferred():
            toxiproxy = self.toxiproxy = self.client.containers.create(**kwargs)
        toxiproxy.start()
        if self.admin_mode == "published":
            toxiproxy.reload()
            self.toxiproxy_api = (self.backend.admin_host, self._published_port(toxiproxy, port))
        else:
            self.toxiproxy_api = (ip, port)
        proxies.wait_until_up(self.toxiproxy, self.toxiproxy_api, self.options.start_timeout_s)
        self.proxies.update(
            proxies.create_proxies(self.toxiproxy_api, self._ips, timeout_s=self.options.admin_timeout_s)
        )

    def _peers_of(self, name: str) -> dict[str, str]:
        peers = {}
        for peer in self.nodes:
            if peer == name:
                continue
            if self.proxied:
                assert self.subnet is not None, "the network is created first"
                proxy_ip = host_address(self.subnet, TOXIPROXY_HOST)
                peers[peer] = f"{proxy_ip}:{self.proxies[(name, peer)][1]}"
            else:
                peers[peer] = f"{self._ips[peer]}:{PROTOCOL_PORT}"
        return peers

    def _spawn(self, name: str, incarnation: int) -> None:
        handle = self.nodes[name]
        node_dir = self._node_dir(name)
        ip = self._ips[name]
        events_in_container = f"{CONTAINER_DIR}/events-inc{incarnation}.jsonl"
        config = self.node_config(
            name,
            bind=f"{ip}:{PROTOCOL_PORT}",
            admin=f"0.0.0.0:{ADMIN_PORT}",
            peers=self._peers_of(name),
            events=events_in_container,
            incarnation=incarnation,
        )
        files = self._config_files(node_dir, config)
        for file_name, text in files.items():
            (node_dir / file_name).write_text(text, encoding="utf-8")
        part = node_dir / f"events-inc{incarnation}.jsonl"
        part.unlink(missing_ok=True)
        kwargs = dict(
            image=self.image,
            **self._container_command(f"{CONTAINER_DIR}/{next(iter(files))}"),
            name=f"{self.cluster_id}-{name}-{incarnation}",
            labels=self.labels("node", **{LABEL_NODE: name, "splitbrain.incarnation": str(incarnation)}),
            hostname=name.lower().replace("_", "-")[:63],
            cap_add=["NET_ADMIN"],
            init=True,
            detach=True,
            network=self.network_name,
            networking_config=endpoint(self.client, self.network_name, ip),
            # The harness polls /health itself; the image's HEALTHCHECK would start a Python process
            # in every container every 5 s, which a 2-core CI machine feels.
            healthcheck={"test": ["NONE"]},
            stop_signal="SIGTERM",
        )
        if self.events_mode == "bind":
            # The node runs as the image's unprivileged user: it must be able to write here.
            os.chmod(node_dir, 0o777)
            kwargs["volumes"] = {str(node_dir.resolve()): {"bind": CONTAINER_DIR, "mode": "rw"}}
        if self.admin_mode == "published":
            kwargs["ports"] = {f"{ADMIN_PORT}/tcp": ("127.0.0.1" if self.backend.local_engine else "0.0.0.0", None)}
        t = self.now()
        with signals_deferred():
            # Between create and the bookkeeping below an interrupt would leave an untracked
            # container (teardown still finds it by label).
            try:
                container = self.client.containers.create(**kwargs)
            except docker.errors.APIError as exc:
                raise NodeStartError(
                    f"node {name} (incarnation {incarnation}): cannot create its container: {exc}"
                ) from None
            self._containers[name] = container
            self._parts[name].append((incarnation, part, t))
            handle.incarnation = incarnation
            handle.state = NodeState.RUNNING
            handle.started_at = t
        if self.events_mode == "archive":
            container.put_archive("/var/lib/splitbrain", config_tar(files))
        try:
            container.start()
        except docker.errors.APIError as exc:
            handle.state = NodeState.DEAD
            raise NodeStartError(
                f"node {name} (incarnation {incarnation}): its container does not start: {exc}"
            ) from None
        if self.admin_mode == "published":
            container.reload()
            url = f"http://{self.backend.admin_host}:{self._published_port(container, ADMIN_PORT)}"
            if url != handle.admin_url:
                handle.admin_url = url
                client = self._admins.pop(name, None)
                if client is not None:
                    client.close()

    def _config_files(self, node_dir: Path, config: dict) -> dict[str, str]:
        """The files an incarnation's container reads from CONTAINER_DIR, its configuration first."""
        return {"node.yaml": yaml.safe_dump(config, sort_keys=False)}

    def _container_command(self, config_path: str) -> dict[str, list[str]]:
        """What the container runs (the image's entrypoint with these arguments, by default)."""
        return {"command": ["--config", config_path]}

    @staticmethod
    def _published_port(container, port: int) -> int:
        bindings = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        for binding in bindings.get(f"{port}/tcp") or []:
            if binding.get("HostPort"):
                return int(binding["HostPort"])
        raise BackendError(f"container {container.name}: port {port} is not published")

    def _wait_healthy(self, name: str) -> None:
        handle = self.nodes[name]
        container = self._containers[name]
        client = self.admin(name)
        timeout = self.options.start_timeout_s
        next_status = time.monotonic() + STATUS_POLL_S
        last = "no answer yet"

        def healthy() -> bool:
            nonlocal last, next_status
            try:
                reply = client.health(timeout_s=2.0)
                if (
                    isinstance(reply, dict)
                    and reply.get("status") == "ok"
                    and reply.get("incarnation") == handle.incarnation
                ):
                    return True
                last = f"GET /health answered {reply!r}"
            except AdminError as exc:
                last = str(exc)
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_POLL_S
                self._raise_if_exited(name)
            return False

        try:
            eventually(healthy, timeout=timeout, interval=HEALTH_POLL_S)
        except EventuallyTimeout:
            self._raise_if_exited(name)
            raise NodeStartError(
                f"node {name} (incarnation {handle.incarnation}) did not answer GET {handle.admin_url}/health "
                f"within {timeout:g}s (expected status ok and incarnation {handle.incarnation}; last seen: "
                f"{last}); container {container.name} output:\n{self.log_tail(name)}"
            ) from None

    def _raise_if_exited(self, name: str) -> None:
        """NodeStartError, with the node's output, when its container ended while it was starting."""
        handle, container = self.nodes[name], self._containers[name]
        try:
            container.reload()
            status = container.status
        except docker.errors.NotFound:
            status = "removed"
        if status in ("exited", "dead", "removed"):
            handle.state = NodeState.DEAD
            code = (container.attrs.get("State") or {}).get("ExitCode")
            tail = self.log_tail(name)
            self._finish(name)
            raise NodeStartError(
                f"node {name} (incarnation {handle.incarnation}) exited with code {code} "
                f"while starting in container {container.name} at {handle.address}; "
                f"its output:\n{tail}"
            )

    # ---- lifecycle (the hooks Cluster's stop, kill, pause and resume use) ---------------------

    def _has_process(self, name: str) -> bool:
        return name in self._containers

    def _send_stop(self, name: str) -> None:
        container = self._containers[name]
        try:
            if self.nodes[name].state is NodeState.PAUSED:
                container.unpause()
            container.kill(signal="SIGTERM")
        except docker.errors.APIError:
            pass  # it is gone or exiting: the wait that follows tells

    def _wait_exit(self, name: str, timeout_s: float) -> int | None:
        container = self._containers[name]
        try:
            # requests refuses a timeout of 0.
            return int(container.wait(timeout=max(0.1, timeout_s)).get("StatusCode", -1))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            return None
        except docker.errors.NotFound:
            return -1

    def _send_kill(self, name: str) -> int:
        self._force_kill(self._containers[name])
        code = self._wait_exit(name, 30.0)
        return code if code is not None else -1

    @staticmethod
    def _force_kill(container) -> None:
        try:
            container.kill()
        except docker.errors.APIError as exc:
            if "is paused" in str(exc):
                try:
                    container.unpause()
                    container.kill()
                except docker.errors.APIError:
                    pass

    def _freeze(self, name: str) -> None:
        self._containers[name].pause()

    def _thaw(self, name: str) -> None:
        self._containers[name].unpause()

    # ---- liveness -----------------------------------------------------------------------------

    def check_alive(self) -> None:
        now = time.monotonic()
        if now - self._last_alive_check < CHECK_ALIVE_INTERVAL_S:
            return
        self._last_alive_check = now
        alive = {n for n, h in self.nodes.items() if h.alive and n in self._containers}
        if not alive:
            return
        try:
            exited = self.client.containers.list(
                all=True,
                filters={"label": f"{LABEL_CLUSTER}={self.cluster_id}", "status": ["exited", "dead"]},
                ignore_removed=True,
            )
        except docker.errors.APIError:
            return  # the engine is busy: ask again next time
        ids = {c.id for c in exited}
        for name in sorted(alive):
            container = self._containers[name]
            if container.id not in ids:
                continue
            handle = self.nodes[name]
            handle.state = NodeState.DEAD
            code = self._wait_exit(name, 5.0)
            self.exit_codes[name].append(code if code is not None else -1)
            self._record_stop(name, "crashed")
            tail = self.log_tail(name)
            self._finish(name)
            raise NodeCrashed(
                f"node {name} (incarnation {handle.incarnation}) exited unexpectedly with code "
                f"{code} (container {container.name}); its output:\n{tail}"
            )

    def describe(self) -> dict:
        """Where this cluster runs (for verdict.json and failure reports)."""
        return {
            "cluster_id": self.cluster_id,
            "network": self.network_name,
            "subnet": None if self.subnet is None else str(self.subnet),
            "image": self.backend.image_name(self.image),
            "image_id": self.image,
            "injector": self.injector,
            "proxied": self.proxied,
            "events": self.events_mode,
            "admin": self.admin_mode,
            "iptables_runner": self.backend.iptables_runner if self.injector == "iptables" else None,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def netns_runner(self, name: str):
        """A faults.netns Runner into the network namespace of a node's current container."""
        from splitbrain.faults import netns

        container = self._containers.get(name)
        if container is None:
            raise BackendError(f"node {name} has no container")
        if self.backend.iptables_runner == "nsenter":
            container.reload()
            pid = (container.attrs.get("State") or {}).get("Pid")
            if pid:
                return netns.nsenter(int(pid))
        return netns.docker_sdk(container, user="root")

    def fault_injectors(self) -> list[FaultInjector]:
        if self.subnet is None:
            return []  # not started: nothing to inject into yet (and nothing cached)
        if self._injectors is None:
            from ..injectors import IptablesInjector, ToxiproxyInjector

            injectors: list[FaultInjector] = []
            if self.injector == "iptables":
                injectors.append(IptablesInjector(self))
            if self.proxied and self.toxiproxy_api is not None:
                injectors.append(ToxiproxyInjector(self, partitions=self.injector == "toxiproxy"))
            self._injectors = injectors
        return list(self._injectors)

    # ---- event logs and output ----------------------------------------------------------------

    def _finish(self, name: str) -> None:
        """A node's container has ended: keep its output and events, then remove it."""
        container = self._containers.get(name)
        handle = self.nodes[name]
        if container is not None and not handle.alive:
            append_output(
                container,
                self._node_dir(name) / "node.log",
                f"--- splitbrain: {name} incarnation {handle.incarnation} in container {container.name} "
                f"({container.id[:12]}) on {handle.address}, image {self.backend.image_name(self.image)} "
                f"({(self.image or '?')[7:19]})\n",
            )
            if self.events_mode == "archive":
                copy_out(container, [part for _incarnation, part, _t in self._parts[name]])
            self._containers.pop(name, None)
            if not self.keep:
                remove_container(container)
        self._collect(name)

    def _output(self, name: str, lines: int) -> str | None:
        container = self._containers.get(name)
        if container is not None:
            try:
                return container.logs(tail=lines).decode("utf-8", errors="replace")
            except docker.errors.APIError:
                pass
        try:
            return (self.run_dir / "nodes" / name / "node.log").read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None

    # ---- teardown -----------------------------------------------------------------------------

    def _teardown(self) -> None:
        try:
            if not self.keep:
                self.problems.extend(self.stop_all())
        finally:
            try:
                if not self.keep:
                    # Whatever happened above, no container of this cluster may survive it.
                    for name, container in list(self._containers.items()):
                        handle = self.nodes[name]
                        if handle.alive:
                            self._force_kill(container)
                            self._wait_exit(name, 10.0)
                            handle.state = NodeState.DEAD
                            self._record_stop(name, "teardown_kill")
                            self._finish(name)
                if self.toxiproxy is not None and not self.keep:
                    self._save_toxiproxy_output(self.toxiproxy)
                self.collect_events()
                if self.events_mode == "bind" and not self.keep:
                    for name in self.nodes:
                        # World-writable only while a container needed to write there.
                        os.chmod(self._node_dir(name), 0o755)
            finally:
                if self.keep:
                    self.problems.append(
                        f"kept: network {self.network_name} and the containers labelled "
                        f"{LABEL_CLUSTER}={self.cluster_id} (splitbrain clean removes them)"
                    )
                else:
                    self.remove_all()
                _LIVE_CLUSTERS.discard(self)

    def _save_toxiproxy_output(self, toxiproxy: Container) -> None:
        try:
            output = toxiproxy.logs(stdout=True, stderr=True)
        except docker.errors.APIError:
            return
        if output:
            (self.run_dir / "toxiproxy.log").write_bytes(output)

    def remove_all(self) -> list[str]:
        """Remove every container labelled with this cluster's id, then its network; returns problems."""
        problems = remove_cluster(self.client, self.cluster_id)
        self._containers.clear()
        self.network = None
        self.problems.extend(problems)
        return problems

    def kill_now(self) -> None:
        """Last resort (atexit): remove everything of this cluster, no collection."""
        if not self.keep:
            remove_cluster(self.client, self.cluster_id)


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        try:
            cluster.kill_now()
        except Exception:  # pragma: no cover - the engine went away first
            pass
    # After the clusters: the engine keeps the tag of an image a container still uses.
    release_own_hold()
