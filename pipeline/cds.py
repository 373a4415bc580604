"""A class-data sharing (AppCDS) archive for the Spark driver's JVM: a faster start.

Theory of operation. Most of a short analysis's fixed cost is the driver JVM loading and verifying
some ten thousand classes from Spark's ~280 jars. A dynamic CDS archive (Java 13+) records the
classes a representative analysis loaded, already parsed and verified; a later JVM with the same
JDK and the same class path maps it instead (measured: see docs/pipeline.md).

An archive is only valid for the exact JDK build and class path it was dumped with (the JVM checks
both and, with -Xshare:auto, silently runs without it on a mismatch). So its file name carries a
key over the java binary, libjvm and every jar of pyspark (name, size, mtime): a new JDK or pyspark
means a new key, so `ci/setup` builds a new archive and the session stops using the old one.

The JVM refuses a class path holding a non-empty directory, and Spark always puts SPARK_CONF_DIR
first on it. With the archive, the session therefore points SPARK_CONF_DIR at an empty directory
next to the archive and hands the project's log4j2.properties to the JVM as a system property.
A user's own SPARK_CONF_DIR (spark-defaults.conf ...) wins: then no archive is used.

`python -m splitbrain.pipeline.cds [--force]` builds the archive (ci/setup runs it): it analyzes a small
simulated run in a JVM started with -XX:ArchiveClassesAtExit and waits for the JVM to write the
archive at its exit. SPLITBRAIN_SPARK_CDS=off disables the archive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

ENV_SWITCH = "SPLITBRAIN_SPARK_CDS"
CONF_DIR = Path(__file__).resolve().parent.parent / "ci" / "spark"
# Unified logging about CDS (class path mismatch, classes it could not archive) is noise here.
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java_binary() -> Path | None:
    """The java that spark-class runs: $JAVA_HOME/bin/java, else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found and os.path.exists(found) else None


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return jars if jars.is_dir() else None


def archive_key() -> str | None:
    """A digest of what the archive is tied to (the JDK build, Spark's jars), or None when there
    is no java or no pyspark."""
    java, jars = _java_binary(), _spark_jars()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    libjvm = next(iter(sorted(java.parent.parent.glob("lib/server/libjvm.so"))), None)
    for path in [java, libjvm, *sorted(jars.glob("*.jar"))]:
        if path is not None:
            st = path.stat()
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where archives live: inside the Python environment, so they go with the venv."""
    return Path(sys.prefix) / "share" / "splitbrain" / "spark-cds"


def archive_path(key: str) -> Path:
    return cache_dir() / f"driver-{key}.jsa"


def empty_conf_dir() -> Path:
    return cache_dir() / "empty-conf"


def usable() -> bool:
    """Whether this process may start its driver with an archive: not switched off, and the
    configuration directory is the project's (or unset)."""
    if os.environ.get(ENV_SWITCH, "").lower() in ("off", "0", "false", "no"):
        return False
    conf = os.environ.get("SPARK_CONF_DIR")
    return conf is None or Path(conf).resolve() in (CONF_DIR.resolve(), empty_conf_dir().resolve())


def _log_config() -> str:
    return f"-Dlog4j2.configurationFile={(CONF_DIR / 'log4j2.properties').as_uri()}"


def driver_options() -> str | None:
    """The driver JVM's options to start from the archive, and the environment it needs (set
    here), when a current archive exists and may be used; else None."""
    if not usable():
        return None
    key = archive_key()
    if key is None or not archive_path(key).is_file():
        return None
    os.environ["SPARK_CONF_DIR"] = str(empty_conf_dir())
    return f"-XX:SharedArchiveFile={archive_path(key)} -Xshare:auto {_QUIET_CDS} {_log_config()}"


def build(force: bool = False) -> str:
    """Build the archive for this JDK and pyspark (a message saying what happened). Runs an
    analysis, so it must run in a fresh process without a Spark session."""
    import tempfile

    if not usable():
        return f"skipped: {ENV_SWITCH} is off or SPARK_CONF_DIR is set to another directory"
    key = archive_key()
    if key is None:
        return "skipped: no java or no pyspark found"
    target = archive_path(key)
    if target.is_file() and not force:
        return f"up to date: {target}"
    cache_dir().mkdir(parents=True, exist_ok=True)
    empty_conf_dir().mkdir(exist_ok=True)
    for old in cache_dir().glob("driver-*.jsa"):
        old.unlink()
    partial = target.with_suffix(".partial")
    os.environ["SPARK_CONF_DIR"] = str(empty_conf_dir())
    options = f"-XX:ArchiveClassesAtExit={partial} {_QUIET_CDS} {_log_config()}"
    with tempfile.TemporaryDirectory(prefix="splitbrain-cds-") as work:
        _analyze_sample(Path(work), options)
    if not partial.is_file():
        return "skipped: the JVM wrote no archive (it needs a JDK with dynamic CDS, Java 13+)"
    partial.rename(target)
    return f"built: {target}"


def _analyze_sample(work: Path, options: str) -> None:
    """Analyze one short simulated run, then stop the JVM and wait for it to write the archive."""
    from splitbrain.harness.run import run_scenario
    from splitbrain.harness.scenario import load_scenario

    from . import analysis as A
    from .session import get_spark

    scenario = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "one-way-split-resync.yaml")
    outcome = run_scenario(scenario, seed=scenario.seed, backend="sim", out=work / "runs")
    spark = get_spark("local[2]", extra_conf={"spark.driver.extraJavaOptions": options})
    result = A.ingest_only(spark, [str(outcome.run_dir)], str(work / "warehouse"))
    analysis = A.analyze_ingested(spark, result)
    A.build_report(spark, analysis, str(work / "report"), title="CDS sample")
    proc = spark.sparkContext._gateway.proc
    spark.stop()
    # The JVM exits when its stdin closes (pyspark's gateway) and dumps the archive on the way out.
    proc.stdin.close()
    proc.wait(timeout=300)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(f"pipeline.cds: {build(force='--force' in args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
