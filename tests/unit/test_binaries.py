"""The build recipe of the control-plane binaries (TESTBED.md), as pure functions."""

from __future__ import annotations

from vk.playground.binaries import staging_replaces, version_ldflags

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/spf13/cobra v1.9.1
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/example/fork => github.com/example/fork v1.2.3
)

replace k8s.io/kms => ./staging/src/k8s.io/kms
"""


def test_every_staging_replace_points_at_the_published_module() -> None:
    assert staging_replaces(KUBERNETES_GO_MOD, "v1.36.4") == [
        "k8s.io/api=k8s.io/api@v0.36.4",
        "k8s.io/client-go=k8s.io/client-go@v0.36.4",
        "k8s.io/kms=k8s.io/kms@v0.36.4",
    ]


def test_ldflags_stamp_the_version_in_both_version_packages() -> None:
    flags = version_ldflags("v1.36.4")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.36.4" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=36" in flags
        assert f"-X {package}.gitTreeState=clean" in flags
    assert flags.startswith("-s -w ")
