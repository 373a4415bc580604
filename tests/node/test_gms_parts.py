"""GMS's parts alone: the header codec, settings, the flat config split, and hostile GMS messages
(wire-valid, wrong in value) that are dropped and counted, never fatal."""

from __future__ import annotations

import random

import pytest

from splitbrain.node.compose import build_stack, split_config
from splitbrain.node.errors import SettingError
from splitbrain.node.gms.config import GmsConfig
from splitbrain.node.gms.fuzz import fuzz_header
from splitbrain.node.gms.header import CODEC, GMS_ID, GMS_TYPES, LOWER_CODEC, LOWER_ID, LOWER_TYPES, GmsHeader, GmsType
from splitbrain.node.layer import Bootstrap, ViewChange
from splitbrain.node.message import Message
from splitbrain.node.wire import WireError, decode_frame, encode_frame


@pytest.mark.parametrize("mtype", list(GmsType))
def test_header_round_trip(mtype):
    """Every message type survives encode and decode, under its own protocol id only."""
    hdr = GmsHeader(mtype, 7, "A", ("A", "B"), merge_id=3, reason="merge", digest=(("A", 5),))
    codec, other = (LOWER_CODEC, CODEC) if mtype in LOWER_TYPES else (CODEC, LOWER_CODEC)
    assert codec.decode(codec.encode(hdr)) == hdr
    with pytest.raises(WireError):
        other.decode(other.encode(hdr))


def test_header_rejects_garbage():
    """Truncated bodies, extra bytes and a member listed twice are wire errors."""
    body = CODEC.encode(GmsHeader(GmsType.VIEW, 1, "A", ("A", "B")))
    for bad in (body[:-1], body + b"x", b""):
        with pytest.raises(WireError):
            CODEC.decode(bad)
    twice = CODEC.encode(GmsHeader(GmsType.VIEW, 1, "A", ("A", "A")))
    with pytest.raises(WireError):
        CODEC.decode(twice)
    assert GMS_TYPES.isdisjoint(LOWER_TYPES)


def test_settings_and_the_flat_config_split():
    """GMS keys go to GMS, the rest to the protocol; a key nobody knows is named."""
    assert split_config("unicast3", {"fd_timeout": 3, "xmit_interval": 0.2}, "gms") == {
        "unicast3": {"xmit_interval": 0.2},
        "gms": {"fd_timeout": 3},
    }
    assert split_config("unicast3", {"xmit_interval": 0.2}) == {"unicast3": {"xmit_interval": 0.2}}
    with pytest.raises(SettingError) as info:
        build_stack("A", "unicast3", {"nonsense": 1}, random.Random(0), membership="gms")
    assert info.value.key == "nonsense"
    with pytest.raises(SettingError) as info:
        GmsConfig.from_dict({"fd_timeout": 0.1, "heartbeat_interval": 0.5})
    assert info.value.key == "fd_timeout"


def test_hostile_gms_messages_are_dropped_and_counted():
    """20 000 wire-valid hostile GMS headers from peers, with timers between: no exception, the
    invariants hold, the output encodes, and rejections are counted by type."""
    rng = random.Random(11)
    stack = build_stack("A", "unicast3", {}, random.Random(1), membership="gms", faults=False)
    now = 0.0
    stack.command(Bootstrap(peers=("A", "B", "C")), now)
    sent: list[GmsHeader] = []
    for i in range(20_000):
        peer = rng.choice(("B", "C", "Z"))
        hdr = fuzz_header(rng, sent[-20:])
        if hdr.type in LOWER_TYPES:
            msg = Message(peer, "A", b"", {LOWER_ID: hdr})
        elif rng.random() < 0.3:
            lower = GmsHeader(rng.choice(sorted(LOWER_TYPES)), hdr.view_id, hdr.coord, hdr.members)
            msg = Message(peer, "A", b"", {LOWER_ID: lower})
        else:
            msg = Message(peer, "A", b"", {GMS_ID: hdr})
        # Through the wire codec, as a peer's frame would arrive.
        _src, msgs = decode_frame(encode_frame(peer, [msg]))
        stack.receive(msgs, now)
        if i % 50 == 0:
            now += 0.1
            stack.on_timer(now)
        stack.check_invariants()
        out, _app, _events = stack.take()
        for m in out:
            encode_frame("A", [m])
            h = m.headers.get(GMS_ID)
            if isinstance(h, GmsHeader):
                sent.append(h)
    counters: dict[str, int] = {}
    for layer in stack.layers:
        for key, value in getattr(layer, "counters", {}).items():
            counters[key] = counters.get(key, 0) + value
    assert any(k.startswith("dropped_") for k in counters), counters


