"""The simulator and its network model, driven with a tiny pass-through stack (no protocol)."""

from __future__ import annotations

import itertools

import pytest

from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim import (
    IdentityCodec,
    InvariantViolation,
    LinkModel,
    Network,
    Simulation,
    SimulationError,
    StepLimitExceeded,
)
from splitbrain.node.events import make_event, validate_event
from splitbrain.node.faultlayer import FaultLayer
from splitbrain.node.layer import Down, Layer, Log, Up, ViewChange
from splitbrain.node.message import Message, parse_app_id
from splitbrain.node.stack import Stack

# ---- a pass-through stack ---------------------------------------------------------------------


class PassThrough(Layer):
    """Logs every app message sent and delivered; optionally ticks a periodic timer."""

    proto = "pass"

    def __init__(self, name: str, incarnation: int, tick_s: float | None = None, burst: int = 1):
        self.name = name
        self.incarnation = incarnation
        self.tick_s = tick_s
        self.burst = burst
        self._deadline = tick_s
        self.fired: list[float] = []
        self.views: list[ViewChange] = []
        self.snapshots: list[tuple[float, bool]] = []
        self.broken = False

    def down(self, msg, now):
        out = [Log(event=make_event(now, self.name, "pass", "send", peer=msg.dest, app=msg.app))]
        # `burst` copies go down at once, to exercise bundling and frame splitting.
        out.extend(Down(msg=msg if i == 0 else msg.copy()) for i in range(self.burst))
        return out

    def up(self, msgs, now):
        out = [Log(event=make_event(now, self.name, "pass", "deliver", peer=m.src, app=m.app)) for m in msgs]
        out.append(Up(msgs=msgs))
        return out

    def command(self, cmd, now):
        if isinstance(cmd, ViewChange):
            self.views.append(cmd)
            return [
                Log(event=make_event(now, self.name, "pass", "view", members=list(cmd.members), view_id=cmd.view_id))
            ]
        return []

    def next_deadline(self):
        return self._deadline

    def on_timer(self, now):
        self.fired.append(now)
        self._deadline = now + self.tick_s
        return []

    def check_invariants(self):
        assert not self.broken, "deliberately broken"

    def window_events(self, now, final=False):
        self.snapshots.append((now, final))
        return [make_event(now, self.name, "pass", "window", side="send", final=final)]


class Factory:
    """A stack factory that remembers every stack it built (name -> list of stacks)."""

    def __init__(self, tick_s: float | None = None, burst: int = 1, fault_layer: bool = False):
        self.tick_s = tick_s
        self.burst = burst
        self.fault_layer = fault_layer
        self.built: dict[str, list[Stack]] = {}
        self.calls: list[tuple] = []

    def __call__(self, name, protocol, config, rng, incarnation):
        self.calls.append((name, protocol, dict(config), incarnation))
        layers: list[Layer] = []
        if self.fault_layer:
            layers.append(FaultLayer(name, rng))
        layers.append(PassThrough(name, incarnation, self.tick_s, self.burst))
        stack = Stack(name, layers)
        self.built.setdefault(name, []).append(stack)
        return stack


class BytesCodec:
    """A codec whose frames are bytes of a realistic size (so frames can be split) without a
    wire format: the bytes carry a key into a table of message lists."""

    class WireError(ValueError):
        pass

    def __init__(self):
        self._table: dict[bytes, tuple[str, list[Message]]] = {}
        self._ids = itertools.count()

    def encode_frame(self, src, msgs):
        key = next(self._ids).to_bytes(8, "big")
        self._table[key] = (src, list(msgs))
        return key + bytes(sum(len(m.payload) + 16 for m in msgs))

    def decode_frame(self, data):
        if data[:8] not in self._table:
            raise self.WireError("unknown frame")
        src, msgs = self._table[data[:8]]
        return src, [m.copy() for m in msgs]


def scenario(**over):
    base = {
        "name": "t",
        "protocol": "unicast3",
        "nodes": ["A", "B"],
        "workload": [{"from": "A", "to": "B", "rate": 100, "count": 100}],
        "schedule": [],
        "duration": 2,
        "settle": 1,
        "checks": ["fifo"],
        "seed": 1,
    }
    base.update(over)
    return parse_scenario(base)


