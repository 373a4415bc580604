"""The node images: which one a cluster runs, built when missing, and held while in use.

Nodes run `splitbrain-node:<content-hash>`, the tag `ci/images` gives the current sources (it is
built, with the build's own progress output on stderr, when missing; `build="never"` refuses
instead). Outside a checkout (no ci/images) or with `image=` the image is taken as it is. The
Toxiproxy-compatible server (`python -m splitbrain.faults.toxiproxy`) runs from the same image.
JGroups nodes (protocol: jgroups) run the second kind of image, `splitbrain-jgroups:<content-hash>`
(node/jgroups/Dockerfile, `ci/images jgroups`), found, built and held the same way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import docker
import docker.errors

from ..base import BackendUnavailable
from .labels import owner_label

ROOT = Path(__file__).resolve().parents[3]
CI_IMAGES = ROOT / "ci" / "images"
IMAGE_REPO = os.environ.get("SPLITBRAIN_NODE_IMAGE", "splitbrain-node")
DEFAULT_IMAGE = f"{IMAGE_REPO}:latest"
JGROUPS_REPO = os.environ.get("SPLITBRAIN_JGROUPS_IMAGE", "splitbrain-jgroups")
BUILD_TIMEOUT_S = 1800
# kind -> (repository, the ci/images commands that build it)
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "node": (IMAGE_REPO, ("base", "node")),
    "jgroups": (JGROUPS_REPO, ("jgroups",)),
}

_IMAGE_LOCK = threading.Lock()
_IMAGES: dict[tuple[str, str], str] = {}  # (engine url, requested image or "ci:<kind>") -> image id pinned
_IMAGE_NAMES: dict[str, str] = {}  # image id -> the tag it was found under
HOLD_REPO = f"{IMAGE_REPO}-inuse"  # a tag per harness process keeps its image from being deleted
HOLD_REPOS = {"node": HOLD_REPO, "jgroups": f"{JGROUPS_REPO}-inuse"}


def load_ci_images():
    """ci/images is a script without .py: load it as a module for its content hash."""
    loader = importlib.machinery.SourceFileLoader("splitbrain_ci_images", str(CI_IMAGES))
    spec = importlib.util.spec_from_loader("splitbrain_ci_images", loader)
    assert spec is not None  # a loader was given
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class NodeImageMixin:
    """The image half of DockerBackend; it needs the backend's `client`, `image`, `jgroups_image`,
    `build`, `build_output` and `build_seconds`."""

    image: str | None
    jgroups_image: str | None
    build: str  # "auto" or "never"
    build_output: TextIO | None
    build_seconds: float | None

    @property
    def client(self) -> docker.DockerClient:
        raise NotImplementedError  # DockerBackend's

    def _requested(self, kind: str) -> str | None:
        return self.image if kind == "node" else self.jgroups_image

    def _check_image(self, client, version: str, where: str, kind: str = "node") -> tuple[bool, str]:
        """check()'s verdict once the engine answered: is the image there, or can it be built?"""
        repo, _commands = KINDS[kind]
        requested = self._requested(kind)
        if requested is not None:
            try:
                client.images.get(requested)
            except docker.errors.ImageNotFound:
                return False, f"engine {version} ({where}) reachable, but image {requested} does not exist"
            return True, f"engine {version} ({where}), image {requested}"
        if CI_IMAGES.is_file():
            try:
                tag = f"{repo}:{load_ci_images().content_hash(kind=kind)}"
            except Exception as exc:
                return False, f"engine {version} reachable, but ci/images does not load: {exc}"
            command = "ci/images" if kind == "node" else f"ci/images {kind}"
            try:
                client.images.get(tag)
                state = f"image {tag} current"
            except docker.errors.ImageNotFound:
                if self.build == "never":
                    return False, f"engine {version} reachable, but {tag} is not built (run {command})"
                state = f"image {tag} not built yet ({command} builds it on first use)"
            return True, f"engine {version} ({where}), {state}"
        default = f"{repo}:latest"
        try:
            client.images.get(default)
        except docker.errors.ImageNotFound:
            return False, f"engine {version} reachable, but {default} does not exist and there is no ci/images"
        return True, f"engine {version} ({where}), image {default}"

    def ensure_image(self, kind: str = "node") -> str:
        """The id of the image to run, pinned for this process: the current ci/images content-hash
        tag (built when missing, unless build="never"), `image=` as given, or splitbrain-node:latest
        outside a checkout.

        Pinned, because others may rebuild meanwhile: ci/images untags superseded content hashes,
        and a session must not lose its image between two clusters. The image also gets a tag of
        this process's own (`splitbrain-node-inuse:<host>_<pid>_<start>`), removed at exit (or by
        `splitbrain clean` once the process is gone), so that nobody deletes it while it is in use.
        """
        client = self.client
        key = (str(client.api.base_url), self._requested(kind) or f"ci:{kind}")
        with _IMAGE_LOCK:
            if key in _IMAGES:
                return _IMAGES[key]
            ref = self._resolve_image(kind)
            try:
                image = client.images.get(ref)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {ref} disappeared right after it was found or built") from None
            hold_image(client, image, kind)
            image_id = image.id
            assert image_id is not None  # an image on the engine has one
            _IMAGES[key] = image_id
            _IMAGE_NAMES[image_id] = ref
            return image_id

    def image_name(self, image_id: str | None) -> str:
        return _IMAGE_NAMES.get(image_id or "", image_id or "?")

    def _resolve_image(self, kind: str = "node") -> str:
        client = self.client
        repo, _commands = KINDS[kind]
        requested = self._requested(kind)
        if requested is not None:
            try:
                client.images.get(requested)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {requested} does not exist on the engine") from None
            return requested
        default = f"{repo}:latest"
        if not CI_IMAGES.is_file():
            try:
                client.images.get(default)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(
                    f"{default} does not exist and this is no checkout with ci/images to build it"
                ) from None
            return default
        tag = f"{repo}:{load_ci_images().content_hash(kind=kind)}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            if self.build == "never":
                raise BackendUnavailable(f"image {tag} is not built (run ci/images, or allow building)") from None
        self._build(tag, kind)
        return self._built_tag(tag, kind)

    def _build(self, tag: str, kind: str = "node") -> None:
        out = self.build_output if self.build_output is not None else sys.stderr
        _repo, commands = KINDS[kind]
        what = "node image" if kind == "node" else "JGroups node image"
        print(f"splitbrain: the {what} {tag} is missing or stale: building it with ci/images", file=out, flush=True)
        started = time.monotonic()
        env = dict(os.environ)
        base_url = str(self.client.api.base_url)
        if base_url.startswith("tcp://") or base_url.startswith("https://") or base_url.startswith("http://"):
            env.setdefault("DOCKER_HOST", base_url)
        for command in commands:
            proc = subprocess.Popen(
                [sys.executable, str(CI_IMAGES), command],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                cwd=str(ROOT),
            )
            tail: list[str] = []
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    tail = (tail + [line.rstrip()])[-30:]
                code = proc.wait(timeout=BUILD_TIMEOUT_S)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            if code != 0:
                raise BackendUnavailable(
                    f"ci/images {command} failed with exit code {code}; last lines:\n" + "\n".join(tail)
                )
        self.build_seconds = time.monotonic() - started
        print(f"splitbrain: {what} {tag} ready in {self.build_seconds:.1f} s", file=out, flush=True)

    def _built_tag(self, tag: str, kind: str = "node") -> str:
        """The image ci/images just built: `tag`, or, when the sources changed while it ran (so it
        built another content hash), the image it tagged :latest."""
        repo, commands = KINDS[kind]
        default = f"{repo}:latest"
        try:
            self.client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        try:
            latest = self.client.images.get(default)
        except docker.errors.ImageNotFound:
            raise BackendUnavailable(
                f"ci/images {' '.join(commands)} succeeded but neither {tag} nor {default} exists"
            ) from None
        built = (latest.labels or {}).get("splitbrain.content-hash", "?")
        assert latest.id is not None  # an image on the engine has one
        out = self.build_output if self.build_output is not None else sys.stderr
        print(
            f"splitbrain: the sources changed during the build: using {repo}:{built} "
            f"({latest.id[7:19]}), built from them a moment ago",
            file=out,
            flush=True,
        )
        return latest.id


