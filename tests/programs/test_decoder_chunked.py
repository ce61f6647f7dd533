"""Chunked prefill of the decoder layer (programs/model/decoder.py, programs/model/chunking.py): every chunk's
output equals the unchunked layer's bit for bit, the chunked case passes its checks, the chunk is derived from the
fit, and a shape that cannot fit is refused before any input is built, naming the largest value that fits."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import testbenches
import testbenches._decoder_common as common
from programs.asm import Asm
from programs.hbm_tensors import HbmTensor, row_view
from programs.model.chunking import chunk_quantum, hbm_fits, resolve_chunk, vram_fits
from programs.model.decoder import CHUNK_STAGES, emit_decoder_layer, layer_parts, plan_decoder_layer
from programs.model.presets import load
from testbenches.harness import GEN_FP, GEN_GP, prepare_machine, run_case
from testbenches.shapes import resolve_params
from testbenches.variants import get_config


def _build(preset: str, **over):
    mod = testbenches.get("decoder_layer")
    cfg = get_config("default", hw=preset)
    return mod.build(resolve_params(dict(mod.DEFAULTS, **over), cfg), cfg)


def _run(case, passes: int | None = None):
    """The machine after the case's program, or after its first ``passes`` passes only."""
    m = prepare_machine(case)
    if passes is None:
        m.run(case.assembled())
        return m
    asm = Asm()
    emit_decoder_layer(asm, replace(case.plan, passes=case.plan.passes[:passes]), gp=GEN_GP, fp=GEN_FP)
    m.run(asm.program("prefix.asm"))
    return m


def _vram_out(case, m, rows: int) -> np.ndarray:
    """The bf16 bits of the ``out`` buffer's first ``rows`` token rows, ``[rows, hidden]``."""
    plan, V = case.plan, case.config.VLEN
    buf = plan.vram.buffers["out"]
    bits = np.asarray(m.vram.bits[buf.row0 : buf.end]).reshape(-1, plan.pitch, V)[:, :rows]
    return bits.transpose(1, 0, 2).reshape(rows, -1)


def _hbm(case, m, name: str, row0: int, rows: int) -> np.ndarray:
    t, base = case.plan.tensors[name], case.tensors[name].base
    cls = "HBM_V_KV_TYPE" if name.endswith("cache") else "HBM_V_ACT_TYPE"
    return common.HbmRows(base, t.scale_offset, row0, rows, t.row_pitch_elems, case.config.hbm_type(cls)).read(m)


IDENTICAL = [
    ("transactional", {"seq": 133, "chunk": 64}),  # 64 + 64 + 5 tokens
    ("v80-128x64", {"seq": 261, "chunk": 128}),
    ("small", {"batch": 2, "seq": 70, "chunk": 32}),  # 3 chunks of each of 2 sequences
    ("small", {"seq": 40, "chunk": 32, "experts": 32, "top_k": 4, "ffn": 32}),  # a routed-MoE FFN
    ("small", {"seq": 560, "chunk": 256}),  # 18 kv tiles: split-KV in the last chunk (and the whole layer)
]


@pytest.mark.parametrize("preset,over", IDENTICAL, ids=[f"{p}-{'-'.join(map(str, o.values()))}" for p, o in IDENTICAL])
def test_every_chunk_equals_the_unchunked_layer_bit_for_bit(preset, over):
    chunked, whole = _build(preset, **over), _build(preset, **dict(over, chunk=0))
    s = chunked.plan.shape
    assert s.chunk == over["chunk"] and whole.plan.shape.chunk == 0 and len(chunked.plan.passes) >= 2
    assert [st.name for st in chunked.plan.stages] == list(CHUNK_STAGES)
    mw = _run(whole)
    ref = _vram_out(whole, mw, s.tokens)
    for k, ps in enumerate(chunked.plan.passes):  # each chunk's output, in VRAM right after its pass
        got = _vram_out(chunked, _run(chunked, k + 1), ps.part.tokens)
        assert np.array_equal(got, ref[ps.part.row0 : ps.part.row0 + ps.part.tokens]), f"pass {k} ({ps.part})"
    mc = _run(chunked)
    out = _hbm(chunked, mc, "out", 0, s.tokens)  # every token's output as stored (MX act type)
    assert np.array_equal(out, common.mx_roundtrip(common.bf16_decode(ref), chunked.config.hbm_type("HBM_V_ACT_TYPE")))
    for name in ("q", "k_cache", "v_cache"):  # and what the layer left in HBM: Q and the K/V cache of every token
        assert np.array_equal(_hbm(chunked, mc, name, 0, s.tokens), _hbm(whole, mw, name, 0, s.tokens)), name


