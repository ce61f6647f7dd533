"""The rich output of ``plena-sim model``: the preset table and the run's panel with its region table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .render import add_plain_row

if TYPE_CHECKING:
    from rich.console import Console

    from programs.model.presets import ModelPreset

__all__ = ["render_list", "render_model", "seconds_text"]

_LIST_COLUMNS = ("name", "layers", "hidden", "heads/kv", "head_dim", "ffn", "experts/top-k")
_REGION_COLUMNS = ("region", "prefill excl", "prefill incl", "decode excl", "decode incl")


def render_list(out: Console, presets: Sequence[ModelPreset]) -> None:
    """One row of shapes per preset (``--show NAME`` has the description, the sources and what is not modelled)."""
    t = Table(
        title="model presets (plena-sim model NAME; --show: the sources and what is not modelled)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    rows = [
        [
            p.name,
            str(p.layers),
            str(p.hidden),
            f"{p.heads}/{p.kv_heads}",
            str(p.head_dim),
            str(p.ffn),
            f"{p.experts}/{p.top_k}" if p.moe else "-",
        ]
        for p in presets
    ]
    for k, col in enumerate(_LIST_COLUMNS):
        width = max(len(col), *(len(r[k]) for r in rows))
        t.add_column(col, justify="left" if k == 0 else "right", min_width=width, no_wrap=True)
    for r in rows:
        add_plain_row(t, *r)
    out.print(t)


def seconds_text(s: float) -> str:
    """``s`` seconds in the unit that gives 1 to 999 of it (4 significant digits)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s / 1e-9:.4g} ns"


def render_model(out: Console, doc: Mapping[str, Any]) -> None:
    """The verdicts, cycles and times of both runs, the TTFT and the decode rate, then the region table."""
    verdict = _verdict_markup(doc["verdict"], bold=True)
    assumed = f"\ntiming-only, assumed MoE routing: {doc['routing']}" if doc.get("routing") else ""
    body = Group(
        f"{verdict}  {escape(_headline(doc) + assumed)}",
        _runs_table(doc),
        *(Text(line) for line in _figure_lines(doc)),
    )
    title = f"{doc['model']} on {doc['hw']} ({doc['timing']} timing)"
    out.print(Panel(body, title=escape(title), expand=False), soft_wrap=False)
    for run in doc["runs"].values():
        phase = "prefill" if run["testbench"] == "decoder_layer" else "decode"
        if run["verdict"] == "FAIL":
            out.print(f"{phase}: {run['summary']}", markup=False)
    if doc["regions"]:
        out.print(_region_table(doc["regions"]))


def _verdict_markup(verdict: str, bold: bool = False) -> str:
    """PASS green, FAIL red, a timing-only run's ``not judged (timing-only)`` yellow."""
    style = {"PASS": "green", "FAIL": "red"}.get(verdict, "yellow")
    return f"[{'bold ' if bold else ''}{style}]{escape(verdict.upper() if bold else verdict)}[/]"


def _headline(doc: Mapping[str, Any]) -> str:
    p = doc["preset"]
    moe = f", {p['experts']} experts top-{p['top_k']}" if "experts" in p else ""
    return (
        f"{doc['layers']} layers: hidden {p['hidden']}, heads {p['heads']}/{p['kv_heads']} x {p['head_dim']}, "
        f"ffn {p['ffn']}{moe}\nbatch {doc['batch']}, seq {doc['seq']}, kv {doc['kv']}"
    )


def _runs_table(doc: Mapping[str, Any]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("run", "verdict", "cycles", "time", "instructions", "wall"):
        t.add_column(col, justify="left" if col in ("run", "verdict") else "right", no_wrap=True)
    for phase, label, per in (
        ("prefill", "prefill layer", "prefill_layer_s"),
        ("decode", "decode step", "decode_layer_s"),
    ):
        if phase not in doc["runs"]:
            continue
        run = doc["runs"][phase]
        t.add_row(
            label,
            _verdict_markup(run["verdict"] if run["verdict"] in ("PASS", "FAIL") else "timing-only"),
            f"{run['cycles']:,}",
            seconds_text(doc[per]),
            f"{run['instructions']:,}",
            f"{run['wall_s']:.2f} s",
        )
    return t


def _figure_lines(doc: Mapping[str, Any]) -> list[str]:
    n = doc["layers"]
    rate = doc["decode_tokens_per_s"]
    rate_text = "-" if rate is None else f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
    lines = [f"clock {_hz_text(doc['clock_hz'])} ({doc['clock_source']})"]
    if doc["prefill_layer_cycles"] is not None:
        lines.append(
            f"TTFT {seconds_text(doc['ttft_s'])} = {n} layers x {doc['prefill_layer_cycles']:,} cycles "
            f"(prefill of {doc['seq']} tokens)"
        )
    if doc["decode_layer_cycles"] is not None:
        lines.append(
            f"decode {rate_text} tokens/s = batch {doc['batch']} per {seconds_text(doc['decode_step_s'])} step "
            f"({n} layers x {doc['decode_layer_cycles']:,} cycles)"
        )
    return lines + [_roofline_line(p, doc) for p in ("prefill", "decode") if doc.get("roofline", {}).get(p)]


def _roofline_line(phase: str, doc: Mapping[str, Any]) -> str:
    """One layer's bounds (compute, HBM) beside its simulated time, and the unvalidated rtl share."""
    r = doc["roofline"][phase]
    share = (doc.get("unvalidated_share") or {}).get(phase)
    unval = "" if share is None else f"; unvalidated rtl costs {100 * share:.0f}% of the critical path"
    frac = r["attained_fraction"]
    return (
        f"{phase} roofline: compute {seconds_text(r['compute_bound_s'])}, HBM {seconds_text(r['memory_bound_s'])}, "
        f"simulated {seconds_text(r['simulated_s'])}: {'-' if frac is None else f'{100 * frac:.0f}%'} of the "
        f"{r['binding']} bound{unval}"
    )


def _hz_text(hz: float) -> str:
    return f"{hz / 1e9:g} GHz" if hz >= 1e9 else f"{hz / 1e6:g} MHz"


def _region_table(regions: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="cycles by region (exclusive, and inclusive of nested regions)", box=box.SIMPLE_HEAD)
    width = max((len(row["path"]) for row in regions), default=6)
    for col in _REGION_COLUMNS:
        if col == "region":
            t.add_column(col, justify="left", no_wrap=True, min_width=width)
        else:
            t.add_column(col, justify="right", no_wrap=True)
    for row in regions:
        add_plain_row(t, row["path"], *_counts(row["prefill"]), *_counts(row["decode"]))
    return t


def _counts(entry: Mapping[str, Any] | None) -> tuple[str, str]:
    if entry is None:
        return "-", "-"
    return f"{int(entry.get('cycles_exclusive', 0)):,}", f"{int(entry.get('cycles_inclusive', 0)):,}"
