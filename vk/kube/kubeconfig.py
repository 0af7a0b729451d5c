"""The one way vk reads a kubeconfig: from files, from a Secret's bytes, or in-cluster.

What a person passes (`--kubeconfig`, `$KUBECONFIG`, `--remote-kubeconfig`) is read as kubectl
reads it: several files in `$KUBECONFIG` merged (the first to name a context, cluster or user,
or to set current-context, wins), credentials from files or from an exec plugin
(client.authentication.k8s.io, what EKS, GKE and AKS kubeconfigs use: run when first needed,
its credential kept until it expires), `tls-server-name`, `proxy-url`.

What a daemon reads from a Secret (`parse_secret_kubeconfig`) may carry inline credentials
only: no exec plugin, no file, no proxy. Whoever can write that Secret would otherwise run
commands in the daemon, make it read its own files (its ServiceAccount token, sent to a server
of their choosing) or route its traffic. Refused with a message saying so.

Parsing is pure (text in, `ClusterConnection` out) so a malformed kubeconfig Secret becomes a
typed `InvalidKubeconfig` with a message that says what is wrong, never a crash deep in TLS.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


SECRET_KUBECONFIG_KEY = "kubeconfig"  # where a kubeconfig Secret holds it, as in Liqo
# A token file is read again after this long, and at once after a 401 (client-go's cached file
# token source reads it each minute too): a kubelet rotates a projected token at 80 % of its
# life, an hour at least, and reading it for every request cost every request a file opened.
TOKEN_FILE_REREAD_SECONDS = 60.0


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
    token_file: Path | None = None  # re-read (TOKEN_FILE_REREAD_SECONDS): projected tokens rotate
    # The name the server's certificate must carry, when not the URL's host (kubectl's
    # tls-server-name): also sent as SNI.
    tls_server_name: str | None = None
    proxy_url: str | None = None  # an http(s) proxy to reach the server through
    exec_plugin: ExecPlugin | None = None  # credentials from a command, when it is needed
    # The token file's content, and when it was read: [monotonic time, token], or empty.
    _token_file_read: list[Any] = field(default_factory=list, init=False, compare=False, repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        if self.ca_pem is not None and not self.insecure_skip_tls_verify:
            # The kubeconfig's CA alone, as client-go trusts it: with the system's roots too,
            # a certificate any public CA issued for the server's name (its DNS hijacked, say)
            # would pass for an untrusted provider's, or a home API server's.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.load_verify_locations(cadata=self.ca_pem.decode())
        else:
            context = ssl.create_default_context()
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert, key = self.client_cert_pem, self.client_key_pem
        if (credential := self.exec_certificate()) is not None:
            cert, key = credential.client_cert_pem, credential.client_key_pem
        if cert and key:
            load_key_pair(context, cert, key)
        return context

    def exec_certificate(self) -> ExecCredential | None:
        """The exec plugin's credential when it is the client certificate connections present
        (the plugin run if it has none, or one about to expire); None when the certificate is
        the kubeconfig's own, or the plugin gives a token."""
        if self.exec_plugin is None or (self.client_cert_pem and self.client_key_pem):
            return None
        credential = self.exec_plugin.credential()
        return credential if credential.client_cert_pem and credential.client_key_pem else None

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            read = self._token_file_read
            now = time.monotonic()
            if not read or now - read[0] >= TOKEN_FILE_REREAD_SECONDS:
                read[:] = [now, self.token_file.read_text().strip()]
            token: str = read[1]
            return token
        if self.token is None and self.exec_plugin is not None:
            return self.exec_plugin.credential().token
        return self.token

    @property
    def renewable(self) -> bool:
        """Whether a credential the server refused may be taken afresh (`forget_credential`)."""
        return self.exec_plugin is not None or self.token_file is not None

    def forget_credential(self) -> None:
        """The server refused the credential (401): an exec plugin is asked again next time,
        as kubectl does, and a token file read again."""
        self._token_file_read.clear()
        if self.exec_plugin is not None:
            self.exec_plugin.forget()


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin answered: a token, or a client certificate and key."""

    token: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    expires: datetime.datetime | None = None


EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT_SECONDS = 120.0  # a plugin may open a browser for its user to log in
# A credential is asked for again this long before it expires, not after a request failed.
EXEC_REFRESH_MARGIN = datetime.timedelta(seconds=30)


@dataclass(eq=False)
class ExecPlugin:
    """A kubeconfig user's `exec`: the command kubectl would run for credentials, run when
    one is first needed and again once it expires or the server refuses it."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    cluster_info: Mapping[str, Any] | None = None  # with provideClusterInfo
    where: str = "users[]"
    _cached: ExecCredential | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def forget(self) -> None:
        self._cached = None

    def credential(self) -> ExecCredential:
        with self._lock:
            now = datetime.datetime.now(datetime.UTC)
            cached = self._cached
            if cached is None or (
                cached.expires is not None and cached.expires - EXEC_REFRESH_MARGIN <= now
            ):
                cached = self._cached = self._run()
            return cached

    def _run(self) -> ExecCredential:
        interactive = self.interactive_mode != "Never" and sys.stdin.isatty()
        spec: dict[str, Any] = {"interactive": interactive}
        if self.cluster_info is not None:
            spec["cluster"] = dict(self.cluster_info)
        exec_info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(self.env), "KUBERNETES_EXEC_INFO": json.dumps(exec_info)}
        try:
            # The kubeconfig's own command, run as kubectl runs it.
            done = subprocess.run(
                [self.command, *self.args],
                env=env,
                stdin=None if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError as error:
            hint = f" ({self.install_hint.strip()})" if self.install_hint.strip() else ""
            raise InvalidKubeconfig(
                f"{self.where}.exec: command {self.command!r} not found{hint}"
            ) from error
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InvalidKubeconfig(f"{self.where}.exec: {self.command!r}: {error}") from error
        if done.returncode != 0:
            said = (done.stderr or b"").decode(errors="replace").strip()[-500:]
            raise InvalidKubeconfig(
                f"{self.where}.exec: {self.command!r} exited {done.returncode}"
                + (f": {said}" if said else "")
            )
        return parse_exec_credential(done.stdout, self.api_version, f"{self.where}.exec")


def parse_exec_credential(output: bytes, api_version: str, where: str) -> ExecCredential:
    """An exec plugin's answer (an ExecCredential of `api_version`) as the credential it
    holds; InvalidKubeconfig says what is wrong with it."""
    try:
        document = json.loads(output)
    except ValueError as error:
        raise InvalidKubeconfig(f"{where}: the plugin printed no JSON ExecCredential") from error
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise InvalidKubeconfig(f"{where}: the plugin printed no ExecCredential")
    if document.get("apiVersion") != api_version:
        raise InvalidKubeconfig(
            f"{where}: the plugin answered {document.get('apiVersion')!r}, not {api_version!r}"
        )
    status = document.get("status")
    if not isinstance(status, dict):
        raise InvalidKubeconfig(f"{where}: the ExecCredential has no status")
    token = status.get("token")
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if not (isinstance(token, str) and token) and not (
        isinstance(cert, str) and isinstance(key, str) and cert and key
    ):
        raise InvalidKubeconfig(
            f"{where}: the ExecCredential holds neither a token nor a certificate and its key"
        )
    expires = None
    if isinstance(status.get("expirationTimestamp"), str):
        try:
            expires = datetime.datetime.fromisoformat(
                status["expirationTimestamp"].replace("Z", "+00:00")
            )
        except ValueError as error:
            raise InvalidKubeconfig(f"{where}: expirationTimestamp is not a time") from error
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=datetime.UTC)
    return ExecCredential(
        token=token if isinstance(token, str) and token else None,
        client_cert_pem=cert.encode() if isinstance(cert, str) and cert else None,
        client_key_pem=key.encode() if isinstance(key, str) and key else None,
        expires=expires,
    )


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


