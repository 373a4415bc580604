"""The admin HTTP API of a node: every endpoint's happy path and its errors (401, 400 naming the field, 404)."""

from __future__ import annotations

import re

import aiohttp
import pytest
import pytest_asyncio

from splitbrain.node.gms.base import GmsLayerBase
from splitbrain.node.gms.config import GmsConfig
from splitbrain.node.runtime.testing import NodeGroup, pair_configs, wait_until
from splitbrain.node.unicast3 import Unicast3

pytestmark = pytest.mark.asyncio

TOKEN = "test-token"
FAST = {"xmit_interval": 0.05, "ack_min_interval": 0.02}


class Api:
    def __init__(self, session: aiohttp.ClientSession, node):
        self.session = session
        self.base = f"http://{node.admin_address}"

    async def call(self, method: str, path: str, body=None, token: str | None = TOKEN, raw: bytes | None = None):
        headers = {"X-Splitbrain-Token": token} if token else {}
        kwargs = {"data": raw} if raw is not None else ({"json": body} if body is not None else {})
        async with self.session.request(method, self.base + path, headers=headers, **kwargs) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()


@pytest_asyncio.fixture
async def pair(tmp_path):
    configs = pair_configs(tmp_path, "udp", protocol_config=FAST, token=TOKEN)
    async with NodeGroup(configs) as nodes, aiohttp.ClientSession() as session:
        yield [Api(session, n) for n in nodes], nodes


async def test_health_and_state(pair):
    """GET /health and GET /state describe the node."""
    (api, _), (a, _) = pair
    status, body = await api.call("GET", "/health", token=None)
    assert status == 200 and body["status"] == "ok" and body["node"] == "A" and body["incarnation"] == 0
    assert body["uptime_s"] >= 0
    status, state = await api.call("GET", "/state", token=None)
    assert status == 200
    assert {"node", "incarnation", "protocol", "transport", "now", "view", "unicast3", "faults", "streams"} <= set(
        state
    )
    assert state["view"] is None and state["protocol"] == "unicast3" and state["transport"] == "udp"
    assert set(state["unicast3"]) == {"send", "recv", "syncing", "counters"}


async def test_send_streams_delivered(pair):
    """POST /send starts a stream (202); /streams and /delivered report it; /state shows windows."""
    (api_a, api_b), (a, b) = pair
    status, body = await api_a.call("POST", "/send", {"to": "B", "count": 300, "rate": 0, "size": 64})
    assert status == 202 and body == {"stream": 0, "to": ["B"]}
    status, body = await api_a.call("POST", "/send", {"to": "all", "duration": 0.2, "rate": 200})
    assert status == 202 and body == {"stream": 1, "to": ["B"]}
    status, body = await api_a.call("POST", "/send", {"to": ["B"], "count": 5, "stream": 9})
    assert status == 202 and body["stream"] == 9
    # A stream resumed after a restart numbers on from first_n: its app ids never repeat.
    status, body = await api_a.call("POST", "/send", {"to": "B", "count": 5, "stream": 10, "first_n": 101})
    assert status == 202 and body["stream"] == 10

    def all_delivered():
        got = b.delivered.to_dict()["delivered"].get("A", {})
        return [got.get(k, {}).get("count") for k in ("0", "1", "9", "10")] == [300, 40, 5, 5]

    await wait_until(all_delivered, 20, what="streams 0, 1, 9 and 10 delivered")
    _, d10 = await api_b.call("GET", "/delivered", token=None)
    assert (d10["delivered"]["A"]["10"]["first"], d10["delivered"]["A"]["10"]["last"]) == (101, 105)
    _, d = await api_b.call("GET", "/delivered", token=None)
    assert d["delivered"]["A"]["0"] == {"count": 300, "first": 1, "last": 300, "order_violations": 0, "duplicates": 0}
    assert d["total"] == 350
    _, streams = await api_a.call("GET", "/streams", token=None)
    by_id = {s["stream"]: s for s in streams["streams"]}
    assert by_id[0]["sent"] == 300 and by_id[0]["planned"] == 300 and by_id[0]["done"] is True
    assert by_id[1]["planned"] == 40 and by_id[1]["to"] == ["B"]
    _, state = await api_a.call("GET", "/state", token=None)
    assert state["unicast3"]["send"]["B"]["hs"] == 350
    assert len(state["streams"]) == 4


