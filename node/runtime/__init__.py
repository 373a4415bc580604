"""The asyncio shell of a node: transports, bundler, timers, event log, workload and admin API.

In-process:

    from splitbrain.node.runtime import Node, NodeConfig
    node = Node(NodeConfig.from_dict({"name": "A", "bind": "127.0.0.2:0", "admin": "127.0.0.2:0",
                                      "peers": {"B": "127.0.0.3:7800"}, "event_log": False}))
    await node.start()          # binds; node.bind_address / node.admin_address hold the real ports
    node.start_stream("B", count=1000, rate=0)
    await node.stop()           # graceful: final window events, node_stop, flush, close

As a process: `python -m splitbrain.node --config FILE` (see node/__main__.py), which calls `run()`.
"""

from .config import Address, ConfigError, NodeConfig, load_config
from .errors import RequestError
from .node import Node
from .runner import main, run

__all__ = ["Address", "ConfigError", "Node", "NodeConfig", "RequestError", "load_config", "main", "run"]