def run(sc, seed=None, factory=None, **kw):
    factory = factory or Factory()
    kw.setdefault("codec", IdentityCodec())
    sim = Simulation(sc, seed, stack_factory=factory, check_invariants=True, **kw)
    return sim, sim.run(), factory


def kinds(events, kind, node=None):
    return [e for e in events if e["kind"] == kind and (node is None or e["node"] == node)]


def sent_times(result, node="A"):
    return {e["app"]: e["t"] for e in kinds(result.events[node], "send")}


# ---- determinism ------------------------------------------------------------------------------


def _lossy():
    return scenario(
        workload=[{"from": "all", "to": "all", "rate": 200, "count": 300}],
        schedule=[
            {"at": 0.2, "loss": {"link": "*", "p": 0.3}},
            {"at": 0.2, "delay": {"link": "A->B", "ms": 5, "jitter_ms": 4}},
            {"at": 0.2, "duplicate": {"link": "B->A", "p": 0.2}},
            {"at": 0.2, "reorder": {"link": "A->B", "p": 0.3, "ms": 20}},
        ],
    )


def _comparable(result):
    stats = dict(result.stats)
    stats.pop("wall_time_s")
    return result.events, result.timeline, stats


def test_same_seed_replays_exactly():
    """Two runs of one scenario with one seed give identical event logs, timelines and stats."""
    _, a, _ = run(_lossy(), seed=11)
    _, b, _ = run(_lossy(), seed=11)
    assert _comparable(a) == _comparable(b)
    assert a.stats["frames_lost"] > 0 and a.stats["frames_duplicated"] > 0


def test_different_seed_differs():
    """Another seed draws other losses, delays and duplicates."""
    _, a, _ = run(_lossy(), seed=11)
    _, b, _ = run(_lossy(), seed=12)
    assert a.events != b.events


def test_seed_defaults_to_scenario_seed():
    """Without a seed argument the scenario's seed is used."""
    sim, _, _ = run(_lossy())
    assert sim.seed == 1


def test_events_follow_schema():
    """Every event the harness writes (node lifecycle, timeline) is valid schema-1."""
    sc = scenario(
        schedule=[
            {"at": 0.5, "kill": "B"},
            {"at": 0.6, "loss": {"link": "A->B", "p": 0.5}},
            {"at": 1.0, "restart": "B"},
            {"at": 1.5, "heal": "all"},
        ]
    )
    _, res, _ = run(sc)
    for ev in res.all_events():
        validate_event(ev)


# ---- the network model ------------------------------------------------------------------------


def test_loss_rate_close_to_p():
    """With loss p=0.3 on A->B about 30% of 10000 frames are lost, and only on that link."""
    sc = scenario(
        workload=[
            {"from": "A", "to": "B", "rate": 1000, "count": 10000},
            {"from": "B", "to": "A", "rate": 100, "count": 500},
        ],
        schedule=[{"at": 0, "loss": {"link": "A->B", "p": 0.3}}],
        duration=10,
    )
    _, res, _ = run(sc)
    lost = res.stats["frames_lost"]
    assert abs(lost / 10000 - 0.3) < 0.03
    assert len(kinds(res.events["B"], "deliver")) == 10000 - lost
    assert len(kinds(res.events["A"], "deliver")) == 500


def test_blocked_link_delivers_nothing_until_heal():
    """A one-way partition A->B drops every frame A->B while B->A flows; heal restores A->B."""
    sc = scenario(
        workload=[
            {"from": "A", "to": "B", "rate": 100, "count": 200},
            {"from": "B", "to": "A", "rate": 100, "count": 200},
        ],
        schedule=[{"at": 0.5, "partition": {"from": "A", "to": "B"}}, {"at": 1.0, "heal": "all"}],
        duration=2.5,
    )
    _, res, _ = run(sc)
    at_b = [e["t"] for e in kinds(res.events["B"], "deliver")]
    assert not [t for t in at_b if 0.501 < t < 1.0]
    assert [t for t in at_b if t > 1.0]
    assert len(kinds(res.events["A"], "deliver")) == 200
    assert res.stats["frames_blocked"] == 50
    on = kinds(res.timeline, "fault_on")
    off = kinds(res.timeline, "fault_off")
    assert [(e["t"], e["fault"]) for e in on] == [(0.5, "partition")]
    assert [(e["t"], e["fault"]) for e in off] == [(1.0, "partition")]