@pytest.mark.parametrize(
    "body, field",
    [
        ({"to": "Z", "count": 1}, "to"),
        ({"to": [], "count": 1}, "to"),
        ({"count": 1}, "to"),
        ({"to": "B"}, "count"),
        ({"to": "B", "count": 1, "duration": 1}, "count"),
        ({"to": "B", "count": 0}, "count"),
        ({"to": "B", "count": "many"}, "count"),
        ({"to": "B", "duration": -1}, "duration"),
        ({"to": "B", "count": 1, "rate": -5}, "rate"),
        ({"to": "B", "count": 1, "size": 10**6}, "size"),
        ({"to": "B", "count": 1, "stream": -1}, "stream"),
        ({"to": "B", "count": 1, "stream": 10**300}, "stream"),
        ({"to": "B", "count": 1, "colour": "red"}, "colour"),
        ({"to": "B", "count": 1, "first_n": 0}, "first_n"),
        ({"to": "B", "count": 1, "first_n": "1"}, "first_n"),
    ],
)
async def test_send_errors_name_the_field(pair, body, field):
    """A bad /send field gets 400 with the field named; the node keeps running."""
    (api, _), _ = pair
    status, out = await api.call("POST", "/send", body)
    assert status == 400, out
    assert out["field"] == field and out["error"]
    assert (await api.call("GET", "/health", token=None))[0] == 200


async def test_duplicate_stream_id_is_refused(pair):
    """Reusing a stream id would repeat app ids: refused."""
    (api, _), _ = pair
    assert (await api.call("POST", "/send", {"to": "B", "count": 1, "stream": 4}))[0] == 202
    status, out = await api.call("POST", "/send", {"to": "B", "count": 1, "stream": 4})
    assert status == 409 and out["field"] == "stream"


async def test_bad_json_and_non_object_bodies(pair):
    """Unparseable JSON or a non-object body: 400 with field null."""
    (api, _), _ = pair
    for path in ("/send", "/faults", "/view", "/config"):
        status, out = await api.call("POST", path, raw=b"{not json")
        assert status == 400 and out["field"] is None and "JSON" in out["error"]
        status, out = await api.call("POST", path, raw=b"[1, 2]")
        assert status == 400 and out["field"] is None


async def test_mutating_endpoints_need_the_token(pair):
    """Every POST and DELETE without (or with a wrong) X-Splitbrain-Token gets 401."""
    (api, _), _ = pair
    calls = [
        ("POST", "/send", {"to": "B", "count": 1}),
        ("POST", "/sync/B", {}),
        ("POST", "/view", {"members": ["A", "B"]}),
        ("POST", "/faults", {"action": "drop"}),
        ("DELETE", "/faults", None),
        ("DELETE", "/faults/1", None),
        ("POST", "/config", {"xmit_interval": 1}),
    ]
    for method, path, body in calls:
        for token in (None, "wrong"):
            status, out = await api.call(method, path, body, token=token)
            assert status == 401 and "error" in out, (method, path, token)
    for path in ("/health", "/state", "/streams", "/delivered", "/faults", "/metrics"):
        assert (await api.call("GET", path, token=None))[0] == 200


async def test_no_token_configured_means_open(tmp_path):
    """A node without admin_token (allowed on loopback only) accepts mutating requests without the header."""
    configs = pair_configs(tmp_path, "udp", token=None)
    async with NodeGroup(configs) as (a, _), aiohttp.ClientSession() as session:
        api = Api(session, a)
        assert (await api.call("POST", "/view", {"members": ["A"]}, token=None))[0] == 200


