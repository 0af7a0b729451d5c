"""`vk kubelet` takes the arguments Liqo's virtual kubelet takes, so that a VirtualNode
template or Helm values written for Liqo run unchanged: those with a meaning in vk have it,
the others are named once, and anything else is still an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.liqo import liqo_virtual_kubelet_args
from tests.unit.test_client_rate import self_contained_kubeconfig
from vk.cli import components
from vk.kube.client import DEFAULT_REQUEST_TIMEOUT
from vk.virtualkubelet.process import (
    VirtualKubelet,
    VirtualKubeletOptions,
    client_rate,
    provider_connection,
)

REQUIRED = [
    "--nodename=vn",
    "--tenant-namespace=liqo-tenant-naples",
    "--foreign-cluster-id=naples",
    "--foreign-kubeconfig-secret-name=kubeconfig-vn",
]

LIQO_DEFAULT_ARGS = [
    *liqo_virtual_kubelet_args(
        remote="naples",
        node="vn",
        tenant_namespace="liqo-tenant-naples",
        home="venice",
        secret="kubeconfig-vn",
    ),
    "--node-ip=10.0.0.7",  # Kubernetes expands the template's $(POD_IP)
]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[VirtualKubeletOptions]:
    runs: list[VirtualKubeletOptions] = []

    def run(options: VirtualKubeletOptions) -> int:
        runs.append(options)
        return 0

    monkeypatch.setattr(components, "run_virtual_kubelet", run)
    return runs


def invoke(*args: str) -> Any:
    return CliRunner().invoke(components.vk, ["kubelet", *args], catch_exceptions=False)


def test_liqos_default_arguments_start_the_virtual_kubelet(
    started: list[VirtualKubeletOptions],
) -> None:
    result = invoke(*LIQO_DEFAULT_ARGS)
    assert result.exit_code == 0, result.output
    (options,) = started
    assert (options.node_name, options.node_ip, options.home_cluster_id) == (
        "vn",
        "10.0.0.7",
        "venice",
    )
    assert options.reflection.workers_of("service") == 3
    # Liqo's template turns EndpointSlice reflection on (10 workers); vk has it.
    assert options.reflection.workers_of("endpointslice") == 10
    assert options.ignored_flags == (
        "--liqo-namespace",
        "--local-podcidr",
        "--metrics-enabled",
        "--node-check-network",
        "--resourceclaim-reflection-workers",
        "--resourceslice-reflection-workers",
    )


def test_flags_with_a_meaning_in_vk_have_it(started: list[VirtualKubeletOptions]) -> None:
    result = invoke(
        *REQUIRED,
        "--disable-ip-reflection",
        "--vk-lease-enabled=false",
        "--vk-lease-duration=30s",
        "--vk-lease-renew-interval=20s",
        "--vk-lease-retry-period=3s",
        "--enable-ingress=false",
        "--remote-real-ingress-class-name=nginx",
        "--remote-real-load-balancer-class-name=metallb",
        "--client-qps=50",
        "--client-max-burst=20",
        "--client-timeout=7s",
    )
    assert result.exit_code == 0, result.output
    (options,) = started
    assert (options.client_qps, options.client_max_burst) == (50, 20)
    budget = client_rate(options)
    assert budget is not None
    assert (budget.rate, budget.burst) == (50, 20)
    assert options.client_timeout == 7.0
    assert options.reflect_pod_ips is False
    assert options.shared_reflection_lease is False
    assert (options.ha_lease_duration, options.ha_renew_deadline, options.ha_retry_period) == (
        30,
        20.0,
        3.0,
    )
    assert options.reflection.remote_ingress_class == ""  # --enable-ingress=false
    assert options.reflection.remote_load_balancer_class == "metallb"
    assert options.ignored_flags == ()


def test_vks_defaults(started: list[VirtualKubeletOptions]) -> None:
    assert invoke(*REQUIRED).exit_code == 0
    (options,) = started
    assert options.reflect_pod_ips is True
    assert options.shared_reflection_lease is True
    assert options.ignored_flags == ()
    assert client_rate(options) is None  # no client-side limit unless asked
    assert options.client_timeout == DEFAULT_REQUEST_TIMEOUT


def test_the_client_timeout_bounds_both_sides_clients_requests(
    started: list[VirtualKubeletOptions], tmp_path: Path
) -> None:
    """Home's client, and the provider's connection (each client it makes takes its timeout:
    test_client_rate.py)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(self_contained_kubeconfig("https://127.0.0.1:6443")))
    assert (
        invoke(*REQUIRED, f"--home-kubeconfig={kubeconfig}", "--client-timeout=7s").exit_code == 0
    )
    virtual_kubelet = VirtualKubelet(started[0])
    assert virtual_kubelet.home.timeout == 7.0
    assert provider_connection(started[0], virtual_kubelet.home).timeout == 7.0


def test_a_client_timeout_of_zero_is_vks_default_not_none(
    started: list[VirtualKubeletOptions],
) -> None:
    """Liqo's 0 means no timeout at all: a provider that never answers would hold a worker
    for ever. vk keeps its own bound."""
    assert invoke(*REQUIRED, "--client-timeout=0").exit_code == 0
    assert started[0].client_timeout == DEFAULT_REQUEST_TIMEOUT


@pytest.mark.parametrize(
    "flag",
    [
        "--client-qps=-1",
        "--client-max-burst=0",
        "--client-qps=x",
        "--client-timeout=-1s",
        "--client-timeout=soon",
    ],
)
def test_a_client_rate_out_of_range_is_refused_naming_its_flag(
    started: list[VirtualKubeletOptions], flag: str
) -> None:
    result = invoke(*REQUIRED, flag)
    assert result.exit_code == 2
    assert flag.split("=")[0] in result.output
    assert started == []


def test_klog_flags_are_taken_with_or_without_an_equals_sign(
    started: list[VirtualKubeletOptions],
) -> None:
    result = invoke(*REQUIRED, "--klog.v=4", "--klog.logtostderr", "true", "--klog.add_dir_header")
    assert result.exit_code == 0, result.output
    assert started[0].ignored_flags == (
        "--klog.add_dir_header",
        "--klog.logtostderr",
        "--klog.v",
    )


def test_aws_certificates_are_taken_as_kubelet_ones(started: list[VirtualKubeletOptions]) -> None:
    assert invoke(*REQUIRED, "--certificate-type=aws").exit_code == 0
    assert started[0].certificate_type == "kubelet"
    assert started[0].ignored_flags == ("--certificate-type=aws",)


@pytest.mark.parametrize("unknown", ["--bogus=1", "--nodenam=x", "stray"])
def test_anything_else_is_still_an_error(
    started: list[VirtualKubeletOptions], unknown: str
) -> None:
    result = invoke(*REQUIRED, unknown)
    assert result.exit_code == 2
    assert "No such option" in result.output
    assert started == []


def test_a_renew_interval_not_below_the_lease_duration_is_refused(
    started: list[VirtualKubeletOptions],
) -> None:
    result = invoke(*REQUIRED, "--vk-lease-duration=10s", "--vk-lease-renew-interval=10s")
    assert result.exit_code == 2
    assert "--vk-lease-renew-interval" in result.output
    assert started == []
