"""Event-log lines written by a node under a garbage flood: bounded count and time.

One node process (`python -m splitbrain.node`, UDP, event log on) on a fresh loopback address, its peer
never started. This script sends it `--count` datagrams (at most for `--seconds`), a mix of
random bytes (reason "malformed"), well-formed frames for another node ("wrong_dest") and
well-formed frames from a node it does not know ("unknown_src"). Then it reads the node's
/metrics (frames in, drops by reason), stops the node (SIGTERM, which flushes pending counts) and
reads its events.jsonl: lines, bytes, drop lines, and the sum of the drops' `count` (1 for a drop
without one), which must equal the drops /metrics counted.

Run: .venv/bin/python benchmarks/bench_flood.py [--count 200000] [--seconds 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.node import wire
from splitbrain.node.message import Message
from splitbrain.node.runtime.testing import NodeProcess, pair_configs, wait_for

BURST = 500  # datagrams between two looks at the node's /metrics (pacing by its own speed)


def garbage(rng: random.Random, n: int) -> list[bytes]:
    """n datagrams: a third random bytes, a third for node X, a third from node Q."""
    wrong_dest = wire.encode_frame("A", [Message("A", "X", b"payload")])
    unknown_src = wire.encode_frame("Q", [Message("Q", "B", b"payload")])
    kinds = [lambda: rng.randbytes(rng.randrange(1, 200)), lambda: wrong_dest, lambda: unknown_src]
    return [kinds[i % 3]() for i in range(n)]


def metric(text: str, name: str, **labels: str) -> float:
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == want)


def run(count: int, seconds: float, workdir: Path) -> dict:
    _cfg_a, cfg_b = pair_configs(workdir, "udp")
    node = NodeProcess(cfg_b, workdir / "run")
    host, port = cfg_b["bind"].rsplit(":", 1)
    datagrams = garbage(random.Random(16), count)
    sent = 0
    try:
        node.start()
        client = node.client()
        t0 = time.monotonic()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            while sent < count and time.monotonic() - t0 < seconds:
                for data in datagrams[sent : sent + BURST]:
                    sock.sendto(data, (host, int(port)))
                sent = min(count, sent + BURST)
                client.get("/health")
        flood_s = time.monotonic() - t0

        def all_counted() -> str | None:
            text = client.get("/metrics")
            return text if metric(text, "splitbrain_frames_total", direction="in") >= sent else None

        text = wait_for(all_counted, 10, what="every datagram counted")
        received = metric(text, "splitbrain_frames_total", direction="in")
        dropped = sum(
            metric(text, "splitbrain_dropped_frames_total", direction="in", reason=r)
            for r in ("malformed", "wrong_dest", "unknown_src")
        )
        assert node.stop() == 0, node.stderr_tail()
    finally:
        node.kill()
    path = Path(cfg_b["events"])
    events = [json.loads(line) for line in path.read_text().splitlines()]
    drops = [ev for ev in events if ev["kind"] == "drop"]
    return {
        "sent": sent,
        "flood_s": round(flood_s, 2),
        "frames_in": int(received),
        "dropped_metric": int(dropped),
        "lines": len(events),
        "bytes": path.stat().st_size,
        "drop_lines": len(drops),
        "drop_count_sum": sum(ev.get("count", 1) for ev in drops),
    }


@recorded(
    "bench_flood",
    goals={"": "a flood of garbage leaves few event-log lines, and every dropped datagram is counted once"},
)
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000, help="garbage datagrams to send (at most)")
    ap.add_argument("--seconds", type=float, default=20.0, help="stop sending after this long")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        result = run(args.count, args.seconds, Path(tmp))
    ok = result["drop_count_sum"] == result["dropped_metric"] == result["frames_in"]
    print("# Event-log lines under a garbage flood\n")
    print("| " + " | ".join(result) + " | counts add up |")
    print("| " + " | ".join("---" for _ in range(len(result) + 1)) + " |")
    print("| " + " | ".join(str(v) for v in result.values()) + f" | {'yes' if ok else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
