"""The node image, its offline build (ci/images) and the compose cluster.

Tests that need a Docker engine carry the `docker` marker and skip, with the reason, only when no
engine is reachable. The image is built (or found current) once per session by `ci/images`; that
takes a few minutes on an engine with no images (base about 40 s, node about 100 s here) and well
under a second when current. Every container and network a test makes is labelled `splitbrain`
(plus a per-test id) and removed in `finally`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILES = ["-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "docker-compose.local.yml")]
BUILD_TIMEOUT_S = 1500
HEALTHY_TIMEOUT_S = 90


def load_ci_images():
    """ci/images is a script without .py: load it as a module to reach its hash functions."""
    loader = importlib.machinery.SourceFileLoader("ci_images", str(ROOT / "ci" / "images"))
    spec = importlib.util.spec_from_loader("ci_images", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ci_images = load_ci_images()


# ---- engine and tools --------------------------------------------------------------------------------


def _engine() -> tuple[object | None, str]:
    try:
        import docker
    except ImportError:
        return None, "the docker SDK is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        return client, ""
    except Exception as exc:
        return None, f"no Docker engine reachable: {exc}"


def compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) where it exists, else `docker-compose` (v1), else None."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.fixture(scope="session")
def docker_client():
    client, why = _engine()
    if client is None:
        pytest.skip(why)
    yield client
    client.close()


@pytest.fixture(scope="session")
def node_image(docker_client):
    """Build the base and node images when missing or stale; the current tag."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "images"), "all"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"ci/images all failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    tag = f"{ci_images.NODE_REPO}:{ci_images.content_hash()}"
    return {"tag": tag, "build_s": time.monotonic() - started, "log": proc.stdout}


