"""docs/results.md comes from the benchmarks: every benchmark that measures a goal can store its
tables as JSON with its machine and command (benchmarks/benchresults.py), and ci/docs_gen.py renders
the stored files the same way every time (the page itself is compared with the code by
tests/test_docs.py's staleness test)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

# The checkout: the nearest folder above with pyproject.toml (tests may move into subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
BENCHMARKS = ROOT / "benchmarks"

# Scripts in benchmarks/ that measure no goal of their own, and why.
NOT_GOALS = {
    "bench_analyze.py": "compares the outputs and timings of two checkouts of `splitbrain analyze`",
    "benchresults.py": "the shared helper itself",
    "mcast_ceiling.py": "a stripped loop bench_nakack2.py runs as its ceiling",
    "nodecluster.py": "node processes for the multicast benchmarks",
    "verdicts_runs.py": "writes run directories for bench_analyze.py",
}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def benchresults():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield _load("benchresults", BENCHMARKS / "benchresults.py")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def docs_gen():
    return _load("docs_gen", ROOT / "ci" / "docs_gen.py")


def test_every_benchmark_can_store_its_results():
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py"))
    assert set(NOT_GOALS) <= set(scripts), "a script named in NOT_GOALS is gone"
    missing = [
        name
        for name in scripts
        if name not in NOT_GOALS
        and not any(call in (BENCHMARKS / name).read_text() for call in ("@recorded(", "add_json_option("))
    ]
    assert not missing, f"benchmarks that cannot write --json for docs/results.md: {missing}"


def test_recorded_stores_the_printed_tables_with_machine_goal_and_command(benchresults, tmp_path, capsys):
    @benchresults.recorded("bench_fake", goals={"Speed": "fast enough"})
    def main(argv):
        assert argv == ["--quick"], argv  # --json FILE never reaches the benchmark's own parser
        print("# Speed of the thing\n\nThree runs.\n\n| case | s |\n| --- | --- |\n| a | 1.5 |\n")
        print("# Other\n\n| x | y |\n| --- | --- |\n| 1 | 2 |\n\nGoal: y <= 2 (met).")
        return 0

    out = tmp_path / "bench_fake.json"
    assert main(["--quick", "--json", str(out)]) == 0
    assert "| a | 1.5 |" in capsys.readouterr().out  # still printed as before
    doc = json.loads(out.read_text())
    assert doc["command"] == ".venv/bin/python benchmarks/bench_fake.py --quick"
    assert doc["record"].endswith("--quick --json benchmarks/results/bench_fake.json")
    machine = doc["machine"]
    assert machine["cpu"] and machine["cores"] >= 1 and "load_1m" in machine and doc["measured"]
    speed, other = doc["tables"]
    assert (speed["title"], speed["goal"], speed["note"]) == ("Speed of the thing", "fast enough", "Three runs.")
    assert speed["headers"] == ["case", "s"] and speed["rows"] == [["a", "1.5"]]
    assert other["goal"] == "y <= 2 (met)."


def test_recorded_keeps_the_exit_code_and_writes_nothing_without_json(benchresults, tmp_path, monkeypatch):
    @benchresults.recorded("bench_fake")
    def main(argv):
        print("| a |\n| --- |\n| 1 |")
        return 1  # a goal not met

    monkeypatch.chdir(tmp_path)
    assert main([]) == 1 and not list(tmp_path.iterdir())
    assert main(["--json=r.json"]) == 1 and json.loads((tmp_path / "r.json").read_text())["tables"]

    @benchresults.recorded("bench_silent")
    def silent(argv):
        print("no table")
        return 0

    assert silent(["--json", "s.json"]) == 1 and not (tmp_path / "s.json").exists()


def test_results_page_is_deterministic_and_states_the_machine_once(docs_gen, tmp_path, monkeypatch):
    first = docs_gen.render_results()
    assert first == docs_gen.render_results()
    # The same files written in the opposite order (other inode and mtime order) render the same page.
    copy = tmp_path / "results"
    copy.mkdir()
    for path in sorted(docs_gen.RESULTS_DIR.glob("*.json"), reverse=True):
        shutil.copy(path, copy / path.name)
    monkeypatch.setattr(docs_gen, "RESULTS_DIR", copy)
    assert docs_gen.render_results() == first
    machines = {docs_gen._machine_line(json.loads(p.read_text())["machine"]) for p in copy.glob("*.json")}
    for machine in machines:  # each machine described once, however many benchmarks ran on it
        assert first.count(machine) == 1, machine
    stored = [json.loads(p.read_text()) for p in sorted(copy.glob("*.json"))]
    tables = [t for d in stored for t in d["tables"]]
    assert first.count("\nMeasured by `") == len(tables)
    for doc in stored:
        assert f"`{doc['record']}`" in first, doc["benchmark"]
    for table in tables:
        if table["goal"]:
            assert f"Goal: {table['goal'].rstrip('.')}" in first


def test_results_page_shows_a_new_file_and_no_removed_one(docs_gen, tmp_path, monkeypatch):
    """The page follows benchmarks/results/: what is rendered is exactly what is stored."""
    monkeypatch.setattr(docs_gen, "RESULTS_DIR", tmp_path)
    assert "No benchmark results are stored yet." in docs_gen.render_results()
    doc = {
        "benchmark": "bench_checks",
        "command": ".venv/bin/python benchmarks/bench_checks.py",
        "record": ".venv/bin/python benchmarks/bench_checks.py --json benchmarks/results/bench_checks.json",
        "machine": {"cpu": "Some CPU", "cores": 4, "load_1m": 0.5, "python": "3.11.9", "system": "Linux x86_64"},
        "measured": "2026-01-02",
        "tables": [{"title": "T", "goal": "G", "note": "", "headers": ["a"], "rows": [["42"]]}],
    }
    (tmp_path / "bench_checks.json").write_text(json.dumps(doc))
    page = docs_gen.render_results()
    assert "| 42 |" in page and "Some CPU, 4 cores" in page and "| G | T | `bench_checks` |" in page
