"""The images a real node runs, built on this machine with no registry: vk's own from the
top-level Dockerfile (as users build it), and the pause image of the node's pod sandboxes.

buildah (Debian's) builds them into a storage of vk's cache, not the machine's. vk's Dockerfile
takes its base as `ARG BASE`; here the base is a Debian bookworm made by debootstrap from the
mirror the machine's apt sources name, with the machine's CA bundle (its HTTPS may go through
an intercepting proxy, and pip in the build must trust it). Each image ends as an OCI archive
in the cache, keyed by what it was built from, for `ctr images import`.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vk.cli.chart import REPOSITORY
from vk.cli.progress import Progress
from vk.playground.binaries import BuildError

DEBIAN_SUITE = "bookworm"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = f"localhost/vk-base:{DEBIAN_SUITE}"
PAUSE_IMAGE = "localhost/vk-pause:1"
VK_IMAGE_REPOSITORY = "localhost/vk"
# What the Dockerfile copies: the image is rebuilt when one of these changes.
IMAGE_SOURCES = ("Dockerfile", "pyproject.toml", "README.md", "vk", "deploy/helm")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
REQUIRED_TOOLS = ("buildah", "debootstrap")


@dataclass(frozen=True)
class NodeImages:
    """OCI archives to import into the node's containerd, and the names they carry."""

    vk_image: str
    vk_archive: Path
    pause_image: str
    pause_archive: Path


def debian_mirror(sources: Sequence[str]) -> str:
    """The first Debian mirror in apt's sources (one-line or deb822 format)."""
    for text in sources:
        for match in re.finditer(r"(https?://\S+?/debian)/?(?=\s|$)", text, re.MULTILINE):
            return match.group(1)
    return DEFAULT_DEBIAN_MIRROR


def machine_debian_mirror() -> str:
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    return debian_mirror([f.read_text() for f in files if f.is_file()])


def source_digest(root: Path = REPOSITORY) -> str:
    """A digest of everything the Dockerfile copies (bytecode aside)."""
    digest = hashlib.sha256()
    for name in IMAGE_SOURCES:
        path = root / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            digest.update(str(file.relative_to(root)).encode() + b"\0")
            digest.update(file.read_bytes())
    return digest.hexdigest()


class ImageBuilder:
    """Builds the node's images into `<cache>/images`, unless their archives are there."""

    def __init__(self, cache_dir: Path, progress: Progress) -> None:
        self.dir = cache_dir / "images"
        self.progress = progress
        self.log = cache_dir / "logs" / "images.log"

    def ensure(self, pause_binary: Path) -> NodeImages:
        missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
        if missing:
            raise BuildError(
                f"the real node builds its images with {', '.join(missing)}: "
                f"apt-get install -y {' '.join(missing)}"
            )
        if not (REPOSITORY / "Dockerfile").is_file():
            raise BuildError(
                "the real node builds vk's image from a source checkout's Dockerfile, and this vk "
                "is installed without one: run vkctl from a clone of vk"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        tag = f"dev-{source_digest()[:12]}"
        vk_image = f"{VK_IMAGE_REPOSITORY}:{tag}"
        vk_archive = self.dir / f"vk-{tag}.tar"
        pause_archive = self.dir / "vk-pause-1.tar"
        if not pause_archive.exists():
            self._build_pause(pause_binary, pause_archive)
        if not vk_archive.exists():
            self._ensure_base()
            self._build_vk(vk_image, vk_archive)
        return NodeImages(vk_image, vk_archive, PAUSE_IMAGE, pause_archive)

    # -- steps -----------------------------------------------------------------------------

    def _buildah(self, *args: str) -> str:
        command = [
            "buildah",
            f"--root={self.dir / 'storage'}",
            f"--runroot={self.dir / 'run'}",
            "--storage-driver=vfs",  # works on any filesystem, no fuse-overlayfs needed
            *args,
        ]
        return self._run(command)

    def _run(self, command: Sequence[str]) -> str:
        with open(self.log, "a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
            log.write(result.stdout)
        if result.returncode != 0:
            tail = "".join(self.log.read_text().splitlines(keepends=True)[-15:])
            raise BuildError(
                f"`{' '.join(command[:3])} ...` failed (exit {result.returncode}); "
                f"full log: {self.log}\n{tail}"
            )
        return result.stdout

    def _commit_directory(self, directory: Path, image: str, *config: str) -> None:
        """`directory` as the whole filesystem of a one-layer image."""
        container = self._buildah("from", "scratch").strip()
        try:
            self._buildah("copy", container, f"{directory}/", "/")
            if config:
                self._buildah("config", *config, container)
            self._buildah("commit", "--quiet", container, image)
        finally:
            self._buildah("rm", container)

    def _push(self, image: str, archive: Path) -> None:
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        self._buildah("push", "--quiet", image, f"oci-archive:{partial}:{image}")
        partial.rename(archive)

    def _build_pause(self, pause_binary: Path, archive: Path) -> None:
        with self.progress.step(f"building the pause image {PAUSE_IMAGE}"):
            tree = self.dir / "pause-rootfs"
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir(parents=True)
            shutil.copy2(pause_binary, tree / "pause")
            self._commit_directory(tree, PAUSE_IMAGE, "--entrypoint", '["/pause"]')
            shutil.rmtree(tree)
            self._push(PAUSE_IMAGE, archive)

    def _ensure_base(self) -> None:
        images = self._buildah("images", "--format", "{{.Name}}:{{.Tag}}").split()
        if BASE_IMAGE in images:
            return
        mirror = machine_debian_mirror()
        tree = self.dir / f"{DEBIAN_SUITE}-rootfs"
        shutil.rmtree(tree, ignore_errors=True)
        with self.progress.step(
            f"debootstrap of Debian {DEBIAN_SUITE} with python3 from {mirror} (about 1 min)"
        ):
            self._run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    "--include=python3,python3-venv",
                    DEBIAN_SUITE,
                    str(tree),
                    mirror,
                ]
            )
        if HOST_CA_BUNDLE.is_file():
            (tree / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
            shutil.copy2(HOST_CA_BUNDLE, tree / "etc/ssl/certs/ca-certificates.crt")
            (tree / "etc/pip.conf").write_text(f"[global]\ncert = {HOST_CA_BUNDLE}\n")
        # The build stage runs pip as root in this tree: no apt caches or logs are wanted.
        shutil.rmtree(tree / "var/cache/apt/archives", ignore_errors=True)
        with self.progress.step(f"committing {BASE_IMAGE}"):
            self._commit_directory(tree, BASE_IMAGE)
        shutil.rmtree(tree)

    def _build_vk(self, image: str, archive: Path) -> None:
        with self.progress.step(f"building {image} from the Dockerfile (about 2 min)"):
            self._buildah(
                "bud",
                "--isolation=chroot",
                "--pull=never",
                f"--build-arg=BASE={BASE_IMAGE}",
                f"--tag={image}",
                f"--file={REPOSITORY / 'Dockerfile'}",
                str(REPOSITORY),
            )
            for stale in self.dir.glob("vk-dev-*.tar"):
                stale.unlink()
            self._push(image, archive)
