"""The ``plena-sim`` command line (the top floor: it may import everything; nothing imports it).

Exit codes: 0 ok; 1 a testbench or demo mismatch; 2 usage or input error (one red line, plus located details where there are any; never
a traceback); 3 the simulated program faulted; 4 an internal error (a bug: ``--debug`` shows the
traceback).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from isa.fileio import atomic_write

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_FAULT, EXIT_BUG = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A user mistake that is not one of the library's typed errors (bad flag value, bad path...)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + exits 2; keep the exit code, add our red line
        raise UsageError(f"{self.prog}: {message}")


def _consoles():
    return Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------------------- helpers

def _config_from_args(args):
    from .config import parse_override
    from .presets import resolve_config
    overrides = dict(parse_override(s) for s in (args.set or []))
    return resolve_config(args.config, hw=args.hw, section=args.section, overrides=overrides)


def _add_hw_arg(p):
    p.add_argument("--hw", metavar="NAME", default=None,
                   help="hardware preset (plena-sim hw lists them; default: the reference machine)")


def _add_config_args(p):
    _add_hw_arg(p)
    p.add_argument("--config", "--settings", dest="config", metavar="FILE",
                   help="plena_settings.toml (default: $PLENA_SETTINGS_TOML, else the built-in reference file)")
    p.add_argument("--section", "--mode", dest="section", default="TRANSACTIONAL",
                   help="TOML section to read (default TRANSACTIONAL; e.g. ANALYTIC)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one CONFIG key (repeatable)")


def _read_program(path: str):
    from isa import assemble_file, read_mem
    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if p.suffix.lower() in (".mem", ".hex"):
        return read_mem(p)
    return assemble_file(p)


# ----------------------------------------------------------------------------------------- commands

def cmd_asm(args, out, err):
    from isa import assemble_file, format_mem, write_mem
    src = Path(args.input)
    if not src.is_file():
        raise UsageError(f"no such file: {args.input}")
    prog = assemble_file(src)
    if args.output in (None, "-"):
        out.file.write(format_mem(prog.words))
    else:
        dst = Path(args.output)
        if not dst.parent.exists() and str(dst.parent) not in ("", "."):
            raise UsageError(f"output directory does not exist: {dst.parent}")
        try:
            write_mem(dst, prog.words)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        err.print(f"[green]assembled[/] {len(prog)} instructions -> {args.output}")
    return EXIT_OK


def cmd_disasm(args, out, err):
    from isa import disassemble_word, read_mem
    prog = read_mem(args.input)
    for k, w in enumerate(prog.words):
        text = disassemble_word(w)
        out.print(f"{k:6d}  0x{w:08X}  {text}" if args.addresses else text, markup=False)
    return EXIT_OK


def cmd_isa(args, out, err):
    from isa.docs import opcode_markdown
    from isa.table import INSTRUCTIONS, UNITS
    if args.markdown:
        out.file.write(opcode_markdown())
        return EXIT_OK
    t = Table(title="PLENA opcode table (isa/table.py)")
    for col in ("hex", "mnemonic", "unit", "operands", "fmt", "latency", "meaning"):
        t.add_column(col)
    for i in INSTRUCTIONS:
        ops = ", ".join(("[" + o.name + "]") if o.optional else o.name for o in i.operands if not o.compat)
        t.add_row(f"{i.opcode:02X}", i.mnemonic, UNITS[i.unit], ops, i.fmt,
                  i.latency + (" (0 if rd=0)" if i.noop_if_rd0 else ""), i.summary)
    out.print(t)
    return EXIT_OK


def cmd_hw(args, out, err):
    """``plena-sim hw [NAME]``: the hardware presets, or one preset's file with its sources."""
    from .presets import load_preset, preset_info, preset_names
    if args.name:
        info = preset_info(args.name)
        if args.json:
            out.file.write(json.dumps({"name": info.name, "description": info.description, "base": info.base,
                                       "config": load_preset(info.name).values()}, indent=2) + "\n")
        else:
            out.file.write(info.text)
        return EXIT_OK
    rows = []
    for name in preset_names():
        c = load_preset(name)
        rows.append({"name": name, "MLEN": c.MLEN, "VLEN": c.VLEN, "BLEN": c.BLEN, "HLEN": c.HLEN,
                     "BROADCAST_AMOUNT": c.BROADCAST_AMOUNT, "P_M": c.P_M, "P_V": c.P_V, "P_W": c.P_W,
                     "mram_tiles": c.mram_tiles, "FP_SRAM_SIZE": c.FP_SRAM_SIZE, "HBM_SIZE": c.HBM_SIZE,
                     "HBM_TIMING_PRESET": c.HBM_TIMING_PRESET, "description": preset_info(name).description})
    if args.json:
        out.file.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    from rich import box
    t = Table(title="hardware presets (--hw NAME; plena-sim hw NAME shows one with its sources)",
              box=box.SIMPLE_HEAD, pad_edge=False)
    cells = [[escape(r["name"]), f"{r['MLEN']}/{r['VLEN']}/{r['BLEN']}", str(r["HLEN"]),
              str(r["BROADCAST_AMOUNT"]), f"{r['P_M']}/{r['P_V']}/{r['P_W']}", str(r["mram_tiles"]),
              str(r["FP_SRAM_SIZE"]), f"{r['HBM_SIZE'] >> 30}G", r["HBM_TIMING_PRESET"]] for r in rows]
    for k, col in enumerate(("preset", "M/V/B", "H", "BA", "Pm/Pv/Ps", "tiles", "FP", "HBM", "timing")):
        t.add_column(col, min_width=max(len(col), *(len(c[k]) for c in cells)))
    for c in cells:
        t.add_row(*c)
    out.print(t)
    return EXIT_OK


