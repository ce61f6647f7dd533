"""The command line's error boundary, shared by ``plena-sim`` (:mod:`plena_cli.main`) and every in-process
caller of a command (the same parser, the same code path; a sweep's workers run a point's testbench case through
the library, :mod:`studies.sweep.point`, which gives the same verdicts and messages).

:func:`run_cli` parses ``argv`` with the subcommands the given command modules register (``register(sub)``,
each with a ``func(args, out, err) -> exit code``) and turns every failure into an exit code
(:mod:`plena_cli.errors`): the library's typed input errors and :class:`~plena_cli.errors.UsageError` print one
red line (plus the located assembler diagnostics) and exit 2, a simulator fault exits 3, a generator that emitted
an invalid instruction (:class:`~programs.asm.GeneratorError`) prints its name and the bad value and exits 4,
anything else is a bug (exit 4, ``--debug`` re-raises it with its traceback). A stop request (:mod:`.interrupts`:
Ctrl-C, SIGTERM, ``--timeout``) prints one line and exits 130 / 143 / 124; a closed stdout pipe exits 0 silently.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, TextIO

from plena_sim.errors import RunStopped

from .errors import EXIT_BUG, EXIT_FAULT, EXIT_OK, EXIT_USAGE, UsageError
from .interrupts import silence_stdout, stop_report
from .render import consoles

if TYPE_CHECKING:
    from rich.console import Console

    from .interrupts import Guard

__all__ = ["run_cli", "build_parser", "user_error_types"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints usage + exits 2; keep the exit code, add our red line
        raise UsageError(f"{self.prog}: {message}")


def build_parser(modules: Sequence[ModuleType]) -> argparse.ArgumentParser:
    p = _Parser(prog="plena-sim", description="PLENA accelerator simulator, assembler and testbenches")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    sub: argparse._SubParsersAction[argparse.ArgumentParser] = p.add_subparsers(
        dest="command", parser_class=_Parser, metavar="COMMAND"
    )
    for module in modules:
        module.register(sub)
    return p


def user_error_types() -> tuple[type[Exception], ...]:
    """The exceptions that are the user's input error (exit 2, one red line), not a bug: the command line's own
    and the library's (:func:`studies.errors.input_error_types`: a refused study request, the typed input errors
    of the floors below)."""
    from studies.errors import input_error_types

    return UsageError, *input_error_types()


def run_cli(
    argv: Sequence[str],
    modules: Sequence[ModuleType],
    files: tuple[TextIO, TextIO] | None = None,
    guard: Guard | None = None,
) -> int:
    """Run the command of ``argv`` (one of ``modules``' subcommands) behind the error boundary; its output goes to
    stdout and stderr, or to ``files`` (out, err: an in-process caller's own, so that concurrent callers in
    threads never share a stream). ``guard``: the stop handlers of a ``plena-sim`` process (:func:`.main.main`),
    None for an in-process caller (no ``--timeout`` then)."""
    out, err = consoles(*(files or (None, None)))
    argv = list(argv)
    try:
        return _dispatch(argv, modules, out, err, guard)
    except (KeyboardInterrupt, RunStopped) as stop:
        stop_code, line = stop_report(stop)
        err.print(line, style="red", markup=False)
        _json_error(argv, out, line)
        return stop_code
    except BrokenPipeError:  # whoever read our output has gone (``| head -1``): not an error
        if files is None:
            silence_stdout()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: classify every failure
        code = _expected_failure(exc, err)
        if code is not None:
            _json_error(argv, out, str(exc))
            return code
        if "--debug" in argv:
            raise
        code = _unexpected_failure(exc, err)
        _json_error(argv, out, _unexpected_text(exc))
        return code


def _json_error(argv: Sequence[str], out: Console, message: str) -> None:
    """With ``--json``, a command that failed before printing its document prints ``{"error": message}`` instead:
    stdout holds exactly one JSON object whatever happened."""
    from .render import json_documents, print_json

    args = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" in args and not json_documents(out):
        print_json(out, {"error": message})


def _unexpected_text(exc: Exception) -> str:
    from plena_sim.config import out_of_memory_message

    if isinstance(exc, MemoryError):
        return out_of_memory_message(exc)
    return f"internal error: {type(exc).__name__}: {exc}"


def _dispatch(argv: list[str], modules: Sequence[ModuleType], out: Console, err: Console, guard: Guard | None) -> int:
    parser = build_parser(modules)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    timeout = getattr(args, "timeout", None)
    if guard is None:
        if timeout is not None:
            raise UsageError("--timeout: only a plena-sim process (its main thread) can bound a command's time")
        return int(args.func(args, out, err))
    with guard.command(timeout):
        return int(args.func(args, out, err))


def _expected_failure(exc: Exception, err: Console) -> int | None:
    """The exit code of a user error or a simulator fault (printed), else None."""
    from isa import AssemblerError
    from plena_sim.faults import SimFault

    if isinstance(exc, AssemblerError):  # every error counted, the first ones shown (then "... and N more")
        err.print(f"[red]error:[/] {exc.count} assembler error" + ("s" if exc.count != 1 else ""), markup=True)
        for line in exc.lines():
            err.print(f"  {line}", markup=False)
        return EXIT_USAGE
    if isinstance(exc, user_error_types()):
        err.print("[red]error:[/] ", end="")
        err.print(str(exc), markup=False)
        return EXIT_USAGE
    if isinstance(exc, SimFault):
        err.print("[red]fault:[/] ", end="")
        err.print(str(exc), markup=False)
        return EXIT_FAULT
    return _generator_failure(exc, err)


def _generator_failure(exc: Exception, err: Console) -> int | None:
    """A generator's invalid instruction, loop count or address (exit 4: the generator's bug, named), else None."""
    from programs.asm import GeneratorError

    if not isinstance(exc, GeneratorError):
        return None
    err.print("[red]generator error:[/] ", end="")
    err.print(f"{exc.generator}: {exc.detail} (bad value: {exc.value!r})", markup=False)
    return EXIT_BUG


def _unexpected_failure(exc: Exception, err: Console) -> int:
    """Out of host memory (exit 2: not a bug, no traceback), else an internal error (exit 4)."""
    if isinstance(exc, MemoryError):  # what failed and what this host has (D22), not a guess at a config key
        from plena_sim.config import out_of_memory_message

        err.print("[red]error:[/] ", end="")
        err.print(out_of_memory_message(exc), markup=False)
        return EXIT_USAGE
    err.print(f"[red]internal error:[/] {type(exc).__name__}: ", end="")
    err.print(f"{exc} (run with --debug for the traceback; please report it)", markup=False)
    return EXIT_BUG
