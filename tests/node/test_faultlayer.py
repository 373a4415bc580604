"""The in-process fault layer: rules by direction, peer, type, seqnos, count, after, p, time, delay."""

import random

import pytest

from splitbrain.node.errors import SettingError
from splitbrain.node.faultlayer import FaultLayer, FaultRule
from splitbrain.node.layer import Down, Log, Up
from splitbrain.node.message import Message
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header


def data(seqno, src="A", dest="B"):
    return Message(src, dest, b"", {PROTO_ID: U3Header(MsgType.DATA, seqno, 1)})


def ack(seqno, src="A", dest="B"):
    return Message(src, dest, b"", {PROTO_ID: U3Header(MsgType.ACK, seqno, 1)})


def passed_up(actions):
    return [m.headers[PROTO_ID].seqno for a in actions if isinstance(a, Up) for m in a.msgs]


def layer_with(**rule):
    fl = FaultLayer("B", random.Random(3))
    fl.add_rule(FaultRule(**rule))
    return fl


def test_drop_first_data_only():
    """count=1 on DATA drops exactly the first DATA and logs why."""
    fl = layer_with(types=frozenset({"DATA"}), count=1)
    out = fl.up([data(1), ack(1), data(2)], 0.0)
    assert passed_up(out) == [1, 2]  # the ACK (seqno 1) and DATA 2 pass
    logs = [a.event for a in out if isinstance(a, Log)]
    assert logs[0]["type"] == "DATA" and logs[0]["seqno"] == 1 and "fault rule" in logs[0]["reason"]


def test_drop_middle_of_batch_by_seqno():
    """A seqno range drops one message in the middle of a batch; the rest pass in order."""
    fl = layer_with(types=frozenset({"DATA"}), seqnos=(5, 5))
    assert passed_up(fl.up([data(i) for i in range(1, 10)], 0.0)) == [1, 2, 3, 4, 6, 7, 8, 9]


def test_after_lets_first_matches_pass():
    """after=2 lets two matches through, then acts on the next ones."""
    fl = layer_with(types=frozenset({"DATA"}), after=2, count=2)
    assert passed_up(fl.up([data(i) for i in range(1, 7)], 0.0)) == [1, 2, 5, 6]


def test_peer_and_direction_filter():
    """A rule for peer C going down leaves traffic from A coming up untouched."""
    fl = layer_with(direction="down", peer="C")
    assert passed_up(fl.up([data(1)], 0.0)) == [1]
    assert fl.down(data(2, "B", "C"), 0.0)[0].__class__ is Log
    assert isinstance(fl.down(data(3, "B", "D"), 0.0)[0], Down)


def test_time_window():
    """A rule acts only between start and until."""
    fl = layer_with(start=1.0, until=2.0)
    assert passed_up(fl.up([data(1)], 0.5)) == [1]
    assert passed_up(fl.up([data(2)], 1.5)) == []
    assert passed_up(fl.up([data(3)], 2.0)) == [3]


def test_probability_is_seeded_and_close_to_p():
    """p=0.3 drops about 30 % of 5000 messages, identically for the same seed."""

    def run():
        fl = layer_with(p=0.3)
        return passed_up(fl.up([data(i) for i in range(5000)], 0.0))

    first, second = run(), run()
    assert first == second
    assert 0.27 < 1 - len(first) / 5000 < 0.33


def test_delay_releases_at_deadline():
    """A delay rule holds a message and releases it on the timer at now + delay_s."""
    fl = layer_with(action="delay", delay_s=0.25)
    assert fl.up([data(1)], 1.0) == []
    assert fl.next_deadline() == pytest.approx(1.25)
    assert fl.on_timer(1.2) == []
    assert passed_up(fl.on_timer(1.25)) == [1]
    assert fl.next_deadline() is None


def test_delay_with_jitter_stays_in_bounds():
    """Jittered delays fall in [delay, delay + jitter) and are seeded."""
    fl = layer_with(action="delay", delay_s=0.1, jitter_s=0.05)
    for i in range(50):
        fl.up([data(i)], 0.0)
    dues = sorted(h.due for h in fl._held)
    assert 0.1 <= dues[0] and dues[-1] < 0.15 and dues[0] != dues[-1]


def test_duplicate_passes_twice():
    """A duplicate rule passes the message and a copy."""
    fl = layer_with(action="duplicate", count=1)
    assert passed_up(fl.up([data(1), data(2)], 0.0)) == [1, 1, 2]


def test_remove_and_clear_rules():
    """Removed rules stop acting; removing an unknown rule is a local error."""
    fl = FaultLayer("B", random.Random(1))
    rid = fl.add_rule(FaultRule())
    assert passed_up(fl.up([data(1)], 0.0)) == []
    fl.remove_rule(rid)
    assert passed_up(fl.up([data(2)], 0.0)) == [2]
    with pytest.raises(KeyError):
        fl.remove_rule(rid)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"p": 2}, "p"),
        ({"direction": "sideways"}, "direction"),
        ({"action": "delay"}, "delay_s"),
        ({"count": 0}, "count"),
        ({"seqnos": (5, 1)}, "seqnos"),
        ({"action": "melt"}, "action"),
    ],
)
def test_bad_rules_name_the_field(kw, field):
    """A malformed rule is refused with the field named, as a key callers need not parse."""
    with pytest.raises(SettingError, match=f"^{field}: ") as info:
        FaultRule(**kw)
    assert info.value.key == field
