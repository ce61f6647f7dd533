"""The resource statistics on real kernels in every timing model (docs/timing.md): the critical path and the region
exclusive cycles sum exactly to the cycles, busy cycles match the unit totals, rtl passes the same checks and is
identical between two runs."""

import pytest

import testbenches
from plena_sim.timing.rtl import RESOURCES
from testbenches.harness import run
from testbenches.variants import get_config

MODELS = ("serial", "overlap", "rtl")
#: statistics resource -> unit letter (timing.md §2 units)
UNIT_OF_RESOURCE = {
    "scalar": "S",
    "vector": "V",
    "matrix_compute": "M",
    "matrix_writeout": "M",
    "hbm_matrix_dma": "H",
    "hbm_vector_dma": "H",
    "hbm_store": "H",
    "control": "C",
}


def _case(name):
    mod = testbenches.get(name)
    return mod.build(dict(mod.DEFAULTS), get_config("default"))


@pytest.mark.parametrize("timing", MODELS)
@pytest.mark.parametrize(
    "name", ["flashattn_prefill", "linear", "softmax", "rms_norm", "h_store", "moe_topk", "s_map_v"]
)
def test_statistics_sum_to_the_run(name, timing):
    rep = run(_case(name), timing=timing)
    st = rep.stats
    assert rep.passed, rep.summary
    assert sum(st["critical_path"].values()) == rep.cycles
    assert sum(e["cycles_exclusive"] for e in st["regions"]) == rep.cycles
    assert list(st["busy"]) == list(RESOURCES)
    for unit, busy in st["unit_busy_cycles"].items():
        assert sum(b for r, b in st["busy"].items() if UNIT_OF_RESOURCE[r] == unit) == busy
    assert st["mac_utilization"] == st["matrix_macs"] / (rep.cycles * 64 * 4)
    if timing == "serial":  # no stall; every instruction's latency is on the path
        assert not any(st["stalls"].values()) and st["critical_path"] == st["busy"]
    if timing == "overlap":
        o = st["overlap"]
        assert o["stall_unit"] == st["stalls"]["unit_busy"]
        assert o["stall_data"] == st["stalls"]["operand_not_ready"] + st["stalls"]["write_after_read"]
    if timing == "rtl":
        again = run(_case(name), timing="rtl")
        assert again.cycles == rep.cycles and again.stats["stalls"] == st["stalls"]
        u = st["unvalidated"]
        assert u["share"] == u["cycles"] / rep.cycles and 0 <= u["cycles"] <= rep.cycles


@pytest.mark.parametrize("name", ["softmax", "s_map_v", "h_store"])
def test_rtl_identical_between_the_backends_on_a_kernel(name):
    jit = run(_case(name), timing="rtl")
    ref = run(_case(name), timing="rtl", backend="reference")
    assert jit.passed and ref.passed
    assert jit.cycles == ref.cycles
    for key in ("busy", "stalls", "critical_path", "unvalidated", "regions", "unit_busy_cycles"):
        assert jit.stats[key] == ref.stats[key], key
