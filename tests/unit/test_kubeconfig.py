"""Reading kubeconfigs: what works, and the errors a malformed one (say, in a Secret) gives."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from vk.kube import kubeconfig as kubeconfig_module
from vk.kube.kubeconfig import (
    ClusterConnection,
    InvalidKubeconfig,
    default_connection,
    load_kubeconfig_file,
    parse_kubeconfig,
    parse_secret_kubeconfig,
)
from vk.kube.pki import build_ca


def kubeconfig(user: dict, server: str = "https://127.0.0.1:6443") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "home",
            "contexts": [
                {"name": "home", "context": {"cluster": "c", "user": "u"}},
                {"name": "other", "context": {"cluster": "c2", "user": "u"}},
            ],
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(b"CA").decode(),
                    },
                },
                {
                    "name": "c2",
                    "cluster": {"server": "https://10.0.0.1", "insecure-skip-tls-verify": True},
                },
            ],
            "users": [{"name": "u", "user": user}],
        }
    )


def test_current_context_with_inline_certificates() -> None:
    connection = parse_kubeconfig(
        kubeconfig(
            {
                "client-certificate-data": base64.b64encode(b"CERT").decode(),
                "client-key-data": base64.b64encode(b"KEY").decode(),
            }
        )
    )
    assert connection.server == "https://127.0.0.1:6443"
    assert (connection.ca_pem, connection.client_cert_pem, connection.client_key_pem) == (
        b"CA",
        b"CERT",
        b"KEY",
    )


def test_named_context_and_token() -> None:
    connection = parse_kubeconfig(kubeconfig({"token": "abc"}), context="other")
    assert connection.server == "https://10.0.0.1"
    assert connection.insecure_skip_tls_verify
    assert connection.bearer_token() == "abc"


def test_file_references_resolve_against_the_kubeconfigs_directory(tmp_path: Path) -> None:
    (tmp_path / "u.crt").write_bytes(b"CERT")
    (tmp_path / "u.key").write_bytes(b"KEY")
    connection = parse_kubeconfig(
        kubeconfig({"client-certificate": "u.crt", "client-key": "u.key"}), base_dir=tmp_path
    )
    assert connection.client_cert_pem == b"CERT"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "not a YAML mapping"),
        ("{not yaml: [", "not valid YAML"),
        ("just a string", "not a YAML mapping"),
        (yaml.safe_dump({"contexts": []}), "no current-context"),
        (kubeconfig({}, server="127.0.0.1:6443"), "no valid server URL"),
        (kubeconfig({"client-certificate-data": "!!notbase64"}), "not valid base64"),
        (
            kubeconfig({"client-certificate-data": base64.b64encode(b"C").decode()}),
            "without its key",
        ),
        (
            kubeconfig(
                {"client-certificate": "/nonexistent/u.crt", "client-key": "/nonexistent/u.key"}
            ),
            "cannot read",
        ),
    ],
)
def test_malformed_kubeconfig_says_what_is_wrong(content: str, message: str) -> None:
    with pytest.raises(InvalidKubeconfig, match=message):
        parse_kubeconfig(content)


def test_unknown_context_is_named_in_the_error() -> None:
    with pytest.raises(InvalidKubeconfig, match="no context named 'missing'"):
        parse_kubeconfig(kubeconfig({}), context="missing")


# --- What a Secret may hold --------------------------------------------------------------

SECRET_REFUSALS = [
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh"}}, "exec"),
    ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, "tokenFile"),
    ({"client-certificate": "/etc/kubernetes/pki/admin.crt", "client-key": "/k"}, "client-cert"),
    ({"auth-provider": {"name": "gcp"}}, "auth-provider"),
]


@pytest.mark.parametrize(("user", "field"), SECRET_REFUSALS)
def test_a_secrets_kubeconfig_may_not_run_commands_or_read_files(user: dict, field: str) -> None:
    with pytest.raises(InvalidKubeconfig, match="inline credentials only") as refused:
        parse_secret_kubeconfig(kubeconfig(user))
    assert f"users[u].{field}" in str(refused.value)


@pytest.mark.parametrize(
    ("cluster_field", "value"),
    [("certificate-authority", "/etc/kubernetes/pki/ca.crt"), ("proxy-url", "http://evil:3128")],
)
def test_a_secrets_kubeconfig_may_not_name_a_file_or_a_proxy(
    cluster_field: str, value: str
) -> None:
    document = yaml.safe_load(kubeconfig({"token": "t"}))
    document["clusters"][0]["cluster"][cluster_field] = value
    with pytest.raises(InvalidKubeconfig, match=f"clusters\\[c\\].{cluster_field}"):
        parse_secret_kubeconfig(yaml.safe_dump(document))


def test_a_secrets_kubeconfig_with_inline_credentials_is_read() -> None:
    document = yaml.safe_load(kubeconfig({"token": "t"}))
    document["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes.default"
    connection = parse_secret_kubeconfig(yaml.safe_dump(document))
    assert (connection.token, connection.tls_server_name) == ("t", "kubernetes.default")


# --- Exec plugins --------------------------------------------------------------------------


def plugin(tmp_path: Path, answer: dict | str, *, exit_code: int = 0) -> Path:
    """A plugin that logs each run (and the exec info it was given) and prints `answer`."""
    script = tmp_path / "plugin.sh"
    body = answer if isinstance(answer, str) else json.dumps(answer)
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$KUBERNETES_EXEC_INFO" >> "{tmp_path}/runs"\n'
        f"cat <<'EOF'\n{body}\nEOF\n"
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return script


def exec_user(command: str, **extra: object) -> dict:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command,
            "args": ["--cluster", "naples"],
            "env": [{"name": "PLUGIN_MODE", "value": "test"}],
            "interactiveMode": "Never",
            **extra,
        }
    }


def credential(status: dict) -> dict:
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": status,
    }


def runs(tmp_path: Path) -> list[dict]:
    path = tmp_path / "runs"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_exec_plugins_token_is_asked_for_when_needed_and_kept_until_it_expires(
    tmp_path: Path,
) -> None:
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    script = plugin(tmp_path, credential({"token": "from-plugin", "expirationTimestamp": later}))
    connection = parse_kubeconfig(kubeconfig(exec_user(str(script), provideClusterInfo=True)))
    assert runs(tmp_path) == []  # not run by reading the kubeconfig
    assert connection.bearer_token() == "from-plugin"
    assert connection.bearer_token() == "from-plugin"
    (info,) = runs(tmp_path)
    assert info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert info["spec"]["cluster"]["certificate-authority-data"] == base64.b64encode(b"CA").decode()
    connection.forget_credential()  # what a 401 does
    assert connection.bearer_token() == "from-plugin"
    assert len(runs(tmp_path)) == 2


def test_an_expired_credential_is_asked_for_again(tmp_path: Path) -> None:
    past = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)).isoformat()
    script = plugin(tmp_path, credential({"token": "t", "expirationTimestamp": past}))
    connection = parse_kubeconfig(kubeconfig(exec_user(str(script))))
    connection.bearer_token()
    connection.bearer_token()
    assert len(runs(tmp_path)) == 2
    assert "cluster" not in runs(tmp_path)[0]["spec"]  # no provideClusterInfo


def test_a_relative_plugin_path_is_the_kubeconfigs_neighbour(tmp_path: Path) -> None:
    plugin(tmp_path, credential({"token": "near"}))
    path = tmp_path / "config"
    path.write_text(kubeconfig(exec_user("./plugin.sh")))
    assert load_kubeconfig_file(path).bearer_token() == "near"


@pytest.mark.parametrize(
    ("answer", "exit_code", "message"),
    [
        ("not json", 0, "no JSON ExecCredential"),
        ({"kind": "Other"}, 0, "no ExecCredential"),
        (
            {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"},
            0,
            "not 'client.authentication.k8s.io/v1'",
        ),
        (credential({}), 0, "neither a token nor a certificate"),
        (credential({"token": "t", "expirationTimestamp": "soon"}), 0, "not a time"),
        ("login required", 3, "exited 3"),
    ],
)
def test_a_plugin_that_answers_wrong_says_so(
    tmp_path: Path, answer: dict | str, exit_code: int, message: str
) -> None:
    script = plugin(tmp_path, answer, exit_code=exit_code)
    connection = parse_kubeconfig(kubeconfig(exec_user(str(script))))
    with pytest.raises(InvalidKubeconfig, match=message):
        connection.bearer_token()


def test_a_missing_plugin_gives_its_install_hint(tmp_path: Path) -> None:
    user = exec_user(str(tmp_path / "nowhere"), installHint="install it with: brew install x")
    connection = parse_kubeconfig(kubeconfig(user))
    with pytest.raises(InvalidKubeconfig, match="not found \\(install it with: brew install x\\)"):
        connection.bearer_token()


# --- Merged files, tls-server-name, proxy-url -----------------------------------------------


def test_kubeconfig_files_merge_as_kubectl_merges_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a" / "config", tmp_path / "b" / "config"
    for path in (first, second):
        path.parent.mkdir()
    (tmp_path / "b" / "token").write_text("from-b\n")
    first.write_text(
        yaml.safe_dump(
            {
                "current-context": "naples",
                "contexts": [{"name": "venice", "context": {"cluster": "venice", "user": "a"}}],
                "clusters": [{"name": "venice", "cluster": {"server": "https://venice:6443"}}],
                "users": [{"name": "a", "user": {"token": "from-a"}}],
            }
        )
    )
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "venice",
                "contexts": [
                    {"name": "naples", "context": {"cluster": "naples", "user": "b"}},
                    {"name": "venice", "context": {"cluster": "other", "user": "b"}},
                ],
                "clusters": [
                    {
                        "name": "naples",
                        "cluster": {
                            "server": "https://naples:6443",
                            "tls-server-name": "kubernetes",
                        },
                    },
                    {"name": "venice", "cluster": {"server": "https://shadowed:6443"}},
                ],
                "users": [{"name": "b", "user": {"tokenFile": "token"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    naples = default_connection()  # the first file's current-context, defined in the second
    assert (naples.server, naples.tls_server_name) == ("https://naples:6443", "kubernetes")
    assert naples.bearer_token() == "from-b"  # its file relative to the second file
    venice = default_connection(context="venice")  # the first file's definition wins
    assert (venice.server, venice.bearer_token()) == ("https://venice:6443", "from-a")


def test_a_proxy_url_is_kept_and_only_http_ones_are_taken() -> None:
    document = yaml.safe_load(kubeconfig({"token": "t"}))
    document["clusters"][0]["cluster"]["proxy-url"] = "http://proxy.example:3128"
    assert parse_kubeconfig(yaml.safe_dump(document)).proxy_url == "http://proxy.example:3128"
    document["clusters"][0]["cluster"]["proxy-url"] = "socks5://proxy.example:1080"
    with pytest.raises(InvalidKubeconfig, match="not socks5"):
        parse_kubeconfig(yaml.safe_dump(document))


def test_a_token_file_is_read_again_each_minute_and_after_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    connection = ClusterConnection(server="https://127.0.0.1:6443", token_file=token)
    clock = [1000.0]
    monkeypatch.setattr(kubeconfig_module.time, "monotonic", lambda: clock[0])
    assert connection.bearer_token() == "first"
    token.write_text("second")  # rotated
    clock[0] += kubeconfig_module.TOKEN_FILE_REREAD_SECONDS - 1
    assert connection.bearer_token() == "first"  # not read for every request
    clock[0] += 1
    assert connection.bearer_token() == "second"
    token.write_text("third")
    assert connection.renewable
    connection.forget_credential()  # what a 401 does
    assert connection.bearer_token() == "third"
    assert not ClusterConnection(server="https://127.0.0.1:6443", token="static").renewable


def test_only_a_certificate_from_the_plugin_is_the_plugins_to_renew(tmp_path: Path) -> None:
    """`exec_certificate`, which the client watches to renew its TLS: the plugin's credential
    when it gives the certificate; never when it gives a token, or when the kubeconfig has a
    certificate of its own (the plugin then gives the token alone, and is not run for TLS)."""
    tokens = plugin(tmp_path, credential({"token": "t"}))
    assert parse_kubeconfig(kubeconfig(exec_user(str(tokens)))).exec_certificate() is None
    (tmp_path / "runs").unlink()
    own = ClusterConnection(
        server="https://127.0.0.1:6443",
        client_cert_pem=b"CERT",
        client_key_pem=b"KEY",
        exec_plugin=parse_kubeconfig(kubeconfig(exec_user(str(tokens)))).exec_plugin,
    )
    assert own.exec_certificate() is None
    assert runs(tmp_path) == []
    certificates = plugin(
        tmp_path, credential({"clientCertificateData": "C", "clientKeyData": "K"})
    )
    given = parse_kubeconfig(kubeconfig(exec_user(str(certificates)))).exec_certificate()
    assert given is not None
    assert given.client_cert_pem == b"C"


def test_a_kubeconfigs_ca_is_the_only_one_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As client-go: with a CA in the kubeconfig, the system's roots (here a CA put in
    SSL_CERT_FILE) are not trusted for that server."""
    now = datetime.datetime.now(datetime.UTC)
    system_ca, _ = build_ca("a-public-ca", now)
    system_file = tmp_path / "system.pem"
    system_file.write_bytes(system_ca.public_bytes(serialization.Encoding.PEM))
    monkeypatch.setenv("SSL_CERT_FILE", str(system_file))
    own_ca, _ = build_ca("the-clusters-ca", now)
    connection = ClusterConnection(
        server="https://127.0.0.1:6443",
        ca_pem=own_ca.public_bytes(serialization.Encoding.PEM),
    )
    context = connection.ssl_context()
    trusted = [ca["subject"] for ca in context.get_ca_certs()]
    assert trusted == [((("commonName", "the-clusters-ca"),),)]
    assert context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    # Without a CA of its own, the system's roots are the trust, as kubectl's.
    assert ClusterConnection(server="https://example.com").ssl_context().get_ca_certs() != []
