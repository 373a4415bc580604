"""Toxiproxy conformance: the same suite against our server and, when installed, the real one.

Each test gets a fresh server (`toxiproxy_server`, parametrized "splitbrain" and "real"; the real
one runs only when `toxiproxy-server` is on PATH) and drives it both through the
`toxiproxy-python` client and through raw HTTP, the latter to pin exact JSON shapes, status codes
and error bodies. Toxic effects are measured through a small threaded TCP echo server on
127.0.0.1, with generous time bounds so a loaded 2-core machine does not make them flaky.

Every socket and HTTP call has a timeout; waits use tenacity, never a bare sleep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import socket
import statistics
import subprocess
import threading
import time

import pytest
import requests
import tenacity
import toxiproxy
import toxiproxy.api
from toxiproxy.exceptions import NotFound, ProxyExists

from splitbrain.faults.toxiproxy import ToxiproxyServer

HTTP_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 5.0
LOCALHOST = "127.0.0.1"


# ---- servers --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Endpoint:
    kind: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def eventually(check, timeout_s: float = 5.0, what: str = "condition"):
    """Retry `check` (which asserts) until it passes or `timeout_s` passes; re-raise the last failure."""
    for attempt in tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(0.02),
        retry=tenacity.retry_if_exception_type((AssertionError, OSError, requests.RequestException)),
        reraise=True,
    ):
        with attempt:
            return check()
    raise AssertionError(f"{what} did not happen within {timeout_s} s")  # pragma: no cover


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def real_toxiproxy(binary: str):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-host", LOCALHOST, "-port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        endpoint = Endpoint("real", LOCALHOST, port)

        def up():
            assert proc.poll() is None, f"toxiproxy-server exited with {proc.returncode}"
            requests.get(endpoint.url + "/version", timeout=1).raise_for_status()

        eventually(up, timeout_s=10, what="toxiproxy-server answering /version")
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(params=["splitbrain", "real"])
def toxiproxy_server(request):
    """A fresh Toxiproxy API: ours (in a thread) or a real toxiproxy-server process."""
    if request.param == "real":
        binary = shutil.which("toxiproxy-server")
        if binary is None:
            pytest.skip("no toxiproxy-server on PATH")
        with real_toxiproxy(binary) as endpoint:
            yield endpoint
    else:
        with ToxiproxyServer.running(LOCALHOST, 0, seed=1) as tp:
            yield Endpoint("splitbrain", tp.host, tp.port)


class _RequestsWithTimeout:
    """Stands in for `requests` inside toxiproxy-python, which sets no timeout of its own."""

    @staticmethod
    def get(url, **kwargs):
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        return requests.get(url, **kwargs)

    @staticmethod
    def post(url, **kwargs):
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        return requests.post(url, **kwargs)

    @staticmethod
    def delete(url, **kwargs):
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        return requests.delete(url, **kwargs)


@pytest.fixture
def client(toxiproxy_server, monkeypatch):
    """A toxiproxy-python client pointed at this test's server (its host/port are class globals)."""
    monkeypatch.setattr(toxiproxy.api.APIConsumer, "host", toxiproxy_server.host)
    monkeypatch.setattr(toxiproxy.api.APIConsumer, "port", toxiproxy_server.port)
    monkeypatch.setattr(toxiproxy.api, "requests", _RequestsWithTimeout)
    return toxiproxy.Toxiproxy()


