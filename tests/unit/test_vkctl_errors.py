"""Where vkctl finds the cluster, and what it says when it cannot do what it was asked:
liqoctl's global `--kubeconfig` and `--context` (before the command), an API server that never
answers (a local port that takes connections and answers nothing), the API server's refusals,
each with the advice that fits it, and kubeconfigs that cannot be read."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from vk.cli import info, install, kubeconfigs, offload, options, peer, resources, tenancy
from vk.cli.peering import PeeringError
from vk.cli.vkctl import vkctl
from vk.kube.client import ApiError, NotFound

KUBECONFIG_HINT = "check that --kubeconfig and --context reach the right cluster"


def run(*args: str) -> Result:
    return CliRunner().invoke(vkctl, list(args))


def write_kubeconfig(path: Path, server: str, *contexts: str) -> Path:
    """A kubeconfig whose contexts (`a` if none is named; the first is current) all reach
    `server`."""
    names = contexts or ("a",)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": names[0],
                "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in names],
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return path


# --- liqoctl's global flags ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "args", "reached"),
    [
        # The tutorial's `liqoctl --kubeconfig $KUBECONFIG_NAPLES status`.
        (info, ["--kubeconfig", "naples.yaml", "status"], ("naples.yaml", None)),
        (
            info,
            ["--kubeconfig", "naples.yaml", "--context", "admin", "info", "peer", "venice"],
            ("naples.yaml", "admin"),
        ),
        # A command's own flag wins, the other still comes from above.
        (
            info,
            ["--kubeconfig", "naples.yaml", "--context", "admin", "info", "--kubeconfig", "k"],
            ("k", "admin"),
        ),
        (info, ["--kubeconfig", "a", "info", "--kubeconfig", "b", "peer", "venice"], ("b", None)),
        (
            resources,
            ["--kubeconfig", "naples.yaml", "delete", "resourceslice", "s",
             "--remote-cluster-id", "naples"],
            ("naples.yaml", None),
        ),
        (tenancy, ["--context", "admin", "drain", "tenant", "venice"], (None, "admin")),
        (
            kubeconfigs,
            ["--kubeconfig", "venice.yaml", "get", "kubeconfig", "--remote-cluster-id", "naples"],
            ("venice.yaml", None),
        ),
        (offload, ["--kubeconfig", "venice.yaml", "offload", "namespace", "shop"],
         ("venice.yaml", None)),
        (install, ["--kubeconfig", "venice.yaml", "uninstall"], ("venice.yaml", None)),
    ],
)  # fmt: skip
def test_kubeconfig_and_context_given_before_the_command_are_the_commands(
    monkeypatch: pytest.MonkeyPatch, module: Any, args: list[str], reached: tuple[Any, Any]
) -> None:
    seen: list[tuple[Any, Any]] = []

    def cluster_client(kubeconfig: Any, context: Any, **_: Any) -> Any:
        seen.append((kubeconfig, context))
        raise PeeringError("reached")

    monkeypatch.setattr(module, "cluster_client", cluster_client)
    result = run(*args)
    assert result.stderr == "Error: reached\n", result.output
    assert seen == [reached]


def test_peer_and_unpeer_take_the_global_kubeconfig_for_this_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[Any, Any]] = []

    def default_connection(kubeconfig: Any, *, context: Any = None) -> Any:
        seen.append((kubeconfig, context))
        raise PeeringError("reached")

    monkeypatch.setattr(peer, "default_connection", default_connection)
    remote = write_kubeconfig(tmp_path / "naples.yaml", "https://naples:6443")
    for args in (
        ["--kubeconfig", "venice.yaml", "peer", "--remote-kubeconfig", str(remote)],
        ["--kubeconfig", "venice.yaml", "--context", "v", "unpeer", "out-of-band", "naples"],
    ):
        assert run(*args).stderr == "Error: reached\n"
    assert seen == [("venice.yaml", None), ("venice.yaml", "v")]


def test_a_global_kubeconfig_is_refused_by_a_command_that_talks_to_no_cluster() -> None:
    result = run("--kubeconfig", "naples.yaml", "playground", "status")
    assert result.exit_code == 2
    assert "`vkctl playground` talks to no cluster of yours: drop --kubeconfig" in result.stderr


# --- An API server that never answers ------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of an API server that takes connections (the kernel's backlog does) and never
    answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_an_api_server_that_never_answers_is_named_with_how_long_it_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, silent_server: str
) -> None:
    monkeypatch.setattr(options, "REQUEST_SECONDS", 0.3)
    silent = write_kubeconfig(tmp_path / "silent.yaml", silent_server)
    result = run("info", "--kubeconfig", str(silent))
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"Error: the API server {silent_server} did not answer within 0.3s: {KUBECONFIG_HINT}"
    ), result.stderr


def test_no_request_outlives_the_commands_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, silent_server: str
) -> None:
    monkeypatch.setattr(options, "LAST_ANSWER_SECONDS", 0.1)
    silent = write_kubeconfig(tmp_path / "silent.yaml", silent_server)
    started = time.monotonic()
    result = run(
        "delete", "virtualnode", "n", "--remote-cluster-id", "naples",
        "--timeout", "1s", "--kubeconfig", str(silent),
    )  # fmt: skip
    assert time.monotonic() - started < 5  # not the 30 s a request may otherwise take
    assert result.exit_code == 1
    said = rf"did not answer within [01](\.\d)?s, what was left of --timeout 1s: {KUBECONFIG_HINT}"
    assert re.search(said, result.stderr), result.stderr


def test_peer_names_the_side_whose_api_server_never_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, silent_server: str
) -> None:
    monkeypatch.setattr(options, "REQUEST_SECONDS", 0.3)
    silent = write_kubeconfig(tmp_path / "silent.yaml", silent_server)
    result = run("peer", "--kubeconfig", str(silent), "--remote-kubeconfig", str(silent))
    assert result.exit_code == 1
    said = f"the local cluster's API server {silent_server} did not answer within 0.3s"
    assert said in result.stderr, result.stderr
    result = run("unpeer", "out-of-band", "naples", "--kubeconfig", str(silent))
    assert f"the local cluster's API server {silent_server} did not answer" in result.stderr


def test_a_server_not_reached_is_said_first_then_the_kubeconfig_to_check(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: refused
        nowhere = write_kubeconfig(tmp_path / "nowhere.yaml", f"http://127.0.0.1:{port}")
        result = run("info", "--kubeconfig", str(nowhere))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot connect to 127.0.0.1:{port}")
    assert KUBECONFIG_HINT in result.stderr


# --- The API server's refusals, each with its advice -----------------------------------------


class RefusingCluster:
    """A provider holding the Tenant of venice, refusing to change it with `error`."""

    def __init__(self, error: ApiError) -> None:
        self.error = error

    async def __aenter__(self) -> RefusingCluster:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        return {"spec": {"tenantCondition": "Active"}}

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise self.error


RBAC_DENIED = (
    'tenants.authentication.liqo.io "venice" is forbidden: User "bob" cannot patch resource '
    '"tenants" in API group "authentication.liqo.io" in the namespace "liqo-tenant-venice"'
)


@pytest.mark.parametrize(
    ("error", "said", "kubeconfig_hint"),
    [
        (
            ApiError(403, "Forbidden", RBAC_DENIED),
            f"{RBAC_DENIED}: bob lacks that RBAC right; ask the cluster's administrator for it",
            False,
        ),
        (
            ApiError(403, "Forbidden", 'admission webhook "quota.vk.io" denied the request: no'),
            'the API server refused it (Forbidden): admission webhook "quota.vk.io" denied the '
            "request: no",
            False,
        ),
        (
            NotFound(404, "NotFound", 'tenants.authentication.liqo.io "venice" not found'),
            'tenants.authentication.liqo.io "venice" not found',
            False,
        ),
        (
            NotFound(404, "NotFound", "the server could not find the requested resource"),
            "the server could not find the requested resource: is vk installed in this cluster",
            False,
        ),
        (
            ApiError(422, "Invalid", 'Tenant "venice" is invalid:\n spec.tenantCondition: bad'),
            'the API server refused a value (Invalid): Tenant "venice" is invalid: '
            "spec.tenantCondition: bad",
            False,
        ),
        (
            ApiError(400, "BadRequest", "json: cannot unmarshal string into Go struct field"),
            "the API server refused a value (BadRequest): json: cannot unmarshal string",
            False,
        ),
        (
            ApiError(401, "Unauthorized", "Unauthorized"),
            f"the API server refused the credentials (Unauthorized): {KUBECONFIG_HINT}",
            True,
        ),
    ],
)
def test_each_refusal_of_the_api_server_comes_with_its_own_advice(
    monkeypatch: pytest.MonkeyPatch, error: ApiError, said: str, kubeconfig_hint: bool
) -> None:
    monkeypatch.setattr(tenancy, "cluster_client", lambda *_, **__: RefusingCluster(error))
    result = run("cordon", "tenant", "venice")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {said}"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert (KUBECONFIG_HINT in result.stderr) == kubeconfig_hint


# --- Kubeconfigs that cannot be read --------------------------------------------------------


def test_a_kubeconfig_that_is_no_yaml_is_said_in_one_line_with_where(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [\n")
    result = run("info", "--kubeconfig", str(broken))
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: kubeconfig {broken} is not valid YAML: line 2, column 1: expected the node "
        "content, but found '<stream end>'\n"
    )


def test_an_empty_kubeconfig_file_is_said_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    result = run("info", "--kubeconfig", str(empty))
    assert result.exit_code == 1
    assert result.stderr == f"Error: kubeconfig {empty} is empty: it names no cluster\n"


def test_a_missing_kubeconfig_is_said_so_without_asking_for_the_flag_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.yaml"
    assert run("info", "--kubeconfig", str(missing)).stderr == (
        f"Error: kubeconfig {missing} does not exist\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert run("info").stderr == f"Error: kubeconfig {missing} does not exist (from $KUBECONFIG)\n"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert run("info").stderr == (
        f"Error: kubeconfig {tmp_path / '.kube' / 'config'} does not exist; pass --kubeconfig "
        "with the cluster's kubeconfig, or set KUBECONFIG\n"
    )


def test_a_context_not_in_the_kubeconfig_is_said_with_the_file_and_its_contexts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    venice = write_kubeconfig(tmp_path / "venice.yaml", "https://venice:6443", "venice", "admin")
    naples = write_kubeconfig(tmp_path / "naples.yaml", "https://naples:6443", "naples")
    result = run("info", "--kubeconfig", str(venice), "--context", "nope")
    assert result.stderr == (
        f"Error: kubeconfig has no context named 'nope' ({venice} has venice, admin)\n"
    )
    # The remote side's, named by its file.
    monkeypatch.setenv("KUBECONFIG", str(venice))
    result = run("peer", "--remote-kubeconfig", str(naples), "--remote-context", "nope")
    assert result.exit_code == 1
    assert result.stderr == f"Error: kubeconfig has no context named 'nope' ({naples} has naples)\n"
