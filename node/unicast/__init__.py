"""The original UNICAST (JGroups before UNICAST2): sender-driven reliable unicast, kept for the
bug museum (the UNICAST2 design's motivation)."""

from .config import UnicastConfig
from .header import PROTO_ID, MsgType, U1Header
from .protocol import Unicast

__all__ = ["PROTO_ID", "MsgType", "U1Header", "Unicast", "UnicastConfig"]
