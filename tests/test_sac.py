"""torchtitan's per-op selective checkpointing (model.sac): what it recomputes, by hand, and which rows
validate reads as running it."""

import prose
import pytest

from jctopt.config import ConfigError, to_config
from jctopt.job.jct import estimate
from jctopt.model import comm as K
from jctopt.model import flops as Fl
from jctopt.model import memory as Mem
from jctopt.model import recompute_modules as Rm
from jctopt.model import sac as Sac


def _llama3_8b(config, *extra):
    return config("model=llama3_8b", "gpu=h100_sxm", "layout=single_node", "training.global_batch=8",
                  "training.micro_batch=1", "training.recompute=selective", *extra)


def test_every_second_matmul_of_llama3_8b_by_hand(config):
    """Llama 3 8B (h 4096, 8 KV heads of 128, SwiGLU width 14,336): wq 4096 x 4096, wk and wv
    4096 x 1024, wo 4096 x 4096, w1, w3, w2 4096 x 14,336; recomputed wk + wo + w3 =
    1024 + 4096 + 14,336 = 19,456 of 4096 + 2 x 1024 + 4096 + 3 x 14,336 = 53,248 (x 4096)."""
    m = _llama3_8b(config).model
    share = Sac.recomputed_matmul_share(m, Fl.mlp_width_per_token(m))
    assert float(share) == pytest.approx(19_456 / 53_248, rel=1e-12)


def test_gelu_mlp_recomputes_its_second_matmul(config):
    """GPT-3 175B (h 12,288, 4h MLP, no GQA): wk (h x h) + wo (h x h) + w2 (4h x h) recomputed,
    6 of the 12 h^2 of a layer: one half."""
    m = config("model=gpt3_175b").model
    assert float(Sac.recomputed_matmul_share(m, Fl.mlp_width_per_token(m))) == pytest.approx(0.5, rel=1e-12)


def test_per_op_recompute_repeats_matmuls_and_pointwise_ops_not_the_core(config):
    """Selective recompute repeats the attention core under Megatron's reading and share x GEMMs +
    the pointwise ops under torchtitan's; full recompute repeats all of it either way."""
    core_t = _llama3_8b(config).train
    per_op = _llama3_8b(config, "training.selective_ac=op")
    m, op_t = per_op.model, per_op.train
    share = 19_456 / 53_248
    gemm, core, elem = 3.0, 5.0, 7.0
    # Megatron's modules (model.recompute_modules): by default the attention core alone
    modules = Rm.ModuleParts(core_attn=core, mla_up_proj=11.0, layernorm=13.0, moe_act=17.0, mlp=19.0, moe=23.0,
                             shared_experts=29.0)
    assert float(Fl.recompute_time(m, core_t, gemm, core, elem, modules)) == pytest.approx(core)
    assert float(Fl.recompute_time(m, op_t, gemm, core, elem, modules)) == pytest.approx(share * gemm + elem, rel=1e-12)
    full = _llama3_8b(config, "training.selective_ac=op", "training.recompute=full").train
    assert float(Fl.recompute_time(m, full, gemm, core, elem, modules)) == pytest.approx(gemm + core + elem)


def test_per_op_recompute_gathers_the_sequence_parallel_inputs_again(config):
    """At tp 8 with sequence parallelism the per-op policy keeps the reduce-scatters and redoes
    the two all-gathers of every layer's forward: half an all-reduce of the layer's activations
    each, one all-reduce per layer in all, 32 per micro-batch (Llama 3 8B, one stage)."""
    args = ("layout.tp=8", "training.seq_parallel=true", "training.tp_async_backward=true",
            "training.mp_comm_overlap=false")
    core, op = _llama3_8b(config, *args), _llama3_8b(config, *args, "training.selective_ac=op")
    act_bytes = 2.0 * 8192 * 4096
    tp_ar = K.all_reduce(act_bytes, 8.0, 1.0, core.gpu, core.fabric, core.cluster)
    n_micro = 8  # global batch 8, one data-parallel replica, micro-batch 1
    extra = float(estimate(op).tp_comm_s) - float(estimate(core).tp_comm_s)
    assert extra == pytest.approx(n_micro * 32 * float(tp_ar), rel=1e-9)


def test_unknown_selective_policy_is_refused_by_key(compose):
    with pytest.raises(ConfigError, match=r"training.selective_ac"):
        to_config(compose("training.selective_ac=layer"))


ROW = {"id": "r", "model": "Llama 3 8B", "layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32,
       "kv_heads": 8, "seq_len": 8192, "vocab": 128256, "gpu": "h100_sxm", "precision": "bf16", "num_gpus": 8,
       "tp": 1, "pp": 1, "cp": 1, "global_batch": 16, "recompute": "selective"}


