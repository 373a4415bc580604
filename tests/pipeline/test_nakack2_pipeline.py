"""The Spark pipeline on NAKACK2 runs: every event fits the schema (origin, digest, multicast sends
without a peer), and its verdicts are the harness's, a LastMessageDropped failure included."""

from __future__ import annotations

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import parse_scenario


def _scenario(name: str, xmit_interval: float) -> dict:
    return {
        "name": name,
        "protocol": "nakack2",
        "transport": "tcp",
        "nodes": 3,
        "config": {"xmit_interval": xmit_interval, "stable_interval": 1.0, "allow_unsafe": True},
        "workload": [{"from": "all", "to": "all", "rate": 50, "duration": 2}],
        # LastMessageDropped: B's fault layer drops A's last multicast.
        "schedule": [{"at": 0.0, "drop": {"at": "B", "from": "A", "type": "MSG", "seqnos": [100, 100]}}],
        "duration": 2,
        "settle": 3,
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
        "expect": "pass" if xmit_interval else {"fail": "no_loss"},
        "seed": 9,
    }


def test_nakack2_runs_are_judged_by_the_pipeline_as_by_the_harness(spark, tmp_path):
    """Repaired (xmit_interval 0.2) and not repaired (0): same checks, same details, nothing quarantined."""
    from splitbrain.pipeline import analysis as A

    runs = tmp_path / "runs"
    outcomes = {}
    for name, xmit in (("lmd-xmit", 0.2), ("lmd-no-xmit", 0)):
        outcome = run_scenario(parse_scenario(_scenario(name, xmit)), backend="sim", out=runs)
        outcomes[outcome.run_dir.name] = outcome
    analysis = A.analyze(spark, [str(runs)], str(tmp_path / "warehouse"))
    verdicts = {v.run_id: v for v in analysis.verdicts}
    assert set(verdicts) == set(outcomes)
    for run_id, outcome in outcomes.items():
        v = verdicts[run_id]
        assert v.quarantined == 0, run_id
        assert v.checks == [c.to_dict() for c in outcome.verdict.checks]
        assert v.meta["protocol"] == "nakack2"
        no_loss = next(c for c in v.checks if c["name"] == "no_loss")
        assert no_loss["passed"] == run_id.startswith("lmd-xmit"), no_loss["explanation"]
        assert outcome.verdict.passed  # the failure of the second run is the expected one
