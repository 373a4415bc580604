"""Protocol-level fuzzing at length: tests/protocol_fuzz.py's fuzzer on every protocol that names a
header generator, up to --inputs inputs (goal: 10 M per layer) or --seconds of wall time
per protocol, whichever ends first. Prints, per protocol: inputs, inputs/s, the process's peak RSS
(resource.getrusage) before and after, the largest receive window and the most messages plus
events one input made, deliveries, and the count of each rejection reason (numbers shown as N).

Any crash or broken bound stops the run with the seed and the input number to replay, exit 1.

Run: .venv/bin/python benchmarks/bench_fuzz.py [--inputs N] [--seconds S] [--seed N]
     [--protocol NAME] [--config key=value ...] [--max-pending N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from tests.protocol_fuzz import FuzzCrash, ProtocolFuzzer, fuzzable

CHUNK = 10_000  # inputs between two looks at the clock


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def fuzz(protocol: str, seed: int, config: dict[str, object], inputs: int, seconds: float, max_pending: int) -> bool:
    fuzzer = ProtocolFuzzer(protocol, seed, config, max_pending=max_pending)
    rss_before = peak_rss_mib()
    start = time.perf_counter()
    try:
        while fuzzer.stats.inputs < inputs and time.perf_counter() - start < seconds:
            fuzzer.run(min(CHUNK, inputs - fuzzer.stats.inputs))
    except FuzzCrash as exc:
        print(f"### {protocol}: CRASH {exc}")
        return False
    wall = time.perf_counter() - start
    stats = fuzzer.stats
    print(f"### {protocol} (seed {seed}, config {config or 'default'})\n")
    print(
        "| inputs | messages | wall s | inputs/s | peak RSS MiB (before -> after) | max recv window "
        "| max work / input | delivered |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {stats.inputs:,} | {stats.messages:,} | {wall:.1f} | {stats.inputs / wall:,.0f} "
        f"| {rss_before:.1f} -> {peak_rss_mib():.1f} | {stats.max_pending} | {stats.max_work} "
        f"| {stats.delivered:,} |\n"
    )
    print("| rejection reason | count |\n| --- | ---: |")
    for reason, count in stats.rejections.most_common():
        print(f"| {reason} | {count:,} |")
    print()
    return True


@recorded("bench_fuzz", goals={"": "10 M inputs per layer without a crash, with bounded windows and memory"})
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=10_000_000, help="inputs per protocol (default 10 M)")
    ap.add_argument("--seconds", type=float, default=900.0, help="wall-time bound per protocol")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--max-pending",
        type=int,
        default=100_000,
        help="a receive window holding more messages fails the run (default: UNICAST3's "
        "max_recv_window_seqnos; pass the window you configure)",
    )
    ap.add_argument("--protocol", action="append", help="fuzz only these (default: every fuzzable one)")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help='a protocol setting; the value is read as JSON when it parses (16, "sync")',
    )
    args = ap.parse_args(argv)
    config: dict[str, object] = {}
    for item in args.config:
        key, _, raw = item.partition("=")
        try:
            config[key] = json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
    ok = True
    for protocol in args.protocol or fuzzable():
        ok = fuzz(protocol, args.seed, config, args.inputs, args.seconds, args.max_pending) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
