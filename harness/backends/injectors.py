"""Packet-level fault injectors for container clusters: iptables and Toxiproxy.

One vocabulary: the runner hands a schedule step (partition, loss, toxic) to the
first injector that takes it, and to the node fault layer otherwise. What goes where on docker:

| step        | udp (injector auto = iptables)       | tcp (injector auto = toxiproxy)                |
|-------------|--------------------------------------|------------------------------------------------|
| partition   | iptables DROP at the receiver        | Toxiproxy `timeout` toxic, timeout 0           |
| loss        | iptables `-m statistic` DROP         | in-process (TCP would hide packet loss)        |
| delay, ...  | in-process (no sch_netem here)       | in-process (or a latency toxic step)           |
| toxic       | refused (scenario: needs tcp)        | Toxiproxy                                      |

`injector: inprocess` keeps every network fault in the node fault layer (toxic steps still go to
Toxiproxy); `injector: iptables` with transport tcp connects the nodes directly (no proxies) so
that iptables can tell the links apart by address.

IptablesInjector: a directed link X->Y is cut or made lossy at Y, on INPUT, by source address X
(faults.iptables.Iptables; every rule carries the comment `splitbrain:<cluster id>:s<step>`, and a
heal deletes exactly the rules with its step's tag). The host's admin traffic comes from the
network's gateway address and Toxiproxy's from its own, so neither is ever dropped. A restarted
node is a new container with a fresh network namespace: the rules in force at it are added again.
A node that is dead when a step comes gets its rules when it restarts; one that is paused, when
it resumes (only the `docker exec` runner needs that: nsenter reaches a frozen namespace).

ToxiproxyInjector: with transport tcp every directed link X->Y has a proxy `X-to-Y` (client X,
upstream Y). The node transport keeps one connection per pair of nodes, initiated by either end,
so traffic from X to Y flows either in the *upstream* stream of `X-to-Y` or in the *downstream*
stream of `Y-to-X`: a toxic on the link X->Y is added to both, and whichever connection is in use
carries it. `down` disables both proxies of each pair it names (a proxy cannot be half down).
toxiproxy-python keeps its server address in class attributes and sets no timeout:
`ToxiproxyClient` points it at one server, under a lock, with timeouts and without proxy settings
from the environment, for the duration of each call.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import requests
import toxiproxy
import toxiproxy.api
from toxiproxy.exceptions import NotFound
from toxiproxy.proxy import Proxy

from splitbrain.faults.iptables import TAG_PREFIX, Iptables, tag

from .base import FaultInjector, NodeState

STAT_PROBABILITY_FORMAT = "{:.6f}"

# ---- iptables -----------------------------------------------------------------------------------


class IptablesInjector(FaultInjector):
    """Partitions and loss as iptables rules in each receiving node's network namespace."""

    name = "iptables"
    KINDS = ("partition", "loss")

    def __init__(self, cluster):
        """`cluster` needs node(name), node_ip(name), container(name), netns_runner(name) and
        cluster_id (harness.backends.docker.DockerCluster)."""
        self.cluster = cluster
        self.run_id = cluster.cluster_id
        self._rules: dict[int, list[tuple[str, tuple[str, ...]]]] = {}  # step -> [(receiver, matches)]
        self._installed: dict[int, set[str]] = {}  # step -> receivers whose current namespace has its rules
        self._hosts: dict[str, tuple[str, Iptables]] = {}  # node -> (container id, Iptables in its netns)
        self.commands = 0

    def handles(self, step) -> bool:
        return step.kind in self.KINDS

    def _iptables(self, node: str) -> Iptables | None:
        """iptables in the node's current namespace, or None when it cannot be reached now."""
        handle = self.cluster.node(node)
        container = self.cluster.container(node)
        if container is None or not handle.alive:
            return None
        if handle.state is NodeState.PAUSED and self.cluster.backend.iptables_runner == "exec":
            return None  # docker exec cannot enter a frozen container: done at resume
        cached = self._hosts.get(node)
        if cached is not None and cached[0] == container.id:
            return cached[1]
        iptables = Iptables(self.cluster.netns_runner(node))
        self._hosts[node] = (container.id, iptables)
        return iptables

    def _tag(self, index: int) -> str:
        return tag(self.run_id, f"s{index}")

    def apply(self, step) -> str:
        p = step.params
        extra: tuple[str, ...] = ()
        if step.kind == "loss":
            extra = ("-m", "statistic", "--mode", "random", "--probability", STAT_PROBABILITY_FORMAT.format(p.p))
        rules = [(dst, ("-s", self.cluster.node_ip(src), *extra)) for src, dst in p.links]
        self._rules[step.index] = rules
        self._installed[step.index] = set()
        receivers = sorted({dst for dst, _ in rules})
        waiting = [node for node in receivers if not self._install(step.index, node)]
        note = f"iptables: {len(rules)} DROP rule(s) at {','.join(receivers)}"
        if waiting:
            note += f"; {','.join(waiting)} later (not running now)"
        return note

    def _install(self, index: int, node: str) -> bool:
        iptables = self._iptables(node)
        if iptables is None:
            return False
        comment = self._tag(index)
        for dst, matches in self._rules[index]:
            if dst == node:
                iptables.add("INPUT", matches, ["-j", "DROP"], comment)
                self.commands += 1
        self._installed[index].add(node)
        return True

    def remove(self, step_index: int) -> bool:
        rules = self._rules.pop(step_index, None)
        installed = self._installed.pop(step_index, set())
        if rules is None:
            return False
        for node in sorted(installed):
            iptables = self._iptables(node)
            if iptables is None:
                continue  # the namespace (and the rules) went with the container
            iptables.delete_tagged(self._tag(step_index), exact=True)
            self.commands += 1
        return True

    def node_restarted(self, node: str) -> None:
        self._hosts.pop(node, None)
        for index in list(self._rules):
            self._installed[index].discard(node)
            if any(dst == node for dst, _ in self._rules[index]):
                self._install(index, node)

    def node_resumed(self, node: str) -> None:
        for index in list(self._rules):
            if node not in self._installed[index] and any(dst == node for dst, _ in self._rules[index]):
                self._install(index, node)

    def active(self) -> list[int]:
        return sorted(self._rules)

    def close(self) -> list[int]:
        removed = self.active()
        errors = []
        for index in removed:
            try:
                self.remove(index)
            except Exception as exc:  # a container that went away meanwhile took its rules along
                errors.append(f"#{index}: {exc}")
        # Belt and braces: nothing tagged with this cluster may stay in a namespace that lives on.
        for node in list(self._hosts):
            iptables = self._iptables(node)
            if iptables is not None:
                try:
                    iptables.delete_tagged(f"{TAG_PREFIX}:{self.run_id}:")
                except Exception as exc:
                    errors.append(f"{node}: {exc}")
        if errors:
            raise RuntimeError("; ".join(errors))
        return removed

    def rules_at(self, node: str) -> list[str]:
        """The comments of this cluster's rules in a node's namespace (for tests)."""
        iptables = self._iptables(node)
        if iptables is None:
            return []
        return [r.comment for r in iptables.tagged(f"{TAG_PREFIX}:{self.run_id}:") if r.comment is not None]


