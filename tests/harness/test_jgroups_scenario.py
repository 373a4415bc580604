"""protocol: jgroups scenarios: their keys, their refusals (exit 2 naming the key), the schema,
and windows_synced, which is not applicable to nodes that report no windows. No JVM runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.checks import run_checks
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import ScenarioError, check_backend, json_schema, load_scenario, parse_scenario
from splitbrain.harness.verdict import outcome_of
from splitbrain.node.events import make_event

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "scenarios" / "jgroups" / "healthy-loss.yaml"
STACK = "UDP(ip_ttl=0):PING(timeout=1000):pbcast.NAKACK:UNICAST2:pbcast.STABLE:pbcast.GMS"


def _data(**changes) -> dict:
    data = yaml.safe_load(HEALTHY.read_text())
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_a_jgroups_scenario_loads_with_its_block():
    s = parse_scenario(_data(jgroups={"stack": STACK}))
    assert s.protocol == "jgroups"
    assert s.jgroups == {"stack": STACK, "jar": "/usr/share/java/jgroups.jar"}
    assert s.recovery_bound == 8
    # `to: all` under jgroups is one multicast stream per sender, as for a multicast protocol.
    assert [(st.src, st.dest) for st in s.streams] == [("A", "B"), ("B", "A"), ("C", "*")]
    assert parse_scenario(s.to_dict()) == s


def test_recovery_bound_is_required_for_jgroups():
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_data(recovery_bound=None))
    assert info.value.path == "recovery_bound"
    assert "required with protocol jgroups" in info.value.reason


def test_a_stack_path_is_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "prod.xml").write_text("<config/>")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data(jgroups={"stack": "stacks/prod.xml"})))
    assert load_scenario(path).jgroups["stack"] == str((tmp_path / "stacks" / "prod.xml").resolve())
    path.write_text(yaml.safe_dump(_data(jgroups={"stack": "stacks/missing.xml"})))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.path == "jgroups.stack"
    assert "no such file" in info.value.reason


def test_every_problem_of_a_jgroups_file_at_once():
    data = _data(recovery_bound=None, membership="gms", transport="tcp", config={"xmit_interval": 0.5})
    data["schedule"] = [*data["schedule"], {"at": 2, "sync": {"at": "A", "peer": "B"}}]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    paths = [p for p, _ in info.value.problems]
    assert "config.xmit_interval" in paths
    assert "recovery_bound" in paths
    assert "membership" in paths and "transport" in paths
    assert "schedule[2].sync" in paths


def test_the_jgroups_block_belongs_to_protocol_jgroups():
    data = yaml.safe_load((ROOT / "scenarios" / "steady.yaml").read_text())
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**data, "jgroups": {"stack": STACK}})
    assert info.value.path == "jgroups"


def test_drop_types_are_the_jgroups_header_types():
    data = _data()
    data["schedule"] = [{"at": 1, "drop": {"at": "B", "from": "A", "type": ["NAKACK_MSG", "XMIT_REQ"], "count": 2}}]
    assert parse_scenario(data).schedule[0].params.types == ("NAKACK_MSG", "XMIT_REQ")
    data["schedule"] = [{"at": 1, "drop": {"at": "B", "from": "A", "type": "ACK"}}]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert "jgroups sends no ACK messages" in str(info.value)


def test_the_simulator_refuses_jgroups_naming_protocol(tmp_path, capsys):
    s = load_scenario(HEALTHY)
    with pytest.raises(ScenarioError) as info:
        check_backend(s, "sim")
    assert info.value.path == "protocol"
    assert main(["run", str(HEALTHY), "--backend", "sim", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "protocol: jgroups is a real implementation" in capsys.readouterr().err


def test_a_missing_jar_is_exit_2_with_the_apt_command(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data(jgroups={"jar": str(tmp_path / "none.jar")})))
    assert main(["run", str(path), "--backend", "local", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "jgroups.jar" in err and "apt-get install libjgroups-java" in err


def test_the_schema_covers_the_jgroups_keys():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    assert "jgroups" in schema["properties"]["protocol"]["enum"]
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid(_data(jgroups={"stack": STACK, "jar": "/opt/jgroups.jar"}))
    assert not v.is_valid(_data(jgroups={"stack": STACK, "colour": "red"}))


def test_doctor_reports_the_jgroups_runtime(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("jgroups:"))
    assert "jgroups.jar" in line and "javac" in line


# ---- windows_synced on nodes without windows --------------------------------------------------


def _log(proto: str) -> list[dict]:
    ev = []
    for node in ("A", "B"):
        ev.append(make_event(0.0, node, "node", "node_start", incarnation=1))
    for n in range(1, 4):
        ev.append(make_event(0.1 * n, "A", proto, "send", peer="B", app=f"A:0:{n}", bytes=100))
        ev.append(make_event(0.1 * n + 0.01, "B", proto, "deliver", peer="A", app=f"A:0:{n}", bytes=100))
    for node in ("A", "B"):
        ev.append(make_event(1.0, node, "node", "node_stop", reason="stop", incarnation=1))
    return ev


def test_windows_synced_is_not_applicable_to_nodes_without_windows():
    results = run_checks(_log("jgroups"), ["fifo", "no_loss", "windows_synced"])
    synced = results[-1]
    assert not synced.applicable and not synced.passed and not synced.vacuous
    assert synced.explanation.startswith("not applicable:")
    assert synced.to_dict()["applicable"] is False
    # Left out of the outcome: neither a pass nor a failure.
    assert outcome_of(results, None) == "passed"
    assert outcome_of(results[-1:], None) == "passed"


def test_a_protocol_that_reports_windows_still_fails_without_them():
    """A splitbrain node that wrote no window is judged as before: its final windows are owed."""
    synced = run_checks(_log("unicast3"), ["windows_synced"])[0]
    assert synced.applicable and not synced.passed
    assert "final windows not reported" in synced.explanation


def test_the_verdict_says_not_applicable(tmp_path):
    from splitbrain.harness.verdict import verdict_of

    s = parse_scenario(_data(checks=["fifo", "windows_synced"]))
    verdict = verdict_of(s, run_checks(_log("jgroups"), list(s.checks)), seed=0, backend="local", stats={})
    assert verdict.passed
    assert "not applicable: windows_synced" in verdict.summary()
    assert json.loads(json.dumps(verdict.to_dict()))["failed"] == []
