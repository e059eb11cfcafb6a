"""FLOPs and activation memory against the closed forms of Narayanan 2021 and Korthikanti 2022."""

import jax.numpy as jnp
import pytest

import jctopt
from jctopt.model import flops as Fl
from jctopt.model import memory as Mem

# GPT-3 175B: L=96, h=12288, a=96, s=2048, V=51200; global batch B=1536 (Narayanan 2021 Sec. 5).
L, H, A, S, V, B = 96, 12288, 96, 2048, 51200, 1536


def _gpt3(config, *extra):
    return config("model=gpt3_175b", "training.global_batch=1536", *extra)


def test_model_flops_korthikanti_eq7(config):
    cfg = _gpt3(config, "training.recompute=none")
    expected = 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))  # = 3.3856e18
    assert float(Fl.model_flops_per_step(cfg.model, cfg.train)) == pytest.approx(expected, rel=1e-3)


def test_hardware_flops_full_recompute_narayanan_eq3(config):
    cfg = _gpt3(config, "training.recompute=full")
    expected = 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))  # = 4.5110e18
    assert float(Fl.hardware_flops_per_step(cfg.model, cfg.train)) == pytest.approx(expected, rel=1e-3)


def test_gpt3_parameter_count(config):
    # Narayanan 2021 Sec. 5.1: P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) = 174.6 B
    cfg = _gpt3(config)
    expected = 12 * L * H**2 * (1 + 13 / (12 * H) + (V + S) / (12 * L * H))
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) == pytest.approx(expected, rel=2e-3)


@pytest.mark.parametrize("model,billions", [("llama3_8b", 8.03), ("llama3_70b", 70.55), ("llama3_405b", 405.85),
                                            ("mixtral_8x7b", 46.70), ("llama2_7b", 6.74), ("llama2_70b", 68.98)])
def test_published_parameter_counts(config, model, billions):
    # Llama 3: released checkpoints 8.03 / 70.55 / 405.85 B; Mixtral 8x7B: 46.7 B (Jiang et al. 2024);
    # Llama 2: released checkpoints 6.74 / 68.98 B (Hugging Face model cards, "7B" / "70B").
    cfg = config(f"model={model}", "layout=single_node", "training.global_batch=8")
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) / 1e9 == pytest.approx(billions, rel=5e-3)


def test_llama2_34b_parameter_count(config):
    # fms-fsdp's llama2_34b by hand: per layer q, o 8192^2 each, k, v 8192 x 1024 each, SwiGLU
    # 3 x 8192 x 22016, two norms 8192; 48 layers; untied embedding and head 2 x 32000 x 8192;
    # final norm: 33,743,970,304 ("34B", Touvron et al. 2023, Table 1).
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 22016 + 2 * 8192
    expected = 48 * layer + 2 * 32000 * 8192 + 8192
    assert expected == 33_743_970_304
    cfg = config("model=llama2_34b", "layout=single_node", "training.global_batch=8")
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) == pytest.approx(expected, rel=1e-6)


def test_qwen3_32b_parameter_count_by_hand(config):
    # Per layer: q and o 5120 x 8192 each (64 heads of 128: the query is wider than the
    # hidden size), k and v 5120 x 1024 each (8 KV heads), SwiGLU 3 x 5120 x 25600, two norms
    # 5120; 64 layers; untied embedding and head 2 x 151936 x 5120; final norm: 32,762,106,880
    # ("32.8B", Hugging Face model card). The QK-norm weights (2 x 128 per layer) are not counted.
    layer = 2 * 5120 * 8192 + 2 * 5120 * 1024 + 3 * 5120 * 25600 + 2 * 5120
    expected = 64 * layer + 2 * 151936 * 5120 + 5120
    assert expected == 32_762_106_880
    cfg = config("model=qwen3_32b", "layout=single_node", "training.global_batch=8")
    assert float(Fl.total_params(cfg.model, cfg.train.seq_len)) == pytest.approx(expected, rel=1e-6)


def _billions(config, model):
    """(total, non-embedding) parameters of catalog ``model``, in billions."""
    cfg = config(f"model={model}", "layout=single_node", "layout.tp=1", "training.global_batch=8")
    m, s = cfg.model, cfg.train.seq_len
    total = float(Fl.total_params(m, s)) / 1e9
    return total, total - float(Fl.embedding_params(m, s)) / 1e9


def _half_unit(printed):
    """Half a unit of a figure's last printed digit (0.44, 6.95: two decimals; else one)."""
    return 0.005 if round(printed, 1) != printed else 0.05


@pytest.mark.parametrize("model,total,non_embedding", [
    ("qwen3_0p6b", 0.6, 0.44), ("qwen3_1p7b", 1.7, 1.4), ("qwen3_4b", 4.0, 3.6),
    ("qwen3_8b", 8.2, 6.95), ("qwen3_14b", 14.8, 13.2), ("qwen3_32b", 32.8, 31.2)])