def test_node_config_takes_membership_from_file_or_environment():
    """`membership` in a node's config or SPLITBRAIN_MEMBERSHIP; GMS settings next to UNICAST3's."""
    from splitbrain.node.runtime.config import ConfigError, NodeConfig

    base = {"name": "A", "bind": "127.0.0.1:0", "admin": "127.0.0.1:0", "event_log": False}
    cfg = NodeConfig.from_dict(
        {**base, "config": {"fd_timeout": 3, "xmit_interval": 0.2}}, {"SPLITBRAIN_MEMBERSHIP": "gms"}
    )
    assert cfg.membership == "gms" and cfg.config == {"fd_timeout": 3, "xmit_interval": 0.2}
    assert NodeConfig.from_dict(base).membership == "static"
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_dict({**base, "membership": "paxos"})
    assert info.value.key == "membership"
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_dict({**base, "config": {"fd_timeout": 3}})  # static: UNICAST3 alone
    assert info.value.key == "config.fd_timeout"


def test_scenario_key_membership():
    """`membership: gms` takes GMS settings in `config:`; static rejects them; bad values are named."""
    from splitbrain.harness.scenario import ScenarioError, json_schema, parse_scenario

    base = {"name": "m", "protocol": "unicast3", "nodes": 3, "duration": 1, "workload": []}
    sc = parse_scenario({**base, "membership": "gms", "config": {"fd_timeout": 3}})
    assert sc.membership == "gms" and sc.to_dict()["membership"] == "gms"
    assert parse_scenario(sc.to_dict()) == sc
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**base, "config": {"fd_timeout": 3}})
    assert info.value.path == "config.fd_timeout"
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**base, "membership": "gossip"})
    assert info.value.path == "membership"
    assert json_schema()["properties"]["membership"]["enum"] == ["static", "gms"]


def test_an_injected_view_without_a_leaver_forgets_the_leave():
    """A LEAVE from B, then (within the heartbeat interval that batches leaves) a view injected
    without B: the invariants hold and B is not excluded again when the batch ends (found by the
    protocol fuzzer: the injected view kept B among the leavers, outside the view)."""
    stack = build_stack("A", "unicast3", {}, random.Random(1), faults=False, membership="gms")
    stack.command(ViewChange(members=("A", "B", "C"), view_id=1), 0.0)
    stack.take()
    leave = Message("B", "A", b"", {LOWER_ID: GmsHeader(GmsType.LEAVE, 1, "A", ("A", "B", "C"))})
    _src, msgs = decode_frame(encode_frame("B", [leave]))
    stack.receive(msgs, 0.1)
    stack.check_invariants()
    stack.command(ViewChange(members=("A", "C"), view_id=5), 0.2)
    stack.check_invariants()
    stack.take()
    # Past the leave batch (one heartbeat interval), before anyone could be suspected (fd_timeout).
    now = 0.2
    while (deadline := stack.next_deadline()) is not None and deadline <= 1.0:
        now = deadline
        stack.on_timer(now)
        stack.check_invariants()
    _out, _app, events = stack.take()
    assert now > 0.1 + GmsConfig().heartbeat_interval
    assert [e for e in events if e["kind"] == "view"] == []


