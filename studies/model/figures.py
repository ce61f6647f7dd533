"""What a model's layer cycles imply: the clock of a hardware preset, one layer's time, the TTFT and the decode
rate, and the cycles per region of both runs side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_CLOCK_HZ", "clock_of", "layer_figures", "merge_regions", "roofline", "run_roofline"]

#: the clock of a hardware preset that names none: timing.md counts cycles of 1 ns
DEFAULT_CLOCK_HZ = 1e9


def clock_of(hw: str) -> tuple[float, str]:
    """``(clock_hz, source)``: the preset's ``clock_mhz``, else 1 GHz (the 1 ns cycles of timing.md)."""
    from plena_sim.config.presets import preset_info

    mhz = preset_info(hw).clock_mhz
    if mhz is not None:
        return mhz * 1e6, f"preset {hw}: clock_mhz = {mhz:g}"
    return DEFAULT_CLOCK_HZ, f"timing.md's 1 ns cycles: preset {hw} has no clock_mhz"


def layer_figures(
    layers: int, batch: int, prefill_layer_cycles: int | None, decode_layer_cycles: int | None, clock_hz: float
) -> dict[str, float | None]:
    """One layer's time, the TTFT (``layers x`` the prefill layer) and the decode rate (``batch`` tokens per
    step of ``layers x`` the decode layer); a run not made (None cycles) leaves its figures None, and the rate is
    None without decode cycles."""
    pre, dec = prefill_layer_cycles, decode_layer_cycles
    step_s = None if dec is None else layers * dec / clock_hz
    return {
        "prefill_layer_s": None if pre is None else pre / clock_hz,
        "decode_layer_s": None if dec is None else dec / clock_hz,
        "ttft_s": None if pre is None else layers * pre / clock_hz,
        "decode_step_s": step_s,
        "decode_tokens_per_s": batch / step_s if step_s else None,
    }


def merge_regions(prefill: Sequence[Mapping[str, Any]], decode: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The regions of both runs, one row per path (prefill's order, then the decode-only paths):
    ``{"path", "prefill": {...} | None, "decode": {...} | None}``, each run's counters without the path."""
    rows: dict[str, dict[str, Any]] = {}
    for phase, regions in (("prefill", prefill), ("decode", decode)):
        for region in regions:
            path = str(region["path"])
            row = rows.setdefault(path, {"path": path, "prefill": None, "decode": None})
            row[phase] = {k: v for k, v in region.items() if k != "path"}
    return list(rows.values())


def roofline(
    macs: int, hbm_bytes: int, cycles: int, array_macs: int, hbm_bytes_per_cycle: float, clock_hz: float
) -> dict:
    """The two bounds of a piece of work and how close the simulated time comes to the binding one: the compute
    bound (``macs`` / the array's ``array_macs`` MACs per cycle), the memory bound (``hbm_bytes`` the HBM model
    moved / the preset's peak bytes per cycle), both in seconds at ``clock_hz``, the simulated time, the binding
    bound and ``attained_fraction`` = binding bound / simulated time (1.0: at the roof)."""
    compute = macs / array_macs if array_macs else 0.0
    memory = hbm_bytes / hbm_bytes_per_cycle if hbm_bytes_per_cycle else 0.0
    bound = max(compute, memory)
    return {
        "compute_bound_s": compute / clock_hz,
        "memory_bound_s": memory / clock_hz,
        "simulated_s": cycles / clock_hz,
        "binding": "compute" if compute >= memory else "memory",
        "attained_fraction": bound / cycles if cycles else None,
    }


def run_roofline(stats: Mapping[str, Any], clock_hz: float, stage_prefix: str = "layer/") -> dict:
    """:func:`roofline` of a whole run (its ``stats``) and of each top-level stage region ``<prefix><stage>``."""
    cfg, hbm = stats.get("config") or {}, stats.get("hbm") or {}
    array = int(cfg.get("MLEN", 0)) * int(cfg.get("BLEN", 0))
    peak = float(hbm.get("peak_bandwidth_GBps") or 0.0)  # bytes per cycle (timing.md: 1 ns cycles)
    moved = int(hbm.get("bytes_read", 0)) + int(hbm.get("bytes_written", 0))
    out = roofline(int(stats.get("matrix_macs", 0)), moved, int(stats.get("cycles", 0)), array, peak, clock_hz)
    regions = stats.get("regions") or []
    stages = {}
    for region in regions:
        path = str(region["path"])
        if path.startswith(stage_prefix) and "/" not in path[len(stage_prefix) :]:
            inner = [r for r in regions if r["path"] == path or str(r["path"]).startswith(path + "/")]
            macs = sum(int(r.get("macs", 0)) for r in inner)  # a region's own counts: its nested regions added
            nbytes = sum(int(r.get("hbm_read_bytes", 0)) + int(r.get("hbm_write_bytes", 0)) for r in inner)
            cycles = int(region.get("cycles_inclusive", 0))
            stages[path[len(stage_prefix) :]] = roofline(macs, nbytes, cycles, array, peak, clock_hz)
    out["stages"] = stages
    return out
