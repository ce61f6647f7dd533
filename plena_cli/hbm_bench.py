"""HBM microbenchmark (issue 14, item 3; docs/hbm.md): one DMA of N bytes through the HBM timing model.

One job: measure the latency and bandwidth of a single DMA -- contiguous, strided (one 64 B block per row at
several pitches), the same blocks in random order, and random scattered blocks -- for reads (H_PREFETCH_M and
H_PREFETCH_V: the scheduler sees only reads) and writes (H_STORE_V), on 1, 2, 4 and 8 channels (the preset with
``[HBM_TIMING] channels`` overridden), on an idle memory and on a warm one; and set each number beside the closed
forms of timing.md §5.5 and the peak of an HBM2 stack as Ramulator2 publishes it (2 Gb/s/pin, 1024-bit stack:
256 GB/s, 32 GB/s per 128-bit channel; no 50 % cap).

It drives the same Numba kernels as the simulator core (:class:`plena_sim.hbm.timing.HbmTimer`). The model's
clock is the accelerator's (1 cycle = 1 ns), so a bandwidth in B/cycle is in GB/s.

* :func:`measure_points` ``(sizes, channels, preset) -> list[Point]``: every measured DMA.
* :func:`closed_form` ``(params, nbytes, is_write)`` (contiguous) and :func:`closed_form_strided` ``(params, pitch,
  nbytes, is_write)``: the exact cycles on an idle memory (timing.md §5.5).
* :func:`markdown_table` ``(points) -> str``: the docs table; :func:`main`: ``plena-sim hbm-bench``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from plena_sim.hbm.presets import ACCEL_CYCLE_PS, TimingParams, load_preset
from plena_sim.hbm.timing import HbmTimer, map_address

__all__ = [
    "SIZES",
    "CHANNELS",
    "PITCHES",
    "SEEDS",
    "RAMULATOR2_GBPS_PER_CHANNEL",
    "Point",
    "bench_params",
    "pattern_blocks",
    "warm_traffic",
    "dma_cycles",
    "closed_form",
    "closed_form_strided",
    "ramulator2_peak_gbps",
    "markdown_report",
    "measure_points",
    "markdown_table",
]

#: bytes of the one DMA
SIZES = (256, 1024, 4096, 16384, 65536, 1 << 20)
CHANNELS = (1, 2, 4, 8)
#: strided: one 64 B block per row at these pitches (bytes)
PITCHES = (128, 4096, 1 << 16, 1 << 21)
#: seeds of the random block orders / random block sets
SEEDS = (0, 1, 2, 3)
#: Ramulator2 HBM2: 2 Gb/s/pin x 128 bit per channel = 32 GB/s; 8 channels (1024-bit stack) = 256 GB/s
RAMULATOR2_GBPS_PER_CHANNEL = 32.0
_SPACE_BLOCKS = 1 << 20  # random blocks are drawn from the first 64 MiB

OPS = (("read", "H_PREFETCH_M / H_PREFETCH_V"), ("write", "H_STORE_V"))
STATES = ("idle", "warm")


@dataclass(frozen=True)
class Point:
    """One measured DMA."""

    op: str  # "read" | "write"
    state: str  # "idle" | "warm"
    pattern: str  # "contiguous" | "strided" | "random order" | "random blocks"
    pitch: int  # strided: bytes between rows; else 0
    seed: int  # random patterns: the seed; else -1
    channels: int
    nbytes: int
    cycles: int
    closed_form: int | None  # exact expected cycles (idle memory), None where no closed form is stated

    @property
    def gbps(self) -> float:
        """Payload bandwidth: bytes per 1 ns cycle = GB/s."""
        return self.nbytes / self.cycles

    def as_dict(self) -> dict:
        return {**asdict(self), "gbps": self.gbps}


def bench_params(channels: int, preset: str = "HBM2") -> TimingParams:
    """``preset`` with ``channels`` channels (the ``[HBM_TIMING] channels`` override)."""
    return load_preset(preset, {"channels": channels})


def pattern_blocks(pattern: str, nbytes: int, burst: int, pitch: int = 0, seed: int = -1) -> list[int]:
    """Block indices (in generation order) of one DMA of ``nbytes`` bytes in ``pattern``."""
    n = max(1, nbytes // burst)
    if pattern == "contiguous":
        return list(range(n))
    if pattern == "strided":
        return [i * pitch // burst for i in range(n)]
    rng = np.random.default_rng(seed)
    if pattern == "random order":
        return [int(b) for b in rng.permutation(n)]
    if pattern == "random blocks":
        return [int(b) for b in rng.choice(_SPACE_BLOCKS, size=n, replace=False)]
    raise ValueError(f"unknown pattern {pattern!r}")


def warm_traffic(params: TimingParams) -> list[int]:
    """The read that warms the memory: one block in every bank of every channel, in DRAM row 0 for the odd bank
    groups and row 1 for the even ones -- so a DMA at address 0 finds a mix of open rows it wants (row hits) and
    open rows it must close (row conflicts), as in a running program; no bank is left closed."""
    out: dict[tuple[int, int, int], int] = {}
    want = params.channels * params.banks
    blk = 0
    while len(out) < want:
        f = map_address(params, blk * params.burst_bytes)
        key = (f.channel, f.bank_group, f.bank)
        if key not in out and f.row == (0 if f.bank_group % 2 else 1):
            out[key] = blk
        blk += 1
    return list(out.values())


def dma_cycles(params: TimingParams, blocks: Sequence[int], is_write: bool, warm: bool) -> int:
    """Latency (cycles) of one DMA of ``blocks``: on an idle memory at cycle 0, or right after the warm read."""
    before = warm_traffic(params) if warm else []
    timer = HbmTimer(params, max_blocks=max(len(blocks), len(before), 1))
    t0 = timer.latency_of_blocks(before, False, 0) if warm else 0
    return timer.latency_of_blocks(blocks, is_write, t0)


def closed_form(params: TimingParams, nbytes: int, is_write: bool) -> int:
    """Exact cycles of a contiguous DMA of ``nbytes`` aligned at 0 on an idle memory (timing.md §5.5).

    Every channel gets ``m = ceil(n / channels)`` requests whose consecutive ones alternate bank groups (the §5.2
    mapping); every bank is opened at t0, and the PRE/ACT of a bank's later DRAM rows hide behind the other
    banks' transfers: ``tRCD + (tCL | tCWL) + m * tBL`` -- the §5.5 rows "n requests in one channel, banks
    closed, consecutive requests in different bank groups: 28 + 2n" (reads) and "single 64 B write: 20"."""
    n = max(1, nbytes // params.burst_bytes)
    per_channel = -(-n // params.channels)
    hbm_cycles = params.tRCD + (params.tCWL if is_write else params.tCL) + per_channel * params.tBL
    return _accel_cycles(params, hbm_cycles)


def closed_form_strided(params: TimingParams, pitch: int, nbytes: int, is_write: bool) -> int | None:
    """§5.5: 64 single-block reads at pitch 2^21 B, idle 8-channel HBM2: ``7 (tRAS + tRP) + tRCD + tCL + tBL``."""
    n = nbytes // params.burst_bytes
    if params.name != "HBM2" or params.channels != 8 or is_write or n != 64 or pitch != 1 << 21:
        return None
    return _accel_cycles(params, 7 * (params.tRAS + params.tRP) + params.tRCD + params.tCL + params.tBL)


def _accel_cycles(params: TimingParams, hbm_cycles: int) -> int:
    """HBM clock cycles -> accelerator cycles, rounded up (timing.md §5.4: ``ceil((end - t0) / 1000)``)."""
    return -(-hbm_cycles * params.tCK_ps // ACCEL_CYCLE_PS)


def _points_of(params: TimingParams, op: str, state: str, nbytes: int) -> Iterable[Point]:
    is_write = op == "write"
    warm = state == "warm"
    cases: list[tuple[str, int, int]] = [("contiguous", 0, -1)]
    cases += [("strided", p, -1) for p in PITCHES]
    cases += [(pat, 0, s) for pat in ("random order", "random blocks") for s in SEEDS]
    for pattern, pitch, seed in cases:
        blocks = pattern_blocks(pattern, nbytes, params.burst_bytes, pitch, seed)
        cf = None
        if not warm:
            if pattern == "contiguous":
                cf = closed_form(params, nbytes, is_write)
            elif pattern == "strided":
                cf = closed_form_strided(params, pitch, nbytes, is_write)
        yield Point(
            op, state, pattern, pitch, seed, params.channels, nbytes, dma_cycles(params, blocks, is_write, warm), cf
        )


def measure_points(
    sizes: Sequence[int] = SIZES, channels: Sequence[int] = CHANNELS, preset: str = "HBM2"
) -> list[Point]:
    """Every DMA of the table: op x state x channels x size x pattern (x pitch / seed)."""
    out: list[Point] = []
    for ch in channels:
        params = bench_params(ch, preset)
        for op, _label in OPS:
            for state in STATES:
                for nbytes in sizes:
                    out.extend(_points_of(params, op, state, nbytes))
    return out


def ramulator2_peak_gbps(channels: int) -> float:
    """Ramulator2's published HBM2 peak for ``channels`` 128-bit channels at 2 Gb/s/pin (256 GB/s per stack)."""
    return RAMULATOR2_GBPS_PER_CHANNEL * channels


def _fmt_size(nbytes: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1024)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def _cell(points: list[Point]) -> str:
    """``cycles (GB/s)``; several seeds: the median cycles, with the range."""
    cyc = sorted(p.cycles for p in points)
    nbytes = points[0].nbytes
    if len(cyc) == 1:
        return f"{cyc[0]:,} ({nbytes / cyc[0]:.1f})"
    med = int(statistics.median(cyc))
    return f"{med:,} ({nbytes / med:.1f}) [{cyc[0]:,}-{cyc[-1]:,}]"


def markdown_table(points: Sequence[Point], op: str, state: str, preset: str = "HBM2") -> str:
    """One markdown table: rows = (channels, size), columns = patterns; cells ``cycles (GB/s)``."""
    sel = [p for p in points if p.op == op and p.state == state]
    pitches = sorted({p.pitch for p in sel if p.pattern == "strided"})
    cols = ["contiguous"] + [f"strided {_fmt_size(q)}" for q in pitches] + ["random order", "random blocks"]
    head = "| ch | peak GB/s | size | closed form | " + " | ".join(cols) + " | contiguous % of peak |"
    lines = [head, "|" + "---|" * (len(cols) + 5)]
    for ch in sorted({p.channels for p in sel}):
        peak = bench_params(ch, preset).peak_bytes_per_cycle
        for nbytes in sorted({p.nbytes for p in sel}):
            group = [p for p in sel if p.channels == ch and p.nbytes == nbytes]
            contig = next(p for p in group if p.pattern == "contiguous")
            cells = [_cell([contig])]
            cells += [_cell([p for p in group if p.pattern == "strided" and p.pitch == q]) for q in pitches]
            cells += [_cell([p for p in group if p.pattern == pat]) for pat in ("random order", "random blocks")]
            cf = "-" if contig.closed_form is None else f"{contig.closed_form:,}"
            pct = 100 * contig.gbps / peak
            lines.append(f"| {ch} | {peak:.0f} | {_fmt_size(nbytes)} | {cf} | " + " | ".join(cells) + f" | {pct:.1f} |")
    return "\n".join(lines)


def markdown_report(points: Sequence[Point], preset: str = "HBM2") -> str:
    """Every (op, state) table, each under a heading line."""
    parts = []
    for op, label in OPS:
        for state in STATES:
            parts.append(
                f"**{op}s ({label}), {state} memory** -- cycles (GB/s)\n\n" + markdown_table(points, op, state, preset)
            )
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m plena_cli.hbm_bench [--json] [--preset NAME]``: print the tables (markdown) or the points."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="python -m plena_cli.hbm_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print every point as JSON")
    ap.add_argument("--preset", default="HBM2", help="HBM timing preset (default HBM2)")
    args = ap.parse_args(argv)
    points = measure_points(preset=args.preset)
    if args.json:
        sys.stdout.write(json.dumps([p.as_dict() for p in points]) + "\n")
    else:
        sys.stdout.write(markdown_report(points, args.preset))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
