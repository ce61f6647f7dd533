"""Sensitivity of the attention testbenches (issue 21): single-key errors and the cases that must catch them.

A sensitivity mutation (:data:`programs.mutation_hooks.SENS_HOOKS`, named ``sens_*``) changes flash attention's
additive mask rows by one key: every masked row allows one key more (``sens_key_added``) or one less
(``sens_key_dropped``), or one lane of one mask row is wrong (``sens_mask_lane``).  Each must make EVERY case of
:data:`CASES` fail: the O check alone sees one key only when it carries mass (or through the rel-RMS bound on a
small output); the count probe's exact ``l_count`` check (:mod:`testbenches._flashattn_common`) sees it in every
affected row of the last block while the row's key count is at most 256.
"""

from __future__ import annotations

from programs.mutation_hooks import SENS_HOOKS

from . import get as _get
from .harness import cases_of
from .mutations import Exposure, run_mutation

__all__ = ["CASES", "DESCRIPTIONS", "SENS_HOOKS", "exposures", "run_mutation", "CI_CASES"]

DESCRIPTIONS = {
    "sens_key_added": "every masked row allows one key more (a future key, or one past kv_len)",
    "sens_key_dropped": "every masked row allows one key less",
    "sens_mask_lane": "one lane of one mask row (row 0 of every masked tile) wrong",
}


_PREFILL, _DECODE = "flashattn_prefill", "flashattn_decode"


def _required(testbench: str, case_id: str) -> Exposure:
    """A required case of ``testbench`` as an exposure (its overrides and variant from the case table)."""
    _cid, overrides, variant = cases_of(_get(testbench))[case_id]
    return Exposure(testbench, case_id, dict(overrides), variant)


#: the listed cases of every sensitivity mutation: causal edges, kv tails, GQA, per-head, cfg small, decode
CASES: tuple[Exposure, ...] = (
    *(_required(_PREFILL, cid) for cid in ("P1", "P2", "P3", "P6", "P9")),
    *(_required(_DECODE, cid) for cid in ("D1", "D7")),
    Exposure(_DECODE, "custom", {"kv_len": 200}, "default"),
    Exposure(_DECODE, "custom", {"kv_len": 130, "hq": 2, "hkv": 2, "path": "per_head"}, "default"),
)
#: the cheap cases the default (CI) run takes for every mutation; ``-m slow`` runs all of :data:`CASES`
CI_CASES: tuple[Exposure, ...] = (CASES[1], CASES[5], CASES[7], CASES[8])


def exposures(hook: str) -> tuple[Exposure, ...]:
    """The cases ``hook`` must fail (every sensitivity mutation: all of :data:`CASES`)."""
    if hook not in SENS_HOOKS:
        raise KeyError(f"unknown sensitivity mutation {hook!r} (known: {', '.join(sorted(SENS_HOOKS))})")
    return CASES