# How many of a kubeconfig's contexts (clusters, users) a message names, and how much of each:
# a kubeconfig in a Secret may be anyone's.
MAX_NAMES_SHOWN = 10
MAX_NAME_SHOWN = 64


def _named(entries: Any, name: str, kind: str, where: str = "it") -> dict[str, Any]:
    """The entry `name` of `kind`; else InvalidKubeconfig naming the ones `where` has."""
    names = []
    for entry in entries or []:
        if isinstance(entry, dict):
            body = entry.get(kind[:-1])  # contexts[].context, clusters[].cluster, users[].user
            if entry.get("name") == name and isinstance(body, dict):
                return body
            names.append(str(entry.get("name"))[:MAX_NAME_SHOWN])
    has = ", ".join(names[:MAX_NAMES_SHOWN]) + (", …" if len(names) > MAX_NAMES_SHOWN else "")
    raise InvalidKubeconfig(
        f"kubeconfig has no {kind[:-1]} named {name!r} ({where} has {has or 'none'})"
    )


# What a kubeconfig read from a Secret may not hold, by where: each would let whoever writes
# the Secret run a command, read a file or route traffic in the daemon that reads it.
NOT_INLINE_USER_FIELDS = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
NOT_INLINE_CLUSTER_FIELDS = ("certificate-authority", "proxy-url")


