"""Does a cluster's docker bridge carry IP multicast? Two short-lived containers find out.

A scenario with `ip_multicast: true` needs every node's datagrams to the group to cross the
bridge to the other containers. Each node proves at start only that its own datagram loops back
inside its namespace, which says nothing about the bridge (IGMP snooping, a filtering rule, a
network driver that drops multicast). So before the nodes start, a receiver joins the cluster's
group on its address of the cluster network and a sender in another container sends to it for
PROBE_S; the run is refused (exit 2) when nothing arrives, never assumed to work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import docker.errors
import requests

from ..base import signals_deferred
from .cleanup import remove_container
from .network import FIRST_NODE_HOST, MAX_NODES, endpoint, host_address

if TYPE_CHECKING:
    from .cluster import DockerCluster

PROBE_S = 3.0
# The two addresses above the nodes' range (.10 to .249) of the cluster's /24.
RECEIVER_HOST = FIRST_NODE_HOST + MAX_NODES
SENDER_HOST = RECEIVER_HOST + 1

_RECEIVER = """
import socket, struct, sys
group, port, ip, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((group, port))
mreq = struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(ip))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
s.settimeout(wait)
try:
    s.recv(64)
except OSError as exc:
    print("nothing received:", exc)
    sys.exit(1)
"""

_SENDER = """
import socket, sys, time
group, port, ip, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((ip, 0))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
end = time.monotonic() + wait
while time.monotonic() < end:
    s.sendto(b"splitbrain probe", (group, port))
    time.sleep(0.05)
"""


def bridge_status(cluster: DockerCluster) -> tuple[bool, str]:
    """(a datagram to the cluster's group crossed its bridge, one line saying what happened)."""
    assert cluster.subnet is not None and cluster.image is not None, "the network and image come first"
    group, port = cluster.mcast_group.rsplit(":", 1)
    client = cluster.client
    containers = []
    try:
        for role, host, script in (("receiver", RECEIVER_HOST, _RECEIVER), ("sender", SENDER_HOST, _SENDER)):
            ip = host_address(cluster.subnet, host)
            with signals_deferred():
                container = client.containers.create(
                    image=cluster.image,
                    entrypoint=["python", "-c", script],
                    command=[group, port, ip, str(PROBE_S)],
                    name=f"{cluster.cluster_id}-mcast-{role}",
                    labels=cluster.labels(f"mcast-{role}"),
                    detach=True,
                    network=cluster.network_name,
                    networking_config=endpoint(client, cluster.network_name, ip),
                    healthcheck={"test": ["NONE"]},
                )
                containers.append(container)
            container.start()
        receiver = containers[0]
        code = receiver.wait(timeout=PROBE_S + 30)["StatusCode"]
        if code == 0:
            return True, f"a datagram to {cluster.mcast_group} crossed the bridge between two containers"
        out = receiver.logs().decode(errors="replace").strip().splitlines()
        return False, f"a receiver on the bridge got nothing sent to {cluster.mcast_group} in {PROBE_S:g} s" + (
            f" ({out[-1]})" if out else ""
        )
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        return False, f"the probe containers failed: {exc}"
    finally:
        for container in containers:
            remove_container(container)
