"""The HTML report: one page per campaign (or analyze call) with PNG plots drawn by matplotlib (Agg).

- data.py: what to show, computed from verdicts and timelines (which runs get a timeline, spans and
  marks of one run, the matrix's cells, the page's tables); no drawing, no HTML;
- run_figures.py: one run's timeline (a panel per link or per multicast sender, view bands);
- campaign_figures.py: the pass/fail matrix, pass rates, latency, overhead, heal to sync;
- page.py and templates/report.html.j2: the page, rendered by jinja2 with autoescaping.

Everything here is presentation over results already computed; it only reads.
"""

from .data import CAMPAIGN_MIN_RUNS, MAX_TIMELINES, timeline_runs
from .page import write_report
from .run_figures import plot_timeline

__all__ = ["CAMPAIGN_MIN_RUNS", "MAX_TIMELINES", "plot_timeline", "timeline_runs", "write_report"]
