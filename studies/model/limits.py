"""What a functional model run would cost the host, known before any input is built (issue 38 item 3).

One job: estimate the peak memory and the host time of the functional runs of a :class:`~.run.ModelRun` from its
plan alone (the HBM tensors of each layer, :func:`programs.model.decoder.layer_hbm_needs`, and its matrix MACs),
and refuse a run far beyond this machine with the estimate and the flags that help.

Calibration (measured on the 2-core development machine, llama-3.1-8b on v80-128x64 at seq 512: 229 M tensor
elements, 112 G MACs; inputs 53 s, simulation 22 s, judging 24 s, peak 5.3-7.2 GB): the host holds about
:data:`BYTES_PER_ELEMENT` bytes per tensor element (float64 values, the device's float32 view, the encoded image,
the goldens), builds and judges :data:`ELEMENTS_PER_S` elements per second each, and the core computes
:data:`MACS_PER_S` bit-exact MACs per second (v80 tiles; smaller tiles are slower, so the estimate is a lower
bound there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ModelError

if TYPE_CHECKING:
    from .run import ModelRun

__all__ = ["Estimate", "functional_estimate", "check_limits", "MAX_HOST_S", "BYTES_PER_ELEMENT"]

BYTES_PER_ELEMENT = 32
ELEMENTS_PER_S = 4.3e6
MACS_PER_S = 5e9
#: the base of a process with the simulator loaded (bytes)
BASE_BYTES = 1 << 30
#: a functional run longer than this (host seconds) is refused unless forced
MAX_HOST_S = 1800.0
#: the share of this machine's memory a run may plan to use
MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class Estimate:
    """Peak host memory (bytes) and host time (seconds) of a functional run, and what they come from."""

    peak_bytes: int
    host_s: float
    elements: int
    macs: int


def _phase_estimate(run: ModelRun, phase: str) -> Estimate:
    """One run's estimate from the preset's shape (the layer the testbench would build, with no chunking)."""
    from plena_sim.config.presets import load_preset
    from programs.model.decoder import layer_hbm_needs
    from testbenches._decoder_common import shape_of

    _tb, params = run.testbench_params()[phase]
    cfg = load_preset(run.hw)
    s = shape_of({"experts": 0, "top_k": 0, **params}, cfg, phase == "decode")
    elements = sum(r * c for r, c in layer_hbm_needs(cfg, s).values())
    macs = s.macs()
    host_s = 2 * elements / ELEMENTS_PER_S + macs / MACS_PER_S
    return Estimate(BASE_BYTES + BYTES_PER_ELEMENT * elements, host_s, elements, macs)


def functional_estimate(run: ModelRun) -> Estimate:
    """The whole run: the larger peak of its phases, the sum of their times (they run one after the other)."""
    parts = [_phase_estimate(run, phase) for phase in run.phases]
    return Estimate(
        max(e.peak_bytes for e in parts),
        sum(e.host_s for e in parts),
        max(e.elements for e in parts),
        sum(e.macs for e in parts),
    )


def machine_bytes() -> int:
    """This machine's physical memory (bytes)."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_limits(run: ModelRun, memory: int | None = None, max_s: float = MAX_HOST_S) -> Estimate | None:
    """Refuse (ModelError) a functional run whose estimate exceeds :data:`MEMORY_SHARE` of ``memory`` (default:
    this machine's) or ``max_s`` host seconds, naming the estimate and the flags that help; the estimate otherwise
    (None for a timing-only run, which builds no input, and for a shape that does not plan)."""
    if run.timing_only:
        return None
    try:
        est = functional_estimate(run)
    except ValueError:  # a shape that does not plan: the run refuses it itself, naming the parameter
        return None
    memory = machine_bytes() if memory is None else memory
    over = []
    if est.peak_bytes > MEMORY_SHARE * memory:
        over.append(f"about {est.peak_bytes / 2**30:.1f} GiB of host memory (this machine has {memory / 2**30:.1f})")
    if est.host_s > max_s:
        over.append(f"about {_duration(est.host_s)} of host time (the limit is {_duration(max_s)})")
    if over:
        raise ModelError(
            f"{run.preset.name} at seq {run.seq}, kv {run.kv} on {run.hw}: a functional run needs "
            + " and ".join(over)
            + f" ({est.elements / 1e6:.0f} M tensor elements, {est.macs / 1e12:.2f} T MACs computed bit-exactly); "
            "--timing-only gives the same cycles without building any input, or use a smaller --seq / --kv "
            "(--force runs it anyway)"
        )
    return est


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"
