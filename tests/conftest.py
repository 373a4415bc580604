"""Shared pytest fixtures.

`spark`: one SparkSession for the whole test session (pipeline tests), quiet and small: local[2],
UI off, 2 shuffle partitions, 1 GiB driver, loopback only, log4j2 at error (ci/spark). Starting
a session costs 5-10 s, so every pipeline test shares this one; pyspark is imported only when a
test asks for it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The session-wide SparkSession (pipeline.session.get_spark with test settings)."""
    from pipeline.session import get_spark

    # C1 only: the tests' inputs are small, and C2's compiler threads took half the JVM's CPU
    # (two Spark test files on busy cores: 153 -> 68 s and 168 -> 92 s). SPLITBRAIN_SPARK_JIT=c2
    # runs them with C2.
    session = get_spark("local[2]", app_name="splitbrain-tests", driver_memory="1g", shuffle_partitions=2, jit="c1")
    try:
        yield session
    finally:
        session.stop()
