"""Running a sweep on Dask distributed and storing every point as it finishes.

The engine: a ``LocalCluster`` on this machine by default (one worker process per core, one thread each, each
worker's memory limit its share of the host's memory), or an existing cluster (``scheduler`` =
``tcp://HOST:PORT``). Every worker warms the simulator's JIT cache once, when it starts (:class:`WarmJit`, a
worker plugin: it loads the on-disk Numba cache, compiling it on first use; workers joining later warm
themselves too), before it runs a point. Each point is one task running :func:`.point.run_point` (the judged
run of ``plena-sim run --json``, :func:`studies.testbench_run.run_json`); a task announces its start (a Dask
worker event), so the database marks it ``running`` with its worker and counts its attempts. A worker that
dies mid-point makes Dask re-run that task on another worker (``distributed.scheduler.allowed-failures`` times,
then the point is ``crashed``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

from .point import STARTED_TOPIC, derived_columns, run_point
from .spec import Point, SweepSpec
from .store import FINISHED, SUCCEEDED, Store

__all__ = ["Summary", "Tally", "run_sweep", "code_version", "point_row", "WarmJit"]


@dataclass
class Summary:
    points: int = 0
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    filtered: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    workers: int = 0
    scheduler: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def code_version() -> str:
    """The package version and, in a git checkout, the commit (``+dirty`` if the tree has changes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("plena-sim")
    except PackageNotFoundError:
        v = "0"
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return v
    if sha.returncode:
        return v
    return f"{v}+{sha.stdout.strip()}" + ("-dirty" if dirty.stdout.strip() else "")


def point_row(p: Point, sweep: str, version: str, status: str = "pending", message: str = "") -> dict[str, Any]:
    """A point's row before it runs: what it is and the machine it runs on."""
    from plena_sim.config.presets import load_preset

    cfg = load_preset(p.preset, p.set_hw).values() if status != "filtered" else {}
    row: dict[str, Any] = {
        "id": p.id,
        "ord": p.order,
        "sweep": sweep,
        "status": status,
        "message": message,
        "attempts": 0,
        "workload": p.workload,
        "testbench": p.testbench,
        "case_id": p.case,
        "params": dict(p.params),
        "preset": p.preset,
        "set_hw": dict(p.set_hw),
        "config": cfg or None,
        "timing": p.timing,
        "seed": p.seed,
        "code_version": version,
    }
    if cfg:
        row.update({k: cfg[k] for k in ("MLEN", "VLEN", "BLEN", "HLEN", "BROADCAST_AMOUNT")})
        row.update(derived_columns(cfg))
    return row


class WarmJit(WorkerPlugin):
    """Dask worker plugin: load (or build) the simulator's JIT cache when the worker starts."""

    name = "plena-sim-warm-jit"

    def setup(self, worker: Any) -> None:
        from plena_sim import core

        core.jit_seconds()


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _client(workers: int, scheduler: str | None, processes: bool) -> tuple[Any, Any]:
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="30s"), None
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=processes,
        memory_limit=_host_memory() // max(workers, 1) if processes else 0,
        dashboard_address=None,
        silence_logs=40,
    )
    return Client(cluster), cluster


class Tally:
    """Counts of this run for the progress display: done, failed, running (started, not finished), the rate."""

    def __init__(self, total: int, progress: Callable[[Mapping[str, Any]], None] | None) -> None:
        self.total, self.progress = total, progress
        self.done = self.failed = 0
        self.running: set[str] = set()
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()

    def started(self, point_id: str) -> None:
        with self._lock:
            self.running.add(point_id)
        self._report({})

    def finished(self, point_id: str, workload: str, status: str) -> None:
        with self._lock:
            self.running.discard(point_id)
            self.done += 1
            self.failed += status not in SUCCEEDED
        self._report({"id": point_id, "workload": workload, "status": status})

    def _report(self, last: Mapping[str, Any]) -> None:
        if self.progress is None:
            return
        with self._lock:
            minutes = (time.perf_counter() - self.t0) / 60.0
            snap = {
                "total": self.total,
                "done": self.done,
                "failed": self.failed,
                "running": len(self.running),
                "points_per_min": self.done / minutes if minutes > 0 else 0.0,
                **last,
            }
        self.progress(snap)


def _listen(client: Any, store: Store, tally: Tally) -> None:
    """Mark points ``running`` as workers announce them (the handler runs on the client's event-loop thread)."""

    def handler(event: tuple[float, Mapping[str, Any]]) -> None:
        _when, msg = event
        store.started(str(msg["id"]), str(msg.get("where", msg.get("worker"))))
        tally.started(str(msg["id"]))

    client.subscribe_topic(STARTED_TOPIC, handler)


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    processes: bool = True,
    progress: Callable[[Mapping[str, Any]], None] | None = None,
) -> Summary:
    """Expand ``spec``, store its points in ``out`` (resuming what is there) and run the unfinished ones."""
    t0 = time.perf_counter()
    points, dropped = spec.expand()
    version = code_version()
    store = Store(out)
    try:
        store.add(point_row(f.point, spec.name, version, "filtered", f.reason) for f in dropped)
        store.add(point_row(p, spec.name, version) for p in points)
        have = store.statuses()
        todo = [p for p in points if have.get(p.id) not in FINISHED]
        s = Summary(points=len(points), skipped=len(points) - len(todo), filtered=len(dropped))
        if todo:
            _run(todo, store, s, workers or os.cpu_count() or 1, scheduler, processes, progress)
        final = store.statuses()
        for p in points:
            s.by_status[final[p.id]] = s.by_status.get(final[p.id], 0) + 1
        s.failed = sum(n for k, n in s.by_status.items() if k not in SUCCEEDED)
    finally:
        store.close()
    s.wall_s = time.perf_counter() - t0
    return s


def _run(
    todo: list[Point],
    store: Store,
    s: Summary,
    workers: int,
    scheduler: str | None,
    processes: bool,
    progress: Callable[[Mapping[str, Any]], None] | None,
) -> None:
    from distributed import as_completed

    client, cluster = _client(workers, scheduler, processes)
    try:
        client.register_plugin(WarmJit())
        s.workers = len(client.scheduler_info()["workers"])
        s.scheduler = client.scheduler.address
        tally = Tally(len(todo), progress)
        _listen(client, store, tally)
        futures = {client.submit(run_point, p.to_dict(), key=f"plena-point-{p.id}", pure=False): p for p in todo}
        for fut in as_completed(futures):
            p = futures[fut]
            values = _result(fut)
            values["finished_at"] = time.time()
            store.finish(p.id, values)
            s.ran += 1
            tally.finished(p.id, p.workload, str(values["status"]))
        client.unsubscribe_topic(STARTED_TOPIC)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _result(fut: Any) -> dict[str, Any]:
    """The task's values, or the ``crashed`` verdict when the task itself failed (its worker died too often)."""
    try:
        return dict(fut.result())
    except Exception as exc:  # noqa: BLE001 - KilledWorker and friends: the point crashed
        return {"status": "crashed", "message": f"{type(exc).__name__}: {exc}"}
