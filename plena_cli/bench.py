"""The performance benchmark suite of plena-sim (``plena-sim bench``; docs/performance.md).

A fixed, versioned list of workloads (:data:`WORKLOADS`, :data:`SUITE_VERSION`). Every workload runs in a
fresh subprocess (``python -m plena_cli.bench --worker NAME``) so that its peak RSS and its first-call JIT
time are its own; the parent repeats each workload ``repeat`` times and reports the median with the min/max
spread. A testbench workload runs the same path as ``plena-sim run`` (:func:`testbenches.harness.run_case`)
and reports its verdict, the in-process end to end (``e2e_s``: case building to verdict) with its ``split``
(``generate_s``, ``assemble_s``, ``inputs_s``, ``simulate_s``, ``judge_s``), static and retired
instructions, simulated cycles, matrix MACs per second of simulation (the headline for matrix work),
instructions/s, cycles/s and the worker's peak RSS (VmHWM, the whole process). ``floor`` measures the
bit-exact limit of the matrix arithmetic (prefill_1k's tile products with the core's arithmetic, vectorised
across outputs) and the host's one-thread float64 FMA peak (numpy matmul); every MAC/s is also printed as a
fraction of that peak. ``startup`` is the process wall of ``plena-sim run elementwise_add`` (warm cache).
Suite level: the empty-cache compile and ``plena-sim run flashattn_prefill`` end to end, warm and cold.

Nothing here asserts on timings; the numbers are printed (:mod:`.bench_report`) or returned (``--json``).
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

from isa.safetext import json_text

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from plena_sim.machine import Machine, RunResult

    #: the floor kernel: ``(xs, wts, n, B, M) -> B x B accumulator``
    FloorKernel = Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64], int, int, int], npt.NDArray[np.float32]]

#: bump when a workload's definition changes (numbers of different versions are not comparable)
SUITE_VERSION = 2

_PREFILL_1K = {"batch": 1, "q_len": 1024, "kv_len": 1024, "hq": 8, "hkv": 2, "d": 64, "causal": True}
_PREFILL_Q = {"batch": 1, "q_len": 128, "kv_len": 128, "hq": 2, "hkv": 1, "d": 64, "causal": True}
_REF_SMALL = {"batch": 1, "q_len": 64, "kv_len": 128, "hq": 2, "hkv": 1, "d": 16, "causal": True}
_REF_Q = {"batch": 1, "q_len": 17, "kv_len": 64, "hq": 1, "hkv": 1, "d": 16, "causal": True}


def _tb(tb: str, params: dict[str, Any], quick: dict[str, Any], what: str, **kw: Any) -> dict[str, Any]:
    return dict(kind="testbench", tb=tb, params=params, quick=quick, timing=kw.pop("timing", "serial"), what=what, **kw)


#: name -> definition. kind: testbench (a testbench case through run_case), startup (process wall of a tiny
#: ``plena-sim run``), scalar (a generated scalar loop), reference (a testbench case on both backends),
#: floor (the matrix arithmetic's bit-exact limit and the host's FMA peak).
WORKLOADS: dict[str, dict[str, Any]] = {
    "prefill_1k": _tb(
        "flashattn_prefill", _PREFILL_1K, _PREFILL_Q, "flash-attention prefill b1 q=kv=1024 hq8 hkv2 d64 causal"
    ),
    "prefill_1k_overlap": _tb("flashattn_prefill", _PREFILL_1K, _PREFILL_Q, "prefill_1k, overlap", timing="overlap"),
    "decode_32k": _tb(
        "flashattn_decode",
        {"batch": 1, "q_len": 1, "kv_len": 32768, "hq": 32, "hkv": 8, "d": 64},
        {"batch": 1, "q_len": 1, "kv_len": 1024, "hq": 8, "hkv": 2, "d": 64},
        "flash-attention decode kv=32768 hq32 hkv8 d64",
    ),
    "linear_4k": _tb(
        "linear", {"rows": 64, "K": 4096, "N": 4096}, {"rows": 64, "K": 512, "N": 512}, "linear 64x4096 @ 4096x4096"
    ),
    "linear_1k": _tb(
        "linear", {"rows": 128, "K": 1024, "N": 1024}, {"rows": 64, "K": 256, "N": 256}, "linear 128x1024 @ 1024x1024"
    ),
    "linear_b64": _tb(
        "linear",
        {"rows": 512, "K": 2048, "N": 2048},
        {"rows": 128, "K": 256, "N": 256},
        "linear 512x2048 @ 2048x2048 on v80-128x64 (MLEN 128, BLEN 64)",
        hw="v80-128x64",
    ),
    "prefill_paper": _tb(
        "flashattn_prefill",
        {"batch": 1, "q_len": 2048, "kv_len": 2048, "hq": 16, "hkv": 4, "d": 128, "causal": True},
        {"batch": 1, "q_len": 128, "kv_len": 128, "hq": 1, "hkv": 1, "d": 128},
        "paper machine (analytic preset, MLEN 2048): prefill q=kv=2048 hq16 hkv4 d128 causal",
        hw="analytic",
    ),
    "decode_paper": _tb(
        "flashattn_decode",
        {"batch": 1, "q_len": 1, "kv_len": 8192, "hq": 16, "hkv": 4, "d": 128},
        {"batch": 1, "q_len": 1, "kv_len": 2048, "hq": 16, "hkv": 4, "d": 128},
        "paper machine (analytic preset): decode kv=8192 hq16 hkv4 d128",
        hw="analytic",
    ),
    # issue 30: paper-scale layers, functional and timing-only (the ratio of the first two is the headline)
    "llama8b_layer_512": _tb(
        "decoder_layer",
        {"batch": 1, "seq": 512},
        {"batch": 1, "seq": 128},
        "llama-3.1-8b prefill layer seq 512 on v80-128x64, rtl (functional: inputs, simulation, judging)",
        hw="v80-128x64",
        timing="rtl",
        model="llama-3.1-8b",
    ),
    "llama8b_layer_512_timing_only": _tb(
        "decoder_layer",
        {"batch": 1, "seq": 512},
        {"batch": 1, "seq": 128},
        "llama8b_layer_512, timing-only (layout-only build, no datapath)",
        hw="v80-128x64",
        timing="rtl",
        model="llama-3.1-8b",
        timing_only=True,
    ),
    "llama8b_layer_32k": _tb(
        "decoder_layer",
        {"batch": 1, "seq": 32768},
        {"batch": 1, "seq": 2048},
        "llama-3.1-8b prefill layer seq 32768 on v80-128x64, rtl, timing-only",
        hw="v80-128x64",
        timing="rtl",
        model="llama-3.1-8b",
        timing_only=True,
    ),
    "qwen3_32b_layer_32k": _tb(
        "decoder_layer",
        {"batch": 1, "seq": 32768},
        {"batch": 1, "seq": 2048},
        "qwen3-32b prefill layer seq 32768 on v80-128x64, rtl, timing-only (upstream's DSE workload)",
        hw="v80-128x64",
        timing="rtl",
        model="qwen3-32b",
        timing_only=True,
    ),
    "decode_128k": _tb(
        "flashattn_decode",
        {"batch": 1, "q_len": 1, "kv_len": 131072, "hq": 32, "hkv": 8, "d": 64},
        {"batch": 1, "q_len": 1, "kv_len": 8192, "hq": 32, "hkv": 8, "d": 64},
        "flash-attention decode kv=131072 hq32 hkv8 d64, timing-only",
        timing_only=True,
    ),
    "startup": dict(
        kind="startup", params={}, quick={}, timing="serial", what="process wall of `plena-sim run elementwise_add`"
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
    "floor": dict(
        kind="floor",
        tb="flashattn_prefill",
        params=_PREFILL_1K,
        quick=_PREFILL_Q,
        timing="serial",
        what="prefill_1k's tile products, vectorised bit-exact; the host's one-thread f64 FMA peak",
    ),
}

#: environment of the floor worker: one BLAS thread, so the FMA peak is one core's
_ONE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


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


def _warm_up() -> float:
    from plena_sim import core

    return core.warm_up()


def _sim_fields(instructions: int, cycles: int, macs: int, sim_s: float) -> dict[str, Any]:
    def per_s(x: int) -> float | None:
        return x / sim_s if sim_s > 0 else None

    return {
        "instructions": instructions,
        "cycles": cycles,
        "matrix_macs": macs,
        "sim_s": sim_s,
        "instr_per_s": per_s(instructions),
        "cycles_per_s": per_s(cycles),
        "macs_per_s": per_s(macs),
    }


def _run_machine(m: Machine, prog: Any, mode: str) -> tuple[RunResult, float]:
    t0 = time.perf_counter()
    res = m.run(prog, raise_on_fault=False, timing=mode)
    return res, time.perf_counter() - t0


def _testbench_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """One testbench case through :func:`testbenches.harness.run_case` (the path of ``plena-sim run``)."""
    from testbenches.harness import run_case

    if spec.get("model"):  # a model preset's layer dimensions
        from programs.model.presets import load

        params = {**load(spec["model"]).layer_params(), **params}
    functional = not spec.get("timing_only", False)
    rep = run_case(spec["tb"], None, params, hw=spec.get("hw"), timing=spec["timing"], functional=functional)
    split = dict(rep.phases)
    out = _sim_fields(
        int(rep.instructions), int(rep.cycles), int(rep.stats.get("matrix_macs", 0)), split.get("simulate_s", 0.0)
    )
    gen = split.get("generate_s", 0.0) + split.get("assemble_s", 0.0)
    out.update(
        verdict=rep.verdict,
        timing_only=not functional,
        summary=rep.summary,
        static_instructions=int(rep.static_instructions),
        e2e_s=rep.e2e_s,
        split=split,
        gen_share=gen / rep.e2e_s if rep.e2e_s > 0 else None,
        fault=None if rep.fault is None else str(rep.fault.get("rule", rep.fault)),
    )
    return out


def _startup_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The process wall of ``plena-sim run elementwise_add`` (warm JIT cache: this worker warmed it)."""
    rc, _so, se, wall = _spawn([sys.executable, "-m", "plena_cli", "run", "elementwise_add"])
    out: dict[str, Any] = {"process_wall_s": wall, "exit": rc}
    if rc != 0:
        out["fault"] = (se.strip().splitlines() or ["?"])[-1]
    return out


