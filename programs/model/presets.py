"""Model presets: the layer shapes of real models as package data (``programs/model/data/NAME.toml``).

One job: turn a model name (or the path of a TOML file of the same form) into a validated, immutable
:class:`ModelPreset` -- the shapes a decoder layer is built from. The vocabulary is irrelevant here (the
embedding and the LM head are outside a layer).

A preset file holds top-level keys, each with its source in a comment:

* ``name``, ``description``, ``source`` (where the values come from, e.g. the model's Hugging Face
  ``config.json``), ``order`` (position in listings) -- all optional in a user's file (``name`` defaults
  to the file's stem);
* the shapes (:data:`SHAPE_KEYS`): ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``head_dim``, ``ffn``
  (for a mixture of experts: the width of one expert), ``rope_theta``, ``rms_eps``;
* for a mixture of experts both of ``experts`` and ``top_k`` (:data:`MOE_KEYS`).

Every problem is a :class:`ModelPresetError` naming the file, the key and the value.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from isa.readers import MAX_CONFIG_BYTES, InputFileError, parse_toml, read_text_input
from isa.safetext import did_you_mean

__all__ = [
    "SHAPE_KEYS",
    "MOE_KEYS",
    "ModelPreset",
    "ModelPresetError",
    "names",
    "load",
    "from_text",
    "is_path",
]

#: the integer shapes of a layer (each >= 1)
INT_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn")
#: the floating-point constants of a layer (each > 0)
FLOAT_KEYS = ("rope_theta", "rms_eps")
#: every key a preset must carry
SHAPE_KEYS = INT_KEYS + FLOAT_KEYS
#: the mixture-of-experts keys (both or neither)
MOE_KEYS = ("experts", "top_k")
_META_KEYS = ("name", "description", "source", "order")
_ALL_KEYS = _META_KEYS + SHAPE_KEYS + MOE_KEYS


class ModelPresetError(ValueError):
    """A model preset that does not exist, does not parse or breaks a rule (the message names the key)."""


@dataclass(frozen=True)
class ModelPreset:
    name: str
    description: str
    source: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    rope_theta: float
    rms_eps: float
    experts: int | None = None
    top_k: int | None = None
    order: int = 99
    #: where it was read from (``programs/model/data/NAME.toml`` or the user's path)
    origin: str = ""
    #: the file, comments included (its sources)
    text: str = field(default="", repr=False, compare=False)

    @property
    def moe(self) -> bool:
        return self.experts is not None

    def layer_params(self) -> dict[str, Any]:
        """The shapes a decoder-layer testbench takes (the MoE keys only for a mixture of experts)."""
        keys = [k for k in SHAPE_KEYS if k != "layers"] + list(MOE_KEYS if self.moe else ())
        return {k: getattr(self, k) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        """``name``, ``description``, ``source``, every shape and, for a mixture of experts, ``experts``/``top_k``."""
        doc: dict[str, Any] = {"name": self.name, "description": self.description, "source": self.source}
        doc.update({k: getattr(self, k) for k in SHAPE_KEYS + (MOE_KEYS if self.moe else ())})
        return doc


def _models_dir() -> Any:
    return resources.files("programs.model").joinpath("data")


@cache
def names() -> tuple[str, ...]:
    """The packaged presets, in listing order."""
    presets = [_packaged(name) for name in _packaged_names()]
    return tuple(p.name for p in sorted(presets, key=lambda p: (p.order, p.name)))


def is_path(name_or_path: str) -> bool:
    """Whether ``name_or_path`` means a file (it ends in ``.toml`` or has a directory part), not a name."""
    return name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path


def load(name_or_path: str) -> ModelPreset:
    """The packaged preset ``name``, or the preset in the TOML file at that path (see :func:`is_path`)."""
    if is_path(name_or_path):
        path = Path(name_or_path)
        try:
            text = read_text_input(name_or_path, "the file", MAX_CONFIG_BYTES)
        except InputFileError as exc:
            raise ModelPresetError(f"model preset {exc}") from None
        return from_text(text, origin=str(path), default_name=path.stem)
    known = _packaged_names()
    if name_or_path not in known:
        raise ModelPresetError(
            f"unknown model {name_or_path!r} (known: {', '.join(names())}; or give the path of a .toml file)"
        )
    return _packaged(name_or_path)


@cache
def _packaged_names() -> frozenset[str]:
    return frozenset(p.name[: -len(".toml")] for p in _models_dir().iterdir() if p.name.endswith(".toml"))


@cache
def _packaged(name: str) -> ModelPreset:
    text = _models_dir().joinpath(f"{name}.toml").read_text(encoding="utf-8")
    preset = from_text(text, origin=f"programs/model/data/{name}.toml", default_name=name)
    if preset.name != name:
        raise ModelPresetError(f"model preset {preset.origin}: name={preset.name!r} must equal the file's stem")
    return preset


def from_text(text: str, origin: str = "<text>", default_name: str = "custom") -> ModelPreset:
    """The validated preset of a TOML document (``origin`` names it in every error)."""
    try:
        doc = parse_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelPresetError(f"model preset {origin}: not valid TOML: {exc}") from None
    except ValueError as exc:  # nested too deeply, or an integer literal of more than 4300 digits
        raise ModelPresetError(f"model preset {origin}: {exc}") from None
    where = f"model preset {origin}"
    unknown = [k for k in doc if k not in _ALL_KEYS]
    if unknown:
        close = did_you_mean(unknown[0], _ALL_KEYS)
        raise ModelPresetError(f"{where}: unknown key {unknown[0]!r}{close} (valid: {', '.join(_ALL_KEYS)})")
    missing = [k for k in SHAPE_KEYS if k not in doc]
    if missing:
        raise ModelPresetError(f"{where}: missing key {missing[0]!r} (every preset has {', '.join(SHAPE_KEYS)})")
    values = _shape_values(doc, where)
    _check_rules(values, where)
    return ModelPreset(
        name=_text(doc, "name", default_name, where),
        description=_text(doc, "description", "", where),
        source=_text(doc, "source", "", where),
        order=_int(doc.get("order", 99), "order", where, lo=0),
        origin=origin,
        text=text,
        **values,
    )


def _shape_values(doc: Mapping[str, Any], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {k: _int(doc[k], k, where, lo=1) for k in INT_KEYS}
    values.update({k: _positive_float(doc[k], k, where) for k in FLOAT_KEYS})
    given = [k for k in MOE_KEYS if k in doc]
    if len(given) == 1:
        other = MOE_KEYS[1 - MOE_KEYS.index(given[0])]
        raise ModelPresetError(f"{where}: {given[0]}={doc[given[0]]!r} needs {other} too (a mixture of experts)")
    values.update({k: _int(doc[k], k, where, lo=1) for k in given})
    return values


def _check_rules(values: Mapping[str, Any], where: str) -> None:
    if values["heads"] % values["kv_heads"]:
        raise ModelPresetError(
            f"{where}: heads={values['heads']} must be a multiple of kv_heads={values['kv_heads']} "
            "(grouped-query attention)"
        )
    if "top_k" in values and values["top_k"] > values["experts"]:
        raise ModelPresetError(f"{where}: top_k={values['top_k']} must be <= experts={values['experts']}")


def _int(value: object, key: str, where: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelPresetError(f"{where}: {key}={value!r} must be an integer")
    if value < lo:
        raise ModelPresetError(f"{where}: {key}={value} must be >= {lo}")
    return value


def _positive_float(value: object, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelPresetError(f"{where}: {key}={value!r} must be a number")
    if not value > 0 or value == float("inf"):
        raise ModelPresetError(f"{where}: {key}={value} must be a finite number > 0")
    return float(value)


def _text(doc: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ModelPresetError(f"{where}: {key}={value!r} must be a string")
    return value
