"""A Spark standalone cluster on this host, for the tests and benchmarks that run the job on a
real cluster manager: one master and N workers started from the pyspark installation on 127.0.0.1
(ephemeral ports), each worker one executor of `cores` cores; stopped (process groups, SIGTERM
then SIGKILL) on exit. A cluster of many machines is given to the CLI as --master spark://...
"""

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
from dataclasses import dataclass
from pathlib import Path

from .session import CONF_DIR

START_TIMEOUT_S = 120


@dataclass(frozen=True)
class StandaloneCluster:
    master: str  # spark://127.0.0.1:PORT
    env: dict[str, str]  # the daemons' environment (SPARK_HOME, SPARK_CONF_DIR...), for spark-submit too
    procs: list[subprocess.Popen[bytes]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int, cores: int = 1, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """Yields the cluster once every worker has registered (bounded by START_TIMEOUT_S; RuntimeError
    with the tail of the daemon's log otherwise). Logs and worker files go under `work`."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    work.mkdir(parents=True, exist_ok=True)
    port, ui = _free_port(), _free_port()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(CONF_DIR),
        PYSPARK_PYTHON=sys.executable,
        SPARK_WORKER_DIR=str(work / "work"),
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_NO_DAEMONIZE="1",
    )
    master = f"spark://127.0.0.1:{port}"
    daemons = {"master": [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]}
    daemons["master"] += ["--port", str(port), "--webui-port", str(ui)]
    for i in range(workers):
        daemons[f"worker-{i}"] = [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1"]
        daemons[f"worker-{i}"] += ["--cores", str(cores), "--memory", memory, "--webui-port", str(_free_port())]
    logs = {name: work / f"{name}.log" for name in daemons}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, cmd in daemons.items():
            with logs[name].open("w") as log:
                procs.append(
                    subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
                )
        deadline = time.monotonic() + START_TIMEOUT_S
        state: dict = {}
        while True:
            for name, p in zip(logs, procs):
                if p.poll() is not None:
                    raise RuntimeError(f"spark {name} exited with {p.returncode}: {_tail(logs[name])}")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as resp:
                    state = json.load(resp)
                if state.get("aliveworkers", 0) >= workers:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{workers} worker(s) did not register within {START_TIMEOUT_S} s (master said {state}); "
                    f"logs in {work}: {_tail(logs['worker-0'])}"
                )
            time.sleep(0.5)
        yield StandaloneCluster(master, env, procs)
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
