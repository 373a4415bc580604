"""The key test of the local backend: every shipped scenario gets the same verdict on sim and local.

Same verdict means the same outcome (passed, or the expected failure reproduced) and the same
pass/fail for every check. The numbers differ (real time, real sockets), the judgement must not.
Each local run takes about its duration plus one to two seconds; the scenarios are short.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario

pytestmark = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


def verdict_of(outcome) -> tuple[str, dict[str, bool]]:
    return outcome.verdict.outcome, {c.name: c.passed for c in outcome.verdict.checks}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_same_verdict_on_sim_and_local(path, tmp_path):
    """Each scenarios/*.yaml: outcome and every check's pass/fail agree between sim and local."""
    scenario = load_scenario(path)
    sim = run_scenario(scenario, backend="sim", out=tmp_path / "sim")
    local = run_scenario(scenario, backend="local", out=tmp_path / "local")
    sim_verdict, local_verdict = verdict_of(sim), verdict_of(local)
    explanations = {c.name: c.explanation for c in local.verdict.checks}
    settle = local.result.stats["settle"]
    assert local_verdict == sim_verdict, (
        f"sim {sim_verdict} vs local {local_verdict}; local explanations {explanations}; "
        f"live settle: {settle['message']}; run dir {local.run_dir}"
    )
    assert sim_verdict[0] == "passed", f"{path.name} does not give its expected outcome on sim"
    # The live checks agree with the final ones: a passing scenario settles, a reproduced bug does not.
    assert settle["ok"] == (scenario.expect_fail is None), settle
    written = json.loads((local.run_dir / "verdict.json").read_text())
    assert written["backend"] == "local" and written["outcome"] == "passed"
    assert written["stats"]["msgs_sent"] > 0
