"""Fuzz: random and corrupted input files -- ``.mem`` programs, HBM images with their JSON manifest,
FP / INT SRAM preloads -- through the library readers and through ``plena-sim exec``.

Contract: a reader returns its result or raises its one clear error type (MemFormatError, ImageError;
ImageDoesNotFit is an ImageError) naming the file; the CLI exits 2 with a one-line message and never
prints a Python traceback.

Default CI size: 200 .mem + 250 images + 120 SRAM preloads + 60 CLI runs (``PLENA_FUZZ_SCALE``).
"""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
from fuzzlib import BASE_SEED, SMALL, count

from isa import MemFormatError, format_mem, parse_mem, read_mem
from plena_sim.hbm.storage import Hbm
from plena_sim.memory.image import ImageBuilder, ImageError, load_image, load_raw_image
from plena_sim.memory.sram_io import load_fp_sram_file, load_int_sram_file

pytestmark = pytest.mark.fuzz


def _junk(r: random.Random, n: int) -> bytes:
    return bytes(r.randrange(256) for _ in range(n))


# ------------------------------------------------------------------------------------------- .mem


def corrupt_mem_text(r: random.Random) -> bytes:
    words = [r.randrange(1 << 32) for _ in range(r.randrange(0, 20))]
    text = format_mem(words).encode()
    what = r.randrange(8)
    if what == 0 and text:
        return text[: r.randrange(len(text))]  # truncated (maybe mid-token)
    if what == 1:
        p = r.randrange(len(text) + 1)
        return (
            text[:p]
            + r.choice(
                [
                    b"0x123456789",
                    b"0xG1",
                    b"zz",
                    b"0x",
                    b"-1",
                    b"\xff",
                    b"\x00",
                    b"0x1_0",
                    "é".encode(),
                    b"\t",
                    b"\r\n",
                    b"; c",
                    b"123456789",
                    b"0X00000001",
                ]
            )
            + text[p:]
        )
    if what == 2:
        return _junk(r, r.randrange(1, 64))
    if what == 3:
        return text.replace(b"\n", r.choice([b" ", b"\r\n", b"\r", b"\t", b""]))
    if what == 4:
        return b"\xef\xbb\xbf" + text  # UTF-8 BOM
    if what == 5:
        return text + b"0x" + b"F" * r.randrange(9, 5000) + b"\n"
    if what == 6:
        return b""
    return text


def check_mem(data: bytes, path, label: str):
    path.write_bytes(data)
    try:
        prog = read_mem(path)
    except MemFormatError as exc:
        msg = str(exc)
        assert msg.startswith(f"{path}: line ") and len(msg) < 500, (label, msg)
        return None
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{label}: read_mem raised {type(exc).__name__}: {exc}") from exc
    assert all(0 <= w < 1 << 32 for w in prog.words)
    assert parse_mem(format_mem(prog.words)).words.tolist() == prog.words.tolist()
    return prog


def test_fuzz_mem_files(tmp_path):
    bad = 0
    for seed in range(BASE_SEED, BASE_SEED + count(200)):
        r = random.Random(seed)
        if check_mem(corrupt_mem_text(r), tmp_path / "p.mem", f"seed {seed}") is None:
            bad += 1
    assert bad > count(200) // 4
    with pytest.raises(MemFormatError):
        read_mem(tmp_path / "missing.mem")
    with pytest.raises(MemFormatError):
        read_mem(tmp_path)


# ------------------------------------------------------------------------------------------- images


def _make_image(tmp_path, r: random.Random):
    b = ImageBuilder(1 << 20)
    from plena_sim.config import default_config

    cfg = default_config()
    for k in range(r.randrange(1, 4)):
        shape = (r.randrange(1, 5), r.choice([3, 8, 16, 64]))
        t = r.choice(["HBM_V_ACT_TYPE", "HBM_V_INT_TYPE", cfg.precision["HBM_M_WEIGHT_TYPE"]])
        if t == "HBM_V_INT_TYPE":
            t = "HBM_V_ACT_TYPE"
        b.add(f"t{k}", np.random.default_rng(r.randrange(1 << 30)).standard_normal(shape), t)
    raw = tmp_path / "img.bin"
    mpath = b.save(raw)
    return raw, mpath