def cmd_config(args, out, err):
    from .config import inconsistencies
    cfg = _config_from_args(args)
    if args.json:
        doc = {"section": cfg.section, "source": cfg.source, "preset": cfg.preset, "config": cfg.values(),
               "inconsistencies": [b.__dict__ for b in inconsistencies(cfg)],
               "derived": {"P_M": cfg.P_M, "P_V": cfg.P_V, "P_W": cfg.P_W, "mram_tiles": cfg.mram_tiles},
               "precision": {k: v.describe() for k, v in cfg.precision.items()},
               "latency": {k: {"dc_lib_en": en, "dc_lib_dis": dis, "effective": cfg.latency_cycles(k)}
                           for k, (en, dis) in cfg.latency.items()}}
        out.file.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    t = Table(title=f"effective config [{cfg.section}] from {cfg.source}")
    t.add_column("key")
    t.add_column("value", justify="right")
    for k, v in cfg.values().items():
        t.add_row(k, str(v))
    t.add_row("[dim]P_M / P_V / P_W (rows per DMA)[/]", f"{cfg.P_M} / {cfg.P_V} / {cfg.P_W}")
    t.add_row("[dim]MRAM tiles[/]", str(cfg.mram_tiles))
    for k, v in cfg.precision.items():
        t.add_row(f"PRECISION.{k}", v.describe())
    for k in cfg.latency:
        t.add_row(f"LATENCY.{k}", str(cfg.latency_cycles(k)))
    out.print(t)
    for b in inconsistencies(cfg):
        err.print("[yellow]note:[/] ", end="")
        err.print(f"{b.rule}: {b.key}={b.value} (consistent: {b.suggested}); such instructions fault at run "
                  "time and the kernel generators refuse this machine", markup=False)
    return EXIT_OK


# ----------------------------------------------------------------------------------------- exec

def _int_arg(text: str, what: str) -> int:
    try:
        v = int(text.replace("_", ""), 0)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an integer (decimal or 0x hex)") from None
    if v < 0:
        raise UsageError(f"{what}: {text!r} must be >= 0")
    return v


def _split_spec(spec: str, what: str, form: str) -> tuple[str, str]:
    left, sep, right = spec.partition("=")
    if not sep or not left or not right:
        raise UsageError(f"{what}: {spec!r} must look like {form}")
    return left, right


