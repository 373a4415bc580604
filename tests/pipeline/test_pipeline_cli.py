"""`splitbrain analyze` and `splitbrain campaign` (pipeline.cli): exit codes, outputs, messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitbrain.harness.cli import main
from splitbrain.pipeline.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from tests.pipeline.test_pipeline_checks import PLANTED, write_run

TINY = """
name: tiny
protocol: unicast3
transport: udp
nodes: [A, B]
config: {xmit_interval: 0.2}
workload:
  - {from: A, to: B, rate: 50, count: 20}
schedule:
  - {at: 0.2, partition: {from: A, to: B}}
  - {at: 0.5, heal: 0}
duration: 1
settle: 1
checks: [fifo, no_duplicates, no_loss, windows_synced]
expect: pass
seed: 11
"""


def test_campaign_runs_seeds_then_reports(spark, tmp_path, capsys):
    """campaign --runs 3 on the simulator: three run directories, one report, exit 0."""
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY)
    out = tmp_path / "camp"
    code = main(["campaign", str(scen), "--runs", "3", "--backend", "sim", "--out", str(out), "--quiet"])
    assert code == EXIT_OK, capsys.readouterr()
    assert sorted(p.name.split("-")[1] for p in (out / "runs").iterdir()) == ["11", "12", "13"]
    verdicts = json.loads((out / "report" / "verdicts.json").read_text())
    assert [v["outcome"] for v in verdicts] == ["passed"] * 3
    assert all(v["meta"]["backend"] == "sim" for v in verdicts)
    assert (out / "report" / "img" / "matrix.png").exists()
    assert "3/3 run(s) passed" in capsys.readouterr().out


def test_analyze_a_failing_run_exits_1(spark, tmp_path, capsys):
    """analyze on a run with a lost message: exit 1 and the failing check's explanation printed."""
    write_run(tmp_path / "runs", "missing", PLANTED["missing"]["events"])
    code = main(["analyze", str(tmp_path / "runs" / "missing"), "--out", str(tmp_path / "a"), "--quiet"])
    out = capsys.readouterr().out
    assert code == EXIT_FAILED
    assert "missing: no_loss failed: 1 of 5 owed message(s) lost: A->B: 1 never delivered (first A:0:3" in out
    assert (tmp_path / "a" / "report" / "index.html").exists()


def test_bad_inputs_exit_2(tmp_path, capsys, monkeypatch):
    """A missing run directory, a broken scenario, an unavailable backend: exit 2 with a message."""
    assert main(["analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert "no such run directory" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("rate: 50", "rate: -1"))
    assert main(["campaign", str(bad), "--runs", "1", "--out", str(tmp_path / "c")]) == EXIT_BAD_INPUT
    assert "workload[0].rate" in capsys.readouterr().err

    from splitbrain import harness

    def unavailable(**kwargs):
        raise harness.backends.BackendUnavailable("backend docker is not available here")

    monkeypatch.setitem(harness.backends.LIVE, "docker", unavailable)
    good = tmp_path / "good.yaml"
    good.write_text(TINY)
    assert (
        main(["campaign", str(good), "--runs", "1", "--backend", "docker", "--out", str(tmp_path / "d"), "--quiet"])
        == EXIT_BAD_INPUT
    )
    assert "docker is not available" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["campaign", str(good), "--runs", "0"])
    assert exc.value.code == 2


def test_add_commands_registers_both(tmp_path):
    """add_commands puts analyze and campaign, with their handlers, on any subparsers object."""
    import argparse

    from splitbrain.pipeline.cli import add_commands, cmd_analyze, cmd_campaign

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["analyze", "r1", "r2", "--master", "spark://h:7077", "--out", "x"])
    assert args.func is cmd_analyze and args.run_dirs == ["r1", "r2"] and args.master == "spark://h:7077"
    args = parser.parse_args(["campaign", "s.yaml", "--runs", "5", "--backend", "local"])
    assert args.func is cmd_campaign and args.runs == 5 and args.backend == "local"
    assert Path(args.scenario).name == "s.yaml"
