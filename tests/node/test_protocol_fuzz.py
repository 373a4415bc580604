"""The protocol-level fuzzer (tests/protocol_fuzz.py), a bounded number of inputs per seed: no
crash, invariants after every input, state bounded by the window limits, every rejection counted.
benchmarks/bench_fuzz.py runs the same fuzzer for millions of inputs."""

import pytest

from splitbrain.node import protocols
from splitbrain.node.unicast3 import RESYNC_MODES, Unicast3
from tests.protocol_fuzz import FuzzCrash, ProtocolFuzzer, fuzzable

INPUTS = 20_000
SEEDS = (1, 2)
WINDOW = 16  # a small receive window, so the fuzzer presses against its bound


# The multicast protocols' inputs cost more (a STABLE digest, an XMIT-REQ over every table, and
# the layer below): their CI share is smaller; benchmarks/bench_fuzz.py runs them at length.
INPUTS_OF = {"nakack2": 4_000, "mcast": 6_000}


def _own_types(protocol: str) -> set[str]:
    """The message types of the protocol's own header: a multicast stack's UNICAST3 (which carries
    its unicasts) is fuzzed on its own."""
    types = set(protocols.get(protocol).message_types)
    if protocols.get(protocol).multicast:
        types -= set(protocols.get("unicast3").message_types)
    return types


@pytest.mark.parametrize("protocol", fuzzable())
@pytest.mark.parametrize("seed", SEEDS)
def test_every_fuzzable_protocol_survives_hostile_peers(protocol, seed):
    """Default settings, 20k inputs from peers in the view (fewer for the multicast protocols): no
    crash, bounded, every type sent, and some deliveries (the fuzzer gets into the windows)."""
    inputs = INPUTS_OF.get(protocol, INPUTS)
    stats = ProtocolFuzzer(protocol, seed).run(inputs)
    assert stats.inputs == inputs
    assert _own_types(protocol) <= set(stats.kinds), stats.kinds
    assert stats.rejections, "hostile input that nothing rejects: the fuzzer is not reaching the protocol"
    if protocols.get(protocol).multicast:
        assert stats.delivered > 0


@pytest.mark.parametrize("protocol", ["nakack2", "mcast"])
def test_multicast_protocols_fuzzed_with_a_small_window_stay_within_it(protocol):
    """A 16-seqno receive window (NAKACK2) or capacity (MCAST): what a table holds stays within it."""
    key = "max_recv_window_seqnos" if protocol == "nakack2" else "capacity"
    stats = ProtocolFuzzer(protocol, 3, {key: WINDOW}, max_pending=WINDOW).run(3_000)
    assert stats.max_pending <= WINDOW and stats.delivered > 0


@pytest.mark.parametrize("resync", RESYNC_MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_unicast3_fuzzed_in_every_resync_mode_rejects_and_counts(resync, seed):
    """UNICAST3 per resync mode with a 16-seqno receive window: held messages stay within it,
    deliveries happen (the fuzzer gets into the windows), and each drop event has its counter."""
    fuzzer = ProtocolFuzzer("unicast3", seed, {"resync": resync, "max_recv_window_seqnos": WINDOW}, max_pending=WINDOW)
    stats = fuzzer.run(INPUTS)
    assert stats.delivered > 0 and 0 < stats.max_pending <= WINDOW
    counters = fuzzer.stack.layer(Unicast3).counters
    dropped = sum(n for key, n in counters.items() if key.startswith("dropped_"))
    assert dropped == sum(stats.rejections.values())
    assert "requested seqno not in send window" in stats.rejections


def test_a_crash_names_the_seed_and_the_input():
    """A broken bound is reported with what replays it: seed, input number, kind."""
    fuzzer = ProtocolFuzzer("unicast3", 3, max_work=0)
    with pytest.raises(FuzzCrash, match=r"seed 3, input \d+ \(\w+\)"):
        fuzzer.run(100)
