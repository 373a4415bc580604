"""splitbrain faults: everything that breaks a network (in-process rules, Toxiproxy, iptables, netem)."""
