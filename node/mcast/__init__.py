"""MCAST: fixed-window reliable multicast with blocking senders and built-in flow control (the MCAST design)."""