def test_chunked_case_passes_and_judges_every_token():
    rep = run_case("decoder_layer", "chunked")
    assert rep.passed, rep.summary
    checks = {c.name: c for c in rep.checks}
    mod = testbenches.get("decoder_layer")
    over = next(c[1] for c in mod.REQUIRED_CASES if c[0] == "chunked")
    p = resolve_params(dict(mod.DEFAULTS, **over), get_config("default"))
    H, last = p["hidden"], p["seq"] % p["chunk"] or p["chunk"]
    assert list(checks)[:3] == ["output", "ffn_residual", "out_store"] and "output_f64" not in checks
    assert checks["output"].tolerance == "layer_f64" and checks["output"].n == p["seq"] * H  # every token, HBM
    assert checks["ffn_residual"].tolerance == checks["out_store"].tolerance == "exact"
    for name in ("ffn_residual", "out_store", "attn_norm", "o_proj", "attn_residual", "ffn_norm", "ffn"):
        assert checks[name].n == last * H, name  # the last chunk's stages
    assert checks["attention"].n == last * p["heads"] * p["head_dim"]


def test_regions_are_the_stages_summed_over_chunks():
    case = _build("transactional", seq=133, chunk=64)
    rep = testbenches.harness.run(case)
    assert rep.passed, rep.summary
    lines = case.program.splitlines()
    for st in CHUNK_STAGES:  # marked once per chunk (a generator's own region may share a stage's name) ...
        n = lines.count(f"; @region {st}")
        assert n >= 3 and n % 3 == 0, st
    paths = [r["path"] for r in rep.stats["regions"]]
    assert len(paths) == len(set(paths))  # ... and reported once, summed
    assert [p for p in paths if p.count("/") == 1] == [f"layer/{st}" for st in CHUNK_STAGES]
    assert sum(r["instructions"] for r in rep.stats["regions"]) == rep.instructions


def test_parts_cover_every_token_once_in_order():
    cfg = get_config("default")
    s = common.shape_of(
        resolve_params(dict(testbenches.get("decoder_layer").DEFAULTS, batch=2, seq=150), cfg), cfg, False
    )
    parts = layer_parts(cfg, replace(s, chunk=64))
    assert [(p.b, p.pos0, p.q_len, p.kv_len, p.row0) for p in parts] == [
        (0, 0, 64, 64, 0), (0, 64, 64, 128, 64), (0, 128, 22, 150, 128),
        (1, 0, 64, 64, 150), (1, 64, 64, 128, 214), (1, 128, 22, 150, 278),
    ]  # fmt: skip
    assert {p.pitch for p in parts} == {64} and all(p.batch == 1 and p.kv_row == p.pos0 for p in parts)


def test_row_view_addresses_the_same_bytes():
    t = HbmTensor(areg=0, scale_offset=4096 * 3, eb=1, prec=0, row_pitch_elems=64, alloc_elems=4096 * 3, block=8)
    v, base = row_view(t, 1000, 7, scale_bytes=1)
    assert base == 1000 + 7 * 64 and v.alloc_elems == t.alloc_elems - 7 * 64
    for r in range(5):  # row r of the view: its elements and its MX scales (the DMA: base + SCALE + offset // block)
        off = r * 64
        assert base + off == 1000 + (7 + r) * 64
        assert base + v.scale_offset + off // 8 == 1000 + t.scale_offset + (7 * 64 + off) // 8
    with pytest.raises(ValueError, match="MX block"):
        row_view(replace(t, row_pitch_elems=4), 0, 1, 1)


# ----------------------------------------------------------------------------------------- sizes and refusals


def _llama(seq: int, preset: str = "v80-128x64", **extra):
    cfg = get_config("default", hw=preset, extra=extra or None)
    p = resolve_params(
        dict(testbenches.get("decoder_layer").DEFAULTS, **load("llama-3.1-8b").layer_params(), seq=seq), cfg
    )
    return cfg, common.shape_of(p, cfg, False)


def test_chunk_derived_from_the_fit():
    cfg, s = _llama(32768)
    q = chunk_quantum(cfg)
    r = resolve_chunk(cfg, s, None, keep=True)
    assert 0 < r.chunk < s.seq and r.chunk % q == 0
    assert vram_fits(cfg, r, True) and not vram_fits(cfg, replace(r, chunk=r.chunk + q), True)
    small = resolve_chunk(cfg, _llama(1024)[1], None, keep=True)
    assert small.chunk == 0  # the whole sequence fits: one pass, today's layer
    assert resolve_chunk(cfg, s, 4096, keep=True).chunk == 4096 and resolve_chunk(cfg, small, 4096, True).chunk == 0


def _most(err: str, param: str) -> int:
    m = re.search(rf"\b{param}\b.*(?:<=|at most) (\d+)\b", err)
    assert m, err
    return int(m.group(1))


