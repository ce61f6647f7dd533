"""``plena-sim trace`` watch filters (``--vram/--mram/--fpsram/--intsram/--hbm-range``), the structured ``mem``,
``stall`` and ``values`` of every row, and the Perfetto stall slices and fault marker (issue 19, item 2 / 5).

The program touches known ranges on the default machine (VLEN = MLEN = 64, BLEN = 4: a VRAM row is 64 elements,
an MRAM tile 4096); the comments give the reads and writes of each pc.
"""

import json

import numpy as np
import pytest

from plena_sim.timing.scoreboard import (
    MEM_MTILE,
    MEM_SLOT_N,
    MEM_VROW,
    MS_COUNT,
    MS_OP,
    MS_SPACE,
    MS_START,
    MS_STEP,
    RC_HADDR,
    RC_HELEM,
    RC_HPITCH,
    RC_HROWS,
    RC_MEM,
    RC_PC,
    REC_N,
)
from plena_sim.trace.ring import Trace
from tests.util.cli import run

PROG = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
M_MM 0, gp0, gp0
H_PREFETCH_V gp2, gp0, a0, 0, 0
V_EXP_V gp2, gp2
V_RED_SUM f1, gp2
S_ST_FP f1, gp0, 9
S_ST_INT gp2, gp0, 7
S_LD_INT gp3, gp0, 7
M_MM_WO gp2, gp0, 0
"""
# pc 3 M_MM: reads MRAM tile 0 (elements 0..4095) and VRAM rows 0..3
# pc 4 H_PREFETCH_V: reads HBM bytes 0..255 (4 rows of 64 B), writes VRAM rows 16..19
# pc 5 V_EXP_V: reads and writes VRAM row 16 (exp(0) = 1)       pc 6 V_RED_SUM: reads row 16 (f1 = 64)
# pc 7 S_ST_FP: writes FP SRAM word 9 (64.0)                     pc 8 S_ST_INT: writes INT SRAM word 7 (1024)
# pc 9 S_LD_INT: reads INT SRAM word 7                           pc 10 M_MM_WO: reads and writes rows 16..19


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "watch.asm"
    p.write_text(PROG)
    return p


def _rows(capsys, prog, *flags):
    code, out, err = run(capsys, "trace", prog, "--json", *flags)
    assert code == 0, err
    return json.loads(out)["rows"]


@pytest.mark.parametrize(
    "flags, pcs",
    [
        (("--vram", "16"), [4, 5, 6, 10]),
        (("--vram", "19:1"), [4, 10]),
        (("--vram", "0:4"), [3]),
        (("--vram", "20:100"), []),
        (("--mram", "4095"), [3]),
        (("--mram", "0:1"), [3]),
        (("--mram", "4096:10"), []),
        (("--fpsram", "9"), [7]),
        (("--fpsram", "8:1"), []),
        (("--intsram", "7"), [8, 9]),
        (("--intsram", "0x6:2"), [8, 9]),
        (("--hbm-range", "0xff:1"), [4]),
        (("--hbm-range", "256:64"), []),
        (("--vram", "0:4", "--fpsram", "9"), [3, 7]),  # several watches: any of them
        (("--vram", "16", "--op", "V_EXP_V,M_MM_WO"), [5, 10]),  # and the other filters
    ],
)
def test_watch_filters_select_the_instructions_that_touch_the_range(capsys, prog, flags, pcs):
    assert [r["pc"] for r in _rows(capsys, prog, *flags)] == pcs


def test_rows_carry_structured_memory_accesses_and_the_values_written(capsys, prog):
    rows = {r["pc"]: r for r in _rows(capsys, prog)}
    assert rows[3]["mem"] == [
        {"space": "mram", "op": "read", "start": 0, "count": 4096, "unit": "element"},
        {"space": "vram", "op": "read", "start": 0, "count": 4, "unit": "row"},
    ]
    assert rows[4]["mem"] == [
        {"space": "vram", "op": "write", "start": 16, "count": 4, "unit": "row"},
        {"space": "hbm", "op": "read", "start": 0, "count": 256, "unit": "byte", "rows": 4, "pitch": 64}
        | {"row_bytes": 64, "moved": 320},
    ]
    assert rows[5]["values"] == {"space": "vram", "start": 16, "values": [1.0, 1.0, 1.0, 1.0]}
    assert rows[7]["mem"] == [{"space": "fpsram", "op": "write", "start": 9, "count": 1, "unit": "word"}]
    assert rows[7]["values"] == {"space": "fpsram", "start": 9, "values": [64.0]}
    assert rows[7]["regs"] == {}
    assert rows[8]["values"] == {"space": "intsram", "start": 7, "values": [1024]}
    assert rows[9]["mem"] == [{"space": "intsram", "op": "read", "start": 7, "count": 1, "unit": "word"}]
    assert rows[9]["regs"] == {"gp3": [0, 1024]} and rows[9]["values"] is None
    assert rows[6]["regs"] == {"f1": [0.0, 64.0]}
    assert all(set(r) >= {"regs", "mem", "stall", "values"} and "reg" not in r for r in rows.values())


def test_stalls_per_instruction_under_overlap(capsys, prog):
    rows = _rows(capsys, prog, "--timing", "overlap")
    prefetch, exp = rows[4], rows[5]
    # V_EXP_V reads row 16, which H_PREFETCH_V writes: it waits for the prefetch's end
    assert exp["issue"] == prefetch["end"] and exp["stall"] == {
        "cycles": prefetch["end"] - (prefetch["issue"] + 1),
        "reason": "operand_not_ready",
    }
    for before, row in zip(rows, rows[1:], strict=False):
        assert row["eligible"] == before["issue"] + 1  # in-order issue: one cycle after the previous issue
        assert row["issue"] - row["eligible"] == row["stall"]["cycles"]
    assert rows[-1]["stall"]["reason"] == "unit_busy"  # M_MM_WO waits for the matrix unit's M_MM


def test_stall_cycles_of_the_rows_sum_to_the_run_statistics(capsys):
    for timing in ("overlap", "rtl"):
        flags = ("--timing", timing, "--last", "100000000", "--json")
        code, out, err = run(capsys, "trace", "--testbench", "flashattn_decode", *flags)
        doc = json.loads(out)
        assert code == 0 and doc["dropped"] == 0, err
        by_reason: dict[str, int] = {}
        for r in doc["rows"]:
            if r["stall"]["cycles"]:
                by_reason[r["stall"]["reason"]] = by_reason.get(r["stall"]["reason"], 0) + r["stall"]["cycles"]
        stalls = doc["stats"]["stalls"]
        assert sum(by_reason.values()) == sum(stalls.values()) > 0
        assert set(by_reason) <= {k for k, v in stalls.items() if v}  # a main reason is one that stalled


def test_serial_never_stalls(capsys, prog):
    assert {json.dumps(r["stall"]) for r in _rows(capsys, prog)} == {'{"cycles": 0, "reason": "none"}'}


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--vram", "16:0"), "--vram: '16:0' is an empty range"),
        (("--vram", "16:"), "--vram: '16:' must look like ROW[:N]"),
        (("--vram", "x"), "--vram: 'x' is not an integer"),
        (("--hbm-range", "64"), "--hbm-range: '64' must look like ADDR:LEN"),
        (("--vram", "4194304"), "--vram: 4194304..4194304 is outside the machine's 4194304 VRAM rows"),
        (("--mram", "262143:2"), "--mram: 262143..262144 is outside the machine's 262144 MRAM elements"),
        (("--fpsram", "0:99999999"), "--fpsram: 0..99999998 is outside the machine's"),
    ],
)
def test_bad_watch_ranges_are_usage_errors(capsys, prog, flags, message):
    code, out, err = run(capsys, "trace", prog, *flags)
    assert code == 2 and message in err and "Traceback" not in err


def test_the_table_shows_stalls_and_values(capsys, prog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one line per row
    code, out, _ = run(capsys, "trace", prog, "--timing", "overlap", "--vram", "16")
    line = {int(ln.split("│")[1]): ln for ln in out.splitlines() if ln.count("│") > 5 and ln.split("│")[1].strip()}
    assert code == 0 and sorted(line) == [4, 5, 6, 10]
    assert " RAW │" in line[5] and "read VRAM row 16; write VRAM row 16 = 1, 1, 1, 1, ..." in line[5]
    assert " unit │" in line[10] and "write VRAM rows 16..19 = " in line[10]


def test_perfetto_has_stall_slices_and_a_fault_marker(capsys, tmp_path, prog):
    perf = tmp_path / "p.json"
    code, out, _ = run(capsys, "trace", prog, "--timing", "overlap", "--json", "--perfetto", perf)
    rows = [r for r in json.loads(out)["rows"] if r["stall"]["cycles"]]
    ev = json.loads(perf.read_text())["traceEvents"]
    tid = next(e["tid"] for e in ev if e["ph"] == "M" and e["args"].get("name") == "stalls")
    slices = [e for e in ev if e["ph"] == "X" and e["tid"] == tid]
    assert [(s["args"]["pc"], s["ts"], s["dur"], s["name"]) for s in slices] == [
        (r["pc"], r["eligible"] / 1000, r["stall"]["cycles"] / 1000, f"stall: {r['stall']['reason']}") for r in rows
    ]
    bad = tmp_path / "bad.asm"
    bad.write_text("S_ADDI_INT gp1, gp0, 1\nV_EXP_V gp1, gp0\n")
    code, _, _ = run(capsys, "trace", bad, "--perfetto", perf)
    marks = [e for e in json.loads(perf.read_text())["traceEvents"] if e["ph"] == "i"]
    assert code == 3 and len(marks) == 1
    assert marks[0]["name"] == "FAULT AL-VROW" and marks[0]["args"]["pc"] == 1 and marks[0]["s"] == "g"


def _record(pc, slots=(), hbm=None):
    r = np.zeros(REC_N, dtype=np.int64)
    r[RC_PC] = pc
    for k, (space, op, start, count, step) in enumerate(slots):
        base = RC_MEM + MEM_SLOT_N * k
        r[base + MS_SPACE], r[base + MS_OP], r[base + MS_START] = space, op, start
        r[base + MS_COUNT], r[base + MS_STEP] = count, step
    if hbm is not None:
        r[RC_HADDR], r[RC_HROWS], r[RC_HPITCH], r[RC_HELEM] = hbm
    return r


def test_strided_ranges_intersect_only_at_their_elements():
    """A strided write (M_MM_WO with a row stride, an H_* with the STRIDE register) touches only its rows."""
    recs = np.stack(
        [
            _record(0, [(MEM_VROW, 1, 8, 4, 3)]),  # rows 8, 11, 14, 17
            _record(1, [(MEM_MTILE, 0, 2, 1, 1)]),  # tile 2: elements 8192..12287
            _record(2, hbm=(0x1000, 3, 0x100, 0x40)),  # bytes 0x1000..0x103F, 0x1100.., 0x1200..0x123F
        ]
    )
    t = Trace(recs, 3, 3, tile_elems=4096)

    def pcs(**touching):
        return [int(p) for p in t.filter(touching=touching).records[:, RC_PC]]

    assert pcs(vram=(9, 2)) == [] and pcs(vram=(11, 1)) == [0] and pcs(vram=(15, 3)) == [0]
    assert pcs(vram=(18, 10)) == [] and pcs(vram=(0, 9)) == [0]
    assert pcs(mram=(8191, 1)) == [] and pcs(mram=(8191, 2)) == [1] and pcs(mram=(12288, 5)) == []
    assert pcs(hbm=(0x1040, 0xC0)) == [] and pcs(hbm=(0x1040, 0xC1)) == [2] and pcs(hbm=(0x123F, 1)) == [2]
    assert pcs(hbm=(0x1240, 0x1000)) == [] and pcs(hbm=(0, 0x1001)) == [2]


def test_a_testbench_reports_fault_gives_the_same_marker_row_as_the_fault_itself(capsys, tmp_path):
    """``run --perfetto`` marks a fault from the report's ``fault`` dict; ``trace`` from the SimFault: one row."""
    from plena_cli.run_source import fault_row
    from plena_sim.machine import Machine

    res = Machine().run("S_ADDI_INT gp1, gp0, 1\nV_EXP_V gp1, gp0\n", raise_on_fault=False, name="k.asm")
    row = fault_row(res.fault)
    assert row == fault_row(res.fault.to_dict())
    assert (row["pc"], row["line"], row["rule"], row["text"]) == (1, 2, "AL-VROW", "V_EXP_V gp1, gp0")
    assert row["message"].endswith(" [AL-VROW]")
