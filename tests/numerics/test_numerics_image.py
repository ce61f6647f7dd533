"""HBM image builder (memory.md §5.1/§6): layout, raw file + manifest round trip, corruption errors."""

import json

import numpy as np
import pytest

from plena_sim.config import ConfigError, FpType, MxType, PlainType, default_config
from plena_sim.memory.image import (
    ImageBuilder,
    ImageDoesNotFit,
    ImageError,
    load_image,
    load_raw_image,
    manifest_path_for,
    read_tensor,
    tensor_layout,
)
from plena_sim.numerics.formats import FLT_MAX, encode_tensor

CFG = default_config()
MXFP8 = CFG.precision["HBM_M_WEIGHT_TYPE"]
BF16 = CFG.precision["VECTOR_SRAM_TYPE"]
SMALL_HBM = 1 << 24


def _tensors():
    rng = np.random.default_rng(2024)
    w = (rng.standard_normal((64, 4096)) * np.exp(rng.uniform(-6, 6, (64, 1)))).astype(np.float32)
    w[3, 100] = np.nan
    w[7, 9] = np.inf
    a = (rng.standard_normal((3, 5, 40)) * 3).astype(np.float32)
    return w, a


@pytest.fixture(scope="module")
def built():
    w, a = _tensors()
    b = ImageBuilder(config=CFG)
    pw = b.add("W", w, "HBM_M_WEIGHT_TYPE")
    pa = b.add("act", a, BF16)
    return b, w, a, pw, pa


def test_mx_placement_record(built):
    b, w, a, pw, pa = built
    assert (pw.name, pw.base, pw.rows, pw.cols, pw.cols_padded) == ("W", 0, 64, 4096, 4096)
    assert pw.shape == (64, 4096)
    assert pw.scale_reg == 64 * 4096 == 262144
    assert pw.row_pitch == 4096
    assert pw.elem_range == (0, 262144)
    assert pw.scale_range == (262144, 262144 + 32768)
    assert pw.type_desc == MXFP8.describe() and pw.hbm_type == MXFP8
    # the bytes in HBM are exactly the codec's output, elements then scales
    elem, scale, counts = encode_tensor(w, MXFP8)
    assert pw.nan_count == 1 and pw.saturated == counts[1] >= 2
    np.testing.assert_array_equal(b.hbm.read(0, 262144), elem)
    np.testing.assert_array_equal(b.hbm.read(262144, 32768), scale)
    assert pw.values.shape == (64, 4096) and pw.values.dtype == np.float32
    assert not pw.values.flags.writeable


def test_plain_placement_packed_and_aligned(built):
    b, w, a, pw, pa = built
    assert pa.base == 294912  # 262144 + 32768, already 64-aligned
    assert (pa.rows, pa.cols, pa.cols_padded, pa.shape) == (15, 40, 40, (3, 5, 40))
    assert pa.scale_reg == 0 and pa.scale_range is None
    assert pa.row_pitch == 80 and pa.elem_range == (294912, 294912 + 1200)
    expect = a.reshape(15, 40).astype(np.float32)
    bf = (expect.view(np.uint32) + 0x7FFF + ((expect.view(np.uint32) >> 16) & 1)) >> 16
    np.testing.assert_array_equal(b.hbm.read(294912, 1200).view("<u2"), bf.astype(np.uint16).reshape(-1))
    np.testing.assert_array_equal(pa.unpadded().view(np.uint32), (bf << 16).reshape(3, 5, 40))


def test_roundtrip_raw_file_and_manifest(built, tmp_path):
    b, w, a, pw, pa = built
    raw = tmp_path / "image.bin"
    mpath = b.save(raw)
    assert mpath == manifest_path_for(raw) == tmp_path / "image.bin.json"
    data = raw.read_bytes()
    assert len(data) == b.hbm.high_water == 294912 + 1200
    np.testing.assert_array_equal(np.frombuffer(data, np.uint8), b.hbm.read(0, len(data)))
    doc = json.loads(mpath.read_text())
    assert [t["name"] for t in doc["tensors"]] == ["W", "act"]
    assert "values" not in doc["tensors"][0]

    loaded = load_image(raw, hbm_size=CFG.HBM_SIZE)
    assert loaded.raw_size == len(data)
    np.testing.assert_array_equal(loaded.hbm.read(0, len(data)), np.frombuffer(data, np.uint8))
    for name, p in b.placements.items():
        q = loaded[name]
        assert q.to_json() == p.to_json()
        np.testing.assert_array_equal(q.values.view(np.uint32), p.values.view(np.uint32))
        np.testing.assert_array_equal(read_tensor(loaded.hbm, q).view(np.uint32), p.values.view(np.uint32))
    # saving the loaded image again gives identical bytes
    from plena_sim.memory.image import save_image

    raw2 = tmp_path / "again.bin"
    save_image(loaded.hbm, loaded.placements.values(), raw2)
    assert raw2.read_bytes() == data


