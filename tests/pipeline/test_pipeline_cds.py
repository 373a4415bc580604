"""The driver JVM's class-data archive (pipeline.cds) and start options (pipeline.session): which
archive a session uses, and when it must use none. No JVM is started here; the suite's own Spark
session starts from the archive whenever ci/setup built one."""

from __future__ import annotations

import os

import pytest

from splitbrain.pipeline import cds
from splitbrain.pipeline import session as SS


@pytest.fixture
def fake_install(tmp_path, monkeypatch):
    """A java binary, a libjvm and two Spark jars in tmp_path; archives under tmp_path/cache."""
    java = tmp_path / "jdk" / "bin" / "java"
    libjvm = tmp_path / "jdk" / "lib" / "server" / "libjvm.so"
    jars = tmp_path / "jars"
    for path in (java, libjvm, jars / "spark-core.jar", jars / "spark-sql.jar"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    monkeypatch.setattr(cds, "_java_binary", lambda: java)
    monkeypatch.setattr(cds, "_spark_jars", lambda: jars)
    monkeypatch.setattr(cds, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv(cds.ENV_SWITCH, raising=False)
    return {"java": java, "libjvm": libjvm, "jars": jars}


def _archive(key: str):
    path = cds.archive_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_the_key_changes_with_the_jdk_and_with_any_jar(fake_install):
    """A new JDK build or a changed, added or removed Spark jar means another archive."""
    key = cds.archive_key()
    assert key == cds.archive_key()
    fake_install["libjvm"].write_bytes(b"a newer jvm")
    assert cds.archive_key() != key
    key = cds.archive_key()
    (fake_install["jars"] / "extra.jar").write_bytes(b"y")
    assert cds.archive_key() != key
    key = cds.archive_key()
    (fake_install["jars"] / "spark-sql.jar").write_bytes(b"rebuilt")
    assert cds.archive_key() != key


def test_no_archive_no_options(fake_install):
    """Without an archive for the current key the driver starts as before."""
    _archive("0123456789abcdef")  # an old one, for another JDK or pyspark
    assert cds.driver_options() is None
    assert "SPARK_CONF_DIR" not in os.environ


def test_a_current_archive_is_used_with_an_empty_conf_dir(fake_install, monkeypatch):
    """The archive maps only with no non-empty directory on the class path: the session points
    SPARK_CONF_DIR at an empty one and hands log4j2.properties over as a system property."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(cds.CONF_DIR))
    path = _archive(cds.archive_key())
    options = cds.driver_options()
    assert options is not None
    assert f"-XX:SharedArchiveFile={path}" in options.split()
    assert "-Xshare:auto" in options.split()
    assert (cds.CONF_DIR / "log4j2.properties").as_uri() in options
    assert os.environ["SPARK_CONF_DIR"] == str(cds.empty_conf_dir())


@pytest.mark.parametrize("switch", ["off", "0", "false"])
def test_switched_off(fake_install, monkeypatch, switch):
    monkeypatch.setenv(cds.ENV_SWITCH, switch)
    _archive(cds.archive_key())
    assert cds.driver_options() is None
    assert cds.build().startswith("skipped")


def test_a_users_conf_dir_wins(fake_install, monkeypatch, tmp_path):
    """A user's SPARK_CONF_DIR (spark-defaults.conf ...) stays on the class path: no archive."""
    conf = tmp_path / "myconf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.executor.memory 4g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    _archive(cds.archive_key())
    assert cds.driver_options() is None
    assert os.environ["SPARK_CONF_DIR"] == str(conf)


def test_no_java_no_archive(fake_install, monkeypatch):
    monkeypatch.setattr(cds, "_java_binary", lambda: None)
    assert cds.archive_key() is None
    assert cds.driver_options() is None
    assert cds.build() == "skipped: no java or no pyspark found"


def test_driver_options_merge_archive_jit_and_the_callers(fake_install, monkeypatch):
    """The session's driver options: archive, C1-only JIT (only when asked for), then the caller's."""
    monkeypatch.delenv(SS.JIT_ENV, raising=False)
    path = _archive(cds.archive_key())
    conf = {"spark.driver.extraJavaOptions": "-Dfoo=1"}
    SS._driver_java_options(conf)
    opts = conf["spark.driver.extraJavaOptions"].split()
    assert opts[0] == f"-XX:SharedArchiveFile={path}"
    assert "-XX:TieredStopAtLevel=1" not in opts
    assert opts[-1] == "-Dfoo=1"
    monkeypatch.setenv(SS.JIT_ENV, "c1")
    conf = {}
    SS._driver_java_options(conf)
    # C1 only, with the code cache the JVM reserves when C2 is on (C1 alone reserves 48 MB).
    opts = conf["spark.driver.extraJavaOptions"].split()
    assert "-XX:TieredStopAtLevel=1" in opts and "-XX:ReservedCodeCacheSize=240m" in opts
    monkeypatch.setenv(SS.JIT_ENV, "full")
    monkeypatch.setenv(cds.ENV_SWITCH, "off")
    conf = {}
    SS._driver_java_options(conf)
    assert conf == {}