# ---- Toxiproxy ----------------------------------------------------------------------------------

_TOXIPROXY_LOCK = threading.RLock()


class _Requests:
    """Stands in for `requests` inside toxiproxy-python: a timeout on every call, no proxies from
    the environment (the API is on the cluster network), one connection pool."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self.session.trust_env = False

    def get(self, url, **kwargs):
        kwargs.setdefault("timeout", self.timeout_s)
        return self.session.get(url, **kwargs)

    def post(self, url, **kwargs):
        kwargs.setdefault("timeout", self.timeout_s)
        return self.session.post(url, **kwargs)

    def delete(self, url, **kwargs):
        kwargs.setdefault("timeout", self.timeout_s)
        return self.session.delete(url, **kwargs)


class ToxiproxyClient:
    """toxiproxy-python pointed at one server for the duration of each call."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 5.0):
        self.host = host
        self.port = port
        self._requests = _Requests(timeout_s)
        self.calls = 0

    @contextmanager
    def api(self):
        with _TOXIPROXY_LOCK:
            api = toxiproxy.api
            saved = (api.APIConsumer.host, api.APIConsumer.port, api.requests)
            api.APIConsumer.host, api.APIConsumer.port, api.requests = self.host, self.port, self._requests
            try:
                yield toxiproxy.Toxiproxy()
            finally:
                api.APIConsumer.host, api.APIConsumer.port, api.requests = saved
                self.calls += 1

    def create(self, name: str, *, listen: str, upstream: str) -> Proxy:
        with self.api() as server:
            return server.create(upstream=upstream, name=name, listen=listen, enabled=True)

    def proxy(self, name: str) -> Proxy:
        """A handle on a proxy by name (no request; its methods call the API)."""
        return Proxy(name=name, upstream="", enabled=True, listen="")

    def add_toxic(self, proxy: str, *, name: str, type: str, stream: str, toxicity: float, attributes: dict) -> None:
        with self.api():
            self.proxy(proxy).add_toxic(
                name=name, type=type, stream=stream, toxicity=toxicity, attributes=dict(attributes)
            )

    def remove_toxic(self, proxy: str, name: str) -> None:
        with self.api():
            try:
                self.proxy(proxy).destroy_toxic(name)
            except NotFound:
                pass  # gone already: what we wanted

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        with self.api():
            p = self.proxy(proxy)
            p.enable() if enabled else p.disable()

    def toxics(self, proxy: str) -> dict:
        with self.api():
            return self.proxy(proxy).toxics()

    def proxies(self) -> dict:
        with self.api() as server:
            return server.proxies()


