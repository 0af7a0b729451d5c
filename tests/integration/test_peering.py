"""Peering and ResourceSlices (issue 6, first steps): venice peers with naples; a ResourceSlice
goes out by replication, naples signs its identity, grants resources and records a Quota; the
status comes back, and venice writes the slice's kubeconfig and its VirtualNode."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.conftest import (
    installed_controller_manager_stopped,
    start_controller_manager,
    stop_controller_manager,
)
from tests.integration.polling import wait_until
from vk.api.constants import (
    IDENTITY_CONTROL_PLANE,
    IDENTITY_TYPE_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATED_LABEL,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    TENANT_MAX_TWIN_NAMESPACES_LABEL,
    control_plane_secret_name,
    resource_slice_user,
    tenant_group,
)
from vk.cli.peering import forge_resource_slice
from vk.controllers.namespaceoffloading import forge_namespace_map
from vk.controllers.provider_namespacemaps import managed_by
from vk.kube.kubeconfig import load_kubeconfig_file

VKCTL = str(Path(sys.executable).parent / "vkctl")
CONSUMER, PROVIDER = "venice", "naples"
CONSUMER_TENANT, PROVIDER_TENANT = "liqo-tenant-naples", "liqo-tenant-venice"
RSLICE = "resourceslices.authentication.liqo.io"
VIRTUAL_NODES = "virtualnodes.offloading.liqo.io"


@pytest.fixture(scope="module")
def peered(installed: Clusters) -> Iterator[Clusters]:
    """venice peered with naples by `vkctl peer`, through the controller managers the playground
    installed; unpeered afterwards, and peered again if it was before (the README's first
    command peers them)."""
    was_peered = (
        installed.kubectl(
            CONSUMER, "get", "foreignclusters.core.liqo.io", PROVIDER, check=False
        ).returncode
        == 0
    )
    try:
        # As a user peers: vkctl, with both kubeconfigs; it waits for the virtual node Ready.
        assert peer(installed).stdout.strip() == "peered"
        yield installed
    finally:
        assert remove_peering(installed).returncode == 0
        if was_peered:
            peer(installed)


def peer(clusters: Clusters) -> subprocess.CompletedProcess[str]:
    peering = subprocess.run(
        [
            VKCTL,
            "peer",
            f"--kubeconfig={clusters.kubeconfig(CONSUMER)}",
            f"--remote-kubeconfig={clusters.kubeconfig(PROVIDER)}",
            "--timeout=120s",
        ],
        capture_output=True,
        text=True,
    )
    assert peering.returncode == 0, peering.stderr
    return peering


def remove_peering(crds: Clusters) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            VKCTL,
            "unpeer",
            f"--kubeconfig={crds.kubeconfig(CONSUMER)}",
            f"--remote-kubeconfig={crds.kubeconfig(PROVIDER)}",
            "--timeout=150s",
        ],
        capture_output=True,
        text=True,
    )


def get_json(clusters: Clusters, cluster: str, *args: str) -> Any:
    result = clusters.kubectl(cluster, "get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def virtual_node_of(clusters: Clusters, name: str) -> Any:
    return get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", name, "-n", CONSUMER_TENANT
    )


def conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {
        c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []
    }


ANSWERED = {"Authentication": "Accepted", "Resources": "Accepted"}


def consumer_slice(clusters: Clusters, name: str) -> Any:
    return get_json(clusters, CONSUMER, RSLICE, name, "-n", CONSUMER_TENANT)


def wait_answered(clusters: Clusters, name: str, what: str) -> Any:
    """venice's slice `name` once naples has answered it (both conditions Accepted)."""
    return wait_until(
        lambda: (s := consumer_slice(clusters, name)) and conditions(s) == ANSWERED and s,
        what,
        timeout=60,
        explain=lambda: str(consumer_slice(clusters, name)),
    )


def apply(clusters: Clusters, cluster: str, obj: dict[str, Any]) -> None:
    clusters.kubectl(cluster, "apply", "-f", "-", input=json.dumps(obj))


def secret_kubeconfig(clusters: Clusters, name: str, path: Path) -> Path:
    secret = get_json(clusters, CONSUMER, "secret", name, "-n", CONSUMER_TENANT)
    path.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    return path


def kubectl_as(
    kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        input=input,
    )


