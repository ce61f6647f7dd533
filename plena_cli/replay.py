"""The replay set of ``run --save DIR``: what ``plena-sim exec`` needs to re-run a testbench case bit for bit.

Beside program.asm it writes the machine the run started from -- ``config.toml`` (the effective config, whole),
``hbm/seg-K.bin`` + ``hbm/manifest.json`` (the HBM image in contiguous pieces, with the tensors placed in it),
``vram/rows-R.bin`` (VRAM rows holding anything at the start: preloads, the harness's NaN-poisoned outputs),
``fp_sram.bin`` (bf16 bit patterns) and ``int_sram.bin`` (u32 words) -- and ``replay.sh``: one ``plena-sim
exec`` command of relative paths (it runs inside DIR) that writes each output region as ``replay/NAME.npy``
(VRAM rows, float32), each writable HBM range as ``replay/hbm-K.bin`` and the statistics as
``replay/result.json``, whose ``cycles`` equal result.json's.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from plena_sim.machine import Machine
    from testbenches.harness import Case

__all__ = ["REPLAY_FILES", "replay_files"]

#: what the replay set adds to a save directory (``NAME/``: a subdirectory; ``replay/`` is replay.sh's output)
REPLAY_FILES = ("config.toml", "replay.sh", "fp_sram.bin", "int_sram.bin", "hbm/", "vram/", "replay/")
#: pieces of HBM (or runs of VRAM rows) closer than this are saved as one
_HBM_GAP = 1 << 20
_VRAM_GAP = 64


def replay_files(case: Case, timing: str, backend: str) -> dict[str, bytes | str]:
    """The replay set of ``case`` run with ``timing`` (file name in DIR -> contents)."""
    from plena_sim.config import config_toml
    from testbenches.harness import prepare_machine

    m = prepare_machine(case, backend)
    files: dict[str, bytes | str] = {"config.toml": config_toml(case.config)}
    flags = ["--config", "config.toml", "--section", case.config.section, "--timing", timing]
    flags += _hbm_files(case, m, files) + _vram_files(m, files)
    files["fp_sram.bin"] = m.fp_sram.bits.astype("<u2").tobytes()
    files["int_sram.bin"] = m.int_sram.astype("<u4").tobytes()
    flags += ["--fp-sram-bits", "fp_sram.bin", "--int-sram", "int_sram.bin"]
    if case.max_instructions:
        flags += ["--max-instructions", str(case.max_instructions)]
    files["replay.sh"] = _script(flags + _output_flags(case))
    return files


def _ranges(spans: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """``(start, end)`` spans merged where they overlap or lie less than ``gap`` apart, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] < gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _hbm_files(case: Case, m: Machine, files: dict[str, bytes | str]) -> list[str]:
    spans = [(base, base + int(data.nbytes)) for base, data in case.hbm_segments if data.nbytes]
    flags, segments = [], []
    for k, (start, end) in enumerate(_ranges(spans, _HBM_GAP)):
        data = m.hbm.read(start, end - start).tobytes()
        files[f"hbm/seg-{k}.bin"] = data
        segments.append({"file": f"seg-{k}.bin", "base": start, "bytes": len(data)})
        segments[-1]["sha256"] = hashlib.sha256(data).hexdigest()
        flags += ["--hbm-at", f"{start:#x}=hbm/seg-{k}.bin"]
    manifest: dict[str, Any] = {
        "format": "plena-sim-replay-hbm/1",
        "hbm_size": case.config.HBM_SIZE,
        "segments": segments,
        "tensors": [p.to_json() for p in case.tensors.values()],
    }
    files["hbm/manifest.json"] = json.dumps(manifest, indent=1) + "\n"
    return flags


def _vram_files(m: Machine, files: dict[str, bytes | str]) -> list[str]:
    import numpy as np

    bits: np.ndarray = m.vram.bits
    used = np.flatnonzero(bits.any(axis=1))
    flags = []
    for start, end in _ranges([(int(r), int(r) + 1) for r in used], _VRAM_GAP):
        files[f"vram/rows-{start}.bin"] = bits[start:end].astype("<u2").tobytes()
        flags += ["--vram-at", f"{start}=vram/rows-{start}.bin"]
    return flags


def _output_flags(case: Case) -> list[str]:
    """``--dump-vram`` of every output region, ``--dump-hbm`` of every writable HBM range."""
    vlen = case.config.VLEN
    flags = []
    for name, (row, rows, role) in case.regions.items():
        if role == "output" and rows > 0:
            flags += ["--dump-vram", f"{row * vlen}:{rows}=replay/{_file_name(name)}.npy"]
    for k, (addr, n) in enumerate(case.hbm_writable):
        flags += ["--dump-hbm", f"{addr}:{n}=replay/hbm-{k}.bin"]
    return flags


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"


def _script(flags: list[str]) -> str:
    pairs = [f"{shlex.quote(flag)} {shlex.quote(value)}" for flag, value in zip(flags[::2], flags[1::2], strict=True)]
    command = " \\\n  ".join(["${PLENA_SIM:-plena-sim} exec program.asm", *pairs])
    return (
        "#!/bin/sh\n"
        "# Re-runs this saved run bit for bit with plena-sim exec (relative paths: it runs inside this directory).\n"
        "# Outputs: replay/*.npy (output regions, float32), replay/hbm-*.bin, replay/result.json (cycles as in\n"
        "# result.json). PLENA_SIM overrides the command (e.g. PLENA_SIM='python -m plena_cli').\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n'
        "mkdir -p replay\n"
        f"{command} \\\n  --json > replay/result.json\n"
    )
