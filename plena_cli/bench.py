"""The performance benchmark suite of plena-sim (``plena-sim bench``; docs/performance.md).

A fixed, versioned list of workloads (:data:`WORKLOADS`, :data:`SUITE_VERSION`).  Every workload runs in
a fresh subprocess (``python -m plena_cli.bench --worker NAME``) so that its peak RSS and its first-call
JIT time are its own; the parent repeats each workload ``repeat`` times and reports the median with the
min/max spread.  Measured per workload: instructions, simulated cycles, wall seconds of the simulation
alone (``Machine.run`` only: JIT, case building, assembling and judging excluded), the first call of the
core in the fresh process (JIT cache load, or compile when the cache is cold), instructions/s, simulated
cycles/s, simulated matrix MACs/s and the peak RSS (VmHWM) of the worker.  Suite-level: the compile time
with an empty JIT cache and the end-to-end time of ``plena-sim run flashattn_prefill`` (process start to
exit) with a warm and with an empty cache.

Nothing here asserts on timings; the numbers are printed (rich table) or returned (``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from rich.console import Console
    from rich.table import Table

    from isa.program import Program
    from plena_sim.config import HardwareConfig
    from plena_sim.machine import Machine, RunResult
    from testbenches.harness import Case

    #: the arithmetic-floor kernel: ``(xs, ws, n, B, M) -> B x B accumulator``
    FloorKernel = Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64], int, int, int], npt.NDArray[np.float32]]

#: bump when a workload's definition changes (numbers of different versions are not comparable)
SUITE_VERSION = 1

_PREFILL_1K = {"batch": 1, "q_len": 1024, "kv_len": 1024, "hq": 8, "hkv": 2, "d": 64, "causal": True}
_PREFILL_Q = {"batch": 1, "q_len": 128, "kv_len": 128, "hq": 2, "hkv": 1, "d": 64, "causal": True}
_REF_SMALL = {"batch": 1, "q_len": 64, "kv_len": 128, "hq": 2, "hkv": 1, "d": 16, "causal": True}
_REF_Q = {"batch": 1, "q_len": 17, "kv_len": 64, "hq": 1, "hkv": 1, "d": 16, "causal": True}

#: name -> definition.  kind: testbench (build a testbench case, run it), scalar (generated scalar loop),
#: reference (a testbench case on both backends), floor (the tile products of prefill_1k in one loop).
WORKLOADS: dict[str, dict[str, Any]] = {
    "prefill_1k": dict(
        kind="testbench",
        tb="flashattn_prefill",
        params=_PREFILL_1K,
        quick=_PREFILL_Q,
        timing="serial",
        what="flash-attention prefill b1 q=kv=1024 hq8 hkv2 d64 causal, serial",
    ),
    "prefill_1k_overlap": dict(
        kind="testbench",
        tb="flashattn_prefill",
        params=_PREFILL_1K,
        quick=_PREFILL_Q,
        timing="overlap",
        what="prefill_1k in overlap timing",
    ),
    "decode_32k": dict(
        kind="testbench",
        tb="flashattn_decode",
        params={"batch": 1, "q_len": 1, "kv_len": 32768, "hq": 32, "hkv": 8, "d": 64},
        quick={"batch": 1, "q_len": 1, "kv_len": 1024, "hq": 8, "hkv": 2, "d": 64},
        timing="serial",
        what="flash-attention decode kv=32768 hq32 hkv8 d64",
    ),
    "prefill_paper": dict(
        kind="testbench",
        tb="flashattn_prefill",
        hw="analytic",
        params={"batch": 1, "q_len": 2048, "kv_len": 2048, "hq": 16, "hkv": 4, "d": 128, "causal": True},
        quick={"batch": 1, "q_len": 128, "kv_len": 128, "hq": 1, "hkv": 1, "d": 128},
        timing="serial",
        what="paper machine (analytic preset, MLEN 2048): prefill q=kv=2048 hq16 hkv4 d128 causal",
    ),
    "decode_paper": dict(
        kind="testbench",
        tb="flashattn_decode",
        hw="analytic",
        params={"batch": 1, "q_len": 1, "kv_len": 8192, "hq": 16, "hkv": 4, "d": 128},
        quick={"batch": 1, "q_len": 1, "kv_len": 2048, "hq": 16, "hkv": 4, "d": 128},
        timing="serial",
        what="paper machine (analytic preset): decode kv=8192 hq16 hkv4 d128",
    ),
    "linear_4k": dict(
        kind="testbench",
        tb="linear",
        params={"rows": 64, "K": 4096, "N": 4096},
        quick={"rows": 64, "K": 512, "N": 512},
        timing="serial",
        what="linear 64x4096 @ 4096x4096 (DMA heavy)",
    ),
    "scalar_loop": dict(
        kind="scalar",
        params={"outer": 1200, "inner": 5000},
        quick={"outer": 20, "inner": 5000},
        timing="serial",
        what="nested loops of integer + FP scalar work",
    ),
    "reference_ratio": dict(
        kind="reference",
        tb="flashattn_prefill",
        params=_REF_SMALL,
        quick=_REF_Q,
        timing="serial",
        what="small prefill: reference interpreter time / Numba time",
    ),
    "arith_floor": dict(
        kind="floor",
        tb="flashattn_prefill",
        params=_PREFILL_1K,
        quick=_PREFILL_Q,
        timing="serial",
        what="prefill_1k's BxM @ MxB tile products back to back in one Numba loop",
    ),
}


# ==================================================================================== worker side


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (VmHWM; ru_maxrss as a fallback)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) * (1 if sys.platform == "darwin" else 1024)


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux ``/proc/self/clear_refs`` value 5)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _warm_up() -> float:
    from plena_sim import core

    return core.warm_up()


def _build_case(tb: str, params: dict[str, Any], hw: str | None = None) -> Case:
    import testbenches
    from testbenches.shapes import resolve_params
    from testbenches.variants import get_config

    mod = testbenches.get(tb)
    cfg = get_config("default", hw=hw)
    p = dict(mod.DEFAULTS)
    p.update(params)
    return mod.build(resolve_params(p, cfg), cfg)


def _machine_for(case: Case, backend: str) -> tuple[Machine, Program]:
    from isa.assembler import assemble
    from testbenches.harness import prepare_machine

    prog = assemble(case.program, f"{case.testbench}.asm")
    return prepare_machine(case, backend), prog


#: peak RSS of the simulation phase alone (VmHWM reset just before ``Machine.run``), set by _run_machine
_SIM_PEAK: dict[str, int] = {}


def _run_machine(m: Machine, prog: Program, mode: str) -> tuple[RunResult, float]:
    before = peak_rss_bytes()
    ok = reset_peak_rss()
    t0 = time.perf_counter()
    res = m.run(prog, raise_on_fault=False, timing=mode)
    wall = time.perf_counter() - t0
    if ok:
        _SIM_PEAK["sim"] = max(_SIM_PEAK.get("sim", 0), peak_rss_bytes())
        _SIM_PEAK["before"] = max(_SIM_PEAK.get("before", 0), before)
    return res, wall


def _result_fields(res: RunResult, wall: float) -> dict[str, Any]:
    st = res.stats
    macs = int(st.get("matrix_macs", 0))
    n, cyc = int(res.instructions), int(res.cycles)
    return {
        "instructions": n,
        "cycles": cyc,
        "matrix_macs": macs,
        "sim_s": wall,
        "instr_per_s": n / wall if wall > 0 else None,
        "cycles_per_s": cyc / wall if wall > 0 else None,
        "macs_per_s": macs / wall if wall > 0 else None,
        "fault": None if res.fault is None else str(res.fault).splitlines()[0],
        "by_opcode": {k: int(v) for k, v in st.get("by_opcode", {}).items()},
    }


def scalar_loop_program(outer: int, inner: int) -> str:
    """A control/scalar-heavy program: ``outer x inner`` iterations of 9 integer and FP scalar
    instructions (about ``9 * outer * inner`` instructions retired)."""
    return (
        "\n".join(
            [
                "S_ADDI_INT gp3, gp0, 3",
                "S_ADDI_INT gp4, gp0, 0",
                "S_LD_FP f1, gp0, 1",  # FP constants of the default image (slot 1, 2)
                "S_LD_FP f2, gp0, 2",
                f"C_LOOP_START gp1, {outer}",
                f"C_LOOP_START gp2, {inner}",
                "S_ADD_INT gp4, gp4, gp3",
                "S_MUL_INT gp5, gp4, gp3",
                "S_SUB_INT gp6, gp5, gp4",
                "S_ADDI_INT gp7, gp6, 17",
                "S_ADD_FP f3, f1, f2",
                "S_MUL_FP f4, f3, f2",
                "S_MAX_FP f5, f4, f1",
                "S_SUB_FP f6, f5, f3",
                "C_LOOP_END gp2",
                "S_ST_INT gp4, gp0, 0",
                "C_LOOP_END gp1",
                "S_ST_FP f6, gp0, 100",
            ]
        )
        + "\n"
    )


def _floor_kernel() -> FloorKernel:
    import numpy as np
    from numba import njit

    @njit(cache=True)
    def floor(
        xs: npt.NDArray[np.float64], ws: npt.NDArray[np.float64], n: int, B: int, M: int
    ) -> npt.NDArray[np.float32]:
        """``n`` B x M by M x B products with the core's arithmetic (float64 sequential dot from +0.0,
        f32 round, f32 accumulate), operands cycling through the tile pools ``xs`` / ``ws``."""
        acc = np.zeros((B, B), dtype=np.float32)
        P = xs.shape[0]
        for t in range(n):
            x = xs[t % P]
            w = ws[(t * 7) % P]
            for i in range(B):
                for j in range(B):
                    p = 0.0
                    for k in range(M):
                        p = p + x[i, k] * w[j, k]
                    acc[i, j] = np.float32(acc[i, j] + np.float32(p))
        return acc

    return floor


def worker(name: str, quick: bool) -> dict[str, Any]:
    """Run workload ``name`` in this (fresh) process; the JSON-able measurements."""
    spec = WORKLOADS[name]
    params = dict(spec["quick"] if quick else spec["params"])
    out: dict[str, Any] = {
        "name": name,
        "what": spec["what"],
        "params": params,
        "quick": quick,
        "timing": spec["timing"],
    }
    t_proc = time.perf_counter()
    out["jit_first_call_s"] = _warm_up()
    out.update(_KINDS[spec["kind"]](spec, params))
    out["worker_s"] = time.perf_counter() - t_proc
    # peak RSS of the whole worker (case building + goldens + JIT + simulation) and of the simulation
    # phase alone (Machine state + the core; None where VmHWM cannot be reset)
    out["peak_rss_bytes"] = max(peak_rss_bytes(), _SIM_PEAK.get("before", 0))
    out["sim_peak_rss_bytes"] = _SIM_PEAK.get("sim")
    if spec["kind"] != "floor":
        out.pop("by_opcode", None)
    return out


def _scalar_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    from isa.assembler import assemble
    from plena_sim.machine import Machine
    from testbenches.variants import get_config

    t0 = time.perf_counter()
    prog = assemble(scalar_loop_program(params["outer"], params["inner"]), "scalar_loop.asm")
    m = Machine(get_config("default"))
    m.write_fp_sram(0, [0.0, 1.5, 0.75])
    build_s = time.perf_counter() - t0
    res, wall = _run_machine(m, prog, "serial")
    return dict(_result_fields(res, wall), build_s=build_s)


def _testbench_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A testbench case on the Numba core (``floor``: plus the arithmetic floor of its tile products)."""
    t0 = time.perf_counter()
    case = _build_case(spec["tb"], params, spec.get("hw"))
    m, prog = _machine_for(case, "numba")
    build_s = time.perf_counter() - t0
    res, wall = _run_machine(m, prog, spec["timing"])
    out = dict(_result_fields(res, wall), build_s=build_s)
    if spec["kind"] == "floor":
        out.update(_floor(res, m.cfg))
    return out