def test_a_default_slice_is_accepted_and_gets_a_quota_a_kubeconfig_and_a_virtual_node(
    peered: Clusters, tmp_path: Path
) -> None:
    apply(peered, CONSUMER, forge_resource_slice("mypool", PROVIDER))
    accepted = wait_answered(peered, "mypool", "the slice Accepted Accepted")
    table = peered.kubectl(CONSUMER, "get", RSLICE, "mypool", "-n", CONSUMER_TENANT).stdout
    assert table.split("\n")[1].split()[:3] == ["mypool", "Accepted", "Accepted"]
    granted = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}
    assert accepted["status"]["resources"] == granted
    assert accepted["status"]["nodeLabels"] == {"topology.liqo.io/region": "south"}

    user = resource_slice_user(CONSUMER, "mypool")
    quota = get_json(peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT)
    assert quota["spec"] == {"user": user, "limitsEnforcement": "None", "resources": granted}
    quotas = peered.kubectl(PROVIDER, "get", "quotas.offloading.liqo.io", "-A").stdout
    assert quotas.split("\n")[0].split() == ["NAMESPACE", "NAME", "ENFORCEMENT", "CORDONED", "AGE"]

    virtual_node = wait_until(
        lambda: virtual_node_of(peered, "mypool"),
        "the VirtualNode mypool",
    )
    assert virtual_node["spec"]["resourceQuota"]["hard"] == granted
    assert virtual_node["spec"]["labels"] == {
        "liqo.io/remote-cluster-id": PROVIDER,
        "topology.liqo.io/region": "south",
    }
    assert virtual_node["spec"]["kubeconfigSecretRef"] == {
        "name": "kubeconfig-resourceslice-mypool"
    }
    assert virtual_node["metadata"]["ownerReferences"][0]["name"] == "mypool"

    # The slice's identity is what naples signed: that user, in the consumer's tenant group.
    kubeconfig = wait_until(
        lambda: (
            secret_kubeconfig(peered, "kubeconfig-resourceslice-mypool", tmp_path / "slice")
            if "kubeconfig"
            in (
                get_json(
                    peered,
                    CONSUMER,
                    "secret",
                    "kubeconfig-resourceslice-mypool",
                    "-n",
                    CONSUMER_TENANT,
                )
                or {}
            ).get("data", {})
            else None
        ),
        "the slice's kubeconfig",
    )
    whoami = json.loads(kubectl_as(kubeconfig, "auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == user
    assert tenant_group(CONSUMER) in whoami["status"]["userInfo"]["groups"]
    assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == str(
        load_kubeconfig_file(peered.kubeconfig(PROVIDER)).server
    )


def test_identities_can_touch_nothing_beyond_their_tenant_namespace(
    peered: Clusters, tmp_path: Path
) -> None:
    secret = get_json(peered, CONSUMER, "secret", "vk-control-plane-naples", "-n", CONSUMER_TENANT)
    control_plane = tmp_path / "control-plane"
    control_plane.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    allowed = [
        ("create", RSLICE, "-n", PROVIDER_TENANT),
        ("create", "namespacemaps.offloading.liqo.io", "-n", PROVIDER_TENANT),
    ]
    refused = [
        ("create", RSLICE, "-n", "default"),
        ("patch", RSLICE, "--subresource=status", "-n", PROVIDER_TENANT),
        ("create", "quotas.offloading.liqo.io", "-n", PROVIDER_TENANT),
        ("create", "namespaces"),
        ("create", "certificatesigningrequests"),
        ("get", "pods", "-n", PROVIDER_TENANT),
        ("get", "secrets", "-n", PROVIDER_TENANT),
    ]
    for check in allowed:
        assert kubectl_as(control_plane, "auth", "can-i", *check).stdout.strip() == "yes", check
    for check in refused:
        assert kubectl_as(control_plane, "auth", "can-i", *check).stdout.strip() == "no", check


def set_tenant_limit(
    clusters: Clusters, label: str, count: int | None, *, check: bool = True
) -> None:
    """The provider's administrator sets a limit label on venice's tenant namespace (None:
    removes it, the provider's default applying again)."""
    value = f"{label}-" if count is None else f"{label}={count}"
    clusters.kubectl(
        PROVIDER, "label", "namespace", PROVIDER_TENANT, value, "--overwrite", check=check
    )


def delete_consumer_slice(clusters: Clusters, name: str) -> None:
    """A test's slice of venice gone (its replica on naples first), if it was made."""
    clusters.kubectl(
        CONSUMER,
        "delete",
        RSLICE,
        name,
        "-n",
        CONSUMER_TENANT,
        "--ignore-not-found",
        "--timeout=120s",
        check=False,
    )


def tenants_namespace_map(name: str, desired: dict[str, str]) -> dict[str, Any]:
    """A NamespaceMap as venice's control-plane identity may write it on naples: a replica in
    its tenant namespace."""
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceMap",
        "metadata": {
            "name": name,
            "namespace": PROVIDER_TENANT,
            "labels": {REMOTE_CLUSTER_ID_LABEL: CONSUMER, REPLICATED_LABEL: "true"},
        },
        "spec": {"desiredMapping": desired},
    }


def wait_for_phases(
    peered: Clusters, name: str, wanted: dict[str, str], what: str, timeout: float = 60
) -> None:
    """Until naples reports on venice's NamespaceMap `name` each entry in the phase wanted."""

    def phases() -> dict[str, str]:
        found = get_json(
            peered, PROVIDER, "namespacemaps.offloading.liqo.io", name, "-n", PROVIDER_TENANT
        )
        mapping = ((found or {}).get("status") or {}).get("currentMapping") or {}
        return {local: entry.get("phase") for local, entry in mapping.items()}

    wait_until(lambda: phases() == wanted, what, timeout=timeout, explain=lambda: str(phases()))


def written_by_tenant_and_refused(
    peered: Clusters,
    control_plane: Path,
    namespace_map: dict[str, Any],
    phases: dict[str, str],
    refused: str,
    told: str,
) -> None:
    """`namespace_map` written by venice's control-plane identity, until naples reports its
    entries in `phases`; the twin `refused` is not made, and naples says `told` of it in an
    Event on the map."""
    created = kubectl_as(control_plane, "create", "-f", "-", input=json.dumps(namespace_map))
    assert created.returncode == 0, created.stderr
    name = namespace_map["metadata"]["name"]
    wait_for_phases(peered, name, phases, f"the phases {phases} of map {name}")
    assert get_json(peered, PROVIDER, "namespace", refused) is None
    events = get_json(
        peered,
        PROVIDER,
        "events",
        "-n",
        PROVIDER_TENANT,
        "--field-selector",
        f"involvedObject.name={name},reason=CreationLoopBackOff",
    )["items"]
    assert any(told in event["message"] for event in events), events


def delete_tenants_namespace_map(peered: Clusters, name: str) -> None:
    peered.kubectl(
        PROVIDER,
        "delete",
        "namespacemaps.offloading.liqo.io",
        name,
        "-n",
        PROVIDER_TENANT,
        "--ignore-not-found",
        "--timeout=120s",
        check=False,
    )


def settled_twins(peered: Clusters) -> list[Any]:
    """venice's twin namespaces on naples, once none of them is going."""

    def settled() -> list[list[Any]]:
        listed = get_json(peered, PROVIDER, "namespaces", "-l", REMOTE_CLUSTER_ID_LABEL)
        found = [
            ns for ns in listed["items"] if (managed_by(ns) or "").startswith(f"{PROVIDER_TENANT}/")
        ]
        going = [ns for ns in found if ns.get("status", {}).get("phase") == "Terminating"]
        return [] if going else [found]

    held: list[Any] = wait_until(settled, "venice's twin namespaces settled", timeout=120)[0]
    return held


def test_a_tenant_asking_past_its_twin_namespaces_is_refused_and_told(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: the consumer's control-plane identity writes, in its tenant namespace on the
    provider, a NamespaceMap asking for more twin namespaces than the provider makes for it.
    The provider makes what its count allows, refuses the rest entry by entry, saying why on
    the map, and makes them once its administrator allows more."""
    control_plane = secret_kubeconfig(peered, "vk-control-plane-naples", tmp_path / "cp")
    # Counted once none is going: one gone meanwhile would make room for both entries.
    held = settled_twins(peered)
    flood = tenants_namespace_map(
        "flood", {"flood-a": "flood-a-venice", "flood-b": "flood-b-venice"}
    )
    set_tenant_limit(peered, TENANT_MAX_TWIN_NAMESPACES_LABEL, len(held) + 1)

    try:
        written_by_tenant_and_refused(
            peered,
            control_plane,
            flood,
            {"flood-a": "Accepted", "flood-b": "CreationLoopBackOff"},
            "flood-b-venice",
            f"venice has the {len(held) + 1} twin namespaces this provider makes for it",
        )
        # The provider allows more: the entry refused is made, without waiting for a retry.
        set_tenant_limit(peered, TENANT_MAX_TWIN_NAMESPACES_LABEL, None)
        wait_for_phases(
            peered,
            "flood",
            {"flood-a": "Accepted", "flood-b": "Accepted"},
            "the refused entry made once allowed",
            timeout=30,  # under REFUSED_RETRY: made at once
        )
    finally:
        set_tenant_limit(peered, TENANT_MAX_TWIN_NAMESPACES_LABEL, None, check=False)
        delete_tenants_namespace_map(peered, "flood")


def test_a_tenant_cannot_take_another_consumers_default_twin_name_first(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: venice's control-plane identity writes a NamespaceMap asking for
    `shop-genoa` on naples, the twin name genoa's namespace `shop` gets there by default, genoa
    being another consumer of naples (its tenant namespace is there). Made, it would leave
    genoa's `shop` no twin on naples. The entry is refused, saying why; venice's own names are
    made."""
    control_plane = secret_kubeconfig(peered, "vk-control-plane-naples", tmp_path / "cp")
    squat = tenants_namespace_map("squat", {"shop": "shop-genoa", "cart": "cart-venice"})

    peered.kubectl(PROVIDER, "create", "namespace", "liqo-tenant-genoa")
    try:
        written_by_tenant_and_refused(
            peered,
            control_plane,
            squat,
            {"shop": "CreationLoopBackOff", "cart": "Accepted"},
            "shop-genoa",
            "shop-genoa is the twin name of genoa's namespace shop here by default",
        )
    finally:
        delete_tenants_namespace_map(peered, "squat")
        peered.kubectl(
            PROVIDER, "delete", "namespace", "liqo-tenant-genoa", "--ignore-not-found", check=False
        )


# A pod the twin's Pod Security level (restricted) admits.
LEFT_BEHIND: dict[str, Any] = {
    "containers": [
        {
            "name": "app",
            "image": "registry.k8s.io/pause:3.10",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resources": {"limits": {"cpu": "10m", "memory": "16Mi"}},
        }
    ]
}


@dataclass
class LeakedSlice:
    """A slice of venice's whose kubeconfig was kept, with a ShadowPod it made in a twin."""

    kubeconfig: Path
    answered: Path  # the virtual node's slice, which stays
    twin: str

    def may(self, *verb: str, kubeconfig: Path | None = None) -> bool:
        asked = kubectl_as(kubeconfig or self.kubeconfig, "auth", "can-i", *verb, "-n", self.twin)
        return asked.stdout.strip() == "yes"


@contextlib.contextmanager
def leaked_slice(peered: Clusters, tmp_path: Path, name: str) -> Iterator[LeakedSlice]:
    """venice's twin `<name>-venice` made on naples, a slice `name` answered there (no virtual
    node) and its kubeconfig kept, and a ShadowPod `left-behind` made with it in the twin;
    all gone afterwards."""
    control_plane = secret_kubeconfig(peered, "vk-control-plane-naples", tmp_path / "cp")
    twin = f"{name}-venice"
    twin_map = tenants_namespace_map(name, {name: twin})
    try:
        created = kubectl_as(control_plane, "create", "-f", "-", input=json.dumps(twin_map))
        assert created.returncode == 0, created.stderr
        wait_for_phases(peered, name, {name: "Accepted"}, "venice's twin made")
        made = subprocess.run(
            [VKCTL, "create", "resourceslice", name, f"--remote-cluster-id={PROVIDER}",
             "--no-virtual-node", "--timeout=60s", f"--kubeconfig={peered.kubeconfig(CONSUMER)}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        leaked = LeakedSlice(
            secret_kubeconfig(peered, f"kubeconfig-resourceslice-{name}", tmp_path / "leaked"),
            secret_kubeconfig(peered, f"kubeconfig-resourceslice-{PROVIDER}", tmp_path / "ok"),
            twin,
        )
        wait_until(lambda: leaked.may("get", "secrets"), "the slice's identity bound in the twin")
        left_behind = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "ShadowPod",
            "metadata": {"name": "left-behind", "namespace": twin},
            "spec": {"pod": LEFT_BEHIND},
        }
        offloaded = kubectl_as(
            leaked.kubeconfig, "create", "-f", "-", input=json.dumps(left_behind)
        )
        assert offloaded.returncode == 0, offloaded.stderr
        yield leaked
    finally:
        delete_consumer_slice(peered, name)
        delete_tenants_namespace_map(peered, name)


def test_a_deleted_slices_identity_keeps_no_right_in_its_consumers_twins(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: the kubeconfig of one of venice's slices leaks, and venice deletes the slice.
    The certificate in it is valid for a year; bound by venice's tenant group, it kept every
    right of a virtual kubelet in venice's twin namespaces (the offloaded pods' token Secrets,
    exec into them) for as long. The twins are bound to the users of venice's Quotas: the
    slice's Quota gone, its identity may only delete the ShadowPods it made there and follow
    them go (what its virtual kubelet does, draining its node), and nothing once the last is
    gone. The slice still answered (the virtual node's) keeps its rights throughout."""
    with leaked_slice(peered, tmp_path, "revoked") as leaked:
        delete_consumer_slice(peered, "revoked")
        wait_until(
            lambda: not leaked.may("get", "secrets"),
            "the deleted slice's identity left only its draining rights",
            timeout=30,
        )
        for verb in (
            ("create", "pods", "--subresource=exec"),
            ("get", "pods", "--subresource=log"),
            ("create", "configmaps"),
            ("create", "shadowpods.offloading.liqo.io"),
            ("update", "shadowpods.offloading.liqo.io"),
        ):
            assert not leaked.may(*verb), verb
        assert kubectl_as(leaked.kubeconfig, "get", "secrets", "-n", leaked.twin).returncode != 0
        assert leaked.may("list", "pods")
        deleted = kubectl_as(
            leaked.kubeconfig, "delete", "shadowpods.offloading.liqo.io", "left-behind", "-n",
            leaked.twin, "--wait=false",
        )  # fmt: skip
        assert deleted.returncode == 0, deleted.stderr
        wait_until(
            lambda: not leaked.may("list", "shadowpods.offloading.liqo.io"),
            "its last ShadowPod gone, no right left",
            timeout=60,
        )
        assert not leaked.may("list", "pods")
        assert leaked.may("get", "secrets", kubeconfig=leaked.answered)


def test_a_deleted_slices_shadow_pods_are_deleted_by_the_provider_after_its_grace(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: venice offloads a slice's worth, deletes the slice (its Quota goes) without
    draining, makes another and offloads as much again, and again: what the first ran would
    run on counted in no Quota. naples deletes what a deleted slice left once its grace is up
    (here 3 s: its controller manager started with --deleted-slice-drain-grace=3s), and the
    slice's identity is left with nothing."""
    log = tmp_path / "controller-manager.log"
    with installed_controller_manager_stopped(peered, PROVIDER):
        process = start_controller_manager(peered, PROVIDER, log, "--deleted-slice-drain-grace=3s")
        try:
            with leaked_slice(peered, tmp_path, "undrained") as leaked:
                delete_consumer_slice(peered, "undrained")
                wait_until(
                    lambda: not leaked.may("list", "shadowpods.offloading.liqo.io"),
                    "its ShadowPod deleted by naples, and its identity's last right with it",
                    timeout=60,
                )
                assert peered.kubectl(
                    PROVIDER, "get", "shadowpods.offloading.liqo.io", "left-behind", "-n",
                    leaked.twin, check=False,
                ).returncode != 0  # fmt: skip
        finally:
            stop_controller_manager(process)
        assert "deleting a shadow pod whose creator's slice is gone" in log.read_text()


def test_a_deleted_slices_pods_hold_its_place_in_the_count_until_they_are_gone(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: at its count, venice deletes a slice whose pods run on (no drain) and makes
    another at once, to run a slice's worth more each time until naples' grace deletes what the
    first left. The deleted slice's identity holds its place while ShadowPods it made are
    left: the new slice waits, told why, and is answered once they are gone."""

    def answered() -> list[Any]:
        found = get_json(
            peered, PROVIDER, RSLICE, "-n", PROVIDER_TENANT, "-l", f"{REPLICATED_LABEL}=true"
        )["items"]
        return [s for s in found if not s["metadata"].get("deletionTimestamp")]

    def refill() -> Any:
        return consumer_slice(peered, "refill")

    # Room for one more than venice holds: the slice that will be deleted.
    set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, len(answered()) + 1)
    try:
        with leaked_slice(peered, tmp_path, "cycled") as leaked:
            delete_consumer_slice(peered, "cycled")
            apply(peered, CONSUMER, forge_resource_slice("refill", PROVIDER))
            denied = wait_until(
                lambda: (
                    "deleted slices whose offloaded pods are not gone yet"
                    in str((refill() or {}).get("status"))
                    and refill()
                ),
                "the new slice waiting for the deleted one's pods",
                timeout=60,
                explain=lambda: str((refill() or {}).get("status")),
            )
            assert conditions(denied) == {"Authentication": "Denied", "Resources": "Denied"}
            deleted = kubectl_as(
                leaked.kubeconfig, "delete", "shadowpods.offloading.liqo.io", "left-behind",
                "-n", leaked.twin, "--wait=false",
            )  # fmt: skip
            assert deleted.returncode == 0, deleted.stderr
            wait_answered(
                peered, "refill", "the new slice answered once the deleted one's pods are gone"
            )
    finally:
        set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None, check=False)
        delete_consumer_slice(peered, "refill")


def test_a_consumer_making_slices_again_and_again_is_paced(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: venice deletes a slice and makes another, again and again: each new one is
    an identity naples binds in every twin of venice's and unbinds when it goes. Past its
    count's worth of new slices at once (naples' controller manager, restarted, starts with that
    many), venice gets one more per --new-resource-slice-interval (here 1h): the next is Denied,
    saying why, and gets no Quota."""
    answered = [
        s
        for s in get_json(
            peered, PROVIDER, RSLICE, "-n", PROVIDER_TENANT, "-l", f"{REPLICATED_LABEL}=true"
        )["items"]
        if not s["metadata"].get("deletionTimestamp")
    ]
    count = len(answered) + 1  # room for one slice more than venice holds
    set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, count)
    log = tmp_path / "controller-manager.log"

    def paced(name: str) -> Any:
        found = get_json(peered, CONSUMER, RSLICE, name, "-n", CONSUMER_TENANT) or {}
        said = {c.get("reason") for c in found.get("status", {}).get("conditions", [])}
        return found if said == {"ResourceSliceRateLimited"} else None

    made: list[str] = []
    with installed_controller_manager_stopped(peered, PROVIDER):
        process = start_controller_manager(
            peered, PROVIDER, log, "--new-resource-slice-interval=1h"
        )
        try:
            # Its count's worth of new slices, each made and deleted in turn: all answered.
            for n in range(count):
                name = f"churn-{n}"
                made.append(name)
                apply(peered, CONSUMER, forge_resource_slice(name, PROVIDER))
                wait_answered(peered, name, f"new slice {name} answered")
                delete_consumer_slice(peered, name)
            made.append("churn-held")
            apply(peered, CONSUMER, forge_resource_slice("churn-held", PROVIDER))
            held = wait_until(
                lambda: paced("churn-held"),
                "the next new slice held back",
                timeout=60,
                explain=lambda: str(
                    get_json(peered, CONSUMER, RSLICE, "churn-held", "-n", CONSUMER_TENANT)
                ),
            )
            assert conditions(held) == {"Authentication": "Denied", "Resources": "Denied"}
            message = next(c["message"] for c in held["status"]["conditions"])
            assert message.startswith(
                f"venice had its {count} new ResourceSlices answered at once, and gets one "
                "more every 3600 s"
            ), message
            assert (
                get_json(
                    peered, PROVIDER, "quotas.offloading.liqo.io",
                    resource_slice_user(CONSUMER, "churn-held"), "-n", PROVIDER_TENANT,
                )
                is None
            )  # fmt: skip
        finally:
            stop_controller_manager(process)
            set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None, check=False)
            for name in made:
                delete_consumer_slice(peered, name)


def test_a_consumer_mapping_and_unmapping_again_and_again_is_paced(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: venice's control-plane identity maps a namespace and unmaps it, again and
    again: each time naples makes a namespace, its quota and bindings, and deletes it walking
    every resource kind. Past its count's worth of new twins at once (naples' controller
    manager, restarted, starts with that many), venice gets one more per
    --new-twin-namespace-interval (here 1h): the next entry stays CreationLoopBackOff, saying
    why, and no namespace is made for it."""
    control_plane = secret_kubeconfig(peered, "vk-control-plane-naples", tmp_path / "cp")
    count = len(settled_twins(peered)) + 1  # room for one twin more than venice holds
    set_tenant_limit(peered, TENANT_MAX_TWIN_NAMESPACES_LABEL, count)
    log = tmp_path / "controller-manager.log"

    def map_only(local: str) -> None:
        churn = tenants_namespace_map("churn", {local: f"{local}-venice"})
        written = kubectl_as(control_plane, "apply", "-f", "-", input=json.dumps(churn))
        assert written.returncode == 0, written.stderr

    def told() -> str | None:
        events = get_json(peered, PROVIDER, "events", "-n", PROVIDER_TENANT,
                          "--field-selector", "involvedObject.name=churn")["items"]  # fmt: skip
        said = (e["message"] for e in events)
        return next((m for m in said if "new twin namespaces made at once" in m), None)

    with installed_controller_manager_stopped(peered, PROVIDER):
        process = start_controller_manager(
            peered, PROVIDER, log, "--new-twin-namespace-interval=1h"
        )
        try:
            # Its count's worth of new twins, each mapped and unmapped in turn: all made.
            for n in range(count):
                map_only(f"churn-{n}")
                wait_for_phases(peered, "churn", {f"churn-{n}": "Accepted"}, f"churn-{n} made")
            map_only("churn-held")
            message = wait_until(told, "the next new twin held back, and said", timeout=60)
            assert message.startswith(
                f"venice had its {count} new twin namespaces made at once, and gets one more "
                "every 3600 s"
            ), message
            wait_for_phases(peered, "churn", {"churn-held": "CreationLoopBackOff"}, "held back")
            assert get_json(peered, PROVIDER, "namespace", "churn-held-venice") is None
        finally:
            stop_controller_manager(process)
            set_tenant_limit(peered, TENANT_MAX_TWIN_NAMESPACES_LABEL, None, check=False)
    delete_tenants_namespace_map(peered, "churn")


def test_a_slice_past_what_the_provider_answers_for_its_consumer_is_denied_and_told(
    peered: Clusters,
) -> None:
    """A consumer's slices past the count its provider answers for it (each an identity signed
    there and a Quota) are denied, saying why where the consumer reads it, and answered once
    the provider's administrator allows more."""
    held = [
        s
        for s in get_json(
            peered, PROVIDER, RSLICE, "-n", PROVIDER_TENANT, "-l", f"{REPLICATED_LABEL}=true"
        )["items"]
        if not s["metadata"].get("deletionTimestamp")
    ]
    set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, len(held))

    def capped() -> Any:
        return consumer_slice(peered, "capped")

    try:
        apply(peered, CONSUMER, forge_resource_slice("capped", PROVIDER))
        # (Its first version, before venice writes its ID, is denied its identity for that.)
        denied = wait_until(
            lambda: (
                {c.get("reason") for c in (capped() or {}).get("status", {}).get("conditions", [])}
                == {"ResourceSliceCountExceeded"}
                and capped()
            ),
            "the slice past the count denied",
            timeout=60,
            explain=lambda: str((capped() or {}).get("status")),
        )
        assert conditions(denied) == {"Authentication": "Denied", "Resources": "Denied"}
        message = next(
            c["message"] for c in denied["status"]["conditions"] if c["type"] == "Authentication"
        )
        assert message.startswith(
            f"venice has the {len(held)} ResourceSlices this provider answers for it at once"
        )
        assert (
            get_json(
                peered,
                PROVIDER,
                "quotas.offloading.liqo.io",
                resource_slice_user(CONSUMER, "capped"),
                "-n",
                PROVIDER_TENANT,
            )
            is None
        )
        # Allowed more: answered at once.
        set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None)
        wait_answered(peered, "capped", "the slice answered once allowed")
    finally:
        set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None, check=False)
        delete_consumer_slice(peered, "capped")


