"""``plena-sim list``, ``run`` and ``mutants``: the testbenches, one testbench case, the mutation campaign."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from rich.table import Table
from rich.text import Text

from isa.fileio import DirTransaction, npz_bytes
from isa.safetext import json_text

from .errors import EXIT_FAULT, EXIT_MISMATCH, EXIT_OK, UsageError
from .interrupts import add_timeout_arg
from .options import add_backend_arg, add_capacity_arg, add_hw_arg, add_timing_arg, examples, timing_only_of
from .paths import out_path, save_transaction, usage_errors, write_perfetto
from .plot_command import PLOT_FILES
from .render import (
    add_plain_row,
    compile_core,
    json_default,
    print_fault,
    print_json,
    render_trace,
    status,
    warn_truncated,
    wrote,
)
from .replay import REPLAY_FILES, replay_files
from .run_report import render_hardware, render_report
from .run_source import fault_row
from .testbench_args import add_machine_args, case_params_and_config, case_request, get_testbench

if TYPE_CHECKING:
    import numpy.typing as npt
    from rich.console import Console
    from rich.status import Status

    from plena_sim.config import HardwareConfig
    from plena_sim.trace.ring import Trace
    from testbenches.harness import Case, Report

__all__ = ["register", "cmd_list", "cmd_run", "cmd_mutants"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ls = sub.add_parser(
        "list",
        help="list the testbenches, or one testbench's cases with their parameters",
        **examples("plena-sim list", "plena-sim list flashattn_prefill --hw v80-128x64", "plena-sim list --json"),
    )
    ls.add_argument("name", metavar="NAME", nargs="?", help="one testbench: every case (stretch cases too)")
    add_hw_arg(ls)
    ls.add_argument(
        "--json",
        action="store_true",
        help='one JSON array of {"name", "description", "params": {defaults}, "cases": {ID: {params}}}',
    )
    ls.set_defaults(func=cmd_list)

    r = sub.add_parser(
        "run",
        help="run a testbench: build, generate, assemble, simulate, compare",
        **examples(
            "plena-sim run flashattn_prefill --case P3",
            "plena-sim run linear --set rows=64 --save out/linear --json",
            "plena-sim run flashattn_decode --trace --perfetto trace.json --capacity 1000000",
        ),
    )
    r.add_argument("name", metavar="NAME")
    r.add_argument("--case", metavar="ID", help="a required/stretch case id (e.g. P3)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="testbench parameter (repeatable)")
    add_machine_args(r, "hardware variant: default, emu025, small, wide")
    add_backend_arg(r)
    r.add_argument(
        "--save", metavar="DIR", help="write program.asm, program.mem, result.json, arrays.npz (trace.npz with --trace)"
    )
    r.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_timing_arg(r)
    r.add_argument("--trace", action="store_true", help="record an execution trace; show its last 50 rows")
    r.add_argument("--perfetto", metavar="OUT.json", help="write the trace as Chrome/Perfetto trace JSON")
    add_capacity_arg(r)
    add_timeout_arg(r)
    r.set_defaults(func=cmd_run)

    mu = sub.add_parser(
        "mutants",
        help="prove the testbenches catch every known codegen bug (kernels.md §6)",
        **examples("plena-sim mutants --quick", "plena-sim mutants --only causal_ignored,stale_scale --json"),
    )
    mu.add_argument("--only", metavar="NAME[,NAME]", help="run only these mutations")
    mu.add_argument(
        "--quick", action="store_true", help="only the cheapest exposing case per mutation (default: every listed case)"
    )
    add_backend_arg(mu)
    mu.add_argument("--json", action="store_true", help="print one JSON object")
    mu.set_defaults(func=cmd_mutants)


# ----------------------------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace, out: Console, err: Console) -> int:
    import testbenches
    from plena_sim.config.presets import load_preset

    cfg = load_preset(args.hw) if args.hw else None
    if args.name:
        get_testbench(args.name)  # an unknown name is a usage error naming the valid ones
    names = [args.name] if args.name else testbenches.names()
    if args.json:
        print_json(out, [_testbench_doc(name, cfg) for name in names])
        return EXIT_OK
    if args.name:
        _render_cases(out, args.name, get_testbench(args.name), cfg)
        return EXIT_OK
    where = f" on {args.hw}" if args.hw else "; shapes in machine units, --hw P shows their values"
    t = Table(title=f"testbenches (plena-sim run NAME; plena-sim list NAME: its cases){where}")
    for col in ("name", "description", "parameters (defaults)", "required cases"):
        t.add_column(col)
    for name in names:
        try:
            mod = testbenches.get(name)
        except ImportError as exc:
            add_plain_row(t, name, Text(f"cannot import: {exc}", style="red"), "", "")
            continue
        cases = " ".join(c[0] for c in mod.REQUIRED_CASES)
        add_plain_row(t, name, getattr(mod, "DESCRIPTION", ""), _defaults_text(mod.DEFAULTS, cfg), cases)
    out.print(t)
    return EXIT_OK


#: the case tables of a testbench module, in the order ``list NAME`` shows them
_CASE_TABLES: tuple[tuple[str, str], ...] = (
    ("REQUIRED_CASES", "required"),
    ("STRETCH_CASES", "stretch"),
    ("PAPER_CASES", "paper"),
    ("SLOW_CASES", "slow"),
)


def _cases(mod: ModuleType) -> list[tuple[str, str, dict[str, Any], str]]:
    """``(id, kind, overrides, variant)`` of every named case of ``mod`` (required, stretch, paper, slow)."""
    return [(c[0], kind, dict(c[1]), c[2]) for table, kind in _CASE_TABLES for c in getattr(mod, table, [])]


def _param_values(params: Mapping[str, Any], cfg: HardwareConfig | None) -> dict[str, Any]:
    """Parameters as JSON values: a shape in machine units as its text (``2*MLEN``), or its value on ``cfg``."""
    from testbenches.shapes import Hw

    return {
        k: (v.resolve(cfg, k) if cfg is not None else str(v)) if isinstance(v, Hw) else v for k, v in params.items()
    }


def _testbench_doc(name: str, cfg: HardwareConfig | None) -> dict[str, Any]:
    """One entry of ``list --json``: the defaults and every case's full parameters (defaults + its overrides)."""
    mod = get_testbench(name)
    cases = _cases(mod)
    return {
        "name": name,
        "description": getattr(mod, "DESCRIPTION", ""),
        "params": _param_values(mod.DEFAULTS, cfg),
        "cases": {cid: _param_values({**mod.DEFAULTS, **over}, cfg) for cid, _k, over, _v in cases},
        "case_kind": {cid: kind for cid, kind, _o, _v in cases},
        "case_variant": {cid: variant for cid, _k, _o, variant in cases},
    }


