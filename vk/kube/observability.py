"""What every vk daemon exposes to operate it: structured JSON logs on stderr, and an HTTP
server with Prometheus metrics (`/metrics`), liveness (`/healthz`) and readiness (`/readyz`)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from structlog.typing import EventDict

from vk.kube.informer import informer_problems
from vk.kube.supervision import task_problems


class NamedPrintLogger(structlog.PrintLogger):
    """A PrintLogger that knows the name it was asked for (`structlog.get_logger("vk.x")`)."""

    def __init__(self, name: str) -> None:
        super().__init__(sys.stderr)
        self.name = name


def _named_logger(*args: Any) -> NamedPrintLogger:
    return NamedPrintLogger(str(args[0]) if args else "vk")


def _add_logger_name(logger: Any, _: str, event: EventDict) -> EventDict:
    event.setdefault("logger", getattr(logger, "name", "vk"))
    return event


def configure_logging(level: str = "info", **context: str) -> None:
    """JSON lines on stderr: `level`, `ts`, `logger`, `msg`, plus `context` (e.g. the node) and
    whatever each call binds (namespace, pod, ...). Modules take their logger as
    `structlog.get_logger("vk.<module>")`; it is resolved on first use, so after this.

    What the libraries log through the standard library's logging comes out as the same JSON
    lines, from warnings up: asyncio's word on a task whose exception nobody retrieved,
    aiohttp's on a request its server could not handle. Left to the standard library, these
    were bare text, tracebacks over many lines, among the JSON. Their info lines (aiohttp's
    access log: a line per Prometheus scrape) are left out."""
    structlog.configure(
        processors=[
            *_LEADING_PROCESSORS,
            _add_logger_name,
            *_TRAILING_PROCESSORS,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=_named_logger,
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(**context)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*_LEADING_PROCESSORS, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *_TRAILING_PROCESSORS,
            ],
        )
    )
    # `force`: a second call (a test's) replaces the handler, never adds one more.
    logging.basicConfig(
        handlers=[handler],
        level=max(logging.WARNING, logging.getLevelNamesMapping()[level.upper()]),
        force=True,
    )


# Every line's processors, vk's own and the libraries' alike, around how each names its logger.
_LEADING_PROCESSORS = (
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
)
_TRAILING_PROCESSORS = (
    structlog.processors.EventRenamer("msg"),
    structlog.processors.format_exc_info,
    structlog.processors.JSONRenderer(sort_keys=False),
)


class MetricsServer:
    """`/metrics`, `/healthz` (the process runs) and `/readyz` (`ready()` says it can work, and
    none of its informers has been failing for long: it names those that have)."""

    def __init__(self, address: str, ready: Callable[[], bool]) -> None:
        host, _, port = address.rpartition(":")
        self.host = host or "0.0.0.0"
        self.port = int(port)
        self.ready = ready
        self.started = asyncio.Event()

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        """Ready when `ready()` says so, no informer has been failing for long and no task
        failed lately; otherwise a 503 naming what is down."""
        if not self.ready():
            return web.Response(status=503, text="not ready")
        if problems := [*informer_problems(), *task_problems()]:
            return web.Response(status=503, text="not ready: " + "; ".join(problems))
        return web.Response(text="ok")

    async def run(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
