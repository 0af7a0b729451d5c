"""The plain manifests rendered from vk's Helm chart, with the helm the playground builds.

`deploy/helm/vk` is the chart (vk.cli.chart installs it); `deploy/vk.yaml` is the same
installation for users without Helm. `python -m vk.playground.manifests` writes the chart's CRDs
from the models in vk/api and renders deploy/vk.yaml again (a test checks both are current).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vk.api.crds import REGENERATE_COMMAND
from vk.api.crds import main as write_crds
from vk.cli.chart import REPOSITORY, chart_dir, default_cache_dir, run_helm
from vk.cli.progress import Progress
from vk.playground.binaries import KUBERNETES_VERSION, BinaryBuilder

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


def ensure_helm(progress: Progress | None = None) -> Path:
    """The pinned helm, built once from Go modules into vk's cache (where vkctl finds it)."""
    return BinaryBuilder(default_cache_dir(), progress or Progress()).ensure_helm()


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
