"""The rtl timing model (docs/timing.md, plena_sim/timing/data/rtl_timing_v1.toml) through Machine.run: every measured
point of the RTL calibration (ready, done and II per shape) by single-instruction and back-to-back microprograms, every
hazard's stall and recovery, and the statistics it reports (unvalidated share, busy, stalls, critical path)."""

import pytest

from plena_sim.config import default_config, load_config
from plena_sim.machine import Machine
from plena_sim.timing.rtl import HAZARDS, RESOURCES, STALL_REASONS, rtl_data, rtl_table

DATA = rtl_data()
BACKENDS = ("numba", "reference")


def shape_cfg(mlen: int, blen: int = 4):
    """A consistent configuration with MLEN = VLEN = ``mlen`` and BLEN = ``blen``."""
    return load_config(
        overrides={
            "MLEN": mlen,
            "VLEN": mlen,
            "BLEN": blen,
            "HLEN": 4,
            "BROADCAST_AMOUNT": mlen // 4,
            "VECTOR_SRAM_SIZE": 64 * mlen,
            "MATRIX_SRAM_SIZE": 4 * mlen * mlen,
            "HBM_M_Prefetch_Amount": mlen,
        }
    )


def run(cfg, prog, backend="numba", **regs):
    m = Machine(cfg, backend=backend, timing="rtl")
    for k, v in regs.items():
        m.set_reg(k, v)
    return m.run(prog, trace=True)


def issues(res):
    return [r["issue"] for r in res.trace.rows()]


# ------------------------------------------------------------------------------------------ the data file


def test_data_file_is_versioned_and_sourced():
    assert DATA["schema"] == "plena-sim-rtl-timing" and DATA["version"] == 1
    assert all(e["source"] and e["status"] in ("measured", "declared") for e in DATA["op"])
    assert [h["name"] for h in DATA["hazard"]] == list(HAZARDS)
    assert [(h["stall"], h["recovery"]) for h in DATA["hazard"]] == [(3, 1), (5, 1), (4, 1), (2, 1)]
    assert len(DATA["measured"]["matrix"]) == 6 and len(DATA["measured"]["vector"]) == 4
    assert len(DATA["measured"]["scalar"]) == 4


def test_the_coefficients_give_the_contract_figures():
    for blen, mm, wo in ((4, 8, 21), (8, 12, 29), (16, 20, 45)):
        t = rtl_table(shape_cfg(64, blen))
        assert tuple(t.base[1]) == (mm, mm, mm) and tuple(t.base[6]) == (wo, wo, wo)  # M_MM, M_MM_WO
    t = rtl_table(shape_cfg(64))
    red_sum, red_max = 21, 22
    assert t.base[red_sum, 0] == 5 + 7 * 7 and t.base[red_max, 0] == 5 + 2 * 7  # ceil(log2(65)) = 7


# ------------------------------------------------------------------------------------------ matrix points


@pytest.mark.parametrize("point", DATA["measured"]["matrix"], ids=lambda p: f"M{p['mlen']}B{p['blen']}")
def test_matrix_measured_point(point):
    cfg = shape_cfg(point["mlen"], point["blen"])
    mm, wo = point["M_MM"], point["M_MM_WO"]
    single = run(cfg, "M_MM 0, gp0, gp0")
    assert single.cycles == mm["done"]
    # dependent: the write-out reads the accumulator -> issues when it is ready
    dep = run(cfg, "M_MM 0, gp0, gp0\nM_MM_WO gp1, gp0, 0", gp1=8 * point["mlen"])
    assert issues(dep) == [0, mm["ready"]] and dep.cycles == mm["ready"] + wo["busy"]
    # back to back: the next M_MM issues one initiation interval later
    b2b = run(cfg, "M_MM 0, gp0, gp0\nM_MM 0, gp0, gp0")
    assert issues(b2b) == [0, mm["ii"]] and b2b.cycles == mm["ii"] + mm["done"]
    wo_alone = run(cfg, "M_MM_WO gp1, gp0, 0\nM_MM_WO gp2, gp0, 0", gp1=0, gp2=16 * point["mlen"])
    assert issues(wo_alone) == [0, wo["busy"]] and wo_alone.cycles == 2 * wo["busy"]


# ------------------------------------------------------------------------------------------ vector points

_VV = {"V_ADD_VV", "V_SUB_VV", "V_MUL_VV"}
_VF = {"V_ADD_VF", "V_SUB_VF", "V_MUL_VF"}
_UNARY = {"V_EXP_V", "V_RECI_V"}
_REDUCE = {"V_RED_SUM", "V_RED_MAX"}


