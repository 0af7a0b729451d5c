"""The workload images' pure parts: what a node imports, their recipes, and the archives' names
that make a changed recipe build again and an unchanged one be reused."""

from __future__ import annotations

from pathlib import Path

from vk.playground.images import (
    BASE_IMAGE,
    PAUSE_IMAGE,
    SHELL_IMAGE,
    WEB_IMAGE,
    NodeImages,
    shell_containerfile,
    web_containerfile,
    workload_archive,
)


def test_a_node_imports_the_pause_vk_shell_and_web_images_under_their_names() -> None:
    images = NodeImages(
        vk_image="localhost/vk:dev-0123",
        vk_archive=Path("/c/vk.tar"),
        pause_image=PAUSE_IMAGE,
        pause_archive=Path("/c/pause.tar"),
        shell_archive=Path("/c/shell.tar"),
        web_archive=Path("/c/web.tar"),
    )
    assert images.archives() == [
        ("localhost/vk-pause:1", Path("/c/pause.tar")),
        ("localhost/vk:dev-0123", Path("/c/vk.tar")),
        ("playground.local/shell:bookworm", Path("/c/shell.tar")),
        ("playground.local/web:bookworm", Path("/c/web.tar")),
    ]


def test_the_workload_images_never_pose_as_docker_hub_images() -> None:
    for image in (SHELL_IMAGE, WEB_IMAGE):
        assert image.startswith("playground.local/")


def test_the_workload_images_are_built_on_vk_base_with_no_registry() -> None:
    for containerfile in (shell_containerfile(), web_containerfile()):
        assert containerfile.splitlines()[0] == f"FROM {BASE_IMAGE}"
        assert containerfile.count("FROM ") == 1


def test_package_installs_start_no_daemon_and_leave_no_apt_caches() -> None:
    for containerfile in (shell_containerfile(), web_containerfile()):
        install = containerfile.index("apt-get install")
        assert containerfile.index("""'#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d""") < install
        cleanup = containerfile.index("rm -rf /usr/sbin/policy-rc.d")
        assert cleanup > install
        assert "/var/lib/apt/lists/*" in containerfile[cleanup:]
        assert "/var/cache/apt/*.bin" in containerfile[cleanup:]


def test_the_shell_image_starts_bash_and_has_ps() -> None:
    containerfile = shell_containerfile()
    assert "--no-install-recommends procps" in containerfile
    assert containerfile.rstrip().endswith('CMD ["bash"]')


def test_the_web_image_runs_nginx_in_the_foreground_logging_to_the_container() -> None:
    containerfile = web_containerfile()
    assert "--no-install-recommends nginx " in containerfile
    assert "ln -sf /dev/stdout /var/log/nginx/access.log" in containerfile
    assert "ln -sf /dev/stderr /var/log/nginx/error.log" in containerfile
    assert "EXPOSE 80" in containerfile.splitlines()
    assert containerfile.rstrip().endswith("""CMD ["nginx", "-g", "daemon off;"]""")


def test_a_workload_archive_is_named_after_its_image_and_keyed_by_its_recipe() -> None:
    containerfile = web_containerfile()
    name = workload_archive(WEB_IMAGE, containerfile)
    assert name.startswith("playground-web-")
    assert name.endswith(".tar")
    assert workload_archive(WEB_IMAGE, containerfile) == name
    assert workload_archive(WEB_IMAGE, containerfile + "LABEL x=y\n") != name
    assert workload_archive(SHELL_IMAGE, shell_containerfile()).startswith("playground-shell-")


def test_a_changed_base_changes_the_recipes_and_so_their_archives() -> None:
    other = "localhost/vk-base:trixie"
    assert workload_archive(SHELL_IMAGE, shell_containerfile(other)) != workload_archive(
        SHELL_IMAGE, shell_containerfile()
    )
    assert workload_archive(WEB_IMAGE, web_containerfile(other)) != workload_archive(
        WEB_IMAGE, web_containerfile()
    )
