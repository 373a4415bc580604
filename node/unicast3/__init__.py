"""UNICAST3 (the UNICAST3 design) with SYNC (the SYNC design) and the two resync variants JGroups used instead."""

from .config import RESYNC_MODES, Unicast3Config
from .header import PROTO_ID, MsgType, U3Header
from .protocol import Unicast3

__all__ = ["PROTO_ID", "RESYNC_MODES", "MsgType", "U3Header", "Unicast3", "Unicast3Config"]
