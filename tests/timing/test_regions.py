"""Code regions (``; @region NAME`` / ``; @endregion``, isa.regions) and the per-pc profile of a run
(``Outcome.pc_count`` / ``pc_cycles``, ``stats["regions"]``): exact values, sums equal to the run's totals in both
timing modes and both backends, the assembler errors of unbalanced markers, the Asm path equal to the text path."""

from __future__ import annotations

import numpy as np
import pytest

from isa import AssemblerError, Program, assemble
from plena_sim.config import default_config
from plena_sim.hbm.storage import Hbm
from plena_sim.machine import Machine
from programs.asm import Asm, fp, gp, region

CFG = default_config()  # reference config: M = V = 64, BLEN 4, DC_EN = 1 (timing.md §2 "Reference (en)" column)
BACKENDS = ("numba", "reference")
MODES = ("serial", "overlap")

#: latencies of the reference config (timing.md §2): M_MM 64, M_MM_WO 1, V_EXP_V 1, V_RED_SUM 8, S_* 1, C_* 1
NESTED = """\
S_ADDI_INT gp1, gp0, 1
; @region layer
C_LOOP_START gp2, 3
; @region matmul
M_MM 0, gp0, gp0
M_MM_WO gp3, gp0, 0
; @endregion
; a plain comment between regions
; @region softmax
V_EXP_V gp4, gp0
V_RED_SUM f1, gp0
; @endregion
C_LOOP_END gp2
; @endregion
; @region tail
S_ADD_FP f2, f1, f1
; @endregion
; @region layer
S_ADDI_INT gp5, gp0, 2
; @endregion
"""
NESTED_REGIONS = (("layer", 1, 7), ("layer/matmul", 2, 4), ("layer/softmax", 4, 6), ("tail", 7, 8), ("layer", 8, 9))
#: serial (timing.md §3): each pc retires count x its latency; the loop body runs 3 times, C_LOOP_END 3 times
SERIAL_PC_COUNT = [1, 1, 3, 3, 3, 3, 3, 1, 1]
SERIAL_PC_CYCLES = [1, 1, 3 * 64, 3 * 1, 3 * 1, 3 * 8, 3 * 1, 1, 1]
#: overlap (timing.md §4), by hand: S_ADDI 0-1, C_LOOP_START 1-2; iteration 1: M_MM 2-66, M_MM_WO (ACC_M) 66-67,
#: V_EXP_V (VROW 0) 67-68, V_RED_SUM (VROW 0) 68-76, C_LOOP_END issues at 69 (done 70: no new maximum);
#: iterations 2, 3: M_MM issues one cycle after C_LOOP_END (70 / 138) and ends 58 cycles past the previous maximum
#: (134 / 202), then +1, +1, +8, +0 as before; S_ADD_FP waits for f1 (212-213), S_ADDI 213-214
OVERLAP_PC_CYCLES = [1, 1, 64 + 58 + 58, 3, 3, 24, 0, 1, 1]
M_MM_MACS = CFG.BLEN * CFG.BLEN * CFG.MLEN  # isa.md §5: B x B x M per M_MM


def entry(path, instructions, excl, incl, macs=0):
    return {
        "path": path,
        "instructions": instructions,
        "cycles_exclusive": excl,
        "cycles_inclusive": incl,
        "macs": macs,
    }


#: the count / cycle / MAC fields of a region entry (the resource fields are checked on their own below)
CORE_KEYS = ("path", "instructions", "cycles_exclusive", "cycles_inclusive", "macs")


def core(regions):
    """The CORE_KEYS fields of each region entry."""
    return [{k: e[k] for k in CORE_KEYS} for e in regions]


def run(prog, backend="numba", timing="serial", **kw):
    return Machine(CFG, backend=backend, timing=timing).run(prog, **kw)


