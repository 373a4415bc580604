"""The conformance suite of the node contract (docs/node-contract.md): start two nodes of one
implementation, drive them through the admin API and read their event logs, and say of every
rule whether the implementation keeps it.

It checks what the harness relies on: every endpoint of node/contract/openapi.yaml answers with
the status and body the document gives (bodies validated against its schemas), the token guards
every POST and DELETE, errors name their field, a stream's messages reach the peer and are
counted, every event line validates against node/contract/events.schema.json, the lifecycle and
data events the checkers need are there, and a node killed with -9 has written its events up to
at most `KILL_LOSS_S` before the kill.

An implementation is a command that starts one node from a configuration file (the `{config}`
placeholder; JSON, which is YAML too) plus the keys it needs besides the contract's. `run_suite`
returns a `Report`; `splitbrain conformance` prints it (exit 0 when every rule holds, 1 when one
does not, 2 when the nodes cannot be started).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from splitbrain.harness.backends.admin import AdminClient, AdminError
from splitbrain.harness.poll import EventuallyTimeout, eventually
from splitbrain.node.contract import EVENTS_SCHEMA, load_openapi
from splitbrain.node.errors import BadInput
from splitbrain.node.events import expand_runs, is_run, run_problem
from splitbrain.node.protocols import DEFAULT_PROTOCOL

TOKEN = "conformance-token"
KILL_LOSS_S = 0.1  # the contract: a kill -9 loses at most this much of the log
# Scheduling slack on a busy machine between the kill and the last flush it could have made.
KILL_SLACK_S = 0.15
START_TIMEOUT_S = 30.0
DELIVERY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Implementation:
    """How to start one node: `command` with "{config}" for the configuration file's path, and
    the configuration keys it needs besides the contract's (e.g. protocol, its own block)."""

    name: str
    command: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)
    # Where nodes bind their protocol sockets (JGroups' UDP needs an interface address).
    host: str = "127.0.0.1"
    multicast: bool = False  # "*" destinations (one multicast per message) are part of its contract
    prepare: Callable[[], None] | None = None  # e.g. build the classes


def python_node() -> Implementation:
    return Implementation(
        "python",
        (sys.executable, "-m", "splitbrain.node", "--config", "{config}"),
        {"protocol": DEFAULT_PROTOCOL, "transport": "udp"},
    )


def _build_jgroups() -> None:
    from splitbrain.node.jgroups import launch

    launch.ensure_built()


def jgroups_node() -> Implementation:
    from splitbrain.node.jgroups import launch

    group = f"239.{os.getpid() % 200 + 20}.{int(time.time()) % 250}.9:{free_port(socket.SOCK_DGRAM)}"
    return Implementation(
        "jgroups",
        tuple(launch.command("{config}")),
        {"mcast_group": group, "jgroups": {"cluster": f"conformance-{os.getpid()}-{time.time_ns()}"}},
        multicast=True,
        prepare=_build_jgroups,
    )


@dataclass
class Rule:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class Report:
    implementation: str
    rules: list[Rule] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rules)

    @property
    def failures(self) -> list[Rule]:
        return [r for r in self.rules if not r.ok]

    def text(self) -> str:
        lines = [f"conformance of {self.implementation}:"]
        for r in self.rules:
            lines.append(f"  {'ok  ' if r.ok else 'FAIL'} {r.name}" + (f": {r.detail}" if r.detail else ""))
        for key, value in self.measured.items():
            lines.append(f"  measured {key}: {value:.3f}")
        failed = len(self.failures)
        lines.append(f"{len(self.rules) - failed}/{len(self.rules)} rules kept")
        return "\n".join(lines)


class StartError(BadInput, RuntimeError):
    """The nodes did not come up (the message quotes their output)."""


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


# ---- schemas ------------------------------------------------------------------------------------


def _to_json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema 2020-12 ($ref to $defs, nullable, boolean exclusiveMinimum)."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if out.get("exclusiveMinimum") is True:
        out["exclusiveMinimum"] = out.pop("minimum", 0)
    if node.get("nullable"):
        if "type" in out and "$ref" not in out and "allOf" not in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


