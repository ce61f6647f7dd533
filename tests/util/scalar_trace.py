"""A small scalar interpreter for generator unit tests without the simulator (kernels.md §6.4).

It executes only the scalar-integer and control instructions -- ``S_*_INT`` (``S_LD_INT`` reads an INT
SRAM model that starts at zero), ``C_LOOP_START``/``C_LOOP_END``/``C_BREAK`` and ``C_SET_*`` -- with the
semantics of isa.md §6.4/§6.6 (u32 wrap, gp0 hard-wired, innermost-matching loop records, runaway guard
counts).  Every other instruction is a no-op for the register state, but the tracer records what its
register operands hold, so a test can check the addresses a generator really produces:

* ``prefetch_m``: for every ``H_PREFETCH_M`` the tuple ``(gp[rs1], STRIDE, SCALE, areg)`` (§6.4), and in
  ``prefetch_m_full`` also ``(gp[rd], rstride, prec)``;
* ``lint``: alignment problems of VRAM row operands (multiple of V), MRAM prefetch destinations (multiple
  of M²) and matrix operands (the AL-MM/AL-MV/AL-TMV/AL-BHEAD/AL-WO/AL-BWO rules of isa.md §8);
* ``vram_rows_written``: every VRAM row any instruction writes (V ops, ``*_WO`` rows, ``H_PREFETCH_V``);
* ``max_loop_iteration``: the largest per-iteration dynamic count any loop record reached;
* ``dynamic``: retired instructions.

Usage: ``tr = trace(program_text_or_Program, cfg)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from isa.assembler import assemble
from isa.encoding import decode
from isa.program import Program
from isa.table import BY_OPCODE, INSTRUCTIONS

U32 = 0xFFFFFFFF

# vector instructions by how many VRAM rows they read (from the table's families and operand kinds)
_VV = {i.mnemonic for i in INSTRUCTIONS if i.family == "vbin" and i.operands[2].kind == "gp"}
_V1 = {
    i.mnemonic
    for i in INSTRUCTIONS
    if i.family in ("vunary", "shift") or (i.family == "vbin" and i.mnemonic not in _VV)
}
_VRED = {i.mnemonic for i in INSTRUCTIONS if i.family == "reduce"}


@dataclass
class Trace:
    dynamic: int = 0
    prefetch_m: list = field(default_factory=list)
    prefetch_m_full: list = field(default_factory=list)
    prefetch_v: list = field(default_factory=list)
    lint: list = field(default_factory=list)
    vram_rows_written: set = field(default_factory=set)
    max_loop_iteration: int = 0
    final_gp: list = field(default_factory=list)
    areg: list = field(default_factory=list)


class TraceError(RuntimeError):
    pass


class _Dec(NamedTuple):
    """One decoded word: its mnemonic (None: not an instruction) and operand fields."""

    mn: str | None
    rd: int
    rs1: int
    rs2: int
    rs3: int
    f1: int
    imm18: int
    imm22: int


def _decode_all(words) -> list[_Dec]:
    dec = []
    for w in words:
        f = decode(int(w))  # field positions from the opcode table
        mn = BY_OPCODE[f["opcode"]].mnemonic if f["opcode"] in BY_OPCODE else None
        dec.append(_Dec(mn, f["rd"], f["rs1"], f["rs2"], f["rs3"], f["funct1"], f["imm18"], f["imm22"]))
    return dec


#: the register-to-register scalar ALU: mnemonic -> gp[rd] before the u32 wrap (gp0 is never written)
_ALU = {
    "S_ADDI_INT": lambda g, d: g[d.rs1] + d.imm18,
    "S_ADD_INT": lambda g, d: g[d.rs1] + g[d.rs2],
    "S_SUB_INT": lambda g, d: g[d.rs1] - g[d.rs2],
    "S_MUL_INT": lambda g, d: g[d.rs1] * g[d.rs2],
    "S_LUI_INT": lambda g, d: d.imm22 << 12,
}


class _Tracer:
    """The interpreter state of one :func:`trace`; each ``_op_*`` method executes one instruction kind and
    returns the next pc (None: the following instruction)."""

    def __init__(self, prog: Program, cfg, max_instructions: int, int_sram, record_writes: bool):
        self.prog = prog
        self.M, self.V, self.B, self.H, self.BA = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
        self.Pv = cfg.P_V
        self.loopmax = cfg.MAX_LOOP_INSTRUCTIONS
        self.max_instructions = max_instructions
        self.record_writes = record_writes
        self.dec = _decode_all(prog.words)
        self.n = len(self.dec)
        self.gpr = [0] * 16
        self.areg = [0] * 8
        self.scale, self.stride, self.vmask = 0, 1, 0
        self.ints = int_sram if int_sram is not None else {}
        self.stack: list[list[int]] = []  # [start_pc, reg, count]
        self.out = Trace()
        self.rows = self.out.vram_rows_written
        self.pc = 0
        self.dyn = 0

    # ------------------------------------------------------------------ recording helpers

    def lint(self, kind: str, value: int, rule: str):
        self.out.lint.append((self.pc, self.prog.source[self.pc].text.strip(), kind, value, rule))

    def vrow(self, x: int, what: str):
        if x % self.V:
            self.lint(what, x, f"VRAM operand not a multiple of V={self.V}")

    def wrows(self, first_elem: int, count: int, step_rows: int = 1):
        if self.record_writes:
            r0 = first_elem // self.V
            for k in range(count):
                self.rows.add(r0 + k * step_rows)

    # ------------------------------------------------------------------ the loop

    def run(self) -> Trace:
        while self.pc < self.n:
            if self.dyn >= self.max_instructions:
                raise TraceError(f"more than {self.max_instructions} instructions")
            for rec in self.stack:
                rec[2] += 1
                if rec[2] > self.loopmax:
                    raise TraceError(f"LP-RUNAWAY at pc {self.pc}: {self.prog.location(self.pc)}")
            d = self.dec[self.pc]
            if d.mn is None:
                raise TraceError(f"illegal opcode at pc {self.pc}")
            self.dyn += 1
            op = _OPS.get(d.mn)
            nxt = op(self, d) if op is not None else None
            self.pc = self.pc + 1 if nxt is None else nxt
        self.out.dynamic = self.dyn
        self.out.final_gp = self.gpr
        self.out.areg = self.areg
        return self.out

    # ------------------------------------------------------------------ scalar and control instructions

    def _op_alu(self, d: _Dec):
        if d.rd:
            self.gpr[d.rd] = _ALU[d.mn](self.gpr, d) & U32

    def _op_ld_int(self, d: _Dec):
        if d.rd:
            self.gpr[d.rd] = int(self.ints.get(self.gpr[d.rs1] + d.imm18, 0)) & U32

    def _op_st_int(self, d: _Dec):
        self.ints[self.gpr[d.rs1] + d.imm18] = self.gpr[d.rd]

    def _op_set_addr(self, d: _Dec):
        self.areg[d.rd] = self.gpr[d.rs1] * (1 << 32) + self.gpr[d.rs2]

    def _op_set_scale(self, d: _Dec):
        self.scale = self.gpr[d.rd]

    def _op_set_stride(self, d: _Dec):
        self.stride = self.gpr[d.rd]

    def _op_set_vmask(self, d: _Dec):
        self.vmask = self.gpr[d.rd]

    def _op_loop_start(self, d: _Dec):
        if d.rd == 0 or d.imm22 == 0:
            raise TraceError(f"bad C_LOOP_START at pc {self.pc}")
        self.gpr[d.rd] = d.imm22
        self.stack.append([self.pc, d.rd, 0])

    def _op_loop_end(self, d: _Dec):
        stack, gpr, rd = self.stack, self.gpr, d.rd
        k = len(stack) - 1
        while k >= 0 and stack[k][1] != rd:
            k -= 1
        if k < 0:
            raise TraceError(f"LP-NOMATCH at pc {self.pc}")
        rec = stack[k]
        self.out.max_loop_iteration = max(self.out.max_loop_iteration, rec[2])
        if gpr[rd] > 1:
            gpr[rd] -= 1
            rec[2] = 0
            return rec[0] + 1
        gpr[rd] = 0
        del stack[k]
        return None

    def _op_break(self, d: _Dec):
        if not self.stack:
            raise TraceError(f"LP-BREAK at pc {self.pc}")
        rec = self.stack.pop()
        self.gpr[rec[1]] = 0
        e = rec[0] + 1
        while e < self.n and not (self.dec[e].mn == "C_LOOP_END" and self.dec[e].rd == rec[1]):
            e += 1
        if e >= self.n:
            raise TraceError(f"LP-BREAK at pc {self.pc}")
        return e + 1

    # ------------------------------------------------------------------ record / lint the operands of the rest

    def _op_prefetch_m(self, d: _Dec):
        gpr, M = self.gpr, self.M
        self.out.prefetch_m.append((gpr[d.rs1], self.stride, self.scale, d.rs2))
        self.out.prefetch_m_full.append((gpr[d.rs1], self.stride, self.scale, d.rs2, gpr[d.rd], d.rs3, d.f1))
        if gpr[d.rd] % (M * M):
            self.lint("H_PREFETCH_M dst", gpr[d.rd], f"MRAM destination not a multiple of M*M={M * M}")

    def _op_vector_dma(self, d: _Dec):
        gpr, mn = self.gpr, d.mn
        self.out.prefetch_v.append((mn, gpr[d.rd], gpr[d.rs1], self.stride, self.scale, d.rs2, d.rs3, d.f1))
        self.vrow(gpr[d.rd], mn)
        if mn == "H_PREFETCH_V":
            self.wrows(gpr[d.rd], self.Pv)

    def _op_vv(self, d: _Dec):
        gpr, mn = self.gpr, d.mn
        self.vrow(gpr[d.rd], mn + " rd")
        self.vrow(gpr[d.rs1], mn + " rs1")
        self.vrow(gpr[d.rs2], mn + " rs2")
        self.wrows(gpr[d.rd], 1)

    def _op_v1(self, d: _Dec):
        gpr, mn = self.gpr, d.mn
        self.vrow(gpr[d.rd], mn + " rd")
        self.vrow(gpr[d.rs1], mn + " rs1")
        self.wrows(gpr[d.rd], 1)

    def _op_vred(self, d: _Dec):
        if d.rd:
            self.vrow(self.gpr[d.rs1], d.mn + " rs1")

    def _op_mm(self, d: _Dec):
        gpr, mn, M, B = self.gpr, d.mn, self.M, self.B
        mat, vec = (gpr[d.rs1], gpr[d.rs2]) if mn == "M_MM" else (gpr[d.rs2], gpr[d.rs1])
        self.vrow(vec, mn + " vec")
        off = mat % (M * M)
        if off % M or (off // M) % B:
            self.lint(mn + " mat", mat, "matrix offset not row-granular (AL-MM)")

    def _op_mv(self, d: _Dec):
        gpr, mn, M, B = self.gpr, d.mn, self.M, self.B
        mat, vec = gpr[d.rs1], gpr[d.rs2]
        self.vrow(vec, mn + " vec")
        off = mat % (M * M)
        if mn == "M_MV" and (off % B or off >= M):
            self.lint(mn + " mat", mat, "AL-MV")
        if mn == "M_TMV" and off % (B * M):
            self.lint(mn + " mat", mat, "AL-TMV")

    def _op_bhead(self, d: _Dec):
        gpr, mn, M = self.gpr, d.mn, self.M
        mat = gpr[d.rs1] + (gpr[d.rd] if mn in ("M_BMV", "M_BTMV") else 0)
        self.vrow(gpr[d.rs2], mn + " vec")
        off = mat % (M * M)
        if off % self.H or off >= M:
            self.lint(mn + " mat", mat, "AL-BHEAD")

    def _op_wo(self, d: _Dec):
        mn, M, B = d.mn, self.M, self.B
        addr = self.gpr[d.rd] + d.imm18
        vo = addr % M
        if vo % B:
            self.lint(mn, addr, "AL-WO")
        if mn == "M_MM_WO":
            s = 1 if d.rs1 == 0 else self.gpr[d.rs1]
            self.wrows(addr - vo, B, s)
        else:
            self.wrows(addr - vo, 1)

    def _op_bwo(self, d: _Dec):
        mn, M = d.mn, self.M
        addr = self.gpr[d.rd] + d.imm18
        if addr % M:
            self.lint(mn, addr, "AL-BWO")
        self.wrows(addr, self.BA * M if mn == "M_BMM_WO" else self.BA, M // self.V if mn == "M_BMV_WO" else 1)

    def _op_map_v(self, d: _Dec):
        self.vrow(self.gpr[d.rd], d.mn)
        self.wrows(self.gpr[d.rd], 1)


#: mnemonic -> its ``_Tracer`` method; every other instruction is a no-op here
_OPS = {
    **dict.fromkeys(_ALU, _Tracer._op_alu),
    "S_LD_INT": _Tracer._op_ld_int,
    "S_ST_INT": _Tracer._op_st_int,
    "C_SET_ADDR_REG": _Tracer._op_set_addr,
    "C_SET_SCALE_REG": _Tracer._op_set_scale,
    "C_SET_STRIDE_REG": _Tracer._op_set_stride,
    "C_SET_V_MASK_REG": _Tracer._op_set_vmask,
    "C_LOOP_START": _Tracer._op_loop_start,
    "C_LOOP_END": _Tracer._op_loop_end,
    "C_BREAK": _Tracer._op_break,
    "H_PREFETCH_M": _Tracer._op_prefetch_m,
    "H_PREFETCH_V": _Tracer._op_vector_dma,
    "H_STORE_V": _Tracer._op_vector_dma,
    **dict.fromkeys(_VV, _Tracer._op_vv),
    **dict.fromkeys(_V1, _Tracer._op_v1),
    **dict.fromkeys(_VRED, _Tracer._op_vred),
    "M_MM": _Tracer._op_mm,
    "M_TMM": _Tracer._op_mm,
    "M_MV": _Tracer._op_mv,
    "M_TMV": _Tracer._op_mv,
    **dict.fromkeys(("M_BMM", "M_BTMM", "M_BMV", "M_BTMV"), _Tracer._op_bhead),
    "M_MM_WO": _Tracer._op_wo,
    "M_MV_WO": _Tracer._op_wo,
    "M_BMM_WO": _Tracer._op_bwo,
    "M_BMV_WO": _Tracer._op_bwo,
    "S_MAP_V_FP": _Tracer._op_map_v,
}


def trace(program, cfg, *, max_instructions: int = 50_000_000, int_sram=None, record_writes: bool = True) -> Trace:
    prog = program if isinstance(program, Program) else assemble(str(program), "<trace>")
    return _Tracer(prog, cfg, max_instructions, int_sram, record_writes).run()
