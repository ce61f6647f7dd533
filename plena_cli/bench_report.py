"""The benchmark suite's targets (issue 18's table) and its terminal rendering (``plena-sim bench``).

:func:`targets` judges a :func:`plena_cli.bench.run_suite` result against the targets; :func:`render` prints
the headline, the workload table, the phase split of every testbench workload, the compile line and the
targets. Nothing here measures anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["targets", "render"]

MIB = 2**20
#: the testbench workloads whose generate + assemble share of the end to end is a target
_SHARE_WORKLOADS = ("prefill_1k", "decode_32k", "linear_4k", "linear_1k", "linear_b64", "prefill_paper")


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its measured value, limit and met / not met (None: not measured; ``--quick``
    sizes judge nothing)."""
    wl = result["workloads"] if not result.get("quick") else {}
    comp = result.get("compile", {}) if not result.get("quick") else {}
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, limit: float | None, op: str, unit: str) -> None:
        met = None if value is None or limit is None else (value >= limit if op == ">=" else value <= limit)
        out.append({"target": name, "value": value, "limit": limit, "op": op, "unit": unit, "met": met})

    def g(w: str, k: str) -> Any:
        return wl.get(w, {}).get(k)

    def mib(w: str) -> float | None:
        v = g(w, "peak_rss_bytes")
        return None if v is None else v / MIB

    add("linear_b64 matrix MAC/s", g("linear_b64", "macs_per_s"), 8e9, ">=", "MAC/s")
    add("prefill_1k matrix MAC/s", g("prefill_1k", "macs_per_s"), 1.5e9, ">=", "MAC/s")
    sim = (g("prefill_1k", "split") or {}).get("simulate_s")
    e2e_limit = None if sim is None else 1.5 * sim + 0.3
    add("prefill_1k in-process end to end (1.5 x sim + 0.3 s)", g("prefill_1k", "e2e_s"), e2e_limit, "<=", "s")
    add("linear_1k in-process end to end", g("linear_1k", "e2e_s"), 0.5, "<=", "s")
    add("startup: process wall of run elementwise_add", g("startup", "process_wall_s"), 0.8, "<=", "s")
    shares = {w: g(w, "gen_share") for w in _SHARE_WORKLOADS if g(w, "gen_share") is not None}
    worst = max(shares, key=lambda w: shares[w]) if shares else None
    label = "generate + assemble share of end to end, worst workload" + (f" ({worst})" if worst else "")
    add(label, shares.get(worst) if worst else None, 0.15, "<=", "share")
    add("prefill_1k static instructions", g("prefill_1k", "static_instructions"), 10_000, "<=", "instr")
    add("decode_32k peak RSS", mib("decode_32k"), 300.0, "<=", "MiB")
    verdicts = {w: v["verdict"] for w, v in wl.items() if v.get("verdict") is not None}
    failing = sorted(w for w, v in verdicts.items() if v != "PASS")
    judged = "testbench workloads that fail their checks" + (f" ({', '.join(failing)})" if failing else "")
    add(
        judged + (", decode_32k included" if "decode_32k" in verdicts else ""),
        float(len(failing)) if verdicts else None,
        0.0,
        "<=",
        "FAIL",
    )
    add("linear_4k peak RSS", mib("linear_4k"), 500.0, "<=", "MiB")
    add("first run after install (empty cache)", comp.get("e2e_run_cold", {}).get("seconds"), 30.0, "<=", "s")
    add("scalar_loop instructions/s", g("scalar_loop", "instr_per_s"), 60e6, ">=", "instr/s")
    add("reference_ratio", g("reference_ratio", "ratio"), 100.0, ">=", "x")
    return out


# ==================================================================================== output


def _si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for f, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.3g} {p}{unit}".rstrip()
    return f"{x:.3g} {unit}".rstrip()


