"""tc: netem detection (reported, never assumed), tbf and htb bandwidth limits, heal and cleanup.

Namespaces are made per test and deleted in `finally` (Lab). Rates are measured with a TCP stream
between two namespaces for about a second, with generous bounds (2 busy cores).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from splitbrain.faults import netem
from splitbrain.faults.netem import HANDLE, Shaper, Unavailable, detect_netem, netem_args
from splitbrain.faults.netns import Lab, can_make_namespaces, netns, socket_in, udp_one_way

_CAN, _WHY = can_make_namespaces()
needs_netns = pytest.mark.skipif(not _CAN, reason=f"needs root and ip netns: {_WHY}")
A_IP, B_IP, C_IP = "198.18.0.1", "198.18.0.2", "198.18.1.3"


@pytest.fixture
def trio():
    """a-b and a-c veth links in fresh namespaces (a's devices: veth0 to b, veth1 to c)."""
    if not _CAN:
        pytest.skip(f"needs root and ip netns: {_WHY}")
    lab = Lab()
    try:
        a, b, c = lab.add(), lab.add(), lab.add()
        lab.link(a, b, A_IP, B_IP)
        lab.link(a, c, "198.18.1.1", C_IP)
        yield lab, a, b, c
    finally:
        lab.close()


def tcp_rate_mbit(src_ns: str, dst_ns: str, dst_ip: str, seconds: float = 1.5, port: int = 47100) -> float:
    """Mbit/s of one TCP stream src -> dst, counted at the receiver after the first byte."""
    server = socket_in(dst_ns, type=socket.SOCK_STREAM)
    client = socket_in(src_ns, type=socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((dst_ip, port))
    server.listen(1)
    server.settimeout(5)
    result = {}

    def receive():
        conn, _ = server.accept()
        conn.settimeout(2)
        total, start = 0, None
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                now = time.monotonic()
                if start is None:
                    start = now
                elif now - start >= seconds:
                    break
                else:
                    total += len(data)
        except TimeoutError:
            pass
        finally:
            conn.close()
        result["mbit"] = total * 8 / 1e6 / seconds

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        client.connect((dst_ip, port))
        client.settimeout(0.5)
        chunk = b"x" * 16384
        end = time.monotonic() + seconds + 0.5
        while time.monotonic() < end and thread.is_alive():
            try:
                client.send(chunk)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                break
    finally:
        client.close()
        thread.join(10)
        server.close()
    return result.get("mbit", 0.0)


# ---- without root ----------------------------------------------------------------------------------------


def test_netem_args_speak_the_vocabulary():
    """delay+jitter, loss, duplicate, reorder map onto netem's own words."""
    assert netem_args(delay_ms=50, jitter_ms=10) == ["delay", "50ms", "10ms"]
    assert netem_args(loss=0.2) == ["loss", "random", "20%"]
    assert netem_args(duplicate=0.01, reorder=0.25, reorder_gap=5) == [
        "delay",
        "1ms",
        "duplicate",
        "1%",
        "reorder",
        "25%",
        "gap",
        "5",
    ]
    with pytest.raises(ValueError):
        netem_args()
    with pytest.raises(ValueError):
        netem_args(loss=1.5)


# ---- in namespaces ---------------------------------------------------------------------------------------


@needs_netns
def test_netem_detection_matches_a_real_trial(trio):
    """detect_netem agrees with adding a netem qdisc by hand, and says why when it is missing."""
    lab, a, b, c = trio
    tried = lab.run(b, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
    if tried.ok:
        lab.run(b, ["tc", "qdisc", "del", "dev", "lo", "root"])
    detected = detect_netem()
    assert detected.available == tried.ok, detected.detail
    config = netem.kernel_config("CONFIG_NET_SCH_NETEM")
    if config == "not set" and not netem.module_hint("sch_netem").startswith("loaded"):
        assert not detected.available
    if not detected.available:
        assert "sch_netem" in detected.detail
        with pytest.raises(Unavailable, match="netem is not available"):
            Shaper(netns(a), "veth0").netem(delay_ms=10)
    # Detection through a runner (a container's namespace, say) gives the same answer.
    assert netem.detect_qdisc("netem", netns(c)).available == tried.ok


@needs_netns
def test_netem_delay_when_the_kernel_has_it(trio):
    """netem delay 100 ms on A's link to B adds about 100 ms to A->B datagrams."""
    lab, a, b, c = trio
    shaper = Shaper(netns(a), "veth0")
    if not shaper.netem_available():
        pytest.skip(f"this kernel has no sch_netem: {detect_netem().detail}")
    try:
        shaper.netem(delay_ms=100)
        rx, tx = socket_in(b), socket_in(a)
        rx.bind((B_IP, 47200))
        rx.settimeout(3)
        sent = time.monotonic()
        tx.sendto(b"t", (B_IP, 47200))
        rx.recv(16)
        assert 0.08 <= time.monotonic() - sent <= 1.0
        rx.close()
        tx.close()
    finally:
        shaper.heal()


@needs_netns
def test_tbf_limits_the_rate_roughly(trio):
    """tbf 8 mbit on A's device towards B: a TCP stream gets roughly 8 Mbit/s (4-11), far below unshaped."""
    lab, a, b, c = trio
    unshaped = tcp_rate_mbit(a, b, B_IP, seconds=0.5, port=47101)
    shaper = Shaper(netns(a), "veth0")
    try:
        shaper.bandwidth("8mbit")
        assert shaper.root_kind() == "tbf"
        shaped = tcp_rate_mbit(a, b, B_IP, port=47102)
        assert 4.0 <= shaped <= 11.0, f"tbf 8mbit gave {shaped:.1f} Mbit/s (unshaped {unshaped:.0f})"
        assert unshaped > 3 * shaped
    finally:
        assert shaper.heal()
    assert shaper.root_kind() is None
    assert udp_one_way(a, b, B_IP) == 200


@needs_netns
def test_htb_limits_one_destination_only(trio):
    """htb per destination: A->B limited to 8 mbit on a shared bridge-like device, A->B2 not."""
    lab, a, b, c = trio
    # A second address of B on the same link: same device, another destination.
    lab.run(b, ["ip", "addr", "add", "198.18.0.22/24", "dev", "veth0"]).check()
    shaper = Shaper(netns(a), "veth0")
    try:
        shaper.bandwidth("8mbit", dst=B_IP)
        assert shaper.root_kind() == "htb"
        limited = tcp_rate_mbit(a, b, B_IP, port=47103)
        free = tcp_rate_mbit(a, b, "198.18.0.22", seconds=0.5, port=47104)
        assert 4.0 <= limited <= 11.0, f"htb 8mbit to {B_IP} gave {limited:.1f} Mbit/s"
        assert free > 3 * limited, f"the other destination got {free:.1f} Mbit/s"
    finally:
        shaper.heal()


@needs_netns
def test_cleanup_removes_only_our_qdiscs(trio):
    """cleanup deletes root qdiscs with our handle and leaves a foreign one alone."""
    lab, a, b, c = trio
    lab.run(
        a,
        [
            "tc",
            "qdisc",
            "add",
            "dev",
            "veth1",
            "root",
            "handle",
            "77:",
            "tbf",
            "rate",
            "50mbit",
            "burst",
            "32kbit",
            "latency",
            "100ms",
        ],
    ).check()
    Shaper(netns(a), "veth0").bandwidth("20mbit")
    assert netem.cleanup(netns(a)) == ["veth0"]
    shown = lab.run(a, ["tc", "qdisc", "show"]).stdout
    assert f"{HANDLE}:" not in shown and "tbf 77:" in shown
