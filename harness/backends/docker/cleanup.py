"""Removing what clusters leave on the engine: one cluster's containers and network at teardown,
and, for `splitbrain clean`, the leftovers of harness processes that are gone.

Everything is found by label (labels.py), so even a container whose bookkeeping an interrupt cut
short is removed. Image holds (images.py) of processes that are gone are released too.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import docker
import docker.errors

from .images import HOLD_REPOS, hold_tag, release_hold
from .labels import LABEL, LABEL_CLUSTER, LABEL_OWNER, LABEL_RUN_DIR, owner_alive

REMOVE_ATTEMPTS = 10


def remove_container(container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise


def remove_cluster(client, cluster_id: str) -> list[str]:
    """Remove every container and network labelled splitbrain.cluster=<id>; returns problems."""
    problems = []
    label = f"{LABEL_CLUSTER}={cluster_id}"
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            containers = client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        except docker.errors.APIError as exc:
            problems.append(f"cannot list containers of {cluster_id}: {exc}")
            break
        for container in containers:
            try:
                remove_container(container)
            except docker.errors.APIError as exc:
                if attempt == REMOVE_ATTEMPTS - 1:
                    problems.append(f"cannot remove container {container.name}: {exc}")
        if not containers:
            break
        time.sleep(0.1 * attempt)
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            networks = client.networks.list(filters={"label": label})
        except docker.errors.APIError as exc:
            problems.append(f"cannot list networks of {cluster_id}: {exc}")
            break
        if not networks:
            break
        for net in networks:
            try:
                net.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                # An endpoint still being torn down: wait a little and try again.
                if attempt == REMOVE_ATTEMPTS - 1:
                    problems.append(f"cannot remove network {net.name}: {exc}")
        time.sleep(0.1 * (attempt + 1))
    return problems


def leftovers(client=None) -> dict[str, dict]:
    """Clusters that have containers or networks on the engine: id -> {owner, alive, containers,
    networks, run_dir}."""
    client = client or docker.from_env(timeout=60)
    found: dict[str, dict] = {}

    def entry(labels: dict) -> dict | None:
        cid = labels.get(LABEL_CLUSTER)
        if not cid:
            return None
        owner = labels.get(LABEL_OWNER, "")
        return found.setdefault(
            cid,
            {
                "owner": owner,
                "alive": owner_alive(owner) if owner else False,
                "containers": [],
                "networks": [],
                "run_dir": labels.get(LABEL_RUN_DIR, ""),
            },
        )

    # Listing inspects each container: one that another harness removes meanwhile is skipped.
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}, ignore_removed=True):
        e = entry(container.labels)
        if e is not None:
            e["containers"].append(f"{container.name} ({container.status})")
    for net in client.networks.list(filters={"label": f"{LABEL}=1"}):
        e = entry(net.attrs.get("Labels") or {})
        if e is not None:
            e["networks"].append(net.name)
    return found


def clean_leftovers(
    client=None,
    *,
    everything: bool = False,
    cluster: str | None = None,
    dry_run: bool = False,
    out: Callable[[str], None] = print,
) -> tuple[int, list[str]]:
    """Remove the containers and networks of clusters whose harness process is gone (every
    cluster with `everything`, or just `cluster`); returns (clusters removed, problems).

    A cluster whose owner runs on this host is spared (another test session is using it); one
    owned by another host is spared unless `everything` (its owner cannot be checked from here).
    """
    client = client or docker.from_env(timeout=60)
    removed = 0
    problems: list[str] = []
    for repo in HOLD_REPOS.values():
        for image in client.images.list(name=repo):
            for ref in image.tags or []:
                if not ref.startswith(repo + ":"):
                    continue
                tag = ref.split(":", 1)[1]
                try:
                    host, pid, start = tag.rsplit("_", 2)
                except ValueError:
                    continue
                # Tags carry a docker-safe host name: compare it with ours made safe the same way.
                same_host = host == hold_tag().rsplit("_", 2)[0]
                alive = owner_alive(f"{socket.gethostname()}:{pid}:{start}") if same_host else None
                if alive or (alive is None and not everything) or cluster is not None:
                    continue
                if dry_run:
                    out(f"would release image hold {ref}")
                else:
                    release_hold(client, tag, repo)
                    out(f"released image hold {ref}")
    for cid, info in sorted(leftovers(client).items()):
        if cluster is not None and cid != cluster:
            continue
        what = ", ".join(info["containers"] + [f"network {n}" for n in info["networks"]]) or "nothing"
        if cluster is None and not everything and info["alive"] is not False:
            reason = "its owner still runs" if info["alive"] else "owned by another host (use --all)"
            out(f"kept {cid}: {reason} ({info['owner']}): {what}")
            continue
        if dry_run:
            out(f"would remove {cid} ({info['owner'] or 'no owner'}): {what}")
            removed += 1
            continue
        problems += remove_cluster(client, cid)
        out(f"removed {cid} ({info['owner'] or 'no owner'}): {what}")
        removed += 1
    return removed, problems
