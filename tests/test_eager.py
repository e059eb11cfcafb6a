"""Eager PyTorch elementwise traffic (model.eager) against hand counts, and which rows validate runs eager."""

import pytest
import runs_rules

from jctopt.model import compute as C
from jctopt.model import eager as Ea
from jctopt.model import flops as Fl


def _llama3_8b(config, *extra):
    return config("model=llama3_8b", "gpu=h100_sxm", "layout=single_node", "layout.tp=1", "training.global_batch=8",
                  "training.micro_batch=1", *extra)


def test_extra_bytes_of_llama3_8b_by_hand(config):
    """Llama 3 8B at tp 1, per token and layer, forward: two RMSNorms 2 x 32 x 4096 = 262,144,
    SwiGLU 2 x 14,336 = 28,672, RoPE on 32 query and 8 key heads of 128: 16 x 40 x 128 = 81,920;
    372,736 bytes eager, none fused."""
    eager = _llama3_8b(config, "training.fused_elementwise=false")
    extra = Ea.extra_forward_bytes_per_token(eager.model, eager.train, 1.0, 1.0, Fl.mlp_width_per_token(eager.model))
    assert float(extra) == pytest.approx(2 * 32 * 4096 + 2 * 14336 + 16 * 40 * 128, rel=1e-12)
    fused = _llama3_8b(config)
    assert float(Ea.extra_forward_bytes_per_token(fused.model, fused.train, 1.0, 1.0, 14336.0)) == 0.0


def test_tensor_parallel_splits_the_extra_traffic(config):
    """At tp 4 with sequence parallelism (layer_times' sp_div = tp) every term is split four ways."""
    cfg = _llama3_8b(config, "training.fused_elementwise=false", "training.seq_parallel=true")
    one = float(Ea.extra_forward_bytes_per_token(cfg.model, cfg.train, 1.0, 1.0, 14336.0))
    four = float(Ea.extra_forward_bytes_per_token(cfg.model, cfg.train, 4.0, 4.0, 14336.0))
    assert four == pytest.approx(one / 4, rel=1e-12)


def test_layer_elementwise_time_grows_by_the_extra_bytes_at_hbm_rate(config):
    """layer_times' memory-bound part: 8192 tokens x 372,736 bytes more at the achieved HBM rate."""
    fused, eager = _llama3_8b(config), _llama3_8b(config, "training.fused_elementwise=false")
    _, _, elem_fused = C.layer_times(fused.model, fused.gpu, fused.train, 1.0, 1.0)
    _, _, elem_eager = C.layer_times(eager.model, eager.gpu, eager.train, 1.0, 1.0)
    expected = 8192 * 372_736 / float(C.hbm_rate(fused.gpu))
    assert float(elem_eager - elem_fused) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("row, eager", [
    ({"source": "pytorch/torchtitan benchmarks/x.md", "notes": "FSDP 8, compile=no"}, True),
    ({"source": "pytorch/torchtitan docs/performance.md", "notes": "selective op AC, compile off (toml)"}, True),
    ({"source": "pytorch/torchtitan benchmarks/x.md", "notes": "FSDP 8, compile=yes"}, False),
    ({"source": "pytorch/torchtitan benchmarks/x.md", "notes": "compile + Float8"}, False),
    ({"source": 'PyTorch blog 2024-03-13 "Maximizing training throughput using PyTorch FSDP", Table 1'}, True),
    ({"source": "NeMo 24.07 performance_summary.md", "notes": "compile=no"}, False),
])
def test_rows_run_eager_where_their_stack_did(row, eager):
    assert runs_rules._eager_elementwise(row) is eager
