"""JGroups nodes on the local and docker backends: one JVM per node (node/jgroups/), driven like
any node. JGroupsNodes holds what both backends share; the docker cluster is
harness/backends/docker/jgroups.py.

What differs from a `python -m splitbrain.node` cluster on the local backend:

- addresses: JGroups' UDP sets the interface of its multicast socket to the bind address, which
  must be an address of an interface; of 127.0.0.0/8 only 127.0.0.1 is one. So every node binds
  127.0.0.1 with a port of its own (drawn per cluster), while the admin APIs keep their
  127.X.Y.N addresses. Each cluster has its own multicast group and cluster name, so clusters
  sharing the loopback never meet;
- the configuration is the JSON of the node contract (node.json), plus the `jgroups` block;
- start() returns once every node answers /health (it has connected) and every node's view lists
  all of them (bounded by the start timeout): the scenario's time 0 is a formed group, as for a
  static cluster;
- at the end of a run no node leaves the group (POST /leave_on_stop false), as with a membership
  protocol, so views_agree judges the run, not its teardown.
"""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from splitbrain.harness.poll import EventuallyTimeout, eventually
from splitbrain.harness.scenario import Scenario
from splitbrain.node.jgroups import launch

from .admin import AdminClient, AdminError
from .base import ClusterOptions, NodeHandle, NodeStartError, NodeState
from .local import LocalCluster, _port_free, node_ip

VIEW_POLL_S = 0.1


class JGroupsNodes:
    """What JGroups clusters share on every backend: the node's configuration (the `jgroups`
    block, the cluster's multicast group and JGroups cluster name), a start that returns once the
    group is formed, and a stop that leaves the group as it is. Mixed in before the backend's
    cluster class, whose node_config, start and stop_all it extends."""

    installs_views = True  # the stack's GMS makes the views (harness.testlib posts none)
    scenario: Scenario
    options: ClusterOptions
    nodes: dict[str, NodeHandle]
    token: str
    mcast_group: str
    if TYPE_CHECKING:  # the backend cluster's

        def check_alive(self) -> None: ...

        def admin(self, name: str) -> AdminClient: ...

    @property
    def jar(self) -> str:
        return (self.scenario.jgroups or {}).get("jar") or launch.DEFAULT_JAR

    def jgroups_config(self, stack: str | None) -> dict:
        """The `jgroups` block of a node's configuration, with the stack as the node will read it."""
        # One cluster name per cluster: two runs on one host never merge.
        return {"stack": stack, "cluster": f"splitbrain-{self.token[:12]}"}

    def node_config(self, name, *, bind, admin, peers, events, incarnation) -> dict:
        config = super().node_config(  # type: ignore[misc]
            name, bind=bind, admin=admin, peers=peers, events=events, incarnation=incarnation
        )
        config["mcast_group"] = self.mcast_group
        config["jgroups"] = self.jgroups_config((self.scenario.jgroups or {}).get("stack"))
        return config

    def start(self) -> None:
        super().start()  # type: ignore[misc]
        self._wait_full_view()

    def _wait_full_view(self) -> None:
        """Until every node's view lists every node (JGroups' discovery and merges take a while)."""
        everyone = sorted(self.nodes)
        last: dict[str, object] = {}

        def views() -> bool:
            self.check_alive()
            full = True
            for name in everyone:
                try:
                    membership = self.admin(name).state().get("membership")
                except AdminError as exc:
                    last[name] = str(exc)
                    full = False
                    continue
                last[name] = membership
                if not membership or sorted(membership.get("members") or ()) != everyone:
                    full = False
            return full

        try:
            eventually(views, timeout=self.options.start_timeout_s, interval=VIEW_POLL_S)
        except EventuallyTimeout:
            seen = "; ".join(f"{n}: {v}" for n, v in last.items())
            raise NodeStartError(
                f"the JGroups nodes did not form one view of {', '.join(everyone)} within "
                f"{self.options.start_timeout_s:g}s (last seen: {seen})"
            ) from None

    def stop_all(self) -> list[str]:
        for name, handle in self.nodes.items():
            if handle.state is NodeState.RUNNING:
                try:
                    self.admin(name).leave_on_stop(False)
                except AdminError:
                    pass
        return super().stop_all()  # type: ignore[misc]


class JGroupsLocalCluster(JGroupsNodes, LocalCluster):
    backend_name = "local"

    def _pick_subnet(self, avoid=frozenset()) -> tuple[int, int]:
        subnet = super()._pick_subnet(avoid)
        n = len(self.scenario.nodes)
        rng = random.SystemRandom()
        for _ in range(100):
            base = rng.randrange(20000, 60000 - n)
            if all(_port_free("127.0.0.1", base + i, socket.SOCK_DGRAM) for i in range(n)):
                self._ports = [base + i for i in range(n)]
                return subnet
        raise NodeStartError("no free run of UDP ports on 127.0.0.1 for the JGroups nodes after 100 tries")

    def _make_handles(self) -> None:
        x, y = self.subnet
        self.nodes = {}
        self._admins = {}
        for i, name in enumerate(self.scenario.nodes):
            self.nodes[name] = NodeHandle(
                name=name,
                address=f"127.0.0.1:{self._ports[i]}",
                admin_url=f"http://{node_ip(x, y, i)}:{self.backend.admin_port}",
            )

    def node_config(self, name, *, bind, admin, peers, events, incarnation) -> dict:
        config = super().node_config(name, bind=bind, admin=admin, peers=peers, events=events, incarnation=incarnation)
        # The local backend derives the admin address from the protocol one; here they differ.
        config["admin"] = self.nodes[name].admin_url.removeprefix("http://")
        return config

    def _command(self, node_dir: Path, config: dict) -> list[str]:
        config_path = node_dir / "node.json"
        config_path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        return launch.command(config_path, self.jar)

    def start(self) -> None:
        why = launch.runtime_problem(self.jar)
        if why:
            raise NodeStartError(why)
        launch.ensure_built(self.jar)
        super().start()