def _refused(cfg, s, monkeypatch, **params):
    """Run the testbench on ``s`` expecting a plan error raised before any input is built."""

    def no_inputs(*_a, **_k):
        raise AssertionError("an input was built before the refusal")

    monkeypatch.setattr(common, "_Inputs", no_inputs)
    mod = testbenches.get("decoder_layer")
    p = dict(mod.DEFAULTS, **load("llama-3.1-8b").layer_params(), seq=s.seq, **params)
    with pytest.raises(ValueError) as exc:
        mod.build(resolve_params(p, cfg), cfg)
    return str(exc.value)


def test_unchunked_refused_naming_the_longest_sequence(monkeypatch):
    cfg, s = _llama(32768)
    err = _refused(cfg, s, monkeypatch, chunk=0)
    most = _most(err, "seq")
    assert "VECTOR_SRAM_SIZE" in err
    assert vram_fits(cfg, _llama(most)[1], True) and not vram_fits(cfg, _llama(most + 1)[1], True)


def test_chunk_too_big_refused_naming_the_largest_chunk(monkeypatch):
    cfg, s = _llama(32768)
    q = chunk_quantum(cfg)
    err = _refused(cfg, s, monkeypatch, chunk=16384)
    most = _most(err, "chunk")
    assert most % q == 0 and vram_fits(cfg, replace(s, chunk=most), True)
    assert not vram_fits(cfg, replace(s, chunk=most + q), True)
    assert _refused(cfg, s, monkeypatch, chunk=100).endswith(f"positive multiple of {q}")


def test_hbm_too_small_refused_naming_the_longest_sequence(monkeypatch):
    cfg, s = _llama(32768, HBM_SIZE=1 << 30)  # 1 GiB: the weights fit, the K/V cache of 32k tokens does not
    err = _refused(cfg, s, monkeypatch)
    most = _most(err, "seq")
    assert "HBM_SIZE" in err and 0 < most < s.seq
    fit = resolve_chunk(cfg, _llama(most, HBM_SIZE=1 << 30)[1], None, keep=True)  # the length named fits
    assert hbm_fits(cfg, fit) and fit.seq == most
    with pytest.raises(ValueError, match=f"seq={most + 1} does not fit: its HBM tensors take"):
        resolve_chunk(cfg, _llama(most + 1, HBM_SIZE=1 << 30)[1], None, keep=True)


def test_least_chunk_too_big_refused_naming_the_longest_sequence(monkeypatch):
    cfg, s = _llama(32768, VECTOR_SRAM_SIZE=1 << 16)  # not even 128 tokens of llama fit
    err = _refused(cfg, s, monkeypatch)
    most = _most(err, "seq")
    assert "chunks of 128 tokens (the least)" in err and 0 < most < chunk_quantum(cfg)
    assert vram_fits(cfg, _llama(most, VECTOR_SRAM_SIZE=1 << 16)[1], True)


def test_decode_cache_too_big_for_hbm_refused_naming_the_longest_cache(monkeypatch):
    cfg = get_config("default", hw="v80-128x64", extra={"HBM_SIZE": 1 << 30})
    mod = testbenches.get("decoder_decode")
    p = resolve_params(dict(mod.DEFAULTS, **load("llama-3.1-8b").layer_params(), batch=1, kv=1 << 20), cfg)
    monkeypatch.setattr(common, "_Inputs", lambda *_a, **_k: pytest.fail("an input was built before the refusal"))
    with pytest.raises(ValueError, match="kv_len=1048577 does not fit: its HBM tensors take") as exc:
        mod.build(p, cfg)
    most = _most(str(exc.value), "kv_len")
    s = common.shape_of(p, cfg, True)
    grown = replace(s, kv_len=most, kv_capacity=most + s.kv_capacity - s.kv_len)
    assert hbm_fits(cfg, grown) and not hbm_fits(
        cfg, replace(grown, kv_len=most + 1, kv_capacity=grown.kv_capacity + 1)
    )


@pytest.mark.parametrize("keep", [True, False])
def test_every_pass_touches_only_buffers_live_during_its_stage(keep):
    case = _build("transactional", seq=133, chunk=64)
    tensors = {n: (t, case.tensors[n].base) for n, t in case.plan.tensors.items()}
    plan = plan_decoder_layer(case.config, case.plan.shape, tensors, keep_outputs=keep)
    assert plan.vram.conflicts() == [] and len(plan.passes) == 3
    assert plan.vram.buffers["out"].last == len(CHUNK_STAGES) - 1  # read by out_store
    for ps in plan.passes:
        assert [st.name for st in ps.stages] == list(CHUNK_STAGES)
        for i, st in enumerate(ps.stages):
            live = [b for b in plan.vram.buffers.values() if b.first <= i <= b.last]
            for name, p in st.plans.items():
                for rname, (r0, n, _role) in dict(getattr(p, "vram_regions", None) or {}).items():
                    assert any(b.row0 <= r0 and r0 + n <= b.end for b in live), (ps.part, st.name, name, rname)
