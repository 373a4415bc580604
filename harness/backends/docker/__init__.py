"""The docker backend: one container per node, on a bridge network made for each cluster.

By job:

    backend.py   DockerBackend: the engine (local or remote), how nodes and event logs are reached
    images.py    the node image: the ci/images content-hash tag, built when missing, held while in use
    network.py   the cluster's bridge network on a free /24 of 198.18.0.0/15, addresses and ports
    proxies.py   Toxiproxy for TCP links: one proxy per directed link
    cluster.py   DockerCluster: containers, lifecycle, crash detection, log collection, teardown
    files.py     what goes into a container (its config) and comes out (event-log parts, output)
    labels.py    names, labels and the owner of what a cluster puts on the engine
    cleanup.py   removing a cluster by label, and `splitbrain clean` for leftovers of dead harnesses

Every public name of the single module this package replaces (harness/backends/docker.py) is
exported here.
"""

from __future__ import annotations

from .backend import DockerBackend, is_local_engine
from .cleanup import REMOVE_ATTEMPTS, clean_leftovers, leftovers, remove_cluster
from .cluster import CHECK_ALIVE_INTERVAL_S, HEALTH_POLL_S, STATUS_POLL_S, DockerCluster
from .files import CONTAINER_DIR, NODE_UID
from .images import BUILD_TIMEOUT_S, CI_IMAGES, DEFAULT_IMAGE, HOLD_REPO, IMAGE_REPO, ROOT, load_ci_images
from .labels import LABEL, LABEL_CLUSTER, LABEL_NODE, LABEL_OWNER, LABEL_ROLE, LABEL_RUN_DIR, owner_alive, owner_label
from .network import (
    ADMIN_PORT,
    FIRST_NODE_HOST,
    GATEWAY_HOST,
    MAX_NODES,
    NETWORK_ATTEMPTS,
    PROTOCOL_PORT,
    RESERVED_SUBNETS,
    SUBNET_POOL,
    TOXIPROXY_HOST,
)
from .proxies import PROXY_PORT_BASE, TOXIPROXY_PORT

__all__ = [
    "ADMIN_PORT",
    "BUILD_TIMEOUT_S",
    "CHECK_ALIVE_INTERVAL_S",
    "CI_IMAGES",
    "CONTAINER_DIR",
    "DEFAULT_IMAGE",
    "DockerBackend",
    "DockerCluster",
    "FIRST_NODE_HOST",
    "GATEWAY_HOST",
    "HEALTH_POLL_S",
    "HOLD_REPO",
    "IMAGE_REPO",
    "LABEL",
    "LABEL_CLUSTER",
    "LABEL_NODE",
    "LABEL_OWNER",
    "LABEL_ROLE",
    "LABEL_RUN_DIR",
    "MAX_NODES",
    "NETWORK_ATTEMPTS",
    "NODE_UID",
    "PROTOCOL_PORT",
    "PROXY_PORT_BASE",
    "RESERVED_SUBNETS",
    "REMOVE_ATTEMPTS",
    "ROOT",
    "STATUS_POLL_S",
    "SUBNET_POOL",
    "TOXIPROXY_HOST",
    "TOXIPROXY_PORT",
    "clean_leftovers",
    "is_local_engine",
    "leftovers",
    "load_ci_images",
    "owner_alive",
    "owner_label",
    "remove_cluster",
]
