"""MCAST: fixed-window reliable multicast with blocking senders and built-in flow control (seed 004)."""
