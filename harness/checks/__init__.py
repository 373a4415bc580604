"""Plain-Python checkers over a merged event log (schema in node/events.py).

A checker never takes the protocol's word. It judges from what the applications sent and
delivered (application ids "sender:stream:n" embedded in payloads, never protocol seqnos), from
node lifecycles (node_start / node_stop) and from the harness's own fault timeline. The only
protocol events it reads are the sender's acks and the receiver's window closures, and only to
narrow an excuse (see no_duplicates), never to widen one.

- fifo (fifo.py), no_duplicates (no_duplicates.py, with redeliveries.py), no_loss (no_loss.py),
  windows_synced (windows_synced.py), no_errors (no_errors.py), views_agree (views_agree.py; a
  membership check), and the bounded checks resync_traffic and xmit_traffic, judged only when a
  scenario lists them with their bound: each module's docstring states its rules.

A check is a Checker (checker.py): streaming hooks over sends, deliveries, run lines and other
events, and a result. The registry (registry.py) is a list of them; run_checks (run.py) walks a
run's merged log once and feeds every checker named. What the checkers share of the run's
timeline (node lives, connectivity, pauses, heals, window discards) is timeline.py; reading
events (application ids, run lines) is events.py; the result types are results.py.

A check that judged nothing (no deliveries, no owed message, no window pair, no node event) is
*vacuous*: it does not pass (passed=False, vacuous=True) and says what it found nothing of, so a run
can never pass on an empty log. Every result carries `judged`, the number of things it judged.

Every check is a single pass over the log with dicts keyed by tuples, so it stays linear on logs of
millions of events. A run line (one line for a run of sends or deliveries, node/events.py) is read
as it is: fifo, no_duplicates, no_loss and the counting checks take it whole (no_loss keeps runs of
sends and ranges of deliveries per link and stream, so its memory grows with the runs, not the
messages); a checker that reads only single messages gets its messages made one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import registry
from .checker import Check, CheckContext, Checker, Part, default_recovery_bound_s
from .events import HARNESS, is_harness, parse_app, run_message_count, run_messages, sender_of
from .fifo import Fifo, fifo_result
from .no_duplicates import NoDuplicates, no_duplicates_result
from .no_errors import NoErrors, no_errors_result
from .no_loss import EXCUSES, MULTICAST_EXCUSES, NoLoss, no_loss_result
from .redeliveries import REDELIVERY_CAUSES, Redeliveries
from .registry import register, unregister
from .results import FIRST_FEW, LOST_IDS_SHOWN, CheckResult, fmt_t, link_name, not_applicable_result, vacuous_result
from .resync_traffic import ResyncTraffic, resync_traffic_result
from .run import (
    check_fifo,
    check_no_duplicates,
    check_no_errors,
    check_no_loss,
    check_resync_traffic,
    check_windows_synced,
    check_xmit_traffic,
    judged_summary,
    run_checks,
    run_scenario_checks,
    scenario_ack_bounds,
)
from .timeline import (
    GRACEFUL_STOP,
    LIFECYCLE,
    Connectivity,
    Lives,
    Pauses,
    discards_window,
    is_heal,
    run_end,
)
from .views_agree import ViewsAgree, check_views_agree, views_agree_result
from .windows_synced import WindowsSynced, window_view, windows_synced_result
from .xmit_traffic import XmitTraffic, xmit_traffic_result

__all__ = [
    "EXCUSES",
    "FIRST_FEW",
    "GRACEFUL_STOP",
    "HARNESS",
    "LIFECYCLE",
    "LOST_IDS_SHOWN",
    "MULTICAST_EXCUSES",
    "REDELIVERY_CAUSES",
    "Check",
    "CheckContext",
    "CheckResult",
    "Checker",
    "Connectivity",
    "Fifo",
    "Lives",
    "NoDuplicates",
    "NoErrors",
    "NoLoss",
    "Part",
    "Pauses",
    "Redeliveries",
    "ResyncTraffic",
    "ViewsAgree",
    "WindowsSynced",
    "XmitTraffic",
    "check_fifo",
    "check_no_duplicates",
    "check_no_errors",
    "check_no_loss",
    "check_resync_traffic",
    "check_views_agree",
    "check_windows_synced",
    "check_xmit_traffic",
    "default_recovery_bound_s",
    "discards_window",
    "fifo_result",
    "fmt_t",
    "is_harness",
    "is_heal",
    "judged_summary",
    "link_name",
    "no_duplicates_result",
    "no_errors_result",
    "no_loss_result",
    "not_applicable_result",
    "parse_app",
    "register",
    "registry",
    "resync_traffic_result",
    "run_checks",
    "run_end",
    "run_message_count",
    "run_messages",
    "run_scenario_checks",
    "scenario_ack_bounds",
    "sender_of",
    "unregister",
    "vacuous_result",
    "views_agree_result",
    "window_view",
    "windows_synced_result",
    "xmit_traffic_result",
]

# Names read from the live registry when asked for, so a check registered later is in them.
_FROM_REGISTRY: dict[str, Callable[[], Any]] = {
    "CHECKS": registry.unbounded,  # name -> checker, the checks that need no bound
    "BOUNDED_CHECKS": registry.bounded,  # name -> checker, the checks that judge only with a bound
    "CHECK_BOUNDS": registry.bound_keys,  # name -> the scenario key its bound comes from
    "KNOWN_CHECKS": registry.known,
    "MEMBERSHIP_CHECKS": registry.membership,
    "GENERAL_CHECKS": registry.general,
    "DEFAULT_RECOVERY_BOUND_S": default_recovery_bound_s,
}


def __getattr__(name: str) -> Any:
    make = _FROM_REGISTRY.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return make()
