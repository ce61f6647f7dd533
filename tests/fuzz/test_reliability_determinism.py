"""Determinism: the same program, inputs and config give bit-identical outputs, statistics and cycle
counts -- across runs in one process, across fresh machines, across backends, and across processes
(``plena-sim exec ... --json`` in two subprocesses with different hash seeds, compared byte for byte
except the wall-time field ``host_seconds``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fuzzlib import SMALL, small_config, state_digest

from isa import assemble
from plena_sim.machine import Machine

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """\
; determinism probe: DMA in (MX decode), vector math, reductions, a loop, matrix, write-outs, DMA out
S_ADDI_INT gp1, gp0, 1024
C_SET_SCALE_REG gp1
S_ADDI_INT gp5, gp0, 4096
C_SET_ADDR_REG a1, gp0, gp5
S_LD_FP f1, gp0, 0
S_LD_FP f2, gp0, 1
H_PREFETCH_V gp0, gp0, a0, 0, 0
H_PREFETCH_M gp0, gp0, a0, 0, 0
S_ADDI_INT gp2, gp0, 0
C_LOOP_START gp3, 4
V_MUL_VF gp2, gp2, f1
V_ADD_VF gp2, gp2, f2
V_EXP_V gp2, gp2
V_RED_SUM f3, gp2
V_RED_MAX f4, gp2
S_ADDI_INT gp2, gp2, 16
C_LOOP_END gp3
M_MM 0, gp0, gp0
S_ADDI_INT gp4, gp0, 64
M_MM_WO gp4, gp0, 0
S_ST_FP f3, gp0, 5
S_ST_FP f4, gp0, 6
S_RECI_FP f5, f3
S_SQRT_FP f6, f4
S_ST_FP f5, gp0, 7
S_ST_INT gp4, gp0, 3
H_STORE_V gp0, gp0, a1, 0, 0
"""
#: the same program ending in a fault (BD-VROW on the last instruction)
FAULTING = PROGRAM + "S_LUI_INT gp6, 4095\nV_ADD_VV gp6, gp0, gp0\n"

HBM_IMAGE = (np.random.default_rng(7).standard_normal(4096) * 20).astype(np.int8).tobytes()
FP_VALUES = [0.5, 0.25]


def _machine(backend: str) -> Machine:
    m = Machine(small_config(), backend=backend)
    m.hbm.load_image(HBM_IMAGE, 0)
    m.write_fp_sram(0, FP_VALUES)
    return m


#: host wall-time fields of the statistics (timing.md §6); everything else is deterministic
WALL_TIME_KEYS = ("host_seconds", "sim_cycles_per_second", "jit_compile_seconds")


def _strip_wall_time(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k not in WALL_TIME_KEYS}


@pytest.mark.parametrize("text", [PROGRAM, FAULTING], ids=["ok", "fault"])
def test_same_run_same_everything_in_process(text):
    prog = assemble(text, "probe.asm")
    runs = []
    for backend in ("numba", "numba", "reference"):
        m = _machine(backend)
        res = m.run(prog, raise_on_fault=False)
        stats = _strip_wall_time(res.stats)
        stats.pop("backend")
        runs.append((stats, res.cycles, res.instructions, str(res.fault), state_digest(m)))
    assert runs[0] == runs[1], "two fresh numba machines disagree"
    assert runs[0] == runs[2], "numba and reference disagree"
    # the fault (if any) is reported identically, including its message
    assert runs[0][3] == runs[2][3]


def _exec_in_subprocess(tmp: Path, tag: str, program: Path, hash_seed: str) -> tuple[int, bytes, bytes, dict]:
    out = tmp / tag
    out.mkdir()
    argv = [
        sys.executable,
        "-m",
        "plena_cli",
        "exec",
        str(program),
        "--json",
        *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")],
        "--hbm",
        str(tmp / "hbm.bin"),
        "--fp",
        ",".join(map(str, FP_VALUES)),
        "--dump-vram",
        f"0:16={out / 'vram.npy'}",
        "--dump-hbm",
        f"0:8192={out / 'hbm.bin'}",
        "--dump-fp-sram",
        str(out / "fp.npy"),
    ]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run(argv, capture_output=True, env=env, cwd=str(tmp), timeout=600)
    files = {f.name: f.read_bytes() for f in sorted(out.iterdir())}
    return p.returncode, p.stdout, p.stderr, files


def _without_host_seconds(stdout: bytes) -> bytes:
    doc = json.loads(stdout)
    for k in WALL_TIME_KEYS:
        assert isinstance(doc.pop(k), float)
    return json.dumps(doc, sort_keys=True).encode()


@pytest.mark.parametrize("text,code", [(PROGRAM, 0), (FAULTING, 3)], ids=["ok", "fault"])
def test_exec_is_bit_identical_across_processes(tmp_path, text, code):
    (tmp_path / "hbm.bin").write_bytes(HBM_IMAGE)
    program = tmp_path / "probe.asm"
    program.write_text(text)
    a = _exec_in_subprocess(tmp_path, "a", program, "0")
    b = _exec_in_subprocess(tmp_path, "b", program, "4242")
    assert a[0] == code, a[2].decode(errors="replace")
    assert a[0] == b[0]
    assert b"Traceback" not in a[2] + b[2]
    assert _without_host_seconds(a[1]) == _without_host_seconds(b[1])
    # the fault message (or nothing) and the "wrote PATH" line of each dump, byte for byte (the dumps' own
    # directory aside: a/ and b/)
    assert a[2].replace(f"{tmp_path}/a/".encode(), b"OUT/") == b[2].replace(f"{tmp_path}/b/".encode(), b"OUT/")
    assert a[2].count(b"wrote ") == 3
    assert a[3] == b[3] and set(a[3]) == {"vram.npy", "hbm.bin", "fp.npy"}
    doc = json.loads(a[1])
    assert doc["instructions"] > 40 and doc["cycles"] > 0
    assert (doc["fault"] is None) == (code == 0)
