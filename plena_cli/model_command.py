"""``plena-sim model``: a model preset's prefill layer and decode step, judged, and what they imply.

``plena-sim model NAME`` (a preset of :mod:`programs.model.presets`, or the path of a ``.toml`` file of the
same form) runs :func:`studies.model.run_model` -- the ``decoder_layer`` testbench over ``--seq`` tokens and the
``decoder_decode`` testbench after a cache of ``--kv`` tokens, judged, with the TTFT and the decode rate at the
hardware preset's clock -- and renders its document (:mod:`.model_report`; ``--json``: the document itself).

A shape the machine or the generators cannot take is refused (exit 2, the message names the parameter
and the limit); a mismatch is a FAIL (exit 1), a simulator fault a FAIL with exit 3.
``--list`` lists the presets, ``--show`` prints one (``--json``: as JSON).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import EXIT_FAULT, EXIT_MISMATCH, EXIT_OK, UsageError
from .interrupts import add_timeout_arg
from .model_report import render_list, render_model
from .options import add_backend_arg, add_hw_arg, add_timing_arg, examples, timing_only_of
from .render import compile_core, print_fault, print_json, status

if TYPE_CHECKING:
    from rich.console import Console

    from programs.model.presets import ModelPreset

__all__ = ["register", "cmd_model"]

#: the verdict of a timing-only model run that ran (testbenches.harness.TIMING_ONLY_VERDICT; that module loads numba)
TIMING_ONLY_VERDICT = "not judged (timing-only)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "model",
        help="a model preset's prefill layer and decode step: verdicts, cycles, TTFT, tokens/s",
        **examples("plena-sim model --list", "plena-sim model tiny --seq 128", "plena-sim model llama-3.1-8b --show"),
    )
    p.add_argument("name", metavar="NAME", nargs="?", help="a model preset (--list shows them) or a .toml path")
    p.add_argument("--list", action="store_true", help="list the model presets")
    p.add_argument("--show", action="store_true", help="print the preset (its file with the sources)")
    add_hw_arg(p)
    add_timing_arg(p)
    p.add_argument("--seq", type=int, default=256, help="prompt tokens of the prefill layer (default 256)")
    p.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    p.add_argument("--kv", type=int, default=None, help="cache length before the decoded token (default: --seq)")
    p.add_argument("--layers", type=int, default=None, help="layers of the model (default: the preset's)")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: the testbenches')")
    add_backend_arg(p)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--prefill-only", action="store_true", help="run only the prefill layer (decode figures null)")
    only.add_argument("--decode-only", action="store_true", help="run only the decode step (prefill figures null)")
    add_timeout_arg(p)
    p.add_argument(
        "--force", action="store_true", help="run a functional run even when its host estimate exceeds the limits"
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_model)


def cmd_model(args: argparse.Namespace, out: Console, err: Console) -> int:
    from studies.model import execute, load_model, prepare
    from studies.model.limits import check_limits
    from studies.model.run import PHASES

    if args.list:
        if args.name:
            raise UsageError("model: --list takes no NAME")
        return _list(args.json, out)
    if not args.name:
        raise UsageError("model: give a model NAME or a .toml path (plena-sim model --list shows the presets)")
    preset = load_model(args.name)
    if args.show:
        _show(preset, args.json, out)
        return EXIT_OK
    functional, routing = timing_only_of(args)
    plan = prepare(
        preset,
        timing_only=not functional,
        routing=routing,
        phases=("prefill",) if args.prefill_only else ("decode",) if args.decode_only else PHASES,
        hw=args.hw,
        timing=args.timing,
        seq=args.seq,
        batch=args.batch,
        kv=args.kv,
        layers=args.layers,
        seed=args.seed,
        backend=args.backend,
    )
    if not args.force:
        check_limits(plan)  # a functional run far beyond this machine: refused before any input is built
    compile_core(err, args.json)
    with status(err, "running ...", args.json) as spinner:
        doc = execute(plan, progress=None if spinner is None else spinner.update)
    if args.json:
        print_json(out, doc)
    else:
        render_model(out, doc)
    return _exit_code(doc, err, quiet=args.json)


def _list(as_json: bool, out: Console) -> int:
    from programs.model.presets import load, names

    presets = [load(n) for n in names()]
    if as_json:
        print_json(out, [p.to_dict() for p in presets], indent=2)
    else:
        render_list(out, presets)
    return EXIT_OK


def _show(preset: ModelPreset, as_json: bool, out: Console) -> None:
    if as_json:
        print_json(out, preset.to_dict(), indent=2)
    else:
        out.file.write(preset.text)


def _exit_code(doc: Mapping[str, Any], err: Console, quiet: bool) -> int:
    if doc["verdict"] in ("PASS", TIMING_ONLY_VERDICT):
        return EXIT_OK
    faults = [r["fault"] for r in doc["runs"].values() if r["fault"] is not None]
    if not faults:
        return EXIT_MISMATCH
    if not quiet:
        print_fault(err, faults[0]["message"])
    return EXIT_FAULT
