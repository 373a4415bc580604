"""NAKACK2: reliable, per-sender FIFO multicast with NAK retransmission and STABLE (seed 003)."""
