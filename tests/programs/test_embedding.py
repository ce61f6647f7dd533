"""embedding generator structure (kernels.md §2.9)."""

from __future__ import annotations

import pytest

from programs.common import rp  # noqa: E402
from programs.embedding import emit_embedding, plan_embedding  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make_emb(cfg=CFG, gp=ku.GP, fp=ku.FP, T=7, hidden=128, vocab=100):
    V, Pv = cfg.VLEN, cfg.P_V
    pitch = rp(cfg, T)
    tab = ku.tensor(0, vocab + Pv - 1, hidden)
    plan = plan_embedding(
        cfg,
        T=T,
        vocab=vocab,
        hidden=hidden,
        table=tab,
        ids_base=16,
        out_base=0,
        land_base=((hidden // V) * pitch + 1) * V,
    )
    return ku.emit_text(emit_embedding, plan, gp, fp)


@pytest.mark.parametrize("T", [1, 4, 7, 33])
@pytest.mark.parametrize("hidden", [64, 128, 256])
def test_embedding_assembles(T, hidden):
    text = make_emb(T=T, hidden=hidden)
    ku.check_assembles(text)
    ku.check_begin_end(text, "embedding")
    # ids are read at run time (S_LD_INT), rows are copied by x 1.0 (never + 0.0)
    assert "S_LD_INT" in text and "V_ADD_VF" not in text


def test_embedding_structure():
    ku.check_registers(make_emb)
    ku.check_deterministic_and_hooks(make_emb, {"embedding_direct_prefetch": {}})
    with pytest.raises(ValueError, match="hidden=100"):
        make_emb(hidden=100)
    with pytest.raises(ValueError, match="vocab\\*hidden\\*eb"):
        make_emb(vocab=1 << 26, hidden=128)
    with pytest.raises(ValueError, match="table.alloc_elems"):
        plan_embedding(
            CFG, T=4, vocab=100, hidden=64, table=ku.tensor(0, 100, 64), ids_base=0, out_base=0, land_base=64 * 64
        )
    with pytest.raises(ValueError, match="ids_base=1020"):
        plan_embedding(
            CFG, T=7, vocab=100, hidden=64, table=ku.tensor(0, 103, 64), ids_base=1020, out_base=0, land_base=64 * 64
        )
