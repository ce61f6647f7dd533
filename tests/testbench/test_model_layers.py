"""The model-layer testbenches (decoder_layer, decoder_decode): every required case on every preset, the
--save contract, the float64 bound recomputed independently from the saved inputs, and the slow cases.

(test_catalogue runs the required cases on the default machine, test_required_cases_presets on the v80-128x64
and v80-256x64 presets; the presets left are run here.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

import testbenches
from plena_cli.main import main
from testbenches.harness import run_case

TBS = ("decoder_layer", "decoder_decode")
OTHER_PRESETS = ("small", "v80-64x16")


def _required():
    return [(tb, cid, p) for tb in TBS for cid, _o, _v in testbenches.get(tb).REQUIRED_CASES for p in OTHER_PRESETS]


@pytest.mark.parametrize("tb,cid,preset", _required(), ids=[f"{t}[{c}]@{p}" for t, c, p in _required()])
def test_required_case_on_preset(tb, cid, preset):
    rep = run_case(tb, cid, hw=preset)
    assert rep.passed, rep.summary
    names = [c.name for c in rep.checks]
    if cid == "chunked":  # every token's output from HBM against float64; the last chunk's stages, its store
        assert names[0] == "output" and rep.checks[0].tolerance == "layer_f64" and "output_f64" not in names
        assert names[1:3] == ["ffn_residual", "out_store"] and rep.checks[1].n < rep.checks[0].n
    else:
        assert names[0] == "output" and rep.checks[0].n == rep.checks[names.index("output_f64")].n
    for stage in ("attn_norm", "q_proj", "qr_rope", "k_cache_store", "attention", "o_proj", "ffn"):
        assert stage in names
    if cid.startswith("moe"):  # the routed-MoE FFN stage, judged like moe_layer
        tols = {c.name: c.tolerance for c in rep.checks}
        assert names[names.index("ffn_norm") + 1 : names.index("ffn") + 1] == [
            "router_logits",
            "router_indices",
            "router_weights",
            "ffn",
        ]
        assert (tols["router_logits"], tols["router_indices"], tols["router_weights"], tols["ffn"]) == (
            "exact",
            "exact",
            "topk",
            "moe",
        )


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * g


def _rot(x, d):
    h = x.reshape(x.shape[0], -1, d)
    return np.concatenate([-h[..., d // 2 :], h[..., : d // 2]], axis=-1).reshape(x.shape)


def _layer_f64(a, p):
    """The prefill layer in float64 from the saved inputs, written independently of the testbench."""
    x, S, B = a["x"].astype(np.float64), p["seq"], p["batch"]
    hq, hkv, d = p["heads"], p["kv_heads"], p["head_dim"]
    cos = np.tile(a["cos"].astype(np.float64), (1, hq))
    sin = np.tile(a["sin"].astype(np.float64), (1, hq))
    xn = _rms(x, a["gamma_attn"], p["rms_eps"])
    q = xn @ a["wq"]
    k = xn @ a["wk"]
    v = xn @ a["wv"]
    q = q * cos + _rot(q, d) * sin
    k = k * cos[:, : hkv * d] + _rot(k, d) * sin[:, : hkv * d]
    o = np.zeros_like(q)
    causal = np.tril(np.ones((S, S), dtype=bool))
    for b in range(B):
        r = slice(b * S, (b + 1) * S)
        for h in range(hq):
            g = h // (hq // hkv)
            sc = q[r, h * d : (h + 1) * d] @ k[r, g * d : (g + 1) * d].T / np.sqrt(d)
            sc = np.where(causal, sc, -np.inf)
            w = np.exp(sc - sc.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            o[r, h * d : (h + 1) * d] = w @ v[r, g * d : (g + 1) * d]
    h1 = x + o @ a["wo"]
    xn2 = _rms(h1, a["gamma_ffn"], p["rms_eps"])
    return h1 + (_silu(xn2 @ a["wg"]) * (xn2 @ a["wu"])) @ a["wd"]


def test_save_contract_and_the_float64_bound(tmp_path, capsys):
    out = tmp_path / "layer"
    assert main(["run", "decoder_layer", "--save", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a = np.load(out / "arrays.npz")
    want = {"x", "wq", "wk", "wv", "wo", "gamma_attn", "gamma_ffn", "wg", "wu", "wd", "cos", "sin", "output", "golden"}
    assert want <= set(a.files)
    p = json.loads((out / "result.json").read_text())["params"]
    assert {"rms_eps", "rope_theta", "positions"} <= set(p) and p["positions"] == "0..63"
    H, T = p["hidden"], p["batch"] * p["seq"]
    assert a["x"].shape == (T, H) and a["wq"].shape == (H, p["heads"] * p["head_dim"])
    assert a["wk"].shape == (H, p["kv_heads"] * p["head_dim"]) and a["wd"].shape == (p["ffn"], H)
    assert a["cos"].shape == (T, p["head_dim"]) and a["gamma_ffn"].shape == (H,)
    assert np.array_equal(a["output"], a["golden"])  # the output check is exact (bf16 residual sum)
    ref = _layer_f64(a, p)
    err = np.sqrt(np.mean((a["output"] - ref) ** 2)) / np.sqrt(np.mean(ref**2))
    assert err <= 0.05
    f64 = next(c for c in doc["checks"] if c["name"] == "output_f64")
    assert f64["rel_rms"] == pytest.approx(err, rel=1e-3)  # the testbench's reference agrees with this one


def _slow():
    return [(tb, cid) for tb in TBS for cid, _o, _v in testbenches.get(tb).SLOW_CASES]


@pytest.mark.slow
@pytest.mark.parametrize("tb,cid", _slow(), ids=[f"{t}[{c}]" for t, c in _slow()])
def test_slow_case(tb, cid):
    mod = testbenches.get(tb)
    _id, ov, var = next(c for c in mod.SLOW_CASES if c[0] == cid)
    rep = run_case(tb, cid, ov, var)
    assert rep.passed, rep.summary
