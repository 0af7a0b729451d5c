"""The VirtualNode controller's pure parts: the kubelet it launches, its conditions, the drain."""

from __future__ import annotations

import ast
import datetime
import json
import subprocess
import sys
from pathlib import Path

from vk.controllers.virtualnodes import (
    VirtualKubeletSpec,
    forge_conditions,
    forge_virtual_kubelet_spec,
    is_drainable,
)

NOW = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.UTC)


def virtual_node(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-naples"},
        "spec": {
            "clusterID": "naples",
            "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-mypool"},
            **spec,
        },
    }


def test_the_kubelet_gets_liqos_arguments_and_environment() -> None:
    assert forge_virtual_kubelet_spec(virtual_node(), "venice") == VirtualKubeletSpec(
        namespace="liqo-tenant-naples",
        name="mypool",
        args=(
            "--foreign-cluster-id=naples",
            "--nodename=mypool",
            "--tenant-namespace=liqo-tenant-naples",
            "--home-cluster-id=venice",
            "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-mypool",
            "--create-node=true",
        ),
        env=(
            ("POD_NAMESPACE", "liqo-tenant-naples"),
            ("VIRTUALNODE_NAME", "mypool"),
            ("PYTHONOPTIMIZE", "2"),
        ),
        cluster_id="naples",
        template={},
    )


def test_the_template_adds_arguments_and_create_node_false_is_passed_on() -> None:
    template = {
        "spec": {"template": {"spec": {"containers": [{"args": ["--node-ping-interval=1s"]}]}}}
    }
    spec = forge_virtual_kubelet_spec(virtual_node(createNode=False, template=template), "venice")
    assert spec.args[-2:] == ("--create-node=false", "--node-ping-interval=1s")


def test_conditions_keep_their_transition_time_while_the_status_stays() -> None:
    first = forge_conditions(None, {"VirtualKubelet": ("Creating", "starting")}, NOW)
    later = NOW + datetime.timedelta(minutes=5)
    same = forge_conditions(first, {"VirtualKubelet": ("Creating", "still starting")}, later)
    assert same[0]["lastTransitionTime"] == "2026-11-22T08:00:00Z"
    running = forge_conditions(same, {"VirtualKubelet": ("Running", "runs")}, later)
    assert running[0] == {
        "type": "VirtualKubelet",
        "status": "Running",
        "lastTransitionTime": "2026-11-22T08:05:00Z",
        "message": "runs",
    }


def test_draining_moves_workloads_but_not_daemonset_mirror_or_finished_pods() -> None:
    def pod(
        phase: str = "Running", owner: str = "ReplicaSet", annotations: dict[str, str] | None = None
    ) -> dict[str, object]:
        return {
            "metadata": {"ownerReferences": [{"kind": owner}], "annotations": annotations or {}},
            "status": {"phase": phase},
        }

    assert is_drainable(pod())
    assert not is_drainable(pod(owner="DaemonSet"))
    assert not is_drainable(pod(annotations={"kubernetes.io/config.mirror": "x"}))
    assert not is_drainable(pod(phase="Succeeded"))


def test_the_virtual_kubelets_asserts_only_narrow_types() -> None:
    """It runs with PYTHONOPTIMIZE=2, which drops asserts: none of the modules it imports may
    check anything with one (an input check there would vanish in production)."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, vk.cli.components, vk.virtualkubelet.process; "
            "print(json.dumps([m.__file__ for n, m in sys.modules.items() "
            "if n.startswith('vk.') and getattr(m, '__file__', None)]))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    files = json.loads(probe.stdout)
    assert any(f.endswith("reflection/workload/pods.py") for f in files)
    checks = []
    for path in files:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if not isinstance(node, ast.Assert):
                continue
            test = node.test
            narrows = (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.IsNot)
                and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None
            )
            if not narrows:
                checks.append(f"{path}:{node.lineno}: assert {ast.unparse(test)}")
    assert checks == []
