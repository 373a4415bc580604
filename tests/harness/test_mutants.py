"""Mutation testing of the checkers: every planted mutant fails a check on the chaos set, the
unmutated protocol never does, the shrinker keeps the failure, and `splitbrain mutants` exits
0 / 1 / 2 as documented.

The seeds below are the first seeds of the standard chaos set that kill each mutant (found with
`splitbrain mutants --seeds 20`); they are fixed here so that the test is exact and fast. If the
chaos generator changes, rerun that command and update them. They are pinned to the chaos set
without admin SYNC steps (`admin_sync=False`), so the day the scenario model gains that step
(and the CLI's chaos set with it) does not move them; a test below covers the step when present.
"""

import json

import pytest

from splitbrain.harness import mutants as mt
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import parse_scenario
from splitbrain.node.unicast3.config import MUTATION_RESYNC, MUTATIONS, RESYNC_MODES, Unicast3Config

# mutant -> the first chaos-set seed that kills it (seeds to kill = seed + 1).
KILL_SEEDS = {
    "ack_purges_one_more": 0,
    "xmit_req_off_by_one": 0,
    "deliver_in_arrival_order": 0,
    "ack_ignores_conn_id": 0,
    "no_resend_highest": 3,
    "ack_highest_received": 0,
    "conn_id_ignores_incarnation": 1,
    "ack_ignores_timestamp": 0,
    "sync_ok_sends_ha": 0,
    "resend_keeps_old_conn_id": 0,
    "data_ignores_conn_id": 1,
    "first_window_skips_first": 0,
    "timestamp_ignores_incarnation": 1,
    "first_seqno_resends_highest": 0,
}
# The chaos set's budget: every mutant must die within this many seeds.
SEEDS_BUDGET = 20


def chaos(seed: int, mode: str | None = None) -> dict:
    return mt.chaos_scenario(seed, mode=mode, admin_sync=False)


def test_every_mutant_has_a_description_a_regression_seed_and_a_known_mode():
    """The registry, the regression seeds and the resync requirements agree."""
    assert len(MUTATIONS) >= 12
    assert set(KILL_SEEDS) == set(MUTATIONS)
    assert all(text and len(text) < 120 for text in MUTATIONS.values())
    assert set(MUTATION_RESYNC) <= set(MUTATIONS)
    assert set(MUTATION_RESYNC.values()) <= set(mt.chaos_modes()) <= set(RESYNC_MODES)
    assert all(seed < SEEDS_BUDGET for seed in KILL_SEEDS.values())
    with pytest.raises(ValueError, match="mutation"):
        Unicast3Config.from_dict({"mutation": "no_such_bug"})


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutant_fails_a_check_on_its_seed(name):
    """Each planted bug makes a check fail (not a simulator crash) on its regression seed."""
    seed = KILL_SEEDS[name]
    data = mt.with_mutation(chaos(seed, mt.mutant_mode(name)), name)
    trial = mt.run_trial(data, seed)
    assert trial.outcome == "failed", (name, seed, trial)
    assert trial.failed, trial


@pytest.mark.parametrize("seed,mode", sorted({(s, m) for s in set(KILL_SEEDS.values()) for m in mt.chaos_modes()}))
def test_unmutated_protocol_passes_the_same_seeds(seed, mode):
    """The same schedules without a mutation pass every check, in both resync modes."""
    trial = mt.run_trial(mt.with_mutation(chaos(seed, mode), None), seed)
    assert trial.outcome == "passed", trial


def test_hunt_stops_at_the_first_killing_seed():
    """hunt() spends seeds in order and reports the one that killed."""
    res = mt.hunt("no_resend_highest", [mt.Source("generated", admin_sync=False)], range(0, 6), shrink_it=False)
    assert res.killed and not res.crash
    assert res.kill_seed == KILL_SEEDS["no_resend_highest"]
    assert res.seeds_tried == KILL_SEEDS["no_resend_highest"] + 1


def test_chaos_set_is_deterministic_valid_and_varied():
    """A seed is a scenario: the same dict every time, it parses, and the set covers the fault kinds."""
    kinds = set()
    modes = set()
    for seed in range(40):
        data = mt.chaos_scenario(seed)
        assert data == mt.chaos_scenario(seed)
        sc = parse_scenario(data)
        assert 10 <= sc.duration <= 20 and sc.nodes == ("A", "B", "C")
        assert {(s.src, s.dest) for s in sc.streams} >= {("A", "B"), ("B", "A")}
        kinds |= {step.kind for step in sc.schedule}
        modes.add(data["config"]["resync"])
        # Forcing a mode runs the same faults (admin syncs apart, which exist in sync mode only).
        forced = mt.chaos_scenario(seed, mode="timestamp", admin_sync=False)
        assert forced["config"]["resync"] == "timestamp"
        plain = mt.chaos_scenario(seed, admin_sync=False)
        assert forced["schedule"] == plain["schedule"]
    assert kinds >= {"partition", "loss", "delay", "duplicate", "reorder", "drop", "view", "kill", "restart", "heal"}
    assert modes == set(mt.chaos_modes())


@pytest.mark.skipif(not mt.admin_sync_available(), reason="the scenario model has no admin sync step yet")
def test_admin_syncs_in_sync_mode_and_the_unmutated_protocol_passes_them():
    """With the admin SYNC step, sync-mode schedules get some, and they break nothing."""
    with_syncs = [
        seed for seed in range(30) if any("sync" in st for st in mt.chaos_scenario(seed, mode="sync")["schedule"])
    ]
    assert with_syncs
    assert not any("sync" in st for st in mt.chaos_scenario(with_syncs[0], mode="timestamp")["schedule"])
    for seed in with_syncs[:6]:
        trial = mt.run_trial(mt.chaos_scenario(seed, mode="sync"), seed)
        assert trial.outcome == "passed", trial


