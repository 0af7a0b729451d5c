"""The playground is a tool on top of vk (issue 22): the daemons load none of it, even the
modules their commands import late, and vkctl still offers it, as a plugin."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from vk.cli.vkctl import vkctl

# The daemons' entry point, then every module of the packages its commands import when run.
IMPORT_THE_DAEMONS = """
import importlib, pkgutil, sys
import vk.cli.components
for package in ("vk.controllers", "vk.virtualkubelet", "vk.webhooks", "vk.node", "vk.reflection",
                "vk.kubelet"):
    path = importlib.import_module(package).__path__
    for module in pkgutil.walk_packages(path, prefix=package + "."):
        importlib.import_module(module.name)
print("\\n".join(sorted(sys.modules)))
"""


def test_the_daemons_load_no_playground_module() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", IMPORT_THE_DAEMONS], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "vk.controllers.virtualkubelet_local" in loaded  # the launchers were loaded
    assert [name for name in loaded if name.startswith("vk.playground")] == []


def test_vkctl_lists_and_runs_the_playground_plugin() -> None:
    listed = CliRunner().invoke(vkctl, ["--help"])
    assert listed.exit_code == 0, listed.output
    assert "  playground  Real local clusters" in listed.output
    playground = CliRunner().invoke(vkctl, ["playground", "--help"])
    assert playground.exit_code == 0, playground.output
    assert "Usage: vkctl playground" in playground.output
    for command in ("up", "down", "status", "kubeconfig", "env"):
        assert f"  {command} " in playground.output
