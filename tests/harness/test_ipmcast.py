"""The IP multicast transport: one datagram per multicast to the cluster's group, its
envelope, the refusals, and NAKACK2 and MCAST over it on local processes under loss."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from pathlib import Path

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.cli import main
from splitbrain.harness.mcastprobe import loopback_status
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import ScenarioError, check_backend, load_scenario, parse_scenario
from splitbrain.node.message import MCAST_DEST, Message
from splitbrain.node.runtime.config import ConfigError, NodeConfig
from splitbrain.node.runtime.ipmcast import IpMulticast, addressed_to, envelope
from splitbrain.node.runtime.testing import NodeGroup, pair_configs, wait_until
from splitbrain.node.runtime.transport import TransportStats
from splitbrain.node.wire import WireError, decode_frame, encode_frame, readdressed

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK_MULTICAST, WHY_NOT = loopback_status()
local_multicast = pytest.mark.skipif(
    not (LocalBackend().check()[0] and LOOPBACK_MULTICAST),
    reason=f"local backend or IP multicast on loopback unavailable here: {WHY_NOT}",
)


def group() -> str:
    rng = random.SystemRandom()
    return f"239.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(20000, 60999)}"


# ---- the envelope and the frame --------------------------------------------------------------


def test_envelope_names_the_receivers_and_rejects_garbage():
    """A receiver finds itself in the envelope (or not) and where the frame starts; a truncated
    or foreign datagram is a WireError, never an IndexError."""
    head = envelope(("B", "Carol"))
    data = head + b"frame"
    assert addressed_to(data, b"Carol") == (True, len(head))
    assert addressed_to(data, b"B") == (True, len(head))
    assert addressed_to(data, b"A")[0] is False
    for bad in (b"", b"SBM", b"XYZ\x01\x01B", head[:-1], b"SBM\x02\x01B"):
        with pytest.raises(WireError):
            addressed_to(bad, b"B")


def test_a_frame_for_all_is_readdressed_to_each_receiver():
    """A frame encoded once for "*" decodes at B as B's own, messages and headers intact."""
    frame = encode_frame("A", [Message("A", MCAST_DEST, b"one"), Message("A", MCAST_DEST, b"two")])
    src, msgs = decode_frame(readdressed(frame, "Bob"))
    assert src == "A" and [m.dest for m in msgs] == ["Bob", "Bob"] and [m.payload for m in msgs] == [b"one", b"two"]
    with pytest.raises(WireError):
        readdressed(frame[:4], "B")


# ---- which messages leave as one datagram ----------------------------------------------------


def test_take_coalesces_copies_of_one_multicast_and_leaves_the_rest_unicast():
    """Copies sharing headers and payload to distinct known peers become one message for "*", in
    segments per set of receivers kept in send order; a single copy, a duplicated copy, a copy to
    an unknown node and unicasts stay as they are."""

    async def run() -> tuple[list[Message], list]:
        ipm = IpMulticast(
            "A",
            None,  # type: ignore[arg-type]  # never started: take() and its queue only
            None,  # type: ignore[arg-type]
            {"B": ("127.0.0.2", 1), "C": ("127.0.0.3", 1), "D": ("127.0.0.4", 1)},
            lambda data, peer: None,
            lambda reason, peer: None,
            TransportStats(),
            60_000,
        )
        ipm._loop = asyncio.get_running_loop()
        ipm.flush = lambda: None  # type: ignore[method-assign]  # nothing to send it to
        h1, h2, h3, h4, h5, h6 = ({1: f"m{i}"} for i in range(1, 7))
        p = b"payload"
        msgs = [
            Message("A", "B", p, h1),
            Message("A", "C", p, h1),
            Message("A", "D", p, h1),  # m1 to all three: one multicast
            Message("A", "B", b"unicast"),
            Message("A", "C", p, h2),  # m2 to C only: stays unicast
            Message("A", "B", p, h3),
            Message("A", "B", p, h3),  # m3 duplicated: stays unicast
            Message("A", "B", p, h4),
            Message("A", "X", p, h4),  # m4 to a stranger: stays unicast
            Message("A", "C", p, h5),
            Message("A", "B", p, h5),  # m5 to B and C only: a segment of its own
            Message("A", "D", p, h6),
            Message("A", "C", p, h6),
            Message("A", "B", p, h6),  # m6 to all three again: after m5, never packed with m1
        ]
        rest = ipm.take(msgs)
        return rest, ipm._queues

    rest, queues = asyncio.run(run())
    assert [m.headers.get(1, "app") for m in rest] == ["app", "m2", "m3", "m3", "m4", "m4"]
    assert [(dests, [m.headers[1] for m in msgs]) for dests, msgs in queues] == [
        (("B", "C", "D"), ["m1"]),
        (("B", "C"), ["m5"]),
        (("B", "C", "D"), ["m6"]),
    ]
    assert all(m.dest == MCAST_DEST for _, msgs in queues for m in msgs)


