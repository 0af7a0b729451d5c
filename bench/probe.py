"""A vk component run under a probe, for the benchmarks' `--heap`, `--profile` and `--stages`
modes: where its bytes and its CPU per pod go. Run as
`python -m bench.probe heap|profile|stages <vk arguments>`.
When the file `<VK_PROBE_REPORT>.wanted` appears (a thread of its own looks twice a second: the
event loop keeps signals for itself), it writes to the file VK_PROBE_REPORT names (JSON) what
it saw. heap (tracemalloc): what each informer's cache holds (objects, and the bytes they alone
keep alive: a string shared with another cache is counted once, in the first) and the largest
live allocation sites; profile (cProfile, from the last report on): the functions taking the
most CPU; stages (from the start): the CPU of each stage an object or a key goes through
(`instrument_stages`). Nothing of this is in the product: the component runs unchanged
beneath it."""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

REPORT_ENV = "VK_PROBE_REPORT"
HEAP, PROFILE, STAGES = "heap", "profile", "stages"
# The frames in vk that name an allocation site: its line and the callers that say what for.
SITE_FRAMES = 4


def deep_size(obj: Any, seen: set[int]) -> int:
    """The bytes of `obj` and everything it holds (dicts, lists, strings, numbers), skipping
    what `seen` holds already."""
    size, pending = 0, [obj]
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend(item)
    return size


def caches() -> list[dict[str, Any]]:
    """Each running informer's cache: what it watches, how many objects, their bytes."""
    from vk.kube.informer import Informer

    seen: set[int] = set()
    found = []
    for informer in [o for o in gc.get_objects() if isinstance(o, Informer)]:
        objects = informer.store.objects()
        found.append(
            {
                "informer": informer.describe(),
                "objects": len(objects),
                "bytes": deep_size(objects, seen) - sys.getsizeof(objects),
            }
        )
    return sorted(found, key=lambda cache: -cache["bytes"])


def allocation_sites(snapshot: tracemalloc.Snapshot, limit: int = 60) -> list[dict[str, Any]]:
    """The lines whose allocations are alive, largest first, each named by its innermost
    frames in vk (a json decode is vk's caller that decoded, not the json module), with the
    callers that say what for (the client's decode of an answer is every request's)."""
    by_site: dict[str, list[int]] = {}
    for trace in snapshot.traces:
        frames = list(reversed(trace.traceback))  # most recent first
        ours = [f for f in frames if "/vk/" in f.filename][:SITE_FRAMES] or frames[:1]
        where = " < ".join(f"{f.filename.rsplit('/vk/', 1)[-1]}:{f.lineno}" for f in ours)
        totals = by_site.setdefault(where, [0, 0])
        totals[0] += trace.size
        totals[1] += 1
    return [
        {"site": site, "bytes": size, "blocks": count}
        for site, (size, count) in sorted(by_site.items(), key=lambda item: -item[1][0])[:limit]
    ]


def heap_report() -> dict[str, Any]:
    snapshot = tracemalloc.take_snapshot()
    traced, peak = tracemalloc.get_traced_memory()
    return {
        "traced": traced,
        "traced_peak": peak,
        "caches": caches(),
        "sites": allocation_sites(snapshot),
    }


def profile_report(profiler: cProfile.Profile, path: Path) -> dict[str, Any]:
    """Every function's calls, own CPU seconds and cumulative seconds since the start (a
    benchmark subtracts two reports for one phase); the whole profile, with each function's
    callers, is also written to `path` for `python -m pstats`. Read from this thread while the
    event loop's goes on: the profiler's tables are read whole under the interpreter's lock,
    and the disable that pstats does first stops only this thread's profiling, which never
    began."""
    stats = pstats.Stats(profiler)
    stats.dump_stats(path)
    functions = {}
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename.rsplit("/site-packages/", 1)[-1].rsplit("/vk/", 1)[-1]
        functions[f"{where}:{line}({name})"] = [calls, own, cumulative]
    return {"functions": functions}


