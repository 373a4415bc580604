"""The check xmit_traffic: retransmission traffic (requests, and messages sent again for any cause)
over a run against the scenario's xmit_bound. It fails on MCAST's seqno_outside_lock mutant on a
lossless 3-sender run and passes unmutated, counts only what a protocol's spec calls retransmission
traffic, and says when it judged nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from splitbrain.harness.checks import check_xmit_traffic, run_checks
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import ScenarioError, load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.node import protocols
from splitbrain.node.events import make_event

BUGS = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"
PIECE = BUGS / "mcast-spurious-retransmission.yaml"
TWIN = BUGS / "mcast-spurious-retransmission-fixed.yaml"


def _events(path: Path) -> tuple:
    sc = load_scenario(path)
    result = Simulation(sc, sc.seed).run()
    return sc, result


def test_fails_on_the_mcast_mutant_and_passes_unmutated_on_a_lossless_network():
    """Three members, two streams each, lossless links: the mutant's receivers ask for messages
    never lost (over the bound of 0), the atomic send asks for none; nothing is lost either way."""
    verdicts = {}
    for path in (PIECE, TWIN):
        sc, result = _events(path)
        assert result.stats["frames_lost"] == 0
        verdicts[path.stem] = check_xmit_traffic(result.all_events(), sc.xmit_bound)
    bad, good = verdicts[PIECE.stem], verdicts[TWIN.stem]
    assert not bad.passed and not bad.vacuous and bad.judged == 5400
    assert bad.details["requests"] > 10 and len(bad.details["links"]) == 6  # every receiver->sender
    assert bad.details["retransmissions"] > 10
    assert "retransmission requests and" in bad.explanation and "against a bound of 0" in bad.explanation
    assert good.passed and good.judged == 5400 and good.details["requests"] == good.details["retransmissions"] == 0


def test_counts_requests_and_retransmissions_per_link():
    """xmit_req_tx events (each protocol's XMIT-REQ or NAK) are requests, retransmit events (any
    reason) retransmissions, acks neither; the count is over the run, per receiver->asked link for a
    request and sender->receiver for a retransmission, with the seqnos asked and the reasons."""
    ev = [
        make_event(0.5, "A", "mcast", "send", members=["A", "B"], seqno=1, app="A:0:0"),
        make_event(1.0, "B", "mcast", "xmit_req_tx", peer="A", ranges=[[1, 3]], count=3),
        make_event(1.1, "A", "mcast", "retransmit", peer="B", seqno=1, reason="xmit_req"),
        make_event(1.2, "B", "mcast", "ack_tx", peer="A", seqno=3),
        make_event(2.0, "B", "unicast3", "xmit_req_tx", peer="A", ranges=[[4, 4]], count=1),
    ]
    r = check_xmit_traffic(ev, 3)
    assert r.passed and r.judged == 1
    assert r.details["links"]["B->A"]["requests"] == 2 and r.details["links"]["B->A"]["seqnos"] == 4
    assert r.details["links"]["A->B"]["retransmissions"] == 1
    assert r.details["links"]["A->B"]["by_reason"] == {"xmit_req": 1}
    assert not check_xmit_traffic(ev, 2).passed
    assert not run_checks(ev, ["xmit_traffic"], xmit_bound=0)[0].passed
    assert all(protocols.get(p).xmit_traffic is not None for p in ("unicast3", "unicast2", "nakack2", "mcast"))


def test_judges_nothing_without_a_bound_or_without_application_messages():
    """No bound, no message sent by an application, or no protocol that declares requests: vacuous."""
    req = make_event(1.0, "B", "mcast", "xmit_req_tx", peer="A", ranges=[[1, 1]], count=1)
    send = make_event(0.5, "A", "mcast", "send", members=["A", "B"], seqno=1, app="A:0:0")
    assert check_xmit_traffic([send, req], None).vacuous
    nothing_sent = check_xmit_traffic([req], 0)
    assert nothing_sent.vacuous and "no application message was sent" in nothing_sent.explanation
    toy = make_event(1.0, "B", "toy", "xmit_req_tx", peer="A")
    assert check_xmit_traffic([send | {"proto": "toy"}, toy], 0).vacuous


def test_xmit_bound_goes_with_the_check():
    """xmit_traffic needs xmit_bound (0 allowed), and xmit_bound needs the check; both name the field."""
    data = yaml.safe_load(TWIN.read_text())
    with pytest.raises(ScenarioError, match="xmit_bound: required by the check xmit_traffic"):
        parse_scenario({k: v for k, v in data.items() if k != "xmit_bound"})
    with pytest.raises(ScenarioError, match="xmit_bound: only the check xmit_traffic uses it"):
        parse_scenario({**data, "checks": ["no_loss"]})
    with pytest.raises(ScenarioError, match="xmit_bound"):
        parse_scenario({**data, "xmit_bound": -1})
    sc = parse_scenario(data)
    assert sc.xmit_bound == 0 and parse_scenario(sc.to_dict()) == sc


def test_run_of_the_museum_piece_prints_the_requests_and_the_windows(tmp_path, capsys):
    """splitbrain run of the spurious-retransmission piece: exit 0 (reproduced), the requests per
    link, the retransmissions, and final windows showing everything delivered."""
    code = main(["run", str(PIECE), "--backend", "sim", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "xmit_traffic failed (as expected)" in out and "against a bound of 0, for 5400 messages sent" in out
    assert "evidence: A->B retransmit:" in out
    assert "evidence: window B recv from A: delivered=1800 received=1800" in out
