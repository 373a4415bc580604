"""A ceiling for benchmarks/bench_nakack2.py: stripped CPython members doing a member's work per
multicast, as processes on loopback, so the node's msgs/s can be read against what N Python
processes on the machine's cores can reach at best.

Each member is one process with one UDP socket (large buffers, as the node's) and a plain
select() loop, no asyncio, no layers, no objects per message. Per multicast it does what a
NAKACK2 member must: the sender builds the workload payloads (node.runtime.workload.make_payloads),
numbers it, keeps it for retransmission, encodes it once in the node's wire layout (a frame of
NAKACK2 MSGs in the hot layout: the same bytes on the wire) and sends the frame to each other
member; every receiver parses each message, holds it in its sender's table and delivers it in
seqno order (a count; the node's workload bookkeeping is left out). Flow control is a 13-byte
ack datagram per ACK_EVERY deliveries (cumulative, per sender), which also purges the senders'
and receivers' tables as STABLE would; a sender keeps at most WINDOW multicasts unacked, so
nothing overruns a socket buffer (the ceiling has no retransmission: a loss would stall it, and
the run reports that instead of a number).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import select
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

# Appended, not inserted: bench_nakack2 may have put another tree (BENCH_TREE) first.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from splitbrain.node.runtime.workload import make_payloads

BATCH = 1024  # multicasts a member sends per loop turn at most (the node's STREAM_BATCH)
WINDOW = 16_384  # unacked multicasts per sender at most
ACK_EVERY = 2_048
MAX_FRAME = 60_000  # the node's bundle_max_bytes
_MSG = struct.Struct("!BBHBQI")  # nhdr=1, proto_id=4, body length 9, type MSG, seqno, payload length
_ACK = struct.Struct("!BIQ")  # 0xAC, the acking member's index, cumulative seqno
_COUNT = struct.Struct("!H")
_NAKACK2_ID = 4


def _big_buffers(sock: socket.socket) -> None:
    for force, plain in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, 16 * 1024 * 1024)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, 16 * 1024 * 1024)


def _name(name: str) -> bytes:
    raw = name.encode()
    return bytes((len(raw),)) + raw


def member(me: int, names: list[str], socks: list[socket.socket], count: int, size: int, start_at: float, out: Any):
    """One member: multicast `count` messages, deliver everyone's; report (t_done, cpu s) or an error."""
    sock = socks[me]
    name = names[me]
    n = len(names)
    peers = [(i, socks[i].getsockname()) for i in range(n) if i != me]
    # The frame head per destination: version, flags, src, dest (the count follows).
    heads = {i: b"\x01\x00" + _name(name) + _name(names[i]) for i, _ in peers}
    index_of = {names[i]: i for i in range(n)}
    prefix = f"{name}:1:".encode()
    kept: dict[int, bytes] = {}  # own multicasts, until every member acked them
    acked = [0] * n  # per member: how many of ours it acked
    expected = [1] * n  # per sender: next seqno to deliver
    tables: list[dict[int, bytes]] = [{} for _ in range(n)]
    last_ack = [0] * n
    purged = [0] * n  # per sender: its table is empty up to here
    kept_low = 0  # our kept multicasts are gone up to here
    seqno = 0
    delivered = count  # our own multicasts are delivered by loopback as they are sent
    total = n * count
    deadline = start_at + 300
    while time.time() < start_at:
        time.sleep(0.001)
    t_done = 0.0
    while True:
        room = WINDOW - (seqno - min(acked[i] for i, _ in peers))
        k = min(BATCH, count - seqno, room)
        if k > 0:
            raws = []
            for payload in make_payloads(prefix, seqno + 1, seqno + k, size):
                seqno += 1
                kept[seqno] = payload
                raws.append(_MSG.pack(1, _NAKACK2_ID, 9, 0, seqno, len(payload)) + payload)
            frames: list[list[bytes]] = [[]]
            used = 0
            for raw in raws:
                if used + len(raw) > MAX_FRAME - 300 and frames[-1]:
                    frames.append([])
                    used = 0
                frames[-1].append(raw)
                used += len(raw)
            for chunk in frames:
                body = _COUNT.pack(len(chunk)) + b"".join(chunk)
                for i, addr in peers:
                    sock.sendto(heads[i] + body, addr)
        if delivered >= total and seqno >= count:
            t_done = t_done or time.time()
            break
        if time.time() > deadline:
            out.put((me, "error", f"{name}: delivered {delivered} of {total} in 300 s (a datagram was lost?)"))
            return
        if k <= 0 or seqno >= count:
            select.select([sock], [], [], 0.05)
        while True:
            try:
                data = sock.recv(65_536)
            except BlockingIOError:
                break
            if data[0] == 0xAC:
                _, who, upto = _ACK.unpack(data)
                if upto > acked[who]:
                    acked[who] = upto
                    low = min(acked[i] for i, _ in peers)
                    for s in range(kept_low + 1, low + 1):
                        del kept[s]
                    kept_low = max(kept_low, low)
                continue
            pos = 3 + data[2]
            src = index_of[data[3 : 3 + data[2]].decode()]
            pos += 1 + data[pos]
            (m,) = _COUNT.unpack_from(data, pos)
            pos += 2
            table = tables[src]
            nxt = expected[src]
            for _ in range(m):
                _n, _pid, _len, _type, s, plen = _MSG.unpack_from(data, pos)
                pos += 17
                table[s] = data[pos : pos + plen]
                pos += plen
            while nxt in table:
                nxt += 1
            delivered += nxt - expected[src]
            expected[src] = nxt
            if nxt - 1 - last_ack[src] >= ACK_EVERY or nxt - 1 == count:
                last_ack[src] = nxt - 1
                sock.sendto(_ACK.pack(0xAC, me, nxt - 1), socks[src].getsockname())
                # What everyone has (as far as this member knows, its own ack) is purged, as STABLE does.
                for s in range(purged[src] + 1, nxt - ACK_EVERY):
                    del table[s]
                purged[src] = max(purged[src], nxt - ACK_EVERY - 1)
        if delivered >= total and not t_done:
            t_done = time.time()
    # Keep answering nothing more: every ack we owe was sent with the last delivery.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((me, t_done, usage.ru_utime + usage.ru_stime))


