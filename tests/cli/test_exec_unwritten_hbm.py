"""``plena-sim exec``: a DMA that reads HBM bytes no ``--hbm`` image (or store) wrote reads zeros, and says so
once, with the first such address (issue 19, item 6); the machine notes it in both backends alike."""

import json

import numpy as np
import pytest

from plena_sim.machine import Machine
from tests.util.cli import run

#: H_PREFETCH_V of 4 rows of 64 B at HBM 0..255 (MX activations: the 16 scale bytes of row k at 256 + 16 k, read
#: right after the row: in program order the first bytes read are 0..63, then 256..271, then 64..127, ...)
READ = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
H_PREFETCH_V gp2, gp0, a0, 0, 0
"""


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "read.asm"
    p.write_text(READ)
    return p


def _image(tmp_path, n):
    path = tmp_path / f"img{n}.bin"
    path.write_bytes(bytes((k % 255) + 1 for k in range(n)))  # no zero byte: every page is stored
    return path


def test_reading_past_the_image_warns_once_with_the_first_address(capsys, tmp_path, prog):
    code, out, err = run(capsys, "exec", prog, "--hbm", _image(tmp_path, 260), "--json")
    assert code == 0 and json.loads(out)["hbm_unwritten_read"] == 260  # row 0's scales 256..271 cross the end
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        "warning: the program read HBM byte 0x104, which no --hbm image or store wrote: it read as 0 "
        "(the images loaded end at 0x104; this is the first such read)"
    ]
    code, out, _ = run(capsys, "exec", prog, "--hbm", _image(tmp_path, 100), "--json")
    assert json.loads(out)["hbm_unwritten_read"] == 256  # row 0's scales are read before row 1's bytes 64..


def test_no_image_at_all_warns_at_the_first_byte_read(capsys, prog):
    code, _out, err = run(capsys, "exec", prog)
    assert code == 0 and "read HBM byte 0x0, which no --hbm image" in err and "no --hbm image was loaded" in err


def test_an_image_that_covers_every_read_gives_no_warning(capsys, tmp_path, prog):
    code, out, err = run(capsys, "exec", prog, "--hbm", _image(tmp_path, 4096), "--json")
    assert code == 0 and json.loads(out)["hbm_unwritten_read"] is None and "warning" not in err


def test_an_all_zero_image_counts_as_loaded(capsys, tmp_path, prog):
    """Zero pages of an image are not stored (sparse HBM), but they were loaded: no warning."""
    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(bytes(4096))
    code, out, err = run(capsys, "exec", prog, "--hbm", zeros, "--json")
    assert code == 0 and json.loads(out)["hbm_unwritten_read"] is None and "warning" not in err


def test_reading_back_what_the_program_stored_is_not_a_warning(capsys, tmp_path):
    p = tmp_path / "store_then_read.asm"
    p.write_text(READ.replace("H_PREFETCH_V", "H_STORE_V") + "H_PREFETCH_V gp2, gp0, a0, 0, 0\n")
    code, out, err = run(capsys, "exec", p, "--json")
    assert code == 0 and json.loads(out)["hbm_unwritten_read"] is None and "warning" not in err


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_both_backends_note_the_same_first_address_and_each_run_starts_afresh(backend):
    m = Machine(backend=backend)
    m.state.hbm.write(0, np.arange(200, dtype=np.uint8))
    m.run(READ)
    assert m.state.hbm.unwritten_read == 256  # the rows 0..255 are written, their scales are not
    m.state.hbm.write(0, np.zeros(4096, dtype=np.uint8))
    m.run(READ)
    assert m.state.hbm.unwritten_read is None