class ToxiproxyInjector(FaultInjector):
    """Toxic steps (and, with `partitions`, partitions) on the proxies of a cluster's TCP links."""

    name = "toxiproxy"

    def __init__(self, cluster, *, partitions: bool):
        """`cluster` needs toxiproxy_api (host, port), proxies {(src, dst): (name, port)} and options."""
        self.cluster = cluster
        self.partitions = partitions
        host, port = cluster.toxiproxy_api
        self.api = ToxiproxyClient(host, port, timeout_s=cluster.options.admin_timeout_s)
        self._toxics: dict[int, list[tuple[str, str]]] = {}  # step -> [(proxy, toxic name)]
        self._downs: dict[int, list[str]] = {}  # step -> proxies it disabled
        self._down_count: dict[str, int] = {}

    def handles(self, step) -> bool:
        return step.kind == "toxic" or (self.partitions and step.kind == "partition")

    def _proxy(self, src: str, dst: str) -> str:
        return self.cluster.proxies[(src, dst)][0]

    def targets(self, links) -> list[tuple[str, str]]:
        """(proxy, stream) pairs that carry the traffic of the given directed links."""
        out = []
        for src, dst in links:
            for target in ((self._proxy(src, dst), "upstream"), (self._proxy(dst, src), "downstream")):
                if target not in out:
                    out.append(target)
        return out

    def apply(self, step) -> str:
        p = step.params
        if step.kind == "partition":
            kind, attributes, toxicity = "timeout", {"timeout": 0}, 1.0
        else:
            kind, attributes, toxicity = p.type, p.attrs, p.toxicity
            if kind == "jitter":
                kind = "latency"
        if kind == "down":
            proxies = sorted({self._proxy(a, b) for src, dst in p.links for a, b in ((src, dst), (dst, src))})
            self._downs[step.index] = []
            for proxy in proxies:
                self._down_count[proxy] = self._down_count.get(proxy, 0) + 1
                if self._down_count[proxy] == 1:
                    self.api.set_enabled(proxy, False)
                self._downs[step.index].append(proxy)
            return f"toxiproxy: {len(proxies)} proxies down ({', '.join(proxies)})"
        added: list[tuple[str, str]] = []
        self._toxics[step.index] = added
        for proxy, stream in self.targets(p.links):
            name = f"s{step.index}-{stream}"
            self.api.add_toxic(proxy, name=name, type=kind, stream=stream, toxicity=toxicity, attributes=attributes)
            added.append((proxy, name))
        what = "blackhole (timeout 0)" if step.kind == "partition" else kind
        return f"toxiproxy: {what} on {len(added)} proxy stream(s)"

    def remove(self, step_index: int) -> bool:
        toxics = self._toxics.pop(step_index, None)
        downs = self._downs.pop(step_index, None)
        if toxics is None and downs is None:
            return False
        for proxy, name in toxics or []:
            self.api.remove_toxic(proxy, name)
        for proxy in downs or []:
            self._down_count[proxy] -= 1
            if self._down_count[proxy] == 0:
                self.api.set_enabled(proxy, True)
        return True

    def active(self) -> list[int]:
        return sorted(set(self._toxics) | set(self._downs))

    def close(self) -> list[int]:
        removed = self.active()
        errors = []
        for index in removed:
            try:
                self.remove(index)
            except Exception as exc:  # the proxy container may be gone; teardown removes it anyway
                errors.append(f"#{index}: {type(exc).__name__}: {exc}")
        if errors:
            raise RuntimeError("; ".join(errors))
        return removed
