"""The limits of ``exec`` / ``trace`` / ``run`` on the command line (issue 20: D4, D18): the work budget, the
range of ``--max-instructions`` and ``--capacity``, the values ``--timeout`` takes; and the stop handlers of
``main`` are in place only while it runs.
"""

from __future__ import annotations

import signal
import threading

import pytest

from plena_cli import boundary
from plena_cli.main import command_modules, main

SMALL = ["--set", "MLEN=16", "--set", "VLEN=16", "--set", "BLEN=4", "--set", "HLEN=4", "--set", "BROADCAST_AMOUNT=4"]


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text("S_ADDI_INT gp1, gp0, 16\nH_PREFETCH_V gp1, gp0, a0, 0, 0\nV_ADD_VV gp1, gp1, gp1\n")
    return p


@pytest.mark.parametrize("command", ["exec", "trace"])
def test_max_instructions_beyond_int64_is_a_usage_error(capsys, prog, command):
    """D18. Before: --max-instructions 2**70 was an internal error (exit 4, an OverflowError in the core call)."""
    code, _, err = cli(capsys, command, prog, *SMALL, "--max-instructions", 2**70)
    assert code == 2 and "Traceback" not in err
    assert "--max-instructions" in err and "2^63-1" in err and str(2**70) in err
    code, _, err = cli(capsys, command, prog, *SMALL, "--max-instructions", 2**63 - 1)
    assert code == 0, err


def test_trace_capacity_beyond_the_limit_is_a_usage_error(capsys, prog):
    """D18. Before: trace --capacity 2**70 was an internal error (exit 4)."""
    for capacity in (2**70, 2**32 + 1):
        code, _, err = cli(capsys, "trace", prog, *SMALL, "--capacity", capacity)
        assert code == 2 and "--capacity" in err and "2^32" in err and "Traceback" not in err
    code, _, err = cli(capsys, "trace", prog, *SMALL, "--capacity", 0)
    assert code == 2 and "--capacity" in err


def test_the_budget_counts_dma_rows(capsys, prog):
    """D4: --max-instructions is a work budget; the H_PREFETCH_V of 4 rows (the reference's P_V) is 5 units."""
    code, _, err = cli(capsys, "exec", prog, *SMALL, "--set", "HBM_V_Prefetch_Amount=4", "--max-instructions", 5)
    assert code == 3 and "BUDGET" in err and "the next instruction needs 5" in err and "max_instructions=5" in err
    assert "2 instructions retired" not in err and "1 instructions retired" in err
    code, _, err = cli(capsys, "exec", prog, *SMALL, "--set", "HBM_V_Prefetch_Amount=4", "--max-instructions", 7)
    assert code == 0, err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e30", "soon"])
def test_timeout_values(capsys, prog, value):
    code, _, err = cli(capsys, "exec", prog, *SMALL, f"--timeout={value}")
    assert code == 2 and "--timeout" in err and "Traceback" not in err


def test_timeout_in_time_passes(capsys, prog):
    code, out, err = cli(capsys, "exec", prog, *SMALL, "--timeout", "600")
    assert code == 0 and "Simulation completed" in out, err
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # disarmed


def test_handlers_are_installed_only_while_main_runs(capsys, prog):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    seen = {}

    def record(args, out, err):
        seen.update({s: signal.getsignal(s) for s in before})
        return 0

    import plena_cli.exec_command as ex

    real = ex.cmd_exec
    ex.cmd_exec = record
    try:
        assert cli(capsys, "exec", prog, "--timeout", "60")[0] == 0
    finally:
        ex.cmd_exec = real
    assert all(seen[s] is not before[s] for s in before)  # ours while the command ran
    assert {s: signal.getsignal(s) for s in before} == before  # restored


def test_in_process_callers_in_threads_get_no_handlers_and_no_timeout(prog):
    """The sweep runs ``run_cli`` in worker threads: no signal handler is touched there, --timeout is refused."""
    import io

    results = {}

    def worker():
        out, err = io.StringIO(), io.StringIO()
        results["plain"] = boundary.run_cli(["exec", str(prog), *SMALL], command_modules(), files=(out, err))
        out2, err2 = io.StringIO(), io.StringIO()
        argv = ["exec", str(prog), *SMALL, "--timeout", "5"]
        results["timeout"] = boundary.run_cli(argv, command_modules(), files=(out2, err2))
        results["timeout_err"] = err2.getvalue()

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert results["plain"] == 0 and results["timeout"] == 2 and "--timeout" in results["timeout_err"]
    assert signal.getsignal(signal.SIGINT) is before