def test_a_tenants_control_plane_cannot_keep_more_or_larger_objects_than_the_provider_allows(
    peered: Clusters, tmp_path: Path
) -> None:
    """The attack: the consumer's control-plane identity fills its tenant namespace on the
    provider with ResourceSlices (each stored in its etcd, and read by its controllers), or
    writes a ResourceSlice or a NamespaceMap as large as etcd takes. The provider's webhook
    refuses slices past twice those it answers for that consumer, objects past their size, and
    objects that are no replicas (which the count would not see), saying why."""
    control_plane = secret_kubeconfig(peered, "vk-control-plane-naples", tmp_path / "cp")

    def settled() -> list[list[Any]]:
        found = get_json(peered, PROVIDER, RSLICE, "-n", PROVIDER_TENANT)["items"]
        going = [s for s in found if s["metadata"].get("deletionTimestamp")]
        return [] if going else [found]

    # Counted once none is going (an earlier test's): one gone meanwhile would make room.
    there = wait_until(settled, "the tenant namespace's slices settled", timeout=120)[0]
    answered = [s for s in there if s["metadata"].get("labels", {}).get(REPLICATED_LABEL)]
    set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, len(answered))
    kept = 2 * len(answered)

    def slice_named(name: str, *, replica: bool = True, **annotations: str) -> str:
        labels = {REPLICATED_LABEL: "true", REMOTE_CLUSTER_ID_LABEL: CONSUMER} if replica else {}
        return json.dumps(
            {
                "apiVersion": "authentication.liqo.io/v1beta1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": name,
                    "namespace": PROVIDER_TENANT,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": {},
            }
        )

    made: list[str] = []
    try:
        # Not a replica: out of the count, so refused.
        plain = kubectl_as(
            control_plane, "create", "-f", "-", input=slice_named("p", replica=False)
        )
        assert plain.returncode != 0
        assert "venice's control plane writes only its replicas here" in plain.stderr
        for n in range(kept + 1):
            name = f"filler-{n}"
            created = kubectl_as(control_plane, "create", "-f", "-", input=slice_named(name))
            if created.returncode != 0:
                break
            made.append(name)
        else:
            pytest.fail(f"the control plane kept {kept + 1} ResourceSlices, past {kept}")
        # Refused at the count exactly (the replicas there, answered or not).
        assert len(made) == kept - len(answered), created.stderr
        assert f"venice has the {kept} resourceslices this provider keeps for it" in (
            created.stderr
        )
        assert TENANT_MAX_RESOURCE_SLICES_LABEL in created.stderr
        # The consumer's own slice past the count, as a user makes it: vkctl shows the
        # provider's refusal, which the replicator recorded on the slice, while it waits.
        refused_here = subprocess.run(
            [
                VKCTL,
                "create",
                "resourceslice",
                "refused",
                f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
                "--remote-cluster-id",
                PROVIDER,
                "--timeout=20s",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused_here.returncode != 0
        assert (
            "Authentication pending, Resources pending; cluster naples refused to store this "
            'ResourceSlice: admission webhook "resourceslice.validate.vk.io" denied the '
            f"request: venice has the {kept} resourceslices this provider keeps for it"
        ) in refused_here.stderr, refused_here.stderr
        # (Gone before room is made: its replicator would take that room.)
        peered.kubectl(CONSUMER, "delete", RSLICE, "refused", "-n", CONSUMER_TENANT)
        # One gone makes room.
        peered.kubectl(PROVIDER, "delete", RSLICE, made.pop(), "-n", PROVIDER_TENANT)
        retried = wait_until(
            lambda: (
                kubectl_as(
                    control_plane, "create", "-f", "-", input=slice_named("retried")
                ).returncode
                == 0
            ),
            "room made by a slice deleted",
            timeout=30,
        )
        assert retried
        made.append("retried")
        # As large as etcd takes: refused whatever the count.
        set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None)
        large = kubectl_as(
            control_plane, "create", "-f", "-", input=slice_named("large", pad="x" * 70_000)
        )
        assert large.returncode != 0
        assert "a ResourceSlice of 70" in large.stderr
        assert "this provider keeps its consumers' up to 65536 bytes each" in large.stderr
        large_map = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceMap",
            "metadata": {
                "name": "large",
                "namespace": PROVIDER_TENANT,
                "labels": {REPLICATED_LABEL: "true", REMOTE_CLUSTER_ID_LABEL: CONSUMER},
            },
            # 5000 mappings of over 120 bytes: past 512 KiB.
            "spec": {"desiredMapping": {f"{n:060}": f"{n:056}-fit" for n in range(5000)}},
        }
        refused = kubectl_as(control_plane, "create", "-f", "-", input=json.dumps(large_map))
        assert refused.returncode != 0
        assert "a NamespaceMap of " in refused.stderr
        assert "bytes: this provider keeps its consumers' up to 524288 bytes each" in (
            refused.stderr
        )
        # The provider's own writes there are not judged by this webhook.
        peered.kubectl(
            PROVIDER,
            "create",
            "-f",
            "-",
            input=slice_named("providers-own", replica=False, pad="x" * 70_000),
        )
        made.append("providers-own")
    finally:
        set_tenant_limit(peered, TENANT_MAX_RESOURCE_SLICES_LABEL, None, check=False)
        delete_consumer_slice(peered, "refused")
        if made:
            peered.kubectl(
                PROVIDER,
                "delete",
                RSLICE,
                *made,
                "-n",
                PROVIDER_TENANT,
                "--ignore-not-found",
                check=False,
            )


