"""THE opcode table: the single source of every opcode number, field position and operand signature.

Everything else -- the assembler, the disassembler, the decoder constants used by the simulator core,
the latency mapping and the Markdown reference -- is derived from the data in this module
(``isa.md`` §3-§4). No other module may spell an opcode number or a field shift.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

__all__ = [
    "Field",
    "FIELDS",
    "FORMATS",
    "Operand",
    "Instr",
    "INSTRUCTIONS",
    "BY_MNEMONIC",
    "BY_OPCODE",
    "NOT_INSTRUCTIONS",
    "UNITS",
    "OPERAND_KINDS",
    "WORD_BITS",
    "FAMILIES",
    "ALUS",
    "SPACES",
    "SPECIAL_WRITES",
    "TOPK_POLICIES",
    "EXP_CLAMP",
    "REGISTER_COUNT",
    "mac_table",
]

WORD_BITS = 32


@dataclass(frozen=True)
class Field:
    name: str
    shift: int
    width: int

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.shift

    @property
    def max(self) -> int:
        return (1 << self.width) - 1


#: Instruction word fields (isa.md §3). imm18/imm22 overlay the register fields above them.
# data tables: one row per line, aligned (not reformatted)
# fmt: off
FIELDS: MappingProxyType[str, Field] = MappingProxyType({f.name: f for f in (
    Field("opcode", 0, 6),
    Field("rd", 6, 4),
    Field("rs1", 10, 4),
    Field("rs2", 14, 4),
    Field("rs3", 18, 4),     # rmask / rstride / policy
    Field("funct1", 22, 4),  # prec / rorder
    Field("imm18", 14, 18),
    Field("imm22", 10, 22),
)})

#: Encoding formats: the fields each format may carry (isa.md §3).
FORMATS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType({
    "R3": ("rd", "rs1", "rs2"),
    "R4": ("rd", "rs1", "rs2", "rs3"),
    "R5": ("rd", "rs1", "rs2", "rs3", "funct1"),
    "RM2": ("rd", "rs1", "rs3"),
    "I18": ("rd", "rs1", "imm18"),
    "WO18": ("rd", "imm18"),
    "I22": ("rd", "imm22"),
    "RD": ("rd",),
    "OP": (),
})

UNITS: MappingProxyType[str, str] = MappingProxyType({
    "M": "matrix", "V": "vector", "S": "scalar", "H": "DMA", "C": "control",
})

#: Operand kinds. ``count`` is the number of registers of the kind (range of the index).
OPERAND_KINDS: MappingProxyType[str, str] = MappingProxyType({
    "gp": "GP register gp0..gp15",
    "f": "FP register f0..f7",
    "a": "HBM address register a0..a7",
    "imm18": "unsigned immediate 0..262143",
    "imm22": "unsigned immediate 0..4194303",
    "flag": "4-bit literal 0..15",
    "zero": "placeholder 0 (or gp0)",
})
REGISTER_COUNT = MappingProxyType({"gp": 16, "f": 8, "a": 8})
# fmt: on


@dataclass(frozen=True)
class Operand:
    """One assembly operand.

    ``field`` is the word field it is encoded in (None: not encoded -- an unused placeholder or an
    upstream-compatibility ``0``). ``optional`` operands may be omitted (default 0). ``compat``
    operands are accepted only for upstream compatibility and never printed. A ``zero_literal``
    register operand also accepts a number token of value 0 as a spelling of register 0 (upstream
    compatibility; see :func:`_upstream_zero_literal`); it is printed as the register.
    """

    kind: str
    field: str | None
    name: str
    optional: bool = False
    compat: bool = False
    #: static values the assembler rejects (value -> reason); mirrors a run-time fault
    forbid: tuple[tuple[int, str], ...] = ()
    #: inclusive allowed maximum below the field's own range (e.g. V_TOPK policy 0..1)
    max_value: int | None = None
    #: a number token of value 0 is accepted for register 0 (upstream-compatibility spelling)
    zero_literal: bool = False
    #: what the register's value addresses (``vram``, ``mram``, ``fpsram``, ``intsram``, ``hbm``), if anything
    space: str | None = None
    #: the run-time fault rule (isa.md §8) of this operand's static check (``forbid`` / ``max_value`` /
    #: a non-zero ``zero`` field); register-count checks of f and a operands are IL-FREG / IL-AREG
    rule: str = ""


@dataclass(frozen=True)
class Instr:
    mnemonic: str
    opcode: int
    unit: str
    fmt: str
    operands: tuple[Operand, ...]
    latency: str
    summary: str
    #: the instruction is a zero-latency no-op when its rd field is 0 (f0 destination)
    noop_if_rd0: bool = False
    #: the upstream 3-operand ``gp_dst, 0, imm18`` form is accepted (M_*_WO)
    middle_zero_form: bool = False
    #: the form with only compat operands (C_BREAK ``0, 0, 0``) is accepted
    all_compat_form: bool = False
    #: execution family (one core dispatch branch each, :data:`FAMILIES`)
    family: str = ""
    #: the operation within the family (:data:`ALUS`); shared across families (ADD: V_ADD_VV, S_ADD_FP, ...)
    alu: str = ""
    #: operands whose register the instruction writes (names from ``operands``), plus special registers
    #: ``SCALE`` / ``STRIDE`` / ``V_MASK`` / ``LOOP`` (the innermost loop counter, C_BREAK)
    writes: tuple[str, ...] = ()
    #: operands whose register the instruction reads and writes (V_RED_* accumulate, C_LOOP_END counts)
    updates: tuple[str, ...] = ()
    #: matrix-unit MACs per instruction, an expression in M, B, H, BA ("" = none)
    macs: str = ""

    @property
    def used_fields(self) -> tuple[str, ...]:
        """Fields this instruction reads (opcode included)."""
        named = [o.field for o in self.operands if o.field is not None]
        return ("opcode",) + tuple(dict.fromkeys(named))

    @property
    def gp_reads(self) -> tuple[str, ...]:
        """Word fields of the gp registers whose value the instruction reads (every gp operand that is not only
        written): addresses, counts, shift amounts, stored values and ALU sources."""
        return tuple(
            o.field for o in self.operands if o.kind == "gp" and o.field is not None and o.name not in self.writes
        )

    @property
    def unused_mask(self) -> int:
        """Bits ignored on execution (printed by the disassembler when non-zero)."""
        used = 0
        for f in self.used_fields:
            used |= FIELDS[f].mask
        return ((1 << WORD_BITS) - 1) & ~used

    def forms(self) -> tuple[tuple[Operand, ...], ...]:
        """Every operand list the assembler accepts, canonical (shortest) first."""
        req = [o for o in self.operands if not o.optional and not o.compat]
        opt = [o for o in self.operands if o.optional]
        compat = [o for o in self.operands if o.compat]
        forms: list[tuple[Operand, ...]] = []
        if self.all_compat_form:
            return ((), tuple(compat))
        for k in range(len(opt) + 1):
            forms.append(tuple(req + opt[:k]))
        if compat and not self.middle_zero_form:
            forms.append(tuple(req + opt + compat))
        if self.middle_zero_form:
            forms.append((req[0], compat[0]) + tuple(req[1:]))
        return tuple(forms)


# ---------------------------------------------------------------------------------- constructors


def _gp(field: str, name: str, **kw: Any) -> Operand:
    return Operand("gp", field, name, **kw)


def _f(field: str, name: str, **kw: Any) -> Operand:
    return Operand("f", field, name, **kw)


def _a(field: str, name: str, **kw: Any) -> Operand:
    return Operand("a", field, name, **kw)


def _flag(field: str, name: str, **kw: Any) -> Operand:
    return Operand("flag", field, name, **kw)


def _zero(field: str | None = None, name: str = "0", **kw: Any) -> Operand:
    return Operand("zero", field, name, **kw)


_ZC = _zero(None, "0", compat=True)  # trailing upstream-compatibility 0

#: execution families (isa.md §5-§6 groups); the core has one dispatch branch per family
FAMILIES: tuple[str, ...] = (
    "sint",
    "intmem",
    "sfp",
    "fpmem",
    "mapv",
    "vbin",
    "vunary",
    "shift",
    "reduce",
    "topk",
    "mat",
    "bmat",
    "wo",
    "dma",
    "creg",
    "loop",
)
#: V_TOPK policies (isa.md §6.2): (experts E, selections K) per policy value
TOPK_POLICIES: tuple[tuple[int, int], ...] = ((32, 4), (128, 8))
#: exp instructions clamp their argument to [-EXP_CLAMP, EXP_CLAMP] (isa.md §6.1, §6.3)
EXP_CLAMP = 88.0


def mac_table(M: int, B: int, H: int, BA: int) -> list[int]:
    """Matrix-unit MACs per opcode number (the ``macs`` expressions of the table) at this machine."""
    env = {"M": M, "B": B, "H": H, "BA": BA}
    out = [0] * (1 << FIELDS["opcode"].width)
    for i in INSTRUCTIONS:
        if i.macs:
            out[i.opcode] = int(eval(i.macs, {"__builtins__": {}}, env))  # noqa: S307 - table data, not input
    return out


#: registers an instruction can write that are not operands
SPECIAL_WRITES: tuple[str, ...] = ("SCALE", "STRIDE", "V_MASK", "LOOP")
#: memory spaces an address operand can point into
SPACES: tuple[str, ...] = ("vram", "mram", "fpsram", "intsram", "hbm")
#: operations within a family
ALUS: tuple[str, ...] = (
    "add",
    "sub",
    "mul",
    "max",
    "min",
    "exp",
    "reci",
    "sqrt",
    "addi",
    "lui",
    "load",
    "store",
    "sum",
    "mm",
    "tmm",
    "mv",
    "tmv",
    "bmm",
    "btmm",
    "bmv",
    "btmv",
    "prefetch_m",
    "prefetch_v",
    "store_v",
    "addr",
    "scale",
    "stride",
    "vmask",
    "start",
    "end",
    "break",
    "map",
    "shift",
    "topk",
)
_MASK = _flag("rs3", "rmask", optional=True)
_SPO = "SYSTOLIC_PROCESSING_OVERHEAD"


def _mat3(
    mn: str,
    op: int,
    a_name: str,
    a_field: str,
    b_name: str,
    b_field: str,
    lat: str,
    summary: str,
    alu: str,
    macs: str,
    rd_checked: bool = False,
) -> Instr:
    first = _zero("rd", "0", rule="IL-BRD") if rd_checked else _zero(None, "0")
    fam = "bmat" if alu.startswith("b") else "mat"
    sa, sb = ("mram", "vram") if a_name == "gp_mat" else ("vram", "mram")
    return Instr(
        mn,
        op,
        "M",
        "R3",
        (first, _gp(a_field, a_name, space=sa), _gp(b_field, b_name, space=sb)),
        lat,
        summary,
        family=fam,
        alu=alu,
        macs=macs,
    )


def _vv(mn: str, op: int, lat: str, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "V",
        "R4",
        (_gp("rd", "gp_d", space="vram"), _gp("rs1", "gp_a", space="vram"), _gp("rs2", "gp_b", space="vram"), _MASK),
        lat,
        summary,
        family="vbin",
        alu=alu,
    )


def _vf(mn: str, op: int, lat: str, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "V",
        "R4",
        (_gp("rd", "gp_d", space="vram"), _gp("rs1", "gp_a", space="vram"), _f("rs2", "f_b"), _MASK),
        lat,
        summary,
        family="vbin",
        alu=alu,
    )


def _vun(mn: str, op: int, lat: str, summary: str, alu: str, dst_kind: str = "gp", noop: bool = False) -> Instr:
    dst = _f("rd", "f_d") if dst_kind == "f" else _gp("rd", "gp_d", space="vram")
    fam = "reduce" if dst_kind == "f" else "vunary"
    return Instr(
        mn,
        op,
        "V",
        "RM2",
        (dst, _gp("rs1", "gp_a", space="vram"), _MASK, _ZC),
        lat,
        summary,
        noop_if_rd0=noop,
        family=fam,
        alu=alu,
        updates=("f_d",) if dst_kind == "f" else (),
    )


def _sfp3(mn: str, op: int, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "S",
        "R3",
        (_f("rd", "f_d"), _f("rs1", "f_a"), _f("rs2", "f_b")),
        "SCALAR_FP_BASIC_CYCLES",
        summary,
        noop_if_rd0=True,
        family="sfp",
        alu=alu,
        writes=("f_d",),
    )


def _sfp2(mn: str, op: int, lat: str, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "S",
        "R3",
        (_f("rd", "f_d"), _f("rs1", "f_a"), _ZC),
        lat,
        summary,
        noop_if_rd0=True,
        family="sfp",
        alu=alu,
        writes=("f_d",),
    )


def _sint3(mn: str, op: int, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "S",
        "R3",
        (_gp("rd", "gp_d"), _gp("rs1", "gp_a"), _gp("rs2", "gp_b")),
        "SCALAR_INT_BASIC_CYCLES",
        summary,
        family="sint",
        alu=alu,
        writes=("gp_d",),
    )


def _wo(mn: str, op: int, summary: str, alu: str) -> Instr:
    return Instr(
        mn,
        op,
        "M",
        "WO18",
        (_gp("rd", "gp_dst", space="vram"), _zero(None, "0", compat=True), Operand("imm18", "imm18", "imm18")),
        "1",
        summary,
        middle_zero_form=True,
        family="wo",
        alu=alu,
    )


def _dma(mn: str, op: int, dst: str, summary: str, alu: str, space: str) -> Instr:
    return Instr(
        mn,
        op,
        "H",
        "R5",
        (
            _gp("rd", dst, space=space),
            _gp("rs1", "gp_hoff", space="hbm"),
            _a("rs2", "a_base", space="hbm"),
            _flag("rs3", "rstride"),
            _flag("funct1", "prec"),
            _ZC,
        ),
        "HBM",
        summary,
        family="dma",
        alu=alu,
    )


def _creg(mn: str, op: int, summary: str, alu: str, reg: str) -> Instr:
    return Instr(mn, op, "C", "RD", (_gp("rd", "gp"),), "1", summary, family="creg", alu=alu, writes=(reg,))


_IMM18 = Operand("imm18", "imm18", "imm18")


def _upstream_zero_literal(instrs: tuple[Instr, ...]) -> tuple[Instr, ...]:
    """Mark the first operand of every instruction whose first operand is a GP register ``zero_literal``.

    Upstream compatibility: the upstream assembler reads a bare number in the first operand position as
    the register index (its other positions need a register name), and the upstream compiler writes a
    literal ``0`` there for gp0 (``M_BTMV 0, gp0, gpQ`` in its flash-attention decode template). The
    spelling is accepted with the same word as ``gp0`` and is still subject to the operand's ``forbid``
    list (``C_LOOP_START 0, n`` is rejected like ``C_LOOP_START gp0, n``).
    """
    out = []
    for i in instrs:
        ops = i.operands
        if ops and ops[0].kind == "gp":
            ops = (replace(ops[0], zero_literal=True),) + ops[1:]
        out.append(replace(i, operands=ops))
    return tuple(out)


#: The table (isa.md §4). Order: opcode number.
# the instruction table: one instruction per row (not reformatted)
# fmt: off
INSTRUCTIONS: tuple[Instr, ...] = _upstream_zero_literal((
    _mat3("M_MM", 0x01, "gp_mat", "rs1", "gp_vec", "rs2", f"{_SPO}+MLEN",
          "m_accum += X[B x M] @ TILE[:, c:c+B] (row-granular column block)", "mm", "B*B*M"),
    _mat3("M_TMM", 0x02, "gp_vec", "rs1", "gp_mat", "rs2", f"{_SPO}+MLEN",
          "m_accum += X @ TILE[r:r+B, :]^T (operand roles swapped)", "tmm", "B*B*M"),
    _mat3("M_BMM", 0x03, "gp_mat", "rs1", "gp_vec", "rs2", f"{_SPO}+MLEN",
          "hm_accum[b] += BMM_SCALE * X_b @ TILE[h:h+H, :] per head", "bmm", "BA*M*M*H", rd_checked=True),
    _mat3("M_BTMM", 0x04, "gp_mat", "rs1", "gp_vec", "rs2", f"{_SPO}+MLEN",
          "hm_accum[b] += BMM_SCALE * X_b @ TILE[:, h:h+H]^T per head", "btmm", "BA*M*M*H", rd_checked=True),
    _wo("M_BMM_WO", 0x05, "write hm_accum (BA*M rows, head-major) to VRAM and clear it", "bmm"),
    Instr("M_MM_WO", 0x06, "M", "I18", (_gp("rd", "gp_dst", space="vram"), _gp("rs1", "gp_stride"), _IMM18), "1",
          "write m_accum (B rows, pitch M*gp[stride]) to VRAM and clear it", family="wo", alu="mm"),
    _mat3("M_MV", 0x07, "gp_mat", "rs1", "gp_vec", "rs2", "MLEN",
          "v_accum += x @ TILE[:, c:c+B] (element-granular column offset)", "mv", "B*M"),
    _mat3("M_TMV", 0x08, "gp_mat", "rs1", "gp_vec", "rs2", "MLEN",
          "v_accum += x @ TILE[r:r+B, :]^T (row block)", "tmv", "B*M"),
    Instr("M_BMV", 0x09, "M", "R3", (_gp("rd", "gp_moff"), _gp("rs1", "gp_mat", space="mram"),
                                     _gp("rs2", "gp_vec", space="vram")),
          f"{_SPO}+1", "hv_accum[b] += BMM_SCALE * x_b @ TILE[h:h+H, :] per head", family="bmat", alu="bmv",
          macs="BA*M*H"),
    Instr("M_BTMV", 0x0A, "M", "R3", (_gp("rd", "gp_moff"), _gp("rs1", "gp_mat", space="mram"),
                                      _gp("rs2", "gp_vec", space="vram")),
          f"{_SPO}+1", "hv_accum[b] += BMM_SCALE * x_b @ TILE[:, h:h+H]^T per head", family="bmat", alu="btmv",
          macs="BA*M*H"),
    _wo("M_MV_WO", 0x0B, "write v_accum (B lanes) into a VRAM row and clear it", "mv"),
    _wo("M_BMV_WO", 0x0C, "write hv_accum (BA rows) to VRAM and clear it", "bmv"),
    _vv("V_ADD_VV", 0x0D, "VECTOR_ADD_CYCLES", "d = a + b", "add"),
    _vf("V_ADD_VF", 0x0E, "VECTOR_ADD_CYCLES", "d = a + f", "add"),
    _vv("V_SUB_VV", 0x0F, "VECTOR_ADD_CYCLES", "d = a - b", "sub"),
    Instr("V_SUB_VF", 0x10, "V", "R5", (_gp("rd", "gp_d", space="vram"), _gp("rs1", "gp_a", space="vram"),
                                        _f("rs2", "f_b"), _MASK, _flag("funct1", "rorder", optional=True)),
          "VECTOR_ADD_CYCLES", "d = a - f (rorder 0) or f - a (rorder != 0)", family="vbin", alu="sub"),
    _vv("V_MUL_VV", 0x11, "VECTOR_MUL_CYCLES", "d = a * b", "mul"),
    _vf("V_MUL_VF", 0x12, "VECTOR_MUL_CYCLES", "d = a * f", "mul"),
    _vun("V_EXP_V", 0x13, "VECTOR_EXP_CYCLES", "d = exp(a)", "exp"),
    _vun("V_RECI_V", 0x14, "VECTOR_RECI_CYCLES", "d = 1 / a", "reci"),
    _vun("V_RED_SUM", 0x15, "VECTOR_SUM_CYCLES", "f_d += sum of enabled lanes of a", "sum", "f", noop=True),
    _vun("V_RED_MAX", 0x16, "VECTOR_MAX_CYCLES", "f_d = max(f_d, enabled lanes of a)", "max", "f", noop=True),
    _sfp3("S_ADD_FP", 0x17, "f_d = f_a + f_b", "add"),
    _sfp3("S_SUB_FP", 0x18, "f_d = f_a - f_b", "sub"),
    _sfp3("S_MAX_FP", 0x19, "f_d = max(f_a, f_b)", "max"),
    _sfp3("S_MUL_FP", 0x1A, "f_d = f_a * f_b", "mul"),
    _sfp2("S_EXP_FP", 0x1B, "SCALAR_FP_EXP_CYCLES", "f_d = exp(f_a)", "exp"),
    _sfp2("S_RECI_FP", 0x1C, "SCALAR_FP_RECI_CYCLES", "f_d = 1 / f_a", "reci"),
    _sfp2("S_SQRT_FP", 0x1D, "SCALAR_FP_SQRT_CYCLES", "f_d = sqrt(f_a)", "sqrt"),
    Instr("S_LD_FP", 0x1E, "S", "I18", (_f("rd", "f_d"), _gp("rs1", "gp_base", space="fpsram"), _IMM18), "1",
          "f_d = FPSRAM[gp_base + imm]", family="fpmem", alu="load", writes=("f_d",)),
    Instr("S_ST_FP", 0x1F, "S", "I18", (_f("rd", "f_src"), _gp("rs1", "gp_base", space="fpsram"), _IMM18), "1",
          "FPSRAM[gp_base + imm] = f_src", family="fpmem", alu="store"),
    Instr("S_MAP_V_FP", 0x20, "S", "I18", (_gp("rd", "gp_vdst", space="vram"), _gp("rs1", "gp_base", space="fpsram"),
                                           _IMM18), "VLEN",
          "VROW(gp_vdst) = FPSRAM[gp_base + imm : +VLEN]", family="mapv", alu="map"),
    _sint3("S_ADD_INT", 0x21, "gp_d = gp_a + gp_b (mod 2^32)", "add"),
    Instr("S_ADDI_INT", 0x22, "S", "I18", (_gp("rd", "gp_d"), _gp("rs1", "gp_a"), _IMM18),
          "SCALAR_INT_BASIC_CYCLES", "gp_d = gp_a + imm18 (mod 2^32)", family="sint", alu="addi", writes=("gp_d",)),
    _sint3("S_SUB_INT", 0x23, "gp_d = gp_a - gp_b (mod 2^32)", "sub"),
    _sint3("S_MUL_INT", 0x24, "gp_d = gp_a * gp_b (mod 2^32)", "mul"),
    Instr("S_LUI_INT", 0x25, "S", "I22", (_gp("rd", "gp_d"), Operand("imm22", "imm22", "imm22")),
          "SCALAR_INT_BASIC_CYCLES", "gp_d = imm22 << 12 (mod 2^32)", family="sint", alu="lui", writes=("gp_d",)),
    Instr("S_LD_INT", 0x26, "S", "I18", (_gp("rd", "gp_d"), _gp("rs1", "gp_base", space="intsram"), _IMM18),
          "SCALAR_INT_BASIC_CYCLES", "gp_d = INTSRAM[gp_base + imm]", family="intmem", alu="load",
          writes=("gp_d",)),
    Instr("S_ST_INT", 0x27, "S", "I18", (_gp("rd", "gp_src"), _gp("rs1", "gp_base", space="intsram"), _IMM18),
          "SCALAR_INT_BASIC_CYCLES", "INTSRAM[gp_base + imm] = gp_src", family="intmem", alu="store"),
    _dma("H_PREFETCH_M", 0x28, "gp_mdst", "HBM rows -> MRAM tiles (exact f32)", "prefetch_m", "mram"),
    _dma("H_PREFETCH_V", 0x29, "gp_vdst", "HBM rows -> VRAM rows (bf16)", "prefetch_v", "vram"),
    _dma("H_STORE_V", 0x2A, "gp_vsrc", "VRAM rows -> HBM (MX / plain encode)", "store_v", "vram"),
    Instr("C_SET_ADDR_REG", 0x2B, "C", "R3", (_a("rd", "a_d"), _gp("rs1", "gp_hi"), _gp("rs2", "gp_lo")), "1",
          "a_d = gp_hi * 2^32 + gp_lo", family="creg", alu="addr", writes=("a_d",)),
    _creg("C_SET_SCALE_REG", 0x2C, "SCALE = gp", "scale", "SCALE"),
    _creg("C_SET_STRIDE_REG", 0x2D, "STRIDE = gp", "stride", "STRIDE"),
    _creg("C_SET_V_MASK_REG", 0x2E, "V_MASK = gp", "vmask", "V_MASK"),
    Instr("C_LOOP_START", 0x2F, "C", "I22",
          (_gp("rd", "gp_cnt", forbid=((0, "loop counter must not be gp0 (LP-GP0)"),), rule="LP-GP0"),
           Operand("imm22", "imm22", "count", forbid=((0, "loop count must not be 0 (LP-ZERO)"),), rule="LP-ZERO")),
          "1", "push a loop of imm22 iterations counted in gp_cnt", family="loop", alu="start", writes=("gp_cnt",)),
    Instr("C_LOOP_END", 0x30, "C", "RD", (_gp("rd", "gp_cnt"), _ZC), "1",
          "decrement gp_cnt and jump back to its loop start while > 0", family="loop", alu="end",
          updates=("gp_cnt",)),
    Instr("V_SHFT_V", 0x32, "V", "R3", (_gp("rd", "gp_d", space="vram"), _gp("rs1", "gp_a", space="vram"),
                                        _gp("rs2", "gp_shift")),
          "VECTOR_MUL_CYCLES", "d[j] = a[j - s] (shift toward higher lanes, zero fill)", family="shift", alu="shift"),
    Instr("C_BREAK", 0x34, "C", "OP", (_ZC, _ZC, _ZC), "1",
          "leave the innermost loop (continue after its C_LOOP_END)", all_compat_form=True, family="loop",
          alu="break", writes=("LOOP",)),
    _vf("V_MAX_VF", 0x35, "VECTOR_MAX_CYCLES", "d = max(a, f)", "max"),
    _vf("V_MIN_VF", 0x36, "VECTOR_MAX_CYCLES", "d = min(a, f)", "min"),
    Instr("V_TOPK", 0x37, "V", "R4", (_gp("rd", "gp_fpdst", space="fpsram"), _gp("rs1", "gp_logits", space="vram"),
                                      _gp("rs2", "gp_intdst", space="intsram"),
                                      _flag("rs3", "policy", max_value=1, rule="IL-TOPK")),
          "VECTOR_MAX_CYCLES*E", "top-K experts of E logits: softmax weights -> FPSRAM, indices -> INTSRAM",
          family="topk", alu="topk"),
))
# fmt: on

BY_MNEMONIC: MappingProxyType[str, Instr] = MappingProxyType({i.mnemonic: i for i in INSTRUCTIONS})
BY_OPCODE: MappingProxyType[int, Instr] = MappingProxyType({i.opcode: i for i in INSTRUCTIONS})

#: Opcode numbers that are deliberately not instructions, with the upstream name if any (isa.md §4).
NOT_INSTRUCTIONS: MappingProxyType[int, str] = MappingProxyType(
    {0x00: "", 0x31: "V_PS_V", 0x33: "C_HADAMARD_TRANSFORM", **{op: "" for op in range(0x38, 0x40)}}
)


def _self_check() -> None:
    """Structural invariants of the table (run at import: a broken table must not load)."""
    seen = set()
    for i in INSTRUCTIONS:
        assert i.opcode not in seen and i.opcode not in NOT_INSTRUCTIONS, i.mnemonic
        assert 0 < i.opcode <= FIELDS["opcode"].max
        seen.add(i.opcode)
        assert i.unit in UNITS and i.fmt in FORMATS
        for o in i.operands:
            assert o.kind in OPERAND_KINDS, (i.mnemonic, o)
            assert o.field is None or o.field in FORMATS[i.fmt], (i.mnemonic, o.field)
            assert o.space is None or o.space in SPACES, (i.mnemonic, o)
            checked = bool(o.forbid) or o.max_value is not None or (o.kind == "zero" and o.field is not None)
            assert checked == bool(o.rule), (i.mnemonic, o)
            assert not o.zero_literal or (o.kind == "gp" and o.field is not None and not o.compat), (i.mnemonic, o)
        assert i.family in FAMILIES and i.alu in ALUS, (i.mnemonic, i.family, i.alu)
        names = {o.name for o in i.operands}
        assert all(w in names or w in SPECIAL_WRITES for w in i.writes), (i.mnemonic, i.writes)
        assert all(w in names for w in i.updates) and not set(i.writes) & set(i.updates), i.mnemonic
        assert (i.macs != "") == (i.family in ("mat", "bmat")), i.mnemonic
        lengths = [len(f) for f in i.forms()]
        assert len(lengths) == len(set(lengths)), (i.mnemonic, lengths)
    assert len(seen) + len(NOT_INSTRUCTIONS) == 64


_self_check()
