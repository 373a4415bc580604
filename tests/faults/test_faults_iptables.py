"""iptables partitions, loss, heal and cleanup, measured in network namespaces the tests make.

Each test builds its own namespaces (unique names, veth pairs, 198.18.x addresses that exist only
inside them) and deletes them in `finally`, via `Lab`. Delivery is measured one way (UDP sent from
one namespace, counted in the other), since a round trip cannot tell one-way from two-way cuts.
"""

from __future__ import annotations

import pytest

from splitbrain.faults.iptables import TAG_PREFIX, Host, Iptables, IptablesFaults, Rule, choose_binary, flavour_of, tag
from splitbrain.faults.netns import Lab, Result, can_make_namespaces, leftover_namespaces, netns, udp_one_way

A_IP, B_IP, C_IP = "198.18.0.1", "198.18.0.2", "198.18.1.3"

_CAN, _WHY = can_make_namespaces()
needs_netns = pytest.mark.skipif(not _CAN, reason=f"needs root and ip netns: {_WHY}")


@pytest.fixture
def trio():
    """Namespaces a, b, c: a-b on 198.18.0.0/24, a-c on 198.18.1.0/24; deleted in finally."""
    if not _CAN:
        pytest.skip(f"needs root and ip netns: {_WHY}")
    lab = Lab()
    created: list[str] = []
    try:
        a, b, c = lab.add(), lab.add(), lab.add()
        created = [a, b, c]
        lab.link(a, b, A_IP, B_IP)
        lab.link(a, c, "198.18.1.1", C_IP)
        yield lab, a, b, c
    finally:
        lab.close()
    assert not set(created) & set(leftover_namespaces())


def hosts(a: str, b: str, c: str | None = None) -> list[Host]:
    out = [Host("A", A_IP, netns(a)), Host("B", B_IP, netns(b))]
    if c is not None:
        out.append(Host("C", C_IP, netns(c)))
    return out


# ---- without root ----------------------------------------------------------------------------------------


def test_tag_format_and_validation():
    """Tags are splitbrain:<run>:<fault>; ids that iptables would mangle are refused."""
    assert tag("run-1", "partition1") == "splitbrain:run-1:partition1"
    for bad in ("", "a b", "x:y", 'quote"', "a" * 65):
        with pytest.raises(ValueError):
            tag(bad, "f")
        with pytest.raises(ValueError):
            tag("r", bad)


def test_rules_parse_iptables_save_quoting():
    """`iptables -S` quotes comments; Rule.comment reads them back."""

    def fake(argv, *, input=None, timeout_s=None):
        out = (
            "-P INPUT ACCEPT\n"
            '-A INPUT -s 198.18.0.1/32 -m comment --comment "splitbrain:r:p1" -j DROP\n'
            "-A INPUT -s 198.18.0.9/32 -j ACCEPT\n"
        )
        return Result(tuple(argv), 0, out, "")

    rules = Iptables(fake, binary="iptables").rules()
    assert rules[0] == Rule(
        "INPUT", ("-s", "198.18.0.1/32", "-m", "comment", "--comment", "splitbrain:r:p1", "-j", "DROP")
    )
    assert rules[0].comment == "splitbrain:r:p1" and rules[1].comment is None
    assert [r.comment for r in Iptables(fake, binary="iptables").tagged("splitbrain:r:")] == ["splitbrain:r:p1"]


def test_flavour_detection_from_version_text():
    """`iptables --version` decides nft vs legacy; old versions that say neither are legacy."""
    answers = {
        "iptables v1.8.9 (nf_tables)\n": "nft",
        "iptables v1.8.9 (legacy)\n": "legacy",
        "iptables v1.6.1\n": "legacy",
    }
    for text, expected in answers.items():
        assert flavour_of(lambda argv, **kw: Result(tuple(argv), 0, text, "")) == expected  # noqa: B023 - called here


def test_choose_binary_follows_the_backend_already_in_use():
    """Never mix: when only the other backend holds rules in the namespace, use that one."""

    def runner_with(nft_rules: bool, legacy_rules: bool):
        def run(argv, **kw):
            if argv[0] == "iptables":
                return Result(tuple(argv), 0, "iptables v1.8.9 (nf_tables)\n", "")
            has = nft_rules if argv[0] == "iptables-nft-save" else legacy_rules
            return Result(tuple(argv), 0, "*filter\n" + ("-A INPUT -j DROP\n" if has else "") + "COMMIT\n", "")

        return run

    assert choose_binary(runner_with(False, False))[0] == "iptables"
    assert choose_binary(runner_with(False, True))[0] == "iptables-legacy"
    assert choose_binary(runner_with(True, False))[0] == "iptables"


# ---- in namespaces ---------------------------------------------------------------------------------------


@needs_netns
def test_detects_the_flavour_in_a_namespace(trio):
    """The namespace's iptables is detected (nft on this host's Debian) and used consistently."""
    lab, a, b, c = trio
    ipt = Iptables(netns(a))
    assert ipt.binary in ("iptables", "iptables-legacy", "iptables-nft")
    assert ipt.flavour in ("nft", "legacy")
    assert ipt.flavour_detail