def test_two_way_partition_blocks_between_groups_only():
    """[[A], [B, C]] cuts A off both ways and leaves B<->C alone."""
    sc = scenario(
        nodes=["A", "B", "C"],
        workload=[{"from": "all", "to": "all", "rate": 10, "count": 10}],
        schedule=[{"at": 0, "partition": [["A"], ["B", "C"]]}],
    )
    _, res, _ = run(sc)
    assert kinds(res.events["A"], "deliver") == []
    assert {e["peer"] for e in kinds(res.events["B"], "deliver")} == {"C"}
    assert {e["peer"] for e in kinds(res.events["C"], "deliver")} == {"B"}


def test_default_delay_and_fifo():
    """Without faults a frame takes the default 0.5 ms and arrives in send order."""
    _, res, _ = run(scenario())
    sent = sent_times(res)
    delivered = kinds(res.events["B"], "deliver")
    assert len(delivered) == 100
    for ev in delivered:
        assert ev["t"] - sent[ev["app"]] == pytest.approx(0.0005)
    ns = [parse_app_id(e["app"])[2] for e in delivered]
    assert ns == sorted(ns) == list(range(1, 101))


def test_delay_adds_configured_latency():
    """delay ms=50 makes every A->B frame take 50 ms; jitter keeps it within +-10 ms and FIFO."""
    sc = scenario(schedule=[{"at": 0, "delay": {"link": "A->B", "ms": 50}}])
    _, res, _ = run(sc)
    sent = sent_times(res)
    for ev in kinds(res.events["B"], "deliver"):
        assert ev["t"] - sent[ev["app"]] == pytest.approx(0.050)

    sc = scenario(
        workload=[{"from": "A", "to": "B", "rate": 1000, "count": 1000}],
        schedule=[{"at": 0, "delay": {"link": "A->B", "ms": 50, "jitter_ms": 10}}],
    )
    _, res, _ = run(sc)
    sent = sent_times(res)
    delivered = kinds(res.events["B"], "deliver")
    latencies = [ev["t"] - sent[ev["app"]] for ev in delivered]
    # FIFO may push a frame behind its predecessor, which is at most 1 ms + 20 ms of jitter later.
    assert all(0.040 - 1e-9 <= lat <= 0.060 + 0.001 + 1e-9 for lat in latencies)
    assert max(latencies) - min(latencies) > 0.01
    ns = [parse_app_id(e["app"])[2] for e in delivered]
    assert ns == sorted(ns)


def test_duplication_duplicates():
    """duplicate p=1 delivers every frame twice; p=0.5 about half of them."""
    sc = scenario(schedule=[{"at": 0, "duplicate": {"link": "A->B", "p": 1.0}}])
    _, res, _ = run(sc)
    apps = [e["app"] for e in kinds(res.events["B"], "deliver")]
    assert len(apps) == 200 and len(set(apps)) == 100
    assert res.stats["frames_duplicated"] == 100

    sc = scenario(
        workload=[{"from": "A", "to": "B", "rate": 1000, "count": 1000}],
        schedule=[{"at": 0, "duplicate": {"link": "A->B", "p": 0.5}}],
    )
    _, res, _ = run(sc)
    assert 400 < res.stats["frames_duplicated"] < 600


def test_reorder_breaks_fifo_only_when_asked():
    """reorder p=0.3 holds frames back so some arrive out of order; without it none do."""
    base = {"workload": [{"from": "A", "to": "B", "rate": 1000, "count": 1000}]}
    _, res, _ = run(scenario(**base, schedule=[{"at": 0, "reorder": {"link": "A->B", "p": 0.3, "ms": 20}}]))
    ns = [parse_app_id(e["app"])[2] for e in kinds(res.events["B"], "deliver")]
    assert len(ns) == 1000 and sorted(ns) == list(range(1, 1001))
    assert ns != sorted(ns)
    assert 200 < res.stats["frames_reordered"] < 400