def test_drop_steps_name_gms_message_types_only_with_membership_gms():
    """A drop step by type takes GMS's types with `membership: gms`, and rejects them otherwise
    naming the membership that sends them; a type nobody sends is named with the known ones."""
    from splitbrain.harness.scenario import ScenarioError, parse_scenario

    base = {"name": "d", "protocol": "unicast3", "nodes": 3, "duration": 5, "workload": []}

    def with_drop(membership: str, mtype):
        step = {"at": 1, "drop": {"at": "B", "from": "A", "type": mtype}}
        return parse_scenario({**base, "membership": membership, "schedule": [step]})

    assert with_drop("gms", ["HEARTBEAT", "DATA"]).schedule[0].params.types == ("HEARTBEAT", "DATA")
    assert with_drop("gms", "VIEW").schedule[0].params.types == ("VIEW",)
    with pytest.raises(ScenarioError) as info:
        with_drop("static", "HEARTBEAT")
    assert info.value.path == "schedule[0].drop.type"
    assert "HEARTBEAT is a message of membership protocol gms" in str(info.value)
    assert "membership: gms" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        with_drop("gms", "BEAT")
    assert "sends no BEAT messages" in str(info.value) and "HEARTBEAT" in str(info.value)
    assert with_drop("static", ["DATA", "APP"]).schedule[0].params.types == ("DATA", "APP")


def test_config_steps_take_gms_settings_with_membership_gms():
    """A config step may change GMS's settings with `membership: gms` (validated by GMS: fd_timeout
    above heartbeat_interval); static membership does not know them."""
    from splitbrain.harness.scenario import ScenarioError, parse_scenario

    base = {"name": "c", "protocol": "unicast3", "nodes": 3, "duration": 5, "workload": []}

    def with_config(membership: str, values: dict):
        step = {"at": 1, "config": {"at": "A", "set": values}}
        return parse_scenario({**base, "membership": membership, "schedule": [step]})

    assert with_config("gms", {"heartbeat_interval": 0.2, "xmit_interval": 0.3}).schedule
    with pytest.raises(ScenarioError) as info:
        with_config("gms", {"fd_timeout": 0.3})
    assert info.value.path == "schedule[0].config.set.fd_timeout"
    with pytest.raises(ScenarioError) as info:
        with_config("static", {"heartbeat_interval": 0.2})
    assert info.value.path == "schedule[0].config.set.heartbeat_interval"


def test_dropping_heartbeats_by_type_makes_the_receiver_suspect_on_sim():
    """Sim, exact: B drops A's HEARTBEATs from t=3 to t=9 (a drop step by GMS type): B suspects A
    and installs a view without it while A still lists B, and after the drop ends one view again."""
    from splitbrain.harness.checks import run_checks
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim.simulator import simulate

    sc = parse_scenario(
        {
            "name": "hb",
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": 3,
            "duration": 12,
            "settle": 10,
            "workload": [],
            "schedule": [{"at": 3, "drop": {"at": "B", "from": "A", "type": "HEARTBEAT", "until": 9}}],
        }
    )
    events = simulate(sc, 1).all_events()
    first = next(e for e in events if e["kind"] == "suspect")
    assert (first["node"], first["peer"]) == ("B", "A")
    # The last heartbeat heard came at most one interval before the drop began; the check runs
    # every interval.
    cfg = GmsConfig()
    assert 3 + cfg.fd_timeout - cfg.heartbeat_interval <= first["t"] <= 3 + cfg.fd_timeout + cfg.heartbeat_interval
    b_view = next(e for e in events if e["kind"] == "view" and e["node"] == "B" and e["t"] >= first["t"])
    assert "A" not in b_view["members"]
    a_views = [e for e in events if e["kind"] == "view" and e["node"] == "A" and e["t"] <= b_view["t"]]
    assert "B" in a_views[-1]["members"]
    (agree,) = run_checks(events, ["views_agree"])
    assert agree.passed, agree.explanation