def test_bad_quantities_are_refused_with_the_reason(peered: Clusters) -> None:
    # Not a quantity: the API server refuses the slice (the CRD's schema), saying why.
    refused = peered.kubectl(
        CONSUMER,
        "apply",
        "-f",
        "-",
        input=json.dumps(forge_resource_slice("badpool", PROVIDER, resources={"cpu": "lots"})),
        check=False,
    )
    assert refused.returncode != 0
    assert 'spec.resources.cpu: Invalid value: "lots"' in refused.stderr
    # A quantity, but negative: the provider denies the resources, saying why.
    apply(
        peered,
        CONSUMER,
        forge_resource_slice(
            "badpool", PROVIDER, resources={"cpu": "-2"}, create_virtual_node=False
        ),
    )
    denied = wait_until(
        lambda: (
            (s := get_json(peered, CONSUMER, RSLICE, "badpool", "-n", CONSUMER_TENANT))
            and conditions(s).get("Resources") == "Denied"
            and s
        ),
        "the slice's resources Denied",
        timeout=60,
    )
    message = next(c["message"] for c in denied["status"]["conditions"] if c["type"] == "Resources")
    assert message == "spec.resources.cpu: -2 is negative"


def test_a_custom_class_is_left_to_its_controller_and_the_virtual_node_follows_it(
    peered: Clusters,
) -> None:
    apply(peered, CONSUMER, forge_resource_slice("custom", PROVIDER, slice_class="gpu-class"))
    authenticated = wait_until(
        lambda: (
            (s := get_json(peered, CONSUMER, RSLICE, "custom", "-n", CONSUMER_TENANT))
            and conditions(s).get("Authentication") == "Accepted"
            and s
        ),
        "the custom slice authenticated",
        timeout=60,
    )
    assert "Resources" not in conditions(authenticated)
    # The custom class's controller (here: the test) answers on the provider's copy.
    custom = {"cpu": "8", "memory": "16Gi", "pods": "50", "nvidia.com/gpu": "1"}
    provider_copy = get_json(peered, PROVIDER, RSLICE, "custom", "-n", PROVIDER_TENANT)
    status = dict(provider_copy["status"])
    status["resources"] = custom
    status["conditions"] = [
        *status["conditions"],
        {
            "type": "Resources",
            "status": "Accepted",
            "reason": "CustomClassGranted",
            "message": "granted by the gpu-class controller",
            "lastTransitionTime": "2026-11-22T00:00:00Z",
        },
    ]
    peered.kubectl(
        PROVIDER,
        "patch",
        RSLICE,
        "custom",
        "-n",
        PROVIDER_TENANT,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    virtual_node = wait_until(
        lambda: virtual_node_of(peered, "custom"),
        "the VirtualNode of the custom slice",
    )
    assert virtual_node["spec"]["resourceQuota"]["hard"] == custom
    user = resource_slice_user(CONSUMER, "custom")
    quota = wait_until(
        lambda: get_json(
            peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT
        ),
        "the custom slice's Quota",
    )
    assert quota["spec"]["resources"] == custom


def test_deleting_a_slice_removes_its_virtual_node_quota_and_provider_copy(
    peered: Clusters,
) -> None:
    """And not before: a Quota or a VirtualNode deleted by hand is made again while its slice
    is answered (the VirtualNode stayed gone until the slice changed)."""
    apply(peered, CONSUMER, forge_resource_slice("shortlived", PROVIDER))
    user = resource_slice_user(CONSUMER, "shortlived")
    wait_until(
        lambda: (
            virtual_node_of(peered, "shortlived")
            and get_json(peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT)
        ),
        "the VirtualNode and Quota of the slice",
        timeout=60,
    )
    # Deleted by hand while the slice is answered, the Quota is made again: its pods would be
    # deleted after a grace without it.
    quota = get_json(peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT)
    peered.kubectl(PROVIDER, "delete", "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT)
    wait_until(
        lambda: (
            (again := get_json(
                peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT
            ))
            and again["metadata"]["uid"] != quota["metadata"]["uid"]
        ),
        "the Quota deleted by hand made again",
        timeout=30,
    )  # fmt: skip
    virtual_node = virtual_node_of(peered, "shortlived")
    peered.kubectl(
        CONSUMER, "delete", "virtualnodes.offloading.liqo.io", "shortlived", "-n", CONSUMER_TENANT
    )
    wait_until(
        lambda: (
            (again := virtual_node_of(peered, "shortlived"))
            and again["metadata"]["uid"] != virtual_node["metadata"]["uid"]
        ),
        "the VirtualNode deleted by hand made again",
        timeout=30,
    )
    [said, *_] = wait_until(
        lambda: events_of(peered, CONSUMER_TENANT, "shortlived", "VirtualNodeCreated"),
        "the VirtualNode's creation said on the slice",
    )
    assert "delete the ResourceSlice, or `vkctl unpeer`" in said
    peered.kubectl(CONSUMER, "delete", RSLICE, "shortlived", "-n", CONSUMER_TENANT)
    wait_until(
        lambda: (
            virtual_node_of(peered, "shortlived") is None
            and get_json(peered, PROVIDER, RSLICE, "shortlived", "-n", PROVIDER_TENANT) is None
            and get_json(peered, PROVIDER, "quotas.offloading.liqo.io", user, "-n", PROVIDER_TENANT)
            is None
        ),
        "the VirtualNode, the provider's copy and the Quota gone",
        timeout=60,
    )


def test_the_virtual_node_of_a_slice_runs_its_kubelet_and_is_drained_when_deleted(
    peered: Clusters,
) -> None:
    apply(peered, CONSUMER, forge_resource_slice("fleet", PROVIDER))
    node = wait_until(
        lambda: (
            (n := get_json(peered, CONSUMER, "node", "fleet"))
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
            and n
        ),
        "the node fleet Ready",
        timeout=90,
    )
    assert node["status"]["capacity"] == {
        "cpu": "4",
        "memory": "8Gi",
        "pods": "110",
        "ephemeral-storage": "20Gi",
    }
    assert node["metadata"]["labels"]["topology.liqo.io/region"] == "south"
    virtual_node = wait_until(
        lambda: (
            (v := virtual_node_of(peered, "fleet"))
            and conditions(v) == {"VirtualKubelet": "Running", "Node": "Running"}
            and v
        ),
        "the VirtualNode's conditions Running",
    )
    assert virtual_node["metadata"]["finalizers"] == ["virtualnode-controller.liqo.io/finalizer"]
    peered.kubectl(CONSUMER, "delete", RSLICE, "fleet", "-n", CONSUMER_TENANT)
    wait_until(
        lambda: (
            get_json(peered, CONSUMER, "node", "fleet") is None
            and virtual_node_of(peered, "fleet") is None
        ),
        "the node and the VirtualNode gone",
        timeout=60,
    )
    # Two slices to one provider made two nodes; the other one keeps working.
    other = get_json(peered, CONSUMER, "node", PROVIDER)
    assert any(
        c["type"] == "Ready" and c["status"] == "True" for c in other["status"]["conditions"]
    )
    assert conditions(virtual_node_of(peered, PROVIDER)) == {
        "VirtualKubelet": "Running",
        "Node": "Running",
    }


def test_vkctl_peer_made_the_provider_a_ready_virtual_node(peered: Clusters) -> None:
    nodes = peered.kubectl(
        CONSUMER, "get", "node", "--selector=liqo.io/type=virtual-node", "--show-labels"
    ).stdout
    row = next(line for line in nodes.splitlines() if line.startswith(f"{PROVIDER} "))
    assert row.split()[1:3] == ["Ready", "agent"]
    assert "topology.liqo.io/region=south" in row
    assert f"liqo.io/remote-cluster-id={PROVIDER}" in row


@pytest.mark.parametrize(
    ("remote", "message"),
    [
        ("garbage", "kubeconfig"),
        ("same", "both kubeconfigs reach cluster venice"),
        ("unreachable", "check both kubeconfigs"),
    ],
)
def test_vkctl_peer_with_a_wrong_kubeconfig_says_why(
    peered: Clusters, tmp_path: Path, remote: str, message: str
) -> None:
    path = tmp_path / "remote"
    if remote == "garbage":
        path.write_text("not: [a kubeconfig")
    elif remote == "unreachable":  # florence's, where nothing listens
        document = yaml.safe_load(peered.kubeconfig("florence").read_text())
        document["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
        path.write_text(yaml.safe_dump(document))
    else:
        path.write_bytes(peered.kubeconfig(CONSUMER).read_bytes())
    before = tenant_namespaces(peered)
    result = subprocess.run(
        [
            VKCTL,
            "peer",
            f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
            f"--remote-kubeconfig={path}",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    # Nothing half-created (other tests' namespaces may be going meanwhile: tenants only).
    assert tenant_namespaces(peered) <= before


def test_a_cluster_claiming_a_peers_id_takes_nothing_over(peered: Clusters) -> None:
    """florence says it is naples (its identity ConfigMap, which its installer writes): `vkctl
    peer` with it is refused, as is `vkctl unpeer`, and venice's peering with naples, pinned
    to naples' kube-system UID at peering, is left as it was."""
    naples_uid = get_json(peered, PROVIDER, "namespace", "kube-system")["metadata"]["uid"]
    venice_uid = get_json(peered, CONSUMER, "namespace", "kube-system")["metadata"]["uid"]
    pinned = "peering.vk.io/cluster-uid"
    tenant = get_json(peered, CONSUMER, "namespace", CONSUMER_TENANT)
    assert tenant["metadata"]["annotations"][pinned] == naples_uid
    tenant = get_json(peered, PROVIDER, "namespace", PROVIDER_TENANT)
    assert tenant["metadata"]["annotations"][pinned] == venice_uid
    secret = control_plane_secret_name(PROVIDER)
    before = get_json(peered, CONSUMER, "secret", "-n", CONSUMER_TENANT, secret)

    def as_naples(cluster_id: str) -> None:
        patch = {"data": {"clusterID": cluster_id}}
        peered.kubectl(
            "florence", "patch", "configmap", "-n", "vk", "vk-cluster-identity",
            "--type=merge", "-p", json.dumps(patch),
        )  # fmt: skip

    as_naples(PROVIDER)
    try:
        for command in ("peer", "unpeer"):
            result = subprocess.run(
                [
                    VKCTL,
                    command,
                    f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
                    f"--remote-kubeconfig={peered.kubeconfig('florence')}",
                    "--timeout=30s",
                ],
                capture_output=True,
                text=True,
            )
            assert result.returncode != 0, command
            assert "it is another cluster" in result.stderr, result.stderr
            assert "Traceback" not in result.stderr
    finally:
        as_naples("florence")
    after = get_json(peered, CONSUMER, "secret", "-n", CONSUMER_TENANT, secret)
    assert after["data"] == before["data"]
    assert virtual_node_of(peered, PROVIDER) is not None


def tenant_namespaces(clusters: Clusters) -> set[str]:
    names = clusters.kubectl(CONSUMER, "get", "namespaces", "-o", "name").stdout.split()
    return {name for name in names if name.startswith("namespace/liqo-tenant-")}


def namespace_map(desired: dict[str, str], provider: str = PROVIDER) -> dict[str, Any]:
    """The consumer's NamespaceMap, as the NamespaceOffloading controller writes it (these tests
    write it by hand, with venice's controller for it running or not)."""
    return forge_namespace_map(provider, desired)


def delete_namespace_map(clusters: Clusters, provider: str) -> None:
    """The consumer's map to `provider` removed (the provider then deletes its twins)."""
    clusters.kubectl(
        CONSUMER,
        "delete",
        "namespacemaps.offloading.liqo.io",
        provider,
        "-n",
        f"liqo-tenant-{provider}",
        "--ignore-not-found",
        "--wait=false",
        check=False,
    )


def current_mapping(clusters: Clusters) -> dict[str, Any]:
    found = get_json(
        clusters, CONSUMER, "namespacemaps.offloading.liqo.io", PROVIDER, "-n", CONSUMER_TENANT
    )
    return ((found or {}).get("status") or {}).get("currentMapping") or {}


def test_the_provider_creates_twin_namespaces_and_offloaded_pods_run_there_as_the_slice(
    peered: Clusters, tmp_path: Path
) -> None:
    peered.kubectl(CONSUMER, "create", "namespace", "shop")
    peered.kubectl(PROVIDER, "create", "namespace", "taken-venice")  # someone else's
    try:
        apply(peered, CONSUMER, namespace_map({"shop": "shop-venice", "taken": "taken-venice"}))
        wait_until(
            lambda: (
                current_mapping(peered)
                == {
                    "shop": {"remoteNamespace": "shop-venice", "phase": "Accepted"},
                    "taken": {"remoteNamespace": "taken-venice", "phase": "CreationLoopBackOff"},
                }
            ),
            "shop Accepted and taken refused, as the provider reports",
            timeout=60,
        )
        twin = get_json(peered, PROVIDER, "namespace", "shop-venice")
        assert twin["metadata"]["labels"]["liqo.io/remote-cluster-id"] == CONSUMER
        foreign = get_json(peered, PROVIDER, "namespace", "taken-venice")
        assert "liqo.io/remote-namespace-managed-by" not in (
            foreign["metadata"].get("annotations") or {}
        )

        # The slice identity (what the virtual kubelet uses) may work in the twin only.
        identity = secret_kubeconfig(
            peered, f"kubeconfig-resourceslice-{PROVIDER}", tmp_path / "slice"
        )
        for check, expected in [
            (("create", "shadowpods.offloading.liqo.io", "-n", "shop-venice"), "yes"),
            (("create", "pods", "-n", "shop-venice"), "no"),  # the provider makes the Pods
            (("create", "pods", "--subresource=exec", "-n", "shop-venice"), "yes"),
            (("create", "shadowpods.offloading.liqo.io", "-n", "taken-venice"), "no"),
            (("create", "pods", "-n", "default"), "no"),
            (("create", "namespaces"), "no"),
            (("create", "quotas.offloading.liqo.io", "-n", PROVIDER_TENANT), "no"),
            (("create", "certificatesigningrequests"), "no"),
        ]:
            assert kubectl_as(identity, "auth", "can-i", *check).stdout.strip() == expected, check

        # A pod scheduled on the virtual node runs in naples, in the twin namespace.
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": PROVIDER},
                        "tolerations": [
                            {
                                "key": "virtual-node.liqo.io/not-allowed",
                                "operator": "Exists",
                                "effect": "NoExecute",
                            }
                        ],
                        "containers": [{"name": "app", "image": "nginx"}],
                    },
                },
            },
        }
        apply(peered, CONSUMER, deployment)
        wait_until(
            lambda: [
                p
                for p in (get_json(peered, PROVIDER, "pods", "-n", "shop-venice") or {}).get(
                    "items", []
                )
                if p["status"].get("phase") == "Running"
            ],
            "the offloaded pod Running in naples",
            timeout=60,
        )

        # A mapping removed: its twin goes.
        apply(peered, CONSUMER, namespace_map({"taken": "taken-venice"}))
        wait_until(
            lambda: (
                get_json(peered, PROVIDER, "namespace", "shop-venice") is None
                and "shop" not in current_mapping(peered)
            ),
            "the twin namespace deleted",
            timeout=90,
        )
        assert get_json(peered, PROVIDER, "namespace", "taken-venice") is not None
    finally:
        delete_namespace_map(peered, PROVIDER)
        peered.kubectl(CONSUMER, "delete", "namespace", "shop", "--wait=false")
        peered.kubectl(PROVIDER, "delete", "namespace", "taken-venice", "--wait=false")


def foreign_cluster_conditions(clusters: Clusters, cluster: str, name: str) -> dict[str, str]:
    found = get_json(clusters, cluster, "foreignclusters.core.liqo.io", name) or {}
    modules = (found.get("status") or {}).get("modules") or {}
    return {
        c["type"]: c["status"]
        for module in modules.values()
        for c in (module or {}).get("conditions") or []
    }


def test_foreign_clusters_show_the_peering_from_both_sides(peered: Clusters) -> None:
    wait_until(
        lambda: (
            foreign_cluster_conditions(peered, CONSUMER, PROVIDER)
            == {
                "AuthIdentityControlPlaneStatus": "Established",
                "AuthTenantStatus": "None",
                "OffloadingVirtualNodeStatus": "Established",
            }
        ),
        "venice's ForeignCluster naples: outgoing peering established",
    )
    table = peered.kubectl(CONSUMER, "get", "foreignclusters", PROVIDER).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "OUTGOING",
        "PEERING",
        "INCOMING",
        "PEERING",
        "NETWORKING",
        "AUTHENTICATION",
        "AGE",
    ]
    # Networking is not vk's: its column stays empty.
    assert table[1].split()[:4] == [PROVIDER, "Established", "None", "Established"]
    wait_until(
        lambda: (
            foreign_cluster_conditions(peered, PROVIDER, CONSUMER)
            == {"AuthIdentityControlPlaneStatus": "None", "AuthTenantStatus": "Established"}
        ),
        "naples's ForeignCluster venice: incoming peering established",
    )
    provider_view = get_json(peered, PROVIDER, "foreignclusters.core.liqo.io", CONSUMER)
    assert provider_view["status"]["role"] == "Consumer"
    assert (
        get_json(peered, CONSUMER, "foreignclusters.core.liqo.io", PROVIDER)["status"]["role"]
        == "Provider"
    )


