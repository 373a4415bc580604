"""`splitbrain compare`: the museum (or any scenarios) on every registered protocol variant.

Each scenario file is run on every variant the registry names (each protocol in
`protocols.names()`, and for a protocol with a `variant_key` each of its `variants`, e.g. UNICAST3's
resync modes), in the simulator, with seeds 1..N. The file's protocol and variant setting are
replaced; its other settings are kept where the target protocol accepts them (a setting or a
planted bug it does not know makes that cell "n/a"). A variant applies only where its protocol
delivers the same way as the file's (multicast or unicast, the spec's `multicast`): a piece about
point-to-point connections says nothing about a multicast protocol, and the reverse; such cells
are left out of the table. Every run is judged as `expect: pass`, so the pass rate says how often
a design gets through the scenario with every check passing.

Per cell: pass rate, and means per run of resync messages and bytes (the `resync_traffic` count:
what the protocol's spec calls resync traffic, both directions), time from the last heal to
windows in sync (windows_synced's max sync time, over the runs that had one), and retransmissions
(`retransmit` events). Everything comes from the run's own events, no pipeline needed.

With implementations as columns (`implementations(["python", "jgroups"])`), each file runs as
written on splitbrain's own protocol (`python`, on the simulator or a live backend) and on real
JGroups 2.12.2 nodes (`jgroups`, the local backend: the file's protocol becomes `jgroups`, and the
keys a JGroups scenario refuses - `config`, `transport`, `membership` - are left out, each named
in the cell's note). The cells also count messages delivered per run, so two implementations that
fail the same check in different ways still differ in the table. A JGroups node reports no
protocol events, so its resync and retransmission columns are empty ("-").
"""

from __future__ import annotations

import copy
import statistics
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from splitbrain.node import protocols

NA_CHARS = 110  # how much of the reason an n/a cell shows in the table


IMPLEMENTATIONS = ("python", "jgroups")
# Scenario keys a JGroups scenario refuses (the stack brings its own): left out of its column.
JGROUPS_REFUSED_KEYS = ("config", "transport", "membership", "ip_multicast")


@dataclass(frozen=True)
class Variant:
    """A column: a registered protocol variant on the simulator, or an implementation (`impl`)
    running the file on `backend`."""

    protocol: str
    key: str | None
    value: str | None
    impl: str | None = None
    backend: str = "sim"

    @property
    def label(self) -> str:
        if self.impl == "jgroups":
            return f"jgroups 2.12.2 ({self.backend})"
        if self.impl == "python":
            return f"python ({self.backend})"
        return self.protocol if self.key is None else f"{self.protocol} {self.key}={self.value}"


def implementations(names: Iterable[str], backend: str = "sim") -> list[Variant]:
    """Columns for implementations: `python` runs a file as written on `backend`, `jgroups` runs it
    on JGroups 2.12.2 nodes (always the local backend). Raises ValueError naming an unknown one."""
    out = []
    for name in names:
        if name not in IMPLEMENTATIONS:
            raise ValueError(f"unknown implementation {name!r} (known: {', '.join(IMPLEMENTATIONS)})")
        out.append(Variant(name, None, None, impl=name, backend="local" if name == "jgroups" else backend))
    return out


def variants() -> list[Variant]:
    out: list[Variant] = []
    for name in protocols.names():
        spec = protocols.get(name)
        if spec.variant_key and spec.variants:
            out.extend(Variant(name, spec.variant_key, v) for v in spec.variants)
        else:
            out.append(Variant(name, None, None))
    return out


def applies(data: dict, variant: Variant) -> bool:
    """Does the variant's protocol deliver the way the file's protocol does (multicast or not)?
    Every implementation column applies: it runs the file itself."""
    if variant.impl is not None:
        return True
    source = protocols.get(data.get("protocol") or protocols.DEFAULT_PROTOCOL)
    return protocols.get(variant.protocol).multicast == source.multicast


