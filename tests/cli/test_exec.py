"""`plena-sim exec`: raw images in, dumps out, located faults with exit 3; `plena-sim demo`."""

import json

import numpy as np
import pytest

from plena_sim.config import default_config
from plena_sim.memory.image import ImageBuilder
from plena_sim.timing.rtl import STALL_REASONS
from tests.util.cli import run


@pytest.fixture
def image(tmp_path):
    """A raw HBM image holding X[4, 64] (MXFP8) at 0; returns (path, dequantized X)."""
    cfg = default_config()
    b = ImageBuilder(config=cfg)
    x = (np.arange(4 * 64) % 16 - 8).astype(np.float32).reshape(4, 64)  # MX-exact (3 significant bits)
    p = b.add("x", x, "HBM_V_ACT_TYPE", address=0)
    raw = tmp_path / "hbm.bin"
    b.save(raw)
    assert np.array_equal(p.values, x)
    return raw, x


PROGRAM = """\
S_ADDI_INT gp2, gp0, 256      ; SCALE = element bytes of X
C_SET_SCALE_REG gp2
S_ADDI_INT gp3, gp0, 128      ; VRAM destination row 2
H_PREFETCH_V gp3, gp0, a0, 0, 0
V_ADD_VV gp3, gp3, gp3        ; row 2 doubled
"""


def test_exec_dumps_expected_vram_rows(tmp_path, capsys, image):
    raw, x = image
    prog = tmp_path / "p.asm"
    prog.write_text(PROGRAM)
    out_npy = tmp_path / "rows.npy"
    fp_npy = tmp_path / "fp.npy"
    hbm_bin = tmp_path / "dump.bin"
    code, out, err = run(
        capsys,
        "exec",
        prog,
        "--hbm",
        raw,
        "--dump-vram",
        f"128:4={out_npy}",
        "--fp",
        "1.5,-2",
        "--dump-fp-sram",
        fp_npy,
        "--dump-hbm",
        f"0:16={hbm_bin}",
        "--json",
    )
    assert code == 0, err
    rows = np.load(out_npy)
    assert rows.shape == (4, 64)
    assert np.array_equal(rows[0], 2 * x[0])  # doubled row (exact in bf16)
    assert np.array_equal(rows[1:], x[1:])
    fp = np.load(fp_npy)
    assert fp[:3].tolist() == [1.5, -2.0, 0.0] and fp.shape == (1024,)
    assert hbm_bin.read_bytes() == raw.read_bytes()[:16]
    doc = json.loads(out)
    assert doc["instructions"] == 5 and doc["by_opcode"]["H_PREFETCH_V"] == 1


def test_exec_mem_input_and_rich_summary(tmp_path, capsys, image):
    raw, _ = image
    asm = tmp_path / "p.asm"
    asm.write_text(PROGRAM)
    mem = tmp_path / "p.mem"
    assert run(capsys, "asm", asm, "-o", mem)[0] == 0
    code, out, _ = run(capsys, "exec", mem, "--hbm-at", f"0={raw}")
    assert code == 0 and "instructions" in out and "H_PREFETCH_V" in out


REGIONS_PROGRAM = """\
S_ADDI_INT gp1, gp0, 1
; @region outer
M_MM 0, gp0, gp0
; @region inner
S_ADDI_INT gp2, gp0, 2
S_ADDI_INT gp3, gp0, 3
; @endregion
; @endregion
"""


def test_exec_reports_regions_in_json_and_rich(tmp_path, capsys):
    prog = tmp_path / "r.asm"
    prog.write_text(REGIONS_PROGRAM)
    code, out, err = run(capsys, "exec", prog, "--json")
    assert code == 0, err
    doc = json.loads(out)
    core = [
        {k: e[k] for k in ("path", "instructions", "cycles_exclusive", "cycles_inclusive", "macs")}
        for e in doc["regions"]
    ]
    assert doc["cycles"] == 67 and core == [  # serial: S_ADDI 1, M_MM 64, S_ADDI 1 + 1
        {"path": "outer", "instructions": 1, "cycles_exclusive": 64, "cycles_inclusive": 66, "macs": 1024},
        {"path": "outer/inner", "instructions": 2, "cycles_exclusive": 2, "cycles_inclusive": 2, "macs": 0},
        {"path": "(unlabelled)", "instructions": 1, "cycles_exclusive": 1, "cycles_inclusive": 1, "macs": 0},
    ]
    code, out, _ = run(capsys, "exec", prog)
    assert code == 0 and "regions" in [line.strip() for line in out.splitlines()]
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:6]] for line in out.splitlines()
            if line.startswith("│ outer") or line.startswith("│ (unlabelled)")}  # fmt: skip
    assert rows == {"outer": ["1", "64", "66", "98.5%"], "outer/inner": ["2", "2", "2", "3.0%"],
                    "(unlabelled)": ["1", "1", "1", "1.5%"]}  # fmt: skip


def test_exec_without_regions_prints_no_region_table(tmp_path, capsys):
    prog = tmp_path / "p.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 1\n")
    code, out, _ = run(capsys, "exec", prog)
    titles = [line.strip() for line in out.splitlines()]
    assert code == 0 and "instructions by opcode" in titles and "regions" not in titles and "(unlabelled)" not in out
    code, out, _ = run(capsys, "exec", prog, "--json")
    zero = {"scalar": 0, "vector": 0, "matrix_compute": 0, "matrix_writeout": 0, "hbm_matrix_dma": 0}
    assert json.loads(out)["regions"] == [
        {
            "path": "(unlabelled)",
            "instructions": 1,
            "cycles_exclusive": 1,
            "cycles_inclusive": 1,
            "macs": 0,
            "busy": zero | {"scalar": 1, "hbm_vector_dma": 0, "hbm_store": 0, "control": 0},
            "stalls": dict.fromkeys(STALL_REASONS, 0),
            "hbm_read_bytes": 0,
            "hbm_write_bytes": 0,
            "mac_utilization": 0.0,
        }
    ]


def test_exec_misaligned_program_exits_3_with_located_message(tmp_path, capsys):
    prog = tmp_path / "bad.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 8\n; comment line\nV_ADD_VV gp2, gp1, gp0\n")
    code, out, err = run(capsys, "exec", prog)
    assert code == 3
    assert f"{prog}:3" in err and "V_ADD_VV gp2, gp1, gp0" in err and "AL-VROW" in err and "pc 1" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--dump-vram", "3:1=x.npy"], "whole VRAM rows"),
        (["--dump-vram", "0:1"], "ADDR:ROWS=OUT.npy"),
        (["--dump-hbm", "zz:1=x.bin"], "not an integer"),
        (["--dump-vram", "0:1=/nonexistent/dir/x.npy"], "does not exist"),
        (["--hbm", "/nonexistent.bin"], "cannot read HBM image"),
        (["--fp", "1,x"], "comma-separated"),
        (["--int-sram", "/nonexistent.bin"], "cannot read"),
    ],
)
def test_exec_usage_errors(tmp_path, capsys, extra, needle):
    prog = tmp_path / "p.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 1\n")
    code, _, err = run(capsys, "exec", prog, *extra)
    assert code == 2, err
    assert needle in err and "Traceback" not in err


def test_demo_passes(capsys):
    code, out, _ = run(capsys, "demo")
    assert code == 0 and "PASS" in out
