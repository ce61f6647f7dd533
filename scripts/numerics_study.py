"""Long-context numerics of flash attention (docs/numerics.md): output rel-RMS against float64 for the single-state
scheme (``kv_chunk_tiles=0``) and split-KV (the default), and the merge's share of the kernel's cycles under rtl.

usage: python scripts/numerics_study.py [--hw NAME] [--lengths 1024,2048,...] [--prefill-max N]

Every run is a flash testbench case at its defaults except batch 1 and kv_len (decode), and q_len 64, non-causal
(prefill); the golden is float64 from the device's dequantized inputs (the testbench's own).  Prints one markdown
table per kernel.
"""

from __future__ import annotations

import argparse
import time

from testbenches.harness import Report, run_case


def _region_cycles(rep: Report, path: str) -> int:
    for r in (rep.stats or {}).get("regions", []):
        if r["path"] == path:
            return int(r["cycles_inclusive"])
    return 0


def _row(tb: str, kv: int, hw: str | None, extra: dict[str, object]) -> tuple[str, float, bool, int, int, float]:
    over: dict[str, object] = {"batch": 1, "kv_len": kv, **extra}
    t0 = time.perf_counter()
    rep = run_case(tb, None, over, hw=hw, timing="rtl")
    wall = time.perf_counter() - t0
    out = next(c for c in rep.checks if c.name == "output")
    return (tb, out.rel_rms, rep.passed, _region_cycles(rep, "flash/merge"), _region_cycles(rep, "flash"), wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default=None, help="hardware preset (default: the reference machine)")
    ap.add_argument("--lengths", default="1024,2048,8192,32768,131072")
    ap.add_argument("--prefill-max", type=int, default=32768, help="longest prefill cache (q_len 64)")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    for tb, extra in (
        ("flashattn_decode", {}),
        ("flashattn_prefill", {"q_len": 64, "causal": False}),
    ):
        shape = ", ".join(f"{k}={v}" for k, v in extra.items()) or "q_len=1"
        print(f"\n{tb} ({args.hw or 'reference machine'}, {shape})\n")
        print(
            "| kv_len | rel-RMS single state | verdict | rel-RMS split-KV | verdict | kernel cycles single / split "
            "(rtl) | flash/merge cycles | merge share |"
        )
        print("|---:|---:|---|---:|---|---:|---:|---:|")
        for kv in lengths:
            if tb == "flashattn_prefill" and kv > args.prefill_max:
                continue
            old = _row(tb, kv, args.hw, {**extra, "kv_chunk_tiles": 0})
            new = _row(tb, kv, args.hw, extra)
            share = new[3] / new[4] if new[4] else 0.0
            print(
                f"| {kv:,} | {old[1]:.4f} | {'PASS' if old[2] else 'FAIL'} | {new[1]:.4f} | "
                f"{'PASS' if new[2] else 'FAIL'} | {old[4]:,} / {new[4]:,} ({100 * (new[4] / old[4] - 1):+.2f} %) | "
                f"{new[3]:,} | {100 * share:.2f} % |",
                flush=True,
            )


if __name__ == "__main__":
    main()
