"""Random PLENA programs for the fuzz campaigns: every opcode (and the non-instruction opcodes), random
fields, biased so that programs often get past the first alignment check (small immediates, matching
loop ends, legal register numbers most of the time) but still hit every fault class.

``gen_program(r, n)`` takes any ``random.Random``-like object ``r`` (a seeded ``random.Random`` or
hypothesis' ``st.randoms()``), so the same generator serves the seeded corpus and the shrinking search.
"""

from __future__ import annotations

from isa.table import FIELDS, INSTRUCTIONS, NOT_INSTRUCTIONS

_OPCODES = [i.opcode for i in INSTRUCTIONS]
_BAD_OPCODES = sorted(NOT_INSTRUCTIONS)
_BY_OP = {i.opcode: i for i in INSTRUCTIONS}
_LOOP_START = next(i.opcode for i in INSTRUCTIONS if i.mnemonic == "C_LOOP_START")
_LOOP_END = next(i.opcode for i in INSTRUCTIONS if i.mnemonic == "C_LOOP_END")
_BREAK = next(i.opcode for i in INSTRUCTIONS if i.mnemonic == "C_BREAK")
_U32 = 0xFFFFFFFF


def _set(word: int, name: str, value: int) -> int:
    f = FIELDS[name]
    return (word & ~f.mask) | ((value & f.max) << f.shift)


def _imm18(r, V: int) -> int:
    k = r.randrange(20)
    if k < 7:
        return 0
    if k < 10:
        return r.randrange(8)
    if k < 16:
        return V * r.randrange(4)
    if k < 19:
        return r.randrange(1024)
    return r.randrange(1 << 18)


def gen_word(r, open_loops: list[int], V: int = 16, tame: bool = False) -> int:
    """One random word; ``open_loops`` (counter registers of loops started so far) is updated.

    ``tame``: only instructions, legal register fields, mask/stride/precision flags 0, immediates 0 or
    small multiples of V -- so that programs on a tame state run deeper before their first fault."""
    k = r.randrange(100) if not tame else 50
    if k < 3:
        return r.randrange(1 << 32)  # anything at all
    if k < 6:
        return r.choice(_BAD_OPCODES) | (r.randrange(1 << 26) << 6)
    if k < 12 and open_loops:
        op = r.choice((_LOOP_END, _LOOP_END, _LOOP_END, _BREAK))
    else:
        op = r.choice(_OPCODES)
    instr = _BY_OP[op]
    word = op
    if not tame and r.randrange(10) == 0:  # garbage in every bit; the fields below overwrite
        word |= r.randrange(1 << 26) << 6
    for o in instr.operands:
        if o.field is None:
            continue
        if o.kind == "gp":
            v = r.randrange(16) if r.randrange(4) else r.randrange(4)
        elif o.kind in ("f", "a"):
            v = r.randrange(8) if tame or r.randrange(20) else r.randrange(16)
        elif o.kind == "flag":
            v = r.choice((0, 0, 0, 1, r.randrange(16))) if not tame else r.choice((0, 0, 0, 1))
        elif o.kind == "imm18":
            v = _imm18(r, V) if not tame else r.choice((0, 0, 0, V, 2 * V))
        elif o.kind == "imm22":
            v = (
                r.choice((1, 2, 3, 4, r.randrange(1, 64), r.randrange(1 << 22), 0))
                if op == _LOOP_START
                else r.randrange(1 << 22)
            )
        else:  # "zero" placeholder encoded in a field (M_BMM rd): mostly 0
            v = 0 if tame or r.randrange(8) else r.randrange(16)
        word = _set(word, o.field, v)
    if op == _LOOP_START:
        open_loops.append((word >> FIELDS["rd"].shift) & FIELDS["rd"].max)
    elif op == _LOOP_END and open_loops and r.randrange(5):
        word = _set(word, "rd", open_loops.pop())
    return word & _U32


def _loop_start(reg: int, count: int) -> int:
    return _set(_set(_LOOP_START, "rd", reg), "imm22", count)


def gen_program(r, n: int, V: int = 16, tame: bool = False) -> list[int]:
    """``n`` random words; one program in six is a loop nest around random bodies (outer and inner
    counts up to 2^22 - 1, so budgets and MAX_LOOP_INSTRUCTIONS are reached)."""
    open_loops: list[int] = []
    if n >= 4 and r.randrange(6) == 0:
        outer, inner = r.sample(range(1, 16), 2)
        a, b = r.randrange(n - 3), r.randrange(n - 3)
        a, b = min(a, b), max(a, b)
        big = (1, 2, 3, 7, 100, (1 << 22) - 1)
        words = [_loop_start(outer, r.choice(big))]
        words += [gen_word(r, open_loops, V, True) for _ in range(a)]
        words.append(_loop_start(inner, r.choice(big)))
        words += [gen_word(r, open_loops, V, True) for _ in range(b - a)]
        words.append(_set(_LOOP_END, "rd", inner))
        words += [gen_word(r, open_loops, V, True) for _ in range(n - 4 - b)]
        words.append(_set(_LOOP_END, "rd", outer))
        return words
    words = [gen_word(r, open_loops, V, tame) for _ in range(n)]
    while open_loops and r.randrange(3):
        words.append(_set(_LOOP_END, "rd", open_loops.pop()))
    return words
