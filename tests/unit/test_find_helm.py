"""Which helm `vkctl install` runs: the pinned one in vk's cache, else one on PATH, else an
error saying how to get one."""

from __future__ import annotations

from pathlib import Path

import pytest

from vk.cli.chart import HELM_VERSION, ChartError, find_helm, pinned_helm


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    return tmp_path / "cache"


def test_the_pinned_helm_in_the_cache_comes_before_one_on_path(cache: Path) -> None:
    on_path = executable(cache.parent / "path" / "helm")
    assert find_helm() == on_path
    pinned = executable(pinned_helm(cache))
    assert find_helm() == pinned
    assert pinned == cache / "bin" / f"helm-{HELM_VERSION}" / "helm"


def test_without_helm_the_error_says_how_to_get_one(cache: Path) -> None:
    with pytest.raises(ChartError) as refused:
        find_helm()
    assert "https://helm.sh/docs/intro/install/" in str(refused.value)
    assert f"GOBIN={cache}/bin/helm-{HELM_VERSION} go install" in str(refused.value)
