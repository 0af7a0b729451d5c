"""Approves the serving-certificate requests of virtual kubelets, and nothing else.

A `kubernetes.io/kubelet-serving` CSR is approved only when everything in it is what the
requester may claim: it comes from the ServiceAccount of the virtual kubelet of VirtualNode
<n> (`system:serviceaccount:<its namespace>:vk-<n>`), names `system:node:<n>` in
`system:nodes`, and asks for no name but <n> and no IP but that Node's InternalIP. Any other
request is left as it is, for whoever approves real kubelets' (the cluster then signs it).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from typing import Any

import structlog
from cryptography import x509
from cryptography.x509.oid import NameOID

from vk.api.constants import (
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    service_account_user,
    virtual_kubelet_service_account,
)
from vk.api.offloading import VirtualNode
from vk.api.timestamps import kube_time
from vk.kube.client import JSON, KubeClient, NotFound, resource_path
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import shared_informer
from vk.kubelet.certificates import SIGNER

log = structlog.get_logger("vk.controllers.csr")

ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}
CSR_API = "certificates.k8s.io/v1"


def serving_csr_verdict(
    csr: Mapping[str, Any],
    virtual_node_namespaces: Mapping[str, str],
    node_ips: Mapping[str, set[str]],
) -> str | None:
    """None when the request may be approved; else why not. `virtual_node_namespaces` maps a
    VirtualNode name to its namespace, `node_ips` a virtual node to its InternalIPs."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") != SIGNER:
        return "not a kubelet-serving request"
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(spec.get("request", "")))
    except ValueError:
        return "the request does not parse"
    common_names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    organizations = request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    common_name = str(common_names[0].value) if len(common_names) == 1 else ""
    if not common_name.startswith("system:node:"):
        return f"subject {request.subject.rfc4514_string()} is not system:node:<node>"
    node = common_name.removeprefix("system:node:")
    if [str(o.value) for o in organizations] != ["system:nodes"]:
        return "the organization is not exactly system:nodes"
    namespace = virtual_node_namespaces.get(node)
    if namespace is None:
        return f"{node} is not a virtual node vk manages"
    requester = service_account_user(namespace, virtual_kubelet_service_account(node))
    if spec.get("username") != requester:
        return f"requested by {spec.get('username')}, not by {requester}"
    usages = set(spec.get("usages") or [])
    if "server auth" not in usages or not usages <= ALLOWED_USAGES:
        return f"usages {sorted(usages)} are not a serving certificate's"
    try:
        names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the request names no host"
    dns = set(names.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    others = [n for n in names if not isinstance(n, x509.DNSName | x509.IPAddress)]
    if others or not dns <= {node} or not ips <= node_ips.get(node, set()) or not (dns or ips):
        return (
            f"names {sorted(dns)} and IPs {sorted(ips)} are not only the node's "
            f"({node}, {sorted(node_ips.get(node, set()))})"
        )
    return None


def decided(csr: Mapping[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Approved", "Denied") for c in conditions)


def forge_approval(csr: JSON, reason: str, message: str, now: datetime.datetime) -> JSON:
    """The CSR with an Approved condition, for its `approval` subresource."""
    approved = dict(csr)
    status = dict(csr.get("status") or {})
    status["conditions"] = [
        *(status.get("conditions") or []),
        {
            "type": "Approved",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": kube_time(now),
        },
    ]
    approved["status"] = status
    return approved


class ServingCSRApprover(Reconciler):
    name = "serving-csr-approver"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.csrs = shared_informer(
            client,
            CSR_API,
            "certificatesigningrequests",
            field_selector=f"spec.signerName={SIGNER}",
        )
        self.virtual_nodes = shared_informer(
            client, VirtualNode.group_version(), VirtualNode.PLURAL
        )
        self.nodes = shared_informer(
            client, "v1", "nodes", label_selector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"
        )
        self.controller = Controller(self)
        self._refused: dict[str, str] = {}

    def _recheck_all(self, *_: Any) -> None:
        """A VirtualNode or its Node changed: pending requests may be approvable now."""
        pending = self.csrs.store.keys()
        for key in pending:
            self.controller.enqueue(key)

    async def run(self) -> None:
        self.csrs.add_handler(lambda _, csr, __: self.controller.enqueue(csr["metadata"]["name"]))
        self.virtual_nodes.add_handler(self._recheck_all)
        self.nodes.add_handler(self._recheck_all)
        await run_with_informers(self.controller, self.csrs, self.virtual_nodes, self.nodes)

    async def reconcile(self, key: str) -> Result:
        csr = self.csrs.store.get(key)
        if csr is None or decided(csr):
            self._refused.pop(key, None)
            return Result()
        namespaces = {
            vn["metadata"]["name"]: vn["metadata"]["namespace"]
            for vn in self.virtual_nodes.store.objects()
        }
        ips = {
            node["metadata"]["name"]: {
                a["address"]
                for a in node.get("status", {}).get("addresses", [])
                if a.get("type") == "InternalIP"
            }
            for node in self.nodes.store.objects()
        }
        reason = serving_csr_verdict(csr, namespaces, ips)
        if reason is not None:
            if self._refused.get(key) != reason:
                self._refused[key] = reason
                log.info("not approving a kubelet-serving request", csr=key, reason=reason)
            return Result()
        node = next(
            iter(
                x509.load_pem_x509_csr(
                    base64.b64decode(csr["spec"]["request"])
                ).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            )
        ).value
        path = resource_path(
            CSR_API, "certificatesigningrequests", name=key, subresource="approval"
        )
        try:
            await self.client.replace(
                path,
                forge_approval(
                    csr,
                    "VirtualKubeletServingCertificate",
                    "vk approved the serving certificate of virtual node "
                    + str(node).removeprefix("system:node:"),
                    datetime.datetime.now(datetime.UTC),
                ),
            )
        except NotFound:
            return Result()
        log.info("approved a virtual kubelet's serving certificate", csr=key)
        return Result()