def test_dequantized_values_are_what_the_device_sees(built):
    b, w, a, pw, pa = built
    v = pw.values.astype(np.float64)
    x = np.where(np.isfinite(w), w, 0.0).astype(np.float64)
    as_encoded = np.nan_to_num(w.astype(np.float64), nan=0.0, posinf=FLT_MAX, neginf=-FLT_MAX)
    blk_amax = np.repeat(np.abs(as_encoded).reshape(64, 512, 8).max(axis=2), 8, axis=1)
    # normals: <= half an ulp (2^-4 relative), saturated: < 2^-3 relative;
    # element subnormals: <= min_sub/2 * 2^shared <= amax * 2^-17
    bound = np.abs(x) * 2.0**-3 + blk_amax * 2.0**-17
    ok = np.isfinite(w)
    assert np.all(np.abs(v - x)[ok] <= bound[ok])
    assert v[3, 100] == 0.0  # NaN encodes as element 0x00
    assert v[7, 9] == pytest.approx(240.0 * 2.0**120)  # Inf -> FLT_MAX -> saturated


def test_column_padding_and_explicit_address(tmp_path):
    b = ImageBuilder(SMALL_HBM, alignment=256)
    # 10 cols -> padded to 16; every value has <= 4 significant bits, so E4M3 holds it exactly
    x = np.float32([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 18, 20, 24, 28]])
    p = b.add("x", x, MXFP8, address=1000)
    assert (p.base, p.cols, p.cols_padded) == (1000, 10, 16)
    assert p.scale_reg == 32 and p.scale_range == (1032, 1036) and p.row_pitch == 16
    assert p.values[:, 10:].tolist() == [[0.0] * 6] * 2
    np.testing.assert_array_equal(p.unpadded(), x)
    elem = b.hbm.read(1000, 32)
    assert elem[10:16].tolist() == [0] * 6 and elem[26:32].tolist() == [0] * 6
    # block 1 of each row = 2 real values + 6 padding zeros; shared = floor(log2 amax) - 7
    assert b.hbm.read(1032, 4).tolist() == [127 - 4, 127 - 4, 127 - 3, 127 - 3]
    q = b.add("y", [[1.0, 2.0]], BF16)  # packed after x, aligned to 256
    assert q.base == 1280 and q.elem_range == (1280, 1284)
    assert b.hbm.read(1280, 4).tolist() == [0x80, 0x3F, 0x00, 0x40]
    r = b.add("z", np.ones(8, np.float32), MXFP8, alignment=1)  # 1-D = one row
    assert r.base == 1284 and r.rows == 1


def test_worked_example_a_bytes_in_image():
    b = ImageBuilder(SMALL_HBM)
    p = b.add("A", [[1.0, -0.5, 0.25, 3.0, -2.0, 0.0, 0.125, 1.5]], MXFP8)
    assert b.hbm.read(0, 9).tobytes().hex(" ").upper() == "68 E0 58 74 F0 00 50 6C 79"
    assert p.values.tolist() == [[1.0, -0.5, 0.25, 3.0, -2.0, 0.0, 0.125, 1.5]]


def test_other_hbm_types():
    e5m2 = MxType(FpType(True, 5, 2), FpType(False, 8, 0), 4)
    f32 = PlainType(FpType(True, 8, 23))
    b = ImageBuilder(SMALL_HBM)
    p = b.add("e", [[1.0, 0.0, 0.0, -3.0]], e5m2)
    q = b.add("f", [[1.1, -2.5]], f32)
    # amax 3 -> shared 1 - 15 = -14; 1.0 -> 2^14 -> (14+15)<<2; -3 -> -1.5*2^15 -> 0x80|(30<<2)|2
    assert b.hbm.read(p.base, 5).tolist() == [0x74, 0x00, 0x00, 0xFA, 127 - 14]
    assert q.base == 64 and b.hbm.read(64, 8).tobytes() == np.float32([1.1, -2.5]).tobytes()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="x"), "already placed"),
        (dict(name="o", address=10), "overlaps tensor 'x'"),
        (dict(name="big", address=SMALL_HBM - 8), "exceed HBM_SIZE"),
        (dict(name="neg", address=-64), "address must be"),
        (dict(name=""), "non-empty string"),
    ],
)
def test_builder_errors(kwargs, match):
    b = ImageBuilder(SMALL_HBM)
    b.add("x", np.ones((2, 8)), MXFP8)
    name = kwargs.pop("name")
    with pytest.raises(ImageError, match=match):
        b.add(name, np.ones((2, 8)), MXFP8, **kwargs)


def test_builder_rejects_bad_tensors_and_types():
    b = ImageBuilder(SMALL_HBM)
    with pytest.raises(ImageError, match="scalar"):
        b.add("s", 3.0, BF16)
    with pytest.raises(ImageError, match="empty"):
        b.add("e", np.zeros((0, 8)), BF16)
    with pytest.raises(ImageError, match="not a real number"):
        b.add("c", np.ones(4, np.complex64), BF16)
    with pytest.raises(ImageError, match="Int"):
        b.add("i", np.ones(4), "HBM_V_INT_TYPE")
    with pytest.raises(ImageError, match="unknown precision"):
        b.add("u", np.ones(4), "NOPE")


