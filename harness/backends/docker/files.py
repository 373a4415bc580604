"""What goes into and comes out of a node's container: its config, its event-log parts, its output.

In bind mode (the default on a local engine) `run_dir/nodes/<name>/` is the container's
CONTAINER_DIR; in archive mode (the default on a remote engine) the config files go in with
put_archive and each finished container's event-log parts come out with get_archive.
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import docker.errors

CONTAINER_DIR = "/var/lib/splitbrain/run"
NODE_UID = 10001  # the image's user `splitbrain` (Dockerfile)


def config_tar(files: dict[str, str]) -> bytes:
    """A tar of run/ (owned by the node's user) with the given files (name -> text), for put_archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo("run")
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        folder.uid = folder.gid = NODE_UID
        folder.mtime = int(time.time())
        tar.addfile(folder)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"run/{name}")
            info.size = len(data)
            info.mode = 0o644
            info.uid = info.gid = NODE_UID
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def copy_out(container, parts: list[Path]) -> None:
    """Copy each event-log part not on the host yet out of the container's CONTAINER_DIR."""
    for part in parts:
        if part.exists():
            continue
        try:
            stream, _stat = container.get_archive(f"{CONTAINER_DIR}/{part.name}")
            data = b"".join(stream)
        except docker.errors.NotFound:
            continue  # it died before writing anything
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is not None and member.isfile():
                extracted = tar.extractfile(member)
                part.write_bytes(extracted.read() if extracted is not None else b"")


def append_output(container, log: Path, header: str) -> None:
    """Append the header line and the container's whole output (stdout and stderr) to `log`."""
    try:
        output = container.logs(stdout=True, stderr=True)
    except docker.errors.APIError as exc:
        output = f"(no output: {exc})\n".encode()
    with open(log, "ab") as out:
        out.write(header.encode())
        out.write(output)
        if output and not output.endswith(b"\n"):
            out.write(b"\n")


def container_tail(container, lines: int = 20) -> str:
    """The last lines of a container's output, indented, for an error message."""
    try:
        text = container.logs(tail=lines).decode("utf-8", errors="replace")
    except docker.errors.APIError as exc:
        return f"    (no output: {exc})"
    return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"
