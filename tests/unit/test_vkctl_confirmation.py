"""`vkctl uninstall` and `vkctl unoffload namespace` ask before deleting, as liqoctl does, when
someone at a terminal can answer; `--skip-confirm` does not ask, and scripts are never asked."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.unit.fake_cluster import FakeCluster
from vk.cli import confirmation, install, offload
from vk.cli.vkctl import vkctl
from vk.kube.client import NotFound


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(vkctl, list(args), input=stdin)


class Cluster(FakeCluster):
    """A cluster with vk, no peering and nothing offloaded; the calls made to it, and to
    helm, recorded."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.helm: list[list[str]] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        self.asked.append(f"GET {path}")
        return {"items": []}

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.asked.append(f"DELETE {path}")
        raise NotFound(404, "NotFound", "not found")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    cluster = Cluster()
    monkeypatch.setattr(install, "cluster_client", lambda *_: cluster)
    monkeypatch.setattr(offload, "cluster_client", lambda *_: cluster)
    monkeypatch.setattr(install, "find_helm", lambda: "helm")
    monkeypatch.setattr(install, "run_helm", lambda _, args: cluster.helm.append(args) or "vk")
    return cluster


@pytest.fixture
def at_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confirmation, "at_terminal", lambda: True)


COMMANDS = [
    (("uninstall",), "uninstalling removes vk (the Helm release vk)"),
    (("unoffload", "namespace", "shop"), "unoffloading shop deletes their remote namespaces"),
]


@pytest.mark.parametrize(("args", "said"), COMMANDS)
@pytest.mark.usefixtures("at_terminal")
def test_at_a_terminal_it_asks_saying_what_goes_and_no_stops_it(
    cluster: Cluster, args: tuple[str, ...], said: str
) -> None:
    result = run(*args, stdin="n\n")
    assert result.exit_code == 1
    assert said in result.stderr
    assert "Aborted!" in result.stderr
    assert not any(a.startswith("DELETE") for a in cluster.asked)
    assert cluster.helm == []


@pytest.mark.parametrize(("args", "said"), COMMANDS)
@pytest.mark.usefixtures("at_terminal")
def test_yes_goes_on(cluster: Cluster, args: tuple[str, ...], said: str) -> None:
    result = run(*args, stdin="y\n")
    assert result.exit_code == 0, result.output
    assert said in result.stderr


@pytest.mark.parametrize(("args", "said"), COMMANDS)
@pytest.mark.usefixtures("at_terminal")
def test_skip_confirm_does_not_ask(cluster: Cluster, args: tuple[str, ...], said: str) -> None:
    result = run(*args, "--skip-confirm")
    assert result.exit_code == 0, result.output
    assert said not in result.output


def test_unoffloading_by_selector_says_which_namespaces_are_asked_about(
    cluster: Cluster, at_terminal: None
) -> None:
    result = run("unoffload", "namespace", "shop", "--ns-selector", "team=web", stdin="n\n")
    assert "unoffloading shop and those matching 'team=web' deletes" in result.stderr
