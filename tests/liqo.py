"""What Liqo itself gives vk's components, for tests that check vk takes it unchanged."""

from __future__ import annotations


def liqo_virtual_kubelet_args(
    *, remote: str, node: str, tenant_namespace: str, home: str, secret: str
) -> list[str]:
    """The arguments Liqo 1.x's VirtualNode webhook writes into a VirtualNode's template from
    its Helm chart's default VkOptionsTemplate (reflectors at their default workers and
    DenyList, API-server support on, metrics off), then those it keeps in sync (the kubeconfig
    Secret, createNode, the network check). The local pod CIDR is the playground's."""
    return [
        f"--foreign-cluster-id={remote}",
        f"--nodename={node}",
        "--node-ip=$(POD_IP)",
        f"--tenant-namespace={tenant_namespace}",
        "--liqo-namespace=liqo",
        f"--home-cluster-id={home}",
        "--local-podcidr=10.244.0.0/16",
        "--pod-reflection-workers=10",
        "--service-reflection-workers=3",
        "--endpointslice-reflection-workers=10",
        "--ingress-reflection-workers=3",
        "--configmap-reflection-workers=3",
        "--secret-reflection-workers=3",
        "--serviceaccount-reflection-workers=3",
        "--persistentvolumeclaim-reflection-workers=3",
        "--event-reflection-workers=3",
        "--resourceslice-reflection-workers=3",
        "--resourceclaim-reflection-workers=3",
        "--service-reflection-type=DenyList",
        "--ingress-reflection-type=DenyList",
        "--configmap-reflection-type=DenyList",
        "--secret-reflection-type=DenyList",
        "--event-reflection-type=DenyList",
        "--enable-apiserver-support=true",
        "--metrics-enabled=false",
        f"--foreign-kubeconfig-secret-name={secret}",
        "--create-node=true",
        "--node-check-network=true",
    ]