def on_impl(data: dict, variant: Variant) -> tuple[dict | None, str, str]:
    """The scenario for an implementation column, or None and why not; and a note naming the keys
    left out for JGroups."""
    from splitbrain.harness.scenario import ScenarioError, parse_scenario

    out = copy.deepcopy(data)
    out["expect"] = "pass"
    note = ""
    if variant.impl == "jgroups":
        out["protocol"] = "jgroups"
        dropped = []
        for key in JGROUPS_REFUSED_KEYS:
            if key in out:
                value = out.pop(key)
                if value not in (None, {}, [], False):
                    dropped.append(
                        f"{key} {value}"
                        if not isinstance(value, dict)
                        else ", ".join(f"{k}={v}" for k, v in value.items())
                    )
        note = f"left out: {'; '.join(dropped)}" if dropped else ""
    elif protocols.get(out.get("protocol") or protocols.DEFAULT_PROTOCOL).external:
        return None, "n/a (the file names an external implementation; python runs splitbrain's protocols)", ""
    try:
        parse_scenario(out)
    except ScenarioError as exc:
        return None, f"n/a ({exc.path}: {exc.reason})" if exc.path else f"n/a ({exc.reason})", note
    except ValueError as exc:
        return None, f"n/a ({exc})", note
    return out, "", note


def on_variant(data: dict, variant: Variant) -> tuple[dict | None, str]:
    """The scenario for a variant, or (None, why not)."""
    spec = protocols.get(variant.protocol)
    out = copy.deepcopy(data)
    out["protocol"] = variant.protocol
    out["expect"] = "pass"
    config = {}
    for key, value in (data.get("config") or {}).items():
        if data.get("protocol") != variant.protocol and key != "mutation":
            try:
                spec.config({key: value})
            except ValueError:
                continue  # a setting of the file's protocol this one does not have
        config[key] = value
    if variant.key is not None:
        config[variant.key] = variant.value
    out["config"] = config
    from splitbrain.harness.scenario import ScenarioError, parse_scenario

    try:
        spec.config(config)
        parse_scenario(out)  # e.g. a sync step the variant refuses
    except ScenarioError as exc:
        return None, f"n/a ({exc.reason})"
    except ValueError as exc:
        return None, f"n/a ({exc})"
    return out, ""


@dataclass
class Cell:
    runs: int = 0
    passed: int = 0
    crashed: int = 0
    resync_msgs: list[int] = field(default_factory=list)
    resync_bytes: list[int] = field(default_factory=list)
    sync_times: list[float] = field(default_factory=list)
    retransmits: list[int] = field(default_factory=list)
    failed_checks: dict[str, int] = field(default_factory=dict)
    na: str = ""
    delivered: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    note: str = ""

    def row(self) -> dict:
        def mean(xs):
            return round(statistics.fmean(xs), 3) if xs else None

        return {
            "runs": self.runs,
            "passed": self.passed,
            "pass_rate": None if not self.runs else self.passed / self.runs,
            "crashed": self.crashed,
            "resync_msgs": mean(self.resync_msgs),
            "resync_bytes": mean(self.resync_bytes),
            "sync_time_s": mean(self.sync_times),
            "retransmits": mean(self.retransmits),
            "failed_checks": dict(self.failed_checks),
            "na": self.na,
            "delivered": mean(self.delivered),
            "sent": mean(self.sent),
            "note": self.note,
        }


def measure(data: dict, seed: int, backend: str = "sim") -> dict:
    """One run of a scenario dict with `seed` on `backend` (the simulator, or a live backend in a
    scratch run directory): outcome and numbers."""
    from splitbrain.harness.checks import check_resync_traffic, run_checks, run_message_count, run_scenario_checks
    from splitbrain.harness.collect import count_messages
    from splitbrain.harness.eventlog import read_run
    from splitbrain.harness.run import run_scenario
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim import Simulation

    scenario = parse_scenario({**data, "seed": seed})
    try:
        if backend == "sim":
            events = Simulation(scenario, seed).run().all_events()
        else:
            with tempfile.TemporaryDirectory(prefix="splitbrain-compare-") as out:
                events = read_run(run_scenario(scenario, seed=seed, backend=backend, out=out).run_dir)
    except Exception as exc:  # an invariant, a layer's exception, a node that did not start: a crash
        return {"crash": f"{type(exc).__name__}: {exc}"[:200]}
    results = run_scenario_checks(events, scenario)
    # A check whose input the implementation does not report is not applicable, not a failure.
    failed = [c.name for c in results if not c.passed and c.applicable]
    traffic = check_resync_traffic(events, 1 << 62).details
    windows = run_checks(events, ["windows_synced"])[0].details
    sent, delivered = count_messages(events)
    return {
        "passed": not failed,
        "failed": failed,
        "resync_msgs": traffic["messages"],
        "resync_bytes": sum(p["bytes"] for p in traffic["pairs"].values()),
        "sync_time": windows.get("max_sync_time"),
        "retransmits": sum(run_message_count(ev) for ev in events if ev["kind"] == "retransmit"),
        "sent": sent,
        "delivered": delivered,
        "protocol_events": any(ev["kind"] in ("retransmit", "xmit_req_tx", "conn_state") for ev in events),
    }


