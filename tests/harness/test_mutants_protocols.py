"""`splitbrain mutants --protocol`: each protocol's chaos set comes from its spec (ProtocolSpec.chaos),
its planted bugs die on it, each by the check that must catch it, and its unmutated baseline passes
the same seeds; MCAST's seqno_outside_lock and both multicast protocols' unsolicited_resend are
killed by xmit_traffic on the lossless seeds, their inflated_digest on a GMS seed.

The kill seeds are the first seeds of each chaos set that kill each mutant (found with `splitbrain
mutants --protocol P --seeds 20`); if a chaos set changes, rerun that and update them."""

from __future__ import annotations

import json

import pytest

from splitbrain.harness import mutants as mt
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import parse_scenario
from splitbrain.node import protocols
from splitbrain.node.errors import SettingError
from splitbrain.node.nakack2.config import MUTATIONS as NAKACK2_MUTATIONS
from splitbrain.node.nakack2.config import Nakack2Config

# protocol -> mutant -> the first seed of its chaos set that kills it.
KILL_SEEDS = {
    "unicast2": {"stable_purges_received": 1, "first_always_new_window": 1, "no_send_first_seqno": 0},
    "nakack2": {
        "stable_purges_above_min": 2,
        "digest_reports_highest": 2,
        "xmit_req_off_by_one": 2,
        "xmit_rsp_delivered_again": 4,
        "deliver_in_arrival_order": 2,
        "stable_ignores_highest": 4,
        "skip_range": 0,
        "inflated_digest": 10,
        "unsolicited_resend": 0,
    },
    "mcast": {"seqno_outside_lock": 0, "skip_range": 0, "inflated_digest": 5, "unsolicited_resend": 0},
}
# protocol -> mutant -> the check that must fail on its kill seed: what the bug does to the
# applications (a purge or an unanswered request loses messages, a redelivery duplicates one and
# goes back in order, a held-back run delivered as it arrived breaks the order).
KILLED_BY = {
    "unicast2": {"stable_purges_received": "no_loss", "first_always_new_window": "no_duplicates"},
    "nakack2": {
        "stable_purges_above_min": "no_loss",
        "digest_reports_highest": "no_loss",
        "xmit_req_off_by_one": "no_loss",
        "xmit_rsp_delivered_again": "no_duplicates",
        "deliver_in_arrival_order": "fifo",
        "stable_ignores_highest": "no_loss",
        "skip_range": "no_loss",
        "inflated_digest": "no_loss",
        "unsolicited_resend": "xmit_traffic",
    },
    "mcast": {
        "seqno_outside_lock": "xmit_traffic",
        "skip_range": "no_loss",
        "inflated_digest": "no_loss",
        "unsolicited_resend": "xmit_traffic",
    },
}
OTHERS = ("unicast2", "nakack2", "mcast")


def test_every_reliable_protocol_is_hunted_and_every_mutant_has_a_seed():
    """The registry gives all four protocols a chaos set; every planted mutant has a kill seed."""
    assert set(mt.hunted()) == {"unicast3", *OTHERS}
    for protocol in OTHERS:
        assert set(mt.mutations(protocol)) == set(KILL_SEEDS.get(protocol, {}))


@pytest.mark.parametrize("protocol", OTHERS)
def test_chaos_set_is_deterministic_valid_and_fits_the_protocol(protocol):
    """A seed is a scenario: the same dict every time, it parses; multicast protocols get one
    multicast stream per node, lossless seeds judged by xmit_traffic at bound 0, and seeds under
    GMS (restarts, judged by views_agree too)."""
    kinds, lossless, membership = set(), 0, 0
    for seed in range(25):
        data = mt.chaos_scenario(seed, protocol)
        assert data == mt.chaos_scenario(seed, protocol)
        sc = parse_scenario(data)
        assert sc.protocol == protocol and sc.nodes == ("A", "B", "C")
        kinds |= {step.kind for step in sc.schedule}
        if protocols.get(protocol).multicast and sc.xmit_bound is None:
            assert {w["to"] for w in data["workload"]} == {"all"} and len(data["workload"]) == 3
        if sc.membership != "static":
            membership += 1
            assert sc.membership == "gms" and "views_agree" in sc.checks
        if sc.xmit_bound is not None:
            lossless += 1
            assert sc.xmit_bound == 0 and "xmit_traffic" in sc.checks
            assert [st for st in data["schedule"] if "delay" not in st] == []
    assert kinds >= {"partition", "loss", "duplicate", "reorder", "drop", "heal"}
    assert "view" not in kinds
    # Restarts where the protocol survives them (static views, or the GMS seeds: docs/mutation.md says
    # what each set leaves out); lossless and GMS seeds for the multicast protocols.
    multicast = protocols.get(protocol).multicast
    assert ("restart" in kinds) == multicast
    assert (lossless > 0) == multicast and (membership > 0) == multicast