class Schemas:
    def __init__(self) -> None:
        import jsonschema

        self._jsonschema = jsonschema
        self.openapi = load_openapi()
        self.defs = _to_json_schema(self.openapi["components"]["schemas"])
        self.events = jsonschema.Draft202012Validator(json.loads(EVENTS_SCHEMA.read_text()))

    def response(self, path: str, method: str, status: int) -> dict | None:
        op = self.openapi["paths"].get(path, {}).get(method.lower())
        if op is None:
            return None
        resp = op["responses"].get(str(status))
        if resp is None:
            return None
        if "$ref" in resp:
            resp = self.openapi["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
        schema = (resp.get("content") or {}).get("application/json", {}).get("schema")
        return None if schema is None else _to_json_schema(schema)

    def problems(self, schema: dict, body: Any) -> list[str]:
        validator = self._jsonschema.Draft202012Validator({**schema, "$defs": self.defs})
        return [f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message}" for e in validator.iter_errors(body)][
            :3
        ]


# ---- the nodes ----------------------------------------------------------------------------------


class Pair:
    """Two nodes A and B of one implementation, on loopback, with their logs in `workdir`."""

    def __init__(self, impl: Implementation, workdir: Path):
        self.impl = impl
        self.workdir = workdir
        self.epoch = time.time()
        self.procs: dict[str, subprocess.Popen] = {}
        self.incarnation = {"A": 1, "B": 1}
        self.bind = {n: f"{impl.host}:{free_port(socket.SOCK_DGRAM)}" for n in ("A", "B")}
        self.admin = {n: f"127.0.0.1:{free_port()}" for n in ("A", "B")}
        self.clients = {n: AdminClient(f"http://{self.admin[n]}", TOKEN, node=n) for n in ("A", "B")}

    def url(self, node: str, path: str) -> str:
        return f"http://{self.admin[node]}{path}"

    def events_path(self, node: str) -> Path:
        return self.workdir / f"{node}-inc{self.incarnation[node]}.jsonl"

    def config(self, node: str) -> dict:
        other = "B" if node == "A" else "A"
        cfg = {
            "name": node,
            "bind": self.bind[node],
            "admin": self.admin[node],
            "peers": {other: self.bind[other]},
            "events": str(self.events_path(node)),
            "incarnation": self.incarnation[node],
            "seed": 7,
            "epoch": self.epoch,
            "admin_token": TOKEN,
        }
        cfg.update(copy.deepcopy(self.impl.extra))
        return cfg

    def spawn(self, node: str) -> None:
        # JSON, which YAML readers read too; named .yaml for the nodes that want that suffix.
        path = self.workdir / f"{node}-inc{self.incarnation[node]}.yaml"
        path.write_text(json.dumps(self.config(node), indent=1))
        cmd = [part.replace("{config}", str(path)) for part in self.impl.command]
        log = open(self.workdir / f"{node}.log", "ab")  # noqa: SIM115 - the process owns it
        self.procs[node] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()

    def wait_healthy(self, node: str) -> dict:
        def probe() -> dict | None:
            if self.procs[node].poll() is not None:
                raise StartError(f"node {node} exited with {self.procs[node].returncode}:\n{self.output(node)}")
            try:
                return self.clients[node].exchange("GET", "/health", timeout_s=2).json()
            except (AdminError, ValueError):  # not listening yet, or not answering JSON yet
                return None

        try:
            return eventually(probe, timeout=START_TIMEOUT_S, interval=0.05)
        except EventuallyTimeout:
            raise StartError(
                f"node {node} did not answer /health within {START_TIMEOUT_S:g}s:\n{self.output(node)}"
            ) from None

    def output(self, node: str) -> str:
        path = self.workdir / f"{node}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no output)"

    def kill(self, node: str) -> float:
        proc = self.procs[node]
        t = time.time() - self.epoch
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return t

    def stop(self, node: str) -> int | None:
        proc = self.procs[node]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                return proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                return None
        return proc.returncode

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        for client in self.clients.values():
            client.close()