def budget_pod(name: str, node: str, cpu: str, cpu_limit: str | None = None) -> dict[str, Any]:
    """A pod of the namespace `budget` pinned to a virtual node, with its CPU asked for."""
    resources = {
        "requests": {"cpu": cpu, "memory": "64Mi"},
        "limits": {"cpu": cpu_limit or cpu, "memory": "64Mi"},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "budget"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [
                {
                    "key": "virtual-node.liqo.io/not-allowed",
                    "operator": "Exists",
                    "effect": "NoExecute",
                }
            ],
            "containers": [{"name": "app", "image": "nginx", "resources": resources}],
        },
    }


def refusal(clusters: Clusters, pod: str) -> str | None:
    """Why the provider refused a consumer's pod, as the pod's status says it."""
    status = (get_json(clusters, CONSUMER, "pod", pod, "-n", "budget") or {}).get("status") or {}
    return status.get("message") if status.get("reason") == "OffloadingBackOff" else None


def pod_status(clusters: Clusters, namespace: str, name: str) -> str:
    """What venice says of a pod: for a test's failure message."""
    pod = get_json(clusters, CONSUMER, "pod", name, "-n", namespace) or {}
    return json.dumps(
        {"node": pod.get("spec", {}).get("nodeName"), "status": pod.get("status")}, indent=1
    )


