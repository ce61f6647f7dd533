"""``plena-sim plot DIR --kind K`` (issue 19 item 5): ``run --save DIR --trace`` saves trace.npz, ``plot`` draws it
as a valid PNG and SVG (or the one ``-o`` file), ``--json`` prints series that agree with the run's own figures
(result.json), a re-save replaces the plots, and every usage error is one line, exit 2."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from plena_cli.main import main
from plena_cli.plot_command import KINDS
from plena_sim.trace.file import load_trace
from tests.util.cli import run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: a small testbench case with code regions (nested), HBM reads and every record kept
RUN = ("run", "linear", "--variant", "small", "--timing", "serial", "--capacity", "100000")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plot") / "linear"
    assert main([*RUN, "--save", str(folder), "--trace", "--json"]) == 0
    return folder


def _result(folder):
    return json.loads((folder / "result.json").read_text())


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _valid_svg(path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_save_with_trace_holds_the_run_trace(saved):
    trace = load_trace(saved / "trace.npz")
    doc = _result(saved)
    assert trace.dropped == 0 and trace.total == doc["instructions"] and trace.mode == "serial"
    assert max(r["end"] for r in trace.rows()) == doc["cycles"]
    assert [s["path"] for s in trace.region_slices()][:2] == ["linear", "linear/load_w"]


@pytest.mark.parametrize("kind", KINDS)
def test_plot_writes_png_and_svg(saved, capsys, tmp_path, kind):
    code, out, err = run(capsys, "plot", saved, "--kind", kind)
    png, svg = saved / f"plot-{kind}.png", saved / f"plot-{kind}.svg"
    assert code == 0 and out == ""
    assert err.splitlines() == [f"wrote {png}", f"wrote {svg}"]
    assert png.read_bytes()[:8] == PNG_MAGIC
    _valid_svg(svg)
    # a trace file given directly: the same; -o writes only that file
    target = tmp_path / f"{kind}.svg"
    code, _out, err = run(capsys, "plot", saved / "trace.npz", "--kind", kind, "-o", target)
    assert code == 0 and err.splitlines() == [f"wrote {target}"] and sorted(tmp_path.iterdir()) == [target]
    _valid_svg(target)


def _series(capsys, saved, kind, *extra):
    code, out, err = run(capsys, "plot", saved, "--kind", kind, "--json", *extra)
    assert code == 0 and err == "" and len(out.splitlines()) == 1
    return json.loads(out)


def test_utilization_json_sums_to_the_run_busy_cycles(saved, capsys):
    doc = _result(saved)
    s = _series(capsys, saved, "utilization", "--bins", "7")
    assert s["kind"] == "utilization" and s["timing_mode"] == "serial" and s["dropped"] == 0
    edges = s["edges"]
    assert len(edges) == 8 and edges[0] == 0 and edges[-1] == doc["cycles"]
    assert edges == [k * doc["cycles"] // 7 for k in range(8)]
    busy = {u: sum(v["busy_cycles"]) for u, v in s["units"].items()}
    assert busy == doc["stats"]["unit_busy_cycles"]
    assert sum(busy.values()) == doc["cycles"]  # serial: one unit busy at a time, all the time
    for k in range(7):  # so in every bin the units' busy cycles fill it
        assert sum(v["busy_cycles"][k] for v in s["units"].values()) == edges[k + 1] - edges[k]
    assert all(0 <= f <= 1 for v in s["units"].values() for f in v["fraction"])


def test_bandwidth_json_sums_to_the_run_hbm_bytes(saved, capsys):
    hbm = _result(saved)["stats"]["hbm"]
    s = _series(capsys, saved, "bandwidth", "--bins", "13")
    assert hbm["bytes_read"] > 0 and sum(s["read_bytes"]) == hbm["bytes_read"]
    assert sum(s["write_bytes"]) == hbm["bytes_written"]
    widths = np.diff(s["edges"])
    assert s["read_bytes_per_cycle"] == (np.array(s["read_bytes"]) / widths).tolist()


def test_regions_json_matches_the_region_table(saved, capsys):
    doc = _result(saved)
    s = _series(capsys, saved, "regions")
    table = {r["path"]: r["cycles_inclusive"] for r in doc["regions"] if r["path"] != "(unlabelled)"}
    assert s["paths"] == list(table) == ["linear", "linear/load_w", "linear/compute", "linear/compute/writeout"]
    assert s["cycles_inclusive"] == list(table.values()) and s["depth"] == [0, 1, 1, 2]
    assert s["total_cycles"] == doc["cycles"]


def test_a_re_save_replaces_the_plots(capsys, tmp_path):
    folder = tmp_path / "run"
    assert run(capsys, *RUN, "--save", folder, "--trace")[0] == 0
    assert run(capsys, "plot", folder, "--kind", "regions")[0] == 0
    assert (folder / "plot-regions.png").is_file()
    code, _out, err = run(capsys, *RUN, "--save", folder)  # the plots belong to the set; no trace this time
    assert code == 0 and not (folder / "plot-regions.png").exists() and not (folder / "trace.npz").exists()
    code, _out, err = run(capsys, "plot", folder, "--kind", "regions")
    assert code == 2
    assert _one_error_line(err) == (
        f"error: plot: {str(folder)!r} holds no trace.npz (saved without a trace); "
        f"re-run with --trace: plena-sim run NAME --save {folder} --trace"
    )


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--kind", "heat"], "error: plena-sim plot: argument --kind: invalid choice: 'heat'"),
        ([], "error: plena-sim plot: the following arguments are required: --kind"),
        (["--kind", "bandwidth", "--bins", "0"], "error: --bins: '0' must be >= 1"),
        (["--kind", "bandwidth", "--bins", "x"], "error: --bins: 'x' is not an integer (decimal or 0x hex)"),
        (["--kind", "regions", "-o", "{T}/plot.pdf"], "error: -o: '{T}/plot.pdf' must end in .png or .svg"),
        (["--kind", "regions", "-o", "{T}/no/plot.png"], "error: -o: "),
        (["--kind", "regions", "--json", "-o", "{T}/a.png"], "error: -o: --json prints the data series"),
    ],
)
def test_usage_errors_are_one_line(saved, capsys, tmp_path, argv, message):
    code, out, err = run(capsys, "plot", saved, *(a.replace("{T}", str(tmp_path)) for a in argv))
    line = _one_error_line(err)
    assert code == 2 and line.startswith(message.replace("{T}", str(tmp_path)))
    # --json: stdout holds one JSON object even for an error (the message of the red line), else nothing
    assert out == (json.dumps({"error": line.removeprefix("error: ")}) + "\n" if "--json" in argv else "")
    assert list(tmp_path.iterdir()) == []


def test_bad_inputs_are_one_line(capsys, tmp_path):
    code, _out, err = run(capsys, "plot", tmp_path / "missing", "--kind", "regions")
    assert (
        code == 2 and _one_error_line(err) == f"error: plot: no such directory or file: {str(tmp_path / 'missing')!r}"
    )
    bad = tmp_path / "trace.npz"
    bad.write_bytes(b"not a zip")
    code, _out, err = run(capsys, "plot", tmp_path, "--kind", "regions")
    assert code == 2 and _one_error_line(err).startswith(f"error: plot: cannot read {str(bad)!r}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.npz"]


def test_without_matplotlib_drawing_is_a_usage_error_and_json_works(saved, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, out, err = run(capsys, "plot", saved, "--kind", "bandwidth", "-o", saved.parent / "bw.png")
    assert code == 2 and out == ""
    assert _one_error_line(err) == (
        "error: plot: drawing needs matplotlib, an optional extra (pip install -e '.[sweep]' in the plena-sim "
        "checkout); --json prints the data without it"
    )
    assert not (saved.parent / "bw.png").exists()
    assert _series(capsys, saved, "bandwidth")["kind"] == "bandwidth"


def test_markup_in_a_region_name_is_drawn_verbatim(capsys, tmp_path):
    """A region name with rich markup and matplotlib math (``$...$``, here not even valid mathtext) is a label as
    written (the SVG's text)."""
    from isa import assemble
    from plena_sim.config import default_config
    from plena_sim.machine import Machine
    from plena_sim.trace.file import trace_npz_bytes

    name = r"[bold]x[/] $\nosuch{a_b}$"
    prog = assemble(f"; @region {name}\nS_ADDI_INT gp1, gp0, 1\n; @endregion\n")
    trace = Machine(default_config(), timing="serial").run(prog, trace=True).trace
    (tmp_path / "trace.npz").write_bytes(trace_npz_bytes(trace))
    code, _out, err = run(capsys, "plot", tmp_path, "--kind", "regions")
    assert code == 0, err
    assert _series(capsys, tmp_path, "regions")["paths"] == [name]
    svg = (tmp_path / "plot-regions.svg").read_text()
    assert f"<!-- {name} -->" in svg  # matplotlib's SVG names every text it drew in a comment


def test_a_truncated_trace_is_plotted_over_its_kept_span_with_a_warning(capsys, tmp_path):
    folder = tmp_path / "run"
    assert run(capsys, *RUN[:-1], "100", "--save", folder, "--trace")[0] == 0  # --capacity 100
    trace = load_trace(folder / "trace.npz")
    total = _result(folder)["instructions"]
    assert len(trace) == 100 and trace.total == total
    s = _series(capsys, folder, "utilization", "--bins", "5")
    assert s["records"] == 100 and s["dropped"] == total - 100
    assert s["edges"][0] == min(r["start"] for r in trace.rows()) > 0
    assert s["edges"][-1] == _result(folder)["cycles"]
    code, _out, err = run(capsys, "plot", folder, "--kind", "utilization")
    assert code == 0 and err.splitlines()[:2] == [
        f"wrote {folder}/plot-utilization.png",
        f"wrote {folder}/plot-utilization.svg",
    ]
    assert " ".join(err.split()[4:]) == (
        f"warning: the plotted trace holds only the newest 100 of {total:,} instructions (the trace ring's "
        f"capacity); --capacity {total} keeps them all"
    )