class StageTimes:
    """CPU seconds by stage, and how many times each ran: the thread's own CPU time
    (`time.thread_time`), so neither what other processes ran meanwhile nor the waits count.
    Measuring costs 1.5 to 2.5 us a stage, and 2 us a step of a reconcile (timed alone): about
    0.15 ms per pod, a few per cent of its CPU."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}

    def add(self, stage: str, seconds: float) -> None:
        totals = self.totals.get(stage)
        if totals is None:
            totals = self.totals[stage] = [0, 0.0]
        totals[0] += 1
        totals[1] += seconds

    def timed(self, function: Callable[..., Any], stage_of: Callable[..., str]) -> Any:
        """`function` (a plain one), its CPU added to the stage `stage_of` its arguments name."""

        def timed_function(*arguments: Any, **keywords: Any) -> Any:
            started = time.thread_time()
            try:
                return function(*arguments, **keywords)
            finally:
                self.add(stage_of(*arguments, **keywords), time.thread_time() - started)

        return timed_function


class OnCpuOf:
    """Awaits `coroutine`, adding to `stage` the CPU of its steps alone (what runs between two
    of its awaits), once, when it ends: the awaits themselves, other tasks meanwhile, are not
    its."""

    __slots__ = ("_coroutine", "_seconds", "_stage", "_stages")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], stages: StageTimes, stage: str):
        self._coroutine = coroutine
        self._stages = stages
        self._stage = stage
        self._seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # type: ignore[return-value]  # an iterator with send and throw

    def __iter__(self) -> OnCpuOf:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        return self._step(self._coroutine.send, value)

    def throw(self, *error: Any) -> Any:
        # As the interpreter hands it on: the exception, or its type, value and traceback.
        return self._step(lambda thrown: self._coroutine.throw(*thrown), error)

    def close(self) -> None:
        self._coroutine.close()

    def _step(self, step: Callable[[Any], Any], argument: Any) -> Any:
        started = time.thread_time()
        try:
            awaited = step(argument)
        except BaseException:  # its end: StopIteration with its result, or its error
            self._stages.add(self._stage, self._seconds + time.thread_time() - started)
            raise
        self._seconds += time.thread_time() - started
        return awaited


def instrument_stages(stages: StageTimes) -> None:
    """Times, from now on, the stages of a vk process: each reconcile of each controller (by
    its reconciler's name), and for each watch event its decode, what its informer keeps of it
    (`keep` and compaction) and its handlers; the bytes its connections read (decrypted
    already), apart. A process's CPU beyond these is its event loop, work queues, timers and
    metrics."""
    from vk.kube import client, controller, informer, transport

    def resource(cache: informer.Informer) -> str:
        return f"{cache.client.name} {client.resource_of(cache.path)}"

    cache_class = informer.Informer
    cache_class._kept = stages.timed(  # type: ignore[method-assign]
        cache_class._kept, lambda cache, *_: f"event kept: {resource(cache)}"
    )
    cache_class._take = stages.timed(  # type: ignore[method-assign]
        cache_class._take, lambda cache, *_, **__: f"event handled: {resource(cache)}"
    )
    client.parse_watch_event = stages.timed(  # type: ignore[assignment]
        client.parse_watch_event, lambda *_: "event decoded"
    )
    connection_class = transport._Connection
    connection_class.data_received = stages.timed(  # type: ignore[method-assign]
        connection_class.data_received, lambda *_: "bytes read"
    )
    made = controller.Controller.__init__

    def make(self: controller.Controller, reconciler: Any, *arguments: Any, **keys: Any) -> None:
        reconcile = reconciler.reconcile
        stage = f"reconcile: {reconciler.name}"
        # On the instance: the controller calls it there, and the class stays as it is.
        reconciler.reconcile = lambda key: OnCpuOf(reconcile(key), stages, stage)
        made(self, reconciler, *arguments, **keys)

    controller.Controller.__init__ = make  # type: ignore[method-assign]
    time_garbage_collection(stages)


def time_garbage_collection(stages: StageTimes) -> None:
    """Times the cyclic garbage collector's runs, by generation: they run inside the other
    stages (an allocation past the threshold starts one), so their CPU is counted there too."""
    started = [0.0]
    names = [f"(within the above) garbage collection, generation {g}" for g in range(3)]
    # Made now: a collection in the reporting thread must not add a stage while the report
    # copies them.
    for name in names:
        stages.add(name, 0.0)
        stages.totals[name][0] = 0

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            stages.add(names[info["generation"]], time.thread_time() - started[0])

    gc.callbacks.append(on_collection)


def stages_report(stages: StageTimes) -> dict[str, Any]:
    """The stages' totals since the start, and the process's CPU (a benchmark subtracts two
    reports for one phase)."""
    return {
        # Copied in one step (C, under the interpreter's lock): the event loop's thread adds
        # stages meanwhile.
        "stages": {stage: list(totals) for stage, totals in list(stages.totals.items())},
        "process_cpu": time.process_time(),
    }


def serve_reports(
    mode: str, profiler: cProfile.Profile | None, stages: StageTimes | None = None
) -> None:
    path = Path(os.environ[REPORT_ENV])
    wanted = path.with_suffix(".wanted")
    while True:
        if wanted.exists():
            wanted.unlink()
            if stages is not None:
                report = stages_report(stages)
            elif profiler is not None:
                report = profile_report(profiler, path.with_suffix(".pstats"))
            else:
                report = heap_report()
            path.with_suffix(".partial").write_text(json.dumps({"mode": mode, **report}))
            path.with_suffix(".partial").rename(path)  # whole or not there
        time.sleep(0.5)


def main() -> None:
    mode, arguments = sys.argv[1], sys.argv[2:]
    profiler = None
    stages = None
    if mode == HEAP:
        # vk's command line loaded first: traced, its imports took 30 s (longer than a
        # benchmark waits for a virtual kubelet to answer), and they are no pod's bytes.
        from vk.cli import components  # noqa: F401

        tracemalloc.start(12)
    elif mode == PROFILE:
        # CPU time, not wall time: on a machine shared with the clusters, a write that wakes
        # the API server would otherwise be charged the time the API server ran.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()  # the event loop's thread: this one
    elif mode == STAGES:
        stages = StageTimes()
        instrument_stages(stages)
    else:
        sys.exit(f"bench.probe: {HEAP}, {PROFILE} or {STAGES}, not {mode!r}")
    threading.Thread(target=serve_reports, args=(mode, profiler, stages), daemon=True).start()
    from vk.cli.components import vk

    vk(args=arguments, prog_name="vk")


if __name__ == "__main__":
    main()
