"""GMS: group membership as sans-I/O layers (JGroups' PING/TCPPING, FD_ALL3, MERGE3 and GMS)."""