def test_heal_index_removes_one_fault():
    """heal: N undoes step N only; another fault on the same link stays in force."""
    sc = scenario(
        workload=[{"from": "A", "to": "B", "rate": 100, "count": 200}],
        schedule=[
            {"at": 0, "delay": {"link": "A->B", "ms": 20}},
            {"at": 0, "loss": {"link": "A->B", "p": 1.0}},
            {"at": 1.0, "heal": 1},
        ],
        duration=3,
    )
    _, res, _ = run(sc)
    sent = sent_times(res)
    delivered = kinds(res.events["B"], "deliver")
    assert delivered and all(sent[e["app"]] >= 1.0 for e in delivered)
    assert all(e["t"] - sent[e["app"]] == pytest.approx(0.020) for e in delivered)
    assert [e["fault"] for e in kinds(res.timeline, "fault_off")] == ["loss"]


def test_later_fault_overrides_and_heal_restores_earlier():
    """Network faults compose in order: removing the later one brings back the earlier one."""
    net = Network(["A", "B"], __import__("random").Random(1))
    net.apply(1, [("A", "B")], loss_p=0.1)
    net.apply(2, [("A", "B")], loss_p=0.9)
    assert net.link("A", "B").loss_p == 0.9
    assert net.remove(2)
    assert net.link("A", "B").loss_p == 0.1
    assert net.heal_all() == [1]
    assert net.link("A", "B").model == LinkModel()
    assert not net.remove(1)


def test_bundling_groups_by_destination_in_order():
    """Messages one input sends to one destination travel as one frame, in order."""
    factory = Factory(burst=3)
    _, res, _ = run(scenario(), factory=factory)
    assert res.stats["frames_sent"] == 100
    assert len(kinds(res.events["B"], "deliver")) == 300


def test_large_frames_are_split():
    """A frame over 60000 bytes is split into several frames that all arrive in order."""
    factory = Factory(burst=40)
    sc = scenario(workload=[{"from": "A", "to": "B", "rate": 10, "count": 5, "size": 4000}])
    _, res, _ = run(sc, factory=factory, codec=BytesCodec())
    assert res.stats["frames_split"] >= 5
    assert len(kinds(res.events["B"], "deliver")) == 200
    ns = [parse_app_id(e["app"])[2] for e in kinds(res.events["B"], "deliver")]
    assert ns == sorted(ns)


class Flaky(BytesCodec):
    """Frames whose key ends in 3 (mod `every`) do not decode."""

    def __init__(self, every: int = 10):
        super().__init__()
        self.every = every

    def decode_frame(self, data):
        if data[7] % self.every == 3 % self.every:
            raise self.WireError("corrupt")
        return super().decode_frame(data)


def test_bad_frame_is_counted_not_fatal():
    """A frame the codec cannot decode is dropped with a drop event; the run goes on."""
    _, res, _ = run(scenario(), codec=Flaky())
    assert res.stats["frames_bad"] == 10
    drops = kinds(res.events["B"], "drop")
    assert drops[0]["reason"] == "bad_frame" and drops[0]["count"] == 1
    assert sum(e["count"] for e in drops) == 10
    assert len(kinds(res.events["B"], "deliver")) == 90


def test_a_flood_of_bad_frames_writes_a_line_a_second_with_exact_counts():
    """Every other frame to B is garbage for 20 s: B's drop lines stay about one a second, their
    counts add up to every bad frame, and each line has the event schema."""
    sc = scenario(workload=[{"from": "A", "to": "B", "rate": 1000, "duration": 20}], duration=20, settle=1)
    _, res, _ = run(sc, codec=Flaky(every=2))
    bad = res.stats["frames_bad"]
    assert bad > 9000
    drops = kinds(res.events["B"], "drop")
    assert sum(e["count"] for e in drops) == bad
    assert len(drops) <= res.end_time + 2  # one key: the first at once, then one per second
    times = [e["t"] for e in drops]
    assert times == sorted(times) and all(b - a >= 1.0 - 1e-9 for a, b in zip(times[1:], times[2:]))
    for e in drops:
        validate_event(e)