def hold_tag(owner: str | None = None) -> str:
    """The tag of a harness process's hold on its image: <host>_<pid>_<start>, docker-safe."""
    host, pid, start = (owner or owner_label()).split(":", 2)
    safe = "".join(c if c.isalnum() or c in ".-" else "-" for c in host)[:60] or "host"
    return f"{safe}_{pid}_{start or '0'}"


def hold_image(client, image, kind: str = "node") -> None:
    tag = hold_tag()
    repo = HOLD_REPOS[kind]
    if f"{repo}:{tag}" in (image.tags or []):
        return
    # One hold per process and kind (tagging moves it from whatever image it was on before).
    image.tag(repo, tag)


def release_hold(client, tag: str | None = None, repo: str = HOLD_REPO) -> None:
    try:
        client.images.remove(f"{repo}:{tag or hold_tag()}")
    except docker.errors.APIError:
        pass  # not there, or the image is still used by a container (its tag then stays: clean)


def release_own_hold() -> None:
    """At exit: drop the holds this process took on its images, if it took any."""
    if _IMAGES:
        try:
            client = docker.from_env(timeout=30)
            for repo in HOLD_REPOS.values():
                release_hold(client, repo=repo)
        except Exception:  # pragma: no cover - no engine at exit: `splitbrain clean` releases it
            pass
