"""What a model's layer cycles imply: the clock of a hardware preset, one layer's time, the TTFT and the decode
rate, and the cycles per region of both runs side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_CLOCK_HZ", "clock_of", "layer_figures", "merge_regions"]

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
    layers: int, batch: int, prefill_layer_cycles: int, decode_layer_cycles: int, clock_hz: float
) -> dict[str, float | None]:
    """One layer's time, the TTFT (``layers x`` the prefill layer) and the decode rate (``batch`` tokens per
    step of ``layers x`` the decode layer); the rate is None without decode cycles."""
    step_s = layers * decode_layer_cycles / clock_hz
    return {
        "prefill_layer_s": prefill_layer_cycles / clock_hz,
        "decode_layer_s": decode_layer_cycles / clock_hz,
        "ttft_s": layers * prefill_layer_cycles / clock_hz,
        "decode_step_s": step_s,
        "decode_tokens_per_s": batch / step_s if step_s > 0 else None,
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
