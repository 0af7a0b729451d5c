"""The playground's PKI: made once, completed (never replaced) when a newer vk needs more."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.plain_manifests import plain_manifests
from vk.playground.pki import CLIENT_IDENTITIES, write_cluster_pki


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_leaf_is_signed_by_its_ca(tmp_path: Path) -> None:
    pki = write_cluster_pki(tmp_path, "venice")
    ca, front_proxy_ca = load(pki.ca_crt), load(pki.path("front-proxy-ca.crt"))
    for stem in [*CLIENT_IDENTITIES, "apiserver", "kwok-serving", "metrics-server-serving"]:
        load(pki.path(f"{stem}.crt")).verify_directly_issued_by(ca)
    load(pki.path("front-proxy-client.crt")).verify_directly_issued_by(front_proxy_ca)
    serving = load(pki.path("metrics-server-serving.crt"))
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # The aggregator checks the certificate against the APIService's Service name.
    assert "metrics-server.kube-system.svc" in names.get_values_for_type(x509.DNSName)
    # The API server trusts the cluster CA for clients, from a file a rotation may add to.
    assert pki.client_ca.read_bytes() == pki.ca_crt.read_bytes()


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    write_cluster_pki(tmp_path, "venice")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    write_cluster_pki(tmp_path, "venice")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_an_older_playground_gets_what_it_lacks_from_its_own_ca(tmp_path: Path) -> None:
    pki = write_cluster_pki(tmp_path, "venice")
    ca_before, admin_before = pki.ca_crt.read_bytes(), pki.path("admin.crt").read_bytes()
    for name in ("metrics-server-serving.crt", "metrics-server-serving.key", "front-proxy-ca.key",
                 "client-ca.crt"):  # fmt: skip
        pki.path(name).unlink()  # as an earlier vk left it
    write_cluster_pki(tmp_path, "venice")
    assert pki.ca_crt.read_bytes() == ca_before
    assert pki.path("admin.crt").read_bytes() == admin_before
    assert pki.client_ca.read_bytes() == ca_before
    load(pki.path("metrics-server-serving.crt")).verify_directly_issued_by(load(pki.ca_crt))
    # The front proxy's CA is made again (its key was not kept), and its client with it.
    load(pki.path("front-proxy-client.crt")).verify_directly_issued_by(
        load(pki.path("front-proxy-ca.crt"))
    )


def test_vks_processes_are_the_service_accounts_the_charts_rbac_binds(tmp_path: Path) -> None:
    """The playground runs vk's controller manager and webhook as processes: their client
    certificates name the ServiceAccounts the chart binds, so its RBAC alone authorizes them."""
    bound = {
        f"system:serviceaccount:{s['namespace']}:{s['name']}"
        for d in plain_manifests()
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    pki = write_cluster_pki(tmp_path, "venice")
    for stem in ("vk-controller-manager", "vk-webhook"):
        subject = load(pki.path(f"{stem}.crt")).subject
        [common_name] = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        assert common_name.value in bound, stem
        assert common_name.value.endswith(f":{stem}")
