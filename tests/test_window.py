"""Sliding-window attention (model.window): keys of work per query by hand, the windowed layer against
cuDNN's measured kernel, the layer's attention core, the config checks and validate's rows."""

import prose
import pytest

from jctopt import ConfigError
from jctopt.model import attention as A
from jctopt.model import compute as C
from jctopt.model import window as W


@pytest.mark.parametrize("window, seq, keys", [
    (128, 4096, 128 * 1.5 + 290),          # the band's one block below the diagonal, half the diagonal, the tile cost
    (4096, 32768, 128 * 32.5 + 290),       # 32 full blocks (ceil(4095 / 128)) + the diagonal
    (1000, 1024, 512),                     # the band's cost would pass the causal half: causal
    (4096, 4096, 2048), (8192, 4096, 2048),  # a window as long as the sequence is causal
    (0, 4096, 2048)])                      # no window
def test_visited_keys_by_hand(window, seq, keys):
    assert float(W.visited_keys_per_query(float(window), float(seq))) == pytest.approx(keys, rel=1e-12)
    assert float(W.square_share(float(window), float(seq))) == pytest.approx(keys / seq, rel=1e-12)


def _gpt_oss(config, gpu):
    cfg = config("model=gpt_oss_120b", f"gpu={gpu}", "layout=single_node", "layout.tp=1", "training.global_batch=32",
                 "training.micro_batch=4")
    return cfg.gpu, cfg.train._replace(fused_attention=1.0, flash_attention=1.0)


# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss/gb{200,300} @3929da2: cuDNN
# SDPA, bf16, 2 sequences x 128 heads of 64, window 128, forward + backward (ms).
@pytest.mark.slow
@pytest.mark.parametrize("gpu, seq, measured_ms, rel", [
    ("gb200", 4096, 0.210 + 0.465, 0.06), ("gb300", 4096, 0.202 + 0.442, 0.06),   # QUERY_TILE_KEYS's two anchors
    ("gb200", 2048, 0.109 + 0.237, 0.17), ("gb200", 8192, 0.414 + 0.911, 0.05),   # lengths it was not set from
    ("gb200", 16384, 0.822 + 1.818, 0.06)])
def test_windowed_layer_against_cudnn(config, gpu, seq, measured_ms, rel):
    g, t = _gpt_oss(config, gpu)
    core_flops = 2.0 * 2 * seq * seq * 128 * (64 + 64)
    forward = A.flash_forward_time(W.square_share(128.0, float(seq)) * core_flops, g, t)
    assert 1e3 * float(forward) * (1.0 + 2.5) == pytest.approx(measured_ms, rel=rel)


def test_gpt_oss_layer_core_is_half_windowed(config):
    """gpt-oss-120b: 18 of 36 layers windowed to 128 tokens, the rest causal, averaged per layer."""
    cfg = config("model=gpt_oss_120b", "layout=single_node", "layout.tp=1", "training.global_batch=8")
    m, g, t = cfg.model, cfg.gpu, cfg.train._replace(flash_attention=1.0)
    assert (float(m.attention_window), float(m.window_layers)) == (128.0, 18.0)
    s = float(t.seq_len)
    core_flops = 2.0 * float(t.micro_batch) * s * s * 64 * (64 + 64)
    expected = 0.5 * float(A.flash_forward_time(0.5 * core_flops, g, t)) + 0.5 * float(
        A.flash_forward_time(float(W.square_share(128.0, s)) * core_flops, g, t))
    _, core, _ = C.layer_times(m, g, t, 1.0, 1.0)
    assert float(core) == pytest.approx(expected, rel=1e-12)
    dense = config("model=gpt_oss_120b", "model.attention_window=0", "model.window_layers=0", "layout=single_node",
                   "layout.tp=1", "training.global_batch=8")
    _, causal, _ = C.layer_times(dense.model, g, t, 1.0, 1.0)
    assert float(causal) == pytest.approx(float(A.flash_forward_time(0.5 * core_flops, g, t)), rel=1e-12)


@pytest.mark.parametrize("overrides, key", [
    (["model.window_layers=37"], "model.window_layers"), (["model.attention_window=0"], "model.window_layers"),
    (["model.attention_window=-1"], "model.attention_window")])
def test_bad_windows_are_refused_by_key(config, overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config("model=gpt_oss_120b", "layout=single_node", "layout.tp=1", "training.global_batch=8", *overrides)


def test_validate_takes_the_window_from_the_catalog(compose):
    """No runs column states a window: a row naming gpt-oss takes the catalog's on its share of the
    row's layers; a row naming another model has none."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Megatron-Bridge docs/performance-summary.md, 26.08 NeMo Container",
           "model": "GPT OSS 120B", "gpu": "gb200", "precision": "BF16", "num_gpus": 64, "tp": 1, "pp": 1, "cp": 1,
           "ep": 64, "global_batch": 1280, "micro_batch": 4, "seq_len": 4096}
    cfg, _ = prose.row_config(base, row)
    assert (cfg.model.attention_window, cfg.model.window_layers) == (128, 18)
    cfg, _ = prose.row_config(base, dict(row, model="Llama 3 70B", ep=1, tp=4, pp=4))
    assert (cfg.model.attention_window, cfg.model.window_layers) == (0, 0)
