"""`python -m splitbrain.node --config FILE`: run one protocol node (see node/runtime/runner.py).

Start-up cost matters here: a harness starts every node of a cluster at once, so each process's
CPU time until it serves adds up on a small machine. aiohttp's client module builds two TLS
contexts when it is imported, each parsing the system CA bundle (about 40 ms of CPU together).
A node makes no TLS connection (its admin API is plain HTTP), so the admin server is imported here
with OpenSSL pointed at no CA store (whatever SSL_CERT_FILE/SSL_CERT_DIR say: those contexts
are never used), and the environment is put back right after.
"""

import os
import sys

_CA_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def _import_admin_without_ca_store() -> None:
    saved = {var: os.environ.get(var) for var in _CA_VARS}
    try:
        for var in _CA_VARS:
            os.environ[var] = os.devnull
        import splitbrain.node.runtime.admin  # noqa: F401  (imports aiohttp)
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


if __name__ == "__main__":
    _import_admin_without_ca_store()
    from splitbrain.node.runtime.runner import main

    sys.exit(main())
