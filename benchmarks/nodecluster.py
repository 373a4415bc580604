"""Node processes for the throughput benchmarks: a cluster of `python -m splitbrain.node` on unique 127.x.y.z
addresses with a shared epoch and a static full view, the multicast streams they send, and what
the benchmarks read back through the admin API.

A benchmark script puts the tree it measures on sys.path before it imports this module, so the
node code here is that tree's (BENCH_TREE in bench_nakack2.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from splitbrain.node.runtime.testing import NodeProcess, free_port, unique_host, wait_for

NAMES = "ABCDEFGH"


def start_cluster(
    n: int,
    protocol: str,
    config: dict[str, Any],
    workdir: Path,
    transport: str = "udp",
    extra: dict[str, Any] | None = None,
) -> list[NodeProcess]:
    """Members A, B, ... started and given the view of all of them; `extra`: more node keys."""
    hosts = [unique_host() for _ in range(n)]
    ports = [free_port(h) for h in hosts]
    names = NAMES[:n]
    epoch = time.time()
    procs = []
    for i, name in enumerate(names):
        cfg = {
            "name": name,
            "bind": f"{hosts[i]}:{ports[i]}",
            "admin": f"{hosts[i]}:0",
            "peers": {names[j]: f"{hosts[j]}:{ports[j]}" for j in range(n) if j != i},
            "transport": transport,
            "protocol": protocol,
            "event_log": False,
            "epoch": epoch,
            "admin_token": "bench",
            "config": config,
            **(extra or {}),
        }
        procs.append(NodeProcess(cfg, workdir))
    for p in procs:
        p.start()
    for p in procs:
        p.client().post("/view", {"members": list(names)})
    return procs


def stop(procs: list[NodeProcess]) -> None:
    for p in procs:
        p.stop()


def delivered(client, sender: str, stream: int) -> int:
    """How many messages of `sender`'s stream this member delivered."""
    d = client.get("/delivered")["delivered"]
    return d.get(sender, {}).get(str(stream), {}).get("count", 0)


def all_delivered(clients, names, stream: int, count: int) -> bool:
    return all(delivered(c, s, stream) >= count for c in clients for s in names)


def multicast(clients, stream: int, count: int, size: int, rate: int = 0) -> None:
    """Every member multicasts `count` messages of `size` bytes on `stream` (rate 0: at once)."""
    for c in clients:
        c.post("/send", {"to": "*", "count": count, "rate": rate, "size": size, "stream": stream})


def wait_delivered(clients, names, stream: int, count: int, timeout: float, interval: float) -> None:
    """Until every member delivered `count` messages of `stream` from every member (TimeoutError)."""
    wait_for(lambda: all_delivered(clients, names, stream, count), timeout, interval, f"stream {stream} delivered")


def warm_up(clients, names, count: int, size: int) -> None:
    """Stream 0: every member multicasts `count` messages, and every member delivers them all."""
    multicast(clients, 0, count, size)
    wait_delivered(clients, names, 0, count, 120, 0.05)


def stream_span(clients, names, stream: int) -> tuple[float, float]:
    """(when the first member started `stream`, when the last of it was delivered anywhere), on the
    run's clock: deliveries from the members' samples, starts from their streams."""
    last = 0.0
    starts = []
    for c in clients:
        samples = c.get("/samples")["delivered"]
        for s in names:
            pairs = samples.get(s, {}).get(str(stream)) or []
            if pairs:
                last = max(last, max(t for _, t in pairs))
        starts.append(next(s["started"] for s in c.get("/streams")["streams"] if s["stream"] == stream))
    return min(starts), last


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