class Api:
    """Raw HTTP to the server, for exact shapes."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.url = endpoint.url

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=HTTP_TIMEOUT_S)

    def post(self, path: str, body=None, *, raw: bytes | None = None) -> requests.Response:
        if raw is not None:
            return requests.post(self.url + path, data=raw, timeout=HTTP_TIMEOUT_S)
        return requests.post(self.url + path, json=body, timeout=HTTP_TIMEOUT_S)

    def delete(self, path: str) -> requests.Response:
        return requests.delete(self.url + path, timeout=HTTP_TIMEOUT_S)

    def create_proxy(self, name: str, upstream: str, listen: str = f"{LOCALHOST}:0", **extra) -> dict:
        r = self.post("/proxies", {"name": name, "listen": listen, "upstream": upstream, **extra})
        assert r.status_code == 201, r.text
        return r.json()

    def add_toxic(self, proxy: str, **toxic) -> dict:
        r = self.post(f"/proxies/{proxy}/toxics", toxic)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def api(toxiproxy_server) -> Api:
    return Api(toxiproxy_server)


# ---- the upstream: a TCP echo server ----------------------------------------------------------


class EchoServer:
    """Echoes every byte back on each connection; one thread per connection; all closed at stop."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind((LOCALHOST, 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.address = f"{LOCALHOST}:{self.listener.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="echo-accept", daemon=True)
        self._accept_thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(SOCKET_TIMEOUT_S * 4)
            thread = threading.Thread(target=self._serve, args=(conn,), name="echo-conn", daemon=True)
            with self._lock:
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while not self._stopping.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)
        except OSError:
            return
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() at once on Linux
        self.listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._accept_thread.join(timeout=5)
        for thread in threads:
            thread.join(timeout=5)


@pytest.fixture
def echo():
    server = EchoServer()
    try:
        yield server
    finally:
        server.stop()


# ---- client-side socket helpers ---------------------------------------------------------------


def split_addr(listen: str) -> tuple[str, int]:
    host, port = listen.rsplit(":", 1)
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def connect(listen: str):
    sock = socket.create_connection(split_addr(listen), timeout=SOCKET_TIMEOUT_S)
    try:
        yield sock
    finally:
        sock.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += data
    return buf


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> float:
    """Send `payload`, read its echo, return the seconds it took."""
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def read_until_closed(sock: socket.socket, timeout_s: float = SOCKET_TIMEOUT_S) -> tuple[bytes, str]:
    """Everything until the peer closes: (data, "eof" | "reset"); a timeout fails the test."""
    sock.settimeout(timeout_s)
    buf = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return buf, "eof"
            buf += data
    except ConnectionResetError:
        return buf, "reset"
    except TimeoutError:
        raise AssertionError(f"connection still open after {timeout_s} s ({len(buf)} bytes read)") from None


def assert_refused(listen: str) -> None:
    with pytest.raises(ConnectionRefusedError):
        with connect(listen):
            pass


# ---- REST API shapes --------------------------------------------------------------------------


def test_version(api):
    """GET /version answers 200 with the version as JSON."""
    r = api.get("/version")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    assert isinstance(r.json()["version"], str) and r.json()["version"]


def test_proxy_create_show_list_delete_shapes(api, echo):
    """Proxy CRUD: 201 with the resolved listen address, listing keyed by name, 204 on delete, 404 after."""
    r = api.post("/proxies", {"name": "web", "listen": f"{LOCALHOST}:0", "upstream": echo.address})
    assert r.status_code == 201
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    host, port = split_addr(body["listen"])
    assert host == LOCALHOST and port != 0
    assert r.text == json.dumps(
        {"name": "web", "listen": body["listen"], "upstream": echo.address, "enabled": True, "toxics": []},
        separators=(",", ":"),
    )
    second = api.create_proxy("api", echo.address)

    r = api.get("/proxies")
    assert r.status_code == 200
    assert list(r.json()) == ["api", "web"]
    assert r.json()["web"] == body and r.json()["api"] == second

    r = api.get("/proxies/web")
    assert r.status_code == 200 and r.json() == body

    with connect(body["listen"]) as sock:
        roundtrip(sock)

    r = api.delete("/proxies/web")
    assert r.status_code == 204 and r.text == ""
    r = api.get("/proxies/web")
    assert r.status_code == 404
    assert r.json() == {"error": "proxy not found", "status": 404}
    assert r.text.endswith("\n")
    assert api.delete("/proxies/web").status_code == 404
    eventually(lambda: assert_refused(body["listen"]), what="deleted proxy's port closed")
    assert list(api.get("/proxies").json()) == ["api"]