@needs_netns
def test_one_way_partition_drops_a_to_b_only(trio):
    """One-way A->B: datagrams from A never reach B, while B->A still all arrive."""
    lab, a, b, c = trio
    faults = IptablesFaults(hosts(a, b), run_id="oneway")
    try:
        assert udp_one_way(a, b, B_IP) == 200 and udp_one_way(b, a, A_IP) == 200
        faults.partition("A", "B", one_way=True)
        assert udp_one_way(a, b, B_IP) == 0
        assert udp_one_way(b, a, A_IP) == 200
        faults.heal()
        assert udp_one_way(a, b, B_IP) == 200
    finally:
        faults.cleanup()


@needs_netns
def test_two_way_partition_drops_both_directions(trio):
    """Two-way A<->B: nothing arrives either way; C, on another link, is untouched."""
    lab, a, b, c = trio
    faults = IptablesFaults(hosts(a, b, c), run_id="twoway")
    try:
        faults.partition("A", "B")
        assert udp_one_way(a, b, B_IP) == 0
        assert udp_one_way(b, a, A_IP) == 0
        assert udp_one_way(a, c, C_IP) == 200
        faults.heal()
        assert udp_one_way(a, b, B_IP) == 200 and udp_one_way(b, a, A_IP) == 200
    finally:
        faults.cleanup()


@needs_netns
def test_random_loss_is_about_p(trio):
    """loss 0.3 at B drops about 30 % of 1000 datagrams from A (generous bounds: 20-40 %)."""
    lab, a, b, c = trio
    faults = IptablesFaults(hosts(a, b), run_id="loss")
    try:
        faults.loss(0.3, dst="B", src="A")
        delivered = udp_one_way(a, b, B_IP, count=1000, interval_s=0.0002)
        assert 600 <= delivered <= 800, f"{1000 - delivered} of 1000 dropped at p=0.3"
        assert udp_one_way(b, a, A_IP) == 200  # loss is per direction
    finally:
        faults.cleanup()


@needs_netns
def test_heal_removes_exactly_the_tagged_rules(trio):
    """heal(fault) removes that fault's rules only: other faults, other runs and foreign rules stay."""
    lab, a, b, c = trio
    ipt_b = Iptables(netns(b))
    # A rule that is not ours (no comment) and one of another run.
    ipt_b._run(["-A", "INPUT", "-s", "198.18.9.9", "-j", "DROP"])
    other_run = IptablesFaults(hosts(a, b), run_id="other")
    faults = IptablesFaults(hosts(a, b), run_id="mine")
    try:
        other_run.loss(0.1, dst="B", src="A", fault_id="keep")
        p1 = faults.partition("A", "B", one_way=True, fault_id="p1")
        faults.loss(0.2, dst="B", src="A", fault_id="p10")  # a prefix of p1's id must not collide
        before = ipt_b.rules()
        assert faults.heal(p1) == 1
        after = ipt_b.rules()
        removed = [r for r in before if r not in after]
        assert [r.comment for r in removed] == [tag("mine", "p1")]
        assert {r.comment for r in after} == {None, tag("other", "keep"), tag("mine", "p10")}
        assert faults.heal() == 1  # the rest of this run
        assert {r.comment for r in ipt_b.rules()} == {None, tag("other", "keep")}
    finally:
        faults.cleanup()
        # cleanup removes every splitbrain rule, of any run, and nothing else.
        left = ipt_b.rules()
        assert [r.comment for r in left] == [None]
        ipt_b._run(["-D", "INPUT", "-s", "198.18.9.9", "-j", "DROP"])


@needs_netns
def test_cleanup_removes_everything_ours_even_from_a_new_object(trio):
    """cleanup works from the tags alone: a fresh object (say, after a crash) finds every rule."""
    lab, a, b, c = trio
    faults = IptablesFaults(hosts(a, b, c), run_id="crashed")
    faults.partition("A", ["B", "C"])
    faults.loss(0.5, src="B")
    assert sum(len(Iptables(netns(n)).tagged()) for n in (a, b, c)) > 0
    fresh = IptablesFaults(hosts(a, b, c), run_id="later")
    assert fresh.cleanup() == 6  # 4 partition rules (A<->B, A<->C) + loss from B at A and at C
    for n in (a, b, c):
        assert Iptables(netns(n)).tagged(TAG_PREFIX) == []
    assert udp_one_way(a, b, B_IP) == 200


@needs_netns
def test_failed_fault_leaves_no_half_applied_rules(trio):
    """A partition naming an unknown host raises and leaves no rule behind."""
    lab, a, b, c = trio
    faults = IptablesFaults(hosts(a, b), run_id="half")
    try:
        with pytest.raises(KeyError):
            faults.partition("A", ["B", "Z"])
        assert Iptables(netns(b)).tagged() == [] and faults.active == {}
    finally:
        faults.cleanup()
