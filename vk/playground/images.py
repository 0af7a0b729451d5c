"""The images a real node runs, built on this machine with no registry: vk's own from the
top-level Dockerfile (as users build it), the pause image of the node's pod sandboxes, and two
workload images from Debian packages (a shell, a web server) for users' and tests' own pods.

buildah (Debian's) builds them into a storage of vk's cache, not the machine's. vk's Dockerfile
takes its base as `ARG BASE`; here the base is a Debian bookworm made by debootstrap from the
mirror the machine's apt sources name, with the machine's CA bundle (its HTTPS may go through
an intercepting proxy, and pip in the build must trust it). Each image ends as an OCI archive
in the cache, keyed by what it was built from, for `ctr images import`. The workload images are
named `playground.local/...`, never as Docker Hub's: they only stand in for `debian` and `nginx`.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
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
SHELL_IMAGE = f"playground.local/shell:{DEBIAN_SUITE}"
WEB_IMAGE = f"playground.local/web:{DEBIAN_SUITE}"
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
    shell_archive: Path
    web_archive: Path

    def archives(self) -> list[tuple[str, Path]]:
        """(image name, OCI archive) of every image the node's containerd imports."""
        return [
            (self.pause_image, self.pause_archive),
            (self.vk_image, self.vk_archive),
            (SHELL_IMAGE, self.shell_archive),
            (WEB_IMAGE, self.web_archive),
        ]


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


def apt_install(packages: Sequence[str], *then: str) -> str:
    """A Containerfile RUN that installs Debian packages, runs `then`, and keeps no apt lists.

    The build runs in the host's network namespace (chroot isolation): policy-rc.d stops the
    packages' maintainer scripts from starting their daemons (nginx on the host's port 80).
    """
    commands = [
        "printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d",
        "chmod +x /usr/sbin/policy-rc.d",
        "apt-get update",
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        f"{' '.join(packages)}",
        *then,
        # apt's lists and package caches (/var/cache/apt/*.bin: 80 MB) are for apt, not the image.
        "rm -rf /usr/sbin/policy-rc.d /var/lib/apt/lists/* /var/cache/apt/*.bin "
        "/var/cache/apt/archives/*.deb",
    ]
    return "RUN " + " \\\n    && ".join(commands)


def shell_containerfile(base: str = BASE_IMAGE) -> str:
    """bash, coreutils and tar (which `kubectl cp` runs) come with the base; procps adds ps.

    On vk's base rather than a debootstrap of its own: no second minute of debootstrap, and the
    node's containerd stores the base layer once for vk, the shell and the web server. The
    base's python3 is there but nothing here needs it.
    """
    return "\n".join(
        [f"FROM {base}", apt_install(["procps"]), 'CMD ["bash"]', ""]  # as Debian's image
    )


def web_containerfile(base: str = BASE_IMAGE) -> str:
    """Debian's nginx serving its default page ("Welcome to nginx!") on port 80, in the
    foreground as the container's only process, its logs on the container's stdout and stderr
    (as the official nginx image links them) so that `kubectl logs` shows the requests.

    `nginx` itself: bookworm's nginx-light is only `nginx` plus an echo module."""
    return "\n".join(
        [
            f"FROM {base}",
            apt_install(
                ["nginx"],
                "ln -sf /dev/stdout /var/log/nginx/access.log",
                "ln -sf /dev/stderr /var/log/nginx/error.log",
            ),
            "EXPOSE 80",
            "STOPSIGNAL SIGQUIT",  # nginx's graceful shutdown
            """CMD ["nginx", "-g", "daemon off;"]""",
            "",
        ]
    )


def workload_archive(image: str, containerfile: str) -> str:
    """The archive's file name, keyed by the recipe: `playground.local/web:bookworm` built from
    `containerfile` → `playground-web-<digest>.tar`; a changed recipe gets a new name."""
    key = hashlib.sha256(containerfile.encode()).hexdigest()[:12]
    return f"{workload_archive_prefix(image)}-{key}.tar"


def workload_archive_prefix(image: str) -> str:
    repository = image.rpartition("/")[2].partition(":")[0]
    return f"playground-{repository}"


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
        workloads = {}
        for image, containerfile in (
            (SHELL_IMAGE, shell_containerfile()),
            (WEB_IMAGE, web_containerfile()),
        ):
            archive = self.dir / workload_archive(image, containerfile)
            if not archive.exists():
                self._ensure_base()
                self._build_workload(image, containerfile, archive)
            workloads[image] = archive
        return NodeImages(
            vk_image,
            vk_archive,
            PAUSE_IMAGE,
            pause_archive,
            shell_archive=workloads[SHELL_IMAGE],
            web_archive=workloads[WEB_IMAGE],
        )

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

    def _build_workload(self, image: str, containerfile: str, archive: Path) -> None:
        # apt-get in the build reaches the mirror as debootstrap did: same network, and buildah
        # passes the proxy variables (http_proxy, ...) of its environment into the build.
        with self.progress.step(f"building {image} from Debian packages (about 20 s)"):
            with tempfile.TemporaryDirectory(dir=self.dir) as context:
                (Path(context) / "Containerfile").write_text(containerfile)
                self._buildah(
                    "bud", "--isolation=chroot", "--pull=never", f"--tag={image}", context
                )
            for stale in self.dir.glob(f"{workload_archive_prefix(image)}-*.tar"):
                stale.unlink()
            self._push(image, archive)
