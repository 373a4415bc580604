"""The HTML report as a reader sees it: a report of a failing and a passing run, and one of a single
run, opened in headless Chromium (Debian's `chromium`, driven over the DevTools protocol with
aiohttp's websocket client). Every image loads, nothing logs a console error, a few-run report leads
with the verdict and the timelines (no campaign plots), and a full-page screenshot of each is kept
in SPLITBRAIN_TEST_ARTIFACTS (default: test-artifacts/ in the checkout).

The texts of a timeline are checked where matplotlib put them: the title, each panel's label, the
scenario-time axis and the final windows' labels neither overlap nor leave the figure."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from splitbrain.harness.cli import main
from splitbrain.harness.testlib import eventually

# The checkout: the nearest folder above with pyproject.toml (tests may move into subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
ARTIFACTS = Path(os.environ.get("SPLITBRAIN_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

PASSING = """
name: report-pass
protocol: unicast3
transport: udp
nodes: [A, B]
config: {xmit_interval: 0.2, conn_close_timeout: 1.0}
workload:
  - {from: A, to: B, rate: 50, duration: 4}
schedule:
  - {at: 1.0, partition: {from: A, to: B}}
  - {at: 1.5, view: {at: B, members: [B]}}
  - {at: 3.0, heal: 0}
  - {at: 3.2, view: {at: B, members: [A, B]}}
duration: 4
settle: 3
checks: [fifo, no_duplicates, no_loss, windows_synced]
expect: pass
seed: 5
"""


def _failing_scenario() -> str:
    """The museum's JGRP-1875 reproduction judged as if it should pass: no_loss fails."""
    text = (ROOT / "scenarios" / "bugs" / "jgrp-1875-first-seqno.yaml").read_text()
    text = re.sub(r"^name: .*$", "name: report-fail", text, flags=re.M)
    return re.sub(r"^expect: .*$", "expect: pass", text, flags=re.M)


def _run(tmp_path: Path, name: str, text: str, expect_code: int) -> Path:
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(text)
    code = main(["run", str(scenario), "--backend", "sim", "--out", str(tmp_path / "runs"), "--no-progress"])
    assert code == expect_code
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(name)]
    return run_dir


# ---- the timeline's texts, measured in the figure ----------------------------------------------


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_timeline_texts_do_not_overlap_or_leave_the_figure(outcome):
    import matplotlib.pyplot as plt

    from splitbrain.pipeline.report.run_figures import draw_timeline
    from tests.pipeline.test_pipeline_report import _timeline, _verdict

    verdict = _verdict("r-x", "split", outcome, lost=int(outcome == "failed"), stuck=outcome == "failed")
    verdict.meta["origin_t"] = 0.67  # a live run: scenario time on top of the first panel
    fig = draw_timeline(_timeline("r-x"), verdict)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        frame = fig.bbox
        top_ticks = [tick.label2 for tick in fig.axes[-1].get_xaxis().get_major_ticks()]
        boxes = []
        for text in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent")):
            label = text.get_text()
            if not text.get_visible() or not label.strip():
                continue
            if label.startswith(
                ("r-x", "no_loss", "stuck", "A \u2192 B", "scenario time", "send HA", "recv delivered")
            ):
                boxes.append((label, text.get_window_extent(renderer)))
        # The secondary (scenario time) axis's tick labels sit between the title and the panel.
        secondary = [a for a in fig.axes[0].child_axes if hasattr(a, "get_xticklabels")]
        for axis in secondary:
            for tick in axis.get_xticklabels():
                if tick.get_visible() and tick.get_text().strip():
                    boxes.append((f"top tick {tick.get_text()}", tick.get_window_extent(renderer)))
        del top_ticks
        names = [n for n, _ in boxes]
        assert "scenario time (s)" in names and any(n.startswith("A \u2192 B") for n in names), names
        assert any(n.startswith("send HA") for n in names) and any(n.startswith("r-x") for n in names), names
        for label, box in boxes:
            inside = (
                frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1 and frame.y0 - 1 <= box.y0 <= box.y1 <= frame.y1 + 1
            )
            assert inside, f"{label!r} leaves the figure"
        for (a, abox), (b, bbox) in itertools.combinations(boxes, 2):
            if a.startswith("top tick") and b.startswith("top tick"):
                continue
            assert not abox.overlaps(bbox), f"{a!r} overlaps {b!r}"
        # The final windows' labels stay inside their panel.
        panel = fig.axes[0].get_window_extent(renderer)
        for label, box in boxes:
            if label.startswith(("send HA", "recv delivered")):
                assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1, label
    finally:
        plt.close(fig)