def _out_path(path: str, what: str) -> Path:
    """An output file path, checked before anything runs: its directory exists and is writable and the
    path is not itself a directory (a failing write later still becomes a UsageError, see _write_out)."""
    import os
    if "\x00" in path:
        raise UsageError(f"{what}: output path {path!r} contains a NUL byte")
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what}: output directory {str(parent)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{what}: output path {path!r} is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: output directory {str(parent)!r} is not writable")
    return p


def _write_out(path: Path, data: bytes, what: str) -> None:
    """Write one output file atomically; an OS error (disk full, permissions) is a UsageError."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise UsageError(f"{what}: cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _write_hbm_dump(path: Path, hbm, addr: int, n: int) -> None:
    """Stream HBM bytes [addr, addr+n) to ``path`` in 16 MiB pieces (a dump of a multi-GiB range never
    holds it in memory), through a temporary file renamed over the target (atomic like atomic_write)."""
    import os
    import tempfile
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
        with os.fdopen(fd, "wb") as fh:
            for _a, chunk in hbm.iter_chunks(addr, addr + n, 1 << 24):
                fh.write(chunk.data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise UsageError(f"--dump-hbm: cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _save_npy(path: Path, array, what: str = "output") -> None:
    import io
    import numpy as np
    buf = io.BytesIO()
    np.save(buf, array)
    _write_out(path, buf.getvalue(), what)


def _run_summary(res, cfg, out, title: str) -> None:
    st = res.stats
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("instructions", f"{res.instructions:,}")
    t.add_row(f"cycles ({st.get('timing_mode', 'serial')})", f"{res.cycles:,}")
    for unit, n in st.get("by_unit", {}).items():
        t.add_row(f"unit {unit}", f"{n:,}")
    t.add_row("matrix MACs", f"{st.get('matrix_macs', 0):,}")
    t.add_row("host seconds", f"{st.get('host_seconds', 0.0):.4f}")
    out.print(t)
    if st.get("by_opcode"):
        ops = Table(title="instructions by opcode")
        ops.add_column("opcode")
        ops.add_column("count", justify="right")
        for name, n in sorted(st["by_opcode"].items(), key=lambda kv: -kv[1]):
            ops.add_row(name, f"{n:,}")
        out.print(ops)


def upstream_lines(stats: dict) -> list[str]:
    """The upstream emulator's summary lines (timing.md §6) from a run's statistics."""
    cycles = int(stats.get("cycles", 0))
    h = stats.get("hbm", {})
    r, w = int(h.get("bytes_read", 0)), int(h.get("bytes_written", 0))
    util = (r + w) / (cycles * 1e-9) if cycles else 0.0
    return [f"Simulation completed. Latency {cycles}.000ns",
            f"HBM Statistics - Bytes read: {r} | Bytes written: {w} | Utilization: {util:.6g} bytes/sec"]


def _write_perfetto(path: str, trace, what: str = "--perfetto") -> None:
    p = _out_path(path, what)
    _write_out(p, json.dumps(trace.to_perfetto()).encode(), what)


def _dump_specs(specs, flag: str, form: str) -> list[tuple[int, int, Path]]:
    """Parse ``ADDR:COUNT=PATH`` dump options (validated before anything runs)."""
    parsed = []
    for spec in specs or []:
        left, path = _split_spec(spec, flag, form)
        a, sep, n = left.partition(":")
        if not sep:
            raise UsageError(f"{flag}: {spec!r} must look like {form}")
        names = form.split("=")[0].split(":")
        parsed.append((_int_arg(a, f"{flag} {names[0]}"), _int_arg(n, f"{flag} {names[1]}"), _out_path(path, flag)))
    return parsed


def cmd_exec(args, out, err):
    import numpy as np
    from .machine import Machine
    from .sram_io import fp_sram_from_values, load_fp_sram_file, load_int_sram_file
    from .image import load_raw_image

    if args.max_instructions is not None and args.max_instructions < 0:
        raise UsageError(f"--max-instructions: {args.max_instructions} must be >= 0")
    cfg = _config_from_args(args)
    prog = _read_program(args.program)
    # validate every output spec before running anything
    vram_dumps = _dump_specs(args.dump_vram, "--dump-vram", "ADDR:ROWS=OUT.npy")
    hbm_dumps = _dump_specs(args.dump_hbm, "--dump-hbm", "ADDR:LEN=OUT.bin")
    fp_dump = _out_path(args.dump_fp_sram, "--dump-fp-sram") if args.dump_fp_sram else None
    for addr, rows, _ in vram_dumps:
        if addr % cfg.VLEN or addr // cfg.VLEN + rows > cfg.VECTOR_SRAM_SIZE:
            raise UsageError(f"--dump-vram: rows [{addr}, +{rows}) are not whole VRAM rows inside "
                             f"VECTOR_SRAM_SIZE={cfg.VECTOR_SRAM_SIZE} (VLEN={cfg.VLEN})")
    for addr, n, _ in hbm_dumps:
        if addr + n > cfg.HBM_SIZE:
            raise UsageError(f"--dump-hbm: [{addr}, +{n}) exceeds HBM_SIZE={cfg.HBM_SIZE}")

    m = Machine(cfg, backend=args.backend, timing=args.timing)
    if args.hbm:
        load_raw_image(args.hbm, m.hbm, 0)
    for spec in args.hbm_at or []:
        a, path = _split_spec(spec, "--hbm-at", "ADDR=FILE")
        load_raw_image(path, m.hbm, _int_arg(a, "--hbm-at ADDR"))
    if args.fp_sram and args.fp:
        raise UsageError("--fp-sram and --fp are mutually exclusive")
    if args.fp_sram:
        m.fp_sram.bits[:] = load_fp_sram_file(args.fp_sram, cfg.FP_SRAM_SIZE)
    if args.fp:
        try:
            values = [float(v) for v in args.fp.split(",") if v.strip()]
        except ValueError:
            raise UsageError(f"--fp: {args.fp!r} is not a comma-separated list of numbers") from None
        m.fp_sram.bits[:] = fp_sram_from_values(values, cfg.FP_SRAM_SIZE)
    if args.int_sram:
        m.int_sram[:] = load_int_sram_file(args.int_sram, cfg.INT_SRAM_SIZE)

    res = m.run(prog, max_instructions=args.max_instructions, raise_on_fault=False)
    # outputs are written even after a fault (post-mortem), each atomically
    for addr, rows, path in vram_dumps:
        _save_npy(path, m.vram.read(addr, rows), "--dump-vram")
    for addr, n, path in hbm_dumps:
        _write_hbm_dump(path, m.hbm, addr, n)
    if fp_dump is not None:
        _save_npy(fp_dump, np.asarray(m.fp_sram, dtype=np.float32), "--dump-fp-sram")
    faulted = res.fault is not None
    if faulted:                                   # the fault is the headline; statistics are partial
        _print_fault(err, str(res.fault))
    if args.json:
        doc = dict(res.stats)
        doc["program"] = str(args.program)
        doc["partial"] = faulted
        doc["fault"] = _sim_fault_json(res.fault) if faulted else None
        out.file.write(json.dumps(doc, default=_json_default, sort_keys=True) + "\n")
        if not faulted:
            for line in upstream_lines(res.stats):
                err.print(line, markup=False, highlight=False)
    else:
        title = (f"plena-sim exec {args.program}: partial statistics (faulted at pc {res.fault.pc}, "
                 f"not retired)" if faulted else f"plena-sim exec {args.program}")
        _run_summary(res, cfg, out, title)
        if not faulted:
            for line in upstream_lines(res.stats):
                out.print(line, markup=False, highlight=False)
    return EXIT_FAULT if faulted else EXIT_OK


def _print_fault(err, text: str) -> None:
    err.print("[red]fault:[/] ", end="")
    err.print(text, markup=False)


def _sim_fault_json(fault) -> dict:
    return dict(fault.to_dict(), message=str(fault))


def _json_default(o):
    import numpy as np
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


# ----------------------------------------------------------------------------------------- demo

DEMO_ASM = """\
; plena-sim demo: scale a 4x64 activation by 1.5 through HBM (MXFP8), with a hardware loop
S_ADDI_INT gp1, gp0, 0          ; a0 = HBM byte 0 (the activation)
C_SET_ADDR_REG a0, gp0, gp1
S_ADDI_INT gp2, gp0, 256        ; SCALE = element bytes (4 rows x 64 x 1 byte)
C_SET_SCALE_REG gp2
S_LD_FP f1, gp0, 0              ; f1 = 1.5 (FP SRAM word 0)
H_PREFETCH_V gp0, gp0, a0, 0, 0 ; VRAM rows 0..3 <- HBM
S_ADDI_INT gp3, gp0, 0          ; row pointer
C_LOOP_START gp4, 4
V_MUL_VF gp3, gp3, f1           ; row *= 1.5
S_ADDI_INT gp3, gp3, 64
C_LOOP_END gp4
S_ADDI_INT gp5, gp0, 1024       ; store to HBM byte 1024
C_SET_ADDR_REG a1, gp0, gp5
H_STORE_V gp0, gp0, a1, 0, 0
"""


def cmd_demo(args, out, err):
    import numpy as np
    from isa import assemble
    from .config import default_config
    from .image import ImageBuilder, read_tensor
    from .machine import Machine

    cfg = default_config()
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((4, cfg.VLEN)).astype(np.float32)
    m = Machine(cfg, backend=args.backend)
    builder = ImageBuilder(config=cfg, hbm=m.hbm)
    src = builder.add("x", x, "HBM_V_ACT_TYPE", address=0)
    out_place = builder.add("y", np.zeros_like(x), "HBM_V_ACT_TYPE", address=1024)
    m.write_fp_sram(0, [1.5])
    prog = assemble(DEMO_ASM, "demo.asm")
    res = m.run(prog)
    got = read_tensor(m.hbm, out_place)
    from .numerics import round_bf16_array
    scaled = (src.values * np.float32(1.5)).astype(np.float32)
    want_vram = round_bf16_array(scaled.reshape(-1)).reshape(scaled.shape)
    check = ImageBuilder(config=cfg)
    want = check.add("y", want_vram, "HBM_V_ACT_TYPE", address=0).values
    ok = bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
    _run_summary(res, cfg, out, "plena-sim demo (scale 4x64 MXFP8 activation by 1.5)")
    out.print(f"output matches the host golden bit for bit: {'[green]PASS[/]' if ok else '[red]FAIL[/]'}")
    return EXIT_OK if ok else EXIT_MISMATCH


# ----------------------------------------------------------------------------------------- testbenches

def _parse_param_value(text: str):
    """A ``--set`` value: true/false, none, int, float, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text.replace("_", "")) if conv is int else conv(text)
        except ValueError:
            pass
    return text.strip()


