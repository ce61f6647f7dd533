"""The ``plena-sim`` entry point: every command module, behind the error boundary of :mod:`.boundary`.

Every command module registers its subcommands (``register(sub)``) with a ``func(args, out, err) ->
exit code``; :func:`main` parses and dispatches them through :func:`.boundary.run_cli`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import (
    bench_command,
    boundary,
    config_commands,
    demo_command,
    exec_command,
    isa_commands,
    model_command,
    sweep_command,
    testbench_commands,
    trace_command,
)

__all__ = ["main", "build_parser", "user_error_types", "COMMAND_MODULES"]

#: the command modules, in the order of ``plena-sim --help``
COMMAND_MODULES = (
    isa_commands,
    config_commands,
    exec_command,
    demo_command,
    testbench_commands,
    model_command,
    sweep_command,
    trace_command,
    bench_command,
)


def build_parser() -> argparse.ArgumentParser:
    return boundary.build_parser(COMMAND_MODULES)


def user_error_types() -> tuple[type[Exception], ...]:
    return boundary.user_error_types()


def main(argv: Sequence[str] | None = None) -> int:
    return boundary.run_cli(sys.argv[1:] if argv is None else argv, COMMAND_MODULES)


if __name__ == "__main__":
    sys.exit(main())
