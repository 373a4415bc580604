"""splitbrain protocol node: wire format, sans-I/O protocol layers, stack composition."""