# ---- the page in a real browser ----------------------------------------------------------------


class Browser:
    """One headless Chromium with its DevTools endpoint on 127.0.0.1 (a port it picks)."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # root in CI containers; the page is a local file we wrote
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"

        def port() -> int | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            text = port_file.read_text().strip() if port_file.exists() else ""
            return int(text.split()[0]) if text else None

        # Up to 30 s for a cold start on busy cores.
        self.port = eventually(port, timeout=30, what="chromium's DevTools port")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    async def open(self, url: str, screenshot: Path) -> dict:
        """Load `url`, wait for its load event, and return what the page showed: console errors,
        images that did not load, the section headings in order; save a full-page screenshot."""
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.put(f"http://127.0.0.1:{self.port}/json/new?about:blank") as resp:
                target = await resp.json(content_type=None)
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                ids = itertools.count(1)
                errors: list[str] = []
                pending: dict[int, asyncio.Future] = {}
                loaded = asyncio.Event()

                async def reader() -> None:
                    async for msg in ws:
                        data = json.loads(msg.data)
                        if "id" in data and data["id"] in pending:
                            pending.pop(data["id"]).set_result(data)
                        method = data.get("method")
                        params = data.get("params", {})
                        if method == "Page.loadEventFired":
                            loaded.set()
                        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                            errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
                        elif method == "Runtime.exceptionThrown":
                            errors.append(params["exceptionDetails"].get("text", "exception"))
                        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                            errors.append(params["entry"].get("text", ""))

                task = asyncio.create_task(reader())

                async def call(method: str, **params) -> dict:
                    n = next(ids)
                    pending[n] = asyncio.get_running_loop().create_future()
                    await ws.send_json({"id": n, "method": method, "params": params})
                    reply = await asyncio.wait_for(pending[n], timeout=60)
                    assert "error" not in reply, reply
                    return reply.get("result", {})

                try:
                    for domain in ("Page", "Runtime", "Log"):
                        await call(f"{domain}.enable")
                    await call(
                        "Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False
                    )
                    await call("Page.navigate", url=url)
                    await asyncio.wait_for(loaded.wait(), timeout=60)
                    probe = await call(
                        "Runtime.evaluate",
                        returnByValue=True,
                        expression="""({
                            images: document.images.length,
                            broken: Array.from(document.images)
                                .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src),
                            headings: Array.from(document.querySelectorAll('h2,h3')).map(h => h.textContent),
                            height: document.documentElement.scrollHeight,
                        })""",
                    )
                    page = probe["result"]["value"]
                    shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                    screenshot.parent.mkdir(parents=True, exist_ok=True)
                    screenshot.write_bytes(base64.b64decode(shot["data"]))
                    page["errors"] = errors
                    return page
                finally:
                    task.cancel()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(
            "no chromium on PATH: ci/setup installs Debian's chromium where it runs as root "
            "(apt-get install chromium elsewhere)"
        )
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield b
    finally:
        b.close()


@pytest.mark.slow
def test_reports_render_in_chromium(spark, browser, tmp_path):
    passing = _run(tmp_path, "report-pass", PASSING, expect_code=0)
    failing = _run(tmp_path, "report-fail", _failing_scenario(), expect_code=1)
    both = tmp_path / "both"
    assert main(["analyze", str(failing), str(passing), "--out", str(both), "--quiet"]) == 1
    one = tmp_path / "one"
    assert main(["analyze", str(passing), "--out", str(one), "--quiet"]) == 0
    for name, out in (("two-runs", both), ("one-run", one)):
        shot = ARTIFACTS / f"report-{name}.png"
        page = asyncio.run(browser.open((out / "report" / "index.html").as_uri(), shot))
        assert page["images"] >= 1 and not page["broken"], page
        assert not page["errors"], page["errors"]
        assert shot.stat().st_size > 10_000
        headings = page["headings"]
        # The verdict and the timelines lead; no campaign plots for a few runs.
        assert headings[0].startswith("Verdict:"), headings
        assert headings.index("Timelines") < headings.index("Runs"), headings
        assert "Pass rates" not in headings and "Latency, overhead, heal to sync" not in headings, headings
    one_html = (one / "report" / "index.html").read_text()
    assert "pass_rates.png" not in one_html and "matrix.png" not in one_html
    assert "heal_sync.png" not in one_html and "overhead.png" not in one_html
