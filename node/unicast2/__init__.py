"""UNICAST2 (the UNICAST2 design): receiver-driven reliable unicast, the baseline UNICAST3 replaced."""

from .config import Unicast2Config
from .header import PROTO_ID, MsgType, U2Header
from .protocol import Unicast2

__all__ = ["PROTO_ID", "MsgType", "U2Header", "Unicast2", "Unicast2Config"]