def _testbench_params(mod, base: dict, sets: list[str], seed: int | None) -> dict:
    """``base`` (defaults + case overrides) with the ``--set`` values and ``--seed`` applied, type-checked."""
    from testbenches.shapes import Hw
    params = dict(base)
    for spec in sets or []:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set: {spec!r} must look like KEY=VALUE")
        if key not in mod.DEFAULTS:
            raise UsageError(f"--set: unknown parameter {key!r} of {mod.__name__.rsplit('.', 1)[-1]} "
                             f"(valid: {', '.join(mod.DEFAULTS)})")
        v = _parse_param_value(value)
        default = mod.DEFAULTS[key]
        if isinstance(default, Hw):
            default = 0                          # a shape in machine units: an integer
        if isinstance(default, bool) and not isinstance(v, bool):
            raise UsageError(f"--set {key}: expected true or false, got {value!r}")
        if isinstance(default, int) and not isinstance(default, bool) and not isinstance(v, int):
            raise UsageError(f"--set {key}: expected an integer, got {value!r}")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            raise UsageError(f"--set {key}: must be >= 0, got {v}")
        params[key] = v
    if seed is not None:
        params["seed"] = seed
    return params


def _testbench_config(args):
    from .config import inconsistency_message, load_config, parse_override
    from testbenches.variants import get_config, variant_names
    hw = dict(parse_override(s) for s in (args.set_hw or []))
    if args.config:
        if args.variant not in (None, "default"):
            raise UsageError("--config and --variant are mutually exclusive")
        if args.hw is not None:
            raise UsageError("--config and --hw are mutually exclusive (a preset is a whole machine)")
        cfg = load_config(args.config, section=args.section, overrides=hw)
    else:
        variant = args.variant or "default"
        if variant not in variant_names():
            raise UsageError(f"--variant: unknown variant {variant!r} (valid: {', '.join(variant_names())})")
        try:
            cfg = get_config(variant, hw or None, hw=args.hw)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if hw:
        msg = inconsistency_message(cfg, {k: v for k, v in hw.items()})
        if msg is not None:
            raise UsageError(f"--set-hw {msg}")
    return cfg


def _get_testbench(name: str):
    import testbenches
    if name not in testbenches.names():
        raise UsageError(f"unknown testbench {name!r} (valid: {', '.join(testbenches.names())})")
    return testbenches.get(name)


def _case_params_and_config(mod, name: str, args):
    """Parameters (defaults, then ``--case`` overrides, ``--set``, ``--seed``) and the hardware config
    (``--case``'s variant unless ``--variant``/``--config`` is given; then ``--set-hw``). Sets
    ``args.variant`` to the variant used."""
    params = dict(mod.DEFAULTS)
    variant = args.variant
    if args.case:
        from testbenches.harness import cases_of
        cases = cases_of(mod)
        if args.case not in cases:
            raise UsageError(f"--case: unknown case {args.case!r} of {name} (valid: {', '.join(cases)})")
        _, ov, case_variant = cases[args.case]
        params.update(ov)
        if variant is None and not args.config:
            from testbenches.variants import fixes_machine
            variant = case_variant
            if args.hw is not None and fixes_machine(variant):
                variant = "default"              # --hw replaces a case's own machine
    args.variant = variant
    from testbenches.shapes import resolve_params
    cfg = _testbench_config(args)
    try:
        params = resolve_params(_testbench_params(mod, params, args.set, args.seed), cfg)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
    return params, cfg


def cmd_list(args, out, err):
    import testbenches
    from testbenches.shapes import Hw
    from .presets import load_preset
    cfg = load_preset(args.hw) if args.hw else None
    where = f" on {args.hw}" if args.hw else "; shapes in machine units, --hw P shows their values"
    t = Table(title=f"testbenches (plena-sim run NAME){where}")
    t.add_column("name")
    t.add_column("description")
    t.add_column("parameters (defaults)")
    t.add_column("required cases")
    for name in testbenches.names():
        try:
            mod = testbenches.get(name)
        except ImportError as exc:
            t.add_row(name, f"[red]cannot import: {exc}[/]", "", "")
            continue
        params = ", ".join(f"{k}={v} (={v.resolve(cfg)})" if isinstance(v, Hw) and cfg is not None else f"{k}={v}"
                           for k, v in mod.DEFAULTS.items())
        cases = " ".join(c[0] for c in mod.REQUIRED_CASES)
        t.add_row(name, getattr(mod, "DESCRIPTION", ""), params, cases)
    out.print(t)
    return EXIT_OK


def _fault_json(rep) -> dict | None:
    f = rep.fault
    if not f:
        return None
    return {"kind": f.get("class"), "rule": f.get("rule"), "pc": f.get("pc"), "line": f.get("line"),
            "message": f"{f.get('line')}: {f.get('text')}: {f.get('detail')} [{f.get('rule')}, pc {f.get('pc')}]"}


def _result_json(name: str, params: dict, cfg, rep, primary_tol) -> dict:
    worst = rep.worst or None
    return {
        "testbench": name, "case": rep.case_id, "params": params, "hardware": cfg.values(),
        "hw": cfg.preset or None, "variant": rep.variant or None,
        "passed": bool(rep.passed), "max_abs_err": rep.max_abs, "max_rel_err": rep.max_rel,
        "rms_err": rep.rms, "rel_rms": rep.rel_rms, "worst": worst, "first": rep.first,
        "failing_elements": rep.n_fail,
        "atol": primary_tol.get("atol"), "rtol": primary_tol.get("rtol"), "tolerance": primary_tol.get("text"),
        "checks": [c.to_dict() for c in rep.checks],
        "cycles": rep.cycles, "instructions": rep.instructions, "stats": rep.stats,
        "wall_s": rep.wall_time, "fault": _fault_json(rep), "error": rep.error,
    }