def _sec(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _spr(w: dict[str, Any], k: str, fmt: Callable[[float], str]) -> str:
    s = w.get("spread", {}).get(k)
    if not s or w.get("runs", 1) < 2:
        return ""
    return f" [{fmt(s[0])}..{fmt(s[1])}]"


def render(result: dict[str, Any], console: Console | None = None) -> None:
    """Print a suite result: the headline, the workload table, the split, the compile line and the targets."""
    from rich.console import Console

    con = console or Console()
    if not con.is_terminal and con.width < 200:  # piped / captured: do not wrap the table at 80 columns
        con.width = 200
    mach = result["machine"]
    con.print(
        f"[bold]plena-sim bench[/] suite v{result['suite_version']}"
        f"{' (quick)' if result['quick'] else ''}, median of {result['repeat']} run(s) [min..max]; "
        f"{mach['cpu']}, {mach['logical_cores']} cores, Python {mach['python']}, numba {mach.get('numba')}, "
        f"load {mach['loadavg_at_start']}, commit {mach['git_commit']}",
        markup=True,
        highlight=False,
    )
    con.print(_workload_table(result["workloads"]))
    con.print(_split_table(result["workloads"]))
    if result.get("compile"):
        con.print(_compile_line(result["compile"]), highlight=False)
    con.print(_targets_table(result["targets"]))


_COLUMNS = ("workload", "verdict", "static", "retired", "cycles", "sim wall", "e2e", "MAC/s", "of FMA peak")
_COLUMNS2 = ("instr/s", "cycles/s", "first call (JIT)", "peak RSS", "notes")


def _workload_table(workloads: dict[str, Any]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    t = Table(show_lines=False)
    for col in _COLUMNS + _COLUMNS2:
        t.add_column(col, justify="left" if col in ("workload", "notes", "verdict") else "right")
    for name, w in workloads.items():
        if "error" in w:
            t.add_row(name, *["-"] * (len(_COLUMNS) + len(_COLUMNS2) - 2), escape(w["error"]))
            continue
        t.add_row(*_workload_row(name, w))
    return t


def _workload_row(name: str, w: dict[str, Any]) -> list[str]:
    def n(k: str) -> str:
        return "-" if w.get(k) is None else f"{w[k]:,}"

    return [
        name,
        w.get("verdict", "-"),
        n("static_instructions"),
        n("instructions"),
        n("cycles"),
        _sec(w.get("sim_s")) + _spr(w, "sim_s", _sec),
        _sec(w.get("e2e_s") or w.get("process_wall_s")) + _spr(w, "e2e_s", _sec) + _spr(w, "process_wall_s", _sec),
        _si(w.get("macs_per_s") or w.get("floor_macs_per_s")),
        _pct(w.get("macs_fraction_of_peak") or w.get("floor_fraction_of_peak")),
        _si(w.get("instr_per_s")),
        _si(w.get("cycles_per_s")),
        _sec(w.get("jit_first_call_s")),
        f"{w['peak_rss_bytes'] / MIB:.0f} MiB" + _spr(w, "peak_rss_bytes", lambda v: f"{v / MIB:.0f}"),
        _note(w),
    ]


def _note(w: dict[str, Any]) -> str:
    note = ""
    if "ratio" in w:
        note = (
            f"reference {_sec(w['reference_s'])}: ratio {w['ratio']:.0f}x"
            f"{_spr(w, 'ratio', lambda v: f'{v:.0f}')}{'' if w.get('identical') else ' (STATE DIFFERS)'}"
        )
    if "floor_s" in w:
        note = (
            f"{w['tile_products']:,} tile products in {_sec(w['floor_s'])}; "
            f"one-thread f64 FMA peak {_si(w['fma_peak_per_s'], 'FMA/s')}"
        )
    if w.get("fault"):
        note += f" FAULT {w['fault']}"
    return note


def _split_table(workloads: dict[str, Any]) -> Table:
    from rich.table import Table

    t = Table(title="in-process end to end, split (s)")
    cols = ("generate_s", "assemble_s", "inputs_s", "simulate_s", "judge_s")
    for col in ("workload", "e2e", *(c[:-2] for c in cols), "generate+assemble"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for name, w in workloads.items():
        sp = w.get("split")
        if sp:
            t.add_row(name, f"{w['e2e_s']:.3f}", *(f"{sp.get(c, 0.0):.3f}" for c in cols), _pct(w.get("gen_share")))
    return t


def _compile_line(comp: dict[str, Any]) -> str:
    cc = comp.get("cold_compile", {})
    cold = comp.get("e2e_run_cold", {})
    return (
        f"compile with an empty JIT cache: {_sec(cc.get('jit_first_call_s'))} "
        f"(process {_sec(cc.get('process_s'))}); `plena-sim run flashattn_prefill` end to end: warm cache "
        f"{_sec(comp['e2e_run_warm_s'])} [{_sec(comp['e2e_run_warm_spread'][0])}.."
        f"{_sec(comp['e2e_run_warm_spread'][1])}], empty cache {_sec(cold.get('seconds'))}"
        + (f" (exit {cold.get('exit')})" if cold.get("exit") else "")
    )


def _targets_table(targets_: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    tt = Table(title="targets")
    for col in ("target", "measured", "limit", "met"):
        tt.add_column(col)
    for tg in targets_:
        v, unit, lim = tg["value"], tg["unit"], tg["limit"]
        big = unit in ("MAC/s", "instr/s")
        vs = "-" if v is None else (_si(v, unit) if big else f"{v:,.3g} {unit}")
        ls = "-" if lim is None else (_si(lim) if big else f"{lim:,.0f}" if lim >= 1000 else f"{lim:.3g}")
        met = {True: "[green]met[/]", False: "[red]NOT met[/]", None: "not measured"}[tg["met"]]
        tt.add_row(tg["target"], vs, f"{tg['op']} {ls}", met)
    return tt