def test_counts_pending_at_a_kill_are_logged_with_the_kill():
    """A node killed in the middle of a flood logs its pending count before node_stop."""
    sc = scenario(
        workload=[{"from": "A", "to": "B", "rate": 1000, "duration": 3}],
        duration=3,
        settle=1,
        schedule=[{"at": 1.5, "kill": "B"}],
    )
    _, res, _ = run(sc, codec=Flaky(every=2))
    events = res.events["B"]
    stop = next(i for i, e in enumerate(events) if e["kind"] == "node_stop")
    drops = kinds(events, "drop")
    assert sum(e["count"] for e in drops) == res.stats["frames_bad"] > 0
    assert events[stop - 1]["kind"] == "drop" and events[stop - 1]["t"] == events[stop]["t"]
    assert not kinds(events[stop:], "drop")


# ---- nodes: kill, restart, pause, views, timers -----------------------------------------------


def test_kill_drops_frames_and_restart_starts_new_incarnation():
    """A killed receiver gets nothing; after restart a new stack (incarnation 1) receives again."""
    sc = scenario(schedule=[{"at": 0.3, "kill": "B"}, {"at": 0.6, "restart": "B"}])
    _, res, factory = run(sc)
    assert [c[3] for c in factory.calls if c[0] == "B"] == [0, 1]
    delivered = [e["t"] for e in kinds(res.events["B"], "deliver")]
    assert not [t for t in delivered if 0.3 < t < 0.6]
    assert len(delivered) == 100 - 30
    life = [
        (e["kind"], e["t"], e.get("incarnation")) for e in res.events["B"] if e["kind"] in ("node_start", "node_stop")
    ]
    assert life == [("node_start", 0.0, 0), ("node_stop", 0.3, 0), ("node_start", 0.6, 1)]
    assert res.events["B"][1]["kind"] == "view"  # the initial view of the first incarnation


def test_dead_sender_skips_messages_and_numbering_continues():
    """A dead sender sends nothing (slots skipped, not queued); after restart n continues."""
    sc = scenario(schedule=[{"at": 0.3, "kill": "A"}, {"at": 0.5, "restart": "A"}])
    _, res, _ = run(sc)
    sends = kinds(res.events["A"], "send")
    assert res.stats["msgs_skipped"] == 20 and res.stats["msgs_sent"] == 80
    assert [parse_app_id(e["app"])[2] for e in sends] == list(range(1, 81))
    assert not [e for e in sends if 0.3 <= e["t"] < 0.5]


def test_frames_to_dead_node_are_dropped():
    """Frames in flight to a node that dies are counted as frames_to_dead."""
    sc = scenario(schedule=[{"at": 0.005, "delay": {"link": "A->B", "ms": 100}}, {"at": 0.5, "kill": "B"}])
    _, res, _ = run(sc)
    assert res.stats["frames_to_dead"] == 100 - len(kinds(res.events["B"], "deliver"))
    assert res.stats["frames_to_dead"] > 0


def test_pause_buffers_frames_and_suspends_timers():
    """A paused node processes nothing; on resume it gets the buffered frames, then ticks again."""
    factory = Factory(tick_s=0.1)
    sc = scenario(schedule=[{"at": 0.25, "pause": "B"}, {"at": 0.75, "resume": "B"}])
    _, res, _ = run(sc, factory=factory)
    b = factory.built["B"][0].layers[0]
    assert not [t for t in b.fired if 0.25 < t < 0.75]
    assert 0.75 in b.fired  # the overdue timer fires at resume
    delivered = kinds(res.events["B"], "deliver")
    assert len(delivered) == 100
    assert not [e for e in delivered if 0.2505 < e["t"] < 0.75]
    assert len([e for e in delivered if e["t"] == 0.75]) == 50
    ns = [parse_app_id(e["app"])[2] for e in delivered]
    assert ns == sorted(ns)
    assert [e["fault"] for e in kinds(res.timeline, "fault_off")] == ["pause"]