def assert_sums(res):
    """Exclusive figures of all entries (and the profile) sum exactly to the run's totals."""
    regions = res.stats["regions"]
    assert sum(e["instructions"] for e in regions) == res.instructions
    assert sum(e["cycles_exclusive"] for e in regions) == res.cycles
    assert sum(e["macs"] for e in regions) == res.stats["matrix_macs"]
    assert int(res.outcome.pc_count.sum()) == res.instructions
    assert int(res.outcome.pc_cycles.sum()) == res.cycles
    for key in ("busy", "stalls"):  # the resource fields sum to the run's, too
        for name, total in res.stats[key].items():
            assert sum(e[key][name] for e in regions) == total
    assert sum(e["hbm_read_bytes"] for e in regions) == res.stats["hbm"]["bytes_read"]
    assert sum(e["hbm_write_bytes"] for e in regions) == res.stats["hbm"]["bytes_written"]


# ------------------------------------------------------------------------------------------- the assembler


def test_assembler_records_nested_regions():
    prog = assemble(NESTED, "nested.asm")
    assert prog.regions == NESTED_REGIONS
    assert prog.regions[1].path == "layer/matmul" and prog.regions[1].first == 2 and prog.regions[1].end == 4
    assert len(prog) == 9 and [s.line for s in prog.source] == [1, 3, 5, 6, 10, 11, 13, 16, 19]
    with pytest.raises(AttributeError):
        prog.regions = ()  # type: ignore[misc]


def test_asm_program_has_the_regions_of_its_text():
    a = Asm()
    a.S_ADDI_INT(gp(1), gp(0), 1)
    with region(a, "layer"):
        a.C_LOOP_START(gp(2), 3)
        with region(a, "matmul"):
            a.M_MM(0, gp(0), gp(0))
            a.M_MM_WO(gp(3), gp(0), 0)
        a.comment("a plain comment between regions")
        with region(a, "softmax"):
            a.V_EXP_V(gp(4), gp(0))
            a.V_RED_SUM(fp(1), gp(0))
        a.C_LOOP_END(gp(2))
    with region(a, "tail"):
        a.S_ADD_FP(fp(2), fp(1), fp(1))
    with region(a, "layer"):
        a.S_ADDI_INT(gp(5), gp(0), 2)
    assert a.text() == NESTED
    direct = a.program("nested.asm")
    assert direct.regions == NESTED_REGIONS
    assert direct == assemble(a.text(), "nested.asm")


def test_empty_region_and_region_at_the_end():
    prog = assemble("; @region a\n; @region b\n; @endregion\nS_ADDI_INT gp1, gp0, 1\n; @region c\n; @endregion\n"
                    "; @endregion\n", "e.asm")  # fmt: skip
    assert prog.regions == (("a", 0, 1), ("a/b", 0, 0), ("a/c", 1, 1))


def test_plain_comments_stay_comments():
    text = "; region x\n; @regionx\n// @ region y\n; @endregions\n;; @region z\nS_ADDI_INT gp1, gp0, 1 ; a @ note\n"
    prog = assemble(text, "p.asm")
    assert prog.regions == () and prog.words.tolist() == assemble("S_ADDI_INT gp1, gp0, 1", "q.asm").words.tolist()


def test_double_slash_markers():
    prog = assemble("// @region a\nS_ADDI_INT gp1, gp0, 1\n  //   @endregion\n", "s.asm")
    assert prog.regions == (("a", 0, 1),)


def _error(text):
    with pytest.raises(AssemblerError) as exc:
        assemble(text, "u.asm")
    return exc.value


def test_endregion_without_open_region_is_an_error_of_its_line():
    e = _error("S_ADDI_INT gp1, gp0, 1\n; @region a\n; @endregion\n  ; @endregion\n")
    assert (e.line_no, e.column, e.token) == (4, 5, "@endregion")
    assert e.reason == "@endregion without an open region"
    assert len(e.diagnostics) == 1


def test_unclosed_regions_are_errors_of_their_lines():
    e = _error("; @region outer\nS_ADDI_INT gp1, gp0, 1\n; @region inner\nS_ADDI_INT gp2, gp0, 1\n")
    assert [(d.line, d.reason) for d in e.diagnostics] == [
        (1, "region 'outer' is never closed (missing @endregion)"),
        (3, "region 'outer/inner' is never closed (missing @endregion)"),
    ]


def test_region_errors_are_collected_with_the_other_errors():
    e = _error("; @region a\nS_BOGUS gp1\n")
    assert [d.line for d in e.diagnostics] == [1, 2]
    assert "never closed" in e.diagnostics[0].reason and "unknown mnemonic" in e.diagnostics[1].reason


