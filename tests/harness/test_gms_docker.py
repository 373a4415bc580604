"""Membership (GMS) on docker: the one-way partition A->B as an iptables DROP rule at B.

Heartbeats, discovery and merge messages are datagrams like any other, so the kernel's rule cuts
them too: B's side suspects A and installs a view without it while A still lists B, the heal
merges the views into one, the windows resync and every message is delivered once, in order
(every default check of a `membership: gms` scenario, views_agree included). Skipped with the
reason when no Docker engine is reachable (as tests/harness/test_docker_scenarios.py).
"""

from __future__ import annotations

import pytest

pytest.importorskip("docker")

from splitbrain.harness.backends.docker import DockerBackend
from splitbrain.harness.eventlog import read_run
from splitbrain.node.events import expand_runs
from tests.harness.test_gms_end_to_end import judge_split, partition_window, run_split

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

DOCKER_MERGE_BOUND_S = 10.0


@pytest.fixture(scope="module")
def docker_backend():
    backend = DockerBackend()
    ok, why = backend.check()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    backend.ensure_image()
    return backend


def test_one_way_split_with_iptables_gives_asymmetric_views_then_one_merged_view(docker_backend, tmp_path):
    """Docker, iptables: asymmetric views without any view step, one merged view within the bound
    after the heal, windows in sync, every message once and in order; the cut was the kernel's."""
    outcome = run_split("docker", tmp_path, backend_options={"client": docker_backend.client})
    where = judge_split(outcome, DOCKER_MERGE_BOUND_S)
    events = expand_runs(read_run(outcome.run_dir))  # one event per message
    on_detail = next(e["detail"] for e in events if e["kind"] == "fault_on" and e.get("fault") == "partition")
    assert "[iptables: 1 DROP rule(s) at B]" in on_detail, where
    on, off = partition_window(events)
    crossing = [
        e["t"]
        for e in events
        if e["kind"] == "deliver" and e["node"] == "B" and e.get("peer") == "A" and on + 0.2 < e["t"] < off
    ]
    assert not crossing, f"{len(crossing)} deliveries A->B during the partition\n{where}"
