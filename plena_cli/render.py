"""Rendering shared by the commands: the consoles, JSON output, the run summary, traces, the fault headline.

Every command prints its result to ``out`` (stdout) and diagnostics to ``err`` (stderr); machine-readable
output (``--json``) is one JSON document written straight to ``out.file``.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from isa.safetext import json_text
from studies.documents import json_default

if TYPE_CHECKING:
    from rich.status import Status

    from plena_sim.machine import RunResult
    from plena_sim.trace.ring import Trace

__all__ = [
    "consoles",
    "json_default",
    "print_json",
    "print_fault",
    "print_plain",
    "status",
    "run_summary",
    "region_table",
    "resource_tables",
    "upstream_lines",
    "render_trace",
    "add_plain_row",
    "json_documents",
    "wrote",
    "warn_truncated",
]


class _Console(Console):
    """A rich console whose write to a closed pipe raises BrokenPipeError (rich's own exits 1, the mismatch code);
    the command line's boundary turns it into exit 0 (:mod:`.interrupts`)."""

    #: the JSON documents printed on this console (:func:`print_json`)
    json_documents = 0

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the output pipe was closed")


def consoles(out_file: TextIO | None = None, err_file: TextIO | None = None) -> tuple[Console, Console]:
    """``(out, err)``: stdout and stderr consoles (no highlighting, no hard wrapping), or consoles writing to the
    given files."""
    return (
        # emoji=False: "file.asm:100:22" must not print as "file.asm💯22" (rich's :name: emoji codes)
        _Console(file=out_file, highlight=False, soft_wrap=True, emoji=False),
        _Console(file=err_file, stderr=err_file is None, highlight=False, soft_wrap=True, emoji=False),
    )


def add_plain_row(table: Table, *cells: str | Text) -> None:
    """Add a row whose ``str`` cells are shown verbatim (a user's ``[red]`` or ``[/h]`` is text, never markup)."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def print_json(out: Console, doc: object, *, sort_keys: bool = False, indent: int | None = None) -> None:
    """Write ``doc`` as one strict JSON document (one line unless ``indent``) to ``out``'s file: a non-finite
    number is written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (README: JSON output)."""
    out.file.write(json_text(doc, default=json_default, sort_keys=sort_keys, indent=indent) + "\n")
    if isinstance(out, _Console):
        out.json_documents += 1


def json_documents(out: Console) -> int:
    """How many JSON documents :func:`print_json` has printed on ``out``."""
    return out.json_documents if isinstance(out, _Console) else 0


def print_fault(err: Console, text: str) -> None:
    """The fault headline: ``fault: <message>`` (the message printed verbatim)."""
    err.print("[red]fault:[/] ", end="")
    err.print(text, markup=False)


def wrote(err: Console, path: object) -> None:
    """Confirm a file or directory written: ``wrote PATH`` on ``err`` (one line, the path verbatim)."""
    err.print(f"wrote {path}", markup=False, highlight=False)


def warn(err: Console, text: str) -> None:
    """``warning: TEXT`` on ``err`` (the text verbatim, never markup)."""
    err.print("[yellow]warning:[/] ", end="")
    err.print(text, markup=False, highlight=False)


def warn_truncated(err: Console, trace: Trace, what: str = "the trace") -> None:
    """Say on ``err`` that the trace ring kept only the newest records, and the ``--capacity`` that keeps all."""
    warn(
        err,
        f"{what} holds only the newest {len(trace):,} of {trace.total:,} instructions "
        f"(the trace ring's capacity); --capacity {trace.total} keeps them all",
    )


def print_plain(console: Console, lines: Iterable[str]) -> None:
    """Print ``lines`` verbatim (no markup, no highlighting)."""
    for line in lines:
        console.print(line, markup=False, highlight=False)


def compile_core(err: Console, quiet: bool) -> None:
    """Load the simulator core's compiled code; when it is not cached (the first run after install or after
    a change of its sources) say so on ``err`` first, and how long it took after."""
    from plena_sim import core

    if core.is_warm():
        core.warm_up()
        return
    err.print("plena-sim: compiling the simulator core (first run after install or a source change; cached after)")
    with status(err, "compiling the simulator core ...", quiet):
        seconds = core.warm_up()
    err.print(f"plena-sim: compiled in {seconds:.0f} s", highlight=False)


def status(err: Console, text: str, quiet: bool) -> contextlib.AbstractContextManager[Status | None]:
    """A spinner on ``err`` showing ``text`` (a do-nothing context yielding None when ``quiet``)."""
    return contextlib.nullcontext() if quiet else err.status(text)


def run_summary(res: RunResult, out: Console, title: str) -> None:
    """The statistics table of one ``Machine.run`` result, then its instructions by opcode."""
    st = res.stats
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("instructions", f"{res.instructions:,}")
    t.add_row(f"cycles ({st.get('timing_mode', 'serial')})", f"{res.cycles:,}")
    for unit, n in st.get("by_unit", {}).items():
        t.add_row(f"unit {unit}", f"{n:,}")
    t.add_row("matrix MACs", f"{st.get('matrix_macs', 0):,}")
    if "mac_utilization" in st:
        t.add_row("MAC utilization", f"{100 * float(st['mac_utilization']):.2f}%")
    unval = st.get("unvalidated")
    if unval:
        t.add_row("unvalidated (rtl)", f"{unval['cycles']:,} cycles, {100 * float(unval['share']):.1f}%")
    t.add_row("host seconds", f"{st.get('host_seconds', 0.0):.4f}")
    out.print(t)
    for table in resource_tables(st):
        out.print(table)
    if st.get("by_opcode"):
        ops = Table(title="instructions by opcode")
        ops.add_column("opcode")
        ops.add_column("count", justify="right")
        for name, n in sorted(st["by_opcode"].items(), key=lambda kv: -kv[1]):
            ops.add_row(name, f"{n:,}")
        out.print(ops)
    regions = region_table(st)
    if regions is not None:
        out.print(regions)


def resource_tables(stats: Mapping[str, Any]) -> list[Table]:
    """The resources of a run (busy cycles, critical-path cycles and its share of the run) and its stalls by reason
    (the reasons with a stall only); empty when the statistics have none."""
    busy, crit = stats.get("busy") or {}, stats.get("critical_path") or {}
    if not busy:
        return []
    total = int(stats.get("cycles", 0))
    t = Table(title="resources")
    t.add_column("resource")
    for col in ("busy", "critical path", "share"):
        t.add_column(col, justify="right")
    for r, b in busy.items():
        c = int(crit.get(r, 0))
        t.add_row(r, f"{int(b):,}", f"{c:,}", f"{100 * c / total:.1f}%" if total else "-")
    tables = [t]
    stalls = {k: int(v) for k, v in (stats.get("stalls") or {}).items() if v}
    if stalls:
        s = Table(title="stalls")
        s.add_column("reason")
        s.add_column("cycles", justify="right")
        for k, v in stalls.items():
            s.add_row(k, f"{v:,}")
        tables.append(s)
    return tables


def region_table(stats: Mapping[str, Any]) -> Table | None:
    """The code regions of a run (path, instructions, exclusive / inclusive cycles, inclusive share of the
    run's cycles); None when the program marks no region (only the ``(unlabelled)`` entry)."""
    entries = stats.get("regions") or []
    if len(entries) < 2:
        return None
    total = int(stats.get("cycles", 0))
    t = Table(title="regions")
    t.add_column("region")
    for col in ("instructions", "cycles excl", "cycles incl", "share"):
        t.add_column(col, justify="right")
    for e in entries:
        incl = int(e["cycles_inclusive"])
        share = f"{100 * incl / total:.1f}%" if total else "-"
        add_plain_row(t, e["path"], f"{e['instructions']:,}", f"{e['cycles_exclusive']:,}", f"{incl:,}", share)
    return t


def upstream_lines(stats: Mapping[str, Any]) -> list[str]:
    """The upstream emulator's summary lines (timing.md §6) from a run's statistics."""
    cycles = int(stats.get("cycles", 0))
    h = stats.get("hbm", {})
    r, w = int(h.get("bytes_read", 0)), int(h.get("bytes_written", 0))
    util = (r + w) / (cycles * 1e-9) if cycles else 0.0
    return [
        f"Simulation completed. Latency {cycles}.000ns",
        f"HBM Statistics - Bytes read: {r} | Bytes written: {w} | Utilization: {util:.6g} bytes/sec",
    ]


def render_trace(
    out: Console,
    trace: Trace,
    stats: Mapping[str, Any],
    last: int | None = None,
    title: str | None = None,
    full: Trace | None = None,
    *,
    wide: bool = False,
    fault: dict[str, Any] | None = None,
) -> None:
    """Table of ``trace`` (its last ``last`` rows; ``wide``: every column; ``fault``: the faulting instruction
    as its last row, :func:`plena_sim.trace.ring.render_table`), per-opcode summary of ``full`` (default:
    ``trace``) and the per-unit utilization bars of the run."""
    from plena_sim.trace.ring import render_summary, render_table, render_utilization

    shown = trace.filter(last=last) if last is not None else trace
    out.print(render_table(shown, title=escape(title) if title else None, wide=wide, fault=fault), soft_wrap=False)
    out.print(render_summary(full if full is not None else trace))
    out.print(render_utilization(stats.get("unit_busy_cycles", trace.unit_busy()), int(stats.get("cycles", 0))))
