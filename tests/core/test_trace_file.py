"""A trace saved as .npz and loaded back (plena_sim.trace.file): the same records, figures, regions, region slices
and rows; a file of another record layout refused by name."""

from __future__ import annotations

import io

import numpy as np
import pytest

from isa import assemble
from isa.fileio import npz_bytes
from plena_sim.config import default_config
from plena_sim.machine import Machine
from plena_sim.timing.scoreboard import REC_FIELDS
from plena_sim.trace.file import load_trace, trace_npz_bytes
from tests.timing.test_perfetto_regions import NESTED, NESTED_SLICES


def _saved(tmp_path, data: bytes):
    path = tmp_path / "trace.npz"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("timing", ["serial", "overlap"])
def test_round_trip_keeps_records_regions_and_rows(tmp_path, timing):
    program = assemble(NESTED)
    trace = Machine(default_config(), timing=timing).run(program, trace=True).trace
    loaded = load_trace(_saved(tmp_path, trace_npz_bytes(trace)))
    assert loaded.records.dtype == np.int64 and np.array_equal(loaded.records, trace.records)
    assert (loaded.total, loaded.capacity, loaded.mode, loaded.burst_bytes, loaded.tile_elems) == (
        trace.total,
        trace.capacity,
        timing,
        trace.burst_bytes,
        64 * 64,
    )
    assert loaded.program.regions == program.regions and len(program.regions) == 4
    assert loaded.region_slices() == trace.region_slices()
    assert loaded.rows() == trace.rows()  # source line and text of every record
    assert loaded.rows()[2]["text"] == "M_MM 0, gp0, gp0" and loaded.rows()[2]["line"] == 5
    if timing == "serial":
        assert [(s["path"], s["start"], s["end"]) for s in loaded.region_slices()] == [
            (p, a, b) for p, a, b, _n in NESTED_SLICES
        ]


def test_a_truncated_trace_keeps_its_total(tmp_path):
    trace = Machine(default_config(), timing="serial").run(assemble(NESTED), trace=5).trace
    loaded = load_trace(_saved(tmp_path, trace_npz_bytes(trace)))
    assert len(loaded) == 5 and loaded.total == 18 and loaded.dropped == 13  # 1 + 1 + 3 x 5 + 1
    assert np.array_equal(loaded.records, trace.records)


def test_a_given_program_replaces_the_saved_one(tmp_path):
    program = assemble(NESTED)
    trace = Machine(default_config(), timing="serial").run(program, trace=True).trace
    assert load_trace(_saved(tmp_path, trace_npz_bytes(trace)), program=program).program is program


def _arrays(data: bytes) -> dict:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda f, r: (f + ["bank"], np.zeros((len(r), len(f) + 1), np.int64)), r"\(unknown bank\)"),
        (lambda f, r: (f[:-1], r[:, :-1]), rf"\(missing {REC_FIELDS[-1]}\)"),
        (lambda f, r: ([f[1], f[0], *f[2:]], r), r"\(the same fields in another order\)"),
    ],
)
def test_another_record_layout_is_refused(tmp_path, change, message):
    trace = Machine(default_config(), timing="serial").run(assemble(NESTED), trace=True).trace
    arrays = _arrays(trace_npz_bytes(trace))
    fields, records = change(list(REC_FIELDS), arrays["records"])
    arrays.update(fields=np.array(fields, dtype=np.str_), records=records)
    path = _saved(tmp_path, npz_bytes(arrays))
    with pytest.raises(
        ValueError, match=r"trace.npz: the trace records were written with another record layout " + message
    ):
        load_trace(path)


def test_a_file_that_is_no_trace_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a plena-sim trace file"):
        load_trace(_saved(tmp_path, npz_bytes({"x": np.zeros(3)})))
    with pytest.raises(ValueError, match="not a plena-sim trace file"):
        load_trace(_saved(tmp_path, b"PK\x03\x04 truncated"))