def _yaml_problem(error: yaml.YAMLError) -> str:
    """Where and what PyYAML found wrong, in one line (its message draws the line in a box)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem or error.context}"
    return str(error).splitlines()[0]


def _yaml_document(
    content: str | bytes,
    where: str = "kubeconfig",
    *,
    empty_ok: bool = False,
    from_file: bool = False,
) -> dict[str, Any]:
    """`empty_ok`: an empty file is an empty kubeconfig (one of several merged, as kubectl
    takes it); alone, or in a Secret, it is a mistake. `from_file`: a file a person named,
    not the key of a Secret."""
    try:
        document = yaml.safe_load(content)
    except yaml.YAMLError as error:
        raise InvalidKubeconfig(f"{where} is not valid YAML: {_yaml_problem(error)}") from error
    if document is None and empty_ok:
        return {}
    if document is None and from_file:
        raise InvalidKubeconfig(f"{where} is empty: it names no cluster")
    if not isinstance(document, dict):
        hint = "a kubeconfig is one" if from_file else "is the Secret key right?"
        raise InvalidKubeconfig(f"{where} is not a YAML mapping ({hint})")
    return document


def parse_kubeconfig(
    content: str | bytes, *, context: str | None = None, base_dir: Path | None = None
) -> ClusterConnection:
    """Parses a kubeconfig a person gave (its current context, or `context`). Relative file
    references are resolved against `base_dir`, as kubectl does against the kubeconfig's own
    directory."""
    return _connection(_yaml_document(content), context, base_dir, inline_only=False)


def parse_secret_kubeconfig(content: str | bytes) -> ClusterConnection:
    """Parses a kubeconfig a daemon read from a Secret: inline credentials only."""
    return _connection(_yaml_document(content), None, None, inline_only=True)


def _context_name(document: Mapping[str, Any], context: str | None) -> str:
    name = context or document.get("current-context")
    if not name:
        raise InvalidKubeconfig("kubeconfig has no current-context and none was given")
    return str(name)


def _connection(
    document: Mapping[str, Any],
    context: str | None,
    base_dir: Path | None,
    *,
    inline_only: bool,
    where: str = "it",
) -> ClusterConnection:
    """`where`: the files the document was read from, for the messages."""
    context_name = _context_name(document, context)
    context_body = _named(document.get("contexts"), context_name, "contexts", where)
    cluster = _named(document.get("clusters"), context_body.get("cluster", ""), "clusters", where)
    user_name = context_body.get("user")
    user = _named(document.get("users"), user_name, "users", where) if user_name else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise InvalidKubeconfig(f"cluster of context {context_name!r} has no valid server URL")
    cluster_where = f"clusters[{context_body.get('cluster')}]"
    user_where = f"users[{user_name}]"
    if inline_only:
        for entry, fields, where in (
            (user, NOT_INLINE_USER_FIELDS, user_where),
            (cluster, NOT_INLINE_CLUSTER_FIELDS, cluster_where),
        ):
            for name in fields:
                if entry.get(name):
                    raise InvalidKubeconfig(
                        f"{where}.{name}: a kubeconfig in a Secret may hold inline credentials "
                        "only (token, client-certificate-data, client-key-data, "
                        "certificate-authority-data): no exec plugin, file or proxy, which "
                        "would run commands or read files in the process reading it; write "
                        "the credentials themselves into it"
                    )
    if user.get("auth-provider"):
        raise InvalidKubeconfig(
            f"{user_where}.auth-provider: kubectl dropped auth providers; use an exec plugin "
            "(e.g. kubelogin, gke-gcloud-auth-plugin)"
        )
    cert = _field_bytes(user, "client-certificate-data", "client-certificate", base_dir, user_where)
    key = _field_bytes(user, "client-key-data", "client-key", base_dir, user_where)
    if bool(cert) != bool(key):
        raise InvalidKubeconfig(
            f"{user_where} has a client certificate without its key, "
            "or a key without its certificate"
        )
    token = user.get("token")
    token_file = user.get("tokenFile")
    if isinstance(token_file, str) and not Path(token_file).is_absolute() and base_dir:
        token_file = str(base_dir / token_file)
    ca_pem = _field_bytes(
        cluster, "certificate-authority-data", "certificate-authority", base_dir, cluster_where
    )
    tls_server_name = cluster.get("tls-server-name")
    proxy_url = cluster.get("proxy-url")
    if proxy_url is not None and (
        not isinstance(proxy_url, str) or not proxy_url.startswith(("http://", "https://"))
    ):
        raise InvalidKubeconfig(
            f"{cluster_where}.proxy-url {str(proxy_url)[:100]!r}: only http:// and https:// "
            "proxies are supported (not socks5)"
        )
    exec_plugin = None
    if isinstance(user.get("exec"), dict):
        exec_plugin = _exec_plugin(user["exec"], cluster, server, ca_pem, base_dir, user_where)
    return ClusterConnection(
        server=server.rstrip("/"),
        ca_pem=ca_pem,
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        client_cert_pem=cert,
        client_key_pem=key,
        token=token if isinstance(token, str) and token else None,
        token_file=Path(token_file) if isinstance(token_file, str) else None,
        tls_server_name=tls_server_name if isinstance(tls_server_name, str) else None,
        proxy_url=proxy_url,
        exec_plugin=exec_plugin,
    )


def _exec_plugin(
    spec: Mapping[str, Any],
    cluster: Mapping[str, Any],
    server: str,
    ca_pem: bytes | None,
    base_dir: Path | None,
    user_where: str,
) -> ExecPlugin:
    where = f"{user_where}.exec"
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        raise InvalidKubeconfig(f"{where} has no command")
    api_version = spec.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise InvalidKubeconfig(
            f"{where}.apiVersion {api_version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
        )
    # As kubectl: a relative command with a directory in it is the kubeconfig's neighbour.
    if os.sep in command and not Path(command).is_absolute() and base_dir is not None:
        command = str(base_dir / command)
    args = spec.get("args") or []
    env = spec.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidKubeconfig(f"{where}.args is not a list of strings")
    if not isinstance(env, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in env
    ):
        raise InvalidKubeconfig(f"{where}.env is not a list of name/value pairs")
    cluster_info = None
    if spec.get("provideClusterInfo"):
        cluster_info = {"server": server}
        if ca_pem is not None:
            cluster_info["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
        for name in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url"):
            if cluster.get(name) is not None:
                cluster_info[name] = cluster[name]
        extensions = cluster.get("extensions") or []
        config = next(
            (
                e.get("extension")
                for e in extensions
                if e.get("name") == "client.authentication.k8s.io/exec"
            ),
            None,
        )
        if config is not None:
            cluster_info["config"] = config
    return ExecPlugin(
        command=command,
        args=tuple(args),
        env=tuple((e["name"], str(e.get("value", ""))) for e in env),
        api_version=str(api_version),
        interactive_mode=str(spec.get("interactiveMode") or "IfAvailable"),
        install_hint=str(spec.get("installHint") or ""),
        cluster_info=cluster_info,
        where=user_where,
    )


def load_kubeconfig_file(path: str | Path, *, context: str | None = None) -> ClusterConnection:
    return load_kubeconfig_files([Path(path)], context=context)


# The file fields of each kind of entry, made absolute when files are merged: each is relative
# to the file that names it.
_FILE_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


def merge_kubeconfigs(documents: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """Several kubeconfigs as one, as kubectl merges `$KUBECONFIG`: the first file to name a
    cluster, user or context, or to set current-context, wins; file references are made
    absolute against the file that holds them."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    for path, document in documents:
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = document["current-context"]
        for kind in ("clusters", "users", "contexts"):
            taken = {entry.get("name") for entry in merged[kind]}
            for entry in document.get(kind) or []:
                if not isinstance(entry, dict) or entry.get("name") in taken:
                    continue
                body = entry.get(kind[:-1])
                if isinstance(body, dict):
                    body = dict(body)
                    for name in _FILE_FIELDS.get(kind, ()):
                        value = body.get(name)
                        if isinstance(value, str) and value and not Path(value).is_absolute():
                            body[name] = str(path.parent / value)
                    command = (body.get("exec") or {}).get("command") if kind == "users" else None
                    if (
                        isinstance(command, str)
                        and os.sep in command
                        and not Path(command).is_absolute()
                    ):
                        body["exec"] = {**body["exec"], "command": str(path.parent / command)}
                    entry = {**entry, kind[:-1]: body}
                merged[kind].append(entry)
                taken.add(entry.get("name"))
    return merged


