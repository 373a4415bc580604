"""JGroups nodes on the docker backend: one JGroups node image container (a JVM) per node.

As for Python nodes (cluster.py): one container per node on the cluster's bridge network, the run
directory bind-mounted (or copied through the engine's archive API), iptables in each node's
namespace for partitions and loss, docker kill/pause/unpause for the lifecycle, and the node's
own fault protocol (above JGroups' transport) for what iptables cannot do (typed drops,
duplicates, delay). What differs:

- the image: `splitbrain-jgroups:<content-hash>` (node/jgroups/Dockerfile, `ci/images jgroups`),
  a JDK, Debian's JGroups jar and the node compiled with javac during the image build;
- addresses: JGroups binds the container's address on the bridge, port 7800, and multicasts to
  the cluster's own group, which crosses the bridge: the multicast TTL is forced to 1 (the default
  stack says 0, which keeps datagrams inside one host's namespace, as on the local backend);
- the configuration is the node contract's JSON (`node.json`); a stack given as an XML file is
  copied beside it (`stack.xml`), since the container cannot read the scenario's folder;
- the jar is the image's: a scenario naming another jar is refused with exit 2 (harness/scenario.py);
- start returns once every node's view lists all of them, and no node leaves the group at the
  end (JGroupsNodes, shared with the local backend).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from splitbrain.node.jgroups import launch

from ..jgroups import JGroupsNodes
from .cluster import DockerCluster
from .files import CONTAINER_DIR

IMAGE_ROOT = "/opt/splitbrain/jgroups"  # node/jgroups/Dockerfile puts build.sh and build/ here
IMAGE_CLASSES = f"{IMAGE_ROOT}/build/classes"
# A multicast TTL of 0 never leaves the sender's network namespace; 1 reaches the bridge's other
# ports and no further. A system property, because JGroups reads it over the stack's own value.
MCAST_TTL_FLAG = "-Djgroups.udp.ip_ttl=1"


class JGroupsDockerCluster(JGroupsNodes, DockerCluster):
    image_kind = "jgroups"

    def _wait_full_view(self) -> None:
        mark = time.monotonic()
        super()._wait_full_view()
        self.timings["full_view_s"] = time.monotonic() - mark
        self.timings["start_s"] = self.timings.get("start_s", 0.0) + self.timings["full_view_s"]

    def jgroups_config(self, stack: str | None) -> dict:
        if stack and Path(stack).is_file():
            stack = f"{CONTAINER_DIR}/stack.xml"
        return super().jgroups_config(stack)

    def _config_files(self, node_dir: Path, config: dict) -> dict[str, str]:
        files = {"node.json": json.dumps(config, indent=1) + "\n"}
        stack = (self.scenario.jgroups or {}).get("stack")
        if stack and Path(stack).is_file():
            files["stack.xml"] = Path(stack).read_text(encoding="utf-8")
        return files

    def _container_command(self, config_path: str) -> dict[str, list[str]]:
        # The node's JVM flags are launch.py's, the same as on the local backend.
        entrypoint = launch.java_argv(launch.DEFAULT_JAR, classes=IMAGE_CLASSES, flags=(MCAST_TTL_FLAG,))
        return {"entrypoint": entrypoint, "command": ["--config", config_path]}
