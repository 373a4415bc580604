"""NAKACK2: reliable, per-sender FIFO multicast with NAK retransmission and STABLE (the NAKACK2 design)."""