def _render_cases(out: Console, name: str, mod: ModuleType, cfg: HardwareConfig | None) -> None:
    """``list NAME``: the defaults, then every case with the parameters it changes and its machine."""
    out.print(f"{name}: {getattr(mod, 'DESCRIPTION', '')}", markup=False)
    out.print(f"defaults: {_defaults_text(mod.DEFAULTS, cfg)}", markup=False)
    t = Table(title=f"cases of {name} (plena-sim run {name} --case ID)")
    for col in ("case", "kind", "variant", "parameters (changed from the defaults)"):
        t.add_column(col)
    for cid, kind, over, variant in _cases(mod):
        add_plain_row(t, cid, kind, variant, _defaults_text(over, cfg) or "(the defaults)")
    out.print(t)


def _defaults_text(defaults: Mapping[str, Any], cfg: HardwareConfig | None) -> str:
    """``k=v`` of every default; a shape in machine units also shows its value on ``cfg`` if given."""
    from testbenches.shapes import Hw

    return ", ".join(
        f"{k}={v} (={v.resolve(cfg)})" if isinstance(v, Hw) and cfg is not None else f"{k}={v}"
        for k, v in defaults.items()
    )


# ----------------------------------------------------------------------------------------- run


#: the files of a ``run --save DIR`` set (state.npz: a faulting run's post-mortem, plena_sim.trace.postmortem)
#: (trace.npz: a traced run's records; plot-*: what ``plena-sim plot DIR`` wrote, replaced with the set)
SAVE_FILES: tuple[str, ...] = (
    *("program.asm", "program.mem", "arrays.npz", "state.npz", "trace.npz", "result.json"),
    *REPLAY_FILES,
    *PLOT_FILES,
)


