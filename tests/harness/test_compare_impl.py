"""`splitbrain compare --impl`: implementations as columns. The python column on the simulator is
fast; the jgroups column needs JGroups nodes (slow tests, the JDK and the jar: ci/setup installs
both where it runs as root)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from splitbrain.harness.cli import main
from splitbrain.harness.compare import compare, implementations, markdown, on_impl
from splitbrain.node.jgroups.launch import runtime_problem

ROOT = Path(__file__).resolve().parents[2]
SEED001 = ROOT / "scenarios" / "jgroups" / "seed001"


def _data(name: str) -> dict:
    return yaml.safe_load((SEED001 / f"{name}.yaml").read_text())


def test_implementations_name_their_columns_and_refuse_unknown_ones():
    """python runs on the backend asked for, jgroups always on local; an unknown name is an error."""
    python, jgroups = implementations(["python", "jgroups"], "sim")
    assert (python.label, python.backend) == ("python (sim)", "sim")
    assert (jgroups.label, jgroups.backend) == ("jgroups 2.12.2 (local)", "local")
    with pytest.raises(ValueError, match="unknown implementation 'go'"):
        implementations(["python", "go"])


def test_the_jgroups_column_leaves_out_what_a_jgroups_scenario_refuses_and_says_so():
    """#6's model setting and the transport are left out of the JGroups file and named in the note;
    the python column runs the file as written."""
    data = _data("6-lost-first-after-reopen")
    python, jgroups = implementations(["python", "jgroups"])
    on_python, why, note = on_impl(data, python)
    assert why == "" and note == "" and on_python["config"] == {"conn_id_in_every_message": False}
    on_jgroups, why, note = on_impl(data, jgroups)
    assert why == "" and on_jgroups["protocol"] == "jgroups"
    assert "config" not in on_jgroups and "transport" not in on_jgroups
    assert note == "left out: conn_id_in_every_message=False; transport udp"
    # A file without the recovery_bound a JGroups scenario needs is n/a on that column, not a crash.
    no_bound = {k: v for k, v in data.items() if k != "recovery_bound"}
    scenario, why, _ = on_impl(no_bound, jgroups)
    assert scenario is None and "recovery_bound" in why
    # And a JGroups file has no python column.
    scenario, why, _ = on_impl({**data, "protocol": "jgroups"}, python)
    assert scenario is None and why.startswith("n/a")


def test_the_python_column_counts_deliveries_and_failing_checks():
    """The UNICAST2 design's #3 on splitbrain's UNICAST2: the two messages sent into the split are lost by
    design (6 of 8 delivered, no_loss fails); #1 delivers all 5."""
    files = [(n, _data(n)) for n in ("1-new-connection", "3-both-close-on-a-view-change")]
    vs, table = compare(files, range(1, 3), columns=implementations(["python"]))
    three = table["3-both-close-on-a-view-change"]["python (sim)"].row()
    assert (three["passed"], three["failed_checks"], three["delivered"], three["sent"]) == (0, {"no_loss": 2}, 6, 8)
    one = table["1-new-connection"]["python (sim)"].row()
    assert (one["passed"], one["delivered"]) == (2, 5)
    text = markdown(vs, table)
    assert "| delivered / sent | note |" in text
    assert "| 3-both-close-on-a-view-change | python (sim) | 0/2 |" in text and "| 6.0 / 8 |" in text


def test_compare_cli_with_implementations(tmp_path, capsys):
    """--impl python prints the implementation table and JSON names the columns; an unknown
    implementation, or --backend without --impl, exits 2."""
    js = tmp_path / "t.json"
    path = str(SEED001 / "4-a-closes-then-reopens.yaml")
    assert main(["compare", path, "--impl", "python", "--seeds", "1", "--json", str(js), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "python on sim" in out and "| seed001-4-a-closes-then-reopens | python (sim) | 1/1 |" in out
    assert '"python (sim)": {' in js.read_text()
    assert main(["compare", path, "--impl", "python,go"]) == 2
    assert "unknown implementation 'go'" in capsys.readouterr().err
    assert main(["compare", path, "--backend", "local"]) == 2
    assert "--backend: only with --impl" in capsys.readouterr().err


@pytest.mark.slow
def test_seed001_6_differs_between_the_model_and_jgroups():
    """#6 side by side: the model's wire (conn-id on the first message only) loses A:1:2...,
    JGroups 2.12.2 (conn-id on every DATA message) delivers all 150."""
    assert runtime_problem() is None, runtime_problem()
    vs, table = compare(
        [("six", _data("6-lost-first-after-reopen"))], range(1, 2), columns=implementations(["python", "jgroups"])
    )
    row = table["six"]
    model, real = row["python (sim)"].row(), row["jgroups 2.12.2 (local)"].row()
    assert model["failed_checks"] == {"no_loss": 1} and model["delivered"] < 150
    assert real["passed"] == 1 and (real["delivered"], real["sent"]) == (150, 150), real
    assert real["retransmits"] is None  # a JGroups node reports no protocol events
