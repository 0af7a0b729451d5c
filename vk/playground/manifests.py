"""vk's Helm chart and the plain manifests rendered from it.

`deploy/helm/vk` is the chart; `deploy/vk.yaml` is the same installation for users without
Helm, rendered from the chart. `python -m vk.playground.manifests` writes the chart's CRDs from
the models in vk/api and renders deploy/vk.yaml again (a test checks both are current).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vk.api.constants import VK_NAMESPACE
from vk.api.crds import REGENERATE_COMMAND
from vk.api.crds import main as write_crds
from vk.cli.progress import Progress
from vk.playground.binaries import KUBERNETES_VERSION, BinaryBuilder, default_cache_dir

REPOSITORY = Path(__file__).resolve().parents[2]
RELEASE = "vk"
# The plain manifests name a placeholder cluster: the header says how to set the real one.
PLAIN_VALUES: dict[str, Any] = {"clusterID": "my-cluster", "createNamespace": True}
PLAIN_HEADER = f"""\
# vk, installed without Helm: `kubectl apply --server-side -f deploy/vk.yaml`.
# Rendered from deploy/helm/vk by `{REGENERATE_COMMAND}`; do not edit.
# Set this cluster's ID first (a DNS label; peers know the cluster by it):
#   sed 's/"my-cluster"/"<your cluster id>"/' deploy/vk.yaml | kubectl apply --server-side -f -
# and the image, if yours is not localhost/vk:<version>:
#   ... | sed 's|localhost/vk:|registry.example.com/vk:|g' | kubectl apply --server-side -f -
"""


class ChartError(RuntimeError):
    """helm refused the chart or the values; the message is helm's."""


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


def ensure_helm(progress: Progress | None = None) -> Path:
    """The pinned helm, built once from Go modules into vk's cache."""
    return BinaryBuilder(default_cache_dir(), progress or Progress()).ensure_helm()


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


def helm_template(helm: Path, values: Mapping[str, Any], *, chart: Path | None = None) -> str:
    """Every object of an installation, CRDs first, as `helm install` would create them."""
    return run_helm(
        helm,
        [
            "template",
            "vk",
            str(chart or chart_dir()),
            "--namespace=vk",
            f"--kube-version={KUBERNETES_VERSION.lstrip('v')}",
            "--include-crds",
        ],
        values,
    )


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


def render_plain_manifests(helm: Path) -> str:
    return PLAIN_HEADER + helm_template(helm, PLAIN_VALUES)


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    deploy = REPOSITORY / "deploy"
    write_crds([str(deploy / "helm" / "vk" / "crds")])
    (deploy / "vk.yaml").write_text(render_plain_manifests(ensure_helm()))
    print(f"wrote {deploy / 'vk.yaml'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