def test_pause_buffer_is_bounded():
    """Frames beyond the pause buffer are dropped and counted."""
    sc = scenario(schedule=[{"at": 0.0, "pause": "B"}, {"at": 1.5, "resume": "B"}])
    _, res, _ = run(sc, pause_buffer_frames=10)
    assert res.stats["frames_pause_overflow"] == 90
    assert len(kinds(res.events["B"], "deliver")) == 10


def test_paused_sender_skips_messages():
    """A paused application sends nothing during the pause."""
    sc = scenario(schedule=[{"at": 0.2, "pause": "A"}, {"at": 0.4, "resume": "A"}])
    _, res, _ = run(sc)
    assert res.stats["msgs_skipped"] == 20


def test_view_steps_increment_view_id():
    """Injected views reach the stack as ViewChange with a per-node view id after the initial one."""
    factory = Factory()
    sc = scenario(
        nodes=["A", "B", "C"],
        schedule=[
            {"at": 0.5, "view": {"at": "B", "members": ["B", "C"]}},
            {"at": 1.0, "view": {"at": "B", "members": ["A", "B", "C"]}},
        ],
    )
    run(sc, factory=factory)
    views = factory.built["B"][0].layers[0].views
    assert [(v.members, v.view_id) for v in views] == [(("A", "B", "C"), 1), (("B", "C"), 2), (("A", "B", "C"), 3)]


def test_no_initial_view_when_disabled():
    """initial_view=False leaves views to the schedule."""
    factory = Factory()
    run(scenario(), factory=factory, initial_view=False)
    assert factory.built["A"][0].layers[0].views == []


def test_timers_fire_at_deadlines():
    """A layer's periodic deadline is honoured exactly in virtual time."""
    factory = Factory(tick_s=0.25)
    run(scenario(duration=1, workload=[{"from": "A", "to": "B", "rate": 10, "count": 5}]), factory=factory)
    fired = factory.built["A"][0].layers[0].fired
    assert fired == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0])


def test_final_window_snapshots_of_live_nodes():
    """At the end every live node's layers with window_events are asked for final snapshots."""
    factory = Factory()
    sc = scenario(nodes=["A", "B", "C"], schedule=[{"at": 1, "kill": "C"}])
    _, res, _ = run(sc, factory=factory)
    assert factory.built["A"][0].layers[0].snapshots == [(3.0, True)]
    assert factory.built["C"][0].layers[0].snapshots == []
    assert res.events["A"][-1]["kind"] == "window" and res.events["A"][-1]["final"] is True
    assert res.stats["virtual_time_s"] == 3.0


# ---- in-process rules -------------------------------------------------------------------------


def test_drop_step_adds_and_heal_removes_rule():
    """A drop step installs a FaultLayer rule (count honoured); heal removes it."""
    factory = Factory(fault_layer=True)
    sc = scenario(
        schedule=[
            {"at": 0.0, "drop": {"at": "B", "from": "A", "type": "APP", "count": 5}},
            {"at": 0.5, "drop": {"at": "B", "from": "A", "type": "APP"}},
            {"at": 0.8, "heal": 1},
        ]
    )
    _, res, _ = run(sc, factory=factory)
    delivered = kinds(res.events["B"], "deliver")
    assert len(delivered) == 100 - 5 - 30
    assert set(factory.built["B"][0].layer(FaultLayer).rules()) == {1}
    assert [e["fault"] for e in kinds(res.timeline, "fault_off")] == ["drop"]


def test_drop_without_fault_layer_is_a_clear_error():
    """A drop step on a stack without a FaultLayer stops the run with a message naming the node."""
    sc = scenario(schedule=[{"at": 0.1, "drop": {"at": "B", "type": "ACK"}}])
    with pytest.raises(SimulationError, match="B's stack has no FaultLayer"):
        run(sc)


# ---- safety bounds ----------------------------------------------------------------------------