@pytest.mark.parametrize(
    "line,reason",
    [
        ("; @region", "@region needs a name"),
        ("; @region   ", "@region needs a name"),
        ("; @region (unlabelled)", "region name '(unlabelled)' must not start with '('"),
        ("; @endregion a", "@endregion takes no name (it closes the innermost region), got 'a'"),
        ("S_ADDI_INT gp1, gp0, 1 ; @region a", "@region must be on a line of its own"),
        ("S_ADDI_INT gp1, gp0, 1 // @endregion", "@endregion must be on a line of its own"),
    ],
)
def test_malformed_markers(line, reason):
    e = _error(line + "\n")
    assert e.line_no == 1 and e.reason.startswith(reason)


def test_asm_unbalanced_markers_are_value_errors_naming_the_region():
    a = Asm()
    with region(a, "outer"):
        a.comment("@region inner")  # the body's @endregion closes "outer/inner": "outer" stays open
        a.S_ADDI_INT(gp(1), gp(0), 1)
    with pytest.raises(ValueError, match=r"^Asm: region 'outer' is never closed"):
        a.program("x.asm")
    b = Asm()
    b.S_ADDI_INT(gp(1), gp(0), 1)
    b.comment("@endregion")
    with pytest.raises(ValueError, match=r"^Asm: line 2 '; @endregion': @endregion without an open region"):
        b.program("y.asm")


def test_region_name_rules_of_asm_region_are_unchanged():
    for bad in ("", " a", "a\nb", "(x)"):
        with pytest.raises(ValueError, match="must be one non-empty line"), region(Asm(), bad):
            pass


def test_programs_without_markers_have_no_regions():
    words = assemble(NESTED, "n.asm").words
    assert Program.from_words(words).regions == ()
    assert Program(words, assemble(NESTED, "n.asm").source, "n.asm").regions == ()
    with pytest.raises(ValueError, match="not inside the program"):
        Program(words, assemble(NESTED, "n.asm").source, "n.asm", regions=[("a", 3, 10)])


# ------------------------------------------------------------------------------------------- the run


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_regions_serial_exact(backend):
    res = run(NESTED, backend)
    assert res.cycles == 229 and res.instructions == 19
    assert res.outcome.pc_count.tolist() == SERIAL_PC_COUNT
    assert res.outcome.pc_cycles.tolist() == SERIAL_PC_CYCLES
    assert core(res.stats["regions"]) == [
        entry("layer", 1 + 3 + 1, 1 + 3 + 1, 1 + 3 * (64 + 1 + 1 + 8) + 3 + 1),  # both occurrences summed
        entry("layer/matmul", 6, 3 * 65, 3 * 65, 3 * M_MM_MACS),
        entry("layer/softmax", 6, 3 * 9, 3 * 9),
        entry("tail", 1, 1, 1),
        entry("(unlabelled)", 1, 1, 1),
    ]
    assert_sums(res)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_regions_overlap_exact(backend):
    res = run(NESTED, backend, "overlap")
    assert res.cycles == 214 and res.instructions == 19
    assert res.outcome.pc_count.tolist() == SERIAL_PC_COUNT
    assert res.outcome.pc_cycles.tolist() == OVERLAP_PC_CYCLES
    assert core(res.stats["regions"]) == [
        entry("layer", 5, 1 + 0 + 1, 1 + 180 + 3 + 3 + 24 + 0 + 1),
        entry("layer/matmul", 6, 180 + 3, 183, 3 * M_MM_MACS),
        entry("layer/softmax", 6, 27, 27),
        entry("tail", 1, 1, 1),
        entry("(unlabelled)", 1, 1, 1),
    ]
    assert_sums(res)


def test_program_without_regions_has_one_unlabelled_entry():
    res = run(assemble("S_ADDI_INT gp1, gp0, 1\nM_MM 0, gp0, gp0", "p.asm"))
    assert core(res.stats["regions"]) == [entry("(unlabelled)", 2, 65, 65, M_MM_MACS)]


