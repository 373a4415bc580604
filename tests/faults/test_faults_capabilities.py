"""faults.capabilities: one row per injector, a reason for every "no", answers that match trials."""

from __future__ import annotations

import shutil

from splitbrain.faults import capabilities as caps
from splitbrain.faults.netns import can_make_namespaces, leftover_namespaces

EXPECTED = {
    "netns",
    "iptables",
    "iptables-statistic",
    "netem",
    "tbf",
    "htb",
    "nfqueue",
    "nft",
    "docker",
    "docker-compose",
    "node-image",
    "toxiproxy-server",
    "toxiproxy-compatible",
}


def test_every_injector_has_a_row_and_every_no_a_reason():
    """capabilities() lists each injector once as (name, bool, detail); a "no" says why."""
    rows = caps.capabilities()
    names = [name for name, _, _ in rows]
    assert set(names) == EXPECTED and len(names) == len(set(names))
    for name, available, detail in rows:
        assert isinstance(available, bool) and isinstance(detail, str) and detail.strip(), name
    assert not [n for n in leftover_namespaces("sbxprobe")], "probe namespaces must be deleted"


def test_answers_match_this_machine():
    """Where we can check independently, the answers agree: netns, our own toxiproxy, the real binary."""
    rows = {name: (ok, detail) for name, ok, detail in caps.capabilities(containers=False)}
    assert rows["netns"][0] == can_make_namespaces()[0]
    assert rows["toxiproxy-compatible"][0] is True
    assert rows["toxiproxy-server"][0] == bool(shutil.which("toxiproxy-server"))
    if rows["netns"][0]:
        # With namespaces the kernel features are tried for real, so a "no" names what failed.
        for name in ("iptables", "tbf", "htb", "netem", "nfqueue"):
            ok, detail = rows[name]
            if not ok:
                assert "not tried" not in detail, (name, detail)
    if not rows["netem"][0]:
        assert "sch_netem" in rows["netem"][1]
    if not rows["nfqueue"][0]:
        assert "in-process fault layer" in rows["nfqueue"][1] or "NFQUEUE" in rows["nfqueue"][1]