def _reference_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A testbench case on both backends: the reference interpreter's time over the Numba core's."""
    case = _build_case(spec["tb"], params)
    m, prog = _machine_for(case, "numba")
    res, wall = _run_machine(m, prog, "serial")
    m2, prog2 = _machine_for(case, "reference")
    res2, wall2 = _run_machine(m2, prog2, "serial")
    same = (
        res2.instructions == res.instructions
        and res2.cycles == res.cycles
        and bool((m.vram.bits == m2.vram.bits).all())
    )
    return dict(_result_fields(res, wall), reference_s=wall2, ratio=wall2 / wall if wall > 0 else None, identical=same)


#: workload kind -> its runner ``(spec, params) -> measurements``
_KINDS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "scalar": _scalar_workload,
    "testbench": _testbench_workload,
    "floor": _testbench_workload,
    "reference": _reference_workload,
}


def _floor(res: RunResult, cfg: HardwareConfig) -> dict[str, Any]:
    import numpy as np

    B, M = cfg.BLEN, cfg.MLEN
    bo = res.stats.get("by_opcode", {})
    n = int(bo.get("M_MM", 0)) + int(bo.get("M_TMM", 0))
    other = {
        k: v for k, v in bo.items() if k.startswith("M_") and not k.endswith("_WO") and k not in ("M_MM", "M_TMM") and v
    }
    rng = np.random.default_rng(0)
    P = 64
    # bf16-valued operands (as the core sees them): round f32 randoms to 8 mantissa bits
    xs = (
        (rng.standard_normal((P, B, M)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000))
        .view(np.float32)
        .astype(np.float64)
    )
    ws = rng.standard_normal((P, B, M)).astype(np.float32).astype(np.float64)
    floor = _floor_kernel()
    floor(xs, ws, 1, B, M)  # compile / cache load outside the timing
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        floor(xs, ws, n, B, M)
        times.append(time.perf_counter() - t0)
    f = statistics.median(times)
    return {
        "tile_products": n,
        "other_matrix_ops": other,
        "floor_s": f,
        "prefill_over_floor": None,
        "floor_products_per_s": n / f if f > 0 else None,
    }


# ==================================================================================== parent side


def machine_description() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import numba
        import numpy

        versions = {"numpy": numpy.__version__, "numba": numba.__version__}
    except ImportError:
        versions = {}
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parent,
                timeout=10,
            ).stdout.strip()
            or None
        )
    load: tuple[float, float, float] | None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "logical_cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions,
        "git_commit": commit,
        "loadavg_at_start": load,
    }


def _spawn(args: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    p = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=timeout, cwd=str(Path(__file__).resolve().parent.parent)
    )
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0


def _run_worker(name: str, quick: bool, env: dict[str, str] | None = None) -> dict[str, Any]:
    args = [sys.executable, "-m", "plena_cli.bench", "--worker", name] + (["--quick"] if quick else [])
    rc, so, se, wall = _spawn(args, env=env)
    lines = [ln for ln in so.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        tail = (se.strip().splitlines() or ["(no output)"])[-1]
        return {"name": name, "error": f"worker exit {rc}: {tail}", "process_s": wall}
    d = json.loads(lines[-1])
    d["process_s"] = wall
    return d


_MEDIAN_KEYS = (
    "sim_s",
    "instr_per_s",
    "cycles_per_s",
    "macs_per_s",
    "jit_first_call_s",
    "peak_rss_bytes",
    "sim_peak_rss_bytes",
    "build_s",
    "worker_s",
    "process_s",
    "reference_s",
    "ratio",
    "floor_s",
    "prefill_over_floor",
)


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return dict(runs[0], runs=len(runs))
    agg = dict(ok[-1])
    agg["runs"] = len(ok)
    spread: dict[str, list[float]] = {}
    for k in _MEDIAN_KEYS:
        vals = [r[k] for r in ok if isinstance(r.get(k), (int, float))]
        if vals:
            agg[k] = statistics.median(vals)
            spread[k] = [min(vals), max(vals)]
    agg["spread"] = spread
    if len(ok) < len(runs):
        agg["failed_runs"] = len(runs) - len(ok)
    return agg


def _e2e(cold: bool) -> dict[str, Any]:
    """``plena-sim run flashattn_prefill``, process start to exit (cold: an empty NUMBA_CACHE_DIR)."""
    env = dict(os.environ)
    tmp = None
    if cold:
        tmp = tempfile.TemporaryDirectory(prefix="plena-bench-cold-")
        env["NUMBA_CACHE_DIR"] = tmp.name
    try:
        rc, _so, se, wall = _spawn([sys.executable, "-m", "plena_cli", "run", "flashattn_prefill"], env=env)
    finally:
        if tmp is not None:
            tmp.cleanup()
    d: dict[str, Any] = {"seconds": wall, "exit": rc}
    if rc != 0:
        d["error"] = (se.strip().splitlines() or ["?"])[-1]
    return d


def _cold_compile() -> dict[str, Any]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="plena-bench-cold-") as tmp:
        env["NUMBA_CACHE_DIR"] = tmp
        rc, so, se, wall = _spawn([sys.executable, "-m", "plena_cli.bench", "--worker", "_compile"], env=env)
    if rc != 0:
        return {"error": (se.strip().splitlines() or ["?"])[-1]}
    return dict(json.loads([ln for ln in so.splitlines() if ln.startswith("{")][-1]), process_s=wall)


def run_suite(
    *,
    quick: bool = False,
    only: list[str] | None = None,
    repeat: int | None = None,
    cold: bool | None = None,
    progress: Callable[[str], object] | None = None,
) -> dict[str, Any]:
    """Run the suite; returns the JSON-able result dict (see the module docstring)."""
    names = only if only else list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            raise KeyError(f"unknown workload {n!r} (known: {', '.join(WORKLOADS)})")
    repeat = repeat if repeat is not None else (1 if quick else 3)
    cold = (not quick) if cold is None else cold
    say = progress or (lambda _s: None)
    result: dict[str, Any] = {
        "suite": "plena-sim-bench",
        "suite_version": SUITE_VERSION,
        "quick": quick,
        "repeat": repeat,
        "machine": machine_description(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "workloads": {},
    }
    for n in names:
        runs = []
        for k in range(repeat):
            say(f"{n} run {k + 1}/{repeat}")
            runs.append(_run_worker(n, quick))
        result["workloads"][n] = _aggregate(runs)
    _relate_floor(result["workloads"])
    if cold:
        result["compile"] = _compile_measurements(repeat, say)
    result["targets"] = targets(result)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return result


def _relate_floor(wl: dict[str, Any]) -> None:
    """arith_floor's ``prefill_over_floor``: prefill_1k's sim wall (or its own run's) over the floor."""
    if "arith_floor" in wl and "floor_s" in wl["arith_floor"]:
        base = wl.get("prefill_1k", wl["arith_floor"])
        if base.get("sim_s") and wl["arith_floor"].get("floor_s"):
            wl["arith_floor"]["prefill_over_floor"] = base["sim_s"] / wl["arith_floor"]["floor_s"]
            wl["arith_floor"]["prefill_sim_s_used"] = base["sim_s"]


def _compile_measurements(repeat: int, say: Callable[[str], object]) -> dict[str, Any]:
    """The empty-cache compile, and ``plena-sim run flashattn_prefill`` end to end (warm x repeat, cold)."""
    say("compile with an empty JIT cache")
    comp: dict[str, Any] = {"cold_compile": _cold_compile()}
    secs: list[float] = []
    for k in range(repeat):
        say(f"plena-sim run flashattn_prefill, warm cache {k + 1}/{repeat}")
        secs.append(_e2e(False)["seconds"])
    comp["e2e_run_warm_s"] = statistics.median(secs)
    comp["e2e_run_warm_spread"] = [min(secs), max(secs)]
    say("plena-sim run flashattn_prefill, empty JIT cache")
    comp["e2e_run_cold"] = _e2e(True)
    return comp


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and met/not met (None: not measured)."""
    wl = result["workloads"]
    comp = result.get("compile", {})
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, limit: float, ok_if: str, unit: str) -> None:
        met = None if value is None else (value >= limit if ok_if == ">=" else value <= limit)
        out.append({"target": name, "value": value, "limit": limit, "op": ok_if, "unit": unit, "met": met})

    full = not result.get("quick")

    def g(w: str, k: str) -> float | None:
        """Measurement ``k`` of workload ``w`` (None with --quick: the targets hold for full sizes)."""
        return wl.get(w, {}).get(k) if full else None

    def rss(w: str) -> float | None:
        v = g(w, "peak_rss_bytes")
        return None if v is None else v / 2**20

    def srss(w: str) -> float | None:
        v = g(w, "sim_peak_rss_bytes")
        return None if not v else v / 2**20

    add("prefill_1k simulated cycles/s", g("prefill_1k", "cycles_per_s"), 20e6, ">=", "cycles/s")
    add("prefill_1k wall / arith_floor", g("arith_floor", "prefill_over_floor"), 2.0, "<=", "x")
    add("scalar_loop instructions/s", g("scalar_loop", "instr_per_s"), 50e6, ">=", "instr/s")
    add("reference_ratio", g("reference_ratio", "ratio"), 100.0, ">=", "x")
    add("plena-sim run flashattn_prefill, warm cache", comp.get("e2e_run_warm_s"), 3.0, "<=", "s")
    add("plena-sim run flashattn_prefill, empty cache", comp.get("e2e_run_cold", {}).get("seconds"), 60.0, "<=", "s")
    add("prefill_1k peak RSS", rss("prefill_1k"), 400.0, "<=", "MiB")
    add("decode_32k peak RSS", rss("decode_32k"), 600.0, "<=", "MiB")
    add("prefill_1k peak RSS, simulation phase", srss("prefill_1k"), 400.0, "<=", "MiB")
    add("decode_32k peak RSS, simulation phase", srss("decode_32k"), 600.0, "<=", "MiB")
    return out


# ==================================================================================== output


def _si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for f, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.3g} {p}{unit}".rstrip()
    return f"{x:.3g} {unit}".rstrip()


def _sec(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s")


def _spr(w: dict[str, Any], k: str, fmt: Callable[[float], str]) -> str:
    s = w.get("spread", {}).get(k)
    if not s or w.get("runs", 1) < 2:
        return ""
    return f" [{fmt(s[0])}..{fmt(s[1])}]"


def render(result: dict[str, Any], console: Console | None = None) -> None:
    """Print a suite result: the headline, the workload table, the compile line and the targets."""
    from rich.console import Console

    con = console or Console()
    if not con.is_terminal and con.width < 200:  # piped / captured: do not wrap the table at 80 columns
        con.width = 200
    mach = result["machine"]
    con.print(
        f"[bold]plena-sim bench[/] suite v{result['suite_version']}"
        f"{' (quick)' if result['quick'] else ''}, median of {result['repeat']} run(s) [min..max]; "
        f"{mach['cpu']}, {mach['logical_cores']} cores, Python {mach['python']}, numba {mach.get('numba')}, "
        f"load {mach['loadavg_at_start']}, commit {mach['git_commit']}"
    )
    con.print(_workload_table(result["workloads"]))
    if result.get("compile"):
        con.print(_compile_line(result["compile"]))
    con.print(_targets_table(result["targets"]))


def _workload_table(workloads: dict[str, Any]) -> Table:
    from rich.table import Table

    t = Table(show_lines=False)
    for col in (
        "workload",
        "instructions",
        "cycles",
        "sim wall",
        "first call (JIT)",
        "instr/s",
        "cycles/s",
        "MACs/s",
        "peak RSS",
        "sim RSS",
        "notes",
    ):
        t.add_column(col, justify="left" if col in ("workload", "notes") else "right")
    for name, w in workloads.items():
        if "error" in w:
            t.add_row(name, *["-"] * 9, w["error"])
            continue
        t.add_row(
            name,
            f"{w['instructions']:,}",
            f"{w['cycles']:,}",
            _sec(w["sim_s"]) + _spr(w, "sim_s", _sec),
            _sec(w["jit_first_call_s"]) + _spr(w, "jit_first_call_s", _sec),
            _si(w["instr_per_s"]),
            _si(w["cycles_per_s"]),
            _si(w["macs_per_s"]),
            f"{w['peak_rss_bytes'] / 2**20:.0f} MiB" + _spr(w, "peak_rss_bytes", lambda v: f"{v / 2**20:.0f}"),
            "-" if not w.get("sim_peak_rss_bytes") else f"{w['sim_peak_rss_bytes'] / 2**20:.0f} MiB",
            _note(w),
        )
    return t


def _note(w: dict[str, Any]) -> str:
    note = ""
    if "ratio" in w:
        note = (
            f"reference {_sec(w['reference_s'])}: ratio {w['ratio']:.0f}x"
            f"{_spr(w, 'ratio', lambda v: f'{v:.0f}')}{'' if w.get('identical') else ' (STATE DIFFERS)'}"
        )
    if "floor_s" in w:
        pf = w.get("prefill_over_floor")
        note = f"{w['tile_products']} tile products: floor {_sec(w['floor_s'])}" + (
            f", prefill/floor {pf:.2f}x" if pf else ""
        )
    if w.get("fault"):
        note += f" FAULT {w['fault']}"
    return note


def _compile_line(comp: dict[str, Any]) -> str:
    cc = comp.get("cold_compile", {})
    cold = comp.get("e2e_run_cold", {})
    return (
        f"compile with an empty JIT cache: {_sec(cc.get('jit_first_call_s'))} "
        f"(process {_sec(cc.get('process_s'))}); `plena-sim run flashattn_prefill` end to end: warm cache "
        f"{_sec(comp['e2e_run_warm_s'])} [{_sec(comp['e2e_run_warm_spread'][0])}.."
        f"{_sec(comp['e2e_run_warm_spread'][1])}], empty cache {_sec(cold.get('seconds'))}"
        + (f" (exit {cold.get('exit')})" if cold.get("exit") else "")
    )


def _targets_table(targets_: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    tt = Table(title="targets")
    for col in ("target", "measured", "limit", "met"):
        tt.add_column(col)
    for tg in targets_:
        v, unit = tg["value"], tg["unit"]
        vs = "-" if v is None else (_si(v, unit) if unit in ("cycles/s", "instr/s") else f"{v:.2f} {unit}")
        met = {True: "[green]met[/]", False: "[red]NOT met[/]", None: "not measured"}[tg["met"]]
        tt.add_row(tg["target"], vs, f"{tg['op']} {_si(tg['limit']) if tg['limit'] >= 1e3 else tg['limit']}", met)
    return tt


# ==================================================================================== entry points


def add_options(ap: argparse.ArgumentParser) -> None:
    """The suite's options, shared by ``plena-sim bench`` and ``python -m plena_cli.bench``."""
    ap.add_argument("--quick", action="store_true", help="reduced sizes (CI smoke)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this workload (repeatable, or a,b)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per workload (default 3, 1 with --quick)")
    ap.add_argument(
        "--cold",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also measure the empty-JIT-cache compile and end-to-end run (default: on unless --quick)",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m plena_cli.bench", description=__doc__.splitlines()[0])
    add_options(ap)
    ap.add_argument("--op-costs", action="store_true", help="print the per-opcode cost microbenchmark")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.op_costs:
        for k, v in op_costs().items():
            print(f"{k:18s} {v * 1e9:10.1f} ns/instr")
        return 0
    if a.worker:
        if a.worker == "_compile":
            t0 = time.perf_counter()
            d: dict[str, Any] = {"jit_first_call_s": _warm_up(), "peak_rss_bytes": peak_rss_bytes()}
            d["worker_s"] = time.perf_counter() - t0
        else:
            d = worker(a.worker, a.quick)
        print(json.dumps(d))
        return 0
    only = [x for o in (a.only or []) for x in o.split(",") if x] or None
    return run_and_print(quick=a.quick, as_json=a.json, only=only, repeat=a.repeat, cold=a.cold)


def run_and_print(
    *,
    quick: bool = False,
    as_json: bool = False,
    only: list[str] | None = None,
    repeat: int | None = None,
    cold: bool | None = None,
) -> int:
    if as_json:
        res = run_suite(quick=quick, only=only, repeat=repeat, cold=cold)
        print(json.dumps(res, indent=1))
    else:
        from rich.console import Console

        con = Console(stderr=True)
        res = run_suite(
            quick=quick, only=only, repeat=repeat, cold=cold, progress=lambda s: con.print(f"[dim]bench: {s}[/]")
        )
        render(res)
    bad = [n for n, w in res["workloads"].items() if "error" in w]
    return 1 if bad else 0


# ==================================================================================== per-opcode costs

#: opcode microbenchmarks (``python -m plena_cli.bench --op-costs``): one instruction repeated in a
#: hardware loop; the cost per instruction is (time - empty-loop time) / count.  gp1 = VRAM row 0,
#: gp2 = VRAM row 1 (element 64), gp3 = VRAM row 2, gp4 = MRAM tile 0; f1 = 1.5.
OP_COST_LINES = {
    "S_ADDI_INT": "S_ADDI_INT gp6, gp6, 1",
    "S_ADD_FP": "S_ADD_FP f2, f1, f1",
    "S_EXP_FP": "S_EXP_FP f2, f1",
    "V_ADD_VV": "V_ADD_VV gp3, gp1, gp2",
    "V_ADD_VV masked": "V_ADD_VV gp3, gp1, gp2, 1",
    "V_MUL_VF": "V_MUL_VF gp3, gp1, f1",
    "V_EXP_V": "V_EXP_V gp3, gp1",
    "V_RED_MAX": "V_RED_MAX f2, gp1",
    "V_RED_SUM": "V_RED_SUM f2, gp1",
    "M_MM": "M_MM 0, gp4, gp1",
    "M_TMM": "M_TMM 0, gp1, gp4",
    "M_MM_WO": "M_MM_WO gp3, gp0, 0",
    "M_BTMM": "M_BTMM 0, gp4, gp1",
    "M_BMM_WO": "M_BMM_WO gp7, 0",
}


#: loop counts of the expensive opcodes (the rest use ``n``)
OP_COST_N = {"M_MM": 2000, "M_TMM": 2000, "M_BTMM": 20, "M_BMM_WO": 200, "M_MM_WO": 2000}


def op_costs(n: int = 20000, unroll: int = 10, repeat: int = 3) -> dict[str, float]:
    """Seconds per retired instruction of each :data:`OP_COST_LINES` entry (median of ``repeat``)."""
    import numpy as np

    from isa.assembler import assemble
    from plena_sim.machine import Machine
    from testbenches.variants import get_config

    _warm_up()
    cfg = get_config("default")

    def prog(line: str | None, n: int) -> Program:
        pre = [
            "S_ADDI_INT gp1, gp0, 0",
            "S_ADDI_INT gp2, gp0, 64",
            "S_ADDI_INT gp3, gp0, 128",
            "S_ADDI_INT gp4, gp0, 0",
            "S_ADDI_INT gp7, gp0, 1024",
            "S_LD_FP f1, gp0, 1",
            f"C_LOOP_START gp5, {n}",
        ]
        return assemble("\n".join(pre + ([line] * unroll if line else []) + ["C_LOOP_END gp5"]) + "\n", "op.asm")

    def timed(p: Program) -> tuple[float, int]:
        ts = []
        for _ in range(repeat):
            m = Machine(cfg)
            m.write_fp_sram(0, [0.0, 1.5])
            m.vram.write(0, np.linspace(-2, 2, 4 * cfg.VLEN).reshape(4, cfg.VLEN))
            t0 = time.perf_counter()
            r = m.run(p, raise_on_fault=True)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts), r.instructions

    out: dict[str, float] = {}
    for name, line in OP_COST_LINES.items():
        k = OP_COST_N.get(name, n)
        base, _ = timed(prog(None, k))
        t, _n = timed(prog(line, k))
        out[name] = max(t - base, 0.0) / (k * unroll)
    return out


if __name__ == "__main__":
    sys.exit(main())
