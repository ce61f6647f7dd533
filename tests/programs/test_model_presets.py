"""Model presets (programs/model/data/*.toml): every file loads with every contract key and exact values;
malformed files, unknown names and bad keys are one clean ModelPresetError naming the key and value."""

from __future__ import annotations

import pytest

from programs.model import presets as mp
from programs.moe import POLICIES

#: name -> (layers, hidden, heads, kv_heads, head_dim, ffn, rope_theta, rms_eps, experts, top_k), the values
#: of each model's config.json (tiny: the project's test model)
EXPECTED = {
    "tiny": (2, 256, 4, 2, 64, 512, 10000.0, 1e-5, None, None),
    "smollm2-135m": (30, 576, 9, 3, 64, 1536, 100000.0, 1e-5, None, None),
    "llama-3.1-8b": (32, 4096, 32, 8, 128, 14336, 500000.0, 1e-5, None, None),
    "qwen3-8b": (36, 4096, 32, 8, 128, 12288, 1000000.0, 1e-6, None, None),
    "qwen3-32b": (64, 5120, 64, 8, 128, 25600, 1000000.0, 1e-6, None, None),
    "gpt-oss-20b": (24, 2880, 64, 8, 64, 2880, 150000.0, 1e-5, 32, 4),
    "qwen3-30b-a3b": (48, 2048, 32, 4, 128, 768, 1000000.0, 1e-6, 128, 8),
    "tiny-moe": (2, 256, 4, 2, 64, 256, 10000.0, 1e-5, 32, 4),
}
TEST_MODELS = ("tiny", "tiny-moe")
FIELDS = mp.SHAPE_KEYS + mp.MOE_KEYS

GOOD = """
name = "mine"
layers = 3
hidden = 128
heads = 2
kv_heads = 1
head_dim = 64
ffn = 256
rope_theta = 10000
rms_eps = 1e-6
"""


