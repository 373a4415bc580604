"""windows_synced: every final send window at X for Y (both alive at the end) matches Y's final
recv window for X: same conn_id, Y's highest delivered == X's highest sent == X's highest acked.
A pair whose send window the protocol reaped (CLOSED) after use is judged in sync (send None).
Multicast windows (per view member, no conn_id) after a restart: a receiver's window of a sender
restarted without multicasting since is stale, and a restarted receiver's empty window is judged
as no window (idle when the sender has nothing outstanding).
A node alive at the end must report a final snapshot of each window its conn_state events left
open (windows reaped by the protocol are not expected).
A pair whose receiver delivered everything but whose sender has not seen it all acked is
inconclusive, not out of sync, when the sender's final window came less than the protocol's ack
bound after its last send (`ack_bounds`: NAKACK2 sees acks only through STABLE rounds; the
explanation names the setting); a run with only such pairs judged nothing. A node paused at the
end is judged like a cut: its pairs are skipped (and named), as a dead node's are.
"""

from __future__ import annotations

from collections import defaultdict

from splitbrain.node.views import pair_problem

from .checker import Check, CheckContext
from .results import CheckResult, fmt_t, link_name, not_applicable_result, vacuous_result
from .timeline import CLOSED, LIFECYCLE, Lives, Pauses, is_heal

# Data-plane events that prove a node held protocol state and so owed a final window snapshot.
_TRAFFIC = frozenset(("send", "deliver", "ack_tx", "ack_rx"))


def window_view(ev: dict | None) -> dict | None:
    if ev is None:
        return None
    return {"conn_id": ev.get("conn_id"), "low": ev.get("low"), "high": ev.get("high"), "state": ev.get("state")}