def _tol_info(case) -> dict:
    import numpy as np
    if case is None or not case.checks:
        return {}
    tol = case.checks[0].tol
    if tol.exact:
        return {"atol": 0.0, "rtol": 0.0, "text": tol.describe()}
    if isinstance(tol.eps_a, np.ndarray):
        ea = float(np.max(tol.eps_a))
    else:
        ea = float(tol.eps_a)
    atol = tol.abs_term if not tol.uses_A else ea
    return {"atol": atol, "rtol": float(tol.eps_g), "text": tol.describe()
            + (" (atol scales the reference envelope A)" if tol.uses_A else "")}


def cmd_run(args, out, err):
    import tempfile
    import numpy as np
    from testbenches.harness import run as run_case_obj

    mod = _get_testbench(args.name)
    name = args.name
    params, cfg = _case_params_and_config(mod, name, args)
    variant = args.variant
    save_dir = None
    if args.save:
        save_dir = Path(args.save)
        try:
            save_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--save: cannot create {args.save}: {exc.strerror or exc}") from None

    quiet = args.json
    if not quiet:
        machine = cfg.section if args.config else (cfg.preset + ("" if variant in (None, "default") else f", {variant}"))
        hw = Table(title=f"{name} [{args.case or 'custom'}] hardware ({machine})")
        for col in ("MLEN", "VLEN", "BLEN", "HLEN", "BA", "Pm/Pv/Ps", "BMM_SCALE"):
            hw.add_column(col, justify="right")
        hw.add_row(str(cfg.MLEN), str(cfg.VLEN), str(cfg.BLEN), str(cfg.HLEN), str(cfg.BROADCAST_AMOUNT),
                   f"{cfg.P_M}/{cfg.P_V}/{cfg.P_W}", str(cfg.BMM_SCALE))
        out.print(hw)
        out.print("params: " + ", ".join(f"{k}={v}" for k, v in params.items()), markup=False)

    import time
    t0 = time.perf_counter()
    case = None
    with (err.status("build + generate ...") if not quiet else _nullctx()) as status:
        try:
            case = mod.build(params, cfg)
        except (ValueError, AssertionError, KeyError) as exc:
            raise UsageError(f"{name}: unsupported parameters: {exc}") from None
        case.case_id = args.case or "custom"
        case.variant = variant or ""
        if status is not None:
            status.update("assemble + simulate + compare ...")
        with tempfile.TemporaryDirectory(prefix="plena-run-") as tmp:
            want_trace = bool(getattr(args, "trace", False) or getattr(args, "perfetto", None))
            rep = run_case_obj(case, backend=args.backend, workdir=tmp, timing=getattr(args, "timing", None),
                               trace=want_trace)
            sim = np.load(Path(tmp) / "sim.npy") if (Path(tmp) / "sim.npy").exists() else None
            program_mem = (Path(tmp) / "program.mem").read_text() if (Path(tmp) / "program.mem").exists() else None
    doc = _result_json(name, params, cfg, rep, _tol_info(case))
    doc["wall_s"] = time.perf_counter() - t0
    if save_dir is not None:
        atomic_write(save_dir / "program.asm", case.program)
        if program_mem is not None:
            atomic_write(save_dir / "program.mem", program_mem)
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in case.inputs.items()}
        if case.golden is not None:
            arrays["golden"] = np.asarray(case.golden, dtype=np.float32)
        if sim is not None:
            arrays["output"] = np.asarray(sim, dtype=np.float32)
        import io
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write(save_dir / "arrays.npz", buf.getvalue())
        atomic_write(save_dir / "result.json", json.dumps(doc, default=_json_default, indent=1) + "\n")
    if getattr(args, "perfetto", None) and rep.trace is not None:
        _write_perfetto(args.perfetto, rep.trace)
    if args.json:
        out.file.write(json.dumps(doc, default=_json_default, sort_keys=True) + "\n")
    else:
        _render_report(out, rep, doc)
        if getattr(args, "trace", False) and rep.trace is not None:
            _render_trace(out, rep.trace, rep.stats, last=50)
    if rep.fault is not None and not rep.passed:
        if not args.json:
            err.print("[red]fault:[/] ", end="")
            err.print(doc["fault"]["message"], markup=False)
        return EXIT_FAULT
    return EXIT_OK if rep.passed else EXIT_MISMATCH


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _render_report(out, rep, doc) -> None:
    from rich.panel import Panel
    status = "[bold green]PASS[/]" if rep.passed else "[bold red]FAIL[/]"
    lines = [f"{status}  {rep.summary}"]
    if rep.error:
        lines.append(f"error: {rep.error}")
    if rep.checks:
        c0 = rep.checks[0]
        lines.append(f"max abs err {rep.max_abs:.4g}   max rel err {rep.max_rel:.4g}   rms {rep.rms:.4g}   "
                     f"rel rms {rep.rel_rms:.4g}   failing {rep.n_fail}/{c0.n}")
        if rep.worst:
            w = rep.worst
            lines.append(f"worst element ({w.get('at')}): sim={w.get('sim')} golden={w.get('golden')} "
                         f"err={w.get('err')} tol={w.get('tol')}")
        lines.append(f"tolerance: {doc.get('tolerance')}")
        for c in rep.checks[1:]:
            lines.append(f"check {c.name}: {'ok' if c.passed else 'FAILED ' + c.reason}")
    lines.append(f"{rep.instructions:,} instructions, {rep.cycles:,} cycles, {doc['wall_s']:.2f} s wall")
    util = rep.stats.get("unit_utilization") or {}
    busy = rep.stats.get("by_unit") or {}
    if util:
        for u, f in util.items():
            bar = "#" * int(round(40 * min(1.0, float(f))))
            lines.append(f"  {u:>2} {bar:<40} {100 * float(f):5.1f}%")
    elif busy:
        lines.append("  instructions by unit: " + ", ".join(f"{u}={n}" for u, n in busy.items()))
    out.print(Panel("\n".join(lines), title=rep.label, expand=False), soft_wrap=False)


