"""``plena-sim timing``: the effective per-opcode timing table of a timing model at a configuration (one job).

Per instruction: the unit (rtl: the pipeline) and the statistics resource, ``ready`` (cycles until a dependent
instruction may issue), ``done`` (until it leaves its unit), ``busy/II`` (until its unit accepts the next one) and
where the value comes from (rtl: ``measured`` by the RTL calibration or ``declared``; ``legacy``: the latency table
of timing.md §2). H_* show ``HBM`` (the bank model of timing.md §5 decides at run time), V_TOPK one value per policy.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from .errors import EXIT_OK

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
from .options import add_config_args, add_timing_arg, config_from_args, examples
from .render import print_json

__all__ = ["register"]

_KEY = {"opcode": "mnemonic"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "timing",
        help="print the effective per-opcode timing table (ready, busy/II, unit)",
        **examples(
            "plena-sim timing --timing rtl",
            "plena-sim timing --hw v80-128x64 --timing rtl --json",
            "plena-sim timing --set BLEN=16 --timing overlap",
        ),
    )
    add_config_args(p)
    add_timing_arg(p, "the timing model whose table to print (default serial)", timing_only=False)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_timing)


def timing_doc(cfg: HardwareConfig, mode: str) -> dict:
    """The JSON document of ``plena-sim timing --json``."""
    from plena_sim.timing.rtl import RTL_FILE, opcode_cost_table, rtl_data

    doc = {
        "timing_mode": mode,
        "config": {k: int(getattr(cfg, k)) for k in ("MLEN", "VLEN", "BLEN", "BROADCAST_AMOUNT")},
        "opcodes": opcode_cost_table(cfg, mode),
    }
    if mode == "rtl":
        data = rtl_data()
        doc["data_file"] = {"name": RTL_FILE, "version": data["version"]}
        doc["hazards"] = [{k: h[k] for k in ("name", "dependence", "stall", "recovery")} for h in data["hazard"]]
    return doc


def cmd_timing(args: argparse.Namespace, out: Console, err: Console) -> int:
    cfg = config_from_args(args)
    doc = timing_doc(cfg, args.timing)
    if args.json:
        print_json(out, doc, indent=2)
        return EXIT_OK
    c = doc["config"]
    title = f"timing model {args.timing} at MLEN={c['MLEN']} VLEN={c['VLEN']} BLEN={c['BLEN']}"
    t = Table(title=title)
    for col in ("opcode", "unit", "resource"):
        t.add_column(col, min_width=len(max((str(r[_KEY.get(col, col)]) for r in doc["opcodes"]), key=len)))
    for col in ("ready", "done", "busy/II"):
        t.add_column(col, justify="right")
    t.add_column("source")
    for r in doc["opcodes"]:
        t.add_row(r["mnemonic"], r["unit"], r["resource"], str(r["ready"]), str(r["done"]), str(r["ii"]), r["status"])
    out.print(t)
    if args.timing == "rtl":
        h = Table(title=f"hazards ({doc['data_file']['name']})")
        for col in ("hazard", "dependence", "stall", "recovery"):
            h.add_column(col)
        for z in doc["hazards"]:
            h.add_row(z["name"], z["dependence"], str(z["stall"]), str(z["recovery"]))
        out.print(h)
    return EXIT_OK
