"""``plena-sim diff DIR_A DIR_B``: compare two ``run --save`` directories.

Named, one line each: every differing parameter (result.json ``params``), config key (config.toml, every
value of the effective config, dotted), cycle figure (cycles, instructions, each region's exclusive and
inclusive cycles), output (arrays.npz: shape, the number of differing elements and the worst one) and the
program (program.asm: how many lines differ, the first ones as a unified diff). Exit 0 when nothing differs,
1 when something does. Host timings (wall and host seconds) are not compared.
"""

from __future__ import annotations

import argparse
import difflib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EXIT_MISMATCH, EXIT_OK, UsageError
from .options import examples
from .render import print_json, print_plain

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register", "cmd_diff", "diff_runs"]

#: program lines shown of the assembly diff
DIFF_LINES = 12


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help="compare two run --save directories: parameters, config, cycles, outputs, program",
        **examples(
            "plena-sim diff saved/p1 saved/p1-bmm025",
            "plena-sim diff a b --json",
        ),
    )
    p.add_argument("a", metavar="DIR_A")
    p.add_argument("b", metavar="DIR_B")
    p.add_argument("--json", action="store_true", help='one JSON object: {"identical", "differences": [...]}')
    p.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace, out: Console, err: Console) -> int:
    diffs = diff_runs(Path(args.a), Path(args.b))
    if args.json:
        print_json(out, {"identical": not diffs, "differences": diffs})
    elif diffs:
        print_plain(out, [_line(d) for d in diffs])
    else:
        print_plain(out, [f"identical: {args.a} and {args.b}"])
    return EXIT_MISMATCH if diffs else EXIT_OK


def _line(d: Mapping[str, Any]) -> str:
    text = f"{d['kind']} {d['name']}: {d['a']} -> {d['b']}"
    return text + (f" ({d['detail']})" if d.get("detail") else "")


def _result(folder: Path) -> dict[str, Any]:
    path = folder / "result.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"diff: {str(path)!r} is not the result.json of a run --save directory ({exc})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"diff: {str(path)!r} is not a JSON object")
    return doc


def diff_runs(a: Path, b: Path) -> list[dict[str, Any]]:
    """Every difference between the saved runs ``a`` and ``b``, as ``{"kind", "name", "a", "b"[, "detail"]}``."""
    ra, rb = _result(a), _result(b)
    diffs = _mapping_diffs("param", ra.get("params") or {}, rb.get("params") or {})
    diffs += _mapping_diffs("config", _config_values(a, ra), _config_values(b, rb))
    diffs += _mapping_diffs("cycles", _cycle_figures(ra), _cycle_figures(rb))
    diffs += _output_diffs(a, b)
    diffs += _program_diffs(a, b)
    return diffs


def _mapping_diffs(kind: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, "(absent)"), b.get(key, "(absent)")
        if va != vb:
            d: dict[str, Any] = {"kind": kind, "name": key, "a": va, "b": vb}
            if kind == "cycles" and isinstance(va, int) and isinstance(vb, int) and va:
                d["detail"] = f"{100 * (vb - va) / va:+.2f}%"
            out.append(d)
    return out


def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in node.items():
        if isinstance(v, Mapping):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[prefix + k] = v
    return flat


def _config_values(folder: Path, result: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config's values by dotted key (config.toml without its section), else result.json's
    ``hardware`` (a save of an older plena-sim)."""
    path = folder / "config.toml"
    if not path.is_file():
        return dict(result.get("hardware") or {})
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"diff: cannot read {str(path)!r}: {exc}") from None
    sections = [v for v in doc.values() if isinstance(v, dict)]
    return _flatten(sections[0]) if len(sections) == 1 else _flatten(doc)


def _cycle_figures(result: Mapping[str, Any]) -> dict[str, Any]:
    figures = {"cycles": result.get("cycles"), "instructions": result.get("instructions")}
    for region in result.get("regions") or []:
        for field in ("cycles_exclusive", "cycles_inclusive"):
            figures[f"{region.get('path')} {field}"] = region.get(field)
    return figures


def _arrays(folder: Path) -> dict[str, Any]:
    import numpy as np

    path = folder / "arrays.npz"
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"diff: cannot read {str(path)!r}: {exc}") from None


def _output_diffs(a: Path, b: Path) -> list[dict[str, Any]]:
    """Each array of arrays.npz (the output, its golden, the inputs) that differs: its worst element."""
    import numpy as np

    xa, xb = _arrays(a), _arrays(b)
    out: list[dict[str, Any]] = []
    for name in sorted(set(xa) | set(xb)):
        va, vb = xa.get(name), xb.get(name)
        if va is None or vb is None or va.shape != vb.shape:
            shape_a = "(absent)" if va is None else list(va.shape)
            shape_b = "(absent)" if vb is None else list(vb.shape)
            out.append({"kind": "output", "name": name, "a": shape_a, "b": shape_b, "detail": "shape"})
            continue
        differ = ~((va == vb) | (np.isnan(va) & np.isnan(vb)))
        if not differ.any():
            continue
        gap = np.where(differ, np.abs(va.astype(np.float64) - vb.astype(np.float64)), -1.0)
        gap = np.where(np.isnan(gap), np.inf, gap)  # a NaN on one side only is the worst
        at = np.unravel_index(int(np.argmax(gap)), va.shape)
        where = list(map(int, at))
        detail = f"{int(differ.sum())} of {va.size} elements differ, worst at {where}: |a - b| = {gap[at]:.6g}"
        out.append({"kind": "output", "name": name, "a": float(va[at]), "b": float(vb[at]), "detail": detail})
    return out


def _program_diffs(a: Path, b: Path) -> list[dict[str, Any]]:
    pa, pb = a / "program.asm", b / "program.asm"
    if not (pa.is_file() and pb.is_file()):
        return []
    la = pa.read_text(encoding="utf-8", errors="replace").splitlines()
    lb = pb.read_text(encoding="utf-8", errors="replace").splitlines()
    if la == lb:
        return []
    changed = list(difflib.unified_diff(la, lb, "a/program.asm", "b/program.asm", lineterm="", n=0))
    body = [x for x in changed if x[:1] in "+-" and not x.startswith(("+++", "---"))]
    shown = "\n".join(changed[: DIFF_LINES + 2])
    detail = f"{len(body)} lines changed\n{shown}"
    return [
        {"kind": "program", "name": "program.asm", "a": f"{len(la)} lines", "b": f"{len(lb)} lines", "detail": detail}
    ]