def test_a_simulator_crash_kills_but_is_reported_as_a_crash(monkeypatch):
    """An exception in the simulator (e.g. a broken invariant) is a kill of its own kind."""
    from splitbrain.harness.sim import Simulation
    from splitbrain.harness.sim.simulator import InvariantViolation

    def boom(self):
        raise InvariantViolation("recv window for A: delivered > highest")

    monkeypatch.setattr(Simulation, "run", boom)
    res = mt.hunt("ack_purges_one_more", [mt.Source("generated", admin_sync=False)], range(0, 3))
    assert res.killed and res.crash and res.kill_seed == 0
    assert res.checks == ("InvariantViolation",) and res.shrunk is not None


def test_remove_steps_renumbers_heals():
    """Removing a step removes its heals and renumbers the other heals."""
    steps = [
        {"at": 1.0, "loss": {"link": "*", "p": 0.1}},
        {"at": 2.0, "partition": {"from": "A", "to": "B"}},
        {"at": 3.0, "heal": 1},
        {"at": 4.0, "heal": 0},
        {"at": 5.0, "heal": "all"},
    ]
    assert mt.remove_steps(steps, {0}) == [steps[1], {"at": 3.0, "heal": 0}, steps[4]]
    assert mt.remove_steps(steps, {1}) == [steps[0], {"at": 4.0, "heal": 0}, steps[4]]


def test_shrinker_returns_a_smaller_schedule_that_still_kills():
    """Greedy shrinking keeps the failing check and leaves only what the bug needs."""
    name, seed = "sync_ok_sends_ha", KILL_SEEDS["sync_ok_sends_ha"]
    data = mt.with_mutation(chaos(seed, "sync"), name)
    primary = mt.run_trial(data, seed).failed[0]
    shrunk = mt.shrink(data, seed, mt.killed_by(primary, seed), budget=60)
    assert shrunk.steps_after < shrunk.steps_before
    assert len(shrunk.data["workload"]) <= len(data["workload"])
    again = mt.run_trial(shrunk.data, seed)
    assert primary in again.failed
    # The bug, not the schedule, makes it fail: unmutated, the shrunk schedule passes.
    assert mt.run_trial(mt.with_mutation(shrunk.data, None), seed).outcome == "passed"
    text = mt.compact(shrunk.data)
    assert "view" in text and "partition" in text  # a window must be lost for SYNC-OK to matter


# ---- the CLI ----------------------------------------------------------------------------------


def test_cli_all_killed_exits_0_and_writes_json(tmp_path, capsys):
    """Every selected mutant killed and no baseline failure: exit 0, the table and the JSON say so."""
    out = tmp_path / "m.json"
    code = main(
        [
            "mutants",
            "--seeds",
            "1",
            "--mutant",
            "first_window_skips_first",
            "--mutant",
            "deliver_in_arrival_order",
            "--no-shrink",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "mutation score 2/2" in text and "0 failures" in text
    doc = json.loads(out.read_text())
    assert doc["killed"] == 2 and doc["total"] == 2 and doc["baseline"]["failures"] == []
    assert {m["name"]: m["kill_seed"] for m in doc["mutants"]} == {
        "first_window_skips_first": 0,
        "deliver_in_arrival_order": 0,
    }


def test_cli_survivor_exits_1(capsys):
    """A mutant that needs more seeds than given survives: exit 1, SURVIVED in the table."""
    code = main(["mutants", "--seeds", "1", "--mutant", "no_resend_highest", "--baseline", "0", "--quiet"])
    text = capsys.readouterr().out
    assert code == 1 and "SURVIVED" in text and "survived: no_resend_highest" in text


def test_cli_noop_mutant_survives(monkeypatch, capsys):
    """A registered mutant that changes nothing can never be killed (exit 1)."""
    monkeypatch.setitem(MUTATIONS, "noop_for_test", "changes nothing")
    code = main(["mutants", "--seeds", "2", "--mutant", "noop_for_test", "--baseline", "0", "--quiet"])
    assert code == 1
    assert "SURVIVED" in capsys.readouterr().out


def test_cli_scenario_files_and_shrink(tmp_path, capsys):
    """SCENARIO files replace the generated set; the killing schedule is shrunk in the table."""
    code = main(
        ["mutants", "scenarios/one-way-split-resync.yaml", "--seeds", "1", "--mutant", "sync_ok_sends_ha", "--quiet"]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "one-way-split-resync.yaml" in text and "steps" in text and "view" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--mutant", "no_such_bug"], "unknown mutant"),
        (["--seeds", "0"], "--seeds"),
        (["no/such/file.yaml"], "not found"),
        (["scenarios/jgrp-1875-first-seqno.yaml"], "reproduces a bug"),
        (["--generated"], "--generated"),
    ]
    + ([] if mt.admin_sync_available() else [(["--admin-sync", "on"], "no admin sync step")]),
)
def test_cli_bad_input_exits_2(argv, message, capsys):
    """Bad flags, unknown mutants and unusable scenario files exit 2 and say why."""
    with pytest.raises(SystemExit) if argv == ["--seeds", "0"] else _no_raise() as exc:
        code = main(["mutants", "--quiet", *argv])
    if argv == ["--seeds", "0"]:
        code = exc.value.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_list(capsys):
    """--list shows every mutant with its description and resync mode."""
    assert main(["mutants", "--list"]) == 0
    text = capsys.readouterr().out
    for name, description in MUTATIONS.items():
        assert f"{name}" in text and description in text
    assert "ack_ignores_timestamp (resync: timestamp)" in text


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