def run(n: int, count: int, size: int = 100, host: str = "127.0.0.1") -> dict[str, float]:
    """n members each multicasting `count` messages of `size` bytes; msgs/s delivered at every
    member and the busiest member's CPU us per multicast."""
    ctx = mp.get_context("fork")
    names = [chr(ord("A") + i) for i in range(n)]
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _big_buffers(s)
        s.bind((host, 0))
        s.setblocking(False)
        socks.append(s)
    out = ctx.Queue()
    start_at = time.time() + 0.5
    procs = [ctx.Process(target=member, args=(i, names, socks, count, size, start_at, out)) for i in range(n)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=400) for _ in range(n)]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        for s in socks:
            s.close()
    errors = [r[2] for r in results if r[1] == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    elapsed = max(r[1] for r in results) - start_at
    mcasts = n * count
    return {
        "msgs_per_s": mcasts / elapsed,
        "elapsed_s": elapsed,
        "us_per_mcast": max(r[2] for r in results) / mcasts * 1e6,
        "all_us_per_mcast": sum(r[2] for r in results) / mcasts * 1e6,
    }


if __name__ == "__main__":
    for nodes in (3, 5):
        r = run(nodes, int(os.environ.get("COUNT", "30000")))
        print(
            f"ceiling {nodes} members: {r['msgs_per_s']:,.0f} msgs/s, busiest {r['us_per_mcast']:.2f} us CPU/mcast, "
            f"all members {r['all_us_per_mcast']:.2f} us"
        )
