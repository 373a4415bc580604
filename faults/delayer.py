"""`python -m splitbrain.faults.delayer`: hold packets from an NFQUEUE for a delay (+ jitter), then let them go.

Where the kernel has no netem, this is the packet-level delay: an iptables rule sends the chosen
packets to queue N (`-j NFQUEUE --queue-num N --queue-bypass`, made by faults/nfqueue.py) and this
process, started in the same network namespace, receives each one, keeps its verdict for
delay +- jitter (uniform, seeded), and then accepts it. With jitter, packets overtake each other,
as they do under netem's jitter. `--queue-bypass` on the rule means that when this process is not
bound (not started yet, or dead) packets pass undelayed instead of being dropped.

Protocol with the parent: one JSON line on stdout when the queue is bound
({"ready": true, "queue": N, "pid": ...}); SIGTERM or SIGINT (or --duration-s) ends it: held
packets are released at once, a last JSON line gives the counts. It also stops when its parent
process goes away, so a crashed harness leaves no delayer behind. Exit codes: 0 done, 1 could not
bind (not root, no netfilterqueue, queue taken), 2 bad arguments.

Needs the `netfilterqueue` package (build: Debian's libnetfilter-queue-dev) and CAP_NET_ADMIN.
Single-threaded: select() on the queue's netlink socket with the time to the next release as timeout.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import select
import signal
import sys
import time


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m splitbrain.faults.delayer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True, help="NFQUEUE number (0-65535)")
    parser.add_argument("--delay-ms", type=float, required=True, help="mean delay per packet")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- jitter (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the jitter")
    parser.add_argument("--max-held", type=int, default=20000, help="kernel queue length (packets)")
    parser.add_argument("--duration-s", type=float, default=None, help="exit after this long")
    args = parser.parse_args(argv)
    if not 0 <= args.queue <= 65535:
        parser.error("--queue must be in 0..65535")
    if args.delay_ms < 0 or args.jitter_ms < 0 or args.jitter_ms > args.delay_ms:
        parser.error("need 0 <= --jitter-ms <= --delay-ms")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        from netfilterqueue import COPY_META, NetfilterQueue
    except ImportError as exc:
        print(json.dumps({"ready": False, "error": f"netfilterqueue is not importable: {exc}"}), flush=True)
        return 1

    rng = random.Random(args.seed)
    held: list = []  # (release time, order, packet)
    order = itertools.count()
    counts = {"packets": 0, "released": 0}
    stop = {"now": False}

    def on_packet(pkt) -> None:
        delay_s = (args.delay_ms + rng.uniform(-args.jitter_ms, args.jitter_ms)) / 1000.0
        heapq.heappush(held, (time.monotonic() + delay_s, next(order), pkt))
        counts["packets"] += 1

    def on_signal(signum, frame) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    nfq = NetfilterQueue()
    try:
        # COPY_META: the payload stays in the kernel; we only decide when it may go.
        nfq.bind(args.queue, on_packet, max_len=args.max_held, mode=COPY_META)
    except OSError as exc:
        print(json.dumps({"ready": False, "error": f"cannot bind queue {args.queue}: {exc}"}), flush=True)
        return 1
    fd = nfq.get_fd()
    os.set_blocking(fd, False)
    print(json.dumps({"ready": True, "queue": args.queue, "pid": os.getpid()}), flush=True)
    end = time.monotonic() + args.duration_s if args.duration_s is not None else None
    # An orphan would hold its queue forever: stop when the process that started us is gone.
    parent = os.getppid()
    try:
        while not stop["now"] and (end is None or time.monotonic() < end) and os.getppid() == parent:
            now = time.monotonic()
            while held and held[0][0] <= now:
                heapq.heappop(held)[2].accept()
                counts["released"] += 1
            wait = 0.2
            if held:
                wait = min(wait, max(0.0, held[0][0] - time.monotonic()))
            try:
                readable, _, _ = select.select([fd], [], [], wait)
            except InterruptedError:
                continue
            if readable:
                nfq.run(block=False)
    finally:
        while held:
            try:
                heapq.heappop(held)[2].accept()
                counts["released"] += 1
            except RuntimeError:
                break
        nfq.unbind()
        print(json.dumps({"done": True, **counts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