def test_mem_program_has_no_regions(tmp_path):
    from isa.memfile import write_mem

    path = tmp_path / "n.mem"
    write_mem(path, assemble(NESTED, "n.asm").words.tolist())
    res = run(path)
    assert res.cycles == 229 and core(res.stats["regions"]) == [entry("(unlabelled)", 19, 229, 229, 3 * M_MM_MACS)]


#: faults in the second iteration: gp7 = 1 is not a VRAM row address (AL-VROW)
FAULTING = """\
S_ADDI_INT gp1, gp0, 1
; @region work
C_LOOP_START gp2, 3
; @region vec
V_ADD_VV gp7, gp0, gp0
; @endregion
S_ADDI_INT gp7, gp7, 1
C_LOOP_END gp2
; @endregion
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timing", MODES)
def test_run_that_faults_reports_regions_summing_to_its_cycles(backend, timing):
    res = run(FAULTING, backend, timing, raise_on_fault=False)
    assert res.fault is not None and res.fault.pc == 2
    assert res.instructions == 5 and res.cycles == 5  # S_ADDI, START, V_ADD, S_ADDI, END; the second V_ADD faults
    assert res.outcome.pc_count.tolist() == [1, 1, 1, 1, 1]
    assert res.outcome.pc_cycles.tolist() == [1, 1, 1, 1, 1]
    assert core(res.stats["regions"]) == [
        entry("work", 3, 3, 4),
        entry("work/vec", 1, 1, 1),
        entry("(unlabelled)", 1, 1, 1),
    ]
    assert res.fault.stats["regions"] == res.stats["regions"]
    assert_sums(res)


#: hardware loops (nested, taken C_LOOP_END, C_BREAK) and DMA (H_PREFETCH_V / H_STORE_V: HBM-model latencies that
#: depend on the start cycle; the stores need more HBM pool pages: the run loop is re-entered)
LOOPS_AND_DMA = """\
S_ADDI_INT gp2, gp0, 256
C_SET_SCALE_REG gp2
C_LOOP_START gp1, 3
; @region dma
H_PREFETCH_V gp3, gp4, a0, 0, 0
H_STORE_V gp3, gp4, a1, 0, 0
; @endregion
S_ADDI_INT gp4, gp4, 4096
; @region compute
C_LOOP_START gp5, 4
V_ADD_VV gp3, gp3, gp3
M_MM 0, gp0, gp3
V_RED_SUM f1, gp3
C_LOOP_END gp5
; @endregion
C_LOOP_END gp1
C_LOOP_START gp6, 5
S_ADD_FP f2, f1, f1
C_BREAK
S_ADD_FP f3, f2, f2
C_LOOP_END gp6
"""


def _dma_machine(backend, timing):
    """A machine whose HBM page pool starts empty: every new page the stores write is a re-entry of the run loop."""
    m = Machine(CFG, backend=backend, timing=timing, hbm=Hbm(CFG.HBM_SIZE, initial_pages=0))
    m.set_reg("a1", 1 << 30)
    return m


def _run_both(prog, timing):
    return [_dma_machine(backend, timing).run(prog) for backend in BACKENDS]


@pytest.mark.parametrize("timing", (*MODES, "rtl"))
def test_backends_identical_profiles_with_loops_and_dma(timing):
    jit, ref = _run_both(LOOPS_AND_DMA, timing)
    assert np.array_equal(jit.outcome.pc_count, ref.outcome.pc_count)
    assert np.array_equal(jit.outcome.pc_cycles, ref.outcome.pc_cycles)
    assert jit.stats["regions"] == ref.stats["regions"] and jit.cycles == ref.cycles
    assert jit.outcome.pc_count.tolist() == [1, 1, 1, 3, 3, 3, 3, 12, 12, 12, 12, 3, 1, 1, 1, 0, 0]
    assert [e["path"] for e in jit.stats["regions"]] == ["dma", "compute", "(unlabelled)"]
    assert [e["instructions"] for e in jit.stats["regions"]] == [6, 3 + 48, 3 + 3 + 3 + 3]
    dma_cycles = int(jit.outcome.pc_cycles[3:5].sum())
    assert jit.stats["regions"][0]["cycles_inclusive"] == jit.stats["regions"][0]["cycles_exclusive"] == dma_cycles
    assert_sums(jit)
    assert_sums(ref)


@pytest.mark.parametrize("timing", (*MODES, "rtl"))
def test_profile_cycles_are_the_traced_cycle_counter_steps(timing):
    """pc_cycles[pc] = Σ over its retired instructions of (cycle counter after - before): in serial the latency
    (H_*: the HBM model's, from the trace), in overlap the growth of the largest end so far."""
    res = _dma_machine("numba", timing).run(LOOPS_AND_DMA, trace=True)
    expected = np.zeros(len(res.outcome.pc_cycles), dtype=np.int64)
    counter = 0
    for r in res.trace.rows():
        expected[r["pc"]] += max(counter, r["end"]) - counter
        counter = max(counter, r["end"])
    assert counter == res.cycles
    assert res.outcome.pc_cycles.tolist() == expected.tolist()
    if timing == "serial":
        dma = [r["cycles"] for r in res.trace.rows() if r["pc"] in (3, 4)]
        assert len(dma) == 6 and res.stats["regions"][0]["cycles_exclusive"] == sum(dma)


# ------------------------------------------------------------------------------------------- resource fields

#: rtl (docs/timing.md), by hand: S_ADDI_INT 0-1; M_MM 1-9 (BLEN + 4); M_MM_WO waits for ACC_M: 9-30 (2*BLEN + 13);
#: V_ADD_VV waits for the rows written: 30-42 (12)
RTL_NESTED = """\
S_ADDI_INT gp1, gp0, 64
; @region outer
M_MM 0, gp0, gp0
; @region inner
M_MM_WO gp1, gp0, 0
V_ADD_VV gp2, gp1, gp1, 0
; @endregion
; @endregion
"""


def _busy(**kw):
    names = ("scalar", "vector", "matrix_compute", "matrix_writeout", "hbm_matrix_dma", "hbm_vector_dma")
    return dict.fromkeys((*names, "hbm_store", "control"), 0) | kw


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_regions_under_rtl_exact(backend):
    from plena_sim.timing.rtl import STALL_REASONS

    res = run(assemble(RTL_NESTED, "r.asm"), backend, "rtl")
    assert res.cycles == 42 and res.outcome.pc_cycles.tolist() == [1, 8, 21, 12]
    regions = res.stats["regions"]
    assert core(regions) == [
        entry("outer", 1, 8, 8 + 33, M_MM_MACS),
        entry("outer/inner", 2, 33, 33),
        entry("(unlabelled)", 1, 1, 1),
    ]
    assert [e["busy"] for e in regions] == [
        _busy(matrix_compute=8),
        _busy(matrix_writeout=21, vector=1),
        _busy(scalar=1),
    ]
    none = dict.fromkeys(STALL_REASONS, 0)
    assert [e["stalls"] for e in regions] == [none, none | {"operand_not_ready": 7 + 20}, none]
    assert [e["mac_utilization"] for e in regions] == [M_MM_MACS / (8 * CFG.BLEN * CFG.MLEN), 0.0, 0.0]
    assert_sums(res)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_regions_serial_busy_exact(backend):
    res = run(NESTED, backend)
    assert [e["busy"] for e in res.stats["regions"]] == [
        _busy(control=1 + 3, scalar=1),
        _busy(matrix_compute=3 * 64, matrix_writeout=3),
        _busy(vector=3 * (1 + 8)),
        _busy(scalar=1),
        _busy(scalar=1),
    ]
    assert all(not any(e["stalls"].values()) for e in res.stats["regions"])  # serial: no stall


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timing", (*MODES, "rtl"))
def test_dma_regions_book_their_hbm_bytes(backend, timing):
    res = run(LOOPS_AND_DMA, backend, timing)
    dma = next(e for e in res.stats["regions"] if e["path"] == "dma")
    assert dma["hbm_read_bytes"] == res.stats["hbm"]["bytes_read"] > 0
    assert dma["hbm_write_bytes"] == res.stats["hbm"]["bytes_written"] > 0
    assert dma["busy"]["hbm_vector_dma"] + dma["busy"]["hbm_store"] == res.stats["unit_busy_cycles"]["H"]
    assert_sums(res)