async def test_sync(pair):
    """POST /sync/{peer} starts a resync; an unknown peer is 400."""
    (api_a, api_b), (a, b) = pair
    await api_a.call("POST", "/send", {"to": "B", "count": 20, "rate": 0})
    await wait_until(lambda: b.delivered.total == 20, 10, what="20 delivered")
    status, out = await api_b.call("POST", "/sync/A")
    assert status == 200 and out == {"peer": "A", "started": True}
    await wait_until(lambda: b.stack.layer(Unicast3).counters.get("syncs_completed") == 1, 10, what="sync completed")
    status, out = await api_b.call("POST", "/sync/Q")
    assert status == 400 and out["field"] == "peer"


async def test_sync_needs_sync_mode(tmp_path):
    """With resync other than sync, POST /sync is a 400."""
    configs = pair_configs(tmp_path, "udp", token=TOKEN, protocol_config={"resync": "timestamp"})
    async with NodeGroup(configs) as (a, _), aiohttp.ClientSession() as session:
        status, out = await Api(session, a).call("POST", "/sync/B")
        assert status == 400 and "resync" in out["error"]


async def test_view(pair):
    """POST /view installs a view; view_id defaults to previous + 1; bad members name the field."""
    (api, _), (a, _) = pair
    assert await api.call("POST", "/view", {"members": ["A", "B"]}) == (200, {"view_id": 1})
    assert await api.call("POST", "/view", {"members": ["A"], "view_id": 7}) == (200, {"view_id": 7})
    assert await api.call("POST", "/view", {"members": ["A", "B"]}) == (200, {"view_id": 8})
    _, state = await api.call("GET", "/state", token=None)
    assert state["view"] == {"members": ["A", "B"], "view_id": 8}
    for body, field in (
        ({"members": "A"}, "members"),
        ({}, "members"),
        ({"members": ["A", "A"]}, "members"),
        ({"members": ["A"], "view_id": "x"}, "view_id"),
        ({"members": ["A"], "x": 1}, "x"),
    ):
        status, out = await api.call("POST", "/view", body)
        assert status == 400 and out["field"] == field


async def test_faults_crud(pair):
    """POST /faults -> 201 {id}; GET lists it with matched/acted; DELETE one (204, 404), DELETE all."""
    (api, _), (a, _) = pair
    rule = {
        "direction": "down",
        "peer": "B",
        "types": ["DATA"],
        "p": 0.5,
        "count": 3,
        "after": 1,
        "seqnos": [1, 10],
        "start": 0,
        "until": 1e9,
        "action": "delay",
        "delay_s": 0.01,
        "jitter_s": 0.01,
    }
    status, out = await api.call("POST", "/faults", rule)
    assert status == 201 and out == {"id": 1}
    status, out = await api.call("POST", "/faults", {"action": "drop", "types": ["ACK"]})
    assert status == 201 and out == {"id": 2}
    status, out = await api.call("GET", "/faults", token=None)
    assert status == 200 and set(out["rules"]) == {"1", "2"}
    got = out["rules"]["1"]
    assert got["types"] == ["DATA"] and got["seqnos"] == [1, 10] and got["matched"] == 0 and got["acted"] == 0
    assert (await api.call("DELETE", "/faults/1"))[0] == 204
    status, out = await api.call("DELETE", "/faults/1")
    assert status == 404 and "error" in out
    assert (await api.call("DELETE", "/faults/abc"))[0] == 404
    assert (await api.call("DELETE", "/faults"))[0] == 204
    assert (await api.call("GET", "/faults", token=None))[1] == {"rules": {}}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"direction": "sideways"}, "direction"),
        ({"action": "explode"}, "action"),
        ({"p": 2}, "p"),
        ({"p": "half"}, "p"),
        ({"types": ["DATUM"]}, "types"),
        ({"types": "DATA,ACK"}, "types"),
        ({"count": 0}, "count"),
        ({"after": -1}, "after"),
        ({"seqnos": [5, 1]}, "seqnos"),
        ({"seqnos": [1]}, "seqnos"),
        ({"action": "delay"}, "delay_s"),
        ({"peer": "Z"}, "peer"),
        ({"start": "soon"}, "start"),
        ({"size": 3}, "size"),
    ],
)
async def test_fault_errors_name_the_field(pair, body, field):
    """A bad fault rule gets 400 naming the field."""
    (api, _), _ = pair
    status, out = await api.call("POST", "/faults", body)
    assert status == 400 and out["field"] == field, out


