"""The daemons' logs: every line on stderr one JSON object, vk's own and the libraries' alike."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from vk.kube.observability import configure_logging


@pytest.fixture
def daemon_logging() -> Iterator[None]:
    """configure_logging as a daemon calls it, undone after the test (it sets the process's
    logging: the next tests' would write to this test's captured stderr)."""
    structlog_config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**structlog_config)
        structlog.contextvars.clear_contextvars()
        root.handlers[:] = handlers
        root.setLevel(level)


def json_lines(text: str) -> list[dict[str, object]]:
    """Each line of `text` as JSON: fails on any line that is not."""
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.usefixtures("daemon_logging")
def test_a_library_warning_is_a_json_line_with_the_daemons_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", node="liqo-far")
    logging.getLogger("aiohttp.server").warning("cannot handle %s", "a request")
    structlog.get_logger("vk.test").info("ours")
    [library, ours] = json_lines(capsys.readouterr().err)
    assert library["logger"] == "aiohttp.server"
    assert library["level"] == "warning"
    assert library["msg"] == "cannot handle a request"
    assert library["node"] == "liqo-far"
    assert "ts" in library
    assert ours["logger"] == "vk.test"
    assert set(library) == set(ours)


@pytest.mark.usefixtures("daemon_logging")
def test_a_tasks_exception_nobody_retrieved_is_one_json_line_with_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", component="webhook")

    async def fails() -> None:
        raise RuntimeError("lost in the background")

    async def start_and_forget() -> None:
        task = asyncio.get_running_loop().create_task(fails())
        await asyncio.sleep(0)
        del task
        gc.collect()  # asyncio says so when the task is collected

    asyncio.run(start_and_forget())
    [line] = json_lines(capsys.readouterr().err)
    assert line["logger"] == "asyncio"
    assert line["level"] == "error"
    assert str(line["msg"]).startswith("Task exception was never retrieved")
    assert "RuntimeError: lost in the background" in str(line["exception"])


@pytest.mark.usefixtures("daemon_logging")
def test_library_info_lines_are_left_out_even_at_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # aiohttp's access log: a line per Prometheus scrape of /metrics.
    configure_logging("debug")
    logging.getLogger("aiohttp.access").info("GET /metrics 200")
    logging.getLogger("asyncio").debug("poll took 1 ms")
    structlog.get_logger("vk.test").debug("ours, at debug")
    [line] = json_lines(capsys.readouterr().err)
    assert line["msg"] == "ours, at debug"


@pytest.mark.usefixtures("daemon_logging")
def test_configuring_twice_writes_each_line_once(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    configure_logging("info")
    logging.getLogger("aiohttp.server").error("once")
    assert len(json_lines(capsys.readouterr().err)) == 1
