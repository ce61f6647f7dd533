"""A testbench, its parameters and its machine from the command line (``run`` and ``trace --testbench``): the
flags, and the :class:`~studies.testbench_run.CaseRequest` they make (the library resolves it: the parameters,
the machine and the case, :mod:`studies.testbench_run`).
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import TYPE_CHECKING, Any

from studies.testbench_run import CaseRequest, get_testbench

from .options import add_allow_unknown_arg, add_hw_arg

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
    from testbenches.harness import Case

__all__ = ["add_machine_args", "case_request", "get_testbench", "case_params_and_config", "build_case"]


def add_machine_args(p: argparse.ArgumentParser, variant_help: str) -> None:
    """``--variant``, ``--hw``, ``--config``/``--settings``, ``--section``, ``--set-hw`` and ``--seed``."""
    p.add_argument("--variant", default=None, help=variant_help)
    add_hw_arg(p)
    p.add_argument("--config", "--settings", dest="config", metavar="FILE", help="hardware config file")
    p.add_argument("--section", default="TRANSACTIONAL", help="TOML section of --config")
    p.add_argument("--set-hw", action="append", metavar="KEY=VALUE", help="override one hardware key")
    add_allow_unknown_arg(p)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--mutation",
        metavar="NAME",
        help="generate the program with this codegen bug of `plena-sim mutants` injected (to study a failure)",
    )


def case_request(args: argparse.Namespace, name: str) -> CaseRequest:
    """The request of testbench ``name`` that :func:`add_machine_args`' flags (and ``--case``, ``--set``) make."""
    return CaseRequest(
        testbench=name,
        case=args.case,
        set=list(getattr(args, "set", None) or []),
        variant=args.variant,
        hw=args.hw,
        config=args.config,
        section=args.section,
        set_hw=list(args.set_hw or []),
        allow_unknown_keys=args.allow_unknown_keys,
        seed=args.seed,
        mutation=getattr(args, "mutation", None),
    )


def case_params_and_config(
    mod: ModuleType, name: str, args: argparse.Namespace
) -> tuple[dict[str, Any], HardwareConfig]:
    """Parameters and hardware config of the arguments' request
    (:func:`studies.testbench_run.case_params_and_config`); sets ``args.variant`` to the variant used."""
    from studies import testbench_run

    req = case_request(args, name)
    params, cfg = testbench_run.case_params_and_config(mod, req)
    args.variant = req.variant
    return params, cfg


def build_case(
    mod: ModuleType,
    name: str,
    params: dict[str, Any],
    cfg: HardwareConfig,
    args: argparse.Namespace,
    functional: bool = True,
) -> Case:
    """The case of the arguments' request, built (:func:`studies.testbench_run.build_case`; for a timing-only run
    the testbench's layout-only build where it has one)."""
    from studies import testbench_run

    return testbench_run.build_case(mod, params, cfg, case_request(args, name), functional)