def remote_running(clusters: Clusters) -> set[str]:
    pods = (get_json(clusters, PROVIDER, "pods", "-n", "budget-venice") or {}).get("items", [])
    return {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}


def test_the_quota_of_a_slice_shared_by_two_virtual_nodes_denies_what_exceeds_it(
    peered: Clusters,
) -> None:
    """A slice of 2 CPUs and two virtual nodes made of it (4 CPUs for venice's scheduler):
    the provider's webhook admits 2 CPUs of pods in every mode, Hard also wants requests equal
    to limits, a cordoned Quota admits nothing; the consumer's pods say why."""
    apply(
        peered,
        CONSUMER,
        forge_resource_slice(
            "shared", PROVIDER, resources={"cpu": "2", "memory": "4Gi", "pods": "10"}
        ),
    )
    peered.kubectl(CONSUMER, "create", "namespace", "budget")
    try:
        wait_until(
            lambda: conditions(virtual_node_of(peered, "shared")).get("Node") == "Running",
            "the slice's virtual node",
            timeout=90,
        )
        second = subprocess.run(
            [
                VKCTL,
                "create",
                "virtualnode",
                "shared-2",
                f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
                f"--remote-cluster-id={PROVIDER}",
                "--resource-slice-name=shared",
                "--timeout=90s",
            ],
            capture_output=True,
            text=True,
        )
        assert second.returncode == 0, second.stderr
        apply(peered, CONSUMER, namespace_map({"budget": "budget-venice"}))
        wait_until(lambda: "budget" in current_mapping(peered), "budget mapped", timeout=60)
        user = resource_slice_user(CONSUMER, "shared")

        def set_quota(spec: dict[str, Any]) -> None:
            peered.kubectl(
                PROVIDER,
                "patch",
                "quotas.offloading.liqo.io",
                user,
                "-n",
                PROVIDER_TENANT,
                "--type=merge",
                "-p",
                json.dumps({"spec": spec}),
            )

        for mode in ("None", "Soft", "Hard"):
            set_quota({"limitsEnforcement": mode})
            # Names of this round only: nothing of the last round is mistaken for them.
            one, two, three = (f"{mode.lower()}-{n}" for n in ("one", "two", "three"))
            for name, node in ((one, "shared"), (two, "shared"), (three, "shared-2")):
                apply(peered, CONSUMER, budget_pod(name, node, "1"))
                if name != three:  # in this order: the third is the one beyond the Quota
                    wait_until(
                        lambda n=name: n in remote_running(peered),
                        f"{name} running in naples",
                        timeout=60,
                        explain=lambda n=name: pod_status(peered, "budget", n),
                    )
            message = wait_until(
                lambda t=three: refusal(peered, t),
                f"{three} refused",
                timeout=60,
                explain=lambda t=three: pod_status(peered, "budget", t),
            )
            # (Usage may also count, for a few seconds, a pod just admitted whose creation then
            # failed: the webhook cannot know.)
            assert "cpu: asks 1, " in message, message
            assert " used, 2 allowed" in message, message
            assert three not in remote_running(peered)
            events = peered.kubectl(
                CONSUMER,
                "get",
                "events",
                "-n",
                "budget",
                f"--field-selector=involvedObject.name={three},reason=OffloadingBackOff",
            ).stdout
            assert "refused the pod" in events
            peered.kubectl(CONSUMER, "delete", "pod", one, two, three, "-n", "budget")
            wait_until(
                lambda: (
                    not (get_json(peered, PROVIDER, "pods", "-n", "budget-venice") or {}).get(
                        "items"
                    )
                ),
                f"{mode}: the pods gone from naples",
                timeout=60,
            )

        # Hard: requests must equal limits, whatever the room left.
        apply(peered, CONSUMER, budget_pod("uneven", "shared", "100m", cpu_limit="200m"))
        message = wait_until(lambda: refusal(peered, "uneven"), "uneven refused")
        assert "limits it to" in message, message

        # Cordoned: nothing new, even what fits.
        set_quota({"limitsEnforcement": "None", "cordoned": True})
        apply(peered, CONSUMER, budget_pod("small", "shared", "100m"))
        message = wait_until(lambda: refusal(peered, "small"), "small refused")
        assert "cordoned" in message, message
    finally:
        peered.kubectl(CONSUMER, "delete", RSLICE, "shared", "-n", CONSUMER_TENANT, "--wait=false")
        delete_namespace_map(peered, PROVIDER)
        peered.kubectl(CONSUMER, "delete", "namespace", "budget", "--wait=false")