def test_max_steps_bound():
    """A run longer than max_steps stops with StepLimitExceeded naming the time and seed."""
    with pytest.raises(StepLimitExceeded, match=r"max_steps=50 .*seed 1"):
        run(scenario(), max_steps=50)


def test_timer_livelock_is_detected():
    """A layer whose deadline never moves past now is reported instead of hanging."""

    class Stuck(PassThrough):
        def on_timer(self, now):
            return []

    def factory(name, protocol, config, rng, incarnation):
        return Stack(name, [Stuck(name, incarnation, tick_s=0.1)])

    sim = Simulation(scenario(), stack_factory=factory, codec=IdentityCodec())
    with pytest.raises(SimulationError, match="timer livelock at node A"):
        sim.run()
    partial = sim.result()
    assert not partial.completed and partial.events["A"]


def test_invariant_violation_names_node_and_seed():
    """A failing check_invariants() becomes InvariantViolation naming node, time and seed."""

    class BreaksOnView(PassThrough):
        def command(self, cmd, now):
            self.broken = cmd.view_id == 2
            return super().command(cmd, now)

    def factory(name, protocol, config, rng, incarnation):
        return Stack(name, [BreaksOnView(name, incarnation)])

    sc = scenario(schedule=[{"at": 0.5, "view": {"at": "B", "members": ["B"]}}])
    sim = Simulation(sc, stack_factory=factory, codec=IdentityCodec())
    with pytest.raises(InvariantViolation, match=r"node B .*t=0\.500000s, seed 1"):
        sim.run()


def test_stats_account_for_every_frame():
    """Every frame sent is delivered, lost, blocked or dropped somewhere, plus duplicates."""
    _, res, _ = run(_lossy())
    s = res.stats
    assert s["frames_sent"] + s["frames_duplicated"] == (
        s["frames_delivered"]
        + s["frames_lost"]
        + s["frames_blocked"]
        + s["frames_to_dead"]
        + s["frames_pause_overflow"]
        + s["frames_bad"]
    )
    assert s["msgs_delivered"] == sum(len(kinds(res.events[n], "deliver")) for n in ("A", "B"))


_REPLAY = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import test_sim_network as t
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim import simulate
res = t.run(t._lossy(), seed=5)[1]
real = simulate(load_scenario(sys.argv[2]), seed=5)
digest = hashlib.sha256()
for r in (res, real):
    digest.update(json.dumps([r.events, r.timeline], sort_keys=True).encode())
print(digest.hexdigest())
"""


def test_replay_is_independent_of_hash_seed():
    """A seed replays bit-for-bit across processes with different PYTHONHASHSEED (pass-through
    and the real stack on lossy-link)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent  # this module's folder, for the child's import
    repo = Path(__file__).resolve().parents[2]
    scenario_file = repo / "scenarios" / "lossy-link.yaml"
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", _REPLAY, str(tests), str(scenario_file)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=repo,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_moved_deadline_leaves_stale_timer_entries_unfired():
    """A deadline pushed later by every input fires once, after the inputs stop (stale entries skipped)."""

    class Quiet(PassThrough):
        def up(self, msgs, now):
            self._deadline = now + 0.1
            return super().up(msgs, now)

        def on_timer(self, now):
            self.fired.append(now)
            self._deadline = None
            return []

    built = {}

    def factory(name, protocol, config, rng, incarnation):
        built[name] = Quiet(name, incarnation)
        return Stack(name, [built[name]])

    Simulation(scenario(), stack_factory=factory, codec=IdentityCodec()).run()
    assert built["B"].fired == [pytest.approx(0.99 + 0.0005 + 0.1)]
    assert built["A"].fired == []


def test_high_rate_streams_send_per_millisecond_tick():
    """Above 1000 msgs/s a stream sends what is due once per 1 ms tick, all slots accounted for."""
    sc = scenario(workload=[{"from": "A", "to": "B", "rate": 5000, "count": 100}])
    _, res, _ = run(sc)
    times = [e["t"] for e in kinds(res.events["A"], "send")]
    assert len(times) == 100
    assert sorted(set(times)) == [i / 1000 for i in range(21)]
    assert times.count(0.001) == 5
