"""The node image: which one a cluster runs, built when missing, and held while in use.

Nodes run `splitbrain-node:<content-hash>`, the tag `ci/images` gives the current sources (it is
built, with the build's own progress output on stderr, when missing; `build="never"` refuses
instead). Outside a checkout (no ci/images) or with `image=` the image is taken as it is. The
Toxiproxy-compatible server (`python -m splitbrain.faults.toxiproxy`) runs from the same image.
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
BUILD_TIMEOUT_S = 1800

_IMAGE_LOCK = threading.Lock()
_IMAGES: dict[tuple[str, str], str] = {}  # (engine url, requested image or "ci") -> image id pinned
_IMAGE_NAMES: dict[str, str] = {}  # image id -> the tag it was found under
HOLD_REPO = f"{IMAGE_REPO}-inuse"  # a tag per harness process keeps its image from being deleted


def load_ci_images():
    """ci/images is a script without .py: load it as a module for its content hash."""
    loader = importlib.machinery.SourceFileLoader("splitbrain_ci_images", str(CI_IMAGES))
    spec = importlib.util.spec_from_loader("splitbrain_ci_images", loader)
    assert spec is not None  # a loader was given
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class NodeImageMixin:
    """The image half of DockerBackend; it needs the backend's `client`, `image`, `build`,
    `build_output` and `build_seconds`."""

    image: str | None
    build: str  # "auto" or "never"
    build_output: TextIO | None
    build_seconds: float | None

    @property
    def client(self) -> docker.DockerClient:
        raise NotImplementedError  # DockerBackend's

    def _check_image(self, client, version: str, where: str) -> tuple[bool, str]:
        """check()'s verdict once the engine answered: is the image there, or can it be built?"""
        if self.image is not None:
            try:
                client.images.get(self.image)
            except docker.errors.ImageNotFound:
                return False, f"engine {version} ({where}) reachable, but image {self.image} does not exist"
            return True, f"engine {version} ({where}), image {self.image}"
        if CI_IMAGES.is_file():
            try:
                tag = f"{IMAGE_REPO}:{load_ci_images().content_hash()}"
            except Exception as exc:
                return False, f"engine {version} reachable, but ci/images does not load: {exc}"
            try:
                client.images.get(tag)
                state = f"image {tag} current"
            except docker.errors.ImageNotFound:
                if self.build == "never":
                    return False, f"engine {version} reachable, but {tag} is not built (run ci/images)"
                state = f"image {tag} not built yet (ci/images builds it on first use)"
            return True, f"engine {version} ({where}), {state}"
        try:
            client.images.get(DEFAULT_IMAGE)
        except docker.errors.ImageNotFound:
            return False, f"engine {version} reachable, but {DEFAULT_IMAGE} does not exist and there is no ci/images"
        return True, f"engine {version} ({where}), image {DEFAULT_IMAGE}"

    def ensure_image(self) -> str:
        """The id of the image to run, pinned for this process: the current ci/images content-hash
        tag (built when missing, unless build="never"), `image=` as given, or splitbrain-node:latest
        outside a checkout.

        Pinned, because others may rebuild meanwhile: ci/images untags superseded content hashes,
        and a session must not lose its image between two clusters. The image also gets a tag of
        this process's own (`splitbrain-node-inuse:<host>_<pid>_<start>`), removed at exit (or by
        `splitbrain clean` once the process is gone), so that nobody deletes it while it is in use.
        """
        client = self.client
        key = (str(client.api.base_url), self.image or "ci")
        with _IMAGE_LOCK:
            if key in _IMAGES:
                return _IMAGES[key]
            ref = self._resolve_image()
            try:
                image = client.images.get(ref)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {ref} disappeared right after it was found or built") from None
            hold_image(client, image)
            image_id = image.id
            assert image_id is not None  # an image on the engine has one
            _IMAGES[key] = image_id
            _IMAGE_NAMES[image_id] = ref
            return image_id

    def image_name(self, image_id: str | None) -> str:
        return _IMAGE_NAMES.get(image_id or "", image_id or "?")

    def _resolve_image(self) -> str:
        client = self.client
        if self.image is not None:
            try:
                client.images.get(self.image)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(f"image {self.image} does not exist on the engine") from None
            return self.image
        if not CI_IMAGES.is_file():
            try:
                client.images.get(DEFAULT_IMAGE)
            except docker.errors.ImageNotFound:
                raise BackendUnavailable(
                    f"{DEFAULT_IMAGE} does not exist and this is no checkout with ci/images to build it"
                ) from None
            return DEFAULT_IMAGE
        tag = f"{IMAGE_REPO}:{load_ci_images().content_hash()}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            if self.build == "never":
                raise BackendUnavailable(f"image {tag} is not built (run ci/images, or allow building)") from None
        self._build(tag)
        return self._built_tag(tag)

    def _build(self, tag: str) -> None:
        out = self.build_output if self.build_output is not None else sys.stderr
        print(f"splitbrain: the node image {tag} is missing or stale: building it with ci/images", file=out, flush=True)
        started = time.monotonic()
        env = dict(os.environ)
        base_url = str(self.client.api.base_url)
        if base_url.startswith("tcp://") or base_url.startswith("https://") or base_url.startswith("http://"):
            env.setdefault("DOCKER_HOST", base_url)
        proc = subprocess.Popen(
            [sys.executable, str(CI_IMAGES), "all"],
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
        self.build_seconds = time.monotonic() - started
        if code != 0:
            raise BackendUnavailable(f"ci/images all failed with exit code {code}; last lines:\n" + "\n".join(tail))
        print(f"splitbrain: node image {tag} ready in {self.build_seconds:.1f} s", file=out, flush=True)

    def _built_tag(self, tag: str) -> str:
        """The image ci/images just built: `tag`, or, when the sources changed while it ran (so it
        built another content hash), the image it tagged :latest."""
        try:
            self.client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        try:
            latest = self.client.images.get(DEFAULT_IMAGE)
        except docker.errors.ImageNotFound:
            raise BackendUnavailable(f"ci/images all succeeded but neither {tag} nor {DEFAULT_IMAGE} exists") from None
        built = (latest.labels or {}).get("splitbrain.content-hash", "?")
        assert latest.id is not None  # an image on the engine has one
        out = self.build_output if self.build_output is not None else sys.stderr
        print(
            f"splitbrain: the sources changed during the build: using {IMAGE_REPO}:{built} "
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


def hold_image(client, image) -> None:
    tag = hold_tag()
    if f"{HOLD_REPO}:{tag}" in (image.tags or []):
        return
    # One hold per process (tagging moves it from whatever image it was on before).
    image.tag(HOLD_REPO, tag)


def release_hold(client, tag: str | None = None) -> None:
    try:
        client.images.remove(f"{HOLD_REPO}:{tag or hold_tag()}")
    except docker.errors.APIError:
        pass  # not there, or the image is still used by a container (its tag then stays: clean)


def release_own_hold() -> None:
    """At exit: drop the hold this process took on its image, if it took one."""
    if _IMAGES:
        try:
            release_hold(docker.from_env(timeout=30))
        except Exception:  # pragma: no cover - no engine at exit: `splitbrain clean` releases it
            pass