_BAD_JSON = [
    None,
    -1,
    0,
    1,
    2**70,
    -(2**63),
    1.5,
    "x",
    "",
    True,
    [],
    {},
    [0],
    [0, 2**64],
    [5, 1],
    {"a": 1},
    "Mx",
    "Plain",
    1e308,
    2**50,
    2**62,
]


def _json_paths(node, prefix=()):
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append(prefix + (k,))
            out.extend(_json_paths(v, prefix + (k,)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append(prefix + (i,))
            out.extend(_json_paths(v, prefix + (i,)))
    return out


def corrupt_image(r: random.Random, raw, mpath) -> None:
    what = r.randrange(9)
    try:
        json.loads(mpath.read_text())
    except ValueError:  # already broken: damage the raw file
        what = 5 + r.randrange(2)
    if what <= 3:  # a manifest field
        doc = json.loads(mpath.read_text())
        paths = _json_paths(doc)
        p = r.choice(paths)
        parent = doc
        for k in p[:-1]:
            parent = parent[k]
        if r.randrange(4) == 0 and isinstance(parent, dict):
            del parent[p[-1]]
        else:
            parent[p[-1]] = copy.deepcopy(r.choice(_BAD_JSON))
        mpath.write_text(json.dumps(doc))
    elif what == 4:  # manifest text damage
        t = mpath.read_bytes()
        mpath.write_bytes(t[: r.randrange(len(t))] if r.randrange(2) else _junk(r, 40))
    elif what == 5:  # raw truncated / extended
        data = raw.read_bytes()
        raw.write_bytes(data[: r.randrange(len(data) + 1)] if r.randrange(2) else data + _junk(r, 10))
    elif what == 6:  # raw bit flip
        data = bytearray(raw.read_bytes())
        if data:
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
        raw.write_bytes(bytes(data))
    elif what == 7:  # duplicate a tensor / absurd hbm_size
        doc = json.loads(mpath.read_text())
        if r.randrange(2) and doc["tensors"]:
            doc["tensors"].append(copy.deepcopy(doc["tensors"][0]))
        else:
            doc["hbm_size"] = r.choice([2**60, 2**50 + 1, 2**50, 2**36, 1, 0, -1, 2**64, 1 << 62])
        mpath.write_text(json.dumps(doc))
    else:  # manifest missing / raw missing
        (mpath if r.randrange(2) else raw).unlink()


def check_image(raw, mpath, label: str):
    try:
        img = load_image(raw, mpath if mpath.exists() else None)
    except ImageError as exc:
        assert str(exc) and len(str(exc)) < 2000, label
        return None
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{label}: load_image raised {type(exc).__name__}: {exc}") from exc
    for p in img.placements.values():
        assert p.values.shape == (p.rows, p.cols_padded)
    return img


def test_fuzz_images(tmp_path):
    rejected = 0
    for seed in range(BASE_SEED, BASE_SEED + count(250)):
        r = random.Random(seed)
        d = tmp_path / str(seed)
        d.mkdir()
        raw, mpath = _make_image(d, r)
        for _ in range(r.choice((1, 1, 2))):
            if raw.exists() and mpath.exists():
                corrupt_image(r, raw, mpath)
        if check_image(raw, mpath, f"seed {seed}") is None:
            rejected += 1
    assert rejected > count(250) // 2


def test_raw_image_too_large(tmp_path):
    p = tmp_path / "big.bin"
    p.write_bytes(b"\x01" * 100)
    with pytest.raises(ImageError, match="does not fit"):
        load_raw_image(p, Hbm(64))
    with pytest.raises(ImageError, match="does not fit"):
        load_raw_image(p, Hbm(1 << 16), base=(1 << 16) - 50)
    with pytest.raises(ImageError):
        load_raw_image(tmp_path / "missing.bin", Hbm(64))


# ------------------------------------------------------------------------------------------- SRAM


def test_fuzz_sram_preloads(tmp_path):
    for seed in range(BASE_SEED, BASE_SEED + count(120)):
        r = random.Random(seed)
        data = _junk(r, r.choice([0, 1, 2, 3, 4, 7, 64, 130, 4096 + r.randrange(3)]))
        p = tmp_path / "s.bin"
        p.write_bytes(data)
        size = r.choice([1, 16, 64, 1024, 2048])
        for loader, word in ((load_fp_sram_file, 2), (load_int_sram_file, 4)):
            try:
                out = loader(p, size)
            except ImageError as exc:
                assert str(p) in str(exc), (seed, str(exc))
                assert len(data) % word or len(data) // word > size, (seed, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                raise AssertionError(f"seed {seed}: {loader.__name__} raised {type(exc).__name__}: {exc}") from exc
            assert out.shape == (size,)
    for loader in (load_fp_sram_file, load_int_sram_file):
        with pytest.raises(ImageError):
            loader(tmp_path / "missing.bin", 16)
        with pytest.raises(ImageError):
            loader(tmp_path, 16)


# ------------------------------------------------------------------------------------------- CLI

SMALL_SET = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]


def run_cli(argv, capsys):
    from plena_cli.main import main

    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_fuzz_cli_exec_inputs(tmp_path, capsys):
    """``plena-sim exec`` with corrupted program / image / preload files: exit 2 or a run, no traceback."""
    good = tmp_path / "ok.mem"
    good.write_text(format_mem([0x22 | (1 << 6) | (5 << 14)]))  # S_ADDI_INT gp1, gp0, 5
    for seed in range(BASE_SEED, BASE_SEED + count(60)):
        r = random.Random(seed)
        argv = ["exec", str(good), *SMALL_SET, "--max-instructions", "100"]
        what = r.randrange(5)
        if what == 0:
            p = tmp_path / f"p{seed}.mem"
            p.write_bytes(corrupt_mem_text(r))
            argv[1] = str(p)
        elif what == 1:
            p = tmp_path / f"p{seed}.asm"
            p.write_bytes(
                r.choice([b"S_ADDI_INT gp1, gp0", b"\xff\xfe", b"V_PS_V 0", b"S_ADDI_INT gp1, gp0, 99999999"])
            )
            argv[1] = str(p)
        elif what == 2:
            p = tmp_path / f"h{seed}.bin"
            p.write_bytes(_junk(r, r.choice([0, 10, (3 << 15) + 1])))
            argv += (
                ["--hbm", str(p)]
                if r.randrange(2)
                else ["--hbm-at", f"{r.choice(['0', '0x10', '-4', 'x', '98304'])}={p}"]
            )
        elif what == 3:
            p = tmp_path / f"s{seed}.bin"
            p.write_bytes(_junk(r, r.choice([0, 3, 4, 2 * 1024 + 2, 4 * 1024 + 4])))
            argv += [r.choice(["--fp-sram", "--int-sram"]), str(p)]
        else:
            argv += r.choice(
                [
                    ["--fp", "1,2,x"],
                    ["--fp", ",".join(["1"] * 2000)],
                    ["--dump-vram", "3:1=o.npy"],
                    ["--dump-hbm", "0:999999999=o.bin"],
                    ["--dump-vram", "0:1=/nonexistent/o.npy"],
                    ["--config", str(tmp_path / "nope.toml")],
                    ["--set", "MLEN=3"],
                    ["--max-instructions", "-1"],
                    ["--hbm", str(tmp_path)],
                    ["--dump-fp-sram", str(tmp_path)],
                    ["--set", "HBM_SIZE=1125899906842624"],
                ]
            )
        code, out, err = run_cli(argv, capsys)
        assert "Traceback" not in out + err, (seed, argv, err)
        assert code in (0, 2, 3), (seed, argv, code, err)
        if code == 2:
            assert err.strip().startswith("error:") or "error" in err, (seed, argv, err)