@pytest.mark.parametrize(
    "protocol,name", [(p, n) for p, seeds in KILL_SEEDS.items() for n in seeds], ids=lambda x: str(x)
)
def test_mutant_fails_a_check_on_its_seed(protocol, name):
    """Each planted bug makes a check fail (not a crash) on its seed of its protocol's chaos set."""
    seed = KILL_SEEDS[protocol][name]
    trial = mt.run_trial(mt.with_mutation(mt.chaos_scenario(seed, protocol), name), seed)
    assert trial.outcome == "failed", trial.explanation
    if name in KILLED_BY.get(protocol, {}):
        assert KILLED_BY[protocol][name] in trial.failed, trial.explanation
    if name == "seqno_outside_lock":
        assert trial.failed == ("xmit_traffic",)
    if name == "deliver_in_arrival_order":
        assert trial.failed == ("fifo",)  # nothing lost or twice: only the order is wrong


@pytest.mark.parametrize("protocol,seed", sorted({(p, s) for p, seeds in KILL_SEEDS.items() for s in seeds.values()}))
def test_unmutated_protocol_passes_the_same_seeds(protocol, seed):
    """No false failure: the unmutated protocol passes every seed a mutant dies on."""
    trial = mt.run_trial(mt.chaos_scenario(seed, protocol), seed)
    assert trial.outcome == "passed", trial.explanation


def test_cli_protocol_mcast_kills_and_writes_json(tmp_path, capsys):
    """--protocol mcast: the mutant killed on seed 0 by xmit_traffic, the baseline clean; exit 0."""
    out = tmp_path / "m.json"
    code = main(
        ["mutants", "--protocol", "mcast", "--mutant", "seqno_outside_lock", "--seeds", "1", "--no-shrink", "--quiet"]
        + ["--json", str(out)]
    )
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
    text = capsys.readouterr().out
    assert all(f"{name}: {what}" in text for name, what in NAKACK2_MUTATIONS.items())
    assert main(["mutants", "--protocol", "mcast", "scenarios/steady.yaml", "--quiet"]) == 2
    assert "--protocol unicast3 hunts those" in capsys.readouterr().err


def test_cli_list_of_a_protocol_without_mutants(monkeypatch, capsys):
    """--list of a hunted protocol with no planted mutants says so (its baseline still runs)."""
    for name in list(NAKACK2_MUTATIONS):
        monkeypatch.delitem(NAKACK2_MUTATIONS, name)
    assert main(["mutants", "--protocol", "nakack2", "--list"]) == 0
    assert "no planted mutants" in capsys.readouterr().out


def test_nakack2_mutation_setting_is_its_own():
    """`mutation:` under NAKACK2 names NAKACK2's planted bugs, not UNICAST3's; an unknown one is
    refused at its key with the known names; unmutated settings carry no `mutation` key."""
    cfg = Nakack2Config.from_dict({"mutation": "stable_purges_above_min"})
    assert cfg.mutation == "stable_purges_above_min" and cfg.unicast3.mutation is None
    assert Nakack2Config.from_dict(cfg.as_dict()) == cfg
    assert "mutation" not in Nakack2Config.from_dict({}).as_dict()
    for bad in ("ack_purges_one_more", "no_such_bug"):  # a UNICAST3 mutant, and nobody's
        with pytest.raises(SettingError) as exc:
            Nakack2Config.from_dict({"mutation": bad})
        assert exc.value.key == "mutation" and "stable_purges_above_min" in exc.value.message
