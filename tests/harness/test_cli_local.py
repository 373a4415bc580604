"""The `splitbrain` CLI with the local backend: exit codes 0/1/2, messages, doctor, node, --help."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.cli import ProgressDisplay, main
from splitbrain.harness.runner import Progress

ROOT = Path(__file__).resolve().parents[2]
local_only = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")


def tiny(tmp_path: Path, **over) -> Path:
    """A one-second, two-node scenario with one short partition."""
    data = {
        "name": "tiny",
        "protocol": "unicast3",
        "nodes": ["A", "B"],
        "duration": 1.0,
        "settle": 3,
        "config": {"xmit_interval": 0.1},
        "workload": [{"from": "A", "to": "B", "rate": 50, "count": 40}],
        "schedule": [{"at": 0.2, "partition": {"from": "A", "to": "B"}}, {"at": 0.5, "heal": 0}],
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
        "seed": 3,
    }
    data.update(over)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@local_only
def test_run_local_passes_exit_0(tmp_path, capsys):
    """tiny (partition + heal) on local is the default backend: exit 0, summary, progress lines, run dir."""
    out = tmp_path / "runs"
    assert main(["run", str(tiny(tmp_path)), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tiny seed=3: backend local," in text and "PASSED (5/5 checks passed; judged: fifo " in text
    # stdout is not a terminal here: plain progress lines, one per applied step.
    assert "partition A -> B (one-way)" in text and "stream 0 A->B starts" in text
    (run_dir,) = out.iterdir()
    assert str(run_dir) in text
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["outcome"] == "passed" and verdict["backend"] == "local" and verdict["seed"] == 3
    assert verdict["stats"]["settle"]["ok"] is True
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["fault"]) for e in timeline] == [("fault_on", "partition"), ("fault_off", "partition")]


@local_only
def test_run_local_failed_check_exits_1_naming_it(tmp_path, capsys):
    """tiny with expect {fail: fifo}: fifo passes, so the outcome fails: exit 1, check and explanation printed."""
    path = tiny(tmp_path, expect={"fail": "fifo"}, schedule=[])
    assert main(["run", str(path), "--backend", "local", "--out", str(tmp_path / "runs"), "--no-progress"]) == 1
    text = capsys.readouterr().out
    assert "FAILED (expected fifo to fail, but it passed;" in text
    assert "  fifo passed: 40 deliveries in FIFO order" in text


@local_only
def test_seed_flag_names_the_run(tmp_path, capsys):
    """--seed N is the run's seed: in the summary, the run directory name and verdict.json."""
    out = tmp_path / "runs"
    assert main(["run", str(tiny(tmp_path, schedule=[])), "--seed", "11", "--out", str(out), "--no-progress"]) == 0
    (run_dir,) = out.iterdir()
    assert run_dir.name.startswith("tiny-11-") and "tiny seed=11:" in capsys.readouterr().out
    assert yaml.safe_load((run_dir / "scenario.yaml").read_text())["seed"] == 11


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--backend", "sim", "--injector", "iptables"], "injector"),
        (["--backend", "local", "--no-invariants"], "--no-invariants is for --backend sim only"),
        (["--max-steps", "5"], "--max-steps is for --backend sim only"),
    ],
)
def test_bad_flags_exit_2(tmp_path, capsys, argv_tail, message):
    """Flags that do not fit the backend exit 2 with a message naming the problem."""
    assert main(["run", str(tiny(tmp_path))] + argv_tail) == 2
    assert message in capsys.readouterr().err


def test_bad_scenario_and_config_exit_2_before_any_process(tmp_path, capsys):
    """A bad field or a protocol setting the node would refuse: exit 2 naming it, no run directory."""
    out = tmp_path / "runs"
    assert main(["run", str(tiny(tmp_path, duration=-1)), "--out", str(out)]) == 2
    assert "duration: must be greater than 0" in capsys.readouterr().err
    assert main(["run", str(tiny(tmp_path, config={"xmit_interval": 0})), "--out", str(out)]) == 2
    assert "config.xmit_interval: must be > 0" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "scenario file not found" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["run", str(tiny(tmp_path)), "--backend", "k8s"])
    assert exc.value.code == 2


def test_doctor_says_what_and_why(capsys):
    """doctor: python version, sim/local/docker backends, iptables, tc netem, tc tbf/htb, the
    NFQUEUE delayer, toxiproxy, the Spark pipeline (pyspark + java), the registered protocols, IP
    multicast, the JGroups runtime (jar and javac) and the JGroups node image, each with a reason."""
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split(":", 1)[0] for line in lines]
    assert names == [
        "python",
        "backend sim",
        "backend local",
        "backend docker",
        "iptables",
        "tc netem",
        "tc tbf/htb",
        "nfqueue delayer",
        "toxiproxy-server",
        "spark pipeline",
        "protocols",
        "ip multicast",
        "jgroups",
        "jgroups image",
    ]
    assert lines[1].startswith("backend sim: yes")
    line = dict(zip(names, lines, strict=True))
    assert "on loopback (IP_MULTICAST_IF 127.0.0.1, this host only): " in line["ip multicast"]
    spark = line["spark pipeline"]
    assert spark.startswith("spark pipeline: yes (pyspark ") and "java" in spark  # test extra + Java 17
    assert lines[3].startswith(("backend docker: yes", "backend docker: no ("))
    image = line["jgroups image"]
    assert (
        image.startswith(("jgroups image: yes", "jgroups image: no ("))
        and "splitbrain-jgroups" in image
        or ("no Docker engine" in image)
    ), image
    protocols = line["protocols"]
    assert protocols.startswith("protocols: unicast3, unicast2, unicast, ") and "registered" in protocols
    assert "; membership: static, gms (" in protocols
    for text in lines[1:]:
        assert text.endswith(")") and " (" in text, text
    if "no (" in line["tc netem"]:
        # This kernel has no sch_netem: the line says why (the kernel config, the module).
        assert "sch_netem" in line["tc netem"]
    # Tools no backend applies yet say so instead of looking like part of a backend.
    for name in ("tc netem", "tc tbf/htb", "nfqueue delayer"):
        assert "no backend's injector uses it yet" in line[name]


