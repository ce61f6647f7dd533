"""The ``plena-sim`` entry point: every command module, behind the error boundary of :mod:`.boundary`.

Every command module registers its subcommands (``register(sub)``) with a ``func(args, out, err) ->
exit code``; :func:`main` parses and dispatches them through :func:`.boundary.run_cli`. Its first act is to
install the stop handlers of :mod:`.interrupts` (this module imports nothing else at the top), so a Ctrl-C or a
SIGTERM while the command modules (rich, numpy, numba) are still being imported is handled like any other: one
line, exit 130 / 143, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from plena_sim.errors import RunStopped

from . import interrupts
from .errors import EXIT_OK

if TYPE_CHECKING:
    import argparse

__all__ = ["main", "build_parser", "user_error_types", "command_modules"]


def command_modules() -> tuple[ModuleType, ...]:
    """The command modules, in the order of ``plena-sim --help``."""
    from . import (
        bench_command,
        config_commands,
        demo_command,
        diff_command,
        exec_command,
        isa_commands,
        model_command,
        plot_command,
        profile_command,
        sweep_command,
        testbench_commands,
        timing_command,
        trace_command,
    )

    return (
        isa_commands,
        config_commands,
        exec_command,
        demo_command,
        testbench_commands,
        model_command,
        sweep_command,
        trace_command,
        timing_command,
        profile_command,
        diff_command,
        plot_command,
        bench_command,
    )


def build_parser() -> argparse.ArgumentParser:
    from . import boundary

    return boundary.build_parser(command_modules())


def user_error_types() -> tuple[type[Exception], ...]:
    from . import boundary

    return boundary.user_error_types()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``argv`` (default: the process's arguments); the exit code. As the process's entry point (no ``argv``),
    the process ends at once when the command is done (:func:`.interrupts.exit_now`: stdio flushed, ``atexit``
    handlers run, no interpreter teardown): the teardown takes most of a second with Numba's LLVM loaded, and a
    Ctrl-C in it, with the default handlers back, killed the process by SIGINT (exit -2) after a finished command."""
    code = _main(list(sys.argv[1:] if argv is None else argv))
    if argv is None:
        interrupts.exit_now(code)
    return code


def _main(args: list[str]) -> int:
    try:
        with interrupts.Guard() as guard:
            from . import boundary  # the heavy imports, with the handlers in place

            code = boundary.run_cli(args, command_modules(), guard=guard)
            return guard.stop.exit_code if guard.stop is not None else code
    except (KeyboardInterrupt, RunStopped) as stop:  # arrived outside the boundary (imports, exit)
        code, line = interrupts.stop_report(stop)
        sys.stderr.write(line + "\n")
        return code
    except BrokenPipeError:
        interrupts.silence_stdout()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
