"""Builds the real Kubernetes binaries the playground runs, once, cached outside the repository.

kube-apiserver and friends cannot be `go install`ed (their go.mod replaces the staging modules
with local paths), so each tool is built from a throwaway wrapper module of its own in the
cache; keeping the tools in separate wrappers stops their dependency versions lifting each
other. A finished build lives in a directory keyed by tool and version, created by an atomic
rename, so an interrupted build is simply redone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vk.cli.chart import HELM_MODULE, HELM_VERSION, pinned_helm
from vk.cli.progress import Progress

KUBERNETES_VERSION = "v1.36.4"
ETCD_VERSION = "v3.6.14"
KWOK_VERSION = "v0.8.0"
METRICS_SERVER_VERSION = "v0.9.0"
# Prometheus 3.16 (its Go module numbers v3.x as v0.3xx). Debian's package is built without
# Kubernetes service discovery, which is how users point Prometheus at vk's pods; this build
# has that discovery only (the build tags drop the others and their dependencies). It has no
# web UI (its assets are built with npm, not Go); the HTTP API answers.
PROMETHEUS_VERSION = "v3.16.0"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_BUILD_TAGS = "remove_all_sd,enable_kubernetes_sd"

KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# A real node's (`vkctl playground up --real-node`): built only when one is asked for.
NODE_COMMANDS = ("kubelet", "kube-proxy")
# The real node's pause image runs this: it holds the pod's namespaces, reaps the zombies of
# the containers that share its PID namespace, and exits on SIGTERM or SIGINT.
PAUSE_VERSION = "1"
PAUSE_SOURCE = """\
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 {
				break
			}
		}
	}
}
"""


class BuildError(RuntimeError):
    """A build step failed; the message names the step and the log that tells why."""


@dataclass(frozen=True)
class Binaries:
    """Where the built binaries and the kwok data files are."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kwok_stages: Path  # kwok v0.8.0 has no built-in stages: these are the module's own YAMLs
    kwok_metrics: Path
    metrics_server: Path
    helm: Path  # installs vk's chart in every cluster with vk


@dataclass(frozen=True)
class NodeBinaries:
    """What a real node runs beside containerd (a Debian package): the kubelet, kube-proxy, and
    the pause program of its sandbox image."""

    kubelet: Path
    kube_proxy: Path
    pause: Path