# ----------------------------------------------------------------------------------------- mutants

def cmd_mutants(args, out, err):
    from testbenches import mutations as mut
    hooks = list(mut.MUTATIONS)
    if args.only:
        wanted = [h.strip() for h in args.only.split(",") if h.strip()]
        unknown = [h for h in wanted if h not in mut.MUTATIONS]
        if unknown:
            raise UsageError(f"--only: unknown mutation(s) {', '.join(unknown)} (valid: {', '.join(mut.MUTATIONS)})")
        hooks = wanted
    rows = []
    with (err.status("running mutants ...") if not args.json else _nullctx()) as status:
        for h in hooks:
            cases = [dict(mut.ci_subset())[h]] if args.quick else mut.exposures(h)
            for exp in cases:
                if status is not None:
                    status.update(f"{h} on {exp.label}")
                rep = mut.run_mutation(h, exp, backend=args.backend)
                how = mut.how_caught(rep)
                worst = rep.worst_ratio if how == "mismatch" else None
                rows.append({"mutation": h, "description": mut.DESCRIPTIONS[h], "case": exp.label,
                             "caught": bool(how), "how": how or "NOT CAUGHT", "worst_err_over_tol": worst,
                             "detail": rep.summary})
    all_caught = all(r["caught"] for r in rows)
    if args.json:
        out.file.write(json.dumps({"all_caught": all_caught, "mutants": rows}, default=_json_default) + "\n")
    else:
        t = Table(title=f"mutants: {sum(r['caught'] for r in rows)}/{len(rows)} caught")
        for col in ("mutation", "exposing case", "caught", "how", "worst err/tol"):
            t.add_column(col)
        for r in rows:
            t.add_row(r["mutation"], r["case"], "[green]yes[/]" if r["caught"] else "[red]NO[/]", r["how"],
                      "" if r["worst_err_over_tol"] is None else f"{r['worst_err_over_tol']:.3g}")
        out.print(t)
    return EXIT_OK if all_caught else EXIT_MISMATCH


def cmd_bench(args, out, err):
    from testbenches import bench
    only = [x.strip() for o in (args.only or []) for x in o.split(",") if x.strip()] or None
    unknown = [n for n in (only or []) if n not in bench.WORKLOADS]
    if unknown:
        raise UsageError(f"--only: unknown workload(s) {', '.join(unknown)} (valid: {', '.join(bench.WORKLOADS)})")
    if args.repeat is not None and args.repeat < 1:
        raise UsageError("--repeat must be >= 1")
    if args.json:
        res = bench.run_suite(quick=args.quick, only=only, repeat=args.repeat, cold=args.cold)
        out.file.write(json.dumps(res, default=_json_default) + "\n")
    else:
        res = bench.run_suite(quick=args.quick, only=only, repeat=args.repeat, cold=args.cold,
                              progress=lambda s: err.print(f"[dim]bench: {s}[/]"))
        bench.render(res, out)
    return EXIT_BUG if any("error" in w for w in res["workloads"].values()) else EXIT_OK