# ---- configuration and scenario refusals ------------------------------------------------------


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"transport": "tcp"}, "needs transport udp"),
        ({"protocol": "unicast3"}, "sends no multicasts"),
        ({"mcast_group": "10.0.0.1:4000"}, "not an IPv4 multicast address"),
        ({"mcast_group": "group.example:4000"}, "host name"),
        ({"mcast_group": "239.1.2.3:0"}, "port must be between 1"),
    ],
)
def test_node_refuses_a_group_it_cannot_use(changes, says):
    """mcast_group: only an IPv4 multicast address and port, over UDP, for a multicast protocol."""
    raw = {
        "name": "A",
        "bind": "127.0.0.2:7800",
        "admin": "127.0.0.2:0",
        "protocol": "nakack2",
        "event_log": False,
        "mcast_group": "239.1.2.3:4000",
        "config": {"xmit_interval": 0.5},
        **changes,
    }
    with pytest.raises(ConfigError) as err:
        NodeConfig.from_dict(raw, env={})
    assert err.value.key == "mcast_group" and says in str(err.value)


def test_scenario_refuses_ip_multicast_where_it_cannot_work(tmp_path, capsys):
    """ip_multicast needs UDP and a multicast protocol: the loader names the key, the CLI exits 2."""
    base = load_scenario(ROOT / "scenarios" / "nakack2-ip-multicast.yaml").to_dict()
    for changes, says in (
        ({"transport": "tcp", "config": {"xmit_interval": 0.5}}, "needs transport: udp"),
        (
            {"protocol": "unicast3", "config": {}, "workload": [{"from": "A", "to": "B", "rate": 10, "count": 5}]},
            "sends no multicasts",
        ),
    ):
        with pytest.raises(ScenarioError) as err:
            parse_scenario({**base, **changes})
        assert any(path == "ip_multicast" and says in msg for path, msg in err.value.problems), err.value.problems
    bad = tmp_path / "bad.yaml"
    import yaml

    bad.write_text(yaml.safe_dump({**base, "transport": "tcp", "config": {"xmit_interval": 0.5}}))
    assert main(["run", str(bad), "--backend", "sim", "--out", str(tmp_path / "runs")]) == 2
    assert "ip_multicast: needs transport: udp" in capsys.readouterr().err


def test_local_backend_refuses_ip_multicast_where_the_probe_fails(monkeypatch):
    """Never assumed: where a datagram to the group does not loop back on 127.0.0.1 the local
    backend refuses the scenario (exit 2 in the CLI), naming ip_multicast and the probe's reason."""
    import splitbrain.harness.mcastprobe as probe

    scenario = load_scenario(ROOT / "scenarios" / "nakack2-ip-multicast.yaml")
    monkeypatch.setattr(probe, "_loop_once", lambda iface: (False, "No such device"))
    with pytest.raises(ScenarioError) as err:
        check_backend(scenario, "local")
    assert err.value.path == "ip_multicast" and "No such device" in str(err.value)
    check_backend(scenario, "sim")  # the simulator's links need no multicast route
    assert main(["run", str(ROOT / "scenarios" / "nakack2-ip-multicast.yaml"), "--backend", "local"]) == 2


def test_doctor_says_whether_the_transport_can_run(capsys):
    """doctor's ip multicast line says whether the ip_multicast transport can run on local."""
    assert main(["doctor"]) == 0
    line = next(li for li in capsys.readouterr().out.splitlines() if li.startswith("ip multicast:"))
    assert ("ip_multicast transport on the local backend: can run" in line) == LOOPBACK_MULTICAST, line


# ---- live: in-process nodes -------------------------------------------------------------------


def delivered(node, sender: str) -> int:
    return node.delivered.per_sender_counts().get(sender, 0)


@local_multicast
def test_a_copy_dropped_for_one_receiver_leaves_the_others_one_datagram():
    """4 members, NAKACK2 over IP multicast; A's fault layer drops its first 20 multicasts to D:
    those leave as one datagram for B and C that D ignores (its envelope does not name D), D gets
    them by retransmission, and everybody delivers all 200 once, in order."""

    async def run() -> None:
        configs = pair_configs(
            "/tmp",
            names=("A", "B", "C", "D"),
            event_log=False,
            protocol="nakack2",
            protocol_config={"xmit_interval": 0.1},
            mcast_group=group(),
        )
        async with NodeGroup(configs) as nodes:
            a, b, c, d = nodes
            for node in nodes:
                node.install_view(["A", "B", "C", "D"], 1)
            from splitbrain.node.faultlayer import FaultRule

            a.add_fault(FaultRule(direction="down", peer="D", types=frozenset({"MSG"}), count=20))
            a.start_stream(MCAST_DEST, count=200, rate=1000, size=50)
            await wait_until(lambda: all(delivered(n, "A") == 200 for n in nodes), 60, what="200 at every member")
            assert d.ipmcast is not None and d.ipmcast.stats.not_for_us >= 1
            assert a.ipmcast is not None and a.ipmcast.stats.multicasts >= 180
            assert a.transport is not None
            for node in nodes:
                report = node.delivered.to_dict()["delivered"]["A"]
                assert all(s["order_violations"] == 0 and s["duplicates"] == 0 for s in report.values()), report
            # The members A's datagrams reached delivered them from the group, not as unicasts.
            assert b.ipmcast is not None and c.ipmcast is not None
            assert b.ipmcast.stats.datagrams_in > 0 and c.ipmcast.stats.datagrams_in > 0

    asyncio.run(run())


