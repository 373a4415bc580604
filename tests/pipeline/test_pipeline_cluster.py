"""The same job on a real Spark standalone cluster: a master and a worker started from the pyspark
installation on 127.0.0.1 (ephemeral ports), pipeline/job.py submitted with spark-submit
--master spark://127.0.0.1:PORT, verdicts equal to the harness's; both processes stopped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.pipeline.standalone import standalone_cluster as start_standalone

ROOT = Path(__file__).resolve().parents[2]
# The job itself is bounded (spark-submit: 600 s) and the cluster takes its own start: past
# pytest's default 300 s a busy machine would be cut off before the job's own bound.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def standalone_cluster(tmp_path):
    """A Spark standalone master and one worker (2 cores, 1 GiB) on loopback; yields the master URL
    and the daemons' environment, and checks that both daemons are gone afterwards."""
    with start_standalone(tmp_path, workers=1, cores=2) as cluster:
        yield cluster.master, cluster.env
    assert all(p.poll() is not None for p in cluster.procs)


def test_spark_submit_on_a_standalone_cluster(standalone_cluster, tmp_path):
    """spark-submit pipeline/job.py on the cluster: same verdicts as the harness for two scenarios
    (one of them a reproduced bug), and the job's exit code says all runs passed."""
    master, env = standalone_cluster
    runs = tmp_path / "runs"
    outcomes = {}
    for name in ("steady", "jgrp-1875-first-seqno"):
        path = ROOT / "scenarios" / f"{name}.yaml"
        if path.exists():
            o = run_scenario(load_scenario(path), backend="sim", out=runs)
            outcomes[o.run_dir.name] = o
    assert outcomes
    submit = Path(env["SPARK_HOME"]) / "bin" / "spark-submit"
    verdicts = tmp_path / "verdicts.json"
    cmd = [
        str(submit),
        "--master",
        master,
        "--driver-memory",
        "1g",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        str(ROOT / "pipeline" / "job.py"),
        "--warehouse",
        str(tmp_path / "warehouse"),
        "--verdicts",
        f"file://{tmp_path / 'verdicts-out'}",
        "--json",
        str(verdicts),
        str(runs),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])
    got = {v["run_id"]: v for v in json.loads(verdicts.read_text())}
    assert set(got) == set(outcomes)
    for run_id, o in outcomes.items():
        assert got[run_id]["checks"] == json.loads(json.dumps([c.to_dict() for c in o.verdict.checks]))
        assert got[run_id]["outcome"] == o.verdict.outcome
    lines = [line for f in sorted((tmp_path / "verdicts-out").glob("part-*")) for line in f.read_text().splitlines()]
    assert sorted(json.loads(line)["run_id"] for line in lines) == sorted(outcomes)
    shutil.rmtree(tmp_path / "warehouse", ignore_errors=True)


def test_campaign_in_spark_tasks_on_a_standalone_cluster(standalone_cluster, tmp_path):
    """splitbrain campaign --backend sim --master spark://...: the seeds run as tasks on the
    cluster's executor (the project shipped as a py-file), verdicts seed for seed those of
    `splitbrain run --backend sim`, exit 0."""
    import yaml

    from splitbrain.harness.scenario import parse_scenario
    from tests.pipeline.test_pipeline_cli import TINY

    master, env = standalone_cluster
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY)
    out = tmp_path / "camp"
    cmd = [sys.executable, "-m", "splitbrain.harness.cli", "campaign", str(scen), "--runs", "6", "--master", master]
    cmd += ["--out", str(out), "--quiet"]
    # The executors must import the shipped zip, not whatever splitbrain the machine has installed.
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    result = subprocess.run(cmd, env=run_env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])
    assert "simulated and judged in Spark tasks" in result.stdout
    verdicts = {v["meta"]["seed"]: v for v in json.loads((out / "report" / "verdicts.json").read_text())}
    assert sorted(verdicts) == list(range(11, 17))
    scenario = parse_scenario(yaml.safe_load(TINY))
    for seed, v in verdicts.items():
        o = run_scenario(scenario, seed=seed, backend="sim", out=tmp_path / "runs")
        assert v["checks"] == json.loads(json.dumps([c.to_dict() for c in o.verdict.checks])), seed
        assert v["outcome"] == o.verdict.outcome
