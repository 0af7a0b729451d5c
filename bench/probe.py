"""A vk component run under a probe, for the benchmarks' `--heap` and `--profile` modes: where
its bytes and its CPU per pod go. Run as `python -m bench.probe heap|profile <vk arguments>`.
When the file `<VK_PROBE_REPORT>.wanted` appears (a thread of its own looks twice a second: the
event loop keeps signals for itself), it writes to the file VK_PROBE_REPORT names (JSON) what
it saw. heap (tracemalloc): what each informer's cache holds (objects, and the bytes they alone
keep alive: a string shared with another cache is counted once, in the first) and the largest
live allocation sites; profile (cProfile, from the last report on): the functions taking the
most CPU. Nothing of this is in the product: the component runs unchanged beneath it."""

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
from pathlib import Path
from typing import Any

REPORT_ENV = "VK_PROBE_REPORT"
HEAP, PROFILE = "heap", "profile"
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


def serve_reports(mode: str, profiler: cProfile.Profile | None) -> None:
    path = Path(os.environ[REPORT_ENV])
    wanted = path.with_suffix(".wanted")
    while True:
        if wanted.exists():
            wanted.unlink()
            report = (
                heap_report()
                if profiler is None
                else profile_report(profiler, path.with_suffix(".pstats"))
            )
            path.with_suffix(".partial").write_text(json.dumps({"mode": mode, **report}))
            path.with_suffix(".partial").rename(path)  # whole or not there
        time.sleep(0.5)


def main() -> None:
    mode, arguments = sys.argv[1], sys.argv[2:]
    profiler = None
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
    else:
        sys.exit(f"bench.probe: {HEAP} or {PROFILE}, not {mode!r}")
    threading.Thread(target=serve_reports, args=(mode, profiler), daemon=True).start()
    from vk.cli.components import vk

    vk(args=arguments, prog_name="vk")


if __name__ == "__main__":
    main()