def test_a_restarted_joiner_takes_only_the_join_rsp_of_its_own_incarnation():
    """A coordinator's retransmission backlog for D's previous life (a VIEW, a JOIN_RSP) reaches
    D's new life while it joins: both are dropped, and only the JOIN_RSP carrying D's incarnation
    (echoed from its JOIN_REQ) installs D's first view, with its digest."""
    from splitbrain.node.gms.gms import Gms, GmsState
    from splitbrain.node.layer import Announce, Down, Log

    coord = Gms("A", GmsConfig(), incarnation=1)
    coord.command(ViewChange(members=("A", "B"), view_id=3), 0.0)
    coord.up([Message("D", "A", b"", {GMS_ID: GmsHeader(GmsType.JOIN_REQ, merge_id=7)})], 0.0)
    out = coord.up([Message("B", "A", b"", {GMS_ID: GmsHeader(GmsType.VIEW_ACK, 4, "A")})], 0.0)
    (rsp,) = [a.msg.headers[GMS_ID] for a in out if isinstance(a, Down) and a.msg.dest == "D"]
    assert rsp.type is GmsType.JOIN_RSP and rsp.merge_id == 7 and rsp.members == ("A", "B", "D")

    joiner = Gms("D", GmsConfig(), incarnation=7)
    joiner.command(Bootstrap(peers=("A", "B", "D")), 0.0)
    stale_view = GmsHeader(GmsType.VIEW, 5, "A", ("A", "B", "D"), reason="join")
    stale_rsp = GmsHeader(GmsType.JOIN_RSP, 4, "A", ("A", "B", "D"), 6, digest=(("A", 9),))

    def drops(actions):
        return [a.event["reason"] for a in actions if isinstance(a, Log) and a.event["kind"] == "drop"]

    assert drops(joiner.up([Message("A", "D", b"", {GMS_ID: stale_view})], 0.1)) == [
        "joining: a view for an earlier incarnation"
    ]
    assert drops(joiner.up([Message("A", "D", b"", {GMS_ID: stale_rsp})], 0.1)) == ["for an earlier incarnation"]
    assert joiner.state is GmsState.JOINING and joiner.view_id == 0
    out = joiner.up([Message("A", "D", b"", {GMS_ID: rsp})], 0.2)
    (view,) = [a.cmd for a in out if isinstance(a, Announce) and isinstance(a.cmd, ViewChange)]
    assert joiner.state is GmsState.MEMBER and view.members == ("A", "B", "D") and view.digest == rsp.digest


def _gms_to(out, dest: str) -> list[GmsHeader]:
    from splitbrain.node.layer import Down

    return [a.msg.headers[GMS_ID] for a in out if isinstance(a, Down) and a.msg.dest == dest]


def _from(src: str, hdr: GmsHeader) -> list[Message]:
    return [Message(src, "A", b"", {GMS_ID: hdr})]


def test_a_joiner_gets_its_join_rsp_once_every_other_member_installed_the_join_view():
    """JGroups' view ack collection: A sends D's JOIN_RSP only after B and C acknowledged the join
    VIEW; a repeated JOIN_REQ meanwhile gets nothing; a member acknowledges join views only."""
    from splitbrain.node.gms.gms import Gms

    coord = Gms("A", GmsConfig(), incarnation=1)
    coord.command(ViewChange(members=("A", "B", "C"), view_id=3), 0.0)
    out = coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 0.0)
    assert [h.type for h in _gms_to(out, "B") + _gms_to(out, "C")] == [GmsType.VIEW, GmsType.VIEW]
    assert not _gms_to(out, "D") and coord.busy() == ["JOIN_RSP to D waiting for VIEW_ACK from B, C"]
    assert not _gms_to(coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 0.3), "D")
    assert not _gms_to(coord.up(_from("B", GmsHeader(GmsType.VIEW_ACK, 4, "A")), 0.4), "D")
    (rsp,) = _gms_to(coord.up(_from("C", GmsHeader(GmsType.VIEW_ACK, 4, "A")), 0.5), "D")
    assert rsp.type is GmsType.JOIN_RSP and rsp.view_id == 4 and rsp.members == ("A", "B", "C", "D")
    assert coord.busy() == [] and coord.next_deadline() is None

    member = Gms("B", GmsConfig(), incarnation=1)
    member.command(ViewChange(members=("A", "B", "C"), view_id=3), 0.0)
    join = member.up(
        [Message("A", "B", b"", {GMS_ID: GmsHeader(GmsType.VIEW, 4, "A", ("A", "B", "C", "D"), reason="join")})], 1.0
    )
    leave = member.up(
        [Message("A", "B", b"", {GMS_ID: GmsHeader(GmsType.VIEW, 5, "A", ("A", "B", "C"), reason="leave")})], 1.1
    )
    assert [(h.type, h.view_id) for h in _gms_to(join, "A")] == [(GmsType.VIEW_ACK, 4)]
    assert _gms_to(leave, "A") == []


