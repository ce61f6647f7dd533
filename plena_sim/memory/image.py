"""HBM image builder: lay named host tensors out in HBM, save/load the image, read tensors back.

One job: turn numpy tensors into the exact HBM bytes the device reads (memory.md §5.1, §6, §7) and
keep a record of where each tensor lives.

* :class:`ImageBuilder` places tensors (2-D, or N-D flattened to ``rows x last-dim``; 1-D is one row)
  in a sparse :class:`~plena_sim.hbm.storage.Hbm`, in a given HBM precision type:

  - **MX** (:class:`~plena_sim.config.MxType`): the element region (``rows*cols_padded*eb`` bytes,
    row-major) immediately followed by the scale region (one E8M0 byte per block, row-major); columns
    are padded with zeros to a multiple of the block.  ``SCALE`` register value = element region size.
  - **Plain** (:class:`~plena_sim.config.PlainType`): the elements only, contiguous, row-major.

  Values are cast to float32 (RNE) and encoded with the same codec as H_STORE_V
  (:mod:`plena_sim.numerics.formats`).  Tensors are packed after the previous one at the next multiple of the
  alignment (default 64 bytes) unless an explicit address is given; overlaps are refused.
* :class:`Placement` records name, base, shape, padding, type, ``SCALE`` value, row pitch, the element
  and scale byte ranges and the exact dequantized float32 values the device will see.
* :func:`save_image` writes the upstream-compatible raw image (bytes from address 0 up to the highest
  written byte) plus a JSON manifest of placements (no values); :func:`load_image` reads both back
  (verifying size and SHA-256, refusing overlapping placements as the builder does) and re-derives each
  tensor's values from the loaded bytes. Both files are read only when they are regular files, the raw image
  of at most HBM_SIZE bytes, the manifest of at most 64 MiB (:mod:`isa.readers`).
* :func:`read_tensor` dequantizes a placed tensor from any :class:`Hbm`.

Every problem with a file or manifest raises :class:`ImageError` naming the file and the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from isa.fileio import OutputError, atomic_stream, atomic_write, output_target
from isa.readers import MAX_MANIFEST_BYTES, InputFileError, open_input, read_text_input

from ..config.hardware import FpType, HardwareConfig, IntType, MxType, PlainType, default_config
from ..errors import ConfigError, ImageError
from ..hbm.storage import Hbm
from ..numerics.formats import decode_tensor, encode_tensor, fp_params

__all__ = [
    "ImageError",
    "ImageDoesNotFit",
    "Placement",
    "ImageBuilder",
    "LoadedImage",
    "tensor_layout",
    "read_tensor",
    "save_image",
    "load_image",
    "load_raw_image",
    "type_to_json",
    "type_from_json",
    "manifest_path_for",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
]

MANIFEST_FORMAT = "plena-hbm-image"
MANIFEST_VERSION = 1
DEFAULT_ALIGNMENT = 64
_READ_CHUNK = 1 << 24


class ImageDoesNotFit(ImageError, ConfigError):
    """A raw image larger than HBM_SIZE (memory.md §2 calls this a ConfigError)."""

    def __init__(self, message: str):
        ImageError.__init__(self, message)
        self.key = "HBM_SIZE"


# =========================================================================== types <-> JSON


def _fp_to_json(f: FpType | IntType) -> dict:
    if isinstance(f, IntType):
        return {"type": "Int", "width": f.width}
    return {"type": "Fp", "sign": f.sign, "exponent": f.exponent, "mantissa": f.mantissa}


def type_to_json(t: PlainType | MxType) -> dict:
    """JSON-able description of an HBM precision type (same field names as the TOML config)."""
    if isinstance(t, MxType):
        return {"format": "Mx", "block": t.block, "ELEM": _fp_to_json(t.elem), "SCALE": _fp_to_json(t.scale)}
    return {"format": "Plain", "DATA_TYPE": _fp_to_json(t.data)}


def _need(d: Mapping, key: str, typ, where: str) -> Any:
    if not isinstance(d, Mapping):
        raise ImageError(f"{where}: expected a JSON object, got {type(d).__name__}")
    if key not in d:
        raise ImageError(f"{where}: missing field '{key}'")
    v = d[key]
    ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
    if not ok:
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise ImageError(f"{where}: field '{key}' must be {tn}, got {v!r}")
    return v


def _fp_from_json(d: Any, where: str) -> FpType:
    kind = _need(d, "type", str, where)
    if kind != "Fp":
        raise ImageError(f"{where}: type must be 'Fp', got {kind!r}")
    return FpType(_need(d, "sign", bool, where), _need(d, "exponent", int, where), _need(d, "mantissa", int, where))


def type_from_json(d: Any, where: str = "type") -> PlainType | MxType:
    """Inverse of :func:`type_to_json`; ImageError on a malformed or unsupported description."""
    fmt = _need(d, "format", str, where)
    if fmt == "Mx":
        t: PlainType | MxType = MxType(
            _fp_from_json(d.get("ELEM"), f"{where}.ELEM"),
            _fp_from_json(d.get("SCALE"), f"{where}.SCALE"),
            _need(d, "block", int, where),
        )
    elif fmt == "Plain":
        t = PlainType(_fp_from_json(d.get("DATA_TYPE"), f"{where}.DATA_TYPE"))
    else:
        raise ImageError(f"{where}: format must be 'Mx' or 'Plain', got {fmt!r}")
    try:
        fp_params(t)
    except (ValueError, TypeError) as exc:
        raise ImageError(f"{where}: {exc}") from None
    return t


# =========================================================================== placements


def tensor_layout(rows: int, cols: int, t: PlainType | MxType) -> dict[str, int]:
    """Byte layout of a ``rows x cols`` tensor of type ``t`` relative to its base.

    Keys: ``cols_padded``, ``elem_bytes`` (region size), ``scale_bytes`` (region size, 0 for Plain),
    ``row_pitch`` (bytes per row of elements), ``scale_reg`` (SCALE value; 0 for Plain), ``total``."""
    _e, _m, eb = fp_params(t)
    if isinstance(t, MxType):
        k = t.block
        cols_p = -(-cols // k) * k
        elem = rows * cols_p * eb
        scale = rows * (cols_p // k) * t.scale_bytes
        return {
            "cols_padded": cols_p,
            "elem_bytes": elem,
            "scale_bytes": scale,
            "row_pitch": cols_p * eb,
            "scale_reg": elem,
            "total": elem + scale,
        }
    elem = rows * cols * eb
    return {
        "cols_padded": cols,
        "elem_bytes": elem,
        "scale_bytes": 0,
        "row_pitch": cols * eb,
        "scale_reg": 0,
        "total": elem,
    }


@dataclass(frozen=True, eq=False)
class Placement:
    """Where and how one tensor lives in HBM.

    ``values`` is the read-only float32 ``rows x cols_padded`` array the device will see (padding
    columns included); :meth:`unpadded` gives it back in the tensor's original shape."""

    name: str
    base: int
    shape: tuple[int, ...]
    rows: int
    cols: int
    cols_padded: int
    hbm_type: PlainType | MxType
    scale_reg: int
    row_pitch: int
    elem_range: tuple[int, int]
    scale_range: tuple[int, int] | None
    nan_count: int = 0
    saturated: int = 0
    # None only while a manifest entry is validated, before its values are decoded (load_image)
    values: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]

    @property
    def type_desc(self) -> str:
        return self.hbm_type.describe()

    @property
    def is_mx(self) -> bool:
        return isinstance(self.hbm_type, MxType)

    @property
    def end(self) -> int:
        """One past the last byte of the tensor (scale region included)."""
        return self.scale_range[1] if self.scale_range else self.elem_range[1]

    def unpadded(self) -> np.ndarray:
        return self.values[:, : self.cols].reshape(self.shape)

    def to_json(self) -> dict:
        """Manifest entry (everything except the values)."""
        return {
            "name": self.name,
            "base": self.base,
            "shape": list(self.shape),
            "rows": self.rows,
            "cols": self.cols,
            "cols_padded": self.cols_padded,
            "type": type_to_json(self.hbm_type),
            "type_desc": self.type_desc,
            "scale_reg": self.scale_reg,
            "row_pitch": self.row_pitch,
            "elem_range": list(self.elem_range),
            "scale_range": list(self.scale_range) if self.scale_range else None,
            "nan_count": self.nan_count,
            "saturated": self.saturated,
        }


