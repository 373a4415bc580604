"""Shared pytest fixtures.

`spark`: one SparkSession for the whole test session (pipeline tests), quiet and small: local[2],
UI off, 2 shuffle partitions, 1 GiB driver, loopback only, log4j2 at error (ci/spark). Starting
a session costs 5-10 s, so every pipeline test shares this one; pyspark is imported only when a
test asks for it.
"""

from __future__ import annotations

import pytest

from splitbrain.harness.plugin import backend_of

# Modules whose tests start node processes, pip installs, network namespaces or Toxiproxy (or talk
# to an engine): their names, wherever the file sits under tests/.
LIVE_MODULES = frozenset(
    {
        "test_ci_install",
        "test_cli_local",
        "test_docker_backend",
        "test_docker_faults_model",
        "test_docker_scenarios",
        "test_faults_iptables",
        "test_faults_netem",
        "test_faults_nfqueue",
        "test_gms_docker",
        "test_gms_end_to_end",
        "test_gms_local",
        "test_conformance",
        "test_images",
        "test_ipmcast",
        "test_jgroups_docker",
        "test_jgroups_local",
        "test_local_backend",
        "test_local_interrupt",
        "test_local_parity",
        "test_mcast_live",
        "test_nakack2_live",
        "test_node_process",
        "test_toxiproxy_conformance",
        "test_toxiproxy_server",
        "test_toy_protocol",
        "test_unicast2_live",
        "test_unicast2_museum",
        "test_unicast_live",
    }
)


def _module_name(item: pytest.Item) -> str:
    return item.path.stem


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        backend = backend_of(item)
        if backend == "docker":
            item.add_marker(pytest.mark.docker)
        if _module_name(item) in LIVE_MODULES or backend in ("local", "docker"):
            item.add_marker(pytest.mark.live)
        if any(item.get_closest_marker(name) for name in ("live", "docker", "spark")):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def spark():
    """The session-wide SparkSession (pipeline.session.get_spark with test settings)."""
    from splitbrain.pipeline.session import get_spark

    # C1 only: the tests' inputs are small, and C2's compiler threads took half the JVM's CPU
    # (two Spark test files on busy cores: 153 -> 68 s and 168 -> 92 s). SPLITBRAIN_SPARK_JIT=c2
    # runs them with C2.
    session = get_spark("local[2]", app_name="splitbrain-tests", driver_memory="1g", shuffle_partitions=2, jit="c1")
    try:
        yield session
    finally:
        session.stop()