def test_a_join_view_nobody_acknowledges_is_answered_after_the_timeout():
    from splitbrain.node.gms.gms import Gms

    coord = Gms("A", GmsConfig(view_ack_collection_timeout=0.7), incarnation=1)
    coord.command(ViewChange(members=("A", "B"), view_id=3), 0.0)
    coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 1.0)
    assert coord.next_deadline() == pytest.approx(1.7)
    assert not _gms_to(coord.on_timer(1.69), "D")
    (rsp,) = _gms_to(coord.on_timer(1.7), "D")
    assert rsp.members == ("A", "B", "D") and coord.counters["view_ack_timeouts"] == 1


def test_concurrent_joiners_wait_only_for_members_and_get_the_newest_view():
    """C joins while D's JOIN_RSP waits for B: C's join VIEW goes to B only (D, still joining, gets
    it in its JOIN_RSP instead), C waits for B only, and both answers carry the view with C."""
    from splitbrain.node.gms.gms import Gms

    coord = Gms("A", GmsConfig(), incarnation=1)
    coord.command(ViewChange(members=("A", "B"), view_id=3), 0.0)
    coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 0.0)
    out = coord.up(_from("C", GmsHeader(GmsType.JOIN_REQ, merge_id=6)), 0.1)
    assert [h.view_id for h in _gms_to(out, "B")] == [5] and not _gms_to(out, "D") and not _gms_to(out, "C")
    assert coord.busy() == ["JOIN_RSP to C waiting for VIEW_ACK from B", "JOIN_RSP to D waiting for VIEW_ACK from B"]
    out = coord.up(_from("B", GmsHeader(GmsType.VIEW_ACK, 5, "A")), 0.2)
    for joiner in ("C", "D"):
        (rsp,) = _gms_to(out, joiner)
        assert rsp.view_id == 5 and rsp.members == ("A", "B", "D", "C"), joiner


def test_a_waiting_join_rsp_follows_later_views_and_a_merge_cancels_it():
    """A leave view while D's JOIN_RSP waits: the answer carries it, and B's acknowledgement of D's
    join view still counts. After a merge view no waiting joiner is answered (its join digest does
    not cover the other side); it asks again."""
    from splitbrain.node.gms.commands import Suspect
    from splitbrain.node.gms.gms import Gms

    coord = Gms("A", GmsConfig(), incarnation=1)
    coord.command(ViewChange(members=("A", "B", "C"), view_id=3), 0.0)
    coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 0.0)  # join view 4
    coord.command(Suspect(peers=("C",)), 0.1)  # view 5 without C: nobody waits for C any more
    (rsp,) = _gms_to(coord.up(_from("B", GmsHeader(GmsType.VIEW_ACK, 4, "A")), 0.2), "D")
    assert rsp.view_id == 5 and rsp.members == ("A", "B", "D")

    coord = Gms("A", GmsConfig(), incarnation=1)
    coord.command(ViewChange(members=("A", "B"), view_id=3), 0.0)
    coord.up(_from("D", GmsHeader(GmsType.JOIN_REQ, merge_id=5)), 0.0)
    coord._make_view(0.1, ("A", "B", "D", "E"), "merge", 9)
    assert coord.busy() == [] and not _gms_to(coord.up(_from("B", GmsHeader(GmsType.VIEW_ACK, 4, "A")), 0.2), "D")
