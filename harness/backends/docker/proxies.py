"""Toxiproxy for TCP links: the server's API and one proxy per directed link.

With transport tcp every directed link X->Y is routed through a proxy `X-to-Y` on the cluster's
Toxiproxy container (X's peer address for Y is the proxy), unless the injector is iptables. The
container runs the Toxiproxy-compatible server of the node image (`python -m splitbrain.faults.toxiproxy`);
see harness/backends/injectors.py for which fault step goes where.
"""

from __future__ import annotations

import requests

from splitbrain.harness.poll import EventuallyTimeout, eventually

from ..base import NodeStartError
from .files import container_tail
from .network import PROTOCOL_PORT

TOXIPROXY_PORT = 8474
PROXY_PORT_BASE = 21000


def wait_until_up(container, api: tuple[str, int], timeout_s: float) -> None:
    """Poll GET /version of the Toxiproxy server in `container` until it answers; NodeStartError
    (with the container's output) when it exits or stays silent for timeout_s."""
    session = requests.Session()
    session.trust_env = False
    last = "no answer yet"

    def up() -> bool:
        nonlocal last
        try:
            resp = session.get(f"http://{api[0]}:{api[1]}/version", timeout=2)
            if resp.status_code == 200:
                return True
            last = f"HTTP {resp.status_code}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        container.reload()
        if container.status in ("exited", "dead"):
            raise NodeStartError(
                f"the Toxiproxy container exited with {container.attrs['State'].get('ExitCode')}:"
                f"\n{container_tail(container)}"
            )
        return False

    try:
        eventually(up, timeout=timeout_s, interval=0.1)
    except EventuallyTimeout:
        raise NodeStartError(
            f"the Toxiproxy container did not answer GET /version within "
            f"{timeout_s:g}s (last: {last}):\n{container_tail(container)}"
        ) from None
    finally:
        session.close()


def create_proxies(
    api: tuple[str, int], ips: dict[str, str], *, timeout_s: float
) -> dict[tuple[str, str], tuple[str, int]]:
    """A proxy `X-to-Y` for every directed link between the nodes of `ips` (name -> address),
    listening on its own port from PROXY_PORT_BASE on; returns (src, dst) -> (proxy name, port)."""
    from ..injectors import ToxiproxyClient  # the toxiproxy client library only when links are proxied

    client = ToxiproxyClient(*api, timeout_s=timeout_s)
    proxies = {}
    port = PROXY_PORT_BASE
    for src in ips:
        for dst in ips:
            if src == dst:
                continue
            name = f"{src}-to-{dst}"
            client.create(name, listen=f"0.0.0.0:{port}", upstream=f"{ips[dst]}:{PROTOCOL_PORT}")
            proxies[(src, dst)] = (name, port)
            port += 1
    return proxies
