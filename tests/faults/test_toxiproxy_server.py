"""splitbrain's Toxiproxy-compatible server itself: in-process and CLI use, Go-JSON details,
slicing, data integrity while toxics change under live traffic, and cleanup.

What every Toxiproxy must do is in test_toxiproxy_conformance.py; this file covers what only our
server has (how it starts, its internals) and what the conformance suite cannot assume of a real
server (/metrics without flags, error text of Go's net package).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest
import requests

from splitbrain.faults.toxiproxy import ToxiproxyServer, gojson
from splitbrain.faults.toxiproxy.__main__ import parse_args
from splitbrain.faults.toxiproxy.proxy import float32_shortest
from splitbrain.faults.toxiproxy.toxics import slice_offsets
from splitbrain.node.runtime.testing import wait_until
from tests.faults.test_toxiproxy_conformance import (
    HTTP_TIMEOUT_S,
    LOCALHOST,
    Api,
    Endpoint,
    assert_refused,
    connect,
    echo,  # noqa: F401 - fixture
    eventually,
    free_port,
    read_until_closed,
    recv_exactly,
    roundtrip,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ours():
    """Our server on a thread, with the handle (for `call`) and a raw-HTTP Api."""
    with ToxiproxyServer.running(LOCALHOST, 0, seed=7) as tp:
        yield tp, Api(Endpoint("splitbrain", tp.host, tp.port))


# ---- starting it ------------------------------------------------------------------------------


async def _echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.mark.asyncio
async def test_in_process_start_stop():
    """`await start()` / `await stop()` on the caller's loop: API answers, proxy works, stop closes all."""
    upstream = await asyncio.start_server(_echo_handler, LOCALHOST, 0)
    up_port = upstream.sockets[0].getsockname()[1]
    server = ToxiproxyServer(LOCALHOST, 0)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    try:
        await server.start()
        assert server.port != 0
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.get(server.url + "/version") as r:
                assert r.status == 200 and (await r.json(content_type=None))["version"]
            body = {"name": "inproc", "listen": f"{LOCALHOST}:0", "upstream": f"{LOCALHOST}:{up_port}"}
            async with http.post(server.url + "/proxies", json=body) as r:
                assert r.status == 201
                listen = (await r.json())["listen"]
        host, port = listen.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        try:
            writer.write(b"hello")
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
            await server.stop()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # stop closed the connection
        finally:
            writer.close()
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("toxiproxy")]
        for task in leftovers:  # cancelled tasks finish on the next loop iterations
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
    finally:
        await server.stop()
        upstream.close()
        await upstream.wait_closed()


def test_cli_starts_answers_and_stops_on_sigterm():
    """`python -m splitbrain.faults.toxiproxy --port 0` prints where it listens and exits 0 on SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "splitbrain.faults.toxiproxy", "--host", LOCALHOST, "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        line = lines.get(timeout=15)
        assert "listening on" in line, line
        port = int(line.rsplit(":", 1)[1])
        r = requests.get(f"http://{LOCALHOST}:{port}/version", timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200 and r.json()["version"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        proc.stdout.close()
        reader.join(timeout=5)


def test_cli_accepts_toxiproxy_server_flags():
    """The real binary's Go-style flags (-host, -port=, -config) parse too."""
    args = parse_args(["-host", "0.0.0.0", "-port=9000", "-config", "proxies.json", "-proxy-metrics"])
    assert (args.host, args.port, args.config, args.proxy_metrics) == ("0.0.0.0", 9000, "proxies.json", True)
    assert parse_args([]).host == "localhost" and parse_args([]).port == 8474


def test_config_file_populates_at_start(tmp_path, echo):  # noqa: F811
    """A -config file's proxies exist as soon as the server has started."""
    config = tmp_path / "toxiproxy.json"
    config.write_text(f'[{{"name": "cfg", "listen": "{LOCALHOST}:0", "upstream": "{echo.address}"}}]')
    with ToxiproxyServer.running(LOCALHOST, 0, config=str(config)) as tp:
        proxy = requests.get(tp.url + "/proxies/cfg", timeout=HTTP_TIMEOUT_S).json()
        assert proxy["enabled"] is True
        with connect(proxy["listen"]) as sock:
            roundtrip(sock)


# ---- Go's JSON and addresses ------------------------------------------------------------------


