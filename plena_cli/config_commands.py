"""``plena-sim hw`` and ``config``: the hardware presets and the effective hardware configuration."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

from .errors import EXIT_OK
from .options import add_config_args, config_from_args, examples
from .render import add_plain_row, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from plena_sim.config import HardwareConfig

__all__ = ["register", "cmd_hw", "cmd_config"]

#: the columns of ``plena-sim hw`` (header, cell of one preset row)
_HW_COLUMNS = (
    ("preset", lambda r: r["name"]),
    ("M/V/B", lambda r: f"{r['MLEN']}/{r['VLEN']}/{r['BLEN']}"),
    ("H", lambda r: str(r["HLEN"])),
    ("BA", lambda r: str(r["BROADCAST_AMOUNT"])),
    ("Pm/Pv/Ps", lambda r: f"{r['P_M']}/{r['P_V']}/{r['P_W']}"),
    ("tiles", lambda r: str(r["mram_tiles"])),
    ("FP", lambda r: str(r["FP_SRAM_SIZE"])),
    ("HBM", lambda r: f"{r['HBM_SIZE'] >> 30}G"),
    ("timing", lambda r: r["HBM_TIMING_PRESET"]),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hwp = sub.add_parser(
        "hw",
        help="list the hardware presets, or show one with its sources",
        **examples("plena-sim hw", "plena-sim hw v80-128x64", "plena-sim hw --json"),
    )
    hwp.add_argument("name", metavar="NAME", nargs="?", help="a preset name")
    hwp.add_argument("--json", action="store_true", help="print JSON")
    hwp.set_defaults(func=cmd_hw)

    c = sub.add_parser(
        "config",
        help="print the effective hardware configuration",
        **examples(
            "plena-sim config --hw v80-128x64",
            "plena-sim config --config plena_settings.toml --set BMM_SCALE=0.25 --json",
        ),
    )
    add_config_args(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_config)


def cmd_hw(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``plena-sim hw [NAME]``: the hardware presets, or one preset's file with its sources."""
    if args.name:
        return _show_preset(args.name, args.json, out)
    rows = _preset_rows()
    if args.json:
        print_json(out, rows, indent=2)
        return EXIT_OK
    t = Table(
        title="hardware presets (--hw NAME; plena-sim hw NAME shows one with its sources)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    cells = [[cell(r) for _, cell in _HW_COLUMNS] for r in rows]
    for k, (col, _) in enumerate(_HW_COLUMNS):
        t.add_column(col, min_width=max(len(col), *(len(c[k]) for c in cells)))
    for c in cells:
        add_plain_row(t, *c)
    out.print(t)
    return EXIT_OK


def _show_preset(name: str, as_json: bool, out: Console) -> int:
    from plena_sim.config.presets import load_preset, preset_info

    info = preset_info(name)
    if as_json:
        print_json(
            out,
            {
                "name": info.name,
                "description": info.description,
                "base": info.base,
                "config": load_preset(info.name).values(),
            },
            indent=2,
        )
    else:
        out.file.write(info.text)
    return EXIT_OK


def _preset_rows() -> list[dict[str, Any]]:
    from plena_sim.config.presets import load_preset, preset_info, preset_names

    rows = []
    for name in preset_names():
        c = load_preset(name)
        rows.append(
            {
                "name": name,
                "MLEN": c.MLEN,
                "VLEN": c.VLEN,
                "BLEN": c.BLEN,
                "HLEN": c.HLEN,
                "BROADCAST_AMOUNT": c.BROADCAST_AMOUNT,
                "P_M": c.P_M,
                "P_V": c.P_V,
                "P_W": c.P_W,
                "mram_tiles": c.mram_tiles,
                "FP_SRAM_SIZE": c.FP_SRAM_SIZE,
                "HBM_SIZE": c.HBM_SIZE,
                "HBM_TIMING_PRESET": c.HBM_TIMING_PRESET,
                "description": preset_info(name).description,
            }
        )
    return rows


def cmd_config(args: argparse.Namespace, out: Console, err: Console) -> int:
    from plena_sim.config import inconsistencies

    cfg = config_from_args(args)
    if args.json:
        print_json(out, _config_doc(cfg), indent=2)
        return EXIT_OK
    t = Table(title=escape(f"effective config [{cfg.section}] from {cfg.source}"))
    t.add_column("key")
    t.add_column("value", justify="right")
    for k, v in cfg.values().items():
        add_plain_row(t, k, str(v))
    t.add_row("[dim]P_M / P_V / P_W (rows per DMA)[/]", f"{cfg.P_M} / {cfg.P_V} / {cfg.P_W}")
    t.add_row("[dim]MRAM tiles[/]", str(cfg.mram_tiles))
    for k, v in cfg.precision.items():
        add_plain_row(t, f"PRECISION.{k}", v.describe())
    for k in cfg.latency:
        t.add_row(f"LATENCY.{k}", str(cfg.latency_cycles(k)))
    out.print(t)
    if cfg.ignored:
        err.print("[yellow]note:[/] ", end="")
        err.print(f"--allow-unknown-keys ignored {len(cfg.ignored)} key(s): {', '.join(cfg.ignored)}", markup=False)
    for b in inconsistencies(cfg):
        err.print("[yellow]note:[/] ", end="")
        err.print(
            f"{b.rule}: {b.key}={b.value} (consistent: {b.suggested}); such instructions fault at run "
            "time and the kernel generators refuse this machine",
            markup=False,
        )
    return EXIT_OK


def _config_doc(cfg: HardwareConfig) -> dict[str, Any]:
    from plena_sim.config import inconsistencies

    return {
        "section": cfg.section,
        "source": cfg.source,
        "preset": cfg.preset,
        "config": cfg.values(),
        "inconsistencies": [b.__dict__ for b in inconsistencies(cfg)],
        "ignored": list(cfg.ignored),
        "derived": {"P_M": cfg.P_M, "P_V": cfg.P_V, "P_W": cfg.P_W, "mram_tiles": cfg.mram_tiles},
        "precision": {k: v.describe() for k, v in cfg.precision.items()},
        "latency": {
            k: {"dc_lib_en": en, "dc_lib_dis": dis, "effective": cfg.latency_cycles(k)}
            for k, (en, dis) in cfg.latency.items()
        },
    }