def test_proxy_create_errors(api, echo):
    """409 on a duplicate name; 400 with Toxiproxy's messages on missing fields and bad JSON."""
    api.create_proxy("dup", echo.address)
    r = api.post("/proxies", {"name": "dup", "listen": f"{LOCALHOST}:0", "upstream": echo.address})
    assert (r.status_code, r.json()) == (409, {"error": "proxy already exists", "status": 409})

    r = api.post("/proxies", {"listen": f"{LOCALHOST}:0", "upstream": echo.address})
    assert (r.status_code, r.json()) == (400, {"error": "missing required field: name", "status": 400})

    r = api.post("/proxies", {"name": "x", "listen": f"{LOCALHOST}:0"})
    assert (r.status_code, r.json()) == (400, {"error": "missing required field: upstream", "status": 400})

    r = api.post("/proxies", raw=b"{not json")
    assert r.status_code == 400
    assert r.json()["status"] == 400 and r.json()["error"].startswith("bad request body: ")

    r = api.post("/proxies", {"name": 5, "upstream": echo.address})
    assert r.status_code == 400 and r.json()["error"].startswith("bad request body: json: cannot unmarshal number")


def test_unknown_routes(api):
    """Unknown paths are 404 "404 page not found"; a known path with another method is 405."""
    r = api.get("/nothing-here")
    assert (r.status_code, r.text) == (404, "404 page not found\n")
    r = requests.put(api.url + "/proxies", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 405
    r = api.get("/proxies/none/toxics")
    assert (r.status_code, r.json()) == (404, {"error": "proxy not found", "status": 404})


def test_disabled_proxy_create_and_enable(api, echo):
    """A proxy created disabled keeps its listen string and does not listen until enabled."""
    port = free_port()
    listen = f"{LOCALHOST}:{port}"
    body = api.create_proxy("later", echo.address, listen=listen, enabled=False)
    assert body["enabled"] is False and body["listen"] == listen
    assert_refused(listen)
    r = api.post("/proxies/later", {"enabled": True})
    assert r.status_code == 200 and r.json()["enabled"] is True and r.json()["listen"] == listen
    with connect(listen) as sock:
        roundtrip(sock)


def test_proxy_update_upstream(api, echo):
    """POST /proxies/{p} changes the upstream; new connections go to the new one."""
    body = api.create_proxy("moving", echo.address)
    dead = f"{LOCALHOST}:{free_port()}"
    r = api.post("/proxies/moving", {"upstream": dead})
    assert r.status_code == 200
    assert r.json() == {**body, "upstream": dead}
    with connect(body["listen"]) as sock:
        sock.sendall(b"x")
        data, _how = read_until_closed(sock)
        assert data == b""  # the upstream refused, so the proxy closed the client
    r = api.post("/proxies/moving", {"upstream": echo.address})
    assert r.json()["upstream"] == echo.address
    with connect(r.json()["listen"]) as sock:
        roundtrip(sock)
    r = api.post("/proxies/nope", {"enabled": False})
    assert (r.status_code, r.json()) == (404, {"error": "proxy not found", "status": 404})


def test_populate_creates_keeps_and_replaces(api, echo):
    """POST /populate: 201 with {"proxies": [...]}; an identical entry is kept, a changed one replaced."""
    r = api.post(
        "/populate",
        [
            {"name": "one", "listen": f"{LOCALHOST}:0", "upstream": echo.address},
            {"name": "two", "listen": f"{LOCALHOST}:0", "upstream": echo.address, "enabled": False},
        ],
    )
    assert r.status_code == 201, r.text
    proxies = r.json()["proxies"]
    assert [p["name"] for p in proxies] == ["one", "two"]
    assert [p["enabled"] for p in proxies] == [True, False]
    one = proxies[0]

    api.add_toxic("one", type="latency", attributes={"latency": 1})
    r = api.post("/populate", [{"name": "one", "listen": one["listen"], "upstream": echo.address}])
    assert r.status_code == 201
    kept = r.json()["proxies"][0]
    assert kept["listen"] == one["listen"] and len(kept["toxics"]) == 1  # untouched, toxic and all

    other = f"{LOCALHOST}:{free_port()}"
    r = api.post("/populate", [{"name": "one", "listen": one["listen"], "upstream": other}])
    assert r.status_code == 201
    replaced = r.json()["proxies"][0]
    assert replaced["upstream"] == other and replaced["toxics"] == []
    assert sorted(api.get("/proxies").json()) == ["one", "two"]

    r = api.post("/populate", [{"listen": f"{LOCALHOST}:0", "upstream": echo.address}])
    assert r.status_code == 400
    assert r.json() == {"error": "missing required field: name at proxy 1", "status": 400, "proxies": None}
    r = api.post("/populate", [{"name": "three", "upstream": echo.address}, {"name": "four"}])
    assert r.json() == {"error": "missing required field: upstream at proxy 2", "status": 400, "proxies": None}
    assert "three" not in api.get("/proxies").json()  # nothing applied when validation fails


def test_reset_enables_proxies_and_removes_toxics(api, echo):
    """POST /reset: 204; every proxy enabled again, every toxic gone."""
    body = api.create_proxy("r", echo.address)
    api.add_toxic("r", type="latency", attributes={"latency": 1000})
    api.add_toxic("r", type="bandwidth", stream="upstream", attributes={"rate": 1})
    assert api.post("/proxies/r", {"enabled": False}).json()["enabled"] is False
    r = api.post("/reset")
    assert r.status_code == 204 and r.text == ""
    after = api.get("/proxies/r").json()
    assert after == {**body, "enabled": True, "toxics": []}
    with connect(body["listen"]) as sock:
        assert roundtrip(sock) < 0.9


def test_toxic_crud_shapes(api, echo):
    """Toxic create (200), show, list, update and delete (204), with Toxiproxy's JSON."""
    api.create_proxy("t", echo.address)
    r = api.post("/proxies/t/toxics", {"type": "latency", "attributes": {"latency": 100}})
    assert r.status_code == 200
    assert r.text == (
        '{"attributes":{"latency":100,"jitter":0},"name":"latency_downstream",'
        '"type":"latency","stream":"downstream","toxicity":1}'
    )
    up = api.add_toxic("t", name="cut", type="limit_data", stream="upstream", toxicity=0.5, attributes={"bytes": 10})
    assert up == {
        "attributes": {"bytes": 10},
        "name": "cut",
        "type": "limit_data",
        "stream": "upstream",
        "toxicity": 0.5,
    }

    r = api.get("/proxies/t/toxics")
    assert r.status_code == 200
    assert [t["name"] for t in r.json()] == ["cut", "latency_downstream"]  # upstream chain first
    assert api.get("/proxies/t").json()["toxics"] == r.json()
    assert api.get("/proxies/t/toxics/cut").json() == up

    r = api.post("/proxies/t/toxics/latency_downstream", {"attributes": {"jitter": 5}})
    assert r.status_code == 200
    assert r.json()["attributes"] == {"latency": 100, "jitter": 5}
    r = api.post("/proxies/t/toxics/latency_downstream", {"toxicity": 0.25})
    assert r.json()["toxicity"] == 0.25 and r.json()["attributes"] == {"latency": 100, "jitter": 5}

    r = api.delete("/proxies/t/toxics/cut")
    assert r.status_code == 204 and r.text == ""
    r = api.get("/proxies/t/toxics/cut")
    assert (r.status_code, r.json()) == (404, {"error": "toxic not found", "status": 404})
    assert api.delete("/proxies/t/toxics/cut").status_code == 404
    assert api.post("/proxies/t/toxics/cut", {"toxicity": 1}).status_code == 404


def test_toxic_errors(api, echo):
    """Bad toxic requests: unknown type, bad stream, duplicate name, wrong attribute type, no proxy."""
    api.create_proxy("e", echo.address)
    r = api.post("/proxies/e/toxics", {"type": "sparkles"})
    assert (r.status_code, r.json()) == (400, {"error": "invalid toxic type", "status": 400})
    r = api.post("/proxies/e/toxics", {"type": "latency", "stream": "sideways"})
    assert (r.status_code, r.json()) == (
        400,
        {"error": "stream was invalid, can be either upstream or downstream", "status": 400},
    )
    api.add_toxic("e", type="timeout", attributes={"timeout": 10})
    r = api.post("/proxies/e/toxics", {"type": "timeout"})
    assert (r.status_code, r.json()) == (409, {"error": "toxic already exists", "status": 409})
    r = api.post("/proxies/e/toxics", {"type": "latency", "attributes": {"latency": "slow"}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error.startswith("bad request body: json: cannot unmarshal string into Go struct field")
    assert error.endswith("of type int64")
    r = api.post("/proxies/missing/toxics", {"type": "latency"})
    assert (r.status_code, r.json()) == (404, {"error": "proxy not found", "status": 404})


# ---- the toxiproxy-python client --------------------------------------------------------------


def test_client_proxy_lifecycle(client, echo):
    """toxiproxy-python: running, version, create, proxies, get_proxy, populate, destroy, destroy_all."""
    assert client.running()
    assert client.version()
    proxy = client.create(upstream=echo.address, name="py")
    assert proxy.enabled is True and split_addr(proxy.listen)[1] != 0
    with pytest.raises(ProxyExists):
        client.create(upstream=echo.address, name="py")
    assert set(client.proxies()) == {"py"}
    assert client.get_proxy("py").listen == proxy.listen
    assert client.get_proxy("nope") is None
    with connect(proxy.listen) as sock:
        roundtrip(sock)

    created = client.populate([{"name": "pop", "upstream": echo.address, "listen": f"{LOCALHOST}:0"}])
    assert [p.name for p in created] == ["pop"]
    assert set(client.proxies()) == {"py", "pop"}

    assert proxy.destroy() is True
    assert set(client.proxies()) == {"pop"}
    with pytest.raises(NotFound):
        proxy.toxics()
    client.destroy_all()
    assert client.proxies() == {}


def test_client_toxics(client, echo):
    """toxiproxy-python toxics: defaults name/stream/toxicity, listing, destroy; reset clears them."""
    proxy = client.create(upstream=echo.address, name="tox")
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    proxy.add_toxic(
        type="slicer",
        stream="upstream",
        name="slices",
        toxicity=0.5,
        attributes={"average_size": 8, "size_variation": 2, "delay": 10},
    )
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "slices"}
    lat = toxics["latency_downstream"]
    assert (lat.type, lat.stream, lat.toxicity, lat.attributes) == (
        "latency",
        "downstream",
        1,
        {"latency": 5, "jitter": 0},
    )
    assert toxics["slices"].attributes == {"average_size": 8, "size_variation": 2, "delay": 10}
    assert proxy.get_toxic("slices").toxicity == 0.5
    assert proxy.destroy_toxic("slices") is True
    assert set(proxy.toxics()) == {"latency_downstream"}
    assert client.reset() is True
    assert proxy.toxics() == {}


def test_disable_closes_connections_and_enable_listens_again(client, echo):
    """Disabling a proxy closes its connections and its port; enabling listens on the same address."""
    proxy = client.create(upstream=echo.address, name="flappy")
    with connect(proxy.listen) as sock:
        roundtrip(sock)
        proxy.disable()
        assert client.get_proxy("flappy").enabled is False
        data, _how = read_until_closed(sock)
        assert data == b""
    assert_refused(proxy.listen)
    proxy.enable()
    assert client.get_proxy("flappy").listen == proxy.listen
    with connect(proxy.listen) as sock:
        roundtrip(sock)
    with proxy.down():
        assert_refused(proxy.listen)
    with connect(proxy.listen) as sock:
        roundtrip(sock)


# ---- toxic effects ----------------------------------------------------------------------------


def test_latency_on_a_live_connection(client, echo):
    """latency delays each direction by at least its value, on connections already open; update and
    removal act on them too."""
    proxy = client.create(upstream=echo.address, name="slow")
    with connect(proxy.listen) as sock:
        assert roundtrip(sock) < 0.25
        proxy.add_toxic(type="latency", attributes={"latency": 300})
        assert 0.29 <= roundtrip(sock) < 3
        proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 200})
        assert 0.49 <= roundtrip(sock) < 3  # latencies on both streams add up
        proxy.destroy_toxic("latency_upstream")
        requests.post(
            f"http://{toxiproxy.api.APIConsumer.host}:{toxiproxy.api.APIConsumer.port}"
            "/proxies/slow/toxics/latency_downstream",
            json={"attributes": {"latency": 100, "jitter": 20}},
            timeout=HTTP_TIMEOUT_S,
        ).raise_for_status()
        assert 0.079 <= roundtrip(sock) < 2.5
        proxy.destroy_toxic("latency_downstream")
        assert roundtrip(sock) < 0.25