async def test_config(pair):
    """POST /config changes protocol settings at run time; bad ones name the setting."""
    (api, _), (a, _) = pair
    status, out = await api.call("POST", "/config", {"xmit_interval": 0.2})
    assert status == 200 and out["config"]["xmit_interval"] == 0.2
    assert a.stack.layer(Unicast3).config.xmit_interval == 0.2
    for body, field in (
        ({"xmit_interval": 0}, "xmit_interval"),
        ({"xmit_interval": "x"}, "xmit_interval"),
        ({"nonsense": 1}, "nonsense"),
    ):
        status, out = await api.call("POST", "/config", body)
        assert status == 400 and out["field"] == field
    assert (await api.call("POST", "/config", {}))[0] == 400
    assert a.stack.layer(Unicast3).config.xmit_interval == 0.2


async def test_config_takes_gms_settings_with_membership_gms(tmp_path):
    """With membership gms, POST /config takes GMS's keys too (split off like the flat `config:`):
    every GMS layer gets them, the answer and GET /config show them, bad ones name the key; with
    static membership the same keys are unknown."""
    configs = pair_configs(tmp_path, "udp", protocol_config=FAST, token=TOKEN, membership="gms")
    async with NodeGroup(configs) as (a, _), aiohttp.ClientSession() as session:
        api = Api(session, a)
        status, out = await api.call("POST", "/config", {"heartbeat_interval": 0.2, "xmit_interval": 0.3})
        assert status == 200, out
        assert out["config"]["heartbeat_interval"] == 0.2 and out["config"]["xmit_interval"] == 0.3
        assert out["config"]["fd_timeout"] == GmsConfig().fd_timeout
        gms_layers = [layer for layer in a.stack.layers if isinstance(layer, GmsLayerBase)]
        assert len(gms_layers) == 4
        assert {layer.config.heartbeat_interval for layer in gms_layers} == {0.2}
        assert a.stack.layer(Unicast3).config.xmit_interval == 0.3
        for body, field in (
            # fd_timeout must stay above heartbeat_interval; nothing changes when one key is bad.
            ({"fd_timeout": 0.1, "xmit_interval": 0.4}, "fd_timeout"),
            ({"merge_interval": "x"}, "merge_interval"),
            ({"max_join_attempts": 1.5}, "max_join_attempts"),
        ):
            status, out = await api.call("POST", "/config", body)
            assert status == 400 and out["field"] == field, out
        assert a.stack.layer(Unicast3).config.xmit_interval == 0.3
        assert {layer.config.fd_timeout for layer in gms_layers} == {GmsConfig().fd_timeout}
        status, out = await api.call("GET", "/config", token=None)
        assert out["membership"]["heartbeat_interval"] == 0.2 and out["protocol"]["xmit_interval"] == 0.3


async def test_config_refuses_gms_settings_with_static_membership(pair):
    """Without a membership protocol, GMS's keys are unknown settings."""
    (api, _), _ = pair
    status, out = await api.call("POST", "/config", {"heartbeat_interval": 0.2})
    assert status == 400 and out["field"] == "heartbeat_interval" and "unknown" in out["error"]
    status, out = await api.call("GET", "/config", token=None)
    assert out["membership"] is None


