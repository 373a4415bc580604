"""Partitions and random loss with iptables, in a node's own network namespace.

The fault vocabulary, as iptables rules in the *receiver's* namespace (filter table, INPUT chain,
inserted at the top so no earlier ACCEPT lets the traffic through):

- one-way partition A -> B:  at B  `-s <A> -j DROP`          (B still reaches A)
- two-way partition A <-> B: the same at both ends
- loss p (from A, or from all): at B `[-s <A>] -m statistic --mode random --probability p -j DROP`
  (from all excludes loopback, so a node keeps talking to itself and its local admin API)
- heal (one fault, or all of a run): delete exactly the rules that fault added

Each rule carries `-m comment --comment splitbrain:<run>:<fault-id>`. Heal lists the rules
(`iptables -S`) and deletes the ones whose comment matches, so rules made by anyone else (Docker,
the host, another run) are never touched; `cleanup()` deletes every splitbrain-tagged rule, of any
run, in every namespace it knows. Both also work in a new process that only knows the run id (the
tags are in the kernel, not in this object).

nft and legacy rules must not be mixed in one namespace: `Iptables` asks `iptables --version`
which backend the plain command drives and, when the other backend already holds rules in that
namespace (someone used it before us), switches to that one (`iptables-legacy` / `iptables-nft`).

How a command reaches the namespace is a `faults.netns.Runner` (ip netns exec, nsenter, docker
exec -u root, the docker SDK): this module never assumes one backend.

Delay and jitter are not here: see faults/netem.py (tc, where the kernel has sch_netem) and
faults/nfqueue.py (an NFQUEUE rule made by this module plus a userspace delayer).
"""

from __future__ import annotations

import ipaddress
import itertools
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from splitbrain.node.errors import RunFailed

from .netns import CommandError, Result, Runner

TAG_PREFIX = "splitbrain"
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
FLAVOURS = ("nft", "legacy")


def tag(run_id: str, fault_id: str) -> str:
    """The comment every rule of one fault carries: splitbrain:<run>:<fault-id>."""
    for what, value in (("run id", run_id), ("fault id", fault_id)):
        if not _ID.match(value):
            raise ValueError(f"{what} {value!r}: use 1-64 of A-Z a-z 0-9 _ . -")
    return f"{TAG_PREFIX}:{run_id}:{fault_id}"


class IptablesError(RunFailed, RuntimeError):
    pass


@dataclass(frozen=True)
class Rule:
    """One rule as `iptables -S` prints it: its chain and the words after `-A <chain>`."""

    chain: str
    spec: tuple[str, ...]

    @property
    def comment(self) -> str | None:
        words = self.spec
        for i, word in enumerate(words[:-1]):
            if word == "--comment":
                return words[i + 1]
        return None


class Iptables:
    """iptables in one network namespace: add tagged rules, list them, delete them by tag."""

    def __init__(self, runner: Runner, *, binary: str | None = None, table: str = "filter", timeout_s: float = 20.0):
        self.runner = runner
        self.table = table
        self.timeout_s = timeout_s
        self._binary = binary
        self.flavour_detail = "chosen by the caller" if binary else ""

    # ---- which iptables ----------------------------------------------------------------------------

    @property
    def binary(self) -> str:
        if self._binary is None:
            self._binary, self.flavour_detail = choose_binary(self.runner)
        return self._binary

    @property
    def flavour(self) -> str:
        return flavour_of(self.runner, self.binary)

    def _run(self, args: Sequence[str], check: bool = True) -> Result:
        # -w: wait for the xtables lock (legacy) instead of failing when another writer holds it.
        result = self.runner([self.binary, "-w", "5", "-t", self.table, *args], timeout_s=self.timeout_s)
        if check and not result.ok:
            raise IptablesError(CommandError(result).args[0])
        return result

    # ---- rules ------------------------------------------------------------------------------------

    def add(
        self, chain: str, matches: Sequence[str], target: Sequence[str], comment: str, *, insert: bool = True
    ) -> Rule:
        """Add `matches -m comment --comment <comment> target` (at the top of `chain` by default)."""
        spec = (*matches, "-m", "comment", "--comment", comment, *target)
        self._run(["-I" if insert else "-A", chain, *spec])
        return Rule(chain, tuple(spec))

    def rules(self) -> list[Rule]:
        """Every rule of the table, in `iptables -S` order (policies and chain lines left out)."""
        out = self._run(["-S"]).stdout
        rules = []
        for line in out.splitlines():
            words = shlex.split(line)
            if len(words) >= 2 and words[0] == "-A":
                rules.append(Rule(words[1], tuple(words[2:])))
        return rules

    def tagged(self, prefix: str = TAG_PREFIX + ":") -> list[Rule]:
        """Rules whose comment is `prefix` exactly or starts with it (a run, a fault or all ours)."""
        out = []
        for rule in self.rules():
            comment = rule.comment
            if comment is not None and (comment == prefix or comment.startswith(prefix)):
                out.append(rule)
        return out

    def delete_tagged(self, prefix: str, *, exact: bool = False) -> int:
        """Delete every rule whose comment starts with `prefix` (is `prefix`, when exact)."""

        def mine() -> list[Rule]:
            return [r for r in self.tagged(prefix) if not exact or r.comment == prefix]

        doomed = mine()
        for rule in doomed:
            # Deleting by specification removes one rule equal to it: a fault that added the same
            # rule twice lists it twice and so loses both.
            self._run(["-D", rule.chain, *rule.spec])
        left = mine()
        if left:
            raise IptablesError(f"rules tagged {prefix!r} still present after delete: {left}")
        return len(doomed)


