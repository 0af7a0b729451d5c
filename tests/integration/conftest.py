"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Clusters

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def crds(clusters: Clusters) -> Clusters:
    """vk's CRDs installed in venice (what `vkctl install` will do)."""
    clusters.kubectl("venice", "apply", "--server-side", "-f", str(REPOSITORY / "deploy" / "crds"))
    clusters.kubectl(
        "venice",
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/virtualnodes.offloading.liqo.io",
        "crd/namespacemaps.offloading.liqo.io",
    )
    return clusters
