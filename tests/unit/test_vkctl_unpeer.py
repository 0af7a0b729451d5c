"""`vkctl unpeer` when the provider does not answer: nothing is removed (the consumer keeps its
identity there, the only way left to end the provider's side) unless `--force`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from vk.api.identity import ClusterIdentity
from vk.cli import peer
from vk.cli.peer import ProviderSide, ProviderUnanswered, remove_peering
from vk.cli.peering import PeeringError
from vk.cli.progress import Progress
from vk.cli.vkctl import vkctl
from vk.cli.waiting import Deadline
from vk.kube.client import ApiError, NotFound
from vk.kube.kubeconfig import ClusterConnection

LISTED = {"resourceslices", "virtualnodes", "namespacemaps", "tenants"}


class Consumer:
    """The consumer as unpeering sees it once everything is gone: lists are empty, objects
    missing; every deletion is recorded."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        if path.split("?")[0].rsplit("/", 1)[-1] in LISTED:
            return {"items": []}
        raise NotFound(404, "NotFound", path)

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.deleted.append(path)
        return {}


class SilentProvider:
    """The provider reached with the consumer's control-plane identity, failing as `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.connection = ClusterConnection(server="https://florence:6443")

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        raise self.error


def unpeer(provider: SilentProvider, consumer: Consumer, *, force: bool = False) -> None:
    asyncio.run(
        remove_peering(
            consumer,  # type: ignore[arg-type]
            ProviderSide(provider),  # type: ignore[arg-type]
            consumer_id="venice",
            provider_id="florence",
            deadline=Deadline.after(5),
            progress=Progress(),
            force=force,
        )
    )


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ApiError(401, "Unauthorized", "certificate has expired"), "401 Unauthorized"),
        (ApiError(500, "InternalError", "etcdserver: leader changed"), "500 InternalError"),
        (TimeoutError(), "no answer in time (TimeoutError)"),
        (ConnectionResetError("connection reset by peer"), "connection reset by peer"),
    ],
)
def test_a_provider_that_does_not_answer_stops_unpeering_before_anything_is_removed(
    error: Exception, said: str
) -> None:
    consumer = Consumer()
    with pytest.raises(ProviderUnanswered) as stopped:
        unpeer(SilentProvider(error), consumer)
    assert consumer.deleted == []
    message = str(stopped.value)
    assert f"florence did not answer, or refused, at https://florence:6443 ({said}" in message
    assert "nothing was removed" in message
    assert "--force" in message


def test_with_force_the_peering_is_removed_here_and_what_florence_keeps_is_said() -> None:
    consumer = Consumer()
    with pytest.raises(PeeringError) as left:
        unpeer(SilentProvider(TimeoutError()), consumer, force=True)
    assert not isinstance(left.value, ProviderUnanswered)
    assert "florence was not reached" in str(left.value)
    assert "/api/v1/namespaces/liqo-tenant-florence/secrets/" in " ".join(consumer.deleted)


@pytest.mark.parametrize(
    "args",
    [
        ("unpeer", "out-of-band", "florence", "--force"),
        ("unpeer", "--force", "out-of-band", "florence"),
    ],
)
def test_unpeer_out_of_band_takes_force(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: tuple[str, ...]
) -> None:
    forced: list[bool] = []

    async def fake_unpeer(*_: object, force: bool = False) -> None:
        forced.append(force)

    monkeypatch.setattr(peer, "unpeer_out_of_band", fake_unpeer)
    config = tmp_path / "consumer"
    config.write_text(
        "current-context: venice\n"
        "contexts: [{name: venice, context: {cluster: venice, user: u}}]\n"
        "clusters: [{name: venice, cluster: {server: 'https://venice:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    result = CliRunner().invoke(vkctl, list(args))
    assert result.exit_code == 0, result.output
    assert forced == [True]


def test_a_silent_provider_named_by_its_kubeconfig_says_how_to_go_on_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`vkctl unpeer --remote-kubeconfig K --force`: which provider K is, only it can say, so
    --force cannot go on; the error says what can (`out-of-band <ID> --force`)."""

    async def read_identity(_: object, which: str) -> ClusterIdentity:
        if which == "remote":
            raise TimeoutError("the remote cluster's API server did not answer")
        return ClusterIdentity("venice")

    monkeypatch.setattr(peer, "read_identity", read_identity)
    connection = ClusterConnection(server="https://127.0.0.1:1")
    with pytest.raises(PeeringError) as refused:
        asyncio.run(peer.unpeer(connection, connection, 5, Progress(), force=True))
    assert "nothing was removed" in str(refused.value)
    assert "`vkctl unpeer out-of-band <its cluster ID> --force`" in str(refused.value)
