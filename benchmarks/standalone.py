"""A Spark standalone cluster on this machine for benchmarks: one master and N workers started from
the pyspark installation on 127.0.0.1 (ephemeral ports), each worker one executor of `cores`
cores; stopped (process groups, SIGTERM then SIGKILL) on exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """Yields the master URL once every worker has registered (bounded by START_TIMEOUT_S)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    work.mkdir(parents=True, exist_ok=True)
    port, ui = _free_port(), _free_port()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(ROOT / "ci" / "spark"),
        PYSPARK_PYTHON=sys.executable,
        SPARK_WORKER_DIR=str(work / "work"),
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_NO_DAEMONIZE="1",
    )
    master = f"spark://127.0.0.1:{port}"
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(ui)]
    ]
    for _ in range(workers):
        commands.append(
            [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1"]
            + ["--cores", str(cores), "--memory", memory, "--webui-port", str(_free_port())]
        )
    procs: list[subprocess.Popen] = []
    try:
        for i, cmd in enumerate(commands):
            log = (work / f"daemon-{i}.log").open("w")
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            dead = [p.args for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited: {dead[0]} (logs in {work})")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as resp:
                    if json.load(resp).get("aliveworkers", 0) >= workers:
                        break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} worker(s) did not register within {START_TIMEOUT_S} s (logs in {work})")
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