def unique(prefix: str) -> str:
    return f"{prefix}{os.getpid()}{uuid.uuid4().hex[:6]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(containers, timeout_s: float = HEALTHY_TIMEOUT_S) -> dict:
    """Poll until every container's health is 'healthy'; fail with states and log tails otherwise."""
    deadline = time.monotonic() + timeout_s
    states: dict = {}
    for _ in range(int(timeout_s / 0.5) + 1):
        states = {}
        for c in containers:
            c.reload()
            health = (c.attrs.get("State", {}).get("Health") or {}).get("Status")
            states[c.name] = health or c.status
        if all(s == "healthy" for s in states.values()):
            return states
        if any(s in ("exited", "dead", "unhealthy") for s in states.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    tails = {c.name: c.logs(tail=15).decode(errors="replace") for c in containers}
    pytest.fail(
        f"not all healthy within {timeout_s} s: {states}\n" + "\n".join(f"--- {n}\n{t}" for n, t in tails.items())
    )


# ---- content hash (no engine needed) -------------------------------------------------------------------------


def test_content_hash_is_stable_and_tracks_content(tmp_path):
    """Same content -> same hash (any path, any order of listing); one changed byte -> another hash."""
    first = ci_images.content_hash()
    assert first == ci_images.content_hash() and len(first) == 16
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "splitbrain/__init__.py"):
        (copy / name).parent.mkdir(exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    for package in ci_images.PACKAGES:
        if (ROOT / package).is_dir():
            shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert ci_images.content_hash(copy) == first
    # Caches do not count; sources do.
    (copy / "node" / "__pycache__").mkdir(exist_ok=True)
    (copy / "node" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert ci_images.content_hash(copy) == first
    (copy / "Dockerfile").write_text((copy / "Dockerfile").read_text() + "\n# changed\n")
    assert ci_images.content_hash(copy) != first


def test_jgroups_content_hash_tracks_the_java_node_only(tmp_path):
    """The JGroups node image's hash covers the Java sources, build.sh and its Dockerfile, not the
    Python packages: a Python change leaves it (and the JGroups image) alone, a Java change does not."""
    first = ci_images.content_hash(kind="jgroups")
    assert first != ci_images.content_hash()
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "node", copy / "node", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build"))
    shutil.copy2(ROOT / ".dockerignore", copy / ".dockerignore")
    assert ci_images.content_hash(copy, kind="jgroups") == first
    (copy / "node" / "protocols.py").write_text("# changed\n")
    assert ci_images.content_hash(copy, kind="jgroups") == first
    java = next((copy / "node" / "jgroups" / "java").rglob("Node.java"))
    java.write_text(java.read_text() + "\n// changed\n")
    assert ci_images.content_hash(copy, kind="jgroups") != first


def test_the_build_context_holds_the_java_node_sources():
    """.dockerignore lets node/jgroups/Dockerfile see the sources and build.sh, never built classes."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!node/jgroups/java/" in lines and "!node/jgroups/build.sh" in lines
    assert not any(line.startswith("!node/jgroups/build/") or line == "!node/jgroups/" for line in lines)


def test_jgroups_base_recipe_has_a_jdk_and_the_jar_and_no_python():
    """The JGroups base: javac for the image build, Debian's JGroups 2.12.2, iptables; a hash of its own."""
    include = ci_images.JGROUPS_BASE_RECIPE["include"]
    assert {"openjdk-17-jdk-headless", "libjgroups-java", "iptables"} <= set(include)
    assert not any(p.startswith("python3") for p in include)
    assert ci_images.recipe_hash(ci_images.JGROUPS_BASE_RECIPE) != ci_images.recipe_hash()


def test_base_recipe_hash_is_stable():
    """The base image is rebuilt only when its recipe changes: the recipe hash is deterministic."""
    assert ci_images.recipe_hash() == ci_images.recipe_hash()
    assert "python3" in ci_images.BASE_RECIPE["include"] and "iptables" in ci_images.BASE_RECIPE["include"]


def test_wheel_platforms_fit_debian_bookworm():
    """Debian bookworm's glibc is 2.36: no wheel may need a newer one."""
    newest = max(int(p.split("_")[2]) for p in ci_images.WHEEL_PLATFORMS if p.startswith("manylinux_2_"))
    assert newest <= 36


def test_compose_config_validates():
    """docker-compose.yml alone and with the local override are valid compose files."""
    compose = compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    env = dict(os.environ, SPLITBRAIN_NET="198.18.77", SPLITBRAIN_ADMIN_TOKEN="compose-test")
    for files in (["-f", str(ROOT / "docker-compose.yml")], COMPOSE_FILES):
        proc = subprocess.run(
            [*compose, *files, "config"], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stderr
        assert "node-a" in proc.stdout and "toxiproxy" in proc.stdout
    merged = subprocess.run(
        [*compose, *COMPOSE_FILES, "config"], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    ).stdout
    assert "ghcr.io/shopify/toxiproxy" not in merged and "splitbrain.faults.toxiproxy" in merged
    # No default token: without one the compose file says which variable to set.
    env.pop("SPLITBRAIN_ADMIN_TOKEN")
    unset = subprocess.run(
        [*compose, *COMPOSE_FILES, "config"], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert unset.returncode != 0 and "set SPLITBRAIN_ADMIN_TOKEN" in unset.stderr, unset.stderr


# ---- with an engine ---------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_image_builds_or_is_current(docker_client, node_image):
    """ci/images leaves splitbrain-node:<content-hash> current, labelled, and :latest on it; a rerun builds nothing."""
    image = docker_client.images.get(node_image["tag"])
    assert image.labels.get("splitbrain.content-hash") == node_image["tag"].rsplit(":", 1)[1]
    assert docker_client.images.get(f"{ci_images.NODE_REPO}:latest").id == image.id
    config = image.attrs["Config"]
    assert config["User"] == "splitbrain" and config["Entrypoint"] == ["python", "-m", "splitbrain.node"]
    assert "Healthcheck" in config
    again = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "images"), "node"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert again.returncode == 0 and "node image is current" in again.stdout, again.stdout
    status = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "images"), "status"], capture_output=True, text=True, timeout=60
    )
    assert status.stdout.count("current") >= 2, status.stdout
    print(f"image build (or check) took {node_image['build_s']:.1f} s")


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_jgroups_image_builds_or_is_current_and_runs_the_node(docker_client, node_image):
    """ci/images all also leaves splitbrain-jgroups:<content-hash> current: no Python, a JRE, the
    Debian jar and the node's classes compiled in the image; the node answers --help in it."""
    tag = f"{ci_images.JGROUPS_REPO}:{ci_images.content_hash(kind='jgroups')}"
    image = docker_client.images.get(tag)
    assert image.labels.get("splitbrain.content-hash") == tag.rsplit(":", 1)[1]
    assert image.attrs["Config"]["User"] == "splitbrain"
    out = docker_client.containers.run(
        tag,
        entrypoint=[
            "sh",
            "-c",
            "command -v python3 || echo no-python; ls /usr/share/java/jgroups.jar; "
            "ls /opt/splitbrain/jgroups/build/classes/splitbrain/jgroups/Node.class; "
            "java -cp /opt/splitbrain/jgroups/build/classes:/usr/share/java/jgroups.jar "
            "splitbrain.jgroups.Node --help",
        ],
        labels={"splitbrain": "1", "splitbrain.test": unique("jgimg")},
        remove=True,
    ).decode()
    assert "no-python" in out and "Node.class" in out and "usage: Node --config" in out, out
    again = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "images"), "jgroups"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert again.returncode == 0 and "JGroups node image is current" in again.stdout, again.stdout


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT_S + 180)
def test_container_starts_healthy_unprivileged_with_root_faults(docker_client, node_image):
    """A node container on its own labelled network becomes healthy; it runs as non-root, and
    `docker exec -u root` can still apply iptables (NET_ADMIN by capability)."""
    from splitbrain.faults.iptables import Host, IptablesFaults
    from splitbrain.faults.netns import docker_exec

    test_id = unique("sbimg")
    net_prefix = f"198.18.{random.randint(100, 250)}"
    network = container = None
    try:
        import docker

        network = docker_client.networks.create(
            test_id,
            driver="bridge",
            labels={"splitbrain": "test", "splitbrain.test": test_id},
            ipam=docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=f"{net_prefix}.0/24")]),
        )
        container = docker_client.containers.create(
            node_image["tag"],
            name=test_id,
            labels={"splitbrain": "test", "splitbrain.test": test_id},
            cap_add=["NET_ADMIN"],
            init=True,
            network=network.name,
            environment={
                "SPLITBRAIN_NAME": "A",
                "SPLITBRAIN_BIND": "0.0.0.0:7800",
                "SPLITBRAIN_ADMIN": "0.0.0.0:7900",
                "SPLITBRAIN_EVENTS": "/var/lib/splitbrain/events/A.jsonl",
                "SPLITBRAIN_PEERS": f"B={net_prefix}.99:7800",
                "SPLITBRAIN_ADMIN_TOKEN": test_id,
            },
        )
        container.start()
        wait_healthy([container])
        code, out = container.exec_run(["id", "-u"])
        assert code == 0 and out.decode().strip() == "10001"
        code, out = container.exec_run(
            [
                "python",
                "-c",
                "import urllib.request as u, json; print(json.load(u.urlopen('http://127.0.0.1:7900/health'))['node'])",
            ]
        )
        assert code == 0 and out.decode().strip() == "A", out
        container.reload()
        address = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        assert address.startswith(net_prefix + ".")
        # B is a peer that does not exist: the rule is what is checked here, not delivery.
        faults = IptablesFaults(
            [
                Host("A", address, docker_exec(container.name)),
                Host("B", f"{net_prefix}.99", docker_exec(container.name)),
            ],
            run_id=test_id,
        )
        try:
            faults.partition("B", "A", one_way=True)
            assert len(Host("A", "127.0.0.1", docker_exec(container.name)).iptables.tagged()) == 1
        finally:
            faults.cleanup()
        assert Host("A", "127.0.0.1", docker_exec(container.name)).iptables.tagged() == []
    finally:
        if container is not None:
            container.remove(force=True)
        if network is not None:
            network.remove()
    assert not docker_client.containers.list(all=True, filters={"label": f"splitbrain.test={test_id}"})
    assert not docker_client.networks.list(filters={"label": f"splitbrain.test={test_id}"})


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
def test_compose_up_local_brings_a_healthy_cluster_and_down_removes_it(docker_client, node_image):
    """`compose up` with the local override: 3 healthy nodes + the toxiproxy service; `down` leaves nothing."""
    compose = compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    project = unique("sbcompose")
    api_port = free_port()
    env = dict(
        os.environ,
        SPLITBRAIN_NET=f"198.18.{random.randint(100, 250)}",
        SPLITBRAIN_TOXIPROXY_PORT=str(api_port),
        SPLITBRAIN_NODE_IMAGE=node_image["tag"],
        COMPOSE_PROJECT_NAME=project,
        SPLITBRAIN_ADMIN_TOKEN=project,
    )
    base = [*compose, "-p", project, *COMPOSE_FILES]
    label = f"com.docker.compose.project={project}"
    try:
        started = time.monotonic()
        up = subprocess.run(
            [*base, "up", "-d", "--no-build"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        assert up.returncode == 0, up.stderr
        containers = docker_client.containers.list(all=True, filters={"label": label})
        services = sorted(c.labels["com.docker.compose.service"] for c in containers)
        assert services == ["node-a", "node-b", "node-c", "toxiproxy"]
        wait_healthy(containers)
        print(f"compose cluster healthy in {time.monotonic() - started:.1f} s")
        for c in containers:
            assert c.labels.get("splitbrain") == "compose"
        with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/version", timeout=5) as resp:
            assert resp.status == 200
        node_a = next(c for c in containers if c.labels["com.docker.compose.service"] == "node-a")
        admin = node_a.ports["7900/tcp"][0]
        with urllib.request.urlopen(f"http://127.0.0.1:{admin['HostPort']}/health", timeout=5) as resp:
            assert json.load(resp)["node"] == "A"
        # The token from the environment is in force: a mutating request without it is refused.
        view = urllib.request.Request(
            f"http://127.0.0.1:{admin['HostPort']}/view",
            data=b'{"members": ["A"]}',
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(view, timeout=5)
        assert refused.value.code == 401
    finally:
        down = subprocess.run(
            [*base, "down", "-v", "--remove-orphans", "-t", "5"],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        leftovers = docker_client.containers.list(all=True, filters={"label": label})
        for c in leftovers:
            c.remove(force=True)
        for n in docker_client.networks.list(filters={"label": label}):
            n.remove()
    assert down.returncode == 0, down.stderr
    assert not leftovers, [c.name for c in leftovers]
    assert not docker_client.networks.list(filters={"label": label})


def test_the_wheelhouse_build_adds_pip_to_a_venv_made_without_it(tmp_path):
    """ci/setup makes .venv without pip (uv installs there); the image's wheelhouse needs pip."""
    images = load_ci_images()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0
    images.ensure_pip(python)
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0
