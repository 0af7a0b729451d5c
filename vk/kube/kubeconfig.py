"""The one way vk reads a kubeconfig: from a file, from a Secret's bytes, or in-cluster.

Parsing is pure (text in, `ClusterConnection` out) so a malformed kubeconfig Secret becomes a
typed `InvalidKubeconfig` with a message that says what is wrong, never a crash deep in TLS.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


class InvalidKubeconfig(ValueError):
    """The kubeconfig cannot be used; the message says why and where."""


@dataclass(frozen=True)
class ClusterConnection:
    """Everything needed to talk to one API server as one identity."""

    server: str
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    token_file: Path | None = None  # re-read on use: projected tokens rotate

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_pem is not None:
            context.load_verify_locations(cadata=self.ca_pem.decode())
        if self.client_cert_pem and self.client_key_pem:
            load_key_pair(context, self.client_cert_pem, self.client_key_pem)
        return context

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            return self.token_file.read_text().strip()
        return self.token


def load_key_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Loads a certificate and its key into `context` (replacing any before, for new
    connections). ssl loads key pairs only from files: written 0600, loaded, removed."""
    with tempfile.TemporaryDirectory(prefix="vk-tls-") as scratch:
        cert_path, key_path = Path(scratch, "tls.crt"), Path(scratch, "tls.key")
        for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert_path, key_path)


def _field_bytes(
    entry: dict[str, Any], data_key: str, file_key: str, base_dir: Path | None, where: str
) -> bytes | None:
    if entry.get(data_key):
        try:
            return base64.b64decode(entry[data_key], validate=True)
        except (binascii.Error, ValueError, TypeError) as error:
            raise InvalidKubeconfig(f"{where}.{data_key} is not valid base64") from error
    if entry.get(file_key):
        path = Path(entry[file_key])
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            return path.read_bytes()
        except OSError as error:
            raise InvalidKubeconfig(f"{where}.{file_key}: cannot read {path}: {error}") from error
    return None


def _named(entries: Any, name: str, kind: str) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind[:-1])  # contexts[].context, clusters[].cluster, users[].user
            if isinstance(body, dict):
                return body
    raise InvalidKubeconfig(f"kubeconfig has no {kind[:-1]} named {name!r}")


def parse_kubeconfig(
    content: str | bytes, *, context: str | None = None, base_dir: Path | None = None
) -> ClusterConnection:
    """Parses a kubeconfig (its current context, or `context`). Relative file references are
    resolved against `base_dir`, as kubectl does against the kubeconfig's own directory."""
    try:
        document = yaml.safe_load(content)
    except yaml.YAMLError as error:
        raise InvalidKubeconfig(f"kubeconfig is not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise InvalidKubeconfig("kubeconfig is not a YAML mapping (is the Secret key right?)")
    context_name = context or document.get("current-context")
    if not context_name:
        raise InvalidKubeconfig("kubeconfig has no current-context and none was given")
    context_body = _named(document.get("contexts"), context_name, "contexts")
    cluster = _named(document.get("clusters"), context_body.get("cluster", ""), "clusters")
    user_name = context_body.get("user")
    user = _named(document.get("users"), user_name, "users") if user_name else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise InvalidKubeconfig(f"cluster of context {context_name!r} has no valid server URL")
    cluster_where = f"clusters[{context_body.get('cluster')}]"
    user_where = f"users[{user_name}]"
    cert = _field_bytes(user, "client-certificate-data", "client-certificate", base_dir, user_where)
    key = _field_bytes(user, "client-key-data", "client-key", base_dir, user_where)
    if bool(cert) != bool(key):
        raise InvalidKubeconfig(
            f"{user_where} has a client certificate without its key, "
            "or a key without its certificate"
        )
    token = user.get("token")
    token_file = user.get("tokenFile")
    return ClusterConnection(
        server=server.rstrip("/"),
        ca_pem=_field_bytes(
            cluster, "certificate-authority-data", "certificate-authority", base_dir, cluster_where
        ),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        client_cert_pem=cert,
        client_key_pem=key,
        token=token if isinstance(token, str) else None,
        token_file=Path(token_file) if isinstance(token_file, str) else None,
    )


def load_kubeconfig_file(path: str | Path, *, context: str | None = None) -> ClusterConnection:
    path = Path(path)
    try:
        content = path.read_bytes()
    except OSError as error:
        raise InvalidKubeconfig(f"cannot read kubeconfig {path}: {error}") from error
    return parse_kubeconfig(content, context=context, base_dir=path.parent)


def in_cluster_connection() -> ClusterConnection:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port or not IN_CLUSTER_TOKEN.exists():
        raise InvalidKubeconfig(
            "not running in a cluster (no KUBERNETES_SERVICE_HOST or service-account token): "
            "pass --kubeconfig or set KUBECONFIG"
        )
    if ":" in host:
        host = f"[{host}]"
    return ClusterConnection(
        server=f"https://{host}:{port}",
        ca_pem=IN_CLUSTER_CA.read_bytes(),
        token_file=IN_CLUSTER_TOKEN,
    )


def kubeconfig_file(kubeconfig: str | None = None) -> Path | None:
    """The file `default_connection` reads: --kubeconfig, else $KUBECONFIG (its first file),
    else none in a cluster's pod (in-cluster), else ~/.kube/config."""
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    if path:
        return Path(path)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return Path.home() / ".kube" / "config"


def default_connection(
    kubeconfig: str | None = None, *, context: str | None = None
) -> ClusterConnection:
    """--kubeconfig, else $KUBECONFIG (its first file), else in-cluster, else ~/.kube/config."""
    path = kubeconfig_file(kubeconfig)
    if path is None:
        return in_cluster_connection()
    return load_kubeconfig_file(path, context=context)
