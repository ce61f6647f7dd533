"""Running ``plena-sim`` in-process in a test: :func:`run`."""

from __future__ import annotations

from plena_cli.main import main


def run(capsys, *argv: object) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``plena-sim ARGV`` (each argument passed as ``str``)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
