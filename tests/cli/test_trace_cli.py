"""`plena-sim trace`, `--timing` on exec/run, `--trace`/`--perfetto` on run, upstream-style lines."""

import json

import pytest

from tests.util.cli import run

PROG = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
M_MM 0, gp0, gp0
H_PREFETCH_V gp2, gp0, a0, 0, 0
V_ADD_VV gp2, gp2, gp2
M_MM_WO gp2, gp0, 0
"""


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text(PROG)
    return p


def _check_perfetto(path, units):
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(n[0] for n in names.values() if n not in ("regions", "stalls")) == sorted("MVSHC")
    assert list(names.values()).count("regions") == 1  # the code regions' track (tests/timing/test_perfetto_regions)
    assert list(names.values()).count("stalls") <= 1  # the stalled instructions' track (tests/cli/test_trace_watch)
    xs = [e for e in ev if e["ph"] == "X"]
    assert xs and all({"name", "ts", "dur", "pid", "tid", "args"} <= set(e) for e in xs)
    assert all(e["dur"] >= 0 for e in xs)
    on = {names[e["tid"]][0] for e in xs if names[e["tid"]] not in ("regions", "stalls")}
    assert set(units) <= on
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all(e["name"] == "HBM bandwidth" for e in counters)
    return doc


def test_exec_timing_and_upstream_lines(capsys, prog):
    code, out, _ = run(capsys, "exec", prog)
    assert code == 0
    assert "Simulation completed. Latency 99.000ns" in out  # 1 + 1 + 1 + 64 + 30 + 1 + 1
    assert "HBM Statistics - Bytes read: 320 | Bytes written: 0 | Utilization:" in out
    code, out, err = run(capsys, "exec", prog, "--timing", "overlap", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["timing_mode"] == "overlap" and doc["cycles"] == 68
    assert set(doc["overlap"]) == {"stall_unit", "stall_data", "issue_cycles"}
    assert "Simulation completed. Latency" in err


def test_trace_program_filters(capsys, prog, tmp_path):
    code, out, _ = run(capsys, "trace", prog, "--timing", "overlap", "--op", "M_MM,H_PREFETCH_V", "--json")
    doc = json.loads(out)
    assert code == 0 and [r["op"] for r in doc["rows"]] == ["M_MM", "H_PREFETCH_V"]
    assert doc["rows"][1]["issue"] == 4 and doc["rows"][1]["hbm_bytes"] == 320
    code, out, _ = run(capsys, "trace", prog, "--unit", "dma,vector", "--json")
    assert [r["unit"] for r in json.loads(out)["rows"]] == ["H", "V"]
    code, out, _ = run(capsys, "trace", prog, "--pc", "0:1", "--json")
    assert [r["pc"] for r in json.loads(out)["rows"]] == [0, 1]
    code, out, _ = run(capsys, "trace", prog, "--last", "1", "--json")
    rows = json.loads(out)["rows"]
    assert len(rows) == 1 and rows[0]["mem"] == [  # M_MM_WO merges lanes: reads the rows it writes
        {"space": "vram", "op": "read", "start": 16, "count": 4, "unit": "row"},
        {"space": "vram", "op": "write", "start": 16, "count": 4, "unit": "row"},
    ]
    perf = tmp_path / "t.json"
    code, out, _ = run(capsys, "trace", prog, "--perfetto", perf)
    assert code == 0 and "per-opcode summary" in out and "unit utilization" in out
    _check_perfetto(perf, "MVSHC")


def test_trace_around_fault(capsys, tmp_path):
    p = tmp_path / "f.asm"
    p.write_text("S_ADDI_INT gp1, gp0, 1\nS_ADDI_INT gp2, gp0, 2\nS_ADDI_INT gp3, gp0, 3\nV_EXP_V gp1, gp0\n")
    code, out, err = run(capsys, "trace", p, "--around-fault", "1", "--json")
    assert code == 3 and [r["pc"] for r in json.loads(out)["rows"]] == [2]
    assert "AL-VROW" in err
    code, out, err = run(capsys, "trace", p, "--around-fault", "2", "--json")
    assert [r["pc"] for r in json.loads(out)["rows"]] == [1, 2]
    code, out, err = run(capsys, "trace", p, "--unit", "bogus")
    assert code == 2


def test_trace_testbench_prefill(capsys, tmp_path):
    perf = tmp_path / "prefill.json"
    code, out, err = run(capsys, "trace", "--testbench", "flashattn_prefill", "--last", "20", "--perfetto", perf)
    assert code == 0, err
    assert "flashattn_prefill" in out and "per-opcode summary" in out and "H_PREFETCH" in out
    assert "unit utilization" in out and "Simulation completed. Latency" in out
    doc = _check_perfetto(perf, "MVSH")
    assert doc["otherData"]["records"] > 1000


def test_run_timing_trace_perfetto(capsys, tmp_path):
    perf = tmp_path / "run.json"
    code, out, _ = run(capsys, "run", "flashattn_prefill", "--timing", "overlap", "--json", "--perfetto", perf)
    doc = json.loads(out)
    assert code == 0 and doc["stats"]["timing_mode"] == "overlap"
    _check_perfetto(perf, "MVSH")
    code, out, _ = run(capsys, "run", "flashattn_prefill", "--trace")
    assert code == 0 and "per-opcode summary" in out