@dataclass
class _Outputs:
    """What a run produced besides its report, each None when the run did not produce it."""

    sim: npt.NDArray[Any] | None  # the first check's output
    golden: npt.NDArray[Any] | None  # its golden (a golden derived from the machine exists only after the run)
    program_mem: str | None
    state_npz: bytes | None  # the post-mortem of a faulting run
    trace: Trace | None = None  # the trace of a traced run (--trace, --perfetto)


def cmd_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    timing_only_of(args)  # a bad --routing before anything runs
    mod = get_testbench(args.name)
    params, cfg = case_params_and_config(mod, args.name, args)
    perfetto = out_path(args.perfetto, "--perfetto") if args.perfetto is not None else None
    with _save_transaction(args.save, perfetto) as save:  # every output checked (and --save locked) before the run
        if not args.json:
            render_hardware(
                out, f"{args.name} [{args.case or 'custom'}] hardware ({_machine_name(args, cfg)})", cfg, params
            )
        ran, doc = _run_case(mod, params, cfg, args, err, want_trace=bool(args.trace or perfetto))
        if save is not None:
            _save(save, ran.case, ran.outputs, doc, replay_files(ran.case, args.timing, args.backend))
        trace = cast("Trace | None", ran.report.trace)  # Report.trace is typed object: a Trace when traced
        if perfetto is not None and trace is not None:
            fault = ran.report.fault
            write_perfetto(perfetto, trace, fault=fault_row(fault) if fault is not None else None)
    _confirm_outputs(err, args, perfetto, trace)
    if args.json:
        print_json(out, doc, sort_keys=True)
    else:
        render_report(out, ran.report, doc)
        if args.trace and trace is not None:
            render_trace(out, trace, ran.report.stats, last=50)
    if ran.report.fault is not None and not ran.report.passed:
        if not args.json:
            print_fault(err, doc["fault"]["message"])
        return EXIT_FAULT
    return EXIT_OK if ran.report.passed else EXIT_MISMATCH


def _confirm_outputs(err: Console, args: argparse.Namespace, perfetto: Path | None, trace: Trace | None) -> None:
    """Name every path written (stderr) and say when the trace (table, Perfetto export) is truncated."""
    if args.save is not None:
        wrote(err, args.save)
    if perfetto is not None and trace is not None:
        wrote(err, perfetto)
        if trace.dropped:
            warn_truncated(err, trace, "the Perfetto export")
    if args.trace and trace is not None and trace.dropped:
        warn_truncated(err, trace)


@contextlib.contextmanager
def _save_transaction(path: str | None, perfetto: Path | None) -> Iterator[DirTransaction | None]:
    """``--save DIR``'s transaction (checked and locked now; DIR itself appears only when it commits)."""
    if path is None:
        yield None
        return
    with save_transaction(path, "--save", SAVE_FILES) as tx:
        if perfetto is not None and perfetto.is_relative_to(tx.target):
            raise UsageError(
                f"--perfetto: {str(perfetto)!r} is inside the --save directory, which is replaced as a whole"
            )
        yield tx


@dataclass
class _Ran:
    case: Case
    report: Report
    outputs: _Outputs


def _run_case(
    mod: ModuleType,
    params: dict[str, Any],
    cfg: HardwareConfig,
    args: argparse.Namespace,
    err: Console,
    want_trace: bool,
) -> tuple[_Ran, dict[str, Any]]:
    """Build, simulate and judge the case (:func:`studies.testbench_run.run_case`; no file written: its artifacts
    are kept in memory): what it produced and its result document (result.json)."""
    from studies.testbench_run import run_case

    compile_core(err, args.json)
    with status(err, "build + generate ...", args.json) as spinner:
        functional, routing = timing_only_of(args)
        ran = run_case(
            mod,
            params,
            cfg,
            case_request(args, args.name),
            backend=args.backend,
            timing=args.timing,
            trace=int(args.capacity) if want_trace else False,
            keep_artifacts=True,
            progress=None if spinner is None else spinner.update,
            functional=functional,
            routing=routing,
        )
    return _Ran(ran.case, ran.report, _outputs(ran.report)), ran.doc


def _machine_name(args: argparse.Namespace, cfg: HardwareConfig) -> str:
    if args.config:
        return cfg.section
    return cfg.preset + ("" if args.variant in (None, "default") else f", {args.variant}")