def flavour_of(runner: Runner, binary: str = "iptables") -> str:
    """'nft' or 'legacy': which backend `binary` drives in the runner's namespace."""
    result = runner([binary, "--version"], timeout_s=10)
    if not result.ok:
        raise IptablesError(f"{binary} --version: {result.message}")
    text = result.stdout
    if "nf_tables" in text:
        return "nft"
    if "legacy" in text:
        return "legacy"
    # iptables before 1.8 has only the legacy backend and does not say so.
    return "legacy"


def _has_rules(runner: Runner, binary: str) -> bool | None:
    """Whether `binary` sees any rule in any table (None when the binary is absent or fails)."""
    result = runner([f"{binary}-save"], timeout_s=10)
    if not result.ok:
        return None
    return any(line.startswith("-A ") for line in result.stdout.splitlines())


def choose_binary(runner: Runner) -> tuple[str, str]:
    """The iptables command to use in a namespace, and why (never mix nft and legacy rules)."""
    default = flavour_of(runner, "iptables")
    other = "legacy" if default == "nft" else "nft"
    other_binary = f"iptables-{other}"
    default_busy = _has_rules(runner, f"iptables-{default}")
    other_busy = _has_rules(runner, other_binary)
    if other_busy and not default_busy:
        return other_binary, f"iptables is {default} but this namespace has {other} rules: using {other_binary}"
    if other_busy and default_busy:
        return "iptables", f"iptables ({default}); note: this namespace already mixes nft and legacy rules"
    return "iptables", f"iptables ({default})"


# ---- the fault vocabulary over a set of hosts -----------------------------------------------------------


@dataclass
class Host:
    """A node as the injectors see it: its name, its address as peers see it, its namespace."""

    name: str
    address: str
    runner: Runner
    iptables: Iptables = field(init=False)

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.address)  # a host name here would be resolved by iptables, once
        self.iptables = Iptables(self.runner)


@dataclass(frozen=True)
class AppliedFault:
    fault_id: str
    kind: str
    detail: dict
    hosts: tuple[str, ...]