def test_qwen3_dense_published_parameter_counts(config, model, total, non_embedding):
    # Hugging Face model cards (Qwen/Qwen3-*): total and non-embedding billions, rounded as
    # printed, so within half a unit of their last digit. The three small ones tie the
    # embedding to the output head.
    billions, body = _billions(config, model)
    assert billions == pytest.approx(total, abs=_half_unit(total))
    assert body == pytest.approx(non_embedding, abs=_half_unit(non_embedding))


@pytest.mark.parametrize("model,total,non_embedding", [
    ("qwen2p5_7b", 7.61, 6.53), ("qwen2p5_14b", 14.7, 13.1), ("qwen2p5_32b", 32.5, 31.0),
    ("qwen2p5_72b", 72.7, 70.0)])
def test_qwen2p5_published_parameter_counts(config, model, total, non_embedding):
    # Hugging Face model cards (Qwen/Qwen2.5-*). The shapes count 7.62 / 6.53, 14.77 / 13.21,
    # 32.76 / 31.21 and 72.71 / 70.21 B (QKV biases aside, under 1 M): the cards' 14B and 32B
    # figures sit up to 0.8 % below their own shapes, hence 1 %.
    billions, body = _billions(config, model)
    assert billions == pytest.approx(total, rel=0.01)
    assert body == pytest.approx(non_embedding, rel=0.01)


def _act(config, tp, sp, recompute, flash=False):
    cfg = _gpt3(config, f"layout.tp={tp}", "layout.pp=1", f"layout.n_gpus={tp}", "training.micro_batch=1",
                f"training.seq_parallel={sp}", f"training.recompute={recompute}",
                f"training.flash_attention={flash}", "training.global_batch=1")
    stored, _ = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    return float(stored)


SBH = S * 1 * H


@pytest.mark.parametrize("tp", [1, 8])
def test_activation_memory_korthikanti_table2(config, tp):
    # No SP, no recompute: s b h (10 + 24/t + 5 a s / (h t)); for t = 1 this is 34 + 5as/h.
    expected = SBH * (10 + 24 / tp + 5 * A * S / (H * tp))
    assert _act(config, tp, False, "none") == pytest.approx(expected, rel=1e-9)
    # SP: s b h / t (34 + 5 a s / h)
    assert _act(config, tp, True, "none") == pytest.approx(SBH / tp * (34 + 5 * A * S / H), rel=1e-9)
    # SP + selective recompute: 34 s b h / t
    assert _act(config, tp, True, "selective") == pytest.approx(34 * SBH / tp, rel=1e-9)
    # Full recompute: only the layer input, 2 s b h (no SP)
    assert _act(config, tp, False, "full") == pytest.approx(2 * SBH, rel=1e-9)


def test_swiglu_layer_activations_by_hand(config):
    """Llama 3 8B layer (h 4096, 32 heads, 8 KV heads of 128, SwiGLU ffn 14336), s 8192, b 1,
    SP at tp 4, flash: 10 h replicated (/tp) + Q and context 4 h + K, V 4 x 1024 + SwiGLU's
    input 2 x 2 ffn and the down GEMM's input 2 ffn, bf16 (Korthikanti 2022 Table 2's terms)."""
    cfg = config("model=llama3_8b", "layout.tp=4", "layout.pp=1", "layout.n_gpus=4", "training.micro_batch=1",
                 "training.seq_parallel=true", "training.recompute=none", "training.flash_attention=true",
                 "training.global_batch=1", "model.seq_len=8192")
    stored, _ = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    s, h, ffn = 8192, 4096, 14336
    assert float(stored) == pytest.approx(s * (10 * h + 4 * h + 4 * 1024 + 6 * ffn) / 4, rel=1e-9)


def test_no_dropout_keeps_no_masks(config):
    """The same Llama 3 8B layer without dropout (its recipe's, training.dropout=false): the two
    1-byte masks (after attention, after the MLP) are not kept, 8 h replicated instead of 10 h;
    unfused, the scores keep the softmax output alone, 2 a s^2 b of Korthikanti's 5."""
    common = ("model=llama3_8b", "layout.tp=4", "layout.pp=1", "layout.n_gpus=4", "training.micro_batch=1",
              "training.seq_parallel=true", "training.recompute=none", "training.global_batch=1",
              "model.seq_len=8192", "training.dropout=false")
    cfg = config(*common, "training.flash_attention=true")
    s, h, ffn, a = 8192, 4096, 14336, 32
    stored, _ = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    assert float(stored) == pytest.approx(s * (8 * h + 4 * h + 4 * 1024 + 6 * ffn) / 4, rel=1e-9)
    unfused = config(*common, "training.flash_attention=false")
    stored_unfused, _ = Mem.activation_bytes_per_layer(unfused.model, unfused.layout, unfused.train)
    assert float(stored_unfused - stored) == pytest.approx(2 * a * s * s / 4, rel=1e-9)