def test_toxicity_zero_never_applies(client, echo):
    """A toxic with toxicity 0 affects no connection."""
    proxy = client.create(upstream=echo.address, name="lucky")
    # A minute of latency: applied, it would time the socket out; busy cores delay only seconds.
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 60_000})
    proxy.add_toxic(type="timeout", stream="upstream", toxicity=0, attributes={"timeout": 1})
    for _ in range(3):
        with connect(proxy.listen) as sock:
            assert roundtrip(sock) < SOCKET_TIMEOUT_S


def test_bandwidth_limits_throughput(client, echo):
    """bandwidth (KB/s) caps how fast the downstream delivers."""
    proxy = client.create(upstream=echo.address, name="thin")
    payload = bytes(range(256)) * 240  # 61,440 bytes
    with connect(proxy.listen) as sock:
        assert roundtrip(sock, payload) < 0.4
        proxy.add_toxic(type="bandwidth", attributes={"rate": 100})  # 100 KB/s: about 0.61 s
        elapsed = roundtrip(sock, payload)
        assert 0.4 <= elapsed < 5, elapsed


def test_slicer_splits_data_into_small_writes(client, echo):
    """slicer delivers a write as many small pieces, each at most average_size + size_variation."""
    proxy = client.create(upstream=echo.address, name="sliced")
    proxy.add_toxic(type="slicer", attributes={"average_size": 10, "size_variation": 5, "delay": 2000})
    payload = bytes(range(200)) * 3
    with connect(proxy.listen) as sock:
        sock.sendall(payload)
        sizes, buf = [], b""
        while len(buf) < len(payload):
            data = sock.recv(4096)
            assert data, "closed early"
            sizes.append(len(data))
            buf += data
    assert buf == payload
    assert len(sizes) >= 10, sizes
    assert statistics.median(sizes) <= 30, sizes


