"""Smoke test of the benchmark suite: ``plena-sim bench --quick --json`` on a tiny subset, checking the
structure of the JSON (never the timings: numbers are for the benchmark, not for asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plena_cli import bench

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD_KEYS = {
    "name",
    "instructions",
    "cycles",
    "sim_s",
    "jit_first_call_s",
    "instr_per_s",
    "cycles_per_s",
    "macs_per_s",
    "peak_rss_bytes",
    "sim_peak_rss_bytes",
    "runs",
    "spread",
}


@pytest.fixture(scope="module")
def quick_json():
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "plena_cli",
            "bench",
            "--quick",
            "--json",
            "--only",
            "scalar_loop",
            "--only",
            "reference_ratio,arith_floor",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_structure(quick_json):
    d = quick_json
    assert d["suite"] == "plena-sim-bench" and d["suite_version"] == bench.SUITE_VERSION and d["quick"] is True
    assert list(d["workloads"]) == ["scalar_loop", "reference_ratio", "arith_floor"]
    for k in ("cpu", "logical_cores", "python", "numba", "numpy"):
        assert k in d["machine"]
    for name, w in d["workloads"].items():
        assert "error" not in w, w
        assert set(w) >= WORKLOAD_KEYS, (name, WORKLOAD_KEYS - set(w))
        assert w["instructions"] > 0 and w["cycles"] >= w["instructions"] and w["peak_rss_bytes"] > 0
        assert w["fault"] is None
    assert d["workloads"]["reference_ratio"]["identical"] is True
    assert d["workloads"]["reference_ratio"]["ratio"] > 0
    fl = d["workloads"]["arith_floor"]
    assert fl["tile_products"] > 0 and fl["floor_s"] > 0 and fl["prefill_over_floor"] > 0
    names = {t["target"] for t in d["targets"]}
    assert len(names) == 10 and all(t["met"] is None for t in d["targets"])  # quick sizes judge nothing
    assert "compile" not in d  # --quick: no cold compile


def test_scalar_loop_program_size():
    from isa.assembler import assemble

    prog = assemble(bench.scalar_loop_program(1200, 5000), "s.asm")
    assert len(prog.words) < 32  # a tiny program; 9 * 1200 * 5000 = 54M retired
    assert set(bench.WORKLOADS) == {
        "prefill_1k",
        "prefill_1k_overlap",
        "decode_32k",
        "linear_4k",
        "scalar_loop",
        "reference_ratio",
        "arith_floor",
        "prefill_paper",
        "decode_paper",
    }
    assert bench.WORKLOADS["prefill_paper"]["hw"] == bench.WORKLOADS["decode_paper"]["hw"] == "analytic"


def test_unknown_workload_is_usage_error():
    p = subprocess.run(
        [sys.executable, "-m", "plena_cli", "bench", "--quick", "--only", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 2 and "nope" in p.stderr


def test_targets_judge_full_results():
    res = {
        "quick": False,
        "workloads": {
            "prefill_1k": {"cycles_per_s": 25e6, "peak_rss_bytes": 500 * 2**20},
            "scalar_loop": {"instr_per_s": 40e6},
        },
    }
    t = {x["target"]: x["met"] for x in bench.targets(res)}
    assert t["prefill_1k simulated cycles/s"] is True
    assert t["scalar_loop instructions/s"] is False
    assert t["prefill_1k peak RSS"] is False
    assert t["reference_ratio"] is None