# ----------------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="plena-sim", description="PLENA accelerator simulator, assembler and testbenches")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    a = sub.add_parser("asm", help="assemble a .asm file into .mem machine code")
    a.add_argument("input", metavar="IN.asm")
    a.add_argument("-o", "--output", metavar="OUT.mem", help="output .mem (default: stdout)")
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="disassemble a .mem file into canonical assembly")
    d.add_argument("input", metavar="IN.mem")
    d.add_argument("--addresses", action="store_true", help="prefix each line with index and word")
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser("isa", help="print the opcode table")
    i.add_argument("--markdown", action="store_true", help="print the generated Markdown reference")
    i.set_defaults(func=cmd_isa)

    hwp = sub.add_parser("hw", help="list the hardware presets, or show one with its sources")
    hwp.add_argument("name", metavar="NAME", nargs="?", help="a preset name")
    hwp.add_argument("--json", action="store_true", help="print JSON")
    hwp.set_defaults(func=cmd_hw)

    c = sub.add_parser("config", help="print the effective hardware configuration")
    _add_config_args(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_config)

    e = sub.add_parser("exec", help="run a program (.asm or .mem) with raw memory images")
    e.add_argument("program", metavar="PROGRAM")
    _add_config_args(e)
    e.add_argument("--backend", choices=("numba", "reference"), default="numba")
    e.add_argument("--hbm", metavar="FILE", help="raw HBM image placed at address 0")
    e.add_argument("--hbm-at", action="append", metavar="ADDR=FILE", help="raw image at ADDR (repeatable)")
    e.add_argument("--fp-sram", metavar="FILE", help="FP SRAM preload (upstream f16 little-endian)")
    e.add_argument("--fp", metavar="V1,V2,...", help="FP SRAM preload values (rounded to bf16)")
    e.add_argument("--int-sram", metavar="FILE", help="INT SRAM preload (u32 little-endian)")
    e.add_argument("--dump-vram", action="append", metavar="ADDR:ROWS=OUT.npy", help="save VRAM rows")
    e.add_argument("--dump-fp-sram", metavar="OUT.npy", help="save FP SRAM (float32)")
    e.add_argument("--dump-hbm", action="append", metavar="ADDR:LEN=OUT.bin", help="save HBM bytes")
    e.add_argument("--max-instructions", type=int, default=None, metavar="N", help="instruction budget")
    e.add_argument("--timing", choices=("serial", "overlap"), default="serial",
                   help="cycle accounting (timing.md §3 serial / §4 overlap scoreboard)")
    e.add_argument("--json", action="store_true", help="print one JSON object (run statistics)")
    e.set_defaults(func=cmd_exec)

    dm = sub.add_parser("demo", help="run the built-in demo program and check it against a host golden")
    dm.add_argument("--backend", choices=("numba", "reference"), default="numba")
    dm.add_argument("--seed", type=int, default=0)
    dm.set_defaults(func=cmd_demo)

    mu = sub.add_parser("mutants", help="prove the testbenches catch every known codegen bug (kernels.md §6)")
    mu.add_argument("--only", metavar="NAME[,NAME]", help="run only these mutations")
    mu.add_argument("--quick", action="store_true",
                    help="only the cheapest exposing case per mutation (default: every listed case)")
    mu.add_argument("--backend", choices=("numba", "reference"), default="numba")
    mu.add_argument("--json", action="store_true", help="print one JSON object")
    mu.set_defaults(func=cmd_mutants)

    be = sub.add_parser("bench", help="run the benchmark suite (speed, JIT, peak RSS; docs/performance.md)")
    be.add_argument("--quick", action="store_true", help="reduced sizes (CI smoke)")
    be.add_argument("--json", action="store_true", help="print one JSON object")
    be.add_argument("--only", action="append", metavar="NAME", help="only this workload (repeatable, or a,b)")
    be.add_argument("--repeat", type=int, default=None, help="runs per workload (default 3, 1 with --quick)")
    be.add_argument("--cold", action=argparse.BooleanOptionalAction, default=None,
                    help="also measure the empty-JIT-cache compile and end-to-end run (default: on unless --quick)")
    be.set_defaults(func=cmd_bench)

    ls = sub.add_parser("list", help="list the testbenches")
    _add_hw_arg(ls)
    ls.set_defaults(func=cmd_list)

    r = sub.add_parser("run", help="run a testbench: build, generate, assemble, simulate, compare")
    r.add_argument("name", metavar="NAME")
    r.add_argument("--case", metavar="ID", help="a required/stretch case id (e.g. P3)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="testbench parameter (repeatable)")
    r.add_argument("--variant", default=None, help="hardware variant: default, emu025, small, wide")
    _add_hw_arg(r)
    r.add_argument("--config", "--settings", dest="config", metavar="FILE", help="hardware config file")
    r.add_argument("--section", default="TRANSACTIONAL", help="TOML section of --config")
    r.add_argument("--set-hw", action="append", metavar="KEY=VALUE", help="override one hardware key")
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--backend", choices=("numba", "reference"), default="numba")
    r.add_argument("--save", metavar="DIR", help="write program.asm, program.mem, result.json, arrays.npz")
    r.add_argument("--json", action="store_true", help="print exactly one JSON object")
    r.add_argument("--timing", choices=("serial", "overlap"), default="serial",
                   help="cycle accounting (timing.md §3 serial / §4 overlap scoreboard)")
    r.add_argument("--trace", action="store_true", help="record an execution trace; show its last 50 rows")
    r.add_argument("--perfetto", metavar="OUT.json", help="write the trace as Chrome/Perfetto trace JSON")
    r.set_defaults(func=cmd_run)

    tr = sub.add_parser("trace", help="run a program or testbench with tracing and show the trace")
    tr.add_argument("program", metavar="PROGRAM", nargs="?", help=".asm or .mem program")
    tr.add_argument("--testbench", metavar="NAME", help="trace a testbench instead of a program file")
    tr.add_argument("--case", metavar="ID", help="a required/stretch case id of --testbench")
    tr.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="testbench parameter with --testbench, else a CONFIG key override (repeatable)")
    tr.add_argument("--variant", default=None, help="hardware variant of --testbench")
    _add_hw_arg(tr)
    tr.add_argument("--config", "--settings", dest="config", metavar="FILE", help="hardware config file")
    tr.add_argument("--section", default="TRANSACTIONAL", help="TOML section of --config")
    tr.add_argument("--set-hw", action="append", metavar="KEY=VALUE", help="override one hardware key")
    tr.add_argument("--seed", type=int, default=None)
    tr.add_argument("--backend", choices=("numba", "reference"), default="numba")
    tr.add_argument("--timing", choices=("serial", "overlap"), default="serial")
    tr.add_argument("--capacity", type=int, default=1 << 16, metavar="N",
                    help="trace ring capacity (the newest N instructions are kept)")
    tr.add_argument("--max-instructions", type=int, default=None, metavar="N", help="instruction budget")
    tr.add_argument("--pc", metavar="A:B", help="only pcs A..B (inclusive)")
    tr.add_argument("--op", metavar="OP[,OP]", help="only these mnemonics")
    tr.add_argument("--unit", metavar="U[,U]", help="only these units: dma matrix vector scalar control or H M V S C")
    tr.add_argument("--last", type=int, default=None, metavar="N", help="only the last N rows (default 200)")
    tr.add_argument("--around-fault", type=int, default=None, metavar="N",
                    help="the N instructions retired just before the fault")
    tr.add_argument("--perfetto", metavar="OUT.json", help="write the trace as Chrome/Perfetto trace JSON")
    tr.add_argument("--json", action="store_true", help="print the selected rows and stats as one JSON object")
    tr.set_defaults(func=cmd_trace)
    return p


def _render_trace(out, trace, stats: dict, last: int | None = None, title: str | None = None,
                  full=None) -> None:
    """Table of ``trace`` (its last ``last`` rows), per-opcode summary of ``full`` (default: ``trace``)
    and the per-unit utilization bars of the run."""
    from rich.markup import escape
    from .trace import render_summary, render_table, render_utilization
    shown = trace.filter(last=last) if last is not None else trace
    out.print(render_table(shown, title=escape(title) if title else None))
    out.print(render_summary(full if full is not None else trace))
    out.print(render_utilization(stats.get("unit_busy_cycles", trace.unit_busy()), int(stats.get("cycles", 0))))