def version_ldflags(version: str) -> str:
    """The -ldflags that stamp a Kubernetes version, as the release build does; without them the
    binaries report v0.0.0-master and clients warn about the skew."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in stamps.items()]
    return " ".join(flags)


def staging_replaces(kubernetes_go_mod: str, version: str) -> list[str]:
    """`go mod edit -replace` arguments pointing every staging module that k8s.io/kubernetes
    replaces with a local path at its published twin (v1.36.4 -> v0.36.4)."""
    staging_version = "v0" + version[2:]
    replaces = []
    for line in kubernetes_go_mod.splitlines():
        parts = line.split()
        if "=>" in parts and any(p.startswith("./staging/") for p in parts):
            module = parts[0] if parts[0] != "replace" else parts[1]
            replaces.append(f"{module}={module}@{staging_version}")
    return replaces


class BinaryBuilder:
    """Builds each tool into `<cache>/bin/<tool>-<version>/` unless it is already there."""

    def __init__(self, cache_dir: Path, progress: Progress) -> None:
        self.cache_dir = cache_dir
        self.progress = progress
        self.logs_dir = cache_dir / "logs"

    def ensure_all(self) -> Binaries:
        with self._lock():
            kubernetes = self._ensure(
                f"kubernetes-{KUBERNETES_VERSION}",
                lambda out: self._build_kubernetes(out, KUBERNETES_COMMANDS),
            )
            etcd = self._ensure(f"etcd-{ETCD_VERSION}", self._build_etcd)
            kwok = self._ensure(f"kwok-{KWOK_VERSION}", self._build_kwok)
            metrics_server = self._ensure(
                f"metrics-server-{METRICS_SERVER_VERSION}", self._build_metrics_server
            )
        helm = self.ensure_helm()  # under the lock in its turn (the lock is not re-entrant)
        return Binaries(
            kube_apiserver=kubernetes / "kube-apiserver",
            kube_controller_manager=kubernetes / "kube-controller-manager",
            kube_scheduler=kubernetes / "kube-scheduler",
            etcd=etcd / "etcd",
            kwok=kwok / "kwok",
            kwok_stages=kwok / "stage",
            kwok_metrics=kwok / "metrics",
            metrics_server=metrics_server / "metrics-server",
            helm=helm,
        )

    def ensure_node(self) -> NodeBinaries:
        """The kubelet and kube-proxy (from the same wrapper module as the control plane) and
        the pause program, for a real node."""
        with self._lock():
            node = self._ensure(
                f"kubernetes-node-{KUBERNETES_VERSION}",
                lambda out: self._build_kubernetes(out, NODE_COMMANDS),
            )
            pause = self._ensure(f"pause-{PAUSE_VERSION}", self._build_pause)
        return NodeBinaries(
            kubelet=node / "kubelet", kube_proxy=node / "kube-proxy", pause=pause / "pause"
        )

    def ensure_prometheus(self) -> Path:
        """Prometheus with Kubernetes service discovery, for the real-node playground."""
        with self._lock():
            built = self._ensure(f"prometheus-{PROMETHEUS_VERSION}", self._build_prometheus)
        return built / "prometheus"

    def ensure_helm(self) -> Path:
        """helm, for vk's chart (every playground cluster with vk, deploy/vk.yaml, the chart's
        tests); `vkctl install` runs it from here."""
        helm = pinned_helm(self.cache_dir)
        with self._lock():
            return self._ensure(helm.parent.name, self._build_helm) / helm.name

    @contextmanager
    def _lock(self) -> Iterator[None]:
        # Two `playground up` at once (a user and a test run) must not build the same thing twice.
        self.logs_dir.mkdir(parents=True, exist_ok=True)  # the cache directory too
        with open(self.cache_dir / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ensure(self, name: str, build: Callable[[Path], None]) -> Path:
        final = self.cache_dir / "bin" / name
        if final.is_dir():
            return final
        partial = self.cache_dir / "bin" / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        self.progress.info(f"building {name} into {final} (once; later runs reuse it)")
        build(partial)
        partial.rename(final)
        return final

    def _go(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        log_name: str,
        goflags: str = "",
        extra_env: Mapping[str, str] | None = None,
    ) -> str:
        env = {
            **os.environ,
            "GOTOOLCHAIN": "local",
            "GOWORK": "off",
            "CGO_ENABLED": "0",
            "GOFLAGS": goflags,
            **(extra_env or {}),
        }
        log_path = self.logs_dir / f"{log_name}.log"
        with open(log_path, "a") as log:
            log.write(f"$ go {' '.join(args)}  (in {cwd})\n")
            log.flush()
            try:
                result = subprocess.run(
                    ["go", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log, text=True
                )
            except FileNotFoundError as error:
                raise BuildError(
                    "`go` is not on PATH: the playground builds the Kubernetes binaries from Go "
                    "modules and needs Go 1.26 (add /usr/local/go/bin to PATH, or install Go)"
                ) from error
            log.write(result.stdout)
        if result.returncode != 0:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-15:])
            raise BuildError(
                f"`go {' '.join(args)}` failed (exit {result.returncode}); "
                f"full log: {log_path}\n{tail}"
            )
        return result.stdout

    def _wrapper_module(self, name: str) -> Path:
        src = self.cache_dir / "src" / name
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        self._go(["mod", "init", f"vk.local/{name}"], cwd=src, log_name=name)
        self._go(["mod", "edit", "-go=1.26.0"], cwd=src, log_name=name)
        return src

    def _build_kubernetes(self, out: Path, commands: Sequence[str]) -> None:
        name = f"kubernetes-{KUBERNETES_VERSION}"
        src = self._wrapper_module(f"{name}-{commands[0]}")
        with self.progress.step(f"reading k8s.io/kubernetes@{KUBERNETES_VERSION}'s go.mod"):
            info = json.loads(
                self._go(
                    ["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
                    cwd=src,
                    log_name=name,
                    goflags="-mod=mod",
                )
            )
            replaces = staging_replaces(Path(info["GoMod"]).read_text(), KUBERNETES_VERSION)
            if not replaces:
                raise BuildError(f"no staging replaces found in {info['GoMod']}")
            edits = [f"-replace={r}" for r in replaces]
            self._go(["mod", "edit", *edits], cwd=src, log_name=name)
            self._go(
                ["mod", "edit", f"-require=k8s.io/kubernetes@{KUBERNETES_VERSION}"],
                cwd=src,
                log_name=name,
            )
        packages = [f"k8s.io/kubernetes/cmd/{cmd}" for cmd in commands]
        with self.progress.step(f"downloading the modules of {', '.join(commands)}"):
            self._go(
                ["get", *(f"{p}@{KUBERNETES_VERSION}" for p in packages)],
                cwd=src,
                log_name=name,
                goflags="-mod=mod",
            )
        with self.progress.step(
            f"compiling {', '.join(commands)} {KUBERNETES_VERSION} (a few minutes cold)"
        ):
            self._go(
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    version_ldflags(KUBERNETES_VERSION),
                    "-o",
                    f"{out}/",
                    *packages,
                ],
                cwd=src,
                log_name=name,
                goflags="-mod=mod",
            )

    def _build_etcd(self, out: Path) -> None:
        name = f"etcd-{ETCD_VERSION}"
        src = self._wrapper_module(name)
        with self.progress.step(f"building etcd {ETCD_VERSION}"):
            self._go(
                ["get", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}"],
                cwd=src,
                log_name=name,
                goflags="-mod=mod",
            )
            self._go(
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    "-o",
                    str(out / "etcd"),
                    "go.etcd.io/etcd/server/v3",
                ],
                cwd=src,
                log_name=name,
                goflags="-mod=mod",
            )

    def _build_kwok(self, out: Path) -> None:
        name = f"kwok-{KWOK_VERSION}"
        src = self.cache_dir / "src" / name
        src.mkdir(parents=True, exist_ok=True)
        with self.progress.step(f"building kwok {KWOK_VERSION}"):
            self._go(
                ["install", f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}"],
                cwd=src,
                log_name=name,
                extra_env={"GOBIN": str(out)},
            )
        # The stage and metrics YAMLs ship inside the kwok module; keep a copy beside the
        # binary so the playground does not depend on the Go module cache staying around.
        module_dir = (
            Path(self._go(["env", "GOMODCACHE"], cwd=src, log_name=name).strip())
            / f"sigs.k8s.io/kwok@{KWOK_VERSION}"
            / "kustomize"
        )
        shutil.copytree(module_dir / "stage", out / "stage")
        shutil.copytree(module_dir / "metrics", out / "metrics")
        for path in [
            out / "stage",
            out / "metrics",
            *(out / "stage").rglob("*"),
            *(out / "metrics").rglob("*"),
        ]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    def _build_metrics_server(self, out: Path) -> None:
        self._go_install(
            f"metrics-server-{METRICS_SERVER_VERSION}",
            f"sigs.k8s.io/metrics-server/cmd/metrics-server@{METRICS_SERVER_VERSION}",
            out,
        )

    def _build_pause(self, out: Path) -> None:
        name = f"pause-{PAUSE_VERSION}"
        src = self._wrapper_module(name)
        (src / "main.go").write_text(PAUSE_SOURCE)
        with self.progress.step("building the pause program"):
            self._go(
                ["build", "-trimpath", "-ldflags=-s -w", "-o", str(out / "pause"), "."],
                cwd=src,
                log_name=name,
            )

    def _build_helm(self, out: Path) -> None:
        self._go_install(f"helm-{HELM_VERSION}", f"{HELM_MODULE}@{HELM_VERSION}", out)

    def _build_prometheus(self, out: Path) -> None:
        self._go_install(
            f"prometheus-{PROMETHEUS_VERSION}",
            f"github.com/prometheus/prometheus/cmd/prometheus@{PROMETHEUS_MODULE_VERSION}",
            out,
            tags=PROMETHEUS_BUILD_TAGS,
        )

    def _go_install(self, name: str, package: str, out: Path, tags: str = "") -> None:
        """A command that `go install` builds as it is (no replaces), stripped, into `out`."""
        src = self.cache_dir / "src" / name
        src.mkdir(parents=True, exist_ok=True)
        with self.progress.step(f"building {name}"):
            self._go(
                ["install", "-trimpath", f"-tags={tags}", "-ldflags=-s -w", package],
                cwd=src,
                log_name=name,
                extra_env={"GOBIN": str(out)},
            )