async def test_metrics(pair):
    """GET /metrics is Prometheus text with the node's counters."""
    (api_a, api_b), (a, b) = pair
    await api_a.call("POST", "/send", {"to": "B", "count": 50, "rate": 0})
    await wait_until(lambda: b.delivered.total == 50, 10, what="50 delivered")
    status, text = await api_b.call("GET", "/metrics", token=None)
    assert status == 200
    # 50 sent, plus what the sender resent (its lowest and highest after the connection's SYNC, and
    # any retransmission); exactly 50 of them delivered.
    data_in = re.search(r'splitbrain_messages_total\{direction="in",type="DATA"\} (\d+)\.0', text)
    assert data_in and int(data_in.group(1)) >= 50, text
    assert 'splitbrain_delivered_total{sender="A"} 50.0' in text
    for name in (
        "splitbrain_frames_total",
        "splitbrain_bytes_total",
        "splitbrain_malformed_frames_total",
        "splitbrain_retransmissions_total",
        "splitbrain_syncs_total",
        "splitbrain_recv_window_messages",
    ):
        assert name in text
    _, text = await api_a.call("GET", "/metrics", token=None)
    assert 'splitbrain_send_window_messages{peer="B"}' in text


async def test_unknown_route_is_json_404(pair):
    """Unknown paths answer 404 with a JSON error."""
    (api, _), _ = pair
    status, out = await api.call("GET", "/nope", token=None)
    assert status == 404 and "error" in out


async def test_extra_read_endpoints(pair):
    """GET /config and GET /samples (extras) answer."""
    (api, _), (a, _) = pair
    status, out = await api.call("GET", "/config", token=None)
    assert status == 200 and out["node"]["admin_token"] == "***" and out["protocol"]["xmit_interval"] == 0.05
    status, out = await api.call("GET", "/samples", token=None)
    assert status == 200 and set(out) == {"every", "sent", "delivered"}


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_fault_rules_via_the_api_and_the_protocol_recovers(tmp_path, transport):
    """Rules posted through the API drop and delay messages; every message still arrives in order."""
    configs = pair_configs(tmp_path, transport, protocol_config=FAST, token=TOKEN)
    async with NodeGroup(configs) as (a, b), aiohttp.ClientSession() as session:
        api_a, api_b = Api(session, a), Api(session, b)
        status, drop = await api_b.call(
            "POST", "/faults", {"direction": "up", "peer": "A", "types": ["DATA"], "after": 10, "count": 15}
        )
        assert status == 201
        status, delay = await api_a.call(
            "POST", "/faults", {"direction": "down", "types": ["DATA"], "p": 0.3, "action": "delay", "delay_s": 0.02}
        )
        assert status == 201
        status, acks = await api_a.call("POST", "/faults", {"types": ["ACK"], "count": 2})
        assert status == 201
        await api_a.call("POST", "/send", {"to": "B", "count": 500, "rate": 2500})

        def delivered():
            stats = b.delivered.to_dict()["delivered"].get("A", {}).get("0", {})
            return stats if stats.get("count") == 500 else None

        stats = await wait_until(delivered, 30, what="500 delivered despite the rules")
        assert stats["order_violations"] == 0 and stats["duplicates"] == 0
        _, rules_b = await api_b.call("GET", "/faults", token=None)
        _, rules_a = await api_a.call("GET", "/faults", token=None)
        assert rules_b["rules"][str(drop["id"])]["acted"] == 15
        assert rules_b["rules"][str(drop["id"])]["matched"] >= 25
        assert rules_a["rules"][str(delay["id"])]["acted"] > 0
        assert rules_a["rules"][str(acks["id"])]["acted"] == 2
        _, state = await api_a.call("GET", "/state", token=None)
        assert state["faults"]["counters"]["delayed"] > 0
        assert state["unicast3"]["counters"].get("retransmit", 0) > 0


async def test_metrics_count_what_the_protocol_rejected(pair):
    """A message the protocol drops (DATA with seqno 0, which could open a window at -1) shows in
    splitbrain_protocol_drops_total by type."""
    from splitbrain.node.message import Message
    from splitbrain.node.unicast3.header import PROTO_ID, MsgType, U3Header

    (_, api_b), (_, b) = pair
    b.stack.receive([Message("A", "B", b"", {PROTO_ID: U3Header(MsgType.DATA, 0, 5, True)})], b.now())
    _, text = await api_b.call("GET", "/metrics", token=None)
    assert 'splitbrain_protocol_drops_total{type="DATA"} 1.0' in text, text