def _kubeconfig_document(paths: Sequence[Path]) -> tuple[Mapping[str, Any], Path | None, str]:
    """The kubeconfig `paths` make together (`merge_kubeconfigs`), the directory its relative
    file references are against (None: made absolute in the merge), and the files it was read
    from; a file that does not exist is skipped, as kubectl skips it, unless it is the only
    one."""
    documents = []
    for path in paths:
        try:
            content = path.read_bytes()
        except FileNotFoundError as error:
            if len(paths) == 1:
                raise InvalidKubeconfig(f"kubeconfig {path} does not exist") from error
            continue
        except OSError as error:
            raise InvalidKubeconfig(
                f"cannot read kubeconfig {path}: {error.strerror or error}"
            ) from error
        documents.append(
            (
                path,
                _yaml_document(
                    content, f"kubeconfig {path}", empty_ok=len(paths) > 1, from_file=True
                ),
            )
        )
    if not documents:
        raise InvalidKubeconfig(f"none of the kubeconfig files {', '.join(map(str, paths))} exists")
    if len(documents) == 1:
        path, document = documents[0]
        return document, path.parent, str(path)
    return merge_kubeconfigs(documents), None, ", ".join(str(path) for path, _ in documents)


def load_kubeconfig_files(
    paths: Sequence[Path], *, context: str | None = None
) -> ClusterConnection:
    """The connection of the kubeconfig `paths` make together (`_kubeconfig_document`), with
    its current context or `context`."""
    document, base_dir, where = _kubeconfig_document(paths)
    return _connection(document, context, base_dir, inline_only=False, where=where)