def cmd_trace(args, out, err):
    """``plena-sim trace``: run with the in-loop trace ring, filter and render it."""
    import tempfile
    from .trace import parse_units
    if (args.program is None) == (args.testbench is None):
        raise UsageError("trace: give exactly one of PROGRAM or --testbench NAME")
    if args.capacity <= 0:
        raise UsageError(f"--capacity: {args.capacity} must be > 0")
    if args.max_instructions is not None and args.max_instructions < 0:
        raise UsageError(f"--max-instructions: {args.max_instructions} must be >= 0")
    pc_range = None
    if args.pc:
        a, sep, b = args.pc.partition(":")
        if not sep:
            raise UsageError(f"--pc: {args.pc!r} must look like A:B")
        pc_range = (_int_arg(a, "--pc A") if a else 0, _int_arg(b, "--pc B") if b else 1 << 62)
    try:
        units = parse_units(args.unit) if args.unit else None
    except ValueError as exc:
        raise UsageError(f"--unit: {exc}") from None
    ops = None
    if args.op:
        from isa.table import BY_MNEMONIC
        ops = {o.strip().upper() for o in args.op.split(",") if o.strip()}
        bad = sorted(o for o in ops if o not in BY_MNEMONIC)
        if bad:
            raise UsageError(f"--op: unknown mnemonic(s) {', '.join(bad)}")
    perf = _out_path(args.perfetto, "--perfetto") if args.perfetto else None
    if args.testbench:
        from testbenches.harness import run as run_case_obj
        mod = _get_testbench(args.testbench)
        params, cfg = _case_params_and_config(mod, args.testbench, args)
        try:
            case = mod.build(params, cfg)
        except (ValueError, AssertionError, KeyError) as exc:
            raise UsageError(f"{args.testbench}: unsupported parameters: {exc}") from None
        case.case_id = args.case or "custom"
        case.variant = args.variant or ""
        with tempfile.TemporaryDirectory(prefix="plena-trace-") as tmp:
            rep = run_case_obj(case, backend=args.backend, workdir=tmp, timing=args.timing,
                               max_instructions=args.max_instructions, trace=int(args.capacity))
        trace, stats, fault = rep.trace, rep.stats, rep.fault
        title = f"{args.testbench} [{case.case_id}] ({args.timing})"
        fault_pc = (fault or {}).get("pc") if isinstance(fault, dict) else None
        fault_text = None if fault is None else (fault.get("text") if isinstance(fault, dict) else str(fault))
        if trace is None:
            raise UsageError(f"{args.testbench}: the program did not run ({rep.summary or rep.error})")
    else:
        from .machine import Machine
        args.set = list(args.set or []) + list(args.set_hw or [])
        cfg = _config_from_args(args)
        prog = _read_program(args.program)
        m = Machine(cfg, backend=args.backend, timing=args.timing)
        res = m.run(prog, max_instructions=args.max_instructions, raise_on_fault=False, trace=int(args.capacity))
        trace, stats = res.trace, res.stats
        fault_pc = res.fault.pc if res.fault is not None else None
        fault_text = str(res.fault) if res.fault is not None else None
        title = f"{args.program} ({args.timing})"
    if args.around_fault is not None:
        # the faulting instruction does not retire: show the N instructions retired just before it
        if fault_pc is None:
            raise UsageError("--around-fault: the run did not fault")
        if args.around_fault < 0:
            raise UsageError(f"--around-fault: {args.around_fault} must be >= 0")
        last = args.around_fault if args.last is None else min(args.last, args.around_fault)
    else:
        last = args.last if args.last is not None else (None if (pc_range or ops or units) else 200)
    sel = trace.filter(pc=pc_range, ops=ops, units=units, last=last)
    if perf is not None:
        _write_out(perf, json.dumps(trace.to_perfetto()).encode(), "--perfetto")
    faulted = fault_text is not None
    if faulted:                                   # the fault is the headline; statistics are partial
        _print_fault(err, fault_text)
    if args.json:
        doc = {"rows": sel.rows(), "summary": trace.opcode_summary(), "stats": stats,
               "records": len(trace), "dropped": trace.dropped, "partial": faulted,
               "fault": {"pc": fault_pc, "message": fault_text} if faulted else None}
        out.file.write(json.dumps(doc, default=_json_default, sort_keys=True) + "\n")
    else:
        what = f" (partial: faulted at pc {fault_pc}, not retired)" if faulted else ""
        _render_trace(out, sel, stats, title=f"{title}: {len(sel)} of {trace.total} instructions{what}", full=trace)
        if trace.dropped:
            out.print(f"(ring buffer kept the newest {len(trace)} of {trace.total} instructions)")
        if not faulted:
            for line in upstream_lines(stats):
                out.print(line, markup=False, highlight=False)
    return EXIT_FAULT if faulted else EXIT_OK


def _user_error_types():
    from isa import AssemblerError, MemFormatError
    from .config import ConfigError
    types = [UsageError, AssemblerError, MemFormatError, ConfigError]
    try:
        from .image import ImageError
        types.append(ImageError)
    except ImportError:
        pass
    return tuple(types)


def main(argv=None) -> int:
    out, err = _consoles()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        from isa import AssemblerError
        user_errors = _user_error_types()
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # --help
            return int(e.code or 0)
        if not getattr(args, "func", None):
            build_parser().print_help()
            return EXIT_USAGE
        return int(args.func(args, out, err))
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: classify every failure
        if isinstance(exc, AssemblerError):
            err.print(f"[red]error:[/] {len(exc.diagnostics)} assembler error(s)", markup=True)
            for dgn in exc.diagnostics:
                err.print(f"  {dgn}", markup=False)
            return EXIT_USAGE
        if isinstance(exc, user_errors):
            err.print("[red]error:[/] ", end="")
            err.print(str(exc), markup=False)
            return EXIT_USAGE
        from .faults import SimFault
        if isinstance(exc, SimFault):
            err.print("[red]fault:[/] ", end="")
            err.print(str(exc), markup=False)
            return EXIT_FAULT
        if debug:
            raise
        if isinstance(exc, MemoryError):   # the host ran out of memory: not a bug, not a traceback
            err.print("[red]error:[/] ", end="")
            err.print(f"out of host memory ({exc}); use a smaller configuration (VECTOR_SRAM_SIZE, "
                      "MATRIX_SRAM_SIZE, FP/INT_SRAM_SIZE, HBM_SIZE) or touch less HBM", markup=False)
            return EXIT_USAGE
        err.print(f"[red]internal error:[/] {type(exc).__name__}: ", end="")
        err.print(f"{exc} (run with --debug for the traceback; please report it)", markup=False)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