def test_names_in_listing_order():
    assert mp.names() == (
        "tiny",
        "smollm2-135m",
        "llama-3.1-8b",
        "qwen3-8b",
        "qwen3-32b",
        "gpt-oss-20b",
        "qwen3-30b-a3b",
        "tiny-moe",
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_preset_has_its_exact_values(name):
    p = mp.load(name)
    assert tuple(getattr(p, k) for k in FIELDS) == EXPECTED[name]
    assert p.name == name and p.origin == f"programs/model/data/{name}.toml"
    assert isinstance(p.rope_theta, float) and isinstance(p.rms_eps, float)
    assert all(type(getattr(p, k)) is int for k in mp.SHAPE_KEYS[:6])
    assert p.heads % p.kv_heads == 0
    assert p.description and p.source
    doc = p.to_dict()
    assert set(doc) == {"name", "description", "source", *mp.SHAPE_KEYS, *(mp.MOE_KEYS if p.moe else ())}
    assert [doc[k] for k in mp.SHAPE_KEYS] == list(EXPECTED[name][:8])


@pytest.mark.parametrize("name", [n for n in EXPECTED if n not in TEST_MODELS])
def test_real_models_name_their_config_json(name):
    p = mp.load(name)
    assert p.source.startswith("https://huggingface.co/") and p.source.endswith("/config.json")
    assert p.source in p.text and "num_hidden_layers" in p.text and "Not modelled" in p.text


def test_shape_facts():
    for name in ("llama-3.1-8b", "qwen3-8b", "smollm2-135m", "tiny"):
        p = mp.load(name)
        assert p.heads * p.head_dim == p.hidden, name  # dense models here: the attention keeps the width
    assert mp.load("gpt-oss-20b").heads * mp.load("gpt-oss-20b").head_dim == 4096  # != hidden 2880
    assert mp.load("qwen3-30b-a3b").heads * mp.load("qwen3-30b-a3b").head_dim == 4096  # != hidden 2048
    assert mp.load("smollm2-135m").hidden == 9 * 64 and mp.load("smollm2-135m").hidden % 256 == 64
    for tiny in map(mp.load, TEST_MODELS):
        for width in (tiny.hidden, tiny.ffn, tiny.heads * tiny.head_dim, tiny.kv_heads * tiny.head_dim * 2):
            assert width % 256 == 0  # MLEN of v80-256x64, the largest tile but analytic's
        assert tiny.head_dim % 16 == 0 and tiny.head_dim % 32 == 0 and 256 % tiny.head_dim == 0
    moe, dense = mp.load("tiny-moe").to_dict(), mp.load("tiny").to_dict()
    assert {k: v for k, v in moe.items() if k not in ("name", "description", "ffn", "experts", "top_k")} == {
        k: v for k, v in dense.items() if k not in ("name", "description", "ffn")
    }


def test_moe_presets_match_the_v_topk_policies():
    routed = {(p.experts, p.top_k) for p in map(mp.load, mp.names()) if p.moe}
    assert routed == set(POLICIES.values()) == {(32, 4), (128, 8)}
    assert mp.load("gpt-oss-20b").layer_params() == {
        "hidden": 2880,
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 64,
        "ffn": 2880,
        "rope_theta": 150000.0,
        "rms_eps": 1e-5,
        "experts": 32,
        "top_k": 4,
    }
    assert "experts" not in mp.load("tiny").layer_params() and not mp.load("tiny").moe


def test_a_toml_path_loads(tmp_path):
    f = tmp_path / "my.toml"
    f.write_text(GOOD)
    p = mp.load(str(f))
    assert (p.name, p.layers, p.hidden, p.rope_theta, p.experts) == ("mine", 3, 128, 10000.0, None)
    assert p.origin == str(f) and p.text == GOOD and p.description == "" and p.source == ""
    (tmp_path / "noname.toml").write_text(GOOD.replace('name = "mine"\n', ""))
    assert mp.load(str(tmp_path / "noname.toml")).name == "noname"


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda t: t + "vocab = 5\n", "unknown key 'vocab' (valid: name, description, source, order, layers,"),
        (lambda t: t.replace("ffn = 256\n", ""), "missing key 'ffn' (every preset has layers, hidden,"),
        (lambda t: t.replace("layers = 3", "layers = 0"), "layers=0 must be >= 1"),
        (lambda t: t.replace("hidden = 128", 'hidden = "128"'), "hidden='128' must be an integer"),
        (lambda t: t.replace("hidden = 128", "hidden = 128.0"), "hidden=128.0 must be an integer"),
        (lambda t: t.replace("layers = 3", "layers = true"), "layers=True must be an integer"),
        (lambda t: t.replace("rms_eps = 1e-6", "rms_eps = 0.0"), "rms_eps=0.0 must be a finite number > 0"),
        (lambda t: t.replace("rms_eps = 1e-6", "rms_eps = nan"), "rms_eps=nan must be a finite number > 0"),
        (lambda t: t.replace("rope_theta = 10000", "rope_theta = inf"), "rope_theta=inf must be a finite number > 0"),
        (lambda t: t.replace("rope_theta = 10000", 'rope_theta = "x"'), "rope_theta='x' must be a number"),
        (lambda t: t + "experts = 32\n", "experts=32 needs top_k too (a mixture of experts)"),
        (lambda t: t + "top_k = 4\n", "top_k=4 needs experts too (a mixture of experts)"),
        (lambda t: t + "experts = 4\ntop_k = 8\n", "top_k=8 must be <= experts=4"),
        (lambda t: t.replace('name = "mine"', "name = 3"), "name=3 must be a string"),
        (lambda t: t + "[extra]\n", "unknown key 'extra'"),
        (lambda t: t + "layers = 4\n", "not valid TOML: "),
        (lambda t: "hidden = = 3\n", "not valid TOML: "),
    ],
)
def test_bad_file_names_the_key(tmp_path, edit, message):
    f = tmp_path / "bad.toml"
    f.write_text(edit(GOOD))
    with pytest.raises(mp.ModelPresetError) as info:
        mp.load(str(f))
    text = str(info.value)
    assert text.startswith(f"model preset {f}: ") and "\n" not in text.strip()
    assert message in text


def test_gqa_rule_message(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text(GOOD.replace("heads = 2\n", "heads = 3\n").replace("kv_heads = 1", "kv_heads = 2"))
    with pytest.raises(mp.ModelPresetError, match=r"heads=3 must be a multiple of kv_heads=2 \(grouped-query"):
        mp.load(str(f))


def test_unknown_name_and_unreadable_path(tmp_path):
    with pytest.raises(mp.ModelPresetError) as info:
        mp.load("llama-9")
    assert str(info.value) == (
        "unknown model 'llama-9' (known: tiny, smollm2-135m, llama-3.1-8b, qwen3-8b, qwen3-32b, gpt-oss-20b, "
        "qwen3-30b-a3b, tiny-moe; or give the path of a .toml file)"
    )
    with pytest.raises(mp.ModelPresetError, match="cannot read the file: No such file or directory"):
        mp.load(str(tmp_path / "missing.toml"))
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(mp.ModelPresetError, match="cannot read the file: a directory, not a regular file"):
        mp.load(str(tmp_path / "dir.toml"))
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(mp.ModelPresetError, match="cannot read the file"):
        mp.load(str(tmp_path / "bin.toml"))
    with pytest.raises(mp.ModelPresetError, match="cannot read the file: the path contains a NUL byte"):
        mp.load(str(tmp_path / "nul\x00.toml"))
    assert mp.is_path("./x") and mp.is_path("x.toml") and not mp.is_path("tiny")
