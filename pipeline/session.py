"""One way to get a SparkSession: quiet, loopback-only, bounded, and the same in tests, CLI and job.

Settings (measured on a 2-core, 24 GiB machine):

- driver and block manager bound to 127.0.0.1 (SPARK_LOCAL_IP, spark.driver.bindAddress), so a
  laptop on a flaky network or a sandbox without DNS starts in seconds;
- no web UI, no console progress bar, log4j2 at error (ci/spark/log4j2.properties through
  SPARK_CONF_DIR when the caller has not set one);
- few shuffle partitions: the data of one machine does not need Spark's default of 200;
- bounded driver memory (the driver is also the executor in local mode).

Under spark-submit a session already exists with the cluster's settings; `get_spark` then only
reuses it (master and memory cannot change once the JVM runs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "2g"
APP_NAME = "splitbrain-pipeline"

# The repository's Spark configuration folder (log4j2.properties), when running from a checkout.
CONF_DIR = Path(__file__).resolve().parent.parent / "ci" / "spark"

QUIET_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # JSON lines are parsed with an explicit schema; partial results let ingest name the one
    # field that does not fit instead of losing the whole record.
    "spark.sql.json.enablePartialResults": "true",
    # Partition values are run ids: strings, never guessed to be numbers or dates.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # The small tables the checks broadcast (lives, windows, heals) are computed from the whole
    # events table; on tens of millions of freshly parsed lines that takes longer than the
    # default 300 s, which would fail the job (measured: 50 M JSONL events on 2 cores).
    "spark.sql.broadcastTimeout": "36000",
}


def local_cores(master: str) -> int:
    """The number of cores of a local master string: local, local[4], local[*], local[2,3]."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    return (os.cpu_count() or 1) if first == "*" else max(1, int(first))


def local_conf(master: str, *, driver_memory: str, shuffle_partitions: int | None) -> dict[str, str]:
    conf = dict(QUIET_CONF)
    if master.startswith("local"):
        # One machine's data does not need Spark's default of 200 shuffle partitions: one per
        # core (measured on 2 cores: a campaign analysis is ~40 small stages, and 4 partitions
        # per stage cost twice the scheduling of 2). A cluster keeps its own setting.
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions or local_cores(master))
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.memory"] = driver_memory
        # The analysis is one query with many small branches; on one machine adaptive execution
        # would plan each of its ~40 stages separately (measured: 118 jobs instead of 17 for five
        # runs). A cluster keeps it on: it coalesces the shuffle partitions of big stages.
        conf["spark.sql.adaptive.enabled"] = "false"
    return conf


def prepare_environment(master: str | None) -> None:
    """Environment the JVM reads at launch: loopback address (local masters only), quiet logs,
    this Python for workers."""
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "SPARK_CONF_DIR" not in os.environ and (CONF_DIR / "log4j2.properties").exists():
        os.environ["SPARK_CONF_DIR"] = str(CONF_DIR)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def get_spark(
    master: str | None = None,
    *,
    app_name: str = APP_NAME,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    shuffle_partitions: int | None = None,
    extra_conf: dict | None = None,
    jit: str | None = None,
):
    """The active SparkSession, or a new one on `master` (default local[*]) with quiet settings.
    `jit="c1"` starts a new driver JVM compiling with C1 only (for short analyses; see JIT_ENV)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    submitted = master is None and launched_by_spark_submit()
    prepare_environment(None if submitted else (master or DEFAULT_MASTER))
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the master (and the driver's addresses) come from its command line.
    if submitted:
        conf = dict(QUIET_CONF)
    else:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        conf = local_conf(master, driver_memory=driver_memory, shuffle_partitions=shuffle_partitions)
    conf.update(extra_conf or {})
    if not submitted:
        _driver_java_options(conf, jit)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# C1-only compilation makes a short analysis start and run faster (measured on busy cores: first job
# 16.7 -> 9.6 s; the 258 k-event analysis 125 -> 87 s; C2's compiler threads took half
# of the JVM's CPU there), but in local mode the driver is also the executor, and a 10 M-event
# judging run with C1 only was still JVM-bound after 15 min (75 s before, with C2). So callers ask
# for it for small inputs only (`jit="c1"`, pipeline.overlap); SPLITBRAIN_SPARK_JIT=c1 forces it,
# any other value (e.g. "c2") forbids it.
JIT_ENV = "SPLITBRAIN_SPARK_JIT"
# With C1 only the JVM reserves a 48 MB code cache instead of 240 MB; Spark generates and compiles
# classes for every query, so a long-lived session (the test suite's) filled it, the JVM stopped
# compiling and then failed ("Out of space in CodeCache for adapters"). It keeps the usual size.
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def _driver_java_options(conf: dict, jit: str | None = None) -> None:
    """The driver JVM's start options: the class-data archive ci/setup built (pipeline.cds) when
    there is a current one, and C1-only compilation when asked for (SPLITBRAIN_SPARK_JIT, or
    `jit` when that is unset)."""
    from . import cds

    options = [o for o in (cds.driver_options(), _jit_option(jit)) if o]
    extra = conf.get("spark.driver.extraJavaOptions")
    if extra:
        options.append(extra)
    if options:
        conf["spark.driver.extraJavaOptions"] = " ".join(options)


def _jit_option(jit: str | None = None) -> str | None:
    choice = os.environ.get(JIT_ENV, "").lower() or (jit or "").lower()
    return C1_ONLY if choice == "c1" else None


def ship_code(spark) -> str | None:
    """On a cluster master, add a zip of this checkout's pipeline, harness and node packages to
    the session (SparkContext.addPyFile, what --py-files does), so executors run the same code as
    the driver; returns the zip's path. Local masters need nothing (their Python workers import
    what the driver imports), and neither does a session whose executors already have the zip."""
    import tempfile
    import zipfile

    master = spark.sparkContext.master
    if master.startswith("local"):
        return None
    root = Path(__file__).resolve().parent.parent
    fd, path = tempfile.mkstemp(prefix="splitbrain-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        # Inside the zip the packages sit under splitbrain/, as in an installed wheel.
        zf.write(root / "splitbrain" / "__init__.py", "splitbrain/__init__.py")
        for package in ("pipeline", "harness", "node"):
            for file in sorted((root / package).rglob("*.py")):
                if "__pycache__" not in file.parts:
                    zf.write(file, "splitbrain/" + file.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(path)
    return path


def launched_by_spark_submit() -> bool:
    """True in a Python driver started by spark-submit (it hands over its JVM's gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