# ---- the suite ----------------------------------------------------------------------------------


def run_suite(impl: Implementation, workdir: Path | None = None) -> Report:
    """Every rule of the contract against two nodes of `impl`. Raises StartError when they cannot start."""
    if impl.prepare is not None:
        impl.prepare()
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="splitbrain-conformance-")
        workdir = Path(tmp.name)
    report = Report(impl.name)
    schemas = Schemas()
    pair = Pair(impl, workdir)
    try:
        for node in ("A", "B"):
            pair.spawn(node)
        for node in ("A", "B"):
            pair.wait_healthy(node)
        _api_rules(pair, schemas, report)
        _workload_rules(pair, report)
        _stop_and_kill_rules(pair, report)
        _event_rules(pair, schemas, report)
    finally:
        pair.close()
        if tmp is not None:
            tmp.cleanup()
    return report


def _call(pair: Pair, node: str, method: str, path: str, body: Any = None, token: str | None = TOKEN, raw=None):
    return pair.clients[node].exchange(method, path, body, raw=raw, token=token, timeout_s=5)


def _check(report: Report, schemas: Schemas, name: str, resp, status: int, template: str, method: str) -> Any:
    """One rule: the status, and the body against the document's schema for it."""
    if resp.status_code != status:
        report.rules.append(
            Rule(name, False, f"{method} {template}: expected HTTP {status}, got {resp.status_code}: {resp.text[:200]}")
        )
        return None
    schema = schemas.response(template, method, status)
    body: Any = None
    if status != 204 and resp.content:
        try:
            body = resp.json()
        except ValueError:
            if schema is not None:
                report.rules.append(Rule(name, False, f"{method} {template}: body is not JSON: {resp.text[:120]}"))
                return None
            body = resp.text
    problems = [] if schema is None else schemas.problems(schema, body)
    report.rules.append(Rule(name, not problems, f"{method} {template}: " + "; ".join(problems) if problems else ""))
    return body