def test_go_json_decoding_rules():
    """First value only, case-insensitive names, null keeps defaults, no floats into ints."""
    assert gojson.loads_first(b'{"a": 1} trailing garbage') == {"a": 1}
    with pytest.raises(gojson.GoJSONError, match="^EOF$"):
        gojson.loads_first(b"  ")
    fields = {"name": "string", "enabled": "bool", "rate": "int64", "toxicity": "float32"}
    out = gojson.decode_struct(
        {"NAME": "x", "enabled": None, "rate": 5, "toxicity": 1}, fields, {"enabled": True}, "T", "pkg.T"
    )
    assert out == {"name": "x", "enabled": True, "rate": 5, "toxicity": 1.0}
    with pytest.raises(
        gojson.GoJSONError, match="cannot unmarshal number 1.5 into Go struct field T.rate of type int64"
    ):
        gojson.decode_struct({"rate": 1.5}, fields, {}, "T", "pkg.T")
    with pytest.raises(gojson.GoJSONError, match="cannot unmarshal array into Go value of type pkg.T"):
        gojson.decode_struct([], fields, {}, "T", "pkg.T")


def test_go_json_encoding_rules():
    """Compact, Go's HTML escaping, integral floats as integers, float32's shortest digits."""
    assert gojson.dumps({"b": 1.0, "a": "<&>", "c": [0.5]}) == '{"b":1,"a":"\\u003c\\u0026\\u003e","c":[0.5]}'
    assert float32_shortest(1 / 3) == 0.33333334
    assert float32_shortest(0.1) == 0.1


def test_listen_on_a_host_name_reports_the_address(ours, echo):  # noqa: F811
    """listen "localhost:0" is reported as the address actually bound, as Go's listener reports it."""
    _tp, api = ours
    body = api.create_proxy("named", echo.address, listen="localhost:0")
    host, port = body["listen"].rsplit(":", 1)
    assert host == LOCALHOST and int(port) > 0


def test_port_in_use_is_a_500_with_go_wording(ours, echo):  # noqa: F811
    """A listen address in use: 500 and Go's net error text; populate returns what it made before."""
    _tp, api = ours
    taken = socket.socket()
    taken.bind((LOCALHOST, 0))
    taken.listen(1)
    try:
        listen = f"{LOCALHOST}:{taken.getsockname()[1]}"
        r = api.post("/proxies", {"name": "clash", "listen": listen, "upstream": echo.address})
        assert r.status_code == 500
        assert r.json() == {"error": f"listen tcp {listen}: bind: address already in use", "status": 500}
        r = api.post(
            "/populate",
            [
                {"name": "fine", "listen": f"{LOCALHOST}:0", "upstream": echo.address},
                {"name": "clash", "listen": listen, "upstream": echo.address},
            ],
        )
        assert r.status_code == 500
        assert r.json()["error"] == f"listen tcp {listen}: bind: address already in use"
        assert [p["name"] for p in r.json()["proxies"]] == ["fine"]
    finally:
        taken.close()