def test_limit_data_closes_after_n_bytes(client, echo):
    """limit_data lets exactly `bytes` through, then closes the connection."""
    proxy = client.create(upstream=echo.address, name="capped")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 100})
    payload = bytes(range(150)) * 2
    with connect(proxy.listen) as sock:
        sock.sendall(payload)
        data, _how = read_until_closed(sock)
    assert data == payload[:100]


def test_reset_peer_resets_the_connection(client, echo):
    """reset_peer: after `timeout` ms from the first data the client gets a TCP RST."""
    proxy = client.create(upstream=echo.address, name="rst")
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 200})
    with connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"reset toxic payload\n")
        data, how = read_until_closed(sock)
        elapsed = time.monotonic() - start
    assert (data, how) == (b"", "reset")
    assert 0.19 <= elapsed < 3, elapsed


def test_timeout_stalls_then_closes(client, echo):
    """timeout drops all data and closes the connection after `timeout` ms."""
    proxy = client.create(upstream=echo.address, name="stall")
    with connect(proxy.listen) as sock:
        proxy.add_toxic(type="timeout", attributes={"timeout": 300})
        start = time.monotonic()
        sock.sendall(b"anyone?")
        data, _how = read_until_closed(sock)
        elapsed = time.monotonic() - start
    assert data == b""
    assert 0.25 <= elapsed < 3, elapsed


def test_timeout_zero_stalls_until_removed_then_closes(client, echo):
    """timeout 0 never closes by itself: data stalls; removing the toxic closes the connection."""
    proxy = client.create(upstream=echo.address, name="forever")
    with connect(proxy.listen) as sock:
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        sock.sendall(b"hello?")
        sock.settimeout(0.5)
        with pytest.raises((TimeoutError, socket.timeout)):
            sock.recv(100)
        proxy.destroy_toxic("timeout_downstream")
        data, _how = read_until_closed(sock)
    assert data == b""


def test_slow_close_delays_the_close(client, echo):
    """slow_close keeps the client's side open for `delay` ms after the upstream closed."""
    proxy = client.create(upstream=echo.address, name="lingering")
    proxy.add_toxic(type="slow_close", attributes={"delay": 300})
    with connect(proxy.listen) as sock:
        roundtrip(sock)
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        data, _how = read_until_closed(sock)
        elapsed = time.monotonic() - start
    assert data == b""
    assert 0.29 <= elapsed < 3, elapsed
