"""The docker backend: one container per node, on a bridge network made for each cluster.

Images. Nodes run `splitbrain-node:<content-hash>`, the tag `ci/images` gives the current sources
(it is built, with the build's own progress output on stderr, when missing; `build="never"`
refuses instead). Outside a checkout (no ci/images) or with `image=` the image is taken as it is.
The Toxiproxy-compatible server (`python -m faults.toxiproxy`) runs from the same image.

Names and labels. A cluster id `sb<8 hex>` is drawn per cluster, so two test sessions (pytest-xdist
workers, two terminals) never collide: network `sb<id>`, containers `sb<id>-<node>-<incarnation>`
and `sb<id>-toxiproxy`. Everything carries the labels `splitbrain=1`, `splitbrain.cluster=<id>`,
`splitbrain.role` and `splitbrain.owner=<host>:<pid>:<start time>` of the harness process, which is
what `splitbrain clean` (`clean_leftovers`) uses to remove what a killed harness left behind while
sparing clusters whose owner still runs.

Addresses. Each cluster's network gets a /24 drawn from 198.18.0.0/15 (the benchmarking range,
RFC 2544, never a real destination; the /24 docker-compose.yml uses by default is avoided) that no
other docker network overlaps; the engine refuses overlapping pools atomically, and a refusal
draws another. The gateway is .1, the Toxiproxy container .2, node i .(10 + i); every node listens
on the same ports (7800 protocol, 7900 admin) on its own address, so clusters share no port. A
restarted node gets a new container on the same address (empty state, incarnation + 1).

Reaching the nodes. On a local engine the harness talks to each admin API at the container's
address (the host has a leg on every bridge). On a remote engine (`DOCKER_HOST=tcp://...`), or with
`admin="published"`, the admin ports are published on the engine host's 127.0.0.1 (or
`admin_host`). Nothing else assumes one Docker host: the client is injectable, and event logs go
either through a bind-mounted directory (`events="bind"`, the default on a local engine) or are
copied out of each finished container with get_archive (`events="archive"`, the default on a
remote one; the config goes in with put_archive).

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
harness is root on the engine's host, else `docker exec -u root`), plus Toxiproxy for TCP: with
transport tcp every directed link X->Y is routed through a proxy `X-to-Y` on the Toxiproxy
container (X's peer address for Y is the proxy), unless the injector is iptables. See
harness/backends/injectors.py for which step goes where.

No leftovers: teardown (from `finally`, `with`, and an atexit hook as a last resort) stops the
nodes, removes every container labelled with the cluster id (found by label, so even one whose
bookkeeping an interrupt cut short) and then the network. `keep=True` (`--splitbrain-keep`) leaves
containers and network for inspection; `splitbrain clean` removes them later.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import io
import ipaddress
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import docker
import docker.errors
import requests
import yaml
from docker.types import EndpointConfig, IPAMConfig, IPAMPool

from harness.scenario import Scenario

from .admin import AdminError
from .base import (
    Backend,
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

ROOT = Path(__file__).resolve().parents[2]
CI_IMAGES = ROOT / "ci" / "images"
IMAGE_REPO = os.environ.get("SPLITBRAIN_NODE_IMAGE", "splitbrain-node")
DEFAULT_IMAGE = f"{IMAGE_REPO}:latest"
BUILD_TIMEOUT_S = 1800

PROTOCOL_PORT = 7800
ADMIN_PORT = 7900
TOXIPROXY_PORT = 8474
PROXY_PORT_BASE = 21000
CONTAINER_DIR = "/var/lib/splitbrain/run"
NODE_UID = 10001  # the image's user `splitbrain` (Dockerfile)

LABEL = "splitbrain"
LABEL_CLUSTER = "splitbrain.cluster"
LABEL_ROLE = "splitbrain.role"
LABEL_NODE = "splitbrain.node"
LABEL_OWNER = "splitbrain.owner"
LABEL_RUN_DIR = "splitbrain.run-dir"

SUBNET_POOL = ipaddress.ip_network("198.18.0.0/15")
RESERVED_SUBNETS = (ipaddress.ip_network("198.18.77.0/24"),)  # docker-compose.yml's default
NETWORK_ATTEMPTS = 20
MAX_NODES = 240  # .10 to .249 of the cluster's /24
GATEWAY_HOST = 1
TOXIPROXY_HOST = 2
FIRST_NODE_HOST = 10

HEALTH_POLL_S = 0.05
STATUS_POLL_S = 0.5  # while waiting for health: how often to ask the engine whether it exited
CHECK_ALIVE_INTERVAL_S = 0.5
REMOVE_ATTEMPTS = 10

_LIVE_CLUSTERS: "weakref.WeakSet[DockerCluster]" = weakref.WeakSet()
_IMAGE_LOCK = threading.Lock()
_IMAGES: dict[tuple[str, str], str] = {}  # (engine url, requested image or "ci") -> image id pinned
_IMAGE_NAMES: dict[str, str] = {}  # image id -> the tag it was found under
HOLD_REPO = f"{IMAGE_REPO}-inuse"  # a tag per harness process keeps its image from being deleted


# ---- helpers ------------------------------------------------------------------------------------


def _process_start_time(pid: int) -> str:
    """The start time of a process in clock ticks since boot (Linux), '' when unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_label() -> str:
    """<host>:<pid>:<start time> of this process: who owns a cluster (for `splitbrain clean`)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start_time(os.getpid())}"


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host; None for one on another host (cannot tell)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return None
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if not Path(f"/proc/{pid}").exists():
        return False
    return not start or _process_start_time(pid) == start


def load_ci_images():
    """ci/images is a script without .py: load it as a module for its content hash."""
    loader = importlib.machinery.SourceFileLoader("splitbrain_ci_images", str(CI_IMAGES))
    spec = importlib.util.spec_from_loader("splitbrain_ci_images", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def is_local_engine(client) -> bool:
    """Whether the engine runs on this machine (a unix socket), so its bridges are reachable."""
    # The SDK names a unix socket (or a Windows pipe) http+docker://localhost; tcp:// is remote.
    return str(getattr(client.api, "base_url", "")).startswith("http+docker://")


class _Exited(Exception):
    def __init__(self, code):
        self.code = code


# ---- the backend --------------------------------------------------------------------------------


class DockerBackend(Backend):
    """Nodes as containers on a Docker engine (local or remote).

    client: a docker.DockerClient (default: docker.from_env()); image: the image to run (default:
    the current content-hash tag of ci/images, built when missing unless build="never");
    events: "auto" | "bind" | "archive"; admin: "auto" | "direct" | "published"; admin_host: where
    published admin ports are reached (default: 127.0.0.1 for a local engine, the DOCKER_HOST
    host otherwise); iptables_runner: "auto" | "nsenter" | "exec"; build_output: a text stream for
    the image build's progress (default: stderr).
    """

    name = "docker"

    def __init__(self, *, client=None, image: str | None = None, build: str = "auto", events: str = "auto",
                 admin: str = "auto", admin_host: str | None = None, iptables_runner: str = "auto",
                 build_output=None, network_attempts: int = NETWORK_ATTEMPTS):
        for what, value, allowed in (("build", build, ("auto", "never")),
                                     ("events", events, ("auto", "bind", "archive")),
                                     ("admin", admin, ("auto", "direct", "published")),
                                     ("iptables_runner", iptables_runner, ("auto", "nsenter", "exec"))):
            if value not in allowed:
                raise ValueError(f"DockerBackend {what}: must be one of {', '.join(allowed)}, got {value!r}")
        self._client = client
        self.image = image
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

    def check(self) -> tuple[bool, str]:
        try:
            client = self.client
            client.ping()
            version = client.version().get("Version", "?")
        except Exception as exc:  # the SDK raises several kinds for an absent engine
            return False, f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:160]})"
        where = "local" if self.local_engine else f"remote {client.api.base_url}"
        if self.image is not None:
            try:
                client.images.get(self.image)
            except docker.errors.ImageNotFound:
                return False, f"engine {version} ({where}) reachable, but image {self.image} does not exist"
            return True, f"engine {version} ({where}), image {self.image}"
        if CI_IMAGES.is_file():
            try:
                tag = f"{IMAGE_REPO}:{load_ci_images().content_hash()}"
            except Exception as exc:
                return False, f"engine {version} reachable, but ci/images does not load: {exc}"
            try:
                client.images.get(tag)
                state = f"image {tag} current"
            except docker.errors.ImageNotFound:
                if self.build == "never":
                    return False, f"engine {version} reachable, but {tag} is not built (run ci/images)"
                state = f"image {tag} not built yet (ci/images builds it on first use)"
            return True, f"engine {version} ({where}), {state}"
        try:
            client.images.get(DEFAULT_IMAGE)
        except docker.errors.ImageNotFound:
            return False, f"engine {version} reachable, but {DEFAULT_IMAGE} does not exist and there is no ci/images"
        return True, f"engine {version} ({where}), image {DEFAULT_IMAGE}"

    # ---- the image ----------------------------------------------------------------------------

    def ensure_image(self) -> str:
        """The id of the image to run, pinned for this process: the current ci/images content-hash
        tag (built when missing, unless build="never"), `image=` as given, or splitbrain-node:latest
        outside a checkout.

        Pinned, because others may rebuild meanwhile: ci/images untags superseded content hashes,
        and a session must not lose its image between two clusters. The image also gets a tag of
        this process's own (`splitbrain-node-inuse:<host>_<pid>_<start>`), removed at exit (or by
        `splitbrain clean` once the process is gone), so that nobody deletes it while it is in use.
        """
        client = self.client
        key = (str(client.api.base_url), self.image or "ci")
        with _IMAGE_LOCK:
            if key in _IMAGES:
                return _IMAGES[key]
            ref = self._resolve_image()
            try:
                image = client.images.get(ref)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {ref} disappeared right after it was found or built") from None
            _hold_image(client, image)
            _IMAGES[key] = image.id
            _IMAGE_NAMES[image.id] = ref
            return image.id

    def image_name(self, image_id: str | None) -> str:
        return _IMAGE_NAMES.get(image_id or "", image_id or "?")

    def _resolve_image(self) -> str:
        client = self.client
        if self.image is not None:
            try:
                client.images.get(self.image)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {self.image} does not exist on the engine") from None
            return self.image
        if not CI_IMAGES.is_file():
            try:
                client.images.get(DEFAULT_IMAGE)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"{DEFAULT_IMAGE} does not exist and this is no checkout with ci/images "
                                         f"to build it") from None
            return DEFAULT_IMAGE
        tag = f"{IMAGE_REPO}:{load_ci_images().content_hash()}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            if self.build == "never":
                raise BackendUnavailable(f"image {tag} is not built (run ci/images, or allow building)") from None
        self._build(tag)
        return self._built_tag(tag)

    def _build(self, tag: str) -> None:
        out = self.build_output if self.build_output is not None else sys.stderr
        print(f"splitbrain: the node image {tag} is missing or stale: building it with ci/images", file=out,
              flush=True)
        started = time.monotonic()
        env = dict(os.environ)
        base_url = str(self.client.api.base_url)
        if base_url.startswith("tcp://") or base_url.startswith("https://") or base_url.startswith("http://"):
            env.setdefault("DOCKER_HOST", base_url)
        proc = subprocess.Popen([sys.executable, str(CI_IMAGES), "all"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env,
                                cwd=str(ROOT))
        tail: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                tail = (tail + [line.rstrip()])[-30:]
            code = proc.wait(timeout=BUILD_TIMEOUT_S)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        self.build_seconds = time.monotonic() - started
        if code != 0:
            raise BackendUnavailable(f"ci/images all failed with exit code {code}; last lines:\n" + "\n".join(tail))
        print(f"splitbrain: node image {tag} ready in {self.build_seconds:.1f} s", file=out, flush=True)

    def _built_tag(self, tag: str) -> str:
        """The image ci/images just built: `tag`, or, when the sources changed while it ran (so it
        built another content hash), the image it tagged :latest."""
        try:
            self.client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        try:
            latest = self.client.images.get(DEFAULT_IMAGE)
        except docker.errors.ImageNotFound:
            raise BackendUnavailable(f"ci/images all succeeded but neither {tag} nor {DEFAULT_IMAGE} exists") from None
        built = (latest.labels or {}).get("splitbrain.content-hash", "?")
        out = self.build_output if self.build_output is not None else sys.stderr
        print(f"splitbrain: the sources changed during the build: using {IMAGE_REPO}:{built} "
              f"({latest.id[7:19]}), built from them a moment ago", file=out, flush=True)
        return latest.id

    def create_cluster(self, scenario: Scenario, run_dir: Path, *, seed: int, epoch: float | None = None,
                       options: ClusterOptions | None = None) -> "DockerCluster":
        return DockerCluster(scenario, run_dir, seed=seed, epoch=epoch, options=options, backend=self)


# ---- the cluster --------------------------------------------------------------------------------


class DockerCluster(Cluster):
    backend_name = "docker"

    def __init__(self, scenario: Scenario, run_dir: Path, *, seed: int, epoch: float | None,
                 options: ClusterOptions | None, backend: DockerBackend):
        super().__init__(scenario, run_dir, seed=seed, epoch=epoch, options=options)
        if len(scenario.nodes) > MAX_NODES:
            raise BackendError(f"the docker backend runs at most {MAX_NODES} nodes per cluster, "
                               f"the scenario has {len(scenario.nodes)}")
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
        self.toxiproxy = None  # the Toxiproxy container, when the links are proxied
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
            raise BackendError("injector iptables cannot tell apart TCP links routed through Toxiproxy, which "
                               "toxic steps need: use auto, toxiproxy or inprocess")
        if requested not in ("inprocess", "iptables", "toxiproxy"):
            raise BackendError(f"unknown injector {requested!r} (inprocess, iptables, toxiproxy)")
        return requested

    @property
    def injector_name(self) -> str:
        return self.injector

    def labels(self, role: str, **extra: str) -> dict[str, str]:
        out = {LABEL: "1", LABEL_CLUSTER: self.cluster_id, LABEL_ROLE: role, LABEL_OWNER: self._owner,
               LABEL_RUN_DIR: str(self.run_dir)}
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
        self.image = self.backend.ensure_image()
        self.timings["image_s"] = time.monotonic() - started
        mark = time.monotonic()
        self._create_network()
        self.timings["network_s"] = time.monotonic() - mark
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

    def _taken_subnets(self) -> list[ipaddress.IPv4Network]:
        taken = list(RESERVED_SUBNETS)
        for net in self.client.networks.list():
            for cfg in ((net.attrs.get("IPAM") or {}).get("Config") or []):
                try:
                    taken.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
                except ValueError:
                    continue
        return taken

    def _create_network(self) -> None:
        rng = random.SystemRandom()
        n24 = SUBNET_POOL.num_addresses // 256
        last_error = ""
        for _attempt in range(self.backend.network_attempts):
            taken = self._taken_subnets()
            for _ in range(200):
                index = rng.randrange(n24)
                subnet = ipaddress.ip_network(f"{SUBNET_POOL.network_address + index * 256}/24")
                if not any(subnet.overlaps(t) for t in taken if t.version == 4):
                    break
            else:
                raise BackendError("no free /24 in 198.18.0.0/15 for the cluster network (200 draws)")
            gateway = str(subnet.network_address + GATEWAY_HOST)
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=gateway)])
            try:
                with signals_deferred():
                    self.network = self.client.networks.create(
                        self.network_name, driver="bridge", ipam=ipam, check_duplicate=True,
                        labels=self.labels("network"))
            except docker.errors.APIError as exc:
                text = str(exc)
                if "overlap" in text.lower() or "pool" in text.lower() or "in use" in text.lower():
                    last_error = text
                    continue  # another cluster took it between our look and our create
                raise BackendError(f"cannot create the cluster network {self.network_name}: {exc}") from None
            self.subnet = subnet
            break
        else:
            raise BackendError(f"could not create a network with a free subnet after "
                               f"{self.backend.network_attempts} attempts (last: {last_error})")
        for i, name in enumerate(self.nodes):
            ip = str(self.subnet.network_address + FIRST_NODE_HOST + i)
            self._ips[name] = ip
            self.nodes[name].address = f"{ip}:{PROTOCOL_PORT}"
            if self.admin_mode == "direct":
                self.nodes[name].admin_url = f"http://{ip}:{ADMIN_PORT}"

    def _endpoint(self, ip: str) -> dict:
        return {self.network_name: EndpointConfig(self.client.api._version, ipv4_address=ip)}

    def _start_toxiproxy(self) -> None:
        ip = str(self.subnet.network_address + TOXIPROXY_HOST)
        kwargs = dict(
            image=self.image, entrypoint=["python", "-m", "faults.toxiproxy"],
            command=["-host", "0.0.0.0", "-port", str(TOXIPROXY_PORT), "-seed", str(self.seed)],
            name=f"{self.cluster_id}-toxiproxy", labels=self.labels("toxiproxy"), init=True, detach=True,
            network=self.network_name, networking_config=self._endpoint(ip),
            environment={"LOG_LEVEL": "WARNING"}, healthcheck={"test": ["NONE"]})
        if self.admin_mode == "published":
            kwargs["ports"] = {f"{TOXIPROXY_PORT}/tcp": ("127.0.0.1" if self.backend.local_engine else "0.0.0.0", None)}
        with signals_deferred():
            self.toxiproxy = self.client.containers.create(**kwargs)
        self.toxiproxy.start()
        if self.admin_mode == "published":
            self.toxiproxy.reload()
            self.toxiproxy_api = (self.backend.admin_host, self._published_port(self.toxiproxy, TOXIPROXY_PORT))
        else:
            self.toxiproxy_api = (ip, TOXIPROXY_PORT)
        session = requests.Session()
        session.trust_env = False
        deadline = time.monotonic() + self.options.start_timeout_s
        last = "no answer yet"
        while True:
            try:
                resp = session.get(f"http://{self.toxiproxy_api[0]}:{self.toxiproxy_api[1]}/version", timeout=2)
                if resp.status_code == 200:
                    break
                last = f"HTTP {resp.status_code}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            self.toxiproxy.reload()
            if self.toxiproxy.status in ("exited", "dead"):
                raise NodeStartError(f"the Toxiproxy container exited with {self.toxiproxy.attrs['State'].get('ExitCode')}:"
                                     f"\n{self._container_tail(self.toxiproxy)}")
            if time.monotonic() > deadline:
                raise NodeStartError(f"the Toxiproxy container did not answer GET /version within "
                                     f"{self.options.start_timeout_s:g}s (last: {last}):\n"
                                     f"{self._container_tail(self.toxiproxy)}")
            time.sleep(0.1)
        session.close()
        from .injectors import ToxiproxyClient

        api = ToxiproxyClient(*self.toxiproxy_api, timeout_s=self.options.admin_timeout_s)
        port = PROXY_PORT_BASE
        for src in self.nodes:
            for dst in self.nodes:
                if src == dst:
                    continue
                name = f"{src}-to-{dst}"
                api.create(name, listen=f"0.0.0.0:{port}", upstream=f"{self._ips[dst]}:{PROTOCOL_PORT}")
                self.proxies[(src, dst)] = (name, port)
                port += 1

    def _peers_of(self, name: str) -> dict[str, str]:
        peers = {}
        for peer in self.nodes:
            if peer == name:
                continue
            if self.proxied:
                proxy_ip = str(self.subnet.network_address + TOXIPROXY_HOST)
                peers[peer] = f"{proxy_ip}:{self.proxies[(name, peer)][1]}"
            else:
                peers[peer] = f"{self._ips[peer]}:{PROTOCOL_PORT}"
        return peers

    def _spawn(self, name: str, incarnation: int) -> None:
        handle = self.nodes[name]
        node_dir = self._node_dir(name)
        ip = self._ips[name]
        events_in_container = f"{CONTAINER_DIR}/events-inc{incarnation}.jsonl"
        config = self.node_config(name, bind=f"{ip}:{PROTOCOL_PORT}", admin=f"0.0.0.0:{ADMIN_PORT}",
                                  peers=self._peers_of(name), events=events_in_container, incarnation=incarnation)
        text = yaml.safe_dump(config, sort_keys=False)
        (node_dir / "node.yaml").write_text(text, encoding="utf-8")
        part = node_dir / f"events-inc{incarnation}.jsonl"
        part.unlink(missing_ok=True)
        kwargs = dict(
            image=self.image, command=["--config", f"{CONTAINER_DIR}/node.yaml"],
            name=f"{self.cluster_id}-{name}-{incarnation}",
            labels=self.labels("node", **{LABEL_NODE: name, "splitbrain.incarnation": str(incarnation)}),
            hostname=name.lower().replace("_", "-")[:63], cap_add=["NET_ADMIN"], init=True, detach=True,
            network=self.network_name, networking_config=self._endpoint(ip),
            # The harness polls /health itself; the image's HEALTHCHECK would start a Python process
            # in every container every 5 s, which a 2-core CI machine feels.
            healthcheck={"test": ["NONE"]}, stop_signal="SIGTERM",
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
                raise NodeStartError(f"node {name} (incarnation {incarnation}): cannot create its container: "
                                     f"{exc}") from None
            self._containers[name] = container
            self._parts[name].append((incarnation, part, t))
            handle.incarnation = incarnation
            handle.state = NodeState.RUNNING
            handle.started_at = t
        if self.events_mode == "archive":
            container.put_archive("/var/lib/splitbrain", _config_tar(text))
        try:
            container.start()
        except docker.errors.APIError as exc:
            handle.state = NodeState.DEAD
            raise NodeStartError(f"node {name} (incarnation {incarnation}): its container does not start: "
                                 f"{exc}") from None
        if self.admin_mode == "published":
            container.reload()
            url = f"http://{self.backend.admin_host}:{self._published_port(container, ADMIN_PORT)}"
            if url != handle.admin_url:
                handle.admin_url = url
                client = self._admins.pop(name, None)
                if client is not None:
                    client.close()

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
        deadline = time.monotonic() + timeout
        next_status = time.monotonic() + STATUS_POLL_S
        last = "no answer yet"
        while True:
            try:
                reply = client.health(timeout_s=2.0)
                if isinstance(reply, dict) and reply.get("status") == "ok" and reply.get("incarnation") == handle.incarnation:
                    return
                last = f"GET /health answered {reply!r}"
            except AdminError as exc:
                last = str(exc)
            now = time.monotonic()
            if now >= next_status or now >= deadline:
                next_status = now + STATUS_POLL_S
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
                    raise NodeStartError(f"node {name} (incarnation {handle.incarnation}) exited with code {code} "
                                         f"while starting in container {container.name} at {handle.address}; "
                                         f"its output:\n{tail}")
            if now >= deadline:
                raise NodeStartError(
                    f"node {name} (incarnation {handle.incarnation}) did not answer GET {handle.admin_url}/health "
                    f"within {timeout:g}s (expected status ok and incarnation {handle.incarnation}; last seen: "
                    f"{last}); container {container.name} output:\n{self.log_tail(name)}")
            time.sleep(HEALTH_POLL_S)

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
            exited = self.client.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={self.cluster_id}",
                                                                    "status": ["exited", "dead"]})
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
            raise NodeCrashed(f"node {name} (incarnation {handle.incarnation}) exited unexpectedly with code "
                              f"{code} (container {container.name}); its output:\n{tail}")

    def describe(self) -> dict:
        """Where this cluster runs (for verdict.json and failure reports)."""
        return {"cluster_id": self.cluster_id, "network": self.network_name,
                "subnet": None if self.subnet is None else str(self.subnet),
                "image": self.backend.image_name(self.image), "image_id": self.image,
                "injector": self.injector, "proxied": self.proxied, "events": self.events_mode,
                "admin": self.admin_mode, "iptables_runner": self.backend.iptables_runner if self.injector == "iptables" else None,
                "timings_s": {k: round(v, 3) for k, v in self.timings.items()}}

    def netns_runner(self, name: str):
        """A faults.netns Runner into the network namespace of a node's current container."""
        from faults import netns

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
            from .injectors import IptablesInjector, ToxiproxyInjector

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
            self._save_output(name, container, handle.incarnation)
            if self.events_mode == "archive":
                self._copy_out(name, container)
            self._containers.pop(name, None)
            if not self.keep:
                _remove(container)
        self._collect(name)

    def _save_output(self, name: str, container, incarnation: int) -> None:
        try:
            output = container.logs(stdout=True, stderr=True)
        except docker.errors.APIError as exc:
            output = f"(no output: {exc})\n".encode()
        with open(self._node_dir(name) / "node.log", "ab") as log:
            log.write(f"--- splitbrain: {name} incarnation {incarnation} in container {container.name} "
                      f"({container.id[:12]}) on {self.nodes[name].address}, image {self.backend.image_name(self.image)} "
                      f"({(self.image or '?')[7:19]})\n".encode())
            log.write(output)
            if output and not output.endswith(b"\n"):
                log.write(b"\n")

    def _copy_out(self, name: str, container) -> None:
        for incarnation, part, _t in self._parts[name]:
            if part.exists():
                continue
            try:
                stream, _stat = container.get_archive(f"{CONTAINER_DIR}/{part.name}")
                data = b"".join(stream)
            except docker.errors.NotFound:
                continue  # it died before writing anything
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                member = tar.next()
                if member is not None and member.isfile():
                    extracted = tar.extractfile(member)
                    part.write_bytes(extracted.read() if extracted is not None else b"")

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

    @staticmethod
    def _container_tail(container, lines: int = 20) -> str:
        try:
            text = container.logs(tail=lines).decode("utf-8", errors="replace")
        except docker.errors.APIError as exc:
            return f"    (no output: {exc})"
        return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"

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
                    self._save_toxiproxy_output()
                self.collect_events()
                if self.events_mode == "bind" and not self.keep:
                    for name in self.nodes:
                        # World-writable only while a container needed to write there.
                        os.chmod(self._node_dir(name), 0o755)
            finally:
                if self.keep:
                    self.problems.append(f"kept: network {self.network_name} and the containers labelled "
                                         f"{LABEL_CLUSTER}={self.cluster_id} (splitbrain clean removes them)")
                else:
                    self.remove_all()
                _LIVE_CLUSTERS.discard(self)

    def _save_toxiproxy_output(self) -> None:
        try:
            output = self.toxiproxy.logs(stdout=True, stderr=True)
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


