"""NAKACK2 on real processes (local backend; the sim too where a test is written for both):
multicast over UDP with retransmission and over TCP without, the run-time switch of
xmit_interval under load, and the refusals of unsafe settings (exit 2, naming the key)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.cli import main
from splitbrain.node.message import MCAST_DEST

ROOT = Path(__file__).resolve().parents[2]
local_only = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")


def kinds_of(run_dir: Path) -> Counter:
    counts: Counter = Counter()
    for path in (run_dir / "nodes").glob("*/events.jsonl"):
        for line in path.read_text().splitlines():
            ev = json.loads(line)
            counts[(ev["proto"], ev["kind"])] += ev.get("count", 1) if ev["v"] == 2 else 1  # a run line: its messages
    return counts


@local_only
@pytest.mark.parametrize("scenario", ["nakack2-loss", "nakack2-tcp-no-xmit", "nakack2-xmit-switch"])
def test_scenarios_pass_on_local(scenario, tmp_path, capsys):
    """nakack2-loss (UDP, 20 % loss, retransmission) and nakack2-tcp-no-xmit (TCP, xmit_interval 0)
    pass on real processes; without retransmission no XMIT-REQ, retransmission or HIGHEST_SEQNO is sent."""
    out = tmp_path / "runs"
    code = main(["run", str(ROOT / "scenarios" / f"{scenario}.yaml"), "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    (run_dir,) = out.iterdir()
    counts = kinds_of(run_dir)
    assert counts[("nakack2", "send")] == 3 * (800 if scenario == "nakack2-loss" else 1200)
    assert counts[("nakack2", "deliver")] == 3 * counts[("nakack2", "send")]
    repair = counts[("nakack2", "xmit_req_tx")] + counts[("nakack2", "retransmit")]
    if scenario == "nakack2-loss":
        assert repair > 0
    elif scenario == "nakack2-tcp-no-xmit":
        assert repair == 0 and counts[("nakack2", "highest_seqno_tx")] == 0
    else:  # the schedule's config steps switched retransmission off and on at every member
        assert counts[("nakack2", "config_change")] == 6


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_refuses_no_retransmission_over_udp(tmp_path, capsys):
    """`splitbrain run` of NAKACK2 with xmit_interval 0 over UDP: exit 2 naming config.xmit_interval."""
    data = {
        "name": "unsafe",
        "protocol": "nakack2",
        "transport": "udp",
        "nodes": 2,
        "config": {"xmit_interval": 0},
        "workload": [{"from": "all", "to": "all", "rate": 10, "count": 5}],
        "duration": 1,
    }
    assert main(["run", str(_write(tmp_path, data)), "--backend", "sim", "--out", str(tmp_path / "runs")]) == 2
    assert "config.xmit_interval" in capsys.readouterr().err


def test_node_refuses_no_retransmission_over_udp(tmp_path, capsys):
    """`splitbrain node` with protocol nakack2, transport udp, xmit_interval 0: exit 2 naming the key."""
    conf = {
        "name": "A",
        "bind": "127.0.0.1:0",
        "admin": "127.0.0.1:0",
        "protocol": "nakack2",
        "transport": "udp",
        "config": {"xmit_interval": 0},
    }
    assert main(["node", "--config", str(_write(tmp_path, conf))]) == 2
    assert "config.xmit_interval" in capsys.readouterr().err


@pytest.mark.splitbrain_backend("sim", "local")
def test_xmit_interval_switched_at_run_time_under_load_over_tcp(splitbrain_cluster):
    """Over TCP, all three multicasting 200/s: xmit_interval 0.5 -> 0 -> 0.5 at every node during
    the load; everything is delivered once and in order, and the refusal of 0 over UDP does not apply."""
    cluster = splitbrain_cluster(nodes=3, protocol="nakack2", transport="tcp", config={"xmit_interval": 0.5})
    for name in cluster.names:
        cluster.send(name, MCAST_DEST, rate=200, duration=4)
    for value in (0, 0.5):
        cluster.sleep(1.5)
        for name in cluster.names:
            cluster.set_config(name, {"xmit_interval": value})
    for name in cluster.names:
        for src in cluster.names:
            cluster.wait_delivered(name, src, 800, timeout=30)
    cluster.stop()
    results = cluster.assert_checks("fifo", "no_duplicates", "no_loss", "no_errors")
    assert results[2].judged == 3 * 2 * 800  # each multicast owed to the 2 others (loopback not owed)
    changes = [e for e in cluster.events() if e["kind"] == "config_change"]
    assert len(changes) == 6


@pytest.mark.asyncio
async def test_admin_refuses_unsafe_changes_and_multicast_for_unicast_protocols(tmp_path):
    """A NAKACK2 node over TCP without retransmission refuses an in-process drop rule; over UDP it
    refuses POST /config xmit_interval 0; a UNICAST3 node refuses a stream to "*". All 400, naming the field."""
    import aiohttp

    from splitbrain.node.runtime.testing import NodeGroup, pair_configs

    token = {"X-Splitbrain-Token": "test-token"}

    async def call(session, node, method, path, body):
        async with session.request(method, f"http://{node.admin_address}{path}", json=body, headers=token) as resp:
            return resp.status, await resp.json()

    cases = [
        ("tcp", "nakack2", {"xmit_interval": 0}, "/faults", {"action": "drop", "types": ["MSG"]}, "xmit_interval"),
        ("udp", "nakack2", {"xmit_interval": 0.5}, "/config", {"xmit_interval": 0}, "xmit_interval"),
        ("udp", "unicast3", {}, "/send", {"to": MCAST_DEST, "count": 1}, "to"),
    ]
    for i, (transport, protocol, config, path, body, field) in enumerate(cases):
        configs = pair_configs(tmp_path / str(i), transport, protocol_config=config, protocol=protocol)
        async with NodeGroup(configs) as (a, _b), aiohttp.ClientSession() as session:
            status, out = await call(session, a, "POST", path, body)
            assert (status, out["field"]) == (400, field), out
    # The same requests are accepted where they are safe.
    configs = pair_configs(tmp_path / "ok", "tcp", protocol_config={"xmit_interval": 0.5}, protocol="nakack2")
    async with NodeGroup(configs) as (a, _b), aiohttp.ClientSession() as session:
        assert (await call(session, a, "POST", "/config", {"xmit_interval": 0}))[0] == 200
        assert (await call(session, a, "POST", "/send", {"to": MCAST_DEST, "count": 3}))[0] == 202
