"""What a kernel plan declares about the machine it uses (kernels.md §1.1): :class:`Footprint`, and
:class:`KernelPlan`, the fields every generator's plan carries besides its own numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

from plena_sim.config import HardwareConfig

from .common import Region

__all__ = ["Footprint", "KernelPlan"]


@dataclass
class Footprint:
    """The full footprint of a plan (kernels.md §1.1)."""

    vram_regions: dict[str, Region] = field(default_factory=dict)
    fp_range: tuple[int, int] | None = None  # (base, size) of FP SRAM state/outputs
    int_range: tuple[int, int] | None = None
    mram_tiles: tuple[int, int] | None = None  # (first tile, count)
    hbm_slack: dict[str, int] = field(default_factory=dict)  # tensor -> alloc_elems it needs


@dataclass(frozen=True, kw_only=True)
class KernelPlan:
    """The footprint fields of a plan (given by keyword; a plan's own fields come first, positionally), the
    config it was planned for and the registers its emitter takes (``take_regs``)."""

    vram_regions: dict[str, Region]
    fp_range: tuple[int, int] | None = None  # (base, size) of FP SRAM state/outputs
    int_range: tuple[int, int] | None = None  # (base, size) of INT SRAM
    mram_tiles: tuple[int, int] | None = None  # (first tile, count)
    hbm_slack: dict[str, int] = field(default_factory=dict)  # tensor -> alloc_elems it needs
    cfg: HardwareConfig = field(repr=False, compare=False)
    gp_needed: int
    fp_needed: int