def test_browsers_are_refused_and_patch_updates(ours, echo):  # noqa: F811
    """A Mozilla user agent gets 403 (as in Toxiproxy); PATCH updates like POST."""
    _tp, api = ours
    r = requests.get(api.url + "/proxies", headers={"User-Agent": "Mozilla/5.0"}, timeout=HTTP_TIMEOUT_S)
    assert (r.status_code, r.text) == (403, "User agent not allowed\n")
    api.create_proxy("p", echo.address)
    r = requests.patch(api.url + "/proxies/p", json={"enabled": False}, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200 and r.json()["enabled"] is False


def test_metrics_count_bytes_per_direction(ours, echo):  # noqa: F811
    """/metrics: Toxiproxy's received/sent byte counters, labelled by direction and proxy."""
    _tp, api = ours
    body = api.create_proxy("m", echo.address)
    with connect(body["listen"]) as sock:
        roundtrip(sock, b"x" * 1000)
    text = api.get("/metrics").text
    labels = f'listener="{body["listen"]}",proxy="m",upstream="{echo.address}"'
    for metric in ("received", "sent"):
        for direction in ("upstream", "downstream"):
            assert f'toxiproxy_proxy_{metric}_bytes_total{{direction="{direction}",{labels}}} 1000' in text


# ---- toxics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size,average,variation", [(1, 10, 5), (600, 10, 5), (32768, 100, 0), (50, 0, 0), (50, -5, 3)])
def test_slice_offsets_cover_the_data_in_bounded_pieces(size, average, variation):
    """Slices are contiguous, non-empty, cover everything, and none exceeds average + variation."""
    offsets = slice_offsets(size, average, variation, random.Random(1))
    assert offsets[0][0] == 0 and offsets[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    assert all(end - start >= 1 for start, end in offsets)
    assert all(end - start <= max(average + variation, 1) for start, end in offsets)


def test_removing_a_toxic_flushes_what_it_held(ours, echo):  # noqa: F811
    """Removing a 2 s latency toxic delivers the data it was delaying at once (nothing dropped)."""
    _tp, api = ours
    body = api.create_proxy("flush", echo.address)
    api.add_toxic("flush", type="latency", attributes={"latency": 2000})
    with connect(body["listen"]) as sock:
        start = time.monotonic()
        sock.sendall(b"held back")
        sock.settimeout(0.2)
        with pytest.raises((TimeoutError, socket.timeout)):
            sock.recv(100)
        sock.settimeout(5)
        assert api.delete("/proxies/flush/toxics/latency_downstream").status_code == 204
        assert recv_exactly(sock, 9) == b"held back"
        assert time.monotonic() - start < 1.5


def test_stream_stays_intact_while_toxics_change(ours, echo):  # noqa: F811
    """256 KB echoed while toxics are added, updated and removed on both links: every byte, in order."""
    _tp, api = ours
    body = api.create_proxy("churn", echo.address)
    # Throttled first, so the echo takes about a second and every change below meets live data.
    api.add_toxic("churn", name="throttle", type="bandwidth", attributes={"rate": 256})
    payload = random.Random(5).randbytes(256 * 1024)
    received = bytearray()
    with connect(body["listen"]) as sock:
        sock.settimeout(10)

        def receive():
            with contextlib.suppress(OSError):
                while len(received) < len(payload):
                    data = sock.recv(65536)
                    if not data:
                        return
                    received.extend(data)

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        sender = threading.Thread(
            target=lambda: [sock.sendall(payload[i : i + 4096]) for i in range(0, len(payload), 4096)], daemon=True
        )
        sender.start()
        changes = [
            ("add", {"type": "latency", "attributes": {"latency": 20, "jitter": 10}}),
            (
                "add",
                {"type": "slicer", "stream": "upstream", "attributes": {"average_size": 500, "size_variation": 100}},
            ),
            ("add", {"type": "bandwidth", "attributes": {"rate": 2000}}),
            ("update", ("latency_downstream", {"attributes": {"latency": 5}})),
            ("delete", "slicer_upstream"),
            ("add", {"type": "slicer", "attributes": {"average_size": 300, "size_variation": 50}}),
            ("update", ("bandwidth_downstream", {"attributes": {"rate": 5000}})),
            ("delete", "latency_downstream"),
            ("delete", "bandwidth_downstream"),
            ("delete", "slicer_downstream"),
            ("delete", "throttle"),
        ]
        start = time.monotonic()
        for action, arg in changes[:-1]:
            if action == "add":
                api.add_toxic("churn", **arg)
            elif action == "update":
                assert api.post(f"/proxies/churn/toxics/{arg[0]}", arg[1]).status_code == 200
            else:
                assert api.delete(f"/proxies/churn/toxics/{arg}").status_code == 204
        assert len(received) < len(payload), "the stream ended before the toxics changed"
        assert time.monotonic() - start < 0.9
        assert api.delete("/proxies/churn/toxics/throttle").status_code == 204
        sender.join(timeout=20)
        receiver.join(timeout=20)
        assert not sender.is_alive() and not receiver.is_alive()
    assert len(received) == len(payload)
    assert bytes(received) == payload


def test_toxicity_is_rolled_per_connection(ours, echo):  # noqa: F811
    """toxicity 0.5: with a fixed seed, some connections are delayed and some are not."""
    _tp, api = ours
    body = api.create_proxy("dice", echo.address)
    api.add_toxic("dice", type="latency", toxicity=0.5, attributes={"latency": 100})
    delayed = 0
    for _ in range(16):
        with connect(body["listen"]) as sock:
            delayed += roundtrip(sock) >= 0.09
    assert 2 <= delayed <= 14, delayed


def test_closed_connections_leave_nothing_behind(ours, echo):  # noqa: F811
    """Connections that end (by the client, or by a toxic) are dropped from the proxy."""
    tp, api = ours
    body = api.create_proxy("tidy", echo.address)
    for _ in range(5):
        with connect(body["listen"]) as sock:
            roundtrip(sock)
    api.add_toxic("tidy", type="limit_data", attributes={"bytes": 3})
    with connect(body["listen"]) as sock:
        sock.sendall(b"abcdef")
        assert read_until_closed(sock)[0] == b"abc"

    async def open_connections() -> int:
        return len(tp.server.core.proxies["tidy"].connections)

    def all_closed() -> None:
        assert tp.call(open_connections()) == 0

    eventually(all_closed, what="the proxy forgetting its closed connections")
    api.delete("/proxies/tidy")
    assert_refused(body["listen"])


def test_two_servers_side_by_side():
    """Two in-process servers on ephemeral ports do not share state."""
    with ToxiproxyServer.running(LOCALHOST, 0) as a, ToxiproxyServer.running(LOCALHOST, 0) as b:
        assert a.port != b.port
        up = f"{LOCALHOST}:{free_port()}"
        Api(Endpoint("a", a.host, a.port)).create_proxy("only-in-a", up)
        assert requests.get(b.url + "/proxies", timeout=HTTP_TIMEOUT_S).json() == {}


# ---- live rewiring, without sockets -----------------------------------------------------------


def _bare_link(specs):
    """A Link whose stages run but whose reader and writer do not: feed the head, read the tail."""
    from types import SimpleNamespace

    from splitbrain.faults.toxiproxy.link import Link

    conn = SimpleNamespace(rng=random.Random(3), peer="test", proxy=SimpleNamespace(name="unit"))
    link = Link(conn, "downstream", source=None, dest=None)
    link.build(specs)
    for stage in link.stages:
        stage.start()
    return link


def _spec(name, toxic_type, **attributes):
    from splitbrain.faults.toxiproxy.proxy import ToxicSpec, new_toxic_attributes

    return ToxicSpec(
        name, toxic_type, "downstream", 1.0, {**new_toxic_attributes(toxic_type), **attributes}, "downstream"
    )


async def _drain(chan, n: int) -> list[bytes]:
    return [(await asyncio.wait_for(chan.get(), 2)).data for _ in range(n)]


@pytest.mark.asyncio
async def test_removal_keeps_order_of_held_queued_and_new_data():
    """Removing a toxic that holds one chunk and has more queued: they leave first, in order,
    then data that arrived during the removal."""
    from splitbrain.faults.toxiproxy.toxics import Chunk

    latency = _spec("slow", "latency", latency=60_000)
    link = _bare_link([latency])
    head, slow = link.stages[0], link.stages[1]
    loop = asyncio.get_running_loop()
    for i in range(1, 5):
        await head.input.put(Chunk(b"%d" % i, loop.time()))
    await wait_until(lambda: slow.held and len(slow.input) == 3, timeout=2.0, interval=0.001)
    previous, stage = link.detach_toxic(latency)
    await head.input.put(Chunk(b"5", loop.time()))
    await wait_until(lambda: len(head.input) == 0, timeout=2.0, interval=0.001)  # the noop has passed chunk 5 on
    await link.finish_removal(previous, stage)
    await head.input.put(Chunk(b"6", loop.time()))
    assert await _drain(link.tail, 6) == [b"1", b"2", b"3", b"4", b"5", b"6"]
    for s in link.stages:
        s.task.cancel()


@pytest.mark.asyncio
async def test_update_flushes_held_data_and_keeps_state():
    """Updating a toxic flushes what it held (unaffected) and keeps limit_data's byte count."""
    from splitbrain.faults.toxiproxy.toxics import Chunk, Close

    limit = _spec("cap", "limit_data", bytes=4)
    link = _bare_link([limit])
    loop = asyncio.get_running_loop()
    await link.stages[0].input.put(Chunk(b"abc", loop.time()))
    assert await _drain(link.tail, 1) == [b"abc"]
    limit.attributes = {"bytes": 5}
    await link.update_toxic(limit)
    await link.stages[0].input.put(Chunk(b"defg", loop.time()))
    assert await _drain(link.tail, 1) == [b"de"]  # 3 already sent + 2 = the new limit of 5
    assert isinstance(await asyncio.wait_for(link.tail.get(), 2), Close)
    for s in link.stages:
        s.task.cancel()


@pytest.mark.asyncio
async def test_chan_forwarding_moves_queued_and_blocked_puts_in_order():
    """A forwarded channel hands over what it queued, then the puts that were waiting on it."""
    from splitbrain.faults.toxiproxy.link import Chan

    source, target = Chan(1), Chan(10)
    await source.put("a")
    blocked = asyncio.ensure_future(source.put("b"))
    await asyncio.sleep(0)
    assert not blocked.done()
    source.forward_to(target)
    await asyncio.wait_for(blocked, 2)
    await source.put("c")
    assert [await target.get() for _ in range(3)] == ["a", "b", "c"]
    assert await target.get(deadline=asyncio.get_running_loop().time()) is None