# --------------------------------------------------------------------------- corruption


@pytest.fixture()
def saved(tmp_path):
    b = ImageBuilder(SMALL_HBM)
    b.add("W", np.linspace(-4, 4, 256, dtype=np.float32).reshape(4, 64), MXFP8)
    b.add("b", np.arange(64, dtype=np.float32), BF16)
    raw = tmp_path / "img.bin"
    mpath = b.save(raw)
    return raw, mpath


def test_truncated_raw_file(saved):
    raw, mpath = saved
    raw.write_bytes(raw.read_bytes()[:-7])
    with pytest.raises(ImageError, match="truncated") as ei:
        load_image(raw, hbm_size=SMALL_HBM)
    assert str(raw) in str(ei.value)


def test_corrupted_raw_byte(saved):
    raw, mpath = saved
    data = bytearray(raw.read_bytes())
    data[5] ^= 0x40
    raw.write_bytes(bytes(data))
    with pytest.raises(ImageError, match="corrupt") as ei:
        load_image(raw, hbm_size=SMALL_HBM)
    assert str(raw) in str(ei.value)


def _edit_manifest(mpath, fn):
    doc = json.loads(mpath.read_text())
    fn(doc)
    mpath.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.pop("sha256"), "missing field 'sha256'"),
        (lambda d: d.update(format="zip"), "format is 'zip'"),
        (lambda d: d.update(version=99), "unsupported version 99"),
        (lambda d: d["tensors"][0].pop("base"), "missing field 'base'"),
        (lambda d: d["tensors"][0].update(rows="4"), "field 'rows' must be int"),
        (lambda d: d["tensors"][0].update(rows=True), "field 'rows' must be int"),
        (lambda d: d["tensors"][0].update(scale_reg=255), "field 'scale_reg' is 255"),
        (lambda d: d["tensors"][0].update(scale_range=None), "field 'scale_range' is None"),
        (lambda d: d["tensors"][1].update(base=10**9, elem_range=[10**9, 10**9 + 128]), "extend past the raw image"),
        (lambda d: d["tensors"][0]["type"].update(format="Blob"), "format must be 'Mx' or 'Plain'"),
        (lambda d: d["tensors"][0]["type"]["ELEM"].pop("mantissa"), "missing field 'mantissa'"),
        (lambda d: d["tensors"][0]["type"]["SCALE"].update(exponent=5), "E8M0"),
        (lambda d: d["tensors"][1].update(shape=[3, 64]), "does not match rows"),
        (lambda d: d["tensors"].append(dict(d["tensors"][0])), "duplicate tensor name"),
        (lambda d: d.update(tensors={}), "field 'tensors' must be list"),
    ],
)
def test_manifest_errors(saved, edit, match):
    raw, mpath = saved
    _edit_manifest(mpath, edit)
    with pytest.raises(ImageError, match=match) as ei:
        load_image(raw, hbm_size=SMALL_HBM)
    assert str(mpath) in str(ei.value)


def test_manifest_not_json_or_missing(saved, tmp_path):
    raw, mpath = saved
    mpath.write_text('{"format": "plena-hbm-image", ')
    with pytest.raises(ImageError, match="not valid JSON") as ei:
        load_image(raw, hbm_size=SMALL_HBM)
    assert str(mpath) in str(ei.value)
    mpath.write_text("[1, 2]")
    with pytest.raises(ImageError, match="expected a JSON object"):
        load_image(raw, hbm_size=SMALL_HBM)
    with pytest.raises(ImageError, match="cannot read manifest"):
        load_image(raw, tmp_path / "nope.json", hbm_size=SMALL_HBM)
    with pytest.raises(ImageError, match="cannot read HBM image"):
        load_image(tmp_path / "missing.bin", hbm_size=SMALL_HBM)


def test_raw_image_without_manifest_and_too_large(saved, tmp_path):
    raw, mpath = saved
    mpath.unlink()
    loaded = load_image(raw, hbm_size=SMALL_HBM)
    assert loaded.placements == {} and loaded.raw_size == raw.stat().st_size
    with pytest.raises(ImageDoesNotFit) as ei:
        load_raw_image(raw, 100)
    assert isinstance(ei.value, ConfigError) and isinstance(ei.value, ImageError)
    assert str(raw) in str(ei.value) and ei.value.key == "HBM_SIZE"


def test_layout_helper():
    assert tensor_layout(4, 12, MXFP8) == {
        "cols_padded": 16,
        "elem_bytes": 64,
        "scale_bytes": 8,
        "row_pitch": 16,
        "scale_reg": 64,
        "total": 72,
    }
    assert tensor_layout(4, 12, BF16)["total"] == 96
