"""The protocol registry (node/protocols.py), stack composition by names, and the protocol-neutral
views (node/views.py) as UNICAST3 fills them."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from splitbrain.node import protocols
from splitbrain.node.compose import compose, protocol_layers, recovery_bound_s, refusal
from splitbrain.node.faultlayer import FaultLayer
from splitbrain.node.layer import SyncPeer
from splitbrain.node.unicast3 import Unicast3
from splitbrain.node.views import Window, pair_problem
from tests.netlab import Net

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_protocols_are_clear_errors():
    with pytest.raises(ValueError, match=r"^protocol: 'nope' is not implemented \(available: unicast3"):
        protocols.get("nope")


def test_a_name_cannot_be_registered_twice_nor_redefine_a_core_kind():
    spec = protocols.get("unicast3")
    with pytest.raises(ValueError, match="already registered"):
        protocols.register(replace(spec))
    with pytest.raises(ValueError, match="redefines core event kind"):
        protocols.register(replace(spec, name="other", event_kinds={"deliver": "mine"}))
    assert "other" not in protocols.names()


def test_registry_unions_kinds_and_message_types():
    kinds = protocols.event_kinds()
    assert {"send", "deliver", "window", "fault_on"} <= set(kinds)  # core
    assert {"sync_tx", "first_seqno_rx", "close_tx"} <= set(kinds)  # UNICAST3's own
    assert "send" not in protocols.rare_event_kinds() and "sync_tx" in protocols.rare_event_kinds()
    assert protocols.message_types("unicast3") >= {"DATA", "ACK", "SYNC_OK", "APP"}
    assert protocols.overhead_kinds()["acks"] == "ack_tx" and protocols.overhead_kinds()["syncs"] == "sync_tx"


def test_variant_is_the_setting_or_its_default():
    spec = protocols.get("unicast3")
    assert spec.variant({}) == "sync" and spec.variant({"resync": "timestamp"}) == "timestamp"


def test_compose_builds_the_named_layers_bottom_first():
    stack = compose("A", ["faults", "unicast3"], {"unicast3": {"xmit_interval": 0.2}}, random.Random(1))
    assert [type(layer) for layer in stack.layers] == [FaultLayer, Unicast3]
    assert stack.layers[1].config.xmit_interval == 0.2
    assert protocol_layers(stack) == [stack.layers[1]]
    with pytest.raises(ValueError, match="^xmit_interval: must be > 0"):
        compose("A", ["unicast3"], {"unicast3": {"xmit_interval": 0}}, random.Random(1))


def test_recovery_bound_and_refusal_come_from_the_protocol():
    assert recovery_bound_s("unicast3", {}) == pytest.approx(4.5)
    assert refusal("unicast3", {}, SyncPeer(peer="B"), random.Random(0)) is None
    assert "config.resync: sync" in refusal("unicast3", {"resync": "timestamp"}, SyncPeer(peer="B"), random.Random(0))


def test_a_bad_spec_module_in_the_environment_is_named():
    code = "from splitbrain.node import protocols; protocols.names()"
    env = {"SPLITBRAIN_PROTOCOLS": "no.such.module", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "SPLITBRAIN_PROTOCOLS: cannot load a protocol spec from 'no.such.module'" in proc.stderr


def test_a_run_imports_only_the_package_of_its_protocol_and_listing_keeps_the_order(tmp_path):
    """A sim run of a UNICAST3 scenario through the CLI imports no other protocol's package; a
    later listing loads them all, built-ins in BUILTIN's order whichever was asked for first."""
    code = (
        "import sys; from splitbrain.harness.cli import main; from splitbrain.node import protocols\n"
        "assert main(['run', sys.argv[1], '--backend', 'sim', '--out', sys.argv[2], '--no-progress']) == 0\n"
        "builtin = {m.split('.')[2] for m in protocols.BUILTIN}\n"
        "print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('splitbrain.node.')} & builtin))\n"
        "protocols.get('nakack2')\n"
        "print([list(protocols.names()), list(protocols.membership_names())])\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    scenario, out = ROOT / "scenarios" / "smoke.yaml", tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(scenario), str(out)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    packages, listed = proc.stdout.splitlines()[-2:]
    assert packages == str(["unicast3"]), packages
    assert listed == str([["unicast3", "unicast2", "unicast", "nakack2", "mcast"], ["gms"]])


# ---- views ------------------------------------------------------------------------------------


def test_unicast3_windows_show_acked_sent_and_delivered():
    net = Net()
    net.send("A", "B", 5)
    net.run_until_quiet(2.0)
    a, b = net.u3("A"), net.u3("B")
    [send] = a.windows()
    [recv] = b.windows()
    assert (send.side, send.peer, send.low, send.high, send.pending) == ("send", "B", 5, 5, 0)
    assert (recv.side, recv.peer, recv.low, recv.high, recv.missing) == ("recv", "A", 5, 5, 0)
    assert send.conn_id == recv.conn_id
    assert pair_problem("A", "B", send.to_dict(), recv.to_dict()) is None
    assert a.unacked("B") == 0 and a.busy() == [] and b.busy() == []


def test_unicast3_views_while_a_message_is_missing_and_a_sync_runs():
    net = Net()
    net.connect("A", "B")
    net.drop = lambda msg: msg.app == "A:0:2"
    net.send("A", "B", 3)
    net.run(0.01)
    a, b = net.u3("A"), net.u3("B")
    [recv] = b.windows()
    # seqno 1 came with connect(); 2 is lost, 3 and 4 are held.
    assert (recv.low, recv.high, recv.missing, recv.pending) == (1, 4, 1, 2)
    assert a.unacked("B") == 3
    [send] = a.windows()
    problem = pair_problem("A", "B", send.to_dict(), recv.to_dict())
    assert problem == f"A send conn {send.conn_id} HA=1 HS=4, B recv conn {recv.conn_id} delivered=1 received=4"
    net.drop = None
    net.command("B", SyncPeer(peer="A"))
    assert b.busy() == ["resyncing with A"]
    net.run_until_quiet(3.0)
    assert b.busy() == [] and a.unacked("B") == 0


def test_window_event_has_the_schema_keys():
    ev = Window(peer="B", side="send", conn_id=7, low=1, high=3, state="OPEN").event(1.5, "A", "unicast3", final=True)
    assert ev == {
        "v": 1,
        "t": 1.5,
        "node": "A",
        "proto": "unicast3",
        "kind": "window",
        "peer": "B",
        "side": "send",
        "conn_id": 7,
        "low": 1,
        "high": 3,
        "state": "OPEN",
        "final": True,
    }