def test_node_command_passes_through(tmp_path, capsys):
    """`splitbrain node --help` is the daemon's help; a bad node config exits 2 naming the key."""
    assert main(["node", "--help"]) == 0
    assert "python -m splitbrain.node" in capsys.readouterr().out
    bad = tmp_path / "node.yaml"
    bad.write_text(yaml.safe_dump({"name": "A", "bind": "127.0.0.1:nope", "admin": "127.0.0.1:0"}))
    assert main(["node", "--config", str(bad)]) == 2
    assert "bind" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["run", "--help"],
        ["doctor", "--help"],
        ["analyze", "--help"],
        ["campaign", "--help"],
        ["clean", "--help"],
        ["schema", "--help"],
        ["protocols", "--help"],
        ["log", "--help"],
    ],
)
def test_help_everywhere(argv, capsys):
    """--help on the command and each subcommand exits 0 with a usage line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "usage: splitbrain" in capsys.readouterr().out


def test_progress_display_plain_and_terminal():
    """Not a terminal: a plain line per step and at most one status line per interval; a terminal: rich."""
    p = Progress(
        t=1.5,
        end=8,
        phase="running",
        sent=120,
        delivered=118,
        faults=("#0 partition A -> B (one-way)",),
        nodes={"A": "running", "B": "paused"},
    )
    plain = io.StringIO()
    display = ProgressDisplay("s", "local", stream=plain)
    display(p)
    display(p)  # within the interval: not printed again
    display(Progress(**{**p.__dict__, "note": "heal #0"}))
    display.close()
    lines = plain.getvalue().splitlines()
    assert lines == [
        "  s [local] running t=  1.5/8s | sent 120 delivered 118 | faults: #0 partition A -> B "
        "(one-way) | nodes: B paused",
        "  t=  1.5s heal #0",
    ]

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    display = ProgressDisplay("s", "local", stream=tty)
    display(Progress(**{**p.__dict__, "note": "heal #0"}))
    display.close()
    assert "heal #0" in tty.getvalue()


def test_protocols_lists_the_registry(capsys):
    """`splitbrain protocols` names each protocol with its settings, kinds and mutants; --json too."""
    assert main(["protocols"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unicast3: ") and "resync=sync" in out and "sync_tx" in out and "mutants: 14" in out
    assert main(["protocols", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    info = listed["unicast3"]
    assert info["name"] == "unicast3" and "SYNC_OK" in info["message_types"]
    assert info["settings"]["xmit_interval"] == 0.5
    assert listed["nakack2"]["multicast"] and listed["nakack2"]["settings"]["xmit_interval"] == 1.0
    assert "unicast2" in listed and "\nunicast2: " in out
    assert "\nunicast: the original UNICAST" in out and listed["unicast"]["message_types"] == ["DATA", "ACK"]
    assert listed["unicast"]["settings"] == {"xmit_interval": 0.5, "max_recv_window_seqnos": 100000}
    assert "\ngms: group membership" in out and "(membership: gms)" in out and "HEARTBEAT" in out
    assert listed["gms"]["membership"] and not listed["unicast3"]["membership"]
    assert listed["gms"]["settings"]["fd_timeout"] == 2.0


def test_a_bad_protocol_module_is_bad_input_for_every_command(monkeypatch, capsys):
    """SPLITBRAIN_PROTOCOLS naming no module: exit 2 and one line naming it, no traceback."""
    from splitbrain.node import protocols

    monkeypatch.setattr(protocols, "_loaded", False)
    monkeypatch.setenv(protocols.ENV_PROTOCOLS, "no.such.spec")
    assert main(["protocols"]) == 2
    err = capsys.readouterr().err
    assert "SPLITBRAIN_PROTOCOLS: cannot load a protocol spec from 'no.such.spec'" in err and "Traceback" not in err
    monkeypatch.delenv(protocols.ENV_PROTOCOLS)
    assert main(["protocols"]) == 0


def test_doctor_ip_multicast_without_and_with_a_multicast_route():
    """In a namespace of our own with only lo: no route for 224.0.0.0/4, so joining on the default
    interface fails and doctor says so (loopback with IP_MULTICAST_IF still loops back); with
    `ip route add 224.0.0.0/4 dev lo` the routed probe works too."""
    import sys

    from splitbrain.faults.netns import Lab, can_make_namespaces

    can, why = can_make_namespaces()
    if not can:
        pytest.skip(f"needs root and ip netns: {why}")
    code = "from splitbrain.harness.mcastprobe import ip_multicast_status as s; ok, why = s(); print(ok); print(why)"
    env_path = str(Path(__file__).resolve().parents[2])
    with Lab() as lab:
        ns = lab.add("mcast")
        argv = ["env", f"PYTHONPATH={env_path}", sys.executable, "-c", code]
        before = lab.run(ns, argv).check().stdout.splitlines()
        lab.run(ns, ["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]).check()
        after = lab.run(ns, argv).check().stdout.splitlines()
    assert before[0] == "False" and "no multicast route?" in before[1]
    assert "on loopback (IP_MULTICAST_IF 127.0.0.1, this host only): yes" in before[1]
    assert after[0] == "True" and "looped back through the multicast route" in after[1]
