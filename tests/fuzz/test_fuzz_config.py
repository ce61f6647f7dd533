"""Fuzz: random and corrupted configuration TOML, and random overrides.

Contract: :func:`plena_sim.config.load_config` returns a validated config or raises
:class:`~plena_sim.config.ConfigError` -- nothing else -- whose ``key`` names the offending key (a CONFIG
key, ``PRECISION.*``, ``LATENCY.*``, ``HBM_TIMING.*``, a section, ``toml`` for a syntax error, ``path``
for an unreadable file) and appears in the message. A config that loads can be instantiated (no
MemoryError / ValueError from the state arrays).

Default CI size: 400 document mutants + 150 text mutants + 150 override sets (``PLENA_FUZZ_SCALE``).
"""

from __future__ import annotations

import copy
import json
import math
import random
import tomllib

import pytest
from fuzzlib import BASE_SEED, count, hyp_settings
from hypothesis import given
from hypothesis import strategies as st

from isa.safetext import printable
from plena_sim.config.hardware import (
    _CONFIG_KEYS,
    LATENCY_KEYS,
    PRECISION_KEYS,
    ConfigError,
    default_config_text,
    host_memory_needs,
    load_config,
)
from plena_sim.errors import KEY_SHOWN

pytestmark = pytest.mark.fuzz

CONFIG_KEYS = [k for k, _, _ in _CONFIG_KEYS]
SECTION = "TRANSACTIONAL"
BASE_TEXT = default_config_text()
BASE_DOC = tomllib.loads(BASE_TEXT)


# ------------------------------------------------------------------------------ a tiny TOML writer


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    """One ``key = inline-value`` line per top-level key (inline tables nest arbitrarily)."""
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in doc.items())


# ------------------------------------------------------------------------------ mutations

_BAD_VALUES = [
    -1,
    0,
    1,
    3,
    7,
    2**70,
    -(2**63),
    1.5,
    64.0,
    "64",
    "",
    True,
    False,
    [],
    [64],
    {},
    {"value": "x"},
    float("nan"),
    float("inf"),
    2**40,
    2**62,
    2**50,
    2**50 + 1,
    2**49,
    2**36,
    17,
    6,
    12,
    1 << 20,
    2**63 - 1,
    2**63,
    2**64,
    10**400,
    2**32,
    2**32 - 1,
]


def _paths(node, prefix=()):
    """Every (path) of a nested dict, leaves and tables."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _delete_node(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """Delete any node."""
    p = r.choice(paths)
    del _get(sec, p[:-1])[p[-1]]


def _bad_node(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """Any node -> a bad value."""
    p = r.choice(paths)
    _get(sec, p[:-1])[p[-1]] = copy.deepcopy(r.choice(_BAD_VALUES))


def _bad_config_value(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """A CONFIG key -> a bad or extreme value."""
    conf = sec.setdefault("CONFIG", {})
    if isinstance(conf, dict):
        key = r.choice(CONFIG_KEYS)
        v = copy.deepcopy(r.choice(_BAD_VALUES + [2 ** r.randrange(0, 64)]))
        conf[key] = {"value": v} if r.randrange(4) else v


def _inconsistent_tiles(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """Inconsistent tile sizes."""
    conf = sec.setdefault("CONFIG", {})
    if isinstance(conf, dict):
        for key in ("MLEN", "VLEN", "BLEN", "HLEN", "BROADCAST_AMOUNT"):
            if r.randrange(2):
                conf[key] = {"value": 2 ** r.randrange(0, 12)}


def _absurd_sizes(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """Absurd HBM / SRAM sizes."""
    conf = sec.setdefault("CONFIG", {})
    if isinstance(conf, dict):
        key = r.choice(["HBM_SIZE", "VECTOR_SRAM_SIZE", "MATRIX_SRAM_SIZE", "FP_SRAM_SIZE", "INT_SRAM_SIZE"])
        conf[key] = {"value": r.choice([2**50, 2**49, 2**48, 2**46, 2**40, 2**36, 2**33, 2**64, 0, -5])}


def _precision_type(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """A precision type's format, block or element/scale fields."""
    prec = sec.get("PRECISION")
    if isinstance(prec, dict) and prec:
        name = r.choice(list(prec))
        t = prec[name]
        if isinstance(t, dict):
            choice = r.randrange(6)
            if choice == 0:
                t["format"] = r.choice(["Mx", "Plain", "mx", 5])
            elif choice == 1:
                t["block"] = r.choice([0, 3, 7, 64, 128, -8, 2**40])
            else:
                sub = t.get(r.choice(["DATA_TYPE", "ELEM", "SCALE"]), t)
                if isinstance(sub, dict):
                    sub[r.choice(["exponent", "mantissa", "width", "sign", "type"])] = r.choice(
                        [0, 12, 53, -1, 12.0, "Int", "Fp", True, 8, 32, 64]
                    )


