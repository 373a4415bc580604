"""The bug museum (scenarios/bugs/): every piece meets its `expect` in the simulator and shows its
evidence on screen; every reproduced bug has a twin that passes; the resync_traffic check; the
`splitbrain shrink` and `splitbrain compare` commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from splitbrain.harness.checks import check_resync_traffic, run_checks
from splitbrain.harness.cli import main
from splitbrain.harness.compare import applies, compare, markdown, on_variant, variants
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import ScenarioError, load_scenario, parse_scenario
from splitbrain.harness.shrink import NothingToShrink, shrink_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.node import protocols
from splitbrain.node.events import make_event

BUGS = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"
PIECES = sorted(BUGS.glob("*.yaml"))
FAILING = [p for p in PIECES if isinstance(yaml.safe_load(p.read_text()).get("expect"), dict)]
# Each reproduced bug and its twin on the fixed design (the same schedule and workload).
TWINS = {
    "jgrp-1875-first-seqno": "jgrp-1875-sync",
    "jgrp-1874-get-first-seqno": "jgrp-1874-sync",
    "last-message-lost-no-resend": "last-message-lost",
    "first-message-lost-resend-highest": "first-message-lost",
    "close-while-sending-no-flush": "close-while-sending",
    "sync-bug-a-second-sync": "sync-bug-a-fixed",
    "sync-bug-b-stale-first": "sync-bug-b-fixed",
    "sync-bug-c-delayed-sync-ok": "sync-bug-c-fixed",
    # UNICAST2's pieces (tests/scenarios/test_unicast2_museum.py): twins on UNICAST3, which hold back an ACK
    # where UNICAST2 holds back a STABLE, so their schedules differ.
    "unicast2-stale-stable": "unicast3-stale-ack",
    "unicast2-lost-first-after-reopen": "unicast3-lost-first-after-reopen",
    # The original UNICAST (the UNICAST2 design's motivation): the same schedule on UNICAST3 + SYNC.
    "unicast-asymmetric-split": "unicast3-asymmetric-split",
    # NAKACK2 (the NAKACK2 design): the bounded become_server_queue of a joiner (membership: gms) and the
    # last multicast dropped below NAKACK2, each without retransmission.
    "nakack2-become-server-queue-bounded": "nakack2-become-server-queue",
    "nakack2-last-message-dropped-no-xmit": "nakack2-last-message-dropped",
    # MCAST (the MCAST design): the seqno taken outside the send lock, spurious XMIT-REQs on a lossless network.
    "mcast-spurious-retransmission": "mcast-spurious-retransmission-fixed",
}
OTHER_PROTOCOL_TWINS = {"unicast2-stale-stable", "unicast2-lost-first-after-reopen"}


def _data(name: str) -> dict:
    return yaml.safe_load((BUGS / f"{name}.yaml").read_text())


@pytest.mark.parametrize("path", PIECES, ids=lambda p: p.stem)
def test_every_piece_meets_its_expect(path, tmp_path):
    """scenarios/bugs/X.yaml on sim: a bug reproduces (its check fails, not vacuously), a twin passes."""
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    outcome = run_scenario(scenario, backend="sim", out=tmp_path)
    assert outcome.verdict.outcome == "passed", outcome.verdict.summary()


def test_every_reproduced_bug_has_a_passing_twin_with_the_same_schedule():
    """Each expect-fail piece has a twin with expect: pass and the same workload and schedule."""
    assert sorted(p.stem for p in FAILING) == sorted(TWINS)
    for bug, twin in TWINS.items():
        a, b = _data(bug), _data(twin)
        assert b["expect"] == "pass"
        if bug not in OTHER_PROTOCOL_TWINS:
            assert (a["workload"], a["schedule"]) == (b["workload"], b["schedule"])


def test_run_shows_the_failure_with_its_evidence(tmp_path, capsys):
    """splitbrain run of JGRP-1875 (first_seqno): exit 0 (the bug reproduced), the undelivered ids,
    XMIT-REQs still going at the end, the final windows."""
    code = main(["run", str(BUGS / "jgrp-1875-first-seqno.yaml"), "--backend", "sim", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "no_loss failed (as expected): 5 of 20 owed message(s) lost" in out and "A:2:1" in out
    assert "evidence: B->A xmit_req_tx:" in out and "still going at the end" in out
    assert "evidence: window A send to B:" in out and "HA=15 HS=20" in out


def test_run_shows_seed_001s_motivation_on_the_original_unicast(tmp_path, capsys):
    """splitbrain run of unicast-asymmetric-split: exit 0 (the bug reproduced); A's messages after
    the cut are named as never delivered and B's window shows them stored (received=800) but not
    delivered; B's first messages of its new stream are named as lost at A. Its twin on UNICAST3 +
    SYNC delivers all 1200."""
    code = main(["run", str(BUGS / "unicast-asymmetric-split.yaml"), "--backend", "sim", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "no_loss failed (as expected): 725 of 1200 owed message(s) lost" in out
    assert "A->B: 600 never delivered (first A:0:201 " in out and "B->A: 125 never delivered (first B:1:126 " in out
    assert "evidence: window B recv from A: delivered=0 received=800" in out
    assert "evidence: window A send to B: HA=800 HS=800" in out
    code = main(["run", str(BUGS / "unicast3-asymmetric-split.yaml"), "--backend", "sim", "--out", str(tmp_path)])
    assert code == 0 and "1200 msgs sent / 1200 delivered" in capsys.readouterr().out


# ---- resync_traffic ---------------------------------------------------------------------------


def test_resync_traffic_fails_on_the_get_first_seqno_storm_and_passes_with_sync():
    """JGRP-1874: after the same heal the storm of SEND_FIRST_SEQNO + resends breaks the bound of 12,
    SYNC stays within it; the counts are per pair and by kind."""
    results = {}
    for name in ("jgrp-1874-get-first-seqno", "jgrp-1874-sync"):
        sc = load_scenario(BUGS / f"{name}.yaml")
        events = Simulation(sc, sc.seed).run().all_events()
        results[name] = check_resync_traffic(events, sc.resync_bound)
    storm, sync = results["jgrp-1874-get-first-seqno"], results["jgrp-1874-sync"]
    assert not storm.passed and not storm.vacuous and storm.judged == 1
    assert storm.details["pairs"]["A<->B"]["messages"] > 12
    assert storm.details["pairs"]["A<->B"]["by_kind"]["first_seqno_tx"] > 6
    assert "over the bound of 12" in storm.explanation
    assert sync.passed and sync.details["pairs"]["A<->B"]["messages"] <= 12


def test_resync_traffic_counts_only_what_the_spec_calls_resync_and_says_when_it_judged_nothing():
    """Events the spec does not call resync traffic are not counted; no resync at all, or no bound,
    is vacuous."""
    ev = [
        make_event(1.0, "B", "unicast3", "first_seqno_tx", peer="A", bytes=22),
        make_event(1.1, "A", "unicast3", "retransmit", peer="B", seqno=3, reason="first_seqno", bytes=100),
        make_event(1.2, "A", "unicast3", "retransmit", peer="B", seqno=4, reason="xmit_req", bytes=100),
        make_event(1.3, "B", "unicast3", "ack_tx", peer="A", seqno=4),
    ]
    r = check_resync_traffic(ev, 2)
    assert r.passed and r.details["pairs"]["A<->B"]["messages"] == 2
    assert r.details["pairs"]["A<->B"]["bytes"] == 122
    assert not check_resync_traffic(ev, 1).passed
    assert check_resync_traffic(ev[2:], 5).vacuous
    assert check_resync_traffic(ev, None).vacuous
    assert run_checks(ev, ["resync_traffic"], resync_bound=2)[0].passed
    assert protocols.get("unicast3").resync_traffic is not None


def test_resync_bound_goes_with_the_check():
    """resync_traffic needs resync_bound, and resync_bound needs the check; both name the field."""
    data = _data("jgrp-1874-sync")
    with pytest.raises(ScenarioError, match="resync_bound: required by the check resync_traffic"):
        parse_scenario({k: v for k, v in data.items() if k != "resync_bound"})
    with pytest.raises(ScenarioError, match="resync_bound: only the check resync_traffic uses it"):
        parse_scenario({**data, "checks": ["no_loss"]})
    with pytest.raises(ScenarioError, match="resync_bound"):
        parse_scenario({**data, "resync_bound": 0})
    sc = parse_scenario(data)
    assert sc.resync_bound == 12 and parse_scenario(sc.to_dict()) == sc


# ---- shrink -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FAILING, ids=lambda p: p.stem)
def test_every_reproduced_bug_shrinks_to_at_most_five_steps(path):
    """shrink keeps the same failing check and gets every museum failure to <= 5 schedule steps;
    what it writes is a valid scenario that still reproduces the bug."""
    data = yaml.safe_load(path.read_text())
    result = shrink_scenario(data, data["seed"])
    assert result.check == data["expect"]["fail"]
    assert result.after["steps"] <= min(5, result.before["steps"])
    assert result.after["messages"] <= result.before["messages"]
    sc = parse_scenario(result.data)
    verdict = run_scenario(sc, backend="sim", out=Path("/tmp") / "splitbrain-test-shrink").verdict
    assert verdict.passed, verdict.summary()


def test_shrink_cli_writes_a_runnable_file_and_refuses_a_passing_input(tmp_path, capsys):
    """splitbrain shrink: before/after counts, a file `splitbrain run` accepts (exit 0: the bug still
    reproduces); exit 2 for a scenario that fails nothing, and for a missing file."""
    out = tmp_path / "small.yaml"
    src = BUGS / "close-while-sending-no-flush.yaml"
    assert main(["shrink", str(src), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "no_loss still fails" in text and "steps 2 -> " in text and "run 2:" in text
    assert main(["run", str(out), "--backend", "sim", "--out", str(tmp_path)]) == 0
    assert "no_loss failed (as expected)" in capsys.readouterr().out
    assert main(["shrink", str(BUGS / "close-while-sending.yaml"), "--out", str(out)]) == 2
    assert "every check passes" in capsys.readouterr().err
    assert main(["shrink", str(tmp_path / "nope.yaml")]) == 2
    with pytest.raises(NothingToShrink):
        shrink_scenario(_data("last-message-lost"), 1563)


def test_shrink_drops_what_the_bug_does_not_need():
    """A step added to a reproduction that has nothing to do with it (a late, short loss burst on
    another link) is removed."""
    data = _data("last-message-lost-no-resend")
    data["nodes"] = ["A", "B", "C"]
    data["schedule"] = data["schedule"] + [
        {"at": 3.0, "loss": {"link": "C->A", "p": 0.5}},
        {"at": 3.5, "heal": 1},
    ]
    result = shrink_scenario(data, 1563)
    assert result.before["steps"] == 3 and result.after["steps"] == 1
    assert result.data["schedule"][0]["drop"]["seqnos"] == [20, 20]


# ---- compare ----------------------------------------------------------------------------------


def test_compare_runs_each_registered_variant_and_tells_the_designs_apart():
    """compare over seeds 1..2: a column per registered variant (UNICAST3's resync modes); JGRP-1875
    fails on first_seqno and passes on sync, the storm's resync traffic is counted."""
    files = [(n, _data(n)) for n in ("jgrp-1875-sync", "jgrp-1874-get-first-seqno")]
    vs, table = compare(files, range(1, 3))
    labels = [v.label for v in vs]
    for name in protocols.names():
        spec = protocols.get(name)
        for value in spec.variants or (None,):
            assert (name if value is None else f"{name} {spec.variant_key}={value}") in labels
    row = table["jgrp-1875-sync"]
    assert row["unicast3 resync=first_seqno"].row()["pass_rate"] == 0.0
    assert row["unicast3 resync=sync"].row()["pass_rate"] == 1.0
    assert row["unicast3 resync=sync"].row()["resync_msgs"] > 0
    storm = table["jgrp-1874-get-first-seqno"]
    assert storm["unicast3 resync=timestamp"].row()["resync_msgs"] > 12
    assert storm["unicast3 resync=sync"].row()["resync_msgs"] <= 12
    text = markdown(vs, table)
    assert "| jgrp-1875-sync | unicast3 resync=first_seqno | 0/2 |" in text


def test_compare_runs_a_piece_only_on_protocols_that_deliver_the_same_way():
    """A unicast piece runs on every unicast protocol, the original UNICAST included, and on no
    multicast one (and the reverse); the original fails the UNICAST2 design's motivation, UNICAST3 + SYNC
    passes it."""
    unicast_piece, multicast_piece = _data("unicast-asymmetric-split"), _data("nakack2-last-message-dropped")
    for v in variants():
        multicast = protocols.get(v.protocol).multicast
        assert applies(unicast_piece, v) is not multicast and applies(multicast_piece, v) is multicast
    vs, table = compare([("unicast-asymmetric-split", unicast_piece)], range(1, 2))
    row = table["unicast-asymmetric-split"]
    assert "unicast" in row and not any(protocols.get(v.protocol).multicast for v in vs if v.label in row)
    assert row["unicast"].row()["pass_rate"] == 0.0 and row["unicast"].row()["failed_checks"]["no_loss"] == 1
    assert row["unicast3 resync=sync"].row()["pass_rate"] == 1.0
    text = markdown(vs, table)
    assert "| unicast-asymmetric-split | unicast | 0/1 |" in text and "| nakack2 |" not in text


def test_compare_marks_settings_a_protocol_does_not_have():
    """A mutation the target protocol does not know makes the cell n/a, not a crash."""
    v = variants()[0]
    data = {**_data("jgrp-1875-sync"), "config": {"mutation": "no_such_bug"}}
    scenario, why = on_variant(data, v)
    assert scenario is None and why.startswith("n/a")


def test_compare_cli(tmp_path, capsys):
    """splitbrain compare FILE --seeds 1 prints the table and writes JSON; a bad file exits 2."""
    js = tmp_path / "t.json"
    assert main(["compare", str(BUGS / "last-message-lost.yaml"), "--seeds", "1", "--json", str(js), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| last-message-lost | unicast3 resync=sync | 1/1 |" in out
    assert js.exists()
    assert main(["compare", str(tmp_path / "nope.yaml")]) == 2


def test_compare_marks_a_step_the_variant_refuses():
    """The admin sync step needs resync: sync; on the other modes the cell says why it is n/a."""
    data = _data("sync-bug-a-fixed")
    for v in variants():
        scenario, why = on_variant(data, v)
        if v.value == "sync":
            assert scenario is not None
        elif v.key == "resync":
            assert scenario is None and "sync" in why


@pytest.mark.parametrize("command", ["shrink", "compare"])
def test_help(command, capsys):
    """--help on the new commands exits 0 and documents them."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: splitbrain {command}" in capsys.readouterr().out
