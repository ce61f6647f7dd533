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

from isa.assembler import assemble
from isa.encoding import decode
from isa.program import Program
from isa.table import BY_OPCODE

U32 = 0xFFFFFFFF

_VV = {"V_ADD_VV", "V_SUB_VV", "V_MUL_VV"}
_V1 = {"V_ADD_VF", "V_SUB_VF", "V_MUL_VF", "V_MAX_VF", "V_MIN_VF", "V_EXP_V", "V_RECI_V", "V_SHFT_V"}
_VRED = {"V_RED_SUM", "V_RED_MAX"}


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


def trace(program, cfg, *, max_instructions: int = 50_000_000, int_sram=None, record_writes: bool = True
          ) -> Trace:
    prog = program if isinstance(program, Program) else assemble(str(program), "<trace>")
    M, V, B, H, BA = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    Pv = cfg.P_V
    loopmax = cfg.MAX_LOOP_INSTRUCTIONS
    words = prog.words
    n = len(words)
    dec = []
    for w in words:
        f = decode(int(w))                      # field positions from the opcode table
        mn = BY_OPCODE[f["opcode"]].mnemonic if f["opcode"] in BY_OPCODE else None
        dec.append((mn, f["rd"], f["rs1"], f["rs2"], f["rs3"], f["funct1"], f["imm18"], f["imm22"]))
    gpr = [0] * 16
    areg = [0] * 8
    scale, stride, vmask = 0, 1, 0
    ints = int_sram if int_sram is not None else {}
    stack: list[list[int]] = []          # [start_pc, reg, count]
    out = Trace()
    rows = out.vram_rows_written
    pc = 0
    dyn = 0

    def lint(kind: str, value: int, rule: str):
        out.lint.append((pc, prog.source[pc].text.strip(), kind, value, rule))

    def vrow(x: int, what: str):
        if x % V:
            lint(what, x, f"VRAM operand not a multiple of V={V}")

    def wrows(first_elem: int, count: int, step_rows: int = 1):
        if record_writes:
            r0 = first_elem // V
            for k in range(count):
                rows.add(r0 + k * step_rows)

    while pc < n:
        if dyn >= max_instructions:
            raise TraceError(f"more than {max_instructions} instructions")
        for rec in stack:
            rec[2] += 1
            if rec[2] > loopmax:
                raise TraceError(f"LP-RUNAWAY at pc {pc}: {prog.location(pc)}")
        mn, rd, rs1, rs2, rs3, f1, imm18, imm22 = dec[pc]
        if mn is None:
            raise TraceError(f"illegal opcode at pc {pc}")
        dyn += 1
        nxt = pc + 1
        if mn == "S_ADDI_INT":
            if rd:
                gpr[rd] = (gpr[rs1] + imm18) & U32
        elif mn == "S_ADD_INT":
            if rd:
                gpr[rd] = (gpr[rs1] + gpr[rs2]) & U32
        elif mn == "S_SUB_INT":
            if rd:
                gpr[rd] = (gpr[rs1] - gpr[rs2]) & U32
        elif mn == "S_MUL_INT":
            if rd:
                gpr[rd] = (gpr[rs1] * gpr[rs2]) & U32
        elif mn == "S_LUI_INT":
            if rd:
                gpr[rd] = (imm22 << 12) & U32
        elif mn == "S_LD_INT":
            if rd:
                gpr[rd] = int(ints.get(gpr[rs1] + imm18, 0)) & U32
        elif mn == "S_ST_INT":
            ints[gpr[rs1] + imm18] = gpr[rd]
        elif mn == "C_SET_ADDR_REG":
            areg[rd] = gpr[rs1] * (1 << 32) + gpr[rs2]
        elif mn == "C_SET_SCALE_REG":
            scale = gpr[rd]
        elif mn == "C_SET_STRIDE_REG":
            stride = gpr[rd]
        elif mn == "C_SET_V_MASK_REG":
            vmask = gpr[rd]
        elif mn == "C_LOOP_START":
            if rd == 0 or imm22 == 0:
                raise TraceError(f"bad C_LOOP_START at pc {pc}")
            gpr[rd] = imm22
            stack.append([pc, rd, 0])
        elif mn == "C_LOOP_END":
            k = len(stack) - 1
            while k >= 0 and stack[k][1] != rd:
                k -= 1
            if k < 0:
                raise TraceError(f"LP-NOMATCH at pc {pc}")
            rec = stack[k]
            out.max_loop_iteration = max(out.max_loop_iteration, rec[2])
            if gpr[rd] > 1:
                gpr[rd] -= 1
                rec[2] = 0
                nxt = rec[0] + 1
            else:
                gpr[rd] = 0
                del stack[k]
        elif mn == "C_BREAK":
            if not stack:
                raise TraceError(f"LP-BREAK at pc {pc}")
            rec = stack.pop()
            gpr[rec[1]] = 0
            e = rec[0] + 1
            while e < n and not (dec[e][0] == "C_LOOP_END" and dec[e][1] == rec[1]):
                e += 1
            if e >= n:
                raise TraceError(f"LP-BREAK at pc {pc}")
            nxt = e + 1
        # ---- record / lint the operands of the non-scalar instructions
        elif mn == "H_PREFETCH_M":
            out.prefetch_m.append((gpr[rs1], stride, scale, rs2))
            out.prefetch_m_full.append((gpr[rs1], stride, scale, rs2, gpr[rd], rs3, f1))
            if gpr[rd] % (M * M):
                lint("H_PREFETCH_M dst", gpr[rd], f"MRAM destination not a multiple of M*M={M * M}")
        elif mn in ("H_PREFETCH_V", "H_STORE_V"):
            out.prefetch_v.append((mn, gpr[rd], gpr[rs1], stride, scale, rs2, rs3, f1))
            vrow(gpr[rd], mn)
            if mn == "H_PREFETCH_V":
                wrows(gpr[rd], Pv)
        elif mn in _VV:
            vrow(gpr[rd], mn + " rd")
            vrow(gpr[rs1], mn + " rs1")
            vrow(gpr[rs2], mn + " rs2")
            wrows(gpr[rd], 1)
        elif mn in _V1:
            vrow(gpr[rd], mn + " rd")
            vrow(gpr[rs1], mn + " rs1")
            wrows(gpr[rd], 1)
        elif mn in _VRED:
            if rd:
                vrow(gpr[rs1], mn + " rs1")
        elif mn in ("M_MM", "M_TMM"):
            mat, vec = (gpr[rs1], gpr[rs2]) if mn == "M_MM" else (gpr[rs2], gpr[rs1])
            vrow(vec, mn + " vec")
            off = mat % (M * M)
            if off % M or (off // M) % B:
                lint(mn + " mat", mat, "matrix offset not row-granular (AL-MM)")
        elif mn in ("M_MV", "M_TMV"):
            mat, vec = gpr[rs1], gpr[rs2]
            vrow(vec, mn + " vec")
            off = mat % (M * M)
            if mn == "M_MV" and (off % B or off >= M):
                lint(mn + " mat", mat, "AL-MV")
            if mn == "M_TMV" and off % (B * M):
                lint(mn + " mat", mat, "AL-TMV")
        elif mn in ("M_BMM", "M_BTMM", "M_BMV", "M_BTMV"):
            mat = gpr[rs1] + (gpr[rd] if mn in ("M_BMV", "M_BTMV") else 0)
            vrow(gpr[rs2], mn + " vec")
            off = mat % (M * M)
            if off % H or off >= M:
                lint(mn + " mat", mat, "AL-BHEAD")
        elif mn in ("M_MM_WO", "M_MV_WO"):
            addr = gpr[rd] + imm18
            vo = addr % M
            if vo % B:
                lint(mn, addr, "AL-WO")
            if mn == "M_MM_WO":
                s = 1 if rs1 == 0 else gpr[rs1]
                wrows(addr - vo, B, s)
            else:
                wrows(addr - vo, 1)
        elif mn in ("M_BMM_WO", "M_BMV_WO"):
            addr = gpr[rd] + imm18
            if addr % M:
                lint(mn, addr, "AL-BWO")
            wrows(addr, BA * M if mn == "M_BMM_WO" else BA, M // V if mn == "M_BMV_WO" else 1)
        elif mn == "S_MAP_V_FP":
            vrow(gpr[rd], mn)
            wrows(gpr[rd], 1)
        pc = nxt
    out.dynamic = dyn
    out.final_gp = gpr
    out.areg = areg
    return out