def _scalar_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    from isa.assembler import assemble
    from plena_sim.machine import Machine
    from testbenches.variants import get_config

    prog = assemble(scalar_loop_program(params["outer"], params["inner"]), "scalar_loop.asm")
    m = Machine(get_config("default"))
    m.write_fp_sram(0, [0.0, 1.5, 0.75])
    res, wall = _run_machine(m, prog, "serial")
    out = _sim_fields(int(res.instructions), int(res.cycles), 0, wall)
    out["fault"] = None if res.fault is None else str(res.fault).splitlines()[0]
    return out


def _reference_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A testbench case on both backends: the reference interpreter's time over the Numba core's."""
    from testbenches.harness import prepare_machine

    case = _build_case(spec["tb"], params)
    prog = case.assembled()
    m = prepare_machine(case, "numba")
    res, wall = _run_machine(m, prog, "serial")
    m2 = prepare_machine(case, "reference")
    res2, wall2 = _run_machine(m2, prog, "serial")
    same = (
        res2.instructions == res.instructions
        and res2.cycles == res.cycles
        and bool((m.vram.bits == m2.vram.bits).all())
    )
    out = _sim_fields(int(res.instructions), int(res.cycles), int(res.stats.get("matrix_macs", 0)), wall)
    out.update(reference_s=wall2, ratio=wall2 / wall if wall > 0 else None, identical=same, fault=None)
    return out


def _build_case(tb: str, params: dict[str, Any], hw: str | None = None) -> Any:
    import testbenches
    from testbenches.shapes import resolve_params
    from testbenches.variants import get_config

    mod = testbenches.get(tb)
    cfg = get_config("default", hw=hw)
    p = dict(mod.DEFAULTS)
    p.update(params)
    return mod.build(resolve_params(p, cfg), cfg)


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
        xs: npt.NDArray[np.float64], wts: npt.NDArray[np.float64], n: int, B: int, M: int
    ) -> npt.NDArray[np.float32]:
        """``n`` B x M by M x B tile products with the core's arithmetic (each output a float64 sum in
        ascending k from +0.0, rounded to f32, accumulated in f32), vectorised across the B outputs of a
        row: k outer, outputs inner (``wts`` holds each weight tile as [k, j]); the bit-exact limit."""
        acc = np.zeros((B, B), dtype=np.float32)
        dot = np.zeros(B)
        P = xs.shape[0]
        for t in range(n):
            x = xs[t % P]
            w = wts[(t * 7) % P]
            for i in range(B):
                dot[:] = 0.0
                for k in range(M):
                    xv = x[i, k]
                    for j in range(B):
                        dot[j] = dot[j] + xv * w[k, j]
                for j in range(B):
                    acc[i, j] = np.float32(acc[i, j] + np.float32(dot[j]))
        return acc

    return floor


def _median_time(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fma_peak(n: int = 1024) -> float:
    """The host's float64 multiply-adds per second in numpy matmul (the worker runs with one BLAS thread)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n))
    b = np.random.default_rng(1).standard_normal((n, n))
    a @ b  # warm the BLAS
    return n**3 / _median_time(lambda: a @ b, 5)


