"""Names that the CLI, the scenario model, the backends and the pytest plugin share, in a module
that imports nothing: the plugin is loaded into every pytest session and must stay light."""

BACKENDS = ("sim", "local", "docker")  # harness.backends.LIVE holds the live ones' factories
INJECTORS = ("auto", "inprocess", "iptables", "toxiproxy")