class WindowsSynced(Check):
    """Final send and recv windows of every live pair agree, and nothing is left unacked."""

    name = "windows_synced"
    unit = " pairs"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        ack_bounds = ctx.ack_bounds
        self.lives = Lives()
        self.pauses = Pauses()
        # proto -> (setting, seconds): how long after its last send a sender may wait for its acks.
        self.ack_bounds = dict(ack_bounds or {})
        # (sender, receiver) -> t of its last send; (sender, None) of its last multicast.
        self.last_send: dict[tuple[str, str | None], float] = {}
        self.send_windows: dict[tuple[str, str, str], dict] = {}  # (sender, receiver, proto) -> final window
        self.recv_windows: dict[tuple[str, str, str], dict] = {}  # (sender, receiver, proto) -> final window
        self.last_deliver: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
        self.last_ack_rx: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
        self.traffic_since_start: set[str] = set()
        self.sent_since_start: set[tuple[str, str]] = set()  # (sender, receiver)
        self.multicast_since_start: set[str] = set()  # senders of a multicast since their last start
        # node -> {(side, peer): open?} from conn_state since the node's last start.
        self.open_windows: dict[str, dict[tuple[str, str], bool]] = {}
        self.reported: dict[str, set[tuple[str | None, str]]] = defaultdict(set)
        self.last_heal: float | None = None
        self.data_protos: set[str] = set()  # the protos of sends and deliveries
        self.any_window_event = False  # a window or conn_state from any node

    def see_send(self, ev: dict) -> None:
        node = ev["node"]
        self.data_protos.add(ev["proto"])
        self.traffic_since_start.add(node)
        if "peer" in ev:
            self.sent_since_start.add((node, ev["peer"]))
            self.last_send[(node, ev["peer"])] = ev["t"]
        elif "members" in ev:
            self.multicast_since_start.add(node)
            self.last_send[(node, None)] = ev["t"]

    def see_deliver(self, ev: dict) -> None:
        node = ev["node"]
        self.data_protos.add(ev["proto"])
        self.traffic_since_start.add(node)
        if "peer" in ev:
            self.last_deliver[(ev["peer"], node)] = ev["t"]

    # A run line tells what a single send or delivery does (who had traffic, the last time).
    see_send_run = see_send
    see_deliver_run = see_deliver

    def see_other(self, ev: dict) -> None:
        kind, node = ev["kind"], ev["node"]
        self.pauses.observe(ev)
        if kind in LIFECYCLE:
            self.lives.observe(ev)
            # A restarted node lost its windows, so only traffic after the last start counts. A
            # stop keeps it: a graceful stop ends every live run right after the final windows,
            # and a dead node is skipped below anyway.
            if kind == "node_start":
                self.traffic_since_start.discard(node)
                self.open_windows.pop(node, None)
                self.sent_since_start.difference_update([k for k in self.sent_since_start if k[0] == node])
                self.multicast_since_start.discard(node)
            return
        if kind in _TRAFFIC:
            self.traffic_since_start.add(node)
        if kind == "window" or kind == "conn_state":
            self.any_window_event = True
        if kind == "ack_rx" and "peer" in ev:
            self.last_ack_rx[(node, ev["peer"])] = ev["t"]
        elif kind == "conn_state" and "peer" in ev and ev.get("side") in ("send", "recv"):
            self.open_windows.setdefault(node, {})[(ev["side"], ev["peer"])] = ev.get("state") != CLOSED
        if kind == "window" and ev.get("final") and "peer" in ev:
            self.reported[node].add((ev.get("side"), ev["peer"]))
            # Keyed by proto too: a NAKACK2 stack has NAKACK2's and UNICAST3's windows per pair.
            if ev.get("side") == "send":
                self.send_windows[(node, ev["peer"], ev["proto"])] = ev
            elif ev.get("side") == "recv":
                self.recv_windows[(ev["peer"], node, ev["proto"])] = ev
        elif is_heal(ev):
            self.last_heal = ev["t"]

    def windowless(self) -> list[str]:
        """The protocols of this run's data when none of them reports windows and no node wrote
        one (a real implementation that exposes none, e.g. JGroups 2.12); else []."""
        if self.any_window_event or not self.data_protos:
            return []
        from splitbrain.node import protocols

        for proto in self.data_protos:
            try:
                if protocols.get(proto).reports_windows:
                    return []
            except ValueError:  # an unknown protocol: judged as one that reports windows
                return []
        return sorted(self.data_protos)

    def result(self) -> CheckResult:
        windowless = self.windowless()
        if windowless:
            return not_applicable_result(
                "windows_synced",
                f"the nodes ({', '.join(windowless)}) report no windows, so there are none to compare",
                {"protocols": windowless},
            )
        send_windows, recv_windows, last_heal = self.send_windows, self.recv_windows, self.last_heal
        last_deliver, last_ack_rx, open_windows = self.last_deliver, self.last_ack_rx, self.open_windows
        sent_since_start, traffic_since_start, reported = self.sent_since_start, self.traffic_since_start, self.reported
        pairs: dict[str, dict] = {}
        skipped_dead = 0
        # With one protocol's windows in the run a pair is named "X->Y" as it always was; with several
        # (NAKACK2 over UNICAST3), "X->Y (proto)".
        several = len({key[2] for key in send_windows}) > 1
        lives = self.lives
        paused = self.pauses.paused
        skipped_paused = 0
        inconclusive: dict[str, dict] = {}
        restarted_silent: set[tuple[str, str, str]] = set()
        for (sender, receiver, proto), send in send_windows.items():
            if lives.dead(sender) or lives.dead(receiver):
                skipped_dead += 1
                continue
            if sender in paused or receiver in paused:
                # A frozen process reports nothing new and answers nothing: judged like a cut.
                skipped_paused += 1
                continue
            recv = recv_windows.get((sender, receiver, proto))
            if (
                lives.starts.get(sender, 0) > 1
                and sender not in self.multicast_since_start
                and not send.get("high")
                and send.get("conn_id") is None
                and recv is not None
                and recv.get("high")
            ):
                # A multicast window exists per view member, so a sender restarted without multicasting
                # since reports an empty one while the receiver still holds its previous life's: stale,
                # like a unicast receive window of a restarted sender (below); its next multicast opens
                # a new window at the receiver.
                restarted_silent.add((sender, receiver, proto))
                continue
            if (
                lives.starts.get(receiver, 0) > 1
                and recv is not None
                and recv.get("conn_id") is None
                and not recv.get("high")
                and send.get("conn_id") is None
            ):
                # The mirror case: a restarted member holds an empty multicast window for a sender that
                # has not multicast since; like a unicast receiver without a window, the pair is idle if
                # nothing is outstanding (pair_problem), out of sync otherwise.
                recv = None
            problem = pair_problem(sender, receiver, send, recv)
            name = link_name(sender, receiver) + (f" ({proto})" if several else "")
            waited = self._too_early_for_acks(sender, receiver, proto, send, recv) if problem else None
            if waited is not None:
                inconclusive[name] = {
                    "problem": problem,
                    "send": window_view(send),
                    "recv": window_view(recv),
                    **waited,
                }
                continue
            sync_time = None
            if problem is None and last_heal is not None:
                moved = max(last_deliver.get((sender, receiver), 0.0), last_ack_rx.get((sender, receiver), 0.0))
                sync_time = max(0.0, moved - last_heal)
            pairs[name] = {
                "synced": problem is None,
                "problem": problem,
                "send": window_view(send),
                "recv": window_view(recv),
                "sync_time": sync_time,
            }

        # A pair whose send window the protocol reaped (CLOSED) after sending is judged too: it is in
        # sync when the receiver kept no window either (a receiver window it still holds is stale).
        send_links = {key[:2] for key in send_windows}
        for sender, receiver in sorted(sent_since_start):
            if (sender, receiver) in send_links or self.lives.dead(sender) or self.lives.dead(receiver):
                continue
            if sender in paused or receiver in paused:
                continue
            if open_windows.get(sender, {}).get(("send", receiver)) is False:
                # Reaping is UNICAST3's (conn_state): its receive window, if any, is the stale one.
                recv = next((ev for key, ev in recv_windows.items() if key[:2] == (sender, receiver)), None)
                pairs[link_name(sender, receiver)] = {
                    "synced": True,
                    "problem": None,
                    "send": None,
                    "recv": window_view(recv),
                    "sync_time": None,
                }

        # A recv window with no send window at a live sender is stale (the sender restarted and has
        # not sent since); the next send resyncs it, so it is reported but is no failure.
        stale_recv = sorted(
            link_name(*key[:2])
            for key in recv_windows
            if (key not in send_windows or key in restarted_silent)
            and not self.lives.dead(key[0])
            and not self.lives.dead(key[1])
        )
        silent = []
        for node in sorted(traffic_since_start):
            if self.lives.dead(node) or node in paused:
                continue
            windows = open_windows.get(node)
            if windows is None:
                # No conn_state since its start: at least one final window is owed.
                missing = not reported.get(node)
            else:
                # Windows the protocol reaped (CLOSED) are not expected at the end.
                missing = any(is_open and key not in reported.get(node, ()) for key, is_open in windows.items())
            if missing:
                silent.append(node)
        return windows_synced_result(
            pairs,
            silent,
            skipped_dead,
            stale_recv,
            last_heal,
            inconclusive=inconclusive,
            paused=sorted(n for n in paused if not self.lives.dead(n)),
            skipped_paused=skipped_paused,
        )

    def _too_early_for_acks(self, sender: str, receiver: str, proto: str, send: dict, recv: dict | None) -> dict | None:
        """For a pair whose receiver delivered everything sent but whose sender has not seen it all
        acknowledged: when the sender's final window came less than the protocol's ack bound after
        its last send, the run was too short to tell (what waited, and the setting). None otherwise."""
        bound = self.ack_bounds.get(proto)
        if bound is None or recv is None or send.get("conn_id") != recv.get("conn_id"):
            return None
        if recv.get("low") != send.get("high"):
            return None  # something was not delivered: out of sync whatever the acks say
        last = self.last_send.get((sender, receiver), self.last_send.get((sender, None)))
        if last is None:
            return None
        waited = send["t"] - last
        setting, seconds = bound
        if waited >= seconds:
            return None
        return {"waited_s": round(waited, 3), "ack_bound_s": seconds, "setting": setting}