# ---- live: scenarios on local processes -------------------------------------------------------


def multicast_report(run_dir: Path) -> dict[str, tuple[int, int, int]]:
    """node -> (multicasts, datagrams sent, datagrams received), from each node's log."""
    out = {}
    pattern = re.compile(
        r"(\w+): ip multicast \S+: (\d+) multicasts \(\d+ copies\) sent as (\d+) datagrams; received (\d+)"
    )
    for log in sorted((run_dir / "nodes").glob("*/node.log")):
        for m in pattern.finditer(log.read_text()):
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    return out


@local_multicast
@pytest.mark.timeout(180)
@pytest.mark.parametrize("protocol", ["nakack2", "mcast"])
def test_three_members_multicast_over_ip_multicast_under_loss(protocol, tmp_path):
    """3 members all multicasting over IP multicast, 20 % in-process loss at every receiver: every
    check passes (each multicast delivered once, in order, at every member) and every sender's
    multicasts left as datagrams to the group."""
    name = "nakack2-ip-multicast" if protocol == "nakack2" else "mcast-loss"
    scenario = dataclasses.replace(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), ip_multicast=True)
    outcome = run_scenario(scenario, backend="local", out=tmp_path)
    checks = {c.name: (c.passed, c.explanation) for c in outcome.verdict.checks}
    assert outcome.verdict.outcome == "passed", checks
    report = multicast_report(outcome.run_dir)
    assert set(report) == {"A", "B", "C"}, report
    for node, (multicasts, sent, received) in report.items():
        assert multicasts == 800, (node, report)  # 100/s for 8 s, each one run of copies
        assert 0 < sent <= multicasts and received > 0, (node, report)


def test_node_exits_2_where_its_probe_datagram_does_not_come_back(tmp_path):
    """Never assumed, per node: in a namespace of our own whose INPUT drops the group's datagrams,
    the node joins the group but its probe never comes back, so it exits 2 naming mcast_group."""
    import sys

    import yaml

    from splitbrain.faults.netns import Lab, can_make_namespaces

    can, why = can_make_namespaces()
    if not can:
        pytest.skip(f"needs root and ip netns: {why}")
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "A",
                "bind": "127.0.0.1:7800",
                "admin": "127.0.0.1:0",
                "protocol": "nakack2",
                "peers": {"B": "127.0.0.2:7800"},
                "event_log": False,
                "mcast_group": "239.1.2.3:45588",
            }
        )
    )
    argv = ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "splitbrain.node", "--config", str(cfg)]
    with Lab() as lab:
        ns = lab.add("ipmc")
        lab.run(ns, ["iptables", "-A", "INPUT", "-d", "239.1.2.3", "-j", "DROP"]).check()
        refused = lab.run(ns, argv)
        lab.run(ns, ["iptables", "-F", "INPUT"]).check()
        # The same node starts once the datagrams flow (a SIGTERM ends it: run it under timeout).
        works = lab.run(ns, ["timeout", "-s", "TERM", "3", *argv])
    assert refused.returncode == 2, refused
    assert "mcast_group" in refused.stderr and "did not come back" in refused.stderr, refused.stderr
    assert works.returncode in (0, 124), works  # stopped by the timeout, not refused
    assert "did not come back" not in works.stderr


@local_multicast
@pytest.mark.splitbrain_backend("local")
def test_plugin_cluster_over_ip_multicast_loses_nothing_under_loss(splitbrain_cluster, faults):
    """The pytest plugin with ip_multicast=True: MCAST, A and B multicast under 20 % loss on every
    link (in-process at each receiver); both reach every member through the group, nothing is lost
    or duplicated, and the windows end in sync."""
    cluster = splitbrain_cluster(nodes=3, protocol="mcast", config={"xmit_interval": 0.2}, ip_multicast=True)
    faults.loss("*", 0.2)
    cluster.send("A", MCAST_DEST, rate=200, count=400)
    cluster.send("B", MCAST_DEST, rate=200, count=400)
    for dst in ("A", "B", "C"):
        for src in ("A", "B"):
            cluster.wait_delivered(dst, src, 400, timeout=60)
    faults.heal()
    states = {name: cluster.state(name)["ip_multicast"] for name in ("A", "B", "C")}
    assert states["A"]["multicasts"] >= 400 and states["B"]["multicasts"] >= 400, states
    assert states["C"]["datagrams_in"] > 0 and states["C"]["foreign"] == 0, states
    cluster.wait_settled()
    cluster.assert_checks()
