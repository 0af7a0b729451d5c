"""`vk controller-manager` takes Liqo's controller-manager flags for its workers, so that Helm
values written for Liqo mean the same here, and refuses a count that would stop a controller."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vk.api.constants import DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS, DEFAULT_SHADOW_POD_WORKERS
from vk.cli import components
from vk.controllers import manager
from vk.controllers.manager import ManagerOptions


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ManagerOptions]:
    runs: list[ManagerOptions] = []

    def run(options: ManagerOptions) -> int:
        runs.append(options)
        return 0

    monkeypatch.setattr(manager, "main", run)
    return runs


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(components.vk, ["controller-manager", *args])
    return result.exit_code, result.output


def test_the_shadow_controllers_have_liqos_default_workers(started: list[ManagerOptions]) -> None:
    assert invoke() == (0, "")
    (options,) = started
    assert (options.shadow_pod_workers, options.shadow_endpointslice_workers) == (10, 10)
    assert (DEFAULT_SHADOW_POD_WORKERS, DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS) == (10, 10)


def test_liqos_worker_flags_set_them(started: list[ManagerOptions]) -> None:
    code, output = invoke("--shadow-pod-ctrl-workers=32", "--shadow-endpointslice-ctrl-workers=3")
    assert code == 0, output
    (options,) = started
    assert (options.shadow_pod_workers, options.shadow_endpointslice_workers) == (32, 3)


@pytest.mark.parametrize(
    "flag", ["--shadow-pod-ctrl-workers=0", "--shadow-endpointslice-ctrl-workers=-1"]
)
def test_no_workers_is_refused(started: list[ManagerOptions], flag: str) -> None:
    code, output = invoke(flag)
    assert code == 2
    assert flag.split("=")[0] in output
    assert "x>=1" in output
    assert started == []
