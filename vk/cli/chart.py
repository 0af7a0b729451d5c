"""vk's Helm chart as vkctl installs it: where the chart is, which helm runs it, and the release.

vkctl builds nothing: it runs the helm vk is tested with where the playground builds it (vk's
cache), else a helm on PATH. The playground installs the chart and renders deploy/vk.yaml with
these too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vk.api.constants import VK_NAMESPACE

REPOSITORY = Path(__file__).resolve().parents[2]  # a checkout's root, when vk runs from one
RELEASE = "vk"
HELM_VERSION = "v3.22.0"
HELM_MODULE = "helm.sh/helm/v3/cmd/helm"


class ChartError(RuntimeError):
    """helm refused the chart or the values (the message is helm's), or there is no helm."""


def default_cache_dir() -> Path:
    """vk's cache of built tools, outside any checkout: the playground's binaries and helm."""
    base = os.environ.get("VK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vk"
    )
    return Path(base)


def pinned_helm(cache_dir: Path) -> Path:
    """Where the helm vk is tested with is built: `<cache>/bin/helm-<version>/helm`."""
    return cache_dir / "bin" / f"helm-{HELM_VERSION}" / "helm"


def find_helm() -> Path:
    """The pinned helm in vk's cache, else a helm on PATH."""
    pinned = pinned_helm(default_cache_dir())
    if pinned.is_file():
        return pinned
    on_path = shutil.which("helm")
    if on_path is not None:
        return Path(on_path)
    raise ChartError(
        "no helm: vkctl installs vk's chart with helm 3; put one on PATH "
        "(https://helm.sh/docs/intro/install/), or build the version vk is tested with where "
        f"vkctl looks first: GOBIN={pinned.parent} go install {HELM_MODULE}@{HELM_VERSION}"
    )


def chart_dir() -> Path:
    """The chart: the checkout's deploy/helm/vk, or the copy installed with vk's package."""
    for candidate in (
        REPOSITORY / "deploy" / "helm" / "vk",
        Path(sys.prefix) / "share" / "vk" / "helm" / "vk",
    ):
        if (candidate / "Chart.yaml").is_file():
            return candidate
    raise ChartError("vk's Helm chart is not installed with this vk (no deploy/helm/vk)")


def chart_version(chart: Path) -> str:
    version: str = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    return version


def run_helm(helm: Path, args: Sequence[str], values: Mapping[str, Any] | None = None) -> str:
    """helm's output. Values go in a file: keys with dots need no escaping there."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
        command = [str(helm), *args]
        if values is not None:
            yaml.safe_dump(dict(values), values_file)
            values_file.flush()
            command += ["--values", values_file.name]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ChartError(result.stderr.strip() or f"helm {args[0]} failed")
    return result.stdout


def install_chart(
    helm: Path,
    values: Mapping[str, Any],
    cluster_args: Sequence[str],
    *,
    timeout: str = "5m",
    overrides: Sequence[str] = (),
) -> None:
    """`helm upgrade --install` of the release `vk` in the namespace vk, waiting for its pods:
    install and upgrade are one command. `cluster_args` say which cluster (--kubeconfig,
    --kube-context); `overrides` are --set values."""
    run_helm(
        helm,
        [
            "upgrade",
            "--install",
            RELEASE,
            str(chart_dir()),
            f"--namespace={VK_NAMESPACE}",
            *cluster_args,
            "--create-namespace",
            "--wait",
            f"--timeout={timeout}",
            *(f"--set={override}" for override in overrides),
        ],
        values,
    )