def _outputs(rep: Report) -> _Outputs:
    """What the run produced, from the files the report keeps in memory."""
    import io

    import numpy as np

    files = rep.artifacts
    return _Outputs(
        sim=np.load(io.BytesIO(files["sim.npy"])) if "sim.npy" in files else None,
        golden=np.load(io.BytesIO(files["golden.npy"])) if "golden.npy" in files else None,
        program_mem=files["program.mem"].decode() if "program.mem" in files else None,
        state_npz=files.get("state.npz"),
        trace=cast("Trace | None", rep.trace),
    )


def _save(
    save: DirTransaction, case: Case, outputs: _Outputs, doc: dict[str, Any], replay: Mapping[str, bytes | str]
) -> None:
    """``--save DIR``: program.asm, program.mem, arrays.npz (inputs, golden, output), state.npz (a fault's
    post-mortem), trace.npz (a traced run's records, :mod:`plena_sim.trace.file`), result.json and the replay set
    (:mod:`.replay`), swapped in for DIR as one set."""
    import numpy as np

    from plena_sim.trace.file import trace_npz_bytes

    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in case.inputs.items()}
    golden = case.golden if case.golden is not None else outputs.golden
    if golden is not None:
        arrays["golden"] = np.asarray(golden, dtype=np.float32)
    if outputs.sim is not None:
        arrays["output"] = np.asarray(outputs.sim, dtype=np.float32)
    with usage_errors("--save"):
        save.write("program.asm", case.program)
        if outputs.program_mem is not None:
            save.write("program.mem", outputs.program_mem)
        save.write("arrays.npz", npz_bytes(arrays))
        if outputs.state_npz is not None:
            save.write("state.npz", outputs.state_npz)
        if outputs.trace is not None:
            save.write("trace.npz", trace_npz_bytes(outputs.trace))
        save.write("result.json", json_text(doc, default=json_default, indent=1) + "\n")
        for name, data in replay.items():
            save.write(name, data)
        save.commit()


# ----------------------------------------------------------------------------------------- mutants


def cmd_mutants(args: argparse.Namespace, out: Console, err: Console) -> int:
    from testbenches import mutations as mut

    hooks = _mutation_names(args.only, mut)
    rows = []
    with status(err, "running mutants ...", args.json) as spinner:
        for h in hooks:
            rows += _mutant_rows(h, args, mut, spinner)
    all_caught = all(r["caught"] for r in rows)
    if args.json:
        print_json(out, {"all_caught": all_caught, "mutants": rows})
    else:
        _render_mutants(out, rows)
    return EXIT_OK if all_caught else EXIT_MISMATCH


def _mutation_names(only: str | None, mut: ModuleType) -> list[str]:
    if not only:
        return list(mut.MUTATIONS)
    wanted = [h.strip() for h in only.split(",") if h.strip()]
    unknown = [h for h in wanted if h not in mut.MUTATIONS]
    if unknown:
        raise UsageError(f"--only: unknown mutation(s) {', '.join(unknown)} (valid: {', '.join(mut.MUTATIONS)})")
    return wanted


def _mutant_rows(hook: str, args: argparse.Namespace, mut: ModuleType, spinner: Status | None) -> list[dict[str, Any]]:
    """One row per exposing case of mutation ``hook`` (only the cheapest one with ``--quick``)."""
    rows = []
    cases = [dict(mut.ci_subset())[hook]] if args.quick else mut.exposures(hook)
    for exp in cases:
        if spinner is not None:
            spinner.update(f"{hook} on {exp.label}")
        rep = mut.run_mutation(hook, exp, backend=args.backend)
        how = mut.how_caught(rep)
        rows.append(
            {
                "mutation": hook,
                "description": mut.DESCRIPTIONS[hook],
                "case": exp.label,
                "caught": bool(how),
                "how": how or "NOT CAUGHT",
                "worst_err_over_tol": rep.worst_ratio if how == "mismatch" else None,
                "detail": rep.summary,
            }
        )
    return rows


def _render_mutants(out: Console, rows: list[dict[str, Any]]) -> None:
    t = Table(title=f"mutants: {sum(r['caught'] for r in rows)}/{len(rows)} caught")
    for col in ("mutation", "exposing case", "caught", "how", "worst err/tol"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["mutation"],
            r["case"],
            "[green]yes[/]" if r["caught"] else "[red]NO[/]",
            r["how"],
            "" if r["worst_err_over_tol"] is None else f"{r['worst_err_over_tol']:.3g}",
        )
    out.print(t)
