"""The local launcher's virtual kubelet token: minted again when it ages, and when the
ServiceAccount it was minted for was made again (someone deleted it: its tokens are refused)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from vk.controllers.virtualkubelet_local import LocalProcessLauncher
from vk.controllers.virtualnodes import VirtualKubeletSpec


class TokenMinter:
    def __init__(self) -> None:
        self.minted: list[str] = []

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        self.minted.append(path)
        return {"status": {"token": f"token-{len(self.minted)}"}}


async def test_a_token_is_minted_again_for_a_service_account_made_again(tmp_path: Path) -> None:
    minter = TokenMinter()
    launcher = LocalProcessLauncher(client=minter, root=tmp_path)  # type: ignore[arg-type]
    spec = VirtualKubeletSpec("liqo-tenant-naples", "naples", (), (), service_account_uid="a")
    await launcher._refresh_token(spec, tmp_path)
    await launcher._refresh_token(spec, tmp_path)
    assert minter.minted == [
        "/api/v1/namespaces/liqo-tenant-naples/serviceaccounts/vk-naples/token"
    ]
    assert (tmp_path / "token").read_text() == "token-1"
    await launcher._refresh_token(dataclasses.replace(spec, service_account_uid="b"), tmp_path)
    assert len(minter.minted) == 2
    assert (tmp_path / "token").read_text() == "token-2"