class IptablesFaults:
    """Partitions and loss between named hosts, one run id; heal and cleanup by tag."""

    def __init__(self, hosts: Iterable[Host] | Mapping[str, Host], run_id: str):
        values = hosts.values() if isinstance(hosts, Mapping) else hosts
        self.hosts: dict[str, Host] = {h.name: h for h in values}
        tag(run_id, "x")  # validates the run id
        self.run_id = run_id
        self.active: dict[str, AppliedFault] = {}
        self._ids = itertools.count(1)

    def _fault_id(self, kind: str, fault_id: str | None) -> str:
        fid = fault_id or f"{kind}{next(self._ids)}"
        tag(self.run_id, fid)
        if fid in self.active:
            raise ValueError(f"fault id {fid!r} is already active")
        return fid

    def _host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise KeyError(f"unknown host {name!r} (known: {', '.join(sorted(self.hosts))})") from None

    @staticmethod
    def _names(group: str | Iterable[str]) -> list[str]:
        return [group] if isinstance(group, str) else list(group)

    def partition(
        self,
        a: str | Iterable[str],
        b: str | Iterable[str],
        *,
        one_way: bool = False,
        fault_id: str | None = None,
        proto: str | None = None,
    ) -> str:
        """Cut a -> b (one_way) or both directions; a and b may be names or groups of names."""
        fid = self._fault_id("partition", fault_id)
        comment = tag(self.run_id, fid)
        pairs = [(s, d) for s in self._names(a) for d in self._names(b)]
        if not one_way:
            pairs += [(d, s) for s, d in pairs]
        touched = []
        proto_match = ["-p", proto] if proto else []
        try:
            for src, dst in pairs:
                receiver = self._host(dst)
                receiver.iptables.add("INPUT", [*proto_match, "-s", self._host(src).address], ["-j", "DROP"], comment)
                touched.append(dst)
        except Exception:
            self._remove(fid, touched)
            raise
        self.active[fid] = AppliedFault(
            fid,
            "partition",
            {"a": self._names(a), "b": self._names(b), "one_way": one_way},
            tuple(sorted(set(touched))),
        )
        return fid

    def loss(
        self,
        probability: float,
        *,
        dst: str | Iterable[str] | None = None,
        src: str | Iterable[str] | None = None,
        fault_id: str | None = None,
        proto: str | None = None,
    ) -> str:
        """Drop each packet arriving at dst (default: every host) from src (default: anyone) with p."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"loss probability must be in [0, 1], got {probability!r}")
        fid = self._fault_id("loss", fault_id)
        comment = tag(self.run_id, fid)
        dsts = self._names(dst) if dst is not None else sorted(self.hosts)
        touched = []
        proto_match = ["-p", proto] if proto else []
        stat = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"]
        try:
            for name in dsts:
                receiver = self._host(name)
                if src is None:
                    receiver.iptables.add("INPUT", ["!", "-i", "lo", *proto_match, *stat], ["-j", "DROP"], comment)
                else:
                    for s in self._names(src):
                        if s == name:
                            continue
                        receiver.iptables.add(
                            "INPUT", [*proto_match, "-s", self._host(s).address, *stat], ["-j", "DROP"], comment
                        )
                touched.append(name)
        except Exception:
            self._remove(fid, touched)
            raise
        self.active[fid] = AppliedFault(
            fid, "loss", {"p": probability, "src": src, "dst": dsts}, tuple(sorted(set(touched)))
        )
        return fid

    def add_rule(
        self,
        host: str,
        chain: str,
        matches: Sequence[str],
        target: Sequence[str],
        *,
        kind: str = "rule",
        fault_id: str | None = None,
    ) -> str:
        """Any other tagged rule at one host (the NFQUEUE delayer uses this); healed like the rest."""
        fid = self._fault_id(kind, fault_id)
        self._host(host).iptables.add(chain, matches, target, tag(self.run_id, fid))
        self.active[fid] = AppliedFault(
            fid, kind, {"chain": chain, "matches": list(matches), "target": list(target)}, (host,)
        )
        return fid

    def heal(self, fault_id: str | None = None) -> int:
        """Remove one fault's rules, or all of this run's; return how many rules were deleted."""
        if fault_id is not None:
            fault = self.active.pop(fault_id, None)
            hosts = fault.hosts if fault is not None else tuple(self.hosts)
            return self._remove(fault_id, hosts)
        self.active.clear()
        prefix = f"{TAG_PREFIX}:{self.run_id}:"
        return sum(h.iptables.delete_tagged(prefix) for h in self.hosts.values())

    def cleanup(self) -> int:
        """Delete every splitbrain-tagged rule (of any run) at every host; errors are collected."""
        self.active.clear()
        deleted, errors = 0, []
        for h in self.hosts.values():
            try:
                deleted += h.iptables.delete_tagged(TAG_PREFIX + ":")
            except Exception as exc:  # keep cleaning the other hosts
                errors.append(f"{h.name}: {exc}")
        if errors:
            raise IptablesError("cleanup incomplete: " + "; ".join(errors))
        return deleted

    def _remove(self, fault_id: str, hosts: Iterable[str]) -> int:
        comment = tag(self.run_id, fault_id)
        total = 0
        for name in hosts:
            # Exact tag: fault "loss1" must not take "loss10" with it.
            total += self._host(name).iptables.delete_tagged(comment, exact=True)
        return total