def windows_synced_result(
    pairs: dict,
    silent: list[str],
    skipped_dead: int,
    stale_recv: list[str],
    last_heal: float | None,
    *,
    inconclusive: dict | None = None,
    paused: list[str] | None = None,
    skipped_paused: int = 0,
) -> CheckResult:
    """windows_synced's verdict from the judged pairs: `pairs` maps "X->Y" to
    synced/problem/send/recv/sync_time, in the order to report them; `inconclusive` the pairs
    whose acks had less time than the protocol's ack bound (not judged), `paused` the nodes paused
    at the end (their pairs skipped like a dead node's)."""
    problems = [f"{link} {p['problem']}" for link, p in pairs.items() if p["problem"] is not None]
    if silent:
        problems.append(f"final windows not reported by {', '.join(silent)} (alive at end, with open windows)")
    out_of_sync = sum(1 for p in pairs.values() if not p["synced"])
    sync_times = [p["sync_time"] for p in pairs.values() if p["sync_time"] is not None]
    max_sync_time = max(sync_times, default=None)
    details = {
        "pairs": pairs,
        "out_of_sync": out_of_sync,
        "not_reported": silent,
        "skipped_dead": skipped_dead,
        "stale_recv": stale_recv,
        "last_heal_t": last_heal,
        "max_sync_time": max_sync_time,
    }
    if inconclusive:
        details["inconclusive"] = inconclusive
    if paused:
        details["paused"] = paused
        details["skipped_paused"] = skipped_paused
    early = ""
    if inconclusive:
        first = next(iter(inconclusive.values()))
        early = (
            f"{len(inconclusive)} pair(s) inconclusive: everything delivered, acks still pending "
            f"{first['waited_s']:g}s after the last send, less than the protocol's ack bound of "
            f"{first['ack_bound_s']:g}s ({first['setting']}): {', '.join(inconclusive)}"
        )
    if problems:
        return CheckResult("windows_synced", False, "; ".join(problems), details, judged=len(pairs))
    if not pairs:
        nothing = early or "no final send window of a pair alive at the end"
        skipped = [
            f"{n} pair(s) with a {what} end skipped"
            for n, what in ((skipped_dead, "dead"), (skipped_paused, "paused"))
            if n
        ]
        if skipped:
            nothing += f" ({'; '.join(skipped)})"
        return vacuous_result("windows_synced", nothing, details)
    explanation = f"{len(pairs)} pair(s) in sync"
    if max_sync_time is not None:
        explanation += f", max sync time {max_sync_time:.3f}s after last heal at {fmt_t(last_heal)}"
    elif last_heal is None:
        explanation += " (no heal in this run)"
    if early:
        explanation += f"; {early}"
    if paused:
        explanation += f"; {skipped_paused} pair(s) of {', '.join(paused)} (paused at the end) skipped, like a cut"
    return CheckResult("windows_synced", True, explanation, details, judged=len(pairs))
