"""Code regions in the Perfetto export: one track ``regions`` whose "X" slices are the runs of each region, from the
cycle counter before a run's first instruction to the counter after its last (plena_sim.trace.ring.Trace.region_slices):
exact values by hand, proper nesting, sums equal to the region table, and the JSON the CLI writes."""

from __future__ import annotations

import json

import pytest

import testbenches
from isa import assemble
from plena_cli.main import main
from plena_sim.config import default_config
from plena_sim.machine import Machine
from testbenches.harness import prepare_machine
from testbenches.variants import get_config

#: serial latencies of the reference config (timing.md §2): M_MM 64, M_MM_WO 1, V_EXP_V 1, V_RED_SUM 8, others 1
NESTED = """\
S_ADDI_INT gp1, gp0, 1
; @region layer
C_LOOP_START gp2, 3
; @region matmul
M_MM 0, gp0, gp0
M_MM_WO gp3, gp0, 0
; @endregion
; @region softmax
V_EXP_V gp4, gp0
V_RED_SUM f1, gp0
; @endregion
C_LOOP_END gp2
; @endregion
; @region tail
S_ADD_FP f2, f1, f1
; @endregion
"""
#: serial, by hand: the counter steps 0-1 (S_ADDI), 1-2 (C_LOOP_START); iteration k (k = 0, 1, 2) starts at
#: 2 + 75k: M_MM +64, M_MM_WO +1, V_EXP_V +1, V_RED_SUM +8, C_LOOP_END +1; S_ADD_FP 227-228
NESTED_SLICES = [
    ("layer", 1, 227, 16),
    ("layer/matmul", 2, 67, 2),
    ("layer/softmax", 67, 76, 2),
    ("layer/matmul", 77, 142, 2),
    ("layer/softmax", 142, 151, 2),
    ("layer/matmul", 152, 217, 2),
    ("layer/softmax", 217, 226, 2),
    ("tail", 227, 228, 1),
]


def _slices(trace):
    return [(s["path"], s["start"], s["end"], s["instructions"]) for s in trace.region_slices()]


def _region_events(doc):
    ev = doc["traceEvents"]
    (tid,) = [e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "regions"]
    return [e for e in ev if e["ph"] == "X" and e["tid"] == tid]


def assert_nested(events):
    """Slices on one track either nest (a child inside the innermost open slice) or follow each other."""
    open_: list[tuple[int, str]] = []  # (end cycle, path) of the enclosing slices
    for e in events:
        t0 = round(e["ts"] * 1000)  # 1 us in the file = 1000 cycles
        t1 = t0 + round(e["dur"] * 1000)
        assert t1 > t0 and t1 - t0 == e["args"]["cycles"]
        while open_ and open_[-1][0] <= t0:
            open_.pop()
        if open_:
            end, path = open_[-1]
            assert t1 <= end and e["name"].startswith(path + "/"), (e, open_)
        open_.append((t1, e["name"]))


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_nested_region_slices_serial_exact(backend):
    res = Machine(default_config(), backend=backend, timing="serial").run(assemble(NESTED), trace=True)
    assert _slices(res.trace) == NESTED_SLICES
    doc = res.trace.to_perfetto()
    events = _region_events(doc)
    assert [(e["name"], e["ts"], e["dur"]) for e in events] == [
        (p, a / 1000.0, (b - a) / 1000.0) for p, a, b, _n in NESTED_SLICES
    ]
    assert [e["args"]["instructions"] for e in events] == [n for *_x, n in NESTED_SLICES]
    assert_nested(events)


@pytest.mark.parametrize("timing", ["serial", "overlap", "rtl"])
def test_prefill_region_slices_nest_and_sum_to_the_region_table(timing):
    """Every record kept: a path's slices sum to its inclusive cycles; the top-level slices and the unlabelled
    cycles sum to the run's cycles; the JSON slices nest."""
    mod = testbenches.get("flashattn_prefill")
    case = mod.build(dict(mod.DEFAULTS), get_config("default"))
    res = prepare_machine(case).run(case.assembled(), timing=timing, trace=1 << 20)
    assert res.trace.dropped == 0
    slices = res.trace.region_slices()
    table = {e["path"]: e for e in res.stats["regions"]}
    per_path: dict[str, int] = {}
    for s in slices:
        per_path[s["path"]] = per_path.get(s["path"], 0) + s["end"] - s["start"]
    assert per_path == {p: e["cycles_inclusive"] for p, e in table.items() if e["cycles_inclusive"] and p in per_path}
    assert set(per_path) == {p for p, e in table.items() if e["cycles_inclusive"] and p != "(unlabelled)"}
    top = sum(s["end"] - s["start"] for s in slices if s["depth"] == 0)
    assert top + table["(unlabelled)"]["cycles_exclusive"] == res.cycles
    events = _region_events(res.trace.to_perfetto())
    assert len(events) == len(slices) and {e["name"] for e in events} >= {"flash", "flash/kv_tile/softmax"}
    assert_nested(events)


def test_cli_trace_perfetto_has_the_region_track(tmp_path, capsys):
    prog = tmp_path / "nested.asm"
    prog.write_text(NESTED)
    out = tmp_path / "t.json"
    assert main(["trace", str(prog), "--perfetto", str(out)]) == 0
    capsys.readouterr()
    events = _region_events(json.loads(out.read_text()))
    assert [(e["name"], e["ts"], e["dur"]) for e in events] == [
        (p, a / 1000.0, (b - a) / 1000.0) for p, a, b, _n in NESTED_SLICES
    ]
    assert_nested(events)
