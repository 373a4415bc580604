"""Names and labels of what a cluster puts on the engine, and who owns it.

A cluster id `sb<8 hex>` is drawn per cluster, so two test sessions (pytest-xdist workers, two
terminals) never collide: network `sb<id>`, containers `sb<id>-<node>-<incarnation>` and
`sb<id>-toxiproxy`. Everything carries the labels `splitbrain=1`, `splitbrain.cluster=<id>`,
`splitbrain.role` and `splitbrain.owner=<host>:<pid>:<start time>` of the harness process, which is
what `splitbrain clean` (harness/backends/docker/cleanup.py) uses to remove what a killed harness
left behind while sparing clusters whose owner still runs.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

LABEL = "splitbrain"
LABEL_CLUSTER = "splitbrain.cluster"
LABEL_ROLE = "splitbrain.role"
LABEL_NODE = "splitbrain.node"
LABEL_OWNER = "splitbrain.owner"
LABEL_RUN_DIR = "splitbrain.run-dir"


def _process_start_time(pid: int) -> str:
    """The start time of a process in clock ticks since boot (Linux), '' when unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_label() -> str:
    """<host>:<pid>:<start time> of this process: who owns a cluster (for `splitbrain clean`)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start_time(os.getpid())}"


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host; None for one on another host (cannot tell)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return None
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if not Path(f"/proc/{pid}").exists():
        return False
    return not start or _process_start_time(pid) == start
