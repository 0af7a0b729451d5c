"""`vkctl install` and `vkctl uninstall` without a cluster or helm: what uninstalling refuses
(peerings, offloaded namespaces), and the --timeout both take to helm and to the purge."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.unit.fake_cluster import FakeCluster
from vk.cli import install
from vk.cli.vkctl import vkctl


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(vkctl, list(args), input=stdin)


class Installed(FakeCluster):
    """A cluster with vk installed, holding the NamespaceOffloadings of `offloaded` and
    nothing else of vk's."""

    def __init__(self, *offloaded: str) -> None:
        self.offloaded = offloaded

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/namespaceoffloadings"):
            return {
                "items": [
                    {"metadata": {"name": "offloading", "namespace": n}} for n in self.offloaded
                ]
            }
        return {"items": []}


class Helm:
    """helm as vkctl runs it: every command recorded, vk installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran: list[list[str]] = []
        self.purged: list[float] = []
        monkeypatch.setattr(install, "find_helm", lambda: "helm")
        monkeypatch.setattr(install, "run_helm", self.run)
        monkeypatch.setattr(install, "install_chart", self.install_chart)
        monkeypatch.setattr(install, "_purge", self.purge)

    def run(self, helm: str, args: list[str]) -> str:
        self.ran.append(args)
        return "vk\n"

    def install_chart(self, helm: str, values: Any, args: list[str], **options: Any) -> None:
        self.ran.append(["install", f"--timeout={options['timeout']}"])

    async def purge(self, *_: Any, within: float = -1.0) -> None:
        self.purged.append(within)


def test_uninstalling_while_namespaces_are_offloaded_is_refused_naming_them_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helm = Helm(monkeypatch)
    monkeypatch.setattr(install, "cluster_client", lambda *_: Installed("shop", "cart"))
    result = run("uninstall", "--force")
    assert result.exit_code == 1
    assert "namespaces are offloaded (shop, cart)" in result.stderr
    assert "`vkctl unoffload namespace shop cart` first, or pass --purge" in result.stderr
    assert helm.ran == []


def test_purging_removes_the_offloadings_so_it_is_not_refused_and_waits_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helm = Helm(monkeypatch)
    monkeypatch.setattr(install, "cluster_client", lambda *_: Installed("shop"))
    result = run("uninstall", "--purge", "--timeout", "30s")
    assert result.exit_code == 0, result.output
    assert "--timeout=30000ms" in helm.ran[-1]
    assert helm.purged == [30.0]


@pytest.mark.parametrize(
    "args",
    [
        ("install", "--cluster-id", "venice", "--timeout", "abc"),
        ("uninstall", "--timeout", "abc"),
    ],
)
def test_a_timeout_that_is_no_duration_is_a_usage_error_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    helm = Helm(monkeypatch)
    monkeypatch.setattr(install, "cluster_client", lambda *_: pytest.fail("a cluster was asked"))
    result = run(*args)
    assert result.exit_code == 2
    assert "'abc' is not a duration like 10s or 2m" in result.stderr
    assert result.stdout == ""
    assert helm.ran == []


def test_install_gives_helm_the_timeout_as_a_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    helm = Helm(monkeypatch)
    result = run("install", "--cluster-id", "venice", "--version", "1.0.0", "--timeout", "1m30s")
    assert result.exit_code == 0, result.output
    assert helm.ran == [["install", "--timeout=90000ms"]]
