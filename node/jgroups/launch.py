"""How a JGroups node is built and started: javac against the jar (build.sh), then one JVM per
node with the configuration of the node contract as JSON (docs/node-contract.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from splitbrain.node.errors import BadInput

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
CLASSES = HERE / "build" / "classes"
MAIN_CLASS = "splitbrain.jgroups.Node"
DEFAULT_JAR = "/usr/share/java/jgroups.jar"
APT_JAR = "apt-get install libjgroups-java"
APT_JDK = "apt-get install openjdk-17-jdk-headless"
# Every JVM of a node: without the IPv4 stack UDP maps an IPv4 multicast group to IPv6 and the
# nodes stay alone; a small heap and one JIT tier keep ten JVMs within two cores' start-up.
JVM_FLAGS = ("-Djava.net.preferIPv4Stack=true", "-Xss512k", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class BuildError(BadInput, RuntimeError):
    """The JGroups node could not be built (the message says why and what to install)."""


def runtime_problem(jar: str | None = None) -> str | None:
    """What keeps this host from running JGroups nodes (with the command to fix it), or None."""
    jar = jar or DEFAULT_JAR
    problems = []
    if not Path(jar).is_file():
        problems.append(f"no JGroups jar at {jar} ({APT_JAR})")
    if shutil.which("javac") is None or shutil.which("java") is None:
        problems.append(f"no JDK (java and javac) on PATH ({APT_JDK})")
    return "; ".join(problems) or None


def ensure_built(jar: str | None = None) -> Path:
    """Build the node's classes when they are missing or older than a source (build.sh decides)."""
    jar = jar or DEFAULT_JAR
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), jar], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BuildError(f"building the JGroups node failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
    return CLASSES


def java_argv(
    jar: str | None = None, *, classes: str | os.PathLike[str] = CLASSES, flags: tuple[str, ...] = ()
) -> list[str]:
    """The JVM and its arguments up to the node's own (`--config FILE` follows): the classes may be
    elsewhere (in the JGroups node image), and a backend may add JVM flags."""
    jar = jar or DEFAULT_JAR
    return ["java", *JVM_FLAGS, *flags, "-cp", f"{classes}{os.pathsep}{jar}", MAIN_CLASS]


def command(config_path: str | os.PathLike[str], jar: str | None = None) -> list[str]:
    """The command line of one node (its classes must be built)."""
    return [*java_argv(jar), "--config", str(config_path)]