def _job(args: tuple[dict, int, str]) -> dict:
    return measure(*args)


def compare(
    files: Iterable[tuple[str, dict]],
    seeds: range,
    *,
    jobs: int = 1,
    advance: Callable[[str], None] = lambda line: None,
    columns: list[Variant] | None = None,
) -> tuple[list[Variant], dict[str, dict[str, Cell]]]:
    """scenario name -> variant label -> Cell, for every file and each variant that applies to it
    (`columns`, default every registered variant), over `seeds`. Live runs go one at a time."""
    vs = variants() if columns is None else columns
    table: dict[str, dict[str, Cell]] = {}
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    try:
        for name, data in files:
            row = table.setdefault(name, {})
            for v in vs:
                if not applies(data, v):
                    continue
                cell = row[v.label] = Cell()
                if v.impl is not None:
                    scenario, why, cell.note = on_impl(data, v)
                else:
                    scenario, why = on_variant(data, v)
                if scenario is None:
                    cell.na = why
                    continue
                work = [(scenario, seed, v.backend) for seed in seeds]
                sim_pool = pool if v.backend == "sim" else None
                results = sim_pool.map(_job, work, chunksize=4) if sim_pool is not None else map(_job, work)
                for res in results:
                    cell.runs += 1
                    if "crash" in res:
                        cell.crashed += 1
                        cell.failed_checks["crash"] = cell.failed_checks.get("crash", 0) + 1
                        continue
                    cell.passed += res["passed"]
                    for c in res["failed"]:
                        cell.failed_checks[c] = cell.failed_checks.get(c, 0) + 1
                    cell.sent.append(res["sent"])
                    cell.delivered.append(res["delivered"])
                    if not res["protocol_events"] and v.impl == "jgroups":
                        continue  # a JGroups node reports no protocol events: no resync counts
                    cell.resync_msgs.append(res["resync_msgs"])
                    cell.resync_bytes.append(res["resync_bytes"])
                    if res["sync_time"] is not None:
                        cell.sync_times.append(res["sync_time"])
                    cell.retransmits.append(res["retransmits"])
                advance(f"{name} on {v.label}: {cell.passed}/{cell.runs} passed")
    finally:
        if pool is not None:
            pool.shutdown()
    return vs, table


def _num(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def markdown(vs: list[Variant], table: dict[str, dict[str, Cell]]) -> str:
    """The table as Markdown: one row per scenario and variant (with implementations as columns,
    also the messages delivered and sent per run, and what was left out of the file)."""
    impls = any(v.impl is not None for v in vs)
    head = "| scenario | variant | pass rate | resync msgs | resync bytes | sync time s | retransmits |"
    head += " failing checks |"
    if impls:
        head += " delivered / sent | note |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, row in table.items():
        for v in vs:
            cell = row.get(v.label)
            if cell is None:
                continue
            extra = f" | | {cell.note} |" if impls else ""
            if cell.na:
                why = cell.na.removeprefix("n/a (").removesuffix(")")
                lines.append(f"| {name} | {v.label} | n/a | | | | | {why[:NA_CHARS]}" + (extra or " |"))
                continue
            r = cell.row()
            fails = ", ".join(f"{k} {n}" for k, n in sorted(r["failed_checks"].items())) or "-"
            line = (
                f"| {name} | {v.label} | {r['passed']}/{r['runs']} | {_num(r['resync_msgs'])} | "
                f"{_num(r['resync_bytes'], '{:.0f}')} | {_num(r['sync_time_s'], '{:.2f}')} | "
                f"{_num(r['retransmits'])} | {fails} |"
            )
            if impls:
                line += f" {_num(r['delivered'])} / {_num(r['sent'], '{:.0f}')} | {cell.note} |"
            lines.append(line)
    return "\n".join(lines)