def _make_placement(
    name: str,
    base: int,
    shape: tuple[int, ...],
    rows: int,
    cols: int,
    t: PlainType | MxType,
    nan_count: int = 0,
    saturated: int = 0,
) -> Placement:
    """The placement of a tensor laid out at ``base``, without values (attach them with ``replace``)."""
    lay = tensor_layout(rows, cols, t)
    elem_end = base + lay["elem_bytes"]
    scale_range = (elem_end, elem_end + lay["scale_bytes"]) if isinstance(t, MxType) else None
    return Placement(
        name,
        base,
        tuple(shape),
        rows,
        cols,
        lay["cols_padded"],
        t,
        lay["scale_reg"],
        lay["row_pitch"],
        (base, elem_end),
        scale_range,
        nan_count,
        saturated,
    )


def read_tensor(hbm: Hbm, p: Placement) -> np.ndarray:
    """Dequantize the tensor described by ``p`` from ``hbm``: float32 ``rows x cols_padded``."""
    elem = hbm.read(p.elem_range[0], p.elem_range[1] - p.elem_range[0])
    scale = hbm.read(p.scale_range[0], p.scale_range[1] - p.scale_range[0]) if p.scale_range else None
    return decode_tensor(elem, scale, p.hbm_type, (p.rows, p.cols_padded))


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _as_matrix(name: str, tensor: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    arr = np.asarray(tensor)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise ImageError(f"tensor {name!r}: dtype {arr.dtype} is not a real number type")
    if arr.ndim == 0:
        raise ImageError(f"tensor {name!r}: a scalar is not a tensor (give at least one dimension)")
    if arr.size == 0:
        raise ImageError(f"tensor {name!r}: empty tensor of shape {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = arr.astype(np.float32)
    cols = arr.shape[-1]
    return f32.reshape(-1, cols), tuple(int(s) for s in arr.shape)


class ImageBuilder:
    """Build an HBM image tensor by tensor.

    ``ImageBuilder(hbm_size=None, *, config=None, alignment=64)``: the HBM size defaults to
    ``config.HBM_SIZE`` (config defaults to the packaged reference config).  The precision type given
    to :meth:`add` may be a ``PlainType``/``MxType`` or the name of a config PRECISION key such as
    ``"HBM_M_WEIGHT_TYPE"``."""

    def __init__(
        self,
        hbm_size: int | None = None,
        *,
        config: HardwareConfig | None = None,
        alignment: int = DEFAULT_ALIGNMENT,
        hbm: Hbm | None = None,
    ):
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
            raise ImageError(f"alignment must be an integer >= 1, got {alignment!r}")
        self._config = config
        if hbm is None:
            if hbm_size is None:
                hbm_size = (config or default_config()).HBM_SIZE
            hbm = Hbm(hbm_size)
        self.hbm = hbm
        self.alignment = alignment
        self._placements: dict[str, Placement] = {}
        self._next = 0

    @property
    def placements(self) -> dict[str, Placement]:
        """Placements by name, in insertion order (a copy)."""
        return dict(self._placements)

    def __getitem__(self, name: str) -> Placement:
        return self._placements[name]

    def _resolve_type(self, t: PlainType | MxType | str) -> PlainType | MxType:
        found: PlainType | MxType | FpType | str = t
        if isinstance(found, str):
            cfg = self._config or default_config()
            if found not in cfg.precision:
                raise ImageError(f"unknown precision type name {found!r} (known: {', '.join(cfg.precision)})")
            found = cfg.precision[found]
        if not isinstance(found, (PlainType, MxType)):
            raise ImageError(f"expected a PlainType or MxType, got {found!r}")
        try:
            fp_params(found)
        except (ValueError, TypeError) as exc:
            raise ImageError(str(exc)) from None
        return found

    def add(
        self,
        name: str,
        tensor: Any,
        t: PlainType | MxType | str,
        *,
        address: int | None = None,
        alignment: int | None = None,
    ) -> Placement:
        """Encode ``tensor`` in type ``t`` and place it at ``address`` (or packed after the previous
        tensor at the next multiple of ``alignment``).  Returns its :class:`Placement`."""
        if not isinstance(name, str) or not name:
            raise ImageError(f"tensor name must be a non-empty string, got {name!r}")
        if name in self._placements:
            raise ImageError(f"tensor {name!r} is already placed")
        t = self._resolve_type(t)
        mat, shape = _as_matrix(name, tensor)
        rows, cols = mat.shape
        lay = tensor_layout(rows, cols, t)
        if address is None:
            align = self.alignment if alignment is None else alignment
            if isinstance(align, bool) or not isinstance(align, int) or align < 1:
                raise ImageError(f"alignment must be an integer >= 1, got {align!r}")
            base = -(-self._next // align) * align
        else:
            if isinstance(address, bool) or not isinstance(address, (int, np.integer)) or address < 0:
                raise ImageError(f"tensor {name!r}: address must be an integer >= 0, got {address!r}")
            base = int(address)
        end = base + lay["total"]
        if end > self.hbm.size:
            raise ImageError(f"tensor {name!r}: bytes [{base:#x}, {end:#x}) exceed HBM_SIZE {self.hbm.size:#x}")
        for other in self._placements.values():
            if base < other.end and other.base < end:
                raise ImageError(
                    f"tensor {name!r} at [{base:#x}, {end:#x}) overlaps tensor "
                    f"{other.name!r} at [{other.base:#x}, {other.end:#x})"
                )
        cols_p = lay["cols_padded"]
        if cols_p != cols:
            padded = np.zeros((rows, cols_p), dtype=np.float32)
            padded[:, :cols] = mat
            mat = padded
        elem, scale, counts = encode_tensor(mat, t)
        self.hbm.write(base, elem)
        if isinstance(t, MxType):
            self.hbm.write(base + lay["elem_bytes"], scale)
        values = _readonly(decode_tensor(elem, scale, t, (rows, cols_p)))
        p = replace(_make_placement(name, base, shape, rows, cols, t, int(counts[0]), int(counts[1])), values=values)
        self._placements[name] = p
        self._next = end
        return p

    def save(self, raw_path: str | os.PathLike, manifest_path: str | os.PathLike | None = None) -> Path:
        """:func:`save_image` of this builder; returns the manifest path."""
        return save_image(self.hbm, self._placements.values(), raw_path, manifest_path)


# =========================================================================== files


def manifest_path_for(raw_path: str | os.PathLike) -> Path:
    """Default manifest path of a raw image: ``<raw file name>.json`` next to it."""
    p = Path(raw_path)
    return p.with_name(p.name + ".json")


def save_image(
    hbm: Hbm,
    placements: Iterable[Placement],
    raw_path: str | os.PathLike,
    manifest_path: str | os.PathLike | None = None,
) -> Path:
    """Write bytes ``[0, hbm.high_water)`` to ``raw_path`` and the placements to a JSON manifest
    (default ``<raw>.json``).  Returns the manifest path."""
    raw_path = Path(raw_path)
    mpath = manifest_path_for(raw_path) if manifest_path is None else Path(manifest_path)
    size = hbm.high_water
    digest = hashlib.sha256()
    try:
        raw_real, manifest_real = output_target(raw_path), output_target(mpath)  # both checked before writing
        if raw_real == manifest_real:
            raise OutputError(f"the image and its manifest are the same file {str(raw_real)!r}")
        with atomic_stream(raw_real) as fh:
            for _addr, chunk in hbm.iter_chunks(0, size, _READ_CHUNK):
                fh.write(chunk.data)
                digest.update(chunk.data)
        doc = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "raw_file": raw_path.name,
            "raw_size": size,
            "sha256": digest.hexdigest(),
            "hbm_size": hbm.size,
            "tensors": [p.to_json() for p in placements],
        }
        atomic_write(manifest_real, json.dumps(doc, indent=1) + "\n")
    except OutputError as exc:
        raise ImageError(f"cannot write HBM image {str(raw_path)!r} / {str(mpath)!r}: {exc}") from None
    return mpath


@dataclass
class LoadedImage:
    """An HBM filled from a raw image, with the manifest's placements (values re-derived)."""

    hbm: Hbm
    placements: dict[str, Placement]
    raw_size: int

    def __getitem__(self, name: str) -> Placement:
        return self.placements[name]


def load_raw_image(raw_path: str | os.PathLike, hbm: Hbm | int, base: int = 0) -> tuple[Hbm, int, str]:
    """Load a raw (upstream) image file into ``hbm`` (or a new ``Hbm(hbm)``) at ``base``.

    Returns ``(hbm, file size, sha256 hex)``.  ImageError if unreadable; :class:`ImageDoesNotFit`
    (an ImageError and a ConfigError) if the file exceeds HBM_SIZE."""
    raw_path = Path(raw_path)
    if not isinstance(hbm, Hbm):
        try:
            hbm = Hbm(int(hbm))
        except ValueError as exc:  # ConfigError (too large for this host) or a size < 1
            raise ImageError(f"{raw_path}: cannot model an HBM of {hbm} bytes: {exc}") from None
    digest = hashlib.sha256()
    pos = 0
    try:
        with open_input(raw_path, "HBM image", 1 << 62) as (fh, n):
            if base < 0 or base + n > hbm.size:
                raise ImageDoesNotFit(
                    f"{raw_path}: image of {n} bytes at base {base:#x} does not fit in HBM_SIZE {hbm.size:#x} bytes"
                )
            while chunk := fh.read(_READ_CHUNK):
                digest.update(chunk)
                if base + pos + len(chunk) > hbm.size:
                    raise ImageDoesNotFit(f"{raw_path}: image grew past HBM_SIZE {hbm.size:#x} while reading")
                hbm.load_image(chunk, base + pos)
                pos += len(chunk)
    except InputFileError as exc:
        raise ImageError(str(exc)) from None
    except OSError as exc:
        raise ImageError(f"cannot read HBM image {str(raw_path)!r}: {exc}") from None
    return hbm, pos, digest.hexdigest()


def _parse_range(entry: Mapping, key: str, where: str) -> tuple[int, int] | None:
    v = entry.get(key, "<missing>")
    if v == "<missing>":
        raise ImageError(f"{where}: missing field '{key}'")
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise ImageError(f"{where}: field '{key}' must be [start, end] integers or null, got {v!r}")
    return (v[0], v[1])


def _placement_from_json(entry: Any, where: str) -> Placement:
    name = _need(entry, "name", str, where)
    where = f"{where} ({name!r})"
    shape_v = _need(entry, "shape", list, where)
    if not shape_v or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape_v):
        raise ImageError(f"{where}: field 'shape' must be a non-empty list of integers >= 1, got {shape_v!r}")
    ints = {}
    for key in ("base", "rows", "cols", "cols_padded", "scale_reg", "row_pitch", "nan_count", "saturated"):
        ints[key] = _need(entry, key, int, where)
        if ints[key] < 0:
            raise ImageError(f"{where}: field '{key}' must be >= 0, got {ints[key]}")
    t = type_from_json(_need(entry, "type", dict, where), f"{where}.type")
    desc = _need(entry, "type_desc", str, where)
    elem_range = _parse_range(entry, "elem_range", where)
    scale_range = _parse_range(entry, "scale_range", where)
    rows, cols = ints["rows"], ints["cols"]
    if rows < 1 or cols < 1:
        raise ImageError(f"{where}: rows and cols must be >= 1, got {rows} x {cols}")
    if shape_v[-1] != cols or int(np.prod(shape_v, dtype=object)) != rows * cols:
        raise ImageError(f"{where}: shape {shape_v} does not match rows={rows} x cols={cols}")
    p = _make_placement(name, ints["base"], tuple(shape_v), rows, cols, t, ints["nan_count"], ints["saturated"])
    expected = {
        "cols_padded": p.cols_padded,
        "scale_reg": p.scale_reg,
        "row_pitch": p.row_pitch,
        "type_desc": p.type_desc,
        "elem_range": p.elem_range,
        "scale_range": p.scale_range,
    }
    found = {
        "cols_padded": ints["cols_padded"],
        "scale_reg": ints["scale_reg"],
        "row_pitch": ints["row_pitch"],
        "type_desc": desc,
        "elem_range": elem_range,
        "scale_range": scale_range,
    }
    for key, want in expected.items():
        if found[key] != want:
            raise ImageError(
                f"{where}: field '{key}' is {found[key]!r}, but the layout of a "
                f"{rows}x{cols} {p.type_desc} tensor at {p.base:#x} gives {want!r}"
            )
    return p


def _read_manifest(raw_path: Path, manifest_path: str | os.PathLike | None) -> tuple[Path | None, Any]:
    """``(manifest path, parsed JSON document)``; ``(None, None)`` if there is no manifest."""
    mpath = None
    if manifest_path is not None:
        mpath = Path(manifest_path)
    elif manifest_path_for(raw_path).exists():
        mpath = manifest_path_for(raw_path)
    if mpath is None:
        return None, None
    try:
        text = read_text_input(mpath, "manifest", MAX_MANIFEST_BYTES)
    except InputFileError as exc:
        raise ImageError(str(exc)) from None
    try:
        return mpath, json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImageError(f"manifest {str(mpath)!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ImageError(f"manifest {str(mpath)!r}: JSON arrays / objects nested too deeply") from None


@dataclass(frozen=True)
class _Manifest:
    """A validated manifest document: the raw image it describes and its placements (without values)."""

    raw_size: int
    sha: str
    hbm_size: int | None  # the HBM size to load into (the caller's, else the manifest's; None: neither)
    placements: dict[str, Placement]


def _parse_manifest(doc: Any, hbm_size: int | None, config: HardwareConfig | None) -> _Manifest:
    fmt = _need(doc, "format", str, "manifest")
    if fmt != MANIFEST_FORMAT:
        raise ImageError(f"manifest: format is {fmt!r}, expected {MANIFEST_FORMAT!r}")
    version = _need(doc, "version", int, "manifest")
    if version != MANIFEST_VERSION:
        raise ImageError(f"manifest: unsupported version {version} (supported: {MANIFEST_VERSION})")
    raw_size = _need(doc, "raw_size", int, "manifest")
    sha = _need(doc, "sha256", str, "manifest")
    entries = _need(doc, "tensors", list, "manifest")
    if hbm_size is None and config is None and "hbm_size" in doc:
        hbm_size = _need(doc, "hbm_size", int, "manifest")
        if hbm_size < 1:
            raise ImageError(f"manifest: hbm_size must be >= 1, got {hbm_size}")
    placements: dict[str, Placement] = {}
    for i, entry in enumerate(entries):
        p = _placement_from_json(entry, f"manifest tensors[{i}]")
        if p.name in placements:
            raise ImageError(f"manifest tensors[{i}]: duplicate tensor name {p.name!r}")
        if p.end > raw_size:
            raise ImageError(
                f"manifest tensors[{i}] ({p.name!r}): bytes [{p.base:#x}, "
                f"{p.end:#x}) extend past the raw image size {raw_size:#x}"
            )
        placements[p.name] = p
    _refuse_overlaps(placements.values())
    return _Manifest(raw_size, sha, hbm_size, placements)


def _refuse_overlaps(placements: Iterable[Placement]) -> None:
    """ImageError naming two placements whose byte ranges overlap (as :meth:`ImageBuilder.add` refuses)."""
    widest: Placement | None = None  # of the placements starting earlier, the one reaching furthest
    for p in sorted(placements, key=lambda q: (q.base, q.end)):
        if widest is not None and p.base < widest.end:
            raise ImageError(
                f"manifest: tensor {p.name!r} at [{p.base:#x}, {p.end:#x}) overlaps tensor "
                f"{widest.name!r} at [{widest.base:#x}, {widest.end:#x})"
            )
        if widest is None or p.end > widest.end:
            widest = p


def load_image(
    raw_path: str | os.PathLike,
    manifest_path: str | os.PathLike | None = None,
    *,
    hbm_size: int | None = None,
    config: HardwareConfig | None = None,
) -> LoadedImage:
    """Load a raw image (at address 0) and its manifest.

    ``manifest_path`` defaults to ``<raw>.json`` if that file exists (an upstream raw image without a
    manifest loads with no placements).  The HBM size is ``hbm_size``, else ``config.HBM_SIZE``, else
    the manifest's ``hbm_size``, else the reference config's.  The raw file must have exactly the
    manifest's size and SHA-256, and every tensor must lie inside it; tensor values are decoded from
    the loaded bytes.  Any problem raises :class:`ImageError` naming the file."""
    raw_path = Path(raw_path)
    mpath, doc = _read_manifest(raw_path, manifest_path)
    manifest = None
    if doc is not None:
        try:
            manifest = _parse_manifest(doc, hbm_size, config)
        except ImageError as exc:
            raise ImageError(f"{mpath}: {exc}") from None
        hbm_size = manifest.hbm_size
    if hbm_size is None:
        hbm_size = (config or default_config()).HBM_SIZE
    hbm, n, digest = load_raw_image(raw_path, int(hbm_size))
    if manifest is None:
        return LoadedImage(hbm, {}, n)
    raw_size, sha = manifest.raw_size, manifest.sha
    if n != raw_size:
        what = "truncated" if n < raw_size else "longer than recorded"
        raise ImageError(f"{raw_path}: raw image is {what}: {n} bytes, manifest {mpath} says {raw_size}")
    if digest != sha:
        raise ImageError(f"{raw_path}: raw image is corrupt: SHA-256 {digest} does not match manifest {mpath} ({sha})")
    placements = dict(manifest.placements)
    for name, p in list(placements.items()):
        try:
            values = read_tensor(hbm, p)
        except (ValueError, IndexError) as exc:  # pragma: no cover - ranges were validated above
            raise ImageError(f"{mpath}: tensor {name!r}: {exc}") from None
        placements[name] = replace(p, values=_readonly(values))
    return LoadedImage(hbm, placements, n)
