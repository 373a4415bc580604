"""The cluster network: a user-defined bridge on a /24 of its own.

Each cluster's network gets a /24 drawn from 198.18.0.0/15 (the benchmarking range, RFC 2544,
never a real destination; the /24 docker-compose.yml uses by default is avoided) that no other
docker network overlaps; the engine refuses overlapping pools atomically, and a refusal draws
another. The gateway is .1, the Toxiproxy container .2, node i .(10 + i); every node listens on the
same ports (7800 protocol, 7900 admin) on its own address, so clusters share no port. A restarted
node gets a new container on the same address (empty state, incarnation + 1).
"""

from __future__ import annotations

import ipaddress
import random

import docker.errors
from docker.types import EndpointConfig, IPAMConfig, IPAMPool

from ..base import BackendError, signals_deferred

PROTOCOL_PORT = 7800
ADMIN_PORT = 7900

SUBNET_POOL = ipaddress.ip_network("198.18.0.0/15")
RESERVED_SUBNETS = (ipaddress.ip_network("198.18.77.0/24"),)  # docker-compose.yml's default
NETWORK_ATTEMPTS = 20
MAX_NODES = 240  # .10 to .249 of the cluster's /24
GATEWAY_HOST = 1
TOXIPROXY_HOST = 2
FIRST_NODE_HOST = 10


def taken_subnets(client) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The subnets a new cluster network must not overlap: every docker network's, and the reserved."""
    taken = list(RESERVED_SUBNETS)
    for net in client.networks.list():
        for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
            try:
                taken.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
            except ValueError:
                continue
    return taken


def create_network(client, name: str, *, labels: dict[str, str], attempts: int = NETWORK_ATTEMPTS):
    """A bridge network called `name` on a free /24 of SUBNET_POOL: (network, subnet)."""
    rng = random.SystemRandom()
    n24 = SUBNET_POOL.num_addresses // 256
    last_error = ""
    for _attempt in range(attempts):
        taken = taken_subnets(client)
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
                network = client.networks.create(name, driver="bridge", ipam=ipam, check_duplicate=True, labels=labels)
        except docker.errors.APIError as exc:
            text = str(exc)
            if "overlap" in text.lower() or "pool" in text.lower() or "in use" in text.lower():
                last_error = text
                continue  # another cluster took it between our look and our create
            raise BackendError(f"cannot create the cluster network {name}: {exc}") from None
        return network, subnet
    raise BackendError(f"could not create a network with a free subnet after {attempts} attempts (last: {last_error})")


def host_address(subnet: ipaddress.IPv4Network, host: int) -> str:
    """The address of host number `host` (GATEWAY_HOST, TOXIPROXY_HOST, FIRST_NODE_HOST + i)."""
    return str(subnet.network_address + host)


def endpoint(client, network_name: str, ip: str) -> dict:
    """networking_config for a container with the fixed address `ip` on the cluster network."""
    return {network_name: EndpointConfig(client.api._version, ipv4_address=ip)}
