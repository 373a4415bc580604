"""`splitbrain mutants --protocol`: each protocol's chaos set comes from its spec (ProtocolSpec.chaos),
its planted bugs die on it and its unmutated baseline passes the same seeds; MCAST's
seqno_outside_lock is killed by xmit_traffic on the lossless seeds.

The kill seeds are the first seeds of each chaos set that kill each mutant (found with `splitbrain
mutants --protocol P --seeds 20`); if a chaos set changes, rerun that and update them."""

from __future__ import annotations

import json

import pytest

from harness import mutants as mt
from harness.cli import main
from harness.scenario import parse_scenario
from node import protocols

# protocol -> mutant -> the first seed of its chaos set that kills it.
KILL_SEEDS = {
    "unicast2": {"stable_purges_received": 1, "first_always_new_window": 1, "no_send_first_seqno": 0},
    "mcast": {"seqno_outside_lock": 0},
}
OTHERS = ("unicast2", "nakack2", "mcast")


def test_every_reliable_protocol_is_hunted_and_every_mutant_has_a_seed():
    """The registry gives all four protocols a chaos set; every planted mutant has a kill seed."""
    assert set(mt.hunted()) == {"unicast3", *OTHERS}
    for protocol in OTHERS:
        assert set(mt.mutations(protocol)) == set(KILL_SEEDS.get(protocol, {}))
    assert mt.mutations("nakack2") == {}


@pytest.mark.parametrize("protocol", OTHERS)
def test_chaos_set_is_deterministic_valid_and_fits_the_protocol(protocol):
    """A seed is a scenario: the same dict every time, it parses; multicast protocols get one
    multicast stream per node; MCAST has lossless seeds judged by xmit_traffic at bound 0."""
    kinds, lossless = set(), 0
    for seed in range(25):
        data = mt.chaos_scenario(seed, protocol)
        assert data == mt.chaos_scenario(seed, protocol)
        sc = parse_scenario(data)
        assert sc.protocol == protocol and sc.nodes == ("A", "B", "C")
        kinds |= {step.kind for step in sc.schedule}
        if protocols.get(protocol).multicast and sc.xmit_bound is None:
            assert {w["to"] for w in data["workload"]} == {"all"} and len(data["workload"]) == 3
        if sc.xmit_bound is not None:
            lossless += 1
            assert sc.xmit_bound == 0 and "xmit_traffic" in sc.checks
            assert [st for st in data["schedule"] if "delay" not in st] == []
    assert kinds >= {"partition", "loss", "duplicate", "reorder", "drop", "heal"}
    assert "view" not in kinds
    # Restarts where the protocol survives them with static views (README: what each set leaves out).
    assert ("restart" in kinds) == (protocol == "mcast")
    assert (lossless > 0) == (protocol == "mcast")


@pytest.mark.parametrize(
    "protocol,name", [(p, n) for p, seeds in KILL_SEEDS.items() for n in seeds], ids=lambda x: str(x)
)
def test_mutant_fails_a_check_on_its_seed(protocol, name):
    """Each planted bug makes a check fail (not a crash) on its seed of its protocol's chaos set."""
    seed = KILL_SEEDS[protocol][name]
    trial = mt.run_trial(mt.with_mutation(mt.chaos_scenario(seed, protocol), name), seed)
    assert trial.outcome == "failed", trial.explanation
    if name == "seqno_outside_lock":
        assert trial.failed == ("xmit_traffic",)


@pytest.mark.parametrize(
    "protocol,seed", sorted({(p, s) for p, seeds in KILL_SEEDS.items() for s in seeds.values()} | {("nakack2", 0)})
)
def test_unmutated_protocol_passes_the_same_seeds(protocol, seed):
    """No false failure: the unmutated protocol passes every seed a mutant dies on."""
    trial = mt.run_trial(mt.chaos_scenario(seed, protocol), seed)
    assert trial.outcome == "passed", trial.explanation


def test_cli_protocol_mcast_kills_and_writes_json(tmp_path, capsys):
    """--protocol mcast: the mutant killed on seed 0 by xmit_traffic, the baseline clean; exit 0."""
    out = tmp_path / "m.json"
    code = main(["mutants", "--protocol", "mcast", "--seeds", "1", "--no-shrink", "--quiet", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "mutation score 1/1" in text and "mcast" in text and "0 failures" in text
    doc = json.loads(out.read_text())
    assert doc["protocol"] == "mcast" and doc["baseline"]["failures"] == []
    assert doc["mutants"][0]["checks"] == ["xmit_traffic"] and not doc["mutants"][0]["crash"]


def test_cli_protocol_list_and_bad_input(capsys):
    """--list per protocol; a scenario file of another protocol than --protocol exits 2."""
    assert main(["mutants", "--protocol", "unicast2", "--list"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in KILL_SEEDS["unicast2"])
    assert main(["mutants", "--protocol", "nakack2", "--list"]) == 0
    assert "no planted mutants" in capsys.readouterr().out
    assert main(["mutants", "--protocol", "mcast", "scenarios/steady.yaml", "--quiet"]) == 2
    assert "--protocol unicast3 hunts those" in capsys.readouterr().err
