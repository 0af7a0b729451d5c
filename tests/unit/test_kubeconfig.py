"""Reading kubeconfigs: what works, and the errors a malformed one (say, in a Secret) gives."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from vk.kube.kubeconfig import InvalidKubeconfig, parse_kubeconfig


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
