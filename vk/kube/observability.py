"""What every vk daemon exposes to operate it: structured JSON logs on stderr, and an HTTP
server with Prometheus metrics (`/metrics`), liveness (`/healthz`) and readiness (`/readyz`),
bounded as every port open to the pod network is (`vk.kube.serving`)."""

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
from vk.kube.serving import ConnectionLimits, serve, split_address
from vk.kube.supervision import task_problems

# The metrics port's callers are a Prometheus scrape (a server or two, each keeping a
# connection) and the kubelet's probes (a connection per probe), each a GET of a few headers
# answered in milliseconds; but the port is open to the pod network (a tenant's pod reaches a
# virtual kubelet's pod IP, an offloaded pod the webhook's metrics Service), and at aiohttp's
# defaults 270 connections holding heads took a virtual kubelet's 512Mi. 32 connections are
# several times what the callers use; a flood closes its own, the one waiting longest first,
# never a request being answered (measured on uvloop: 300 peers each sending a head of 31
# headers of 8 KiB held 16 MiB, 146 MiB uncapped). A little longer idle than Prometheus keeps a
# connection (5 min: prometheus/common's IdleConnTimeout), so that the scraper closes its idle
# one first, never sending a scrape on one being closed here.
METRICS_LIMITS = ConnectionLimits(
    connections=32,
    request_seconds=10.0,
    idle_seconds=310.0,
    max_headers=32,
)


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

    def __init__(
        self,
        address: str,
        ready: Callable[[], bool],
        *,
        limits: ConnectionLimits = METRICS_LIMITS,
    ) -> None:
        self.host, self.port = split_address(address)
        self.ready = ready
        self.limits = limits
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
        address = f"{self.host}:{self.port}"
        await serve(app, address, None, "metrics", self.started, limits=self.limits)