def _api_rules(pair: Pair, schemas: Schemas, report: Report) -> None:
    s = schemas
    health = _check(report, s, "GET /health", _call(pair, "A", "GET", "/health"), 200, "/health", "GET")
    if isinstance(health, dict):
        ok = health.get("node") == "A" and health.get("incarnation") == 1 and health.get("status") == "ok"
        report.rules.append(Rule("health names the node and its incarnation", ok, "" if ok else f"got {health}"))
    for path in ("/state", "/streams", "/delivered", "/faults", "/config"):
        _check(report, s, f"GET {path}", _call(pair, "A", "GET", path), 200, path, "GET")
    metrics = _call(pair, "A", "GET", "/metrics")
    ok = metrics.status_code == 200 and "text/plain" in metrics.headers.get("Content-Type", "")
    report.rules.append(Rule("GET /metrics", ok, "" if ok else f"expected 200 text/plain, got {metrics.status_code}"))
    # The token guards every mutation; errors are JSON naming their field.
    for method, path, body in (
        ("POST", "/send", {"to": "B", "count": 1}),
        ("POST", "/faults", {}),
        ("DELETE", "/faults", None),
    ):
        for token in (None, "wrong"):
            resp = _call(pair, "A", method, path, body, token=token)
            _check(report, s, f"{method} {path} without a valid token is 401", resp, 401, path, method)
    resp = _call(pair, "A", "POST", "/send", {"count": 1})
    body = _check(report, s, "POST /send without `to` is 400", resp, 400, "/send", "POST")
    _field_rule(report, "the error names the field `to`", body, "to")
    resp = _call(pair, "A", "POST", "/send", raw="{not json")
    _check(report, s, "POST /send with a body that is not JSON is 400", resp, 400, "/send", "POST")
    resp = _call(pair, "A", "POST", "/send", {"to": "B", "count": 1, "colour": "red"})
    body = _check(report, s, "POST /send with an unknown field is 400", resp, 400, "/send", "POST")
    _field_rule(report, "the error names the unknown field", body, "colour")
    resp = _call(pair, "A", "POST", "/send", {"to": "Q", "count": 1})
    body = _check(report, s, "POST /send to an unknown peer is 400", resp, 400, "/send", "POST")
    _field_rule(report, "the error names the field `to` (unknown peer)", body, "to")
    resp = _call(pair, "A", "POST", "/faults", {"p": 2})
    body = _check(report, s, "POST /faults with p=2 is 400", resp, 400, "/faults", "POST")
    _field_rule(report, "the error names the field `p`", body, "p")
    resp = _call(pair, "A", "POST", "/faults", {"direction": "up", "peer": "B", "p": 0.5, "until": 0.0})
    added = _check(report, s, "POST /faults adds a rule", resp, 201, "/faults", "POST")
    if isinstance(added, dict) and "id" in added:
        listed = _call(pair, "A", "GET", "/faults").json().get("rules", {})
        report.rules.append(Rule("GET /faults lists the rule", str(added["id"]) in listed, f"rules: {list(listed)}"))
        _check(report, s, "GET /faults with a rule", _call(pair, "A", "GET", "/faults"), 200, "/faults", "GET")
        resp = _call(pair, "A", "DELETE", f"/faults/{added['id']}")
        _check(report, s, "DELETE /faults/{id}", resp, 204, "/faults/{id}", "DELETE")
    resp = _call(pair, "A", "DELETE", "/faults/987654")
    _check(report, s, "DELETE /faults/{id} of an unknown rule is 404", resp, 404, "/faults/{id}", "DELETE")
    _check(report, s, "DELETE /faults", _call(pair, "A", "DELETE", "/faults"), 204, "/faults", "DELETE")
    resp = _call(pair, "A", "POST", "/leave_on_stop", {"enabled": "yes"})
    _check(report, s, "POST /leave_on_stop with a non-boolean is 400", resp, 400, "/leave_on_stop", "POST")
    resp = _call(pair, "A", "GET", "/no-such-endpoint")
    ok = resp.status_code == 404
    report.rules.append(Rule("an unknown endpoint is 404", ok, "" if ok else f"got {resp.status_code}"))


def _field_rule(report: Report, name: str, body: Any, field_name: str) -> None:
    if body is None:
        return
    got = body.get("field") if isinstance(body, dict) else None
    report.rules.append(Rule(name, got == field_name, "" if got == field_name else f"field is {got!r}"))


def _workload_rules(pair: Pair, report: Report) -> None:
    resp = _call(pair, "A", "POST", "/send", {"to": "B", "count": 50, "rate": 500, "stream": 3})
    started = resp.status_code == 202
    report.rules.append(Rule("POST /send starts a stream (202)", started, "" if started else resp.text[:200]))
    if not started:
        return
    resp = _call(pair, "A", "POST", "/send", {"to": "B", "count": 1, "stream": 3})
    report.rules.append(Rule("a stream id used twice is 409", resp.status_code == 409, f"got {resp.status_code}"))

    def counted() -> dict:
        return _call(pair, "B", "GET", "/delivered").json().get("delivered", {}).get("A", {})

    try:
        got = eventually(
            lambda: (d := counted()) and (d.get("3") or {}).get("count", 0) >= 50 and d,
            timeout=DELIVERY_TIMEOUT_S,
            interval=0.1,
        )
        stream = got["3"]
        ok = stream["count"] == 50 and stream["first"] == 1 and stream["last"] == 50 and stream["duplicates"] == 0
        report.rules.append(Rule("GET /delivered counts the stream at the peer", ok, "" if ok else f"got {stream}"))
    except EventuallyTimeout:
        report.rules.append(Rule("GET /delivered counts the stream at the peer", False, f"got {counted()}"))
    streams = _call(pair, "A", "GET", "/streams").json().get("streams", [])
    mine = [s for s in streams if s.get("stream") == 3]
    ok = bool(mine) and mine[0].get("sent") == 50 and mine[0].get("done") is True
    report.rules.append(Rule("GET /streams says the stream is done", ok, "" if ok else f"got {mine}"))