def _vector_text(op: str) -> str:
    """One instance of ``op`` writing row gp3 from row gp1 (and row gp2 / f1); a reduction writes f2."""
    if op in _VV:
        return f"{op} gp3, gp1, gp2, 0"
    if op in _VF:
        return f"{op} gp3, gp1, f1, 0"
    if op in _UNARY:
        return f"{op} gp3, gp1, 0, 0"
    return f"{op} f2, gp1, 0, 0"


def _consumer(op: str) -> str:
    """A consumer of ``op``'s result without a hazard: a vector add of row gp3, or (reduction) S_ST_FP of f2."""
    return "S_ST_FP f2, gp0, 0" if op in _REDUCE else "V_ADD_VV gp4, gp3, gp3, 0"


def _independent(op: str) -> str:
    """A second, independent instance of ``op`` (another destination)."""
    return _vector_text(op).replace("gp3", "gp5").replace("f2", "f3")


@pytest.mark.parametrize("point", DATA["measured"]["vector"], ids=lambda p: f"VLEN{p['vlen']}")
@pytest.mark.parametrize("op", sorted(_VV | _VF | _UNARY | _REDUCE))
def test_vector_measured_point(point, op):
    v = point["vlen"]
    cfg = shape_cfg(v)
    regs = {"gp1": 0, "gp2": v, "gp3": 2 * v, "gp4": 3 * v, "gp5": 4 * v}
    lat = point[op]
    single = run(cfg, _vector_text(op), **regs)
    assert single.cycles == lat  # done
    dep = run(cfg, _vector_text(op) + "\n" + _consumer(op), **regs)
    assert issues(dep) == [0, lat]  # ready
    b2b = run(cfg, _vector_text(op) + "\n" + _independent(op), **regs)
    assert issues(b2b) == [0, point["ii"]] and b2b.cycles == point["ii"] + lat  # II


# ------------------------------------------------------------------------------------------ scalar points

_SFP_BINARY = {"S_ADD_FP", "S_SUB_FP", "S_MUL_FP"}


def _scalar_text(op: str, rd: str = "f2") -> str:
    if op == "S_MAP_V_FP":
        return "S_MAP_V_FP gp3, gp0, 0" if rd == "f2" else "S_MAP_V_FP gp5, gp0, 0"
    if op in _SFP_BINARY:
        return f"{op} {rd}, f1, f1"
    return f"{op} {rd}, f1, 0"


@pytest.mark.parametrize("point", DATA["measured"]["scalar"], ids=lambda p: f"VLEN{p['vlen']}")
@pytest.mark.parametrize("op", ["S_ADD_FP", "S_SUB_FP", "S_MUL_FP", "S_EXP_FP", "S_RECI_FP", "S_SQRT_FP", "S_MAP_V_FP"])
def test_scalar_measured_point(point, op):
    v = point["vlen"]
    cfg = shape_cfg(v)
    regs = {"gp3": 2 * v, "gp4": 3 * v, "gp5": 4 * v, "f1": 2.0}
    ready, done = point[op]["ready"], point[op]["done"]
    single = run(cfg, _scalar_text(op), **regs)
    assert single.cycles == done
    consumer = "V_ADD_VV gp4, gp3, gp3, 0" if op == "S_MAP_V_FP" else "S_ST_FP f2, gp0, 0"
    dep = run(cfg, _scalar_text(op) + "\n" + consumer, **regs)
    assert issues(dep) == [0, ready]
    b2b = run(cfg, _scalar_text(op) + "\n" + _scalar_text(op, "f3"), **regs)
    assert issues(b2b) == [0, done] and b2b.cycles == 2 * done  # II = done: one at a time


# ------------------------------------------------------------------------------------------ hazards

CFG = default_config()
ROWS = {"gp1": 0, "gp2": 64, "gp3": 128, "gp4": 192, "gp5": 256}


