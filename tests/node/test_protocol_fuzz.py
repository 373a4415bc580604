"""The protocol-level fuzzer (tests/protocol_fuzz.py), a bounded number of inputs per seed: no
crash, invariants after every input, state bounded by the window limits, every rejection counted.
benchmarks/bench_fuzz.py runs the same fuzzer for millions of inputs."""

import pytest

from node import protocols
from node.unicast3 import RESYNC_MODES, Unicast3
from tests.protocol_fuzz import FuzzCrash, ProtocolFuzzer, fuzzable

INPUTS = 20_000
SEEDS = (1, 2)
WINDOW = 16  # a small receive window, so the fuzzer presses against its bound


@pytest.mark.parametrize("protocol", fuzzable())
@pytest.mark.parametrize("seed", SEEDS)
def test_every_fuzzable_protocol_survives_hostile_peers(protocol, seed):
    """Default settings, 20k inputs from peers in the view: no crash, bounded, every type sent."""
    stats = ProtocolFuzzer(protocol, seed).run(INPUTS)
    assert stats.inputs == INPUTS
    assert set(protocols.get(protocol).message_types) <= set(stats.kinds), stats.kinds
    assert stats.rejections, "hostile input that nothing rejects: the fuzzer is not reaching the protocol"


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
