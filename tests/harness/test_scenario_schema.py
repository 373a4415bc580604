"""The JSON Schema of scenario files (`splitbrain schema`) and every problem of a file at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.cli import main
from splitbrain.harness.scenario import ScenarioError, json_schema, parse_scenario

jsonschema = pytest.importorskip("jsonschema")

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _validator():
    return jsonschema.Draft202012Validator(json_schema())


def test_schema_is_a_valid_json_schema():
    """The published schema is itself valid (draft 2020-12) and forbids unknown top-level keys."""
    jsonschema.Draft202012Validator.check_schema(json_schema())
    assert json_schema()["additionalProperties"] is False


@pytest.mark.parametrize("path", sorted(SCENARIOS.rglob("*.yaml")), ids=lambda p: str(p.relative_to(SCENARIOS)))
def test_shipped_scenarios_match_the_schema(path):
    """Every file in scenarios/ (docker ones too) is valid by the schema, as it is by the loader."""
    document = yaml.safe_load(path.read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(document)]
    assert errors == []


def test_schema_refuses_what_the_loader_refuses_by_shape():
    """An unknown key, a step with two kinds, a toxic attribute of another type: the schema says no too."""
    data = yaml.safe_load((SCENARIOS / "steady.yaml").read_text())
    v = _validator()
    assert not v.is_valid({**data, "colour": "red"})
    assert not v.is_valid({**data, "schedule": [{"at": 1, "kill": "A", "pause": "B"}]})
    assert not v.is_valid({**data, "schedule": [{"at": 1, "toxic": {"link": "A->B", "type": "latency", "rate": 5}}]})
    assert not v.is_valid({**data, "workload": [{"from": "A", "to": "B", "rate": 0, "count": 1}]})
    assert v.is_valid({**data, "schedule": [{"at": 1, "toxic": {"link": "A->B", "type": "bandwidth", "rate": 5}}]})


def test_cli_schema_prints_the_schema_as_json(capsys):
    """splitbrain schema exits 0 and prints exactly the schema, as JSON."""
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


# ---- every problem of a file at once ----------------------------------------------------------


def _broken() -> dict:
    data = yaml.safe_load((SCENARIOS / "steady.yaml").read_text())
    data["seed"] = -1
    data["workload"][0]["rate"] = 0
    data["schedule"] = [
        {"at": 1, "loss": {"link": "A->B", "p": 2}},
        {"at": 2, "kill": "Q"},
        {"at": 3, "pause": "B"},
        {"at": 4, "pause": "B"},
    ]
    return data


def test_every_problem_is_reported_with_its_path():
    """A file with several mistakes gets them all in one ScenarioError, each with its path."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_broken())
    assert info.value.problems == [
        ("workload[0].rate", "must be greater than 0 (messages per second)"),
        ("schedule[0].loss.p", "must be between 0 and 1"),
        ("schedule[1].kill", "unknown node 'Q' (nodes: A, B, C)"),
        ("seed", "must be a non-negative integer, got -1"),
    ]
    assert (info.value.path, info.value.reason) == info.value.problems[0]
    assert str(info.value).splitlines() == [f"{p}: {m}" for p, m in info.value.problems]


def test_problems_of_the_schedule_as_a_whole_come_together():
    """Once every step is valid on its own, all lifecycle problems of the schedule are reported."""
    data = _broken()
    data.update(seed=1, schedule=[{"at": 1, "kill": "A"}, {"at": 2, "kill": "A"}, {"at": 3, "resume": "B"}])
    data["workload"][0]["rate"] = 10
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.problems == [
        ("schedule[1].kill", "A is already dead at 2"),
        ("schedule[2].resume", "B is running at 3, not paused"),
    ]


def test_cli_prints_every_problem_and_exits_2(tmp_path, capsys):
    """splitbrain run on a file with several mistakes prints one line per problem and exits 2."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_broken()))
    assert main(["run", str(path), "--backend", "sim", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"splitbrain: {path}: {p}"
        for p in (
            "workload[0].rate: must be greater than 0 (messages per second)",
            "schedule[0].loss.p: must be between 0 and 1",
            "schedule[1].kill: unknown node 'Q' (nodes: A, B, C)",
            "seed: must be a non-negative integer, got -1",
        )
    ]


@pytest.mark.parametrize(
    "change, line",
    [
        ({"workload": None}, "workload: must be a list, got null"),
        ({"config": {1: 2}}, "config.1: keys must be strings"),
        ({"duration": float("inf")}, "duration: must be a number, got float inf"),
        ({"expect": {"fail": "fifo", "x": 1}}, "expect.x: unknown key (expected one of: fail)"),
        ({"schedule": ["kill A"]}, "schedule[0]: must be a mapping, got str"),
    ],
)
def test_generic_problems_read_like_the_others(change, line):
    """What pydantic finds by itself (kinds, keys, finiteness) is said in the loader's own words."""
    data = {**yaml.safe_load((SCENARIOS / "steady.yaml").read_text()), **change}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert str(info.value) == line