def _floor_workload(spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The bit-exact floor of prefill_1k's tile products (M_MM/M_TMM count of its program) and the FMA peak."""
    import numpy as np

    from testbenches.harness import prepare_machine

    case = _build_case(spec["tb"], params)
    m = prepare_machine(case, "numba")
    res, _wall = _run_machine(m, case.assembled(), "serial")
    B, M = m.cfg.BLEN, m.cfg.MLEN
    bo = res.stats.get("by_opcode", {})
    n = int(bo.get("M_MM", 0)) + int(bo.get("M_TMM", 0))
    rng = np.random.default_rng(0)
    P = 64
    # bf16-valued activations (as the core sees them): f32 randoms with the low 16 bits cleared
    xs = (rng.standard_normal((P, B, M)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    wts = rng.standard_normal((P, M, B)).astype(np.float32).astype(np.float64)
    floor = _floor_kernel()
    x64 = xs.astype(np.float64)
    floor(x64, wts, 1, B, M)  # compile / cache load outside the timing
    f = _median_time(lambda: floor(x64, wts, n, B, M))
    macs = n * B * B * M
    peak = fma_peak()
    return {
        "tile_products": n,
        "floor_s": f,
        "floor_macs_per_s": macs / f if f > 0 else None,
        "fma_peak_per_s": peak,
        "floor_fraction_of_peak": (macs / f) / peak if f > 0 and peak > 0 else None,
        "fault": None,
    }


#: workload kind -> its runner ``(spec, params) -> measurements``
_KINDS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "testbench": _testbench_workload,
    "startup": _startup_workload,
    "scalar": _scalar_workload,
    "reference": _reference_workload,
    "floor": _floor_workload,
}


def worker(name: str, quick: bool) -> dict[str, Any]:
    """Run workload ``name`` in this (fresh) process; the JSON-able measurements."""
    spec = WORKLOADS[name]
    params = dict(spec["quick"] if quick else spec["params"])
    out: dict[str, Any] = {"name": name, "what": spec["what"], "params": params, "quick": quick}
    out["timing"] = spec["timing"]
    t_proc = time.perf_counter()
    out["jit_first_call_s"] = _warm_up()
    out.update(_KINDS[spec["kind"]](spec, params))
    out["worker_s"] = time.perf_counter() - t_proc
    out["peak_rss_bytes"] = peak_rss_bytes()
    return out


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


# ==================================================================================== parent side


def _run_worker(name: str, quick: bool) -> dict[str, Any]:
    args = [sys.executable, "-m", "plena_cli.bench", "--worker", name] + (["--quick"] if quick else [])
    env = dict(os.environ, **_ONE_THREAD) if WORKLOADS[name]["kind"] == "floor" else None
    rc, so, se, wall = _spawn(args, env=env)
    lines = [ln for ln in so.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        tail = (se.strip().splitlines() or ["(no output)"])[-1]
        return {"name": name, "error": f"worker exit {rc}: {tail}", "process_s": wall}
    d: dict[str, Any] = json.loads(lines[-1])
    d["process_s"] = wall
    return d


#: measurements reported as the median of the runs (with their min..max spread)
_MEDIAN_KEYS = (
    "sim_s",
    "instr_per_s",
    "cycles_per_s",
    "macs_per_s",
    "e2e_s",
    "gen_share",
    "jit_first_call_s",
    "peak_rss_bytes",
    "worker_s",
    "process_s",
    "process_wall_s",
    "reference_s",
    "ratio",
    "floor_s",
    "floor_macs_per_s",
    "fma_peak_per_s",
    "floor_fraction_of_peak",
)


def _median_of(values: list[Any]) -> tuple[float, list[float]] | None:
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return (statistics.median(vals), [min(vals), max(vals)]) if vals else None


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return dict(runs[0], runs=len(runs))
    agg = dict(ok[-1])
    agg["runs"] = len(ok)
    spread: dict[str, list[float]] = {}
    for k in _MEDIAN_KEYS:
        m = _median_of([r.get(k) for r in ok])
        if m is not None:
            agg[k], spread[k] = m
    if "split" in agg:
        agg["split"] = dict(agg["split"])
        for k in agg["split"]:
            m = _median_of([r.get("split", {}).get(k) for r in ok])
            if m is not None:
                agg["split"][k] = m[0]
    agg["spread"] = spread
    if len(ok) < len(runs):
        agg["failed_runs"] = len(runs) - len(ok)
    return agg


def _relate_to_peak(wl: dict[str, Any]) -> None:
    """Every MAC/s as a fraction of the floor worker's one-thread f64 FMA peak (when the floor ran)."""
    peak = wl.get("floor", {}).get("fma_peak_per_s")
    if not peak:
        return
    for w in wl.values():
        if w.get("macs_per_s"):
            w["macs_fraction_of_peak"] = w["macs_per_s"] / peak


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


def run_suite(
    *,
    quick: bool = False,
    only: list[str] | None = None,
    repeat: int | None = None,
    cold: bool | None = None,
    progress: Callable[[str], object] | None = None,
) -> dict[str, Any]:
    """Run the suite; returns the JSON-able result dict (see the module docstring)."""
    from .bench_report import targets

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
    _relate_to_peak(result["workloads"])
    if cold:
        result["compile"] = _compile_measurements(repeat, say)
    result["targets"] = targets(result)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return result


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
        from .bench_opcosts import op_costs

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
        print(json_text(d))
        return 0
    only = [x for o in (a.only or []) for x in o.split(",") if x] or None
    res = run_suite(quick=a.quick, only=only, repeat=a.repeat, cold=a.cold)
    if a.json:
        print(json_text(res, indent=1))
    else:
        from .bench_report import render

        render(res)
    return 1 if any("error" in w for w in res["workloads"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