def _stop_and_kill_rules(pair: Pair, report: Report) -> None:
    # A long stream A -> B, then B is killed -9 while it delivers: its log must reach the kill.
    _call(pair, "A", "POST", "/send", {"to": "B", "rate": 400, "duration": 30, "stream": 4})
    time.sleep(1.5)  # deliveries of the stream run at B for a while (no condition to wait for)
    killed_at = pair.kill("B")
    pair.measured_kill = killed_at  # type: ignore[attr-defined]
    code = pair.stop("A")
    report.rules.append(Rule("SIGTERM stops a node with exit code 0", code == 0, f"exit code {code}"))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []


def _event_rules(pair: Pair, schemas: Schemas, report: Report) -> None:
    events: dict[str, list[dict]] = {}
    for node in ("A", "B"):
        path = pair.events_path(node)
        bad: list[str] = []
        parsed: list[dict] = []
        lines = _lines(path)
        for i, line in enumerate(lines, 1):
            try:
                ev = json.loads(line)
            except ValueError:
                if node == "B" and i == len(lines):
                    continue  # a kill -9 may cut the last line short
                bad.append(f"line {i}: not JSON")
                continue
            errors = list(schemas.events.iter_errors(ev))
            if errors:
                bad.append(
                    f"line {i}: {errors[0].message} (at {'/'.join(map(str, errors[0].absolute_path)) or 'event'})"
                )
            elif is_run(ev) and (problem := run_problem(ev)):
                bad.append(f"line {i}: bad run line: {problem}")  # what JSON Schema cannot say
            parsed.append(ev)
        report.rules.append(
            Rule(
                f"{node}'s event log matches events.schema.json",
                not bad and bool(parsed),
                f"{path.name} " + "; ".join(bad[:3]) if bad else ("" if parsed else f"{path.name} is empty"),
            )
        )
        events[node] = parsed
    # A run line (schema version 2) stands for its messages: count those.
    a, b = expand_runs(events["A"]), expand_runs(events["B"])
    starts = [e for e in a if e.get("kind") == "node_start"]
    ok = bool(starts) and starts[0].get("incarnation") == 1
    report.rules.append(Rule("node_start carries the incarnation", ok, "" if ok else f"got {starts[:1]}"))
    stops = [e for e in a if e.get("kind") == "node_stop"]
    report.rules.append(Rule("a graceful stop writes node_stop", bool(stops), ""))
    sends = [e for e in a if e.get("kind") == "send" and str(e.get("app", "")).startswith("A:3:")]
    ok = len(sends) == 50 and all(e.get("peer") == "B" for e in sends)
    report.rules.append(Rule("every send of a stream is logged with its app id and peer", ok, f"{len(sends)} of 50"))
    delivers = [e for e in b if e.get("kind") == "deliver" and str(e.get("app", "")).startswith("A:3:")]
    ok = len(delivers) == 50 and all(e.get("peer") == "A" for e in delivers)
    report.rules.append(Rule("every delivery is logged with its app id and sender", ok, f"{len(delivers)} of 50"))
    killed_at = getattr(pair, "measured_kill", None)
    last = max((e["t"] for e in b if isinstance(e.get("t"), (int, float))), default=None)
    if killed_at is not None and last is not None:
        gap = killed_at - last
        report.measured["kill -9 gap (s)"] = gap
        ok = gap <= KILL_LOSS_S + KILL_SLACK_S
        report.rules.append(
            Rule(
                f"a kill -9 loses at most {KILL_LOSS_S * 1000:g} ms of events",
                ok,
                f"last event {gap * 1000:.0f} ms before the kill (allowed {KILL_LOSS_S * 1000:g} ms "
                f"+ {KILL_SLACK_S * 1000:g} ms of scheduling)",
            )
        )
    else:
        report.rules.append(Rule("a kill -9 loses at most 100 ms of events", False, "B logged nothing"))