def _latency(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """A latency entry -> a bad value."""
    lat = sec.get("LATENCY")
    if isinstance(lat, dict) and lat:
        name = r.choice(list(lat))
        if isinstance(lat[name], dict):
            lat[name][r.choice(["dc_lib_en", "dc_lib_dis"])] = r.choice([-1, 1.5, "3", 2**70, 0, True])


def _hbm_timing(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """A bad HBM timing preset name or HBM_TIMING table."""
    conf = sec.setdefault("CONFIG", {})
    if r.randrange(2) and isinstance(conf, dict):
        conf["HBM_TIMING_PRESET"] = {"value": r.choice(["HBM9", "../HBM2", "", "hbm2", "HBM3", 3])}
    else:
        sec["HBM_TIMING"] = {
            r.choice(["tRCD", "tCK_ps", "channels", "nope", "row_bytes", "ch_xor_shift"]): r.choice(
                [-1, 0, 3, 2**40, 1.5, "x", 1000, 64]
            )
        }


def _replace_table(r: random.Random, doc: dict, sec: dict, paths: list) -> None:
    """A whole section / table replaced."""
    key = r.choice(["CONFIG", "PRECISION", "LATENCY", SECTION])
    if key == SECTION:
        doc[SECTION] = r.choice([{}, 5, []])
    else:
        sec[key] = r.choice([5, "x", [], {}])


#: ``what = r.randrange(12)`` -> the mutation of the section (the first three need a node to act on)
_DOC_MUTATIONS = (
    _delete_node,
    _bad_node,
    _bad_node,
    _bad_config_value,
    _bad_config_value,
    _bad_config_value,
    _inconsistent_tiles,
    _absurd_sizes,
    _precision_type,
    _latency,
    _hbm_timing,
    _replace_table,
)
_NODE_MUTATIONS = 3


def mutate_doc(r: random.Random, doc: dict) -> None:
    sec = doc.get(SECTION)
    what = r.randrange(len(_DOC_MUTATIONS))
    if not isinstance(sec, dict):
        doc[SECTION] = r.choice([{}, 1, "x", [], {"CONFIG": {}}])
        return
    paths = _paths(sec)
    mutation = _DOC_MUTATIONS[what]
    if what < _NODE_MUTATIONS and not paths:  # no node to act on: replace a table instead
        mutation = _replace_table
    mutation(r, doc, sec, paths)


def mutate_text(r: random.Random, text: str) -> str:
    lines = text.splitlines(keepends=True)
    what = r.randrange(6)
    if what == 0:
        return text[: r.randrange(len(text))]
    if what == 1:
        k = r.randrange(len(lines))
        return "".join(lines[:k] + lines[k + 1 :])
    if what == 2:
        p = r.randrange(len(text))
        return (
            text[:p]
            + r.choice(
                [
                    "[",
                    "]",
                    "=",
                    '"',
                    "\x00",
                    "\ufeff",
                    "é",
                    "[[x]]",
                    "\n[TRANSACTIONAL]\n",
                    "= =",
                    "{",
                    "0x",
                    "[" * 5000,
                    "9" * 5000,
                    "\nvalue = " + "9" * 5000 + "\n",
                ]
            )
            + text[p:]
        )
    if what == 3:
        k = r.randrange(len(lines))
        return "".join(lines[:k] + [lines[k]] + lines[k:])  # duplicate key / table
    if what == 4:
        p = r.randrange(len(text))
        return text[:p] + text[p + r.randrange(1, 40) :]
    return "".join(r.sample(lines, len(lines)))


# ------------------------------------------------------------------------------ the contract


def _known_key(key: str) -> bool:
    if key in CONFIG_KEYS or key in ("toml", "path", "CONFIG", "PRECISION", "LATENCY", "HBM_TIMING", SECTION):
        return True
    head, _, tail = key.partition(".")
    if head == "PRECISION":
        return tail.split(".")[0] in PRECISION_KEYS
    if head == "LATENCY":
        return tail in LATENCY_KEYS or tail in ("VECTOR_LONGEST_OPERATE_CYCLES", "VECTOR_BASIC_CYCLES")
    return head == "HBM_TIMING" and bool(tail)


def check_load(label: str, path=None, overrides=None):
    try:
        cfg = load_config(path, section=SECTION, overrides=overrides)
    except ConfigError as exc:
        assert isinstance(exc.key, str) and exc.key, label
        assert _known_key(exc.key) or "unknown config key" in str(exc), (
            f"{label}: ConfigError names an unknown key {exc.key!r}: {exc}"
        )
        assert str(exc).startswith(printable(exc.key, KEY_SHOWN) + ":"), (label, str(exc))  # a long key is cut
        assert len(str(exc)) < 4000, f"{label}: oversized message"
        return None
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{label}: load_config raised {type(exc).__name__}: {exc}") from exc
    dense, _lazy = host_memory_needs(cfg)
    if sum(n for n, _ in dense.values()) <= 1 << 26:  # instantiate and run what was accepted
        from plena_sim.machine import Machine

        try:
            m = Machine(cfg, backend="numba")
            res = m.run(_PROBE, max_instructions=50, raise_on_fault=False)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{label}: accepted config cannot be run: {type(exc).__name__}: {exc}") from exc
        assert res.instructions <= 50 and res.cycles >= 0, label
    return cfg


#: a probe touching every unit (loop, scalar, vector, DMA both ways, matrix): any accepted config must
#: run it to success or a typed fault
_PROBE = [
    w
    for w in __import__("isa")
    .assemble("""
C_LOOP_START gp1, 2
S_ADDI_INT gp2, gp2, 1
V_ADD_VV gp0, gp0, gp0
S_ST_FP f0, gp0, 0
C_LOOP_END gp1
H_PREFETCH_V gp0, gp0, a0, 0, 0
H_STORE_V gp0, gp0, a0, 0, 0
H_PREFETCH_M gp0, gp0, a0, 0, 0
M_MM 0, gp0, gp0
M_MM_WO gp0, gp0, 0
""")
    .words
]


def test_fuzz_config_documents(tmp_path):
    rejected = 0
    for seed in range(BASE_SEED, BASE_SEED + count(400)):
        r = random.Random(seed)
        doc = copy.deepcopy(BASE_DOC)
        for _ in range(r.choice((1, 1, 1, 2, 3))):
            mutate_doc(r, doc)
        p = tmp_path / "c.toml"
        p.write_text(to_toml(doc), encoding="utf-8")
        if check_load(f"seed {seed}", p) is None:
            rejected += 1
    assert rejected > count(400) // 2


def test_fuzz_config_texts(tmp_path):
    for seed in range(BASE_SEED, BASE_SEED + count(150)):
        r = random.Random(seed)
        text = mutate_text(r, BASE_TEXT)
        p = tmp_path / "c.toml"
        if r.randrange(10) == 0:
            p.write_bytes(text.encode("utf-8")[:-3] + bytes([0xFF, 0xFE, 0x80]))
        else:
            p.write_text(text, encoding="utf-8")
        check_load(f"seed {seed}", p)


_override_value = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from(_BAD_VALUES),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.none(),
    st.integers(0, 64).map(lambda e: 2**e),
)


@hyp_settings(150)
@given(ov=st.dictionaries(st.sampled_from(CONFIG_KEYS + ["MLENN", "", "mlen"]), _override_value, max_size=4))
def test_fuzz_config_overrides(ov):
    check_load(f"overrides {ov!r}", overrides=ov)


def test_config_unreadable_paths(tmp_path):
    assert check_load("missing", tmp_path / "nope.toml") is None
    assert check_load("directory", tmp_path) is None
    p = tmp_path / "deep.toml"
    p.write_text("x = " + "[" * 100000 + "]" * 100000 + "\n")
    assert check_load("deep nesting", p) is None