def _hazard_case(name: str) -> tuple[str, int]:
    """(program, the producer's ready cycle) of a producer -> consumer pair of hazard ``name``."""
    if name == "hbm_vector":
        return "H_PREFETCH_V gp0, gp0, a0, 0, 0\nV_ADD_VV gp3, gp1, gp2, 0", -1  # ready: the HBM latency
    if name == "reduction_scalar":
        return "V_RED_SUM f2, gp1, 0, 0\nS_ADD_FP f3, f2, f1", 54
    if name == "sfu_broadcast":
        return "S_EXP_FP f2, f1, 0\nV_ADD_VF gp3, gp1, f2, 0", 19
    return "V_ADD_VV gp3, gp1, gp2, 0\nV_MUL_VV gp3, gp4, gp5, 0", 12


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,name", list(enumerate(HAZARDS)))
def test_hazard_stall_and_recovery(name, k, backend):
    prog, ready = _hazard_case(name)
    res = run(CFG, prog, backend, SCALE=256, f1=1.5, **ROWS)
    rows = res.trace.rows()
    if ready < 0:
        ready = rows[0]["end"]
    stall, recovery = DATA["hazard"][k]["stall"], DATA["hazard"][k]["recovery"]
    assert rows[1]["issue"] == ready + stall + recovery
    stalls = res.stats["stalls"]
    assert stalls[f"hazard_{name}"] == stall and stalls["recovery"] == recovery
    # the wait up to the producer's ready cycle is an operand stall of its own (one issue slot already passed)
    assert stalls["operand_not_ready"] == ready - 1
    assert sum(stalls.values()) == rows[1]["issue"] - 1


def test_a_hazard_that_does_not_decide_the_issue_cycle_costs_nothing():
    # f2 is ready at 19 (+4 = 23) but the broadcast op waits for row gp4, ready at 1 + 21 + 21 = 43
    prog = "S_EXP_FP f2, f1, 0\nV_EXP_V gp3, gp1, 0, 0\nV_EXP_V gp4, gp3, 0, 0\nV_ADD_VF gp5, gp4, f2, 0"
    res = run(CFG, prog, f1=1.0, **ROWS)
    assert issues(res) == [0, 1, 22, 43] and res.cycles == 43 + 13
    assert res.stats["stalls"]["hazard_sfu_broadcast"] == 0 and res.stats["stalls"]["recovery"] == 0


def test_no_hazard_for_an_unrelated_pair():
    # S_ADD_FP is not an SFU op: its broadcast consumer issues at its ready cycle (9)
    res = run(CFG, "S_ADD_FP f2, f1, f1\nV_ADD_VF gp3, gp1, f2, 0", f1=1.0, **ROWS)
    assert issues(res) == [0, 9] and res.cycles == 9 + 13


# ------------------------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("backend", BACKENDS)
def test_rtl_statistics_of_a_small_program(backend):
    prog = (
        "S_ADDI_INT gp1, gp0, 64\nM_MM 0, gp0, gp0\nM_MM_WO gp1, gp0, 0\nV_ADD_VV gp2, gp1, gp1, 0\nS_MAX_FP f1, f1, f1"
    )
    res = run(CFG, prog, backend)
    st = res.stats
    # S_ADDI_INT 0 (ready 1); M_MM 1 (done 9); M_MM_WO 9 (busy 21, ready 30); V_ADD_VV reads its rows: 30 -> 42;
    # S_MAX_FP (declared 10) issues at 31 -> 41
    assert issues(res) == [0, 1, 9, 30, 31] and res.cycles == 42
    assert st["timing_mode"] == "rtl"
    assert st["unvalidated"] == {
        "opcodes": {"M_MM_WO": 1, "S_ADDI_INT": 1, "S_MAX_FP": 1},
        "cycles": 1 + 21,  # S_ADDI_INT adds 1, M_MM_WO 30 - 9; S_MAX_FP ends before V_ADD_VV
        "share": 22 / 42,
    }
    assert st["busy"] == dict(zip(RESOURCES, [1 + 10, 1, 8, 21, 0, 0, 0, 0], strict=True))
    assert st["critical_path"] == dict(zip(RESOURCES, [1, 12, 8, 21, 0, 0, 0, 0], strict=True))
    assert sum(st["critical_path"].values()) == res.cycles
    assert st["stalls"] == dict.fromkeys(STALL_REASONS, 0) | {"operand_not_ready": 7 + 20}
    assert st["mac_utilization"] == 4 * 4 * 64 / (42 * 4 * 64)  # one M_MM (B*B*M MACs), a B x M array


def test_rtl_is_deterministic():
    prog = "H_PREFETCH_V gp0, gp0, a0, 0, 0\nV_EXP_V gp3, gp1, 0, 0\nV_RED_MAX f2, gp3, 0, 0\nS_ADD_FP f3, f2, f2"
    a = run(CFG, prog, SCALE=256, **ROWS)
    b = run(CFG, prog, SCALE=256, **ROWS)
    c = run(CFG, prog, "reference", SCALE=256, **ROWS)
    assert a.cycles == b.cycles == c.cycles and issues(a) == issues(b) == issues(c)
    assert a.stats["stalls"] == b.stats["stalls"] == c.stats["stalls"]
