"""`splitbrain doctor`: what this host can run, each line with its reason."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from splitbrain.harness.commands.common import EXIT_OK


def add(subparsers) -> None:
    """The `doctor` command."""
    doctor = subparsers.add_parser(
        "doctor",
        help="report which backends and fault injectors can run here, and why not",
        description="Report the Python version, which backends can run here, which network "
        "fault tools work here (iptables, tc netem, tc tbf/htb, the NFQUEUE delayer, toxiproxy-server; "
        "each tried in a throwaway network namespace where root allows), and whether IP multicast "
        "works here; each line says why not.",
        epilog="Always exits 0: it reports, it does not judge.",
    )
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    print(f"python: {platform.python_version()} ({sys.executable})")
    for name, (ok, why) in doctor_report().items():
        print(f"{name}: {'yes' if ok is True else ok if isinstance(ok, str) else 'no'} ({why})")
    return EXIT_OK


def doctor_report() -> dict[str, tuple[bool | str, str]]:
    """What this host can run: name -> (yes/no or a word, why)."""
    report: dict[str, tuple[bool | str, str]] = {}
    missing = [
        m
        for m in (
            "splitbrain.node.compose",
            "splitbrain.node.wire",
            "splitbrain.node.faultlayer",
            "splitbrain.harness.checks",
        )
        if not _importable(m)
    ]
    report["backend sim"] = (
        (True, "in-process simulator") if not missing else (False, f"missing modules: {', '.join(missing)}")
    )
    from splitbrain.harness.backends.local import LocalBackend

    report["backend local"] = LocalBackend().check()
    report["backend docker"] = _docker_backend_status()
    report.update(_fault_tools())
    report["spark pipeline"] = _spark_status()
    report["protocols"] = _protocols_status()
    from splitbrain.harness.mcastprobe import ip_multicast_status

    report["ip multicast"] = ip_multicast_status()
    report["jgroups"] = _jgroups_status()
    report["jgroups image"] = _jgroups_image_status()
    return report


def _jgroups_status() -> tuple[bool | str, str]:
    """JGroups nodes (protocol: jgroups) need the JGroups jar and a JDK (javac builds the node)."""
    from splitbrain.node.jgroups.launch import DEFAULT_JAR, runtime_problem

    why = runtime_problem()
    if why:
        return False, why
    return True, f"{DEFAULT_JAR} and javac found (protocol: jgroups on --backend local; docker runs the jgroups image)"


def _jgroups_image_status() -> tuple[bool | str, str]:
    """JGroups nodes on --backend docker run the JGroups node image (ci/images jgroups)."""
    try:
        from splitbrain.harness.backends.docker import DockerBackend
    except ImportError:
        return False, _docker_status()
    return DockerBackend().check_jgroups_image()


def _protocols_status() -> tuple[bool | str, str]:
    """The registered protocols (a scenario's `protocol:`), the membership protocols (its
    `membership:`)."""
    from splitbrain.node.protocols import RegistryError, membership_names, names

    try:
        known = names()
        membership = membership_names()
    except RegistryError as exc:
        return False, str(exc)
    listed = ", ".join(known) + (f"; membership: static, {', '.join(membership)}" if membership else "")
    return listed, "registered, `splitbrain protocols` lists their settings"


def _spark_status() -> tuple[bool, str]:
    """analyze/campaign need pyspark (the `pipeline` extra) and a Java runtime for its JVM."""
    try:
        import pyspark
    except ImportError:
        return False, "pyspark not installed (pip install 'splitbrain[pipeline]')"
    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin"))
        if os.environ.get("JAVA_HOME")
        else shutil.which("java")
    )
    if not java:
        return False, f"pyspark {pyspark.__version__}, but no java on PATH or in JAVA_HOME (Spark 4 needs Java 17+)"
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
        version = (proc.stderr or proc.stdout).splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        return False, f"pyspark {pyspark.__version__}, but {java} -version failed: {exc}"
    return True, f"pyspark {pyspark.__version__}, {version} ({java})"


def _docker_backend_status() -> tuple[bool, str]:
    try:
        from splitbrain.harness.backends.docker import DockerBackend
    except ImportError:
        return False, _docker_status()
    ok, why = DockerBackend().check()
    if ok:
        runner = DockerBackend().iptables_runner
        why += f"; iptables faults via {'nsenter' if runner == 'nsenter' else 'docker exec -u root'}"
    return ok, why


def _docker_status() -> str:
    try:
        import docker
    except ImportError:
        sdk = "docker SDK (python package docker) not installed"
    else:
        try:
            client = docker.from_env(timeout=5)
            client.ping()
            version = client.version().get("Version", "?")
            client.close()
            return f"docker SDK installed, engine {version} reachable"
        except Exception as exc:  # the SDK raises several kinds for an absent engine
            return f"docker SDK installed, engine not reachable ({type(exc).__name__}: {str(exc)[:120]})"
    cli = shutil.which("docker")
    sock = Path("/var/run/docker.sock")
    engine = f"engine socket {sock} {'present' if sock.exists() else 'absent'}"
    return f"{sdk}; docker CLI {'at ' + cli if cli else 'not on PATH'}; {engine}"


def _fault_tools() -> dict[str, tuple[bool | str, str]]:
    """The network fault tools, as faults/capabilities.py finds them by trying each one in a
    throwaway namespace: iptables (drops, random loss), tc netem, tc tbf/htb, the NFQUEUE delayer
    and toxiproxy-server."""
    from splitbrain.faults.capabilities import capabilities

    rows = {name: (ok, detail) for name, ok, detail in capabilities(containers=False)}

    def row(name: str) -> tuple[bool, str]:
        return rows.get(name, (False, "not probed"))

    iptables, loss = row("iptables"), row("iptables-statistic")
    tbf, htb = row("tbf"), row("htb")
    real, own = row("toxiproxy-server"), row("toxiproxy-compatible")
    # netem, tbf/htb and the delayer are the faults package's own (faults/netem.py,
    # faults/nfqueue.py); no backend's injector applies them yet, and the line says so.
    unwired = "; no backend's injector uses it yet"
    netem, nfqueue = row("netem"), row("nfqueue")
    return {
        "iptables": (iptables[0], f"{iptables[1]}; random loss: {loss[1]}"),
        "tc netem": (netem[0], netem[1] + unwired),
        "tc tbf/htb": (tbf[0] and htb[0], f"tbf: {tbf[1]}; htb: {htb[1]}{unwired}"),
        "nfqueue delayer": (nfqueue[0], nfqueue[1] + unwired),
        "toxiproxy-server": (real[0], f"{real[1]}; {own[1]}" if not real[0] else real[1]),
    }


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True