def _hold_tag(owner: str | None = None) -> str:
    """The tag of a harness process's hold on its image: <host>_<pid>_<start>, docker-safe."""
    host, pid, start = (owner or owner_label()).split(":", 2)
    safe = "".join(c if c.isalnum() or c in ".-" else "-" for c in host)[:60] or "host"
    return f"{safe}_{pid}_{start or '0'}"


def _hold_image(client, image) -> None:
    tag = _hold_tag()
    if f"{HOLD_REPO}:{tag}" in (image.tags or []):
        return
    # One hold per process (tagging moves it from whatever image it was on before).
    image.tag(HOLD_REPO, tag)


def _release_hold(client, tag: str | None = None) -> None:
    try:
        client.images.remove(f"{HOLD_REPO}:{tag or _hold_tag()}")
    except docker.errors.APIError:
        pass  # not there, or the image is still used by a container (its tag then stays: clean)


def _config_tar(text: str) -> bytes:
    """A tar of run/ (owned by the node's user) with run/node.yaml, for put_archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo("run")
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        folder.uid = folder.gid = NODE_UID
        folder.mtime = int(time.time())
        tar.addfile(folder)
        data = text.encode()
        info = tarfile.TarInfo("run/node.yaml")
        info.size = len(data)
        info.mode = 0o644
        info.uid = info.gid = NODE_UID
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _remove(container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise


def remove_cluster(client, cluster_id: str) -> list[str]:
    """Remove every container and network labelled splitbrain.cluster=<id>; returns problems."""
    problems = []
    label = f"{LABEL_CLUSTER}={cluster_id}"
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            containers = client.containers.list(all=True, filters={"label": label})
        except docker.errors.APIError as exc:
            problems.append(f"cannot list containers of {cluster_id}: {exc}")
            break
        for container in containers:
            try:
                _remove(container)
            except docker.errors.APIError as exc:
                if attempt == REMOVE_ATTEMPTS - 1:
                    problems.append(f"cannot remove container {container.name}: {exc}")
        if not containers:
            break
        time.sleep(0.1 * attempt)
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            networks = client.networks.list(filters={"label": label})
        except docker.errors.APIError as exc:
            problems.append(f"cannot list networks of {cluster_id}: {exc}")
            break
        if not networks:
            break
        for net in networks:
            try:
                net.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                # An endpoint still being torn down: wait a little and try again.
                if attempt == REMOVE_ATTEMPTS - 1:
                    problems.append(f"cannot remove network {net.name}: {exc}")
        time.sleep(0.1 * (attempt + 1))
    return problems


# ---- leftovers ----------------------------------------------------------------------------------


def leftovers(client=None) -> dict[str, dict]:
    """Clusters that have containers or networks on the engine: id -> {owner, alive, containers,
    networks, run_dir}."""
    client = client or docker.from_env(timeout=60)
    found: dict[str, dict] = {}

    def entry(labels: dict) -> dict | None:
        cid = labels.get(LABEL_CLUSTER)
        if not cid:
            return None
        owner = labels.get(LABEL_OWNER, "")
        return found.setdefault(cid, {"owner": owner, "alive": owner_alive(owner) if owner else False,
                                      "containers": [], "networks": [], "run_dir": labels.get(LABEL_RUN_DIR, "")})

    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        e = entry(container.labels)
        if e is not None:
            e["containers"].append(f"{container.name} ({container.status})")
    for net in client.networks.list(filters={"label": f"{LABEL}=1"}):
        e = entry(net.attrs.get("Labels") or {})
        if e is not None:
            e["networks"].append(net.name)
    return found


def clean_leftovers(client=None, *, everything: bool = False, cluster: str | None = None,
                    dry_run: bool = False, out: Callable[[str], None] = print) -> tuple[int, list[str]]:
    """Remove the containers and networks of clusters whose harness process is gone (every
    cluster with `everything`, or just `cluster`); returns (clusters removed, problems).

    A cluster whose owner runs on this host is spared (another test session is using it); one
    owned by another host is spared unless `everything` (its owner cannot be checked from here).
    """
    client = client or docker.from_env(timeout=60)
    removed = 0
    problems: list[str] = []
    for image in client.images.list(name=HOLD_REPO):
        for ref in image.tags or []:
            if not ref.startswith(HOLD_REPO + ":"):
                continue
            tag = ref.split(":", 1)[1]
            try:
                host, pid, start = tag.rsplit("_", 2)
            except ValueError:
                continue
            # Tags carry a docker-safe host name: compare it with ours made safe the same way.
            same_host = host == _hold_tag().rsplit("_", 2)[0]
            alive = owner_alive(f"{socket.gethostname()}:{pid}:{start}") if same_host else None
            if alive or (alive is None and not everything) or cluster is not None:
                continue
            if dry_run:
                out(f"would release image hold {ref}")
            else:
                _release_hold(client, tag)
                out(f"released image hold {ref}")
    for cid, info in sorted(leftovers(client).items()):
        if cluster is not None and cid != cluster:
            continue
        what = ", ".join(info["containers"] + [f"network {n}" for n in info["networks"]]) or "nothing"
        if cluster is None and not everything and info["alive"] is not False:
            reason = "its owner still runs" if info["alive"] else "owned by another host (use --all)"
            out(f"kept {cid}: {reason} ({info['owner']}): {what}")
            continue
        if dry_run:
            out(f"would remove {cid} ({info['owner'] or 'no owner'}): {what}")
            removed += 1
            continue
        problems += remove_cluster(client, cid)
        out(f"removed {cid} ({info['owner'] or 'no owner'}): {what}")
        removed += 1
    return removed, problems


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        try:
            cluster.kill_now()
        except Exception:  # pragma: no cover - the engine went away first
            pass
    if _IMAGES:
        try:
            _release_hold(docker.from_env(timeout=30))
        except Exception:  # pragma: no cover - no engine at exit: `splitbrain clean` releases it
            pass