def events_of(clusters: Clusters, namespace: str, name: str, reason: str) -> list[str]:
    found = get_json(
        clusters,
        CONSUMER,
        "events",
        "-n",
        namespace,
        f"--field-selector=involvedObject.name={name},reason={reason}",
    )
    return [e["message"] for e in (found or {}).get("items", [])]


def identity_secret(namespace: str, cluster_id: str, kubeconfig: dict[str, Any]) -> dict[str, Any]:
    """A Secret named and labelled as this cluster's control-plane identity on `cluster_id`,
    holding `kubeconfig`, in `namespace`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": control_plane_secret_name(cluster_id),
            "namespace": namespace,
            "labels": {
                IDENTITY_TYPE_LABEL: IDENTITY_CONTROL_PLANE,
                REMOTE_CLUSTER_ID_LABEL: cluster_id,
            },
        },
        "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    }


def test_a_control_plane_secret_asking_to_run_a_command_is_refused_with_a_condition(
    peered: Clusters, tmp_path: Path
) -> None:
    """Whoever can write the consumer's control-plane kubeconfig Secret must not run commands in
    its controller manager: an exec plugin there is refused, and the ForeignCluster says so."""
    ghost = "ghost-exec"
    marker = tmp_path / "the-plugin-ran"
    kubeconfig = yaml.safe_load(peered.kubeconfig(PROVIDER).read_text())
    kubeconfig["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/bin/sh",
            "args": ["-c", f"touch {marker}"],
        }
    }
    namespace = f"liqo-tenant-{ghost}"
    peered.kubectl(CONSUMER, "create", "namespace", namespace)
    try:
        apply(peered, CONSUMER, identity_secret(namespace, ghost, kubeconfig))

        def identity_condition() -> dict[str, Any] | None:
            found = peered.kubectl(
                CONSUMER, "get", "foreignclusters.core.liqo.io", ghost, "-o", "json", check=False
            )
            if found.returncode != 0:
                return None
            modules = (json.loads(found.stdout).get("status") or {}).get("modules") or {}
            return next(
                (
                    c
                    for c in (modules.get("authentication") or {}).get("conditions") or []
                    if c["type"] == "AuthIdentityControlPlaneStatus" and c["status"] == "Error"
                ),
                None,
            )

        condition = wait_until(identity_condition, "the ForeignCluster's identity in Error")
        assert "inline credentials only" in condition["message"], condition
        assert not marker.exists()
    finally:
        # The Secret first: while it is there, the controller makes the ForeignCluster again.
        peered.kubectl(
            CONSUMER, "delete", "secret", "-n", namespace, control_plane_secret_name(ghost)
        )
        peered.kubectl(
            CONSUMER, "delete", "foreignclusters.core.liqo.io", ghost, "--ignore-not-found"
        )
        peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_tenants_secret_labelled_as_a_control_plane_identity_takes_nothing_over(
    peered: Clusters,
) -> None:
    """A tenant allowed Secrets in a namespace of theirs writes one labelled as the control-plane
    identity to naples, pointing at an API server of theirs, and one for a cluster that is not
    peered: the link to naples keeps the genuine identity (a NamespaceMap still reaches naples)
    and no ForeignCluster appears for the other."""
    impostor_kubeconfig = yaml.safe_load(peered.kubeconfig(PROVIDER).read_text())
    impostor_kubeconfig["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    peered.kubectl(CONSUMER, "create", "namespace", "team-a")
    try:
        for cluster_id in (PROVIDER, "ghost-impostor"):
            apply(peered, CONSUMER, identity_secret("team-a", cluster_id, impostor_kubeconfig))
        # An earlier test's map may still be going (its twins deleted first): a new one then.
        wait_until(
            lambda: get_json(
                peered, CONSUMER, "namespacemaps.offloading.liqo.io", PROVIDER,
                "-n", CONSUMER_TENANT,
            ) is None,
            "no NamespaceMap left of an earlier test",
            timeout=120,
        )  # fmt: skip
        apply(peered, CONSUMER, namespace_map({"team-a": "team-a-venice"}))
        wait_until(
            lambda: current_mapping(peered).get("team-a", {}).get("phase") == "Accepted",
            "the NamespaceMap replicated to naples and accepted there",
            timeout=60,
        )
        assert get_json(peered, PROVIDER, "namespace", "team-a-venice") is not None
        assert get_json(peered, CONSUMER, "foreignclusters.core.liqo.io", "ghost-impostor") is None
    finally:
        delete_namespace_map(peered, PROVIDER)
        peered.kubectl(CONSUMER, "delete", "namespace", "team-a", "--wait=false")
        peered.kubectl(
            CONSUMER,
            "delete",
            "foreignclusters.core.liqo.io",
            "ghost-impostor",
            "--ignore-not-found",
        )


def test_bad_input_is_explained_and_nothing_foreign_is_touched(peered: Clusters) -> None:
    def virtual_node(name: str, secret: str) -> dict[str, Any]:
        return {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {"name": name, "namespace": CONSUMER_TENANT},
            "spec": {
                "clusterID": PROVIDER,
                "createNode": True,
                "kubeconfigSecretRef": {"name": secret},
                "resourceQuota": {"hard": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            },
        }

    real_node = get_json(peered, CONSUMER, "node", "venice-worker-1")
    peered.kubectl(CONSUMER, "create", "namespace", "liqo-tenant-rome")
    try:
        # A slice for a cluster venice is not peered with.
        apply(peered, CONSUMER, forge_resource_slice("lost", "rome"))
        [message] = wait_until(
            lambda: events_of(peered, "liqo-tenant-rome", "lost", "NotPeered"), "NotPeered"
        )
        assert message.startswith("not peered with cluster rome: no control-plane identity")
        assert "vkctl peer --remote-kubeconfig" in message

        # VirtualNodes whose Secret is missing, or holds no kubeconfig: their nodes stay
        # NotReady, and say why.
        apply(peered, CONSUMER, virtual_node("nosecret", "does-not-exist"))
        apply(
            peered,
            CONSUMER,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "garbage", "namespace": CONSUMER_TENANT},
                "stringData": {"kubeconfig": "this is: [not a kubeconfig"},
            },
        )
        apply(peered, CONSUMER, virtual_node("garbage", "garbage"))
        [missing] = wait_until(
            lambda: events_of(peered, CONSUMER_TENANT, "nosecret", "ProviderUnreachable"),
            "nosecret's Event",
        )
        assert f"Secret {CONSUMER_TENANT}/does-not-exist does not exist" in missing
        [garbage] = wait_until(
            lambda: events_of(peered, CONSUMER_TENANT, "garbage", "ProviderUnreachable"),
            "garbage's Event",
        )
        assert "kubeconfig is not valid YAML" in garbage
        for name in ("nosecret", "garbage"):
            node = wait_until(lambda n=name: get_json(peered, CONSUMER, "node", n), f"node {name}")
            ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
            assert not ready or ready[0]["status"] != "True"

        # A VirtualNode named like a real Node: refused, and the Node left as it was.
        apply(peered, CONSUMER, virtual_node("venice-worker-1", "garbage"))
        [conflict] = wait_until(
            lambda: events_of(peered, CONSUMER_TENANT, "venice-worker-1", "NodeNameConflict"),
            "NodeNameConflict",
        )
        assert "venice-worker-1" in conflict
        after = get_json(peered, CONSUMER, "node", "venice-worker-1")
        assert after["metadata"]["labels"] == real_node["metadata"]["labels"]
        assert after["spec"] == real_node["spec"]
    finally:
        peered.kubectl(
            CONSUMER,
            "delete",
            VIRTUAL_NODES,
            "nosecret",
            "garbage",
            "venice-worker-1",
            "-n",
            CONSUMER_TENANT,
            "--ignore-not-found",
            "--wait=false",
        )
        peered.kubectl(CONSUMER, "delete", "secret", "garbage", "-n", CONSUMER_TENANT, check=False)
        peered.kubectl(CONSUMER, "delete", "namespace", "liqo-tenant-rome", "--wait=false")
    assert get_json(peered, CONSUMER, "node", "venice-worker-1") is not None


def test_peered_with_florence_and_naples_venice_has_a_virtual_node_for_each(
    peered: Clusters,
) -> None:
    """The tutorial's peerings: two providers, two virtual nodes labelled with their regions,
    and pods scheduled on each run in that provider's twin namespace."""
    with_florence = subprocess.run(
        [
            VKCTL,
            "peer",
            f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
            f"--remote-kubeconfig={peered.kubeconfig('florence')}",
        ],
        capture_output=True,
        text=True,
    )
    assert with_florence.returncode == 0, with_florence.stderr
    peered.kubectl(CONSUMER, "create", "namespace", "tour")
    try:
        table = peered.kubectl(
            CONSUMER, "get", "node", "--selector=liqo.io/type=virtual-node", "--show-labels"
        ).stdout
        rows = {line.split()[0]: line for line in table.splitlines()[1:]}
        for node, region in (("florence", "center"), ("naples", "south")):
            assert rows[node].split()[1:3] == ["Ready", "agent"], rows[node]
            assert f"topology.liqo.io/region={region}" in rows[node]
            assert f"liqo.io/remote-cluster-id={node}" in rows[node]
            assert "liqo.io/type=virtual-node" in rows[node]
        for provider in ("florence", "naples"):
            # An earlier test's map may still be going away: a new one, not that one.
            wait_until(
                lambda p=provider: (
                    not (
                        (
                            get_json(
                                peered,
                                CONSUMER,
                                "namespacemaps.offloading.liqo.io",
                                p,
                                "-n",
                                f"liqo-tenant-{p}",
                            )
                            or {}
                        )
                        .get("metadata", {})
                        .get("deletionTimestamp")
                    )
                ),
                f"no NamespaceMap of {provider} being deleted",
            )
            apply(peered, CONSUMER, namespace_map({"tour": "tour-venice"}, provider))
            pod = budget_pod(f"on-{provider}", provider, "100m")
            pod["metadata"]["namespace"] = "tour"
            wait_until(
                lambda p=provider: (
                    (
                        get_json(
                            peered,
                            CONSUMER,
                            "namespacemaps.offloading.liqo.io",
                            p,
                            "-n",
                            f"liqo-tenant-{p}",
                        )
                        or {}
                    )
                    .get("status", {})
                    .get("currentMapping", {})
                    .get("tour")
                ),
                f"tour mapped to {provider}",
                timeout=60,
            )
            apply(peered, CONSUMER, pod)
        for provider in ("florence", "naples"):
            wait_until(
                lambda p=provider: any(
                    item["metadata"]["name"] == f"on-{p}"
                    and item["status"].get("phase") == "Running"
                    for item in (get_json(peered, p, "pods", "-n", "tour-venice") or {}).get(
                        "items", []
                    )
                ),
                f"on-{provider} Running in {provider}",
                timeout=90,
                explain=lambda p=provider: pod_status(peered, "tour", f"on-{p}"),
            )
    finally:
        peered.kubectl(CONSUMER, "delete", "namespace", "tour", "--wait=false")
        for provider in ("florence", "naples"):
            delete_namespace_map(peered, provider)
        unpeered = subprocess.run(
            [
                VKCTL,
                "unpeer",
                f"--kubeconfig={peered.kubeconfig(CONSUMER)}",
                f"--remote-kubeconfig={peered.kubeconfig('florence')}",
            ],
            capture_output=True,
            text=True,
        )
        assert unpeered.returncode == 0, unpeered.stderr


