"""A small client of a node's admin API (JSON over HTTP), the only way the harness talks to a node.

Read endpoints are open; POST and DELETE carry the cluster's token in X-Splitbrain-Token. Every
call has a timeout, so a node that hangs (or was paused behind the harness's back) surfaces as an
`AdminError` naming the node, the request and what came back, never as a stuck run.
"""

from __future__ import annotations

from typing import Any

import requests

from splitbrain.node.errors import RunFailed
from splitbrain.node.runtime.config import TOKEN_HEADER


class AdminError(RunFailed, RuntimeError):
    """An admin request failed: connection error, timeout or an unexpected status."""

    def __init__(self, node: str, method: str, path: str, message: str, status: int | None = None):
        self.node = node
        self.method = method
        self.path = path
        self.status = status
        super().__init__(f"node {node}: {method} {path}: {message}")


class AdminClient:
    def __init__(self, base_url: str, token: str | None, *, timeout_s: float = 5.0, node: str = "?"):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.node = node
        self._session = requests.Session()
        # Loopback and cluster-internal: never go through a proxy from the environment.
        self._session.trust_env = False

    def close(self) -> None:
        self._session.close()

    # ---- plumbing -----------------------------------------------------------------------------

    def exchange(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: str | bytes | None = None,
        token: str | bool | None = True,
        timeout_s: float | None = None,
    ) -> requests.Response:
        """One round trip, whatever the status (the conformance suite checks statuses itself).
        `token` True sends the client's token on writes; a string sends that token on any method;
        None sends none. `raw` is a body sent as it is, as JSON. A connection error or a timeout
        raises AdminError."""
        headers = {}
        given = (self.token if method in ("POST", "DELETE", "PUT") else None) if token is True else token
        if given:
            headers[TOKEN_HEADER] = given
        if raw is not None:
            headers["Content-Type"] = "application/json"
        timeout = timeout_s or self.timeout_s
        try:
            return self._session.request(
                method,
                self.base_url + path,
                json=body if raw is None else None,
                data=raw,
                headers=headers,
                timeout=timeout,
            )
        except requests.Timeout:
            raise AdminError(self.node, method, path, f"no answer within {timeout:g}s") from None
        except requests.ConnectionError as exc:
            raise AdminError(self.node, method, path, f"cannot connect to {self.base_url} ({_short(exc)})") from None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        expect: tuple[int, ...] = (200,),
        timeout_s: float | None = None,
    ) -> Any:
        """The decoded JSON body (text when not JSON, None when empty); AdminError on any other status."""
        resp = self.exchange(method, path, body, timeout_s=timeout_s)
        if resp.status_code not in expect:
            raise AdminError(
                self.node, method, path, f"HTTP {resp.status_code}: {resp.text.strip()[:300]}", resp.status_code
            )
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, path: str, **kw) -> Any:
        return self.request("GET", path, **kw)

    # ---- endpoints ----------------------------------------------------------------------------

    def health(self, timeout_s: float | None = None) -> dict:
        return self.get("/health", timeout_s=timeout_s)

    def state(self) -> dict:
        return self.get("/state")

    def streams(self) -> list[dict]:
        return self.get("/streams").get("streams", [])

    def delivered(self) -> dict:
        return self.get("/delivered")

    def metrics(self) -> str:
        return self.get("/metrics")

    def send(
        self,
        to: str | list[str],
        *,
        rate: float,
        count: int | None = None,
        duration: float | None = None,
        size: int = 100,
        stream: int | None = None,
        first_n: int = 1,
    ) -> dict:
        body: dict[str, Any] = {"to": to, "rate": rate, "size": size}
        if count is not None:
            body["count"] = count
        if duration is not None:
            body["duration"] = duration
        if stream is not None:
            body["stream"] = stream
        if first_n != 1:
            body["first_n"] = first_n
        return self.request("POST", "/send", body, expect=(200, 201, 202))

    def add_fault(self, rule: dict) -> int:
        reply = self.request("POST", "/faults", rule, expect=(200, 201))
        return reply["id"]

    def remove_fault(self, rule_id: int) -> None:
        self.request("DELETE", f"/faults/{rule_id}", expect=(200, 204))

    def clear_faults(self) -> None:
        self.request("DELETE", "/faults", expect=(200, 204))

    def faults(self) -> Any:
        return self.get("/faults")

    def view(self, members: list[str], view_id: int | None = None) -> Any:
        body: dict[str, Any] = {"members": list(members)}
        if view_id is not None:
            body["view_id"] = view_id
        return self.request("POST", "/view", body, expect=(200, 201, 202, 204))

    def leave_on_stop(self, enabled: bool) -> Any:
        """Whether the node's graceful stop leaves the group (membership gms)."""
        return self.request("POST", "/leave_on_stop", {"enabled": enabled})

    def sync(self, peer: str) -> Any:
        return self.request("POST", f"/sync/{peer}", expect=(200, 201, 202, 204))

    def set_config(self, values: dict) -> Any:
        return self.request("POST", "/config", values, expect=(200, 201, 202, 204))


def _short(exc: Exception) -> str:
    text = str(exc)
    # urllib3 wraps the cause in long reprs; the errno text at the end is what helps.
    for marker in ("Connection refused", "Name or service not known", "timed out", "reset by peer"):
        if marker in text:
            return marker
    return text[-160:]