def test_fp8_keeps_the_gemm_inputs_at_one_byte(config):
    """The same layer under fp8: the QKV and fc1 inputs (h each), the projection's input (the
    context, h) and the down GEMM's input (ffn) are kept as their 1-byte FP8 copies for the
    weight gradient (Transformer Engine); norms, Q, K, V and SwiGLU's input stay bf16."""
    cfg = config("model=llama3_8b", "layout.tp=4", "layout.pp=1", "layout.n_gpus=4", "training.micro_batch=1",
                 "training.seq_parallel=true", "training.recompute=none", "training.flash_attention=true",
                 "training.global_batch=1", "model.seq_len=8192", "gpu=h100_sxm", "training.precision=fp8")
    stored, _ = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    s, h, ffn = 8192, 4096, 14336
    assert float(stored) == pytest.approx(s * (8 * h + 3 * h + 4 * 1024 + 5 * ffn) / 4, rel=1e-9)


def test_fused_attention_drops_score_memory(config):
    assert _act(config, 8, True, "none", flash=True) == pytest.approx(34 * SBH / 8, rel=1e-9)


def test_zero_sharding_divides_states(config):
    # ZeRO (Rajbhandari 2020, Fig. 1): stage 1 shards the 12 optimizer bytes, 2 the grads, 3 the weights.
    base = ("model=gpt_7p5b", "layout.n_gpus=64", "layout.tp=1", "layout.pp=1", "training.global_batch=64")
    mems = []
    for z in range(4):
        cfg = config(*base, f"training.zero_stage={z}")
        mems.append(Mem.memory(cfg.model, cfg.layout, cfg.train, jnp.asarray(64.0), jnp.asarray(1.0), cfg.cluster.gpus_per_node))
    p = float(mems[0].dense_params + mems[0].expert_params)
    assert float(mems[0].optimizer) == pytest.approx(12 * p)
    assert float(mems[1].optimizer) == pytest.approx(12 * p / 64)
    assert float(mems[1].grads) == pytest.approx(2 * p)
    assert float(mems[2].grads) == pytest.approx(2 * p / 64)
    assert float(mems[2].weights) == pytest.approx(2 * p)
    assert float(mems[3].weights) == pytest.approx(2 * p / 64)


def _block(cfg, share):
    """``cfg`` with Megatron's block recompute of ``share`` of the layers (recompute = 1 + share)."""
    return cfg._replace(train=cfg.train._replace(recompute=jnp.asarray(1.0 + share)))


def test_block_recompute_of_half_the_layers_by_hand(config):
    """Half the layers recomputed whole, the other half selective: FLOPs halfway between
    Korthikanti's selective (attention core again: 2 B s^2 h x 2 per layer, Eq. 7's attention
    term) and Narayanan's full recompute (Eq. 3); stored activations halfway between 34 s b h / t
    and 2 s b h / t (GPT-3 175B, tp 8 with SP)."""
    full = 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))
    model = 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))
    selective = model + B * L * 4 * S**2 * H  # the forward QK^T and AV again
    cfg = _block(_gpt3(config, "training.recompute=selective"), 0.5)
    assert float(Fl.hardware_flops_per_step(cfg.model, cfg.train)) == pytest.approx((full + selective) / 2, rel=1e-3)
    act = _gpt3(config, "layout.tp=8", "layout.pp=1", "layout.n_gpus=8", "training.micro_batch=1",
                "training.seq_parallel=true", "training.recompute=selective", "training.global_batch=1")
    stored, _ = Mem.activation_bytes_per_layer(act.model, act.layout, _block(act, 0.5).train)
    assert float(stored) == pytest.approx((34 * SBH / 8 + 2 * SBH / 8) / 2, rel=1e-9)


def test_zero3_under_pipeline_keeps_the_stage_gathered(config):
    """FSDP2 under PP (torchtitan: reshard_after_forward False) holds the stage's weights and
    gradients whole and shards only the optimizer; it gathers once per step, so its exposed
    gather time does not grow with the number of micro-batches, as it does at pp = 1."""
    base = ("model=gpt_7p5b", "layout.n_gpus=64", "layout.tp=1", "training.zero_stage=3", "training.micro_batch=1")
    cfg = config(*base, "layout.pp=2", "training.global_batch=64")
    mem = Mem.memory(cfg.model, cfg.layout, cfg.train, jnp.asarray(32.0), jnp.asarray(2.0), cfg.cluster.gpus_per_node)
    p = float(mem.dense_params + mem.expert_params)
    assert float(mem.weights) == pytest.approx(2 * p) and float(mem.grads) == pytest.approx(2 * p)
    assert float(mem.optimizer) == pytest.approx(12 * p / 32) and float(mem.zero3_buffer) == 0.0

    def z3(pp, batch):
        c = config(*base, f"layout.pp={pp}", f"training.global_batch={batch}")
        return float(jctopt.estimate(c).zero3_comm_s)

    assert z3(2, 64) > 0.0 and z3(1, 64) > 0.0
    assert z3(2, 128) == pytest.approx(z3(2, 64), rel=1e-6)  # 4 vs 2 micro-batches
    assert z3(1, 128) == pytest.approx(2 * z3(1, 64), rel=1e-6)  # 2 vs 1