@pytest.mark.parametrize("source, notes, policy", [
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md", "selective AC", "op"),
    ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md", "per-op SAC", "op"),
    ("pytorch/torchtitan docs/performance.md", 'AC "selective layer"', "core_attention"),
    ("pytorch/torchtitan docs/performance.md", "selective_ac_option = 2", "core_attention"),
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "selective", "core_attention"),
])
def test_torchtitan_rows_run_its_per_op_policy(compose, source, notes, policy):
    cfg, _ = prose.row_config(compose("task=validate"), dict(ROW, source=source, notes=notes))
    assert cfg.training.selective_ac == policy


def test_the_policy_is_moot_under_full_recompute(compose):
    """Full recompute repeats the whole layer: a torchtitan row keeps its stack's per-op policy,
    which predicts the same step and memory as the attention-core one."""
    row = dict(ROW, source="pytorch/torchtitan benchmarks/x.md", notes="full AC", recompute="full")
    cfg, _ = prose.row_config(compose("task=validate"), row)
    assert cfg.training.selective_ac == "op"
    per_op = estimate(to_config(cfg))
    cfg.training.selective_ac = "core_attention"
    core = estimate(to_config(cfg))
    assert float(per_op.step_s) == float(core.step_s) and float(per_op.mem_total) == float(core.mem_total)


@pytest.mark.parametrize("tp, per_token", [
    # tp 1: layer input h, wq 4096, wv 1024, attention output 4096, w1 14,336, w2 h, bf16.
    (1, 2 * (4096 + 4096 + 1024 + 4096 + 14_336 + 4096)),
    # tp 8 with SP: the input split by sequence, the column-parallel outputs by tp, w2's partial
    # sum whole on every rank, and the two reduce-scatters' outputs split by sequence.
    (8, 2 * (4096 / 8 + (4096 + 1024 + 4096 + 14_336) / 8 + 4096 + 2 * 4096 / 8)),
])
def test_per_op_policy_keeps_only_what_it_saves_by_hand(config, tp, per_token):
    """A Llama 3 8B layer under torchtitan's per-op policy keeps the checkpoint's input and the
    saved ops' outputs (model.sac): 63.5 kB per token at tp 1, against the 147 kB Megatron's selective
    recompute keeps."""
    cfg = config("model=llama3_8b", "gpu=h100_sxm", f"layout.tp={tp}", "layout.pp=1", f"layout.n_gpus={tp}",
                 "training.micro_batch=1", "training.global_batch=1", "training.seq_parallel=true",
                 "training.recompute=selective", "training.selective_ac=op", "model.seq_len=8192")
    stored, whole = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    assert float(stored) == pytest.approx(8192 * per_token, rel=1e-9)
    megatron = config("model=llama3_8b", "gpu=h100_sxm", f"layout.tp={tp}", "layout.pp=1", f"layout.n_gpus={tp}",
                      "training.micro_batch=1", "training.global_batch=1", "training.seq_parallel=true",
                      "training.recompute=selective", "model.seq_len=8192")
    selective, _ = Mem.activation_bytes_per_layer(megatron.model, megatron.layout, megatron.train)
    # With flash attention Megatron's selective keeps the whole layer's set (no scores stored).
    assert float(stored) < float(selective) == pytest.approx(float(whole), rel=1e-12)


def test_per_op_policy_rematerialises_one_layer_and_keeps_its_moe_bound(config):
    """The per-op step re-materialises one whole layer in the backward, as full recompute does;
    an MoE model's layers keep the selective bound (the policy's saves are not itemised there)."""
    common = ("gpu=h100_sxm", "layout.tp=1", "layout.pp=1", "layout.n_gpus=8", "training.micro_batch=1",
              "training.global_batch=8", "training.recompute=selective", "model.seq_len=8192")
    cfg = config("model=llama3_8b", *common, "training.selective_ac=op")
    m, lay, t = cfg.model, cfg.layout, cfg.train
    stored, whole = Mem.activation_bytes_per_layer(m, lay, t)
    mem = Mem.memory(m, lay, t, 8.0, 1.0, 8.0)
    logits = 4.0 * 8192 * m.vocab
    assert float(mem.activations) == pytest.approx(32 * float(stored) + float(whole) + float(logits), rel=1e-9)
    moe = config("model=mixtral_8x7b", *common, "layout.ep=8")
    moe_op = config("model=mixtral_8x7b", *common, "layout.ep=8", "training.selective_ac=op")
    a, _ = Mem.activation_bytes_per_layer(moe.model, moe.layout, moe.train)
    b, _ = Mem.activation_bytes_per_layer(moe_op.model, moe_op.layout, moe_op.train)
    assert float(a) == float(b)
