# The splitbrain node image: one protocol node per container, `python -m splitbrain.node`.
#
#   ci/images node                       build it here, offline, on the local Debian base
#   docker build --build-arg BASE_IMAGE=python:3.11-slim .   where a registry is reachable
#
# The build context needs wheelhouse/image/{deps,project} (made by `ci/images wheels`): the project
# is installed from that wheelhouse with --no-index, so the build itself needs no network. It uses
# nothing BuildKit-only, so the legacy builder (docker without buildx) builds it too.
#
# Privileges: the daemon runs as the unprivileged user `splitbrain`. Fault injectors need root
# *inside* the container's network namespace, so they run as `docker exec -u root <c> iptables ...`
# (or `tc`), which works when the container was started with `cap_add: [NET_ADMIN]`; the node
# process itself never holds NET_ADMIN (a non-root process gets no effective capabilities). The
# other route, `nsenter -t <pid> -n` from the host, needs neither the capability nor the tools in
# the image; faults/netns.py offers both.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS base
# iproute2 and iptables for the fault injectors. The local base (ci/images base) already has them,
# so this installs nothing there and needs no network; python:*-slim gets them from its apt.
RUN set -eu; \
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null || ! command -v iptables >/dev/null; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 iptables; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), "need Python >= 3.11, base has " + sys.version'

FROM base AS deps
LABEL splitbrain=build-stage
# The dependencies in a virtualenv of their own stage: rebuilt only when the dependency wheels change.
COPY wheelhouse/image/deps /wheels/deps
RUN python3 -m venv /opt/splitbrain \
 && /opt/splitbrain/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
        --find-links /wheels/deps -r /wheels/deps/requirements.txt

FROM base
# Metadata first: with the legacy builder every instruction costs a container commit (2-5 s on
# this machine's fuse-overlayfs), so the ones that never change sit before anything that does.
LABEL splitbrain=node
ENV PATH=/opt/splitbrain/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# 7800: the protocol transport (UDP or TCP); 7900: the admin API.
EXPOSE 7800/udp 7800/tcp 7900/tcp
# GET /health on the admin API: SPLITBRAIN_ADMIN (a wildcard host is asked on 127.0.0.1), else
# 127.0.0.1:7900; HEALTHCHECK_URL overrides both. urllib raises on a refused connection or an
# HTTP error status, so the exit code is the verdict.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; a = os.environ.get('SPLITBRAIN_ADMIN') or '127.0.0.1:7900'; h, _, p = a.rpartition(':'); h = '127.0.0.1' if h in ('0.0.0.0', '', '[::]') else h; u.urlopen(os.environ.get('HEALTHCHECK_URL') or f'http://{h}:{p}/health', timeout=2)"]
# Configuration: `--config FILE` (mount it) and/or SPLITBRAIN_<KEY> environment variables.
ENTRYPOINT ["python", "-m", "splitbrain.node"]
CMD []
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/splitbrain --create-home \
        --shell /usr/sbin/nologin splitbrain \
 && mkdir -p /var/lib/splitbrain/events /etc/splitbrain \
 && chown splitbrain:splitbrain /var/lib/splitbrain/events
WORKDIR /var/lib/splitbrain
COPY --from=deps /opt/splitbrain /opt/splitbrain
# The project last, so that a source change rebuilds only these few small layers. --no-index with
# the dependencies already installed: pip checks they satisfy the project's requirements.
COPY wheelhouse/image/project /wheels/project
RUN /opt/splitbrain/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
        --find-links /wheels/project 'splitbrain[fast]' \
 && /opt/splitbrain/bin/python -c 'import splitbrain.node.runtime.runner, splitbrain.faults'
USER splitbrain
