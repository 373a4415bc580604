"""The report of an explore session: one HTML page with its pictures, in `<out>/report/`.

- behaviours over runs: the session's curve (distinct behaviours after each generation) and, when
  a random session ran beside a guided one with the same budget (`--compare-random`), both;
- every distinct failure: its check, signature, the run that found it, steps before and after
  shrinking, the file and its rerun line, and the shrunk schedule;
- the timeline of each failure's run, drawn by the pipeline's timeline plot
  (pipeline.report.plot_timeline from pipeline.timeline.timeline_of): on the simulator the shrunk
  scenario run again with its seed (what the file reproduces); on a live backend the failing run
  as found, from its kept run directory.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from splitbrain.harness.explore.engine import Finding, Session, rerun_command

REPORT_DIR = "report"
PAGE = "index.html"


def write_report(
    session: Session,
    out: Path,
    *,
    title: str,
    backend: str = "sim",
    strategy: str = "guided",
    compare: Session | None = None,
) -> Path:
    """Write `<out>/report/index.html` and its PNGs; returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")
    folder = Path(out) / REPORT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    curves = {strategy: session.curve}
    if compare is not None:
        curves["random" if strategy != "random" else "guided"] = compare.curve
    _plot_curves(curves, folder / "behaviours.png")
    parts = [
        "<!doctype html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}pre{background:#f4f4f4;padding:.5em;overflow-x:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{session.runs} runs in {session.wall_s:.1f} s, {len(session.seen)} distinct behaviours, "
        f"{session.failed_runs} failed run(s), {len(session.findings)} distinct failure(s)"
        + (f", {session.errors} run(s) not judged" if session.errors else "")
        + (f"; {session.interrupted} before the budget ran out" if session.interrupted else "")
        + ".</p>",
        "<h2>Behaviours over runs</h2>",
        _curve_caption(session, compare, strategy),
        '<img src="behaviours.png" alt="distinct behaviours over runs">',
        "<h2>Failures</h2>",
    ]
    if not session.findings:
        parts.append("<p>None within the budget.</p>")
    else:
        parts.append(_findings_table(session.findings, backend))
    for k, finding in enumerate(session.findings, 1):
        parts.append(_finding_section(k, finding, folder, backend))
    parts.append("</body></html>")
    page = folder / PAGE
    page.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return page


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _plot_curves(curves: dict[str, list[tuple[int, int]]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, curve in curves.items():
        if curve:
            ax.plot([r for r, _ in curve], [b for _, b in curve], label=name, drawstyle="steps-post")
    ax.set_xlabel("runs")
    ax.set_ylabel("distinct behaviours")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _curve_caption(session: Session, compare: Session | None, strategy: str) -> str:
    if compare is None:
        return f"<p>{_e(strategy)} search: {len(session.seen)} behaviours after {session.runs} runs.</p>"
    other = "random" if strategy != "random" else "guided"
    ratio = len(session.seen) / max(1, len(compare.seen))
    return (
        f"<p>{_e(strategy)}: {len(session.seen)} behaviours after {session.runs} runs; {other} with the same "
        f"budget: {len(compare.seen)} after {compare.runs} runs ({ratio:.2f}x).</p>"
    )


def _findings_table(findings: list[Finding], backend: str) -> str:
    rows = [
        "<table><tr><th>#</th><th>check</th><th>signature</th><th>run</th><th>steps</th><th>file</th></tr>",
    ]
    for k, f in enumerate(findings, 1):
        rows.append(
            f'<tr><td><a href="#failure-{k}">{k}</a></td><td>{_e(f.check)}</td><td>{_e(f.signature)}</td>'
            f"<td>{f.run}</td><td>{f.steps_before} &rarr; {f.steps_after}</td><td>{_e(f.path)}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _finding_section(k: int, f: Finding, folder: Path, backend: str) -> str:
    from splitbrain.harness.shrink import dump_scenario

    parts = [
        f'<h3 id="failure-{k}">{k}. {_e(f.check)} [{_e(f.signature)}]</h3>',
        f"<p>Found by run {f.run} (seed {f.seed}); shrunk from {f.steps_before} to {f.steps_after} steps "
        f"in {f.shrink_runs} runs.</p>",
    ]
    if f.explanation:
        parts.append(f"<p>As found: {_e(f.explanation)}</p>")
    if f.path:
        parts.append(f"<p>Rerun: <code>{_e(rerun_command(f.path, backend))}</code></p>")
    parts.append("<pre>" + _e(dump_scenario(f.scenario)) + "</pre>")
    image, caption = _timeline(k, f, folder)
    if image is not None:
        parts.append(f"<p>{_e(caption)}</p>")
        parts.append(f'<img src="{_e(image)}" alt="timeline of failure {k}">')
    else:
        parts.append(f"<p>No timeline: {_e(caption)}</p>")
    return "\n".join(parts)


def _timeline(k: int, f: Finding, folder: Path) -> tuple[str | None, str]:
    """(the PNG's name in the report folder, a caption), or (None, why not)."""
    try:
        if f.run_dir:
            from splitbrain.harness.eventlog import read_run

            events = read_run(f.run_dir)
            caption = f"The failing run as found (before shrinking): {f.run_dir}"
        else:
            events = _simulated(f.scenario)
            caption = "The shrunk scenario, run again in the simulator with its seed."
        from splitbrain.pipeline.report import plot_timeline
        from splitbrain.pipeline.timeline import timeline_from_doc, timeline_of

        name = f"timeline-{k}.png"
        plot_timeline(timeline_from_doc(f"failure {k}: {f.check}", timeline_of(events)), None, folder / name)
        return name, caption
    except Exception as exc:  # a run directory gone, a plot that cannot be drawn: the rest stands
        return None, f"{type(exc).__name__}: {exc}"


def _simulated(data: dict) -> list[dict]:
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim import Simulation

    scenario = parse_scenario(data)
    return sorted(Simulation(scenario, int(data["seed"])).run().all_events(), key=lambda e: e["t"])
