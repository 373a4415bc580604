"""UDP delay and jitter without netem: an NFQUEUE rule plus `python -m splitbrain.faults.delayer`.

Runs where the netfilterqueue package imports and namespaces can be made (root); skips with the
reason otherwise. One-way latency is measured in-process: sender and receiver share a clock.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time

import pytest

from splitbrain.faults.iptables import Host, Iptables, IptablesFaults
from splitbrain.faults.netns import Lab, can_make_namespaces, netns, socket_in, udp_one_way
from splitbrain.faults.nfqueue import NfqueueDelay, netfilterqueue_importable

_CAN, _WHY = can_make_namespaces()
_NFQ, _NFQ_WHY = netfilterqueue_importable()
A_IP, B_IP = "198.18.0.1", "198.18.0.2"


@pytest.fixture
def pair():
    if not _CAN:
        pytest.skip(f"needs root and ip netns: {_WHY}")
    if not _NFQ:
        pytest.skip(_NFQ_WHY)
    lab = Lab()
    try:
        a, b = lab.add(), lab.add()
        lab.link(a, b, A_IP, B_IP)
        faults = IptablesFaults([Host("A", A_IP, netns(a)), Host("B", B_IP, netns(b))], run_id="nfq")
        delays = NfqueueDelay(faults, {"A": netns(a), "B": netns(b)})
        try:
            yield lab, a, b, faults, delays
        finally:
            try:
                delays.close()
            finally:
                faults.cleanup()
    finally:
        lab.close()


def one_way_latencies_ms(src_ns: str, dst_ns: str, dst_ip: str, count: int = 100, port: int = 47300) -> list[float]:
    """Send `count` timestamped datagrams 5 ms apart; the receiver (a thread) notes each delay."""
    rx, tx = socket_in(dst_ns), socket_in(src_ns)
    rx.bind((dst_ip, port))
    rx.settimeout(1.0)
    got: list[float] = []

    def receive():
        for _ in range(count):
            try:
                data = rx.recv(64)
            except OSError:
                return
            got.append((time.monotonic() - float(data)) * 1000)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        for _ in range(count):
            tx.sendto(repr(time.monotonic()).encode(), (dst_ip, port))
            time.sleep(0.005)
        thread.join(5)
    finally:
        rx.close()
        tx.close()
    return got


def test_delay_adds_roughly_the_delay(pair):
    """50 ms +- 10 ms on A->B: every datagram arrives 40-60 ms late (+ scheduling), B->A is untouched."""
    lab, a, b, faults, delays = pair
    before = one_way_latencies_ms(a, b, B_IP)
    assert len(before) == 100 and statistics.median(before) < 5
    fid = delays.delay("B", 50, jitter_ms=10, src="A", seed=7)
    delayed = one_way_latencies_ms(a, b, B_IP, port=47301)
    assert len(delayed) == 100, "the delayer must not lose packets"
    assert min(delayed) >= 39, delayed
    assert 42 <= statistics.median(delayed) <= 70, statistics.median(delayed)
    assert max(delayed) <= 160  # generous: 2 busy cores
    assert statistics.median(one_way_latencies_ms(b, a, A_IP, count=30, port=47302)) < 5
    delays.heal(fid)
    after = one_way_latencies_ms(a, b, B_IP, count=30, port=47303)
    assert len(after) == 30 and statistics.median(after) < 5
    assert Iptables(netns(b)).tagged() == []


def test_heal_and_close_leave_no_rule_and_no_process(pair):
    """close() removes the NFQUEUE rules first, then ends the delayers (no orphan process)."""
    lab, a, b, faults, delays = pair
    delays.delay("B", 20)
    procs = [d.proc for d in delays.delays.values()]
    assert Iptables(netns(b)).tagged()
    delays.close()
    assert Iptables(netns(b)).tagged() == []
    assert all(p.poll() is not None for p in procs)
    assert udp_one_way(a, b, B_IP) == 200


def test_queue_bypass_keeps_traffic_flowing_when_the_delayer_dies(pair):
    """--queue-bypass: with the delayer killed, datagrams pass undelayed instead of vanishing."""
    lab, a, b, faults, delays = pair
    fid = delays.delay("B", 30)
    proc = delays.delays[fid].proc
    proc.kill()
    proc.wait(5)
    assert udp_one_way(a, b, B_IP) == 200
    delays.heal(fid)


def test_delayer_rejects_bad_arguments():
    """The delayer's exit code 2 and message for nonsense (jitter larger than the delay)."""
    proc = subprocess.run(
        [sys.executable, "-m", "splitbrain.faults.delayer", "--queue", "1", "--delay-ms", "5", "--jitter-ms", "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "jitter" in proc.stderr
