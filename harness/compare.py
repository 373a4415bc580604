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
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from splitbrain.node import protocols

NA_CHARS = 110  # how much of the reason an n/a cell shows in the table


@dataclass(frozen=True)
class Variant:
    protocol: str
    key: str | None
    value: str | None

    @property
    def label(self) -> str:
        return self.protocol if self.key is None else f"{self.protocol} {self.key}={self.value}"


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
    """Does the variant's protocol deliver the way the file's protocol does (multicast or not)?"""
    source = protocols.get(data.get("protocol") or protocols.DEFAULT_PROTOCOL)
    return protocols.get(variant.protocol).multicast == source.multicast


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
        }


def measure(data: dict, seed: int) -> dict:
    """One simulator run of a scenario dict with `seed`: outcome and numbers."""
    from splitbrain.harness.checks import check_resync_traffic, run_checks, run_message_count, run_scenario_checks
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim import Simulation

    scenario = parse_scenario({**data, "seed": seed})
    try:
        result = Simulation(scenario, seed).run()
    except Exception as exc:  # an invariant or a layer's exception: counted, shown as a crash
        return {"crash": f"{type(exc).__name__}: {exc}"[:200]}
    events = result.all_events()
    results = run_scenario_checks(events, scenario)
    failed = [c.name for c in results if not c.passed]
    traffic = check_resync_traffic(events, 1 << 62).details
    windows = run_checks(events, ["windows_synced"])[0].details
    return {
        "passed": not failed,
        "failed": failed,
        "resync_msgs": traffic["messages"],
        "resync_bytes": sum(p["bytes"] for p in traffic["pairs"].values()),
        "sync_time": windows.get("max_sync_time"),
        "retransmits": sum(run_message_count(ev) for ev in events if ev["kind"] == "retransmit"),
    }


def _job(args: tuple[dict, int]) -> dict:
    return measure(*args)


def compare(
    files: Iterable[tuple[str, dict]],
    seeds: range,
    *,
    jobs: int = 1,
    advance: Callable[[str], None] = lambda line: None,
) -> tuple[list[Variant], dict[str, dict[str, Cell]]]:
    """scenario name -> variant label -> Cell, for every file and each variant that applies to it,
    over `seeds`."""
    vs = variants()
    table: dict[str, dict[str, Cell]] = {}
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    try:
        for name, data in files:
            row = table.setdefault(name, {})
            for v in vs:
                if not applies(data, v):
                    continue
                cell = row[v.label] = Cell()
                scenario, why = on_variant(data, v)
                if scenario is None:
                    cell.na = why
                    continue
                work = [(scenario, seed) for seed in seeds]
                results = pool.map(_job, work, chunksize=4) if pool else map(_job, work)
                for res in results:
                    cell.runs += 1
                    if "crash" in res:
                        cell.crashed += 1
                        cell.failed_checks["crash"] = cell.failed_checks.get("crash", 0) + 1
                        continue
                    cell.passed += res["passed"]
                    for c in res["failed"]:
                        cell.failed_checks[c] = cell.failed_checks.get(c, 0) + 1
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


def markdown(vs: list[Variant], table: dict[str, dict[str, Cell]]) -> str:
    """The table as Markdown: one row per scenario and variant."""
    lines = [
        "| scenario | variant | pass rate | resync msgs | resync bytes | sync time s | retransmits | failing checks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in table.items():
        for v in vs:
            cell = row.get(v.label)
            if cell is None:
                continue
            if cell.na:
                why = cell.na.removeprefix("n/a (").removesuffix(")")
                lines.append(f"| {name} | {v.label} | n/a | | | | | {why[:NA_CHARS]} |")
                continue
            r = cell.row()

            def num(x, fmt="{:.1f}"):
                return "-" if x is None else fmt.format(x)

            fails = ", ".join(f"{k} {n}" for k, n in sorted(r["failed_checks"].items())) or "-"
            lines.append(
                f"| {name} | {v.label} | {r['passed']}/{r['runs']} | {num(r['resync_msgs'])} | "
                f"{num(r['resync_bytes'], '{:.0f}')} | {num(r['sync_time_s'], '{:.2f}')} | "
                f"{num(r['retransmits'])} | {fails} |"
            )
    return "\n".join(lines)
