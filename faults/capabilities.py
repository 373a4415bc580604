"""Which fault injectors work on this host, and why not when they do not.

    from splitbrain.faults.capabilities import capabilities
    for name, available, detail in capabilities():
        ...

Every answer comes from a trial where one is possible (a qdisc added, a rule inserted, a queue
bound, all inside one throwaway network namespace that is deleted afterwards), not from version
numbers; what the kernel config and module lists say is added to the detail. Each "no" carries a
reason a person can act on. `python -m splitbrain.faults.capabilities` prints the table (for `splitbrain
doctor`, which wires this in). The whole check takes about a second and never raises: a probe that
fails unexpectedly is reported as unavailable with the exception text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

from . import netem
from .iptables import flavour_of
from .netns import Lab, PrefixRunner, can_make_namespaces, host
from .nfqueue import PROJECT_ROOT, netfilterqueue_importable

Capability = tuple[str, bool, str]
NODE_IMAGE = "splitbrain-node:latest"


def _safe(name: str, probe: Callable[[], Capability]) -> Capability:
    try:
        return probe()
    except Exception as exc:  # a broken probe is a "no", never a crash of doctor
        return name, False, f"probe failed: {type(exc).__name__}: {exc}"


# ---- kernel-side probes (inside a throwaway namespace) ---------------------------------------------------


def _iptables(runner: PrefixRunner) -> list[Capability]:
    out = []
    version = runner(["iptables", "--version"], timeout_s=10)
    if not version.ok:
        return [("iptables", False, f"iptables not usable: {version.message} (apt-get install iptables)")]
    flavour = flavour_of(runner)
    text = version.stdout.strip()
    others = [b for b in ("iptables-legacy", "iptables-nft", "nft") if shutil.which(b)]
    drop = runner(
        [
            "iptables",
            "-w",
            "5",
            "-I",
            "INPUT",
            "-s",
            "198.18.0.9",
            "-m",
            "comment",
            "--comment",
            "splitbrain:probe:drop",
            "-j",
            "DROP",
        ],
        timeout_s=10,
    )
    if drop.ok:
        out.append(
            (
                "iptables",
                True,
                f"{text}: DROP with comment works in a namespace ({flavour}; "
                f"also on PATH: {', '.join(others) or 'nothing else'})",
            )
        )
    else:
        out.append(("iptables", False, f"{text}: cannot add a rule: {drop.message}"))
    stat = runner(
        [
            "iptables",
            "-w",
            "5",
            "-I",
            "INPUT",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.5",
            "-s",
            "198.18.0.9",
            "-j",
            "DROP",
        ],
        timeout_s=10,
    )
    out.append(
        (
            "iptables-statistic",
            stat.ok,
            "random loss with -m statistic works" if stat.ok else f"-m statistic not available: {stat.message}",
        )
    )
    return out


def _nft() -> Capability:
    path = shutil.which("nft")
    if not path:
        return "nft", False, "nft is not on PATH (apt-get install nftables); iptables-nft covers the same rules"
    version = host(10)(["nft", "--version"])
    return "nft", version.ok, version.stdout.strip() or version.message


def _qdiscs(runner: PrefixRunner) -> list[Capability]:
    out = []
    for kind in ("netem", "tbf", "htb"):
        ok, why = netem.probe_qdisc(kind, runner)
        notes = []
        config = netem.kernel_config(netem.KCONFIG[kind])
        if config is not None:
            notes.append(f"{netem.KCONFIG[kind]} {config}")
        if kind == "netem":
            notes.append("sch_netem: " + netem.module_hint("sch_netem"))
            if not ok:
                notes.append("delay/jitter on UDP: nfqueue below, or the in-process fault layer")
        out.append((kind, ok, "; ".join([why, *notes])))
    return out


def _nfqueue(lab: Lab, ns: str) -> Capability:
    ok, lib = netfilterqueue_importable()
    if not ok:
        return "nfqueue", False, lib + "; delay comes from the in-process fault layer"
    rule = lab.run(
        ns,
        [
            "iptables",
            "-w",
            "5",
            "-I",
            "INPUT",
            "-p",
            "udp",
            "-s",
            "198.18.0.9",
            "-j",
            "NFQUEUE",
            "--queue-num",
            "4199",
            "--queue-bypass",
        ],
    )
    if not rule.ok:
        return "nfqueue", False, f"the kernel's NFQUEUE target is missing: {rule.message}"
    # Bind a queue for real, in the namespace, with the delayer itself.
    proc = lab.runner(ns).popen(
        [
            sys.executable,
            "-m",
            "splitbrain.faults.delayer",
            "--queue",
            "4199",
            "--delay-ms",
            "1",
            "--duration-s",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=_env_with_project(),
    )
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "nfqueue", False, "the delayer did not answer within 15 s"
    first = (out.splitlines() or ["{}"])[0]
    try:
        ready = json.loads(first).get("ready")
    except ValueError:
        ready = False
    if not ready:
        return "nfqueue", False, f"cannot bind a queue: {first or err.strip()}"
    return "nfqueue", True, f"NFQUEUE target + {lib}: UDP delay/jitter via python -m splitbrain.faults.delayer"


def _env_with_project() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def kernel_capabilities() -> list[Capability]:
    can, why = can_make_namespaces()
    out: list[Capability] = [("netns", can, why)]
    if not can:
        reason = f"not tried: {why}"
        det = netem.detect_qdisc("netem")
        out += [
            ("iptables", bool(shutil.which("iptables")), reason),
            ("iptables-statistic", False, reason),
            ("netem", det.available, det.detail),
            ("tbf", False, reason),
            ("htb", False, reason),
            ("nfqueue", False, reason + "; delay comes from the in-process fault layer"),
        ]
        return out
    with Lab(prefix="sbxprobe") as lab:
        ns = lab.add()
        runner = lab.runner(ns)
        out += _iptables_safe(runner)
        out += _qdiscs_safe(runner)
        out.append(_safe("nfqueue", lambda: _nfqueue(lab, ns)))
    return out


def _iptables_safe(runner) -> list[Capability]:
    try:
        return _iptables(runner)
    except Exception as exc:
        return [("iptables", False, f"probe failed: {exc}")]


def _qdiscs_safe(runner) -> list[Capability]:
    try:
        return _qdiscs(runner)
    except Exception as exc:
        return [(k, False, f"probe failed: {exc}") for k in ("netem", "tbf", "htb")]


# ---- containers and proxies ------------------------------------------------------------------------------


def _docker() -> Capability:
    try:
        import docker  # the SDK
    except ImportError:
        sdk = None
    else:
        sdk = docker
    if sdk is not None:
        try:
            client = sdk.from_env(timeout=10)
            try:
                info = client.version()
            finally:
                client.close()
            return "docker", True, f"engine {info.get('Version')} (API {info.get('ApiVersion')}) via the docker SDK"
        except Exception as exc:
            return "docker", False, f"no Docker engine reachable: {exc}"
    if shutil.which("docker"):
        proc = host(15)(["docker", "version", "--format", "{{.Server.Version}}"])
        if proc.ok:
            return "docker", True, f"engine {proc.stdout.strip()} via the docker CLI (the docker SDK is not installed)"
        return "docker", False, f"no Docker engine reachable: {proc.message}"
    return "docker", False, "neither the docker SDK nor the docker CLI is installed"


def _compose() -> Capability:
    if shutil.which("docker"):
        v2 = host(15)(["docker", "compose", "version", "--short"])
        if v2.ok:
            return "docker-compose", True, f"docker compose {v2.stdout.strip()} (v2 plugin)"
    if shutil.which("docker-compose"):
        v1 = host(15)(["docker-compose", "version", "--short"])
        if v1.ok:
            return "docker-compose", True, f"docker-compose {v1.stdout.strip()} (v1)"
        return "docker-compose", False, f"docker-compose does not run: {v1.message}"
    return "docker-compose", False, "no `docker compose` plugin and no docker-compose"


def _node_image() -> Capability:
    if not shutil.which("docker"):
        return "node-image", False, "no docker CLI"
    proc = host(15)(
        [
            "docker",
            "image",
            "inspect",
            NODE_IMAGE,
            "--format",
            '{{index .Config.Labels "splitbrain.content-hash"}} {{.Id}}',
        ]
    )
    if not proc.ok:
        return "node-image", False, f"{NODE_IMAGE} is not built: run ci/images"
    content, _, image_id = proc.stdout.strip().partition(" ")
    return (
        "node-image",
        True,
        (f"{NODE_IMAGE} = content hash {content}, {image_id[7:19]} (`ci/images status` tells whether it is current)"),
    )


def _toxiproxy() -> list[Capability]:
    real = shutil.which("toxiproxy-server")
    if real:
        version = host(10)([real, "-version"])
        real_cap = ("toxiproxy-server", True, f"{real} {version.stdout.strip() or version.stderr.strip()}")
    else:
        real_cap = (
            "toxiproxy-server",
            False,
            "not on PATH (in no reachable package registry); our own compatible server is used",
        )
    try:
        import splitbrain.faults.toxiproxy  # noqa: F401

        own = (
            "toxiproxy-compatible",
            True,
            "python -m splitbrain.faults.toxiproxy (same REST API, toxiproxy-python client)",
        )
    except Exception as exc:
        own = ("toxiproxy-compatible", False, f"faults.toxiproxy does not import: {exc}")
    return [real_cap, own]


def capabilities(*, kernel: bool = True, containers: bool = True) -> list[Capability]:
    """(name, available, detail) for every injector and the tools they rest on."""
    out: list[Capability] = []
    if kernel:
        try:
            out += kernel_capabilities()
        except Exception as exc:
            out.append(("netns", False, f"probe failed: {exc}"))
        out.append(_safe("nft", _nft))
    if containers:
        out.append(_safe("docker", _docker))
        out.append(_safe("docker-compose", _compose))
        out.append(_safe("node-image", _node_image))
    out += _toxiproxy()
    return out


def main() -> int:
    rows = capabilities()
    width = max(len(name) for name, _, _ in rows)
    for name, ok, detail in rows:
        print(f"{name:<{width}}  {'yes' if ok else 'no ':3}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