def kubeconfig_context(paths: Sequence[Path], *, context: str | None = None) -> str:
    """The name of the context `load_kubeconfig_files` takes: `context`, else the current
    context of the kubeconfig `paths` make."""
    document, _, where = _kubeconfig_document(paths)
    name = _context_name(document, context)
    _named(document.get("contexts"), name, "contexts", where)
    return name


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


def kubeconfig_files(kubeconfig: str | None = None) -> list[Path] | None:
    """The files `default_connection` reads: --kubeconfig, else every file of $KUBECONFIG,
    else none in a cluster's pod (in-cluster), else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig)]
    listed = [Path(p) for p in (os.environ.get("KUBECONFIG") or "").split(os.pathsep) if p]
    if listed:
        return listed
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return [Path.home() / ".kube" / "config"]


def default_connection(
    kubeconfig: str | None = None, *, context: str | None = None
) -> ClusterConnection:
    """--kubeconfig, else $KUBECONFIG (its files merged), else in-cluster, else
    ~/.kube/config."""
    paths = kubeconfig_files(kubeconfig)
    if paths is None:
        return in_cluster_connection()
    return load_kubeconfig_files(paths, context=context)


def connection_from_secret(secret: Mapping[str, Any] | None, where: str) -> ClusterConnection:
    """The connection in a kubeconfig Secret (`where`: its namespace/name, for the messages),
    inline credentials only, its certificates loaded once to check them; InvalidKubeconfig says
    what is wrong with it."""
    if secret is None:
        raise InvalidKubeconfig(f"Secret {where} does not exist")
    key = SECRET_KUBECONFIG_KEY
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        raise InvalidKubeconfig(f"Secret {where} has no `{key}` key, or it is empty")
    try:
        content = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidKubeconfig(f"Secret {where}: `{key}` is not base64") from error
    try:
        connection = parse_secret_kubeconfig(content)
    except InvalidKubeconfig as error:
        raise InvalidKubeconfig(f"Secret {where}: {error}") from error
    try:
        connection.ssl_context()
    except (ssl.SSLError, ValueError, OSError) as error:
        raise InvalidKubeconfig(
            f"Secret {where}: its certificates or key cannot be loaded: {error}"
        ) from error
    return connection