# Last: it ends the module's peering.
def test_vkctl_unpeer_leaves_nothing_behind_on_either_side(peered: Clusters) -> None:
    unpeered = remove_peering(peered)
    assert unpeered.returncode == 0, unpeered.stderr
    assert unpeered.stdout.strip() == "unpeered"
    for cluster, tenant in ((CONSUMER, CONSUMER_TENANT), (PROVIDER, PROVIDER_TENANT)):
        assert get_json(peered, cluster, "namespace", tenant) is None
        assert not get_json(peered, cluster, "foreignclusters.core.liqo.io")["items"]
        assert not get_json(peered, cluster, "quotas.offloading.liqo.io", "-A")["items"]
        assert not get_json(peered, cluster, RSLICE, "-A")["items"]
    assert not get_json(peered, CONSUMER, "node", "--selector=liqo.io/type=virtual-node")["items"]
    assert not get_json(peered, CONSUMER, VIRTUAL_NODES, "-A")["items"]
    assert not [
        n
        for n in get_json(peered, PROVIDER, "namespaces")["items"]
        if (n["metadata"].get("labels") or {}).get("liqo.io/remote-cluster-id") == CONSUMER
    ]
    assert not [
        csr
        for csr in get_json(peered, PROVIDER, "certificatesigningrequests")["items"]
        if csr["spec"].get("signerName") == "kubernetes.io/kube-apiserver-client"
        and csr["metadata"]["name"].startswith(("vk-control-plane", "mypool", "naples"))
    ]
    # No virtual kubelet process is left either.
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "--nodename=naples" not in processes
