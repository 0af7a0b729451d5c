"""`vk webhook`: the admission webhook process of a provider (Quota enforcement on the pods its
consumers' identities create), with Liqo's flag for turning the enforcement off."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from vk.cli.options import go_bool_option
from vk.kube.kubeconfig import InvalidKubeconfig
from vk.webhooks.server import WebhookOptions
from vk.webhooks.server import main as run_webhook


@click.command("webhook")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig of this cluster ($KUBECONFIG); in-cluster config otherwise.",
)
@click.option(
    "--listen-address",
    default=":9443",
    show_default=True,
    help="Address of the HTTPS server: the admission endpoints (/mutate-pod-quota, "
    "/validate-pod-quota), /healthz, /readyz and /metrics.",
)
@click.option(
    "--tls-cert-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Serving certificate (PEM, chain allowed); reloaded when the file changes.",
)
@click.option(
    "--tls-private-key-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Key of the serving certificate (PEM).",
)
@click.option(
    "--metrics-address",
    default="",
    help="Also serve /metrics, /healthz and /readyz over plain HTTP here (e.g. :8081).",
)
@go_bool_option(
    "--enable-resource-enforcement",
    "Enforce the Quotas (`--enable-resource-enforcement=false` turns it off: pods are still "
    "stamped with their creator, and a cordoned Quota still admits nothing).",
)
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning"]))
def webhook(
    kubeconfig: str | None,
    listen_address: str,
    tls_cert_file: Path,
    tls_private_key_file: Path,
    metrics_address: str,
    enable_resource_enforcement: bool,
    log_level: str,
) -> None:
    """The provider's admission webhook: stamps the pods a consumer's identity creates with
    that identity and denies those its Quota does not admit."""
    options = WebhookOptions(
        kubeconfig=kubeconfig or None,
        listen_address=listen_address,
        tls_cert_file=tls_cert_file,
        tls_private_key_file=tls_private_key_file,
        metrics_address=metrics_address or None,
        enforcement_enabled=enable_resource_enforcement,
        log_level=log_level,
    )
    try:
        sys.exit(run_webhook(options))
    except InvalidKubeconfig as error:
        raise click.ClickException(f"cannot reach this cluster: {error}") from error
