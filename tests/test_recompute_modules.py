"""Megatron-Core's selective recompute by module (model.recompute_modules): what each module repeats
and what it does not keep, against hand counts on DeepSeek-V3 (its config: 61 layers, 3 dense,
h 7168, 128 heads of 192 (128 nope + 64 rope) / 128, q_lora 1536, kv_lora 512, 256 experts top-8
of width 2048, one shared expert)."""

import numpy as np
import prose
import pytest
import runs_rules

import jctopt
from jctopt.config import ConfigError
from jctopt.model import compute as C
from jctopt.model import memory as Mem
from jctopt.model import recompute_modules as Rm
from jctopt.runs.spellings import RowError, recompute_modules

GBS, SEQ = 1024, 4096
DSV3 = ("model=deepseek_v3", "gpu=gb200", "cluster=nvl72", "training=modern", "layout.n_gpus=256",
        "layout.tp=1", "layout.pp=16", "layout.ep=16", f"training.global_batch={GBS}", "training.recompute=selective",
        "training.flash_attention=true")


def estimate(config, modules):
    return jctopt.estimate(config(*DSV3, f"training.recompute_modules={modules}"))


def test_mla_up_proj_repeats_the_two_up_projections(config):
    """Recomputing MLA's up-projections repeats the query latent's (1536 x 128 x 192) and the
    key-value latent's (512 x 128 x (128 + 128)) GEMMs, 54,525,952 weights, in every layer:
    2 x 4096 x that many FLOPs per sequence and layer; the default (core_attn) repeats the
    attention core, 2 s^2 x 128 x 320 (the full square, as the model counts FLOPs)."""
    none = float(estimate(config, "[]").hardware_flops_per_step)
    up = float(estimate(config, "[mla_up_proj]").hardware_flops_per_step)
    core = float(estimate(config, "[core_attn]").hardware_flops_per_step)
    weights = 1536 * 128 * 192 + 512 * 128 * (128 + 128)
    assert weights == 54_525_952
    assert up - none == pytest.approx(GBS * 61 * 2 * SEQ * weights, rel=1e-9)
    assert core - none == pytest.approx(GBS * 61 * 2 * SEQ**2 * 128 * (192 + 128), rel=1e-9)
    assert float(jctopt.estimate(config(*DSV3)).hardware_flops_per_step) == core  # Megatron's default


def test_moe_recompute_runs_dispatch_and_combine_again(config):
    """Recomputing the MoE layer repeats its forward's two all-to-alls: 6 per layer and
    micro-batch against 4 (none overlapped in this config)."""
    kept, moe = estimate(config, "[core_attn]"), estimate(config, "[moe,core_attn]")
    assert float(moe.ep_comm_s) == pytest.approx(1.5 * float(kept.ep_comm_s), rel=1e-9)
    assert float(moe.compute_s) > float(kept.compute_s)


def test_what_each_module_does_not_keep(config):
    """Per layer and micro-batch (s 4096, b 1, tp 1, bf16): mla_up_proj drops the per-head
    Q, K, V, 2 x 4096 x (128 x 192 + 128 x 320) bytes; moe_act the routed experts' activation
    output, 2 x 4096 x 8 x 2048 bytes in 58 of the 61 layers; moe everything the routed and
    shared experts hold, 6 bytes per element of (8 + 1) x 2048 under SwiGLU."""
    def stored(modules):
        c = config(*DSV3, f"training.recompute_modules={modules}")
        return float(Mem.activation_bytes_per_layer(c.model, c.layout, c.train)[0])

    base = stored("[core_attn]")
    assert base - stored("[core_attn,mla_up_proj]") == pytest.approx(2 * SEQ * (128 * 192 + 128 * 320), rel=1e-9)
    assert base - stored("[core_attn,moe_act]") == pytest.approx(2 * SEQ * 8 * 2048 * 58 / 61, rel=1e-9)
    assert base - stored("[core_attn,moe]") == pytest.approx(6 * SEQ * 9 * 2048 * 58 / 61, rel=1e-9)
    assert stored("[core_attn,moe,moe_act,shared_experts]") == stored("[core_attn,moe]")  # parts of the MoE layer


def test_the_moe_layer_holds_its_activation_and_shared_experts(config):
    """Recomputing the MoE layer repeats its activation and shared experts once, listed or not."""
    moe = estimate(config, "[moe]")
    listed = estimate(config, "[moe,moe_act,shared_experts]")
    for field in ("step_s", "hardware_flops_per_step", "mem_total"):
        assert float(listed._asdict()[field]) == float(moe._asdict()[field]), field
    shared = estimate(config, "[shared_experts]")
    none = estimate(config, "[]")
    # DeepSeek-V3's shared expert: 3 x 7168 x 2048 weights in 58 of 61 layers
    assert float(shared.hardware_flops_per_step) - float(none.hardware_flops_per_step) == pytest.approx(
        GBS * 61 * 2 * SEQ * 3 * 7168 * 2048 * 58 / 61, rel=1e-9)


def test_modules_apply_to_megatron_selective_recompute_only(config):
    """torchtitan's per-op policy and full recompute do not read the module list."""
    for extra in (("training.selective_ac=op",), ("training.recompute=full",)):
        a = jctopt.estimate(config(*DSV3, *extra, "training.recompute_modules=[core_attn]"))
        b = jctopt.estimate(config(*DSV3, *extra, "training.recompute_modules=[moe,mla_up_proj]"))
        assert float(a.step_s) == float(b.step_s) and float(a.mem_total) == float(b.mem_total), extra
    c = config(*DSV3, "training.selective_ac=op", "training.recompute_modules=[moe]")
    assert np.all(np.asarray(Rm.flags(c.train)) == 0)


def test_module_parts_are_the_layer_times_pieces(config):
    """The MoE module's GEMMs are the routed and shared experts' of layer_gemm_times, the
    core_attn module the attention core of layer_times."""
    c = config(*DSV3, "training.recompute_modules=[moe]")
    m, g, t, lay = c.model, c.gpu, c.train, c.layout
    gemm, core, _ = C.layer_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    dense, routed, shared = C.mlp_gemm_times(m, g, t, lay.tp, lay.cp, lay.ep, lay.etp)
    parts = C.recompute_module_times(m, g, t, lay.tp, lay.cp, core, (dense, routed, shared))
    qkv, proj = C.mixer_gemm_times(m, g, t, lay.tp, lay.cp)
    assert float(gemm) == pytest.approx(float(qkv + proj + sum(dense) + sum(routed) + sum(shared)), rel=1e-12)
    assert float(parts.core_attn) == float(core)
    assert float(parts.moe) > float(sum(routed) + sum(shared)) > 0
    assert float(parts.mla_up_proj) > 0 and float(parts.mlp) > 0  # DeepSeek-V3's three dense layers


def test_bad_module_lists_name_the_key(compose):
    with pytest.raises(ConfigError, match=r"training.recompute_modules='attention' is not allowed: core_attn \| "):
        jctopt.to_config(compose(*DSV3, "training.recompute_modules=[attention]"))
    allowed = r"is not allowed: core_attn \| layernorm .*\(mla_up_proj needs multi-latent attention"
    with pytest.raises(ConfigError, match=r"training.recompute_modules='mla_up_proj' " + allowed):
        jctopt.to_config(compose("model=llama3_8b", "training.global_batch=64", "training.recompute=selective",
                                 "training.recompute_modules=[mla_up_proj]"))


@pytest.mark.parametrize("cell, notes, modules", [
    ("selective:mla_up_proj,mlp", "", ["mla_up_proj", "mlp"]),
    ("mla_up_proj", "", ["mla_up_proj"]),
    ("selective", "dispatcher=alltoall; recompute_modules=['layernorm', 'moe_act', 'moe', 'core_attn']",
     ["core_attn", "layernorm", "moe_act", "moe"]),
    ("selective (RMSNorm and MLA up-projection recomputed; paper Sec.3.2.3)", "", ["mla_up_proj", "layernorm"]),
    ("selective (default modules; yaml recompute_granularity=selective)", "", None),
    ("selective", "", None),
    ("selective", "recompute_modules: moe_act, layernorm and CUDA graphs", ["layernorm", "moe_act"]),
    ("selective", "--recompute-granularity selective --recompute-modules mla_up_proj mlp --moe-grouped-gemm",
     ["mla_up_proj", "mlp"]),
    ("selective", "recompute_modules=None", None),
])
def test_module_lists_as_rows_print_them(cell, notes, modules):
    assert read_modules(cell, notes) == modules


def read_modules(cell, notes):
    """The modules a row reads: its recompute cell's, else those of the recompute_modules column
    that scripts/convert_runs.py writes from the notes' list."""
    column = ",".join(runs_rules.notes_modules(notes))
    return recompute_modules(cell) or (recompute_modules(column) if column else None)


def test_a_module_outside_the_catalog_is_refused():
    with pytest.raises(RowError, match=r"recompute module 'mhc' is not modelled"):
        read_modules("selective", "recompute_modules=[moe_act, mhc]")


def test_a_row_takes_its_modules(compose):
    base = compose("task=validate")
    row = {"id": "r", "source": "Megatron-Bridge 26.04", "model": "DeepSeekV3", "gpu": "gb200", "precision": "MXFP8",
           "num_gpus": 256, "tp": 1, "pp": 16, "cp": 1, "ep": 16, "vpp": 1, "micro_batch": 1, "global_batch": 1024,
           "seq_len": 4096, "recompute": "selective:mla_up_proj"}
    cfg, _ = prose.row_config(base, row)
    assert list(cfg.training.recompute_modules) == ["mla_up_proj"]
    cfg, _ = prose.row_config(base, dict(row, recompute="selective"))
    assert list(cfg.training.recompute_modules) == ["core_attn"]


SPACE = (*DSV3[:4], f"training.global_batch={GBS}", "training.flash_attention=true", "space.gpu=[gb200]",
         "space.fabric=[ib_ndr400]", "space.n_gpus=[256]", "space.tp=[1]", "space.pp=[16]", "space.cp=[1]",
         "space.ep=[8,16]", "space.vpp=[1]", "space.micro_batch=[1]", "space.zero_stage=[1]",
         "space.precision=[mxfp8]", "space.ckpt_interval_s=[optimal]", "sweep.dtype=float64", "sweep.progress=false",
         "sweep.keep=all")


@pytest.mark.slow
def test_the_space_searches_module_lists(compose, config, tmp_path):
    """A recompute entry names its modules (``selective:moe,core_attn``); plain ``selective``
    takes the training config's. Every row equals the scalar estimate of its configuration."""
    from jctopt.tasks.sweep import run_sweep

    choices = "[selective,'selective:moe,core_attn','selective:mla_up_proj,moe_act,layernorm']"
    df = run_sweep(compose(*SPACE, f"space.recompute={choices}"), tmp_path)
    assert len(df) == 6 and set(df.recompute) == {"selective", "selective:moe,core_attn",
                                                    "selective:mla_up_proj,moe_act,layernorm"}
    for _, r in df.iterrows():
        mode, _, modules = r.recompute.partition(":")
        listed = f"[{modules}]" if modules else "[core_attn]"
        one = config(*SPACE[:6], "gpu=gb200", "fabric=ib_ndr400", "layout.n_gpus=256", "layout.tp=1", "layout.pp=16",
                     f"layout.ep={r.ep}", "training.precision=mxfp8", f"training.recompute={mode}",
                     f"training.recompute_modules={listed}")
        est = jctopt.estimate(one)
        for field in ("step_s", "mem_total", "hardware_flops_per_step"):
            np.testing.assert_allclose(r[field], float(getattr(est, field)), rtol=1e-12, err_msg=(r.recompute, field))


@pytest.mark.parametrize("entry, needle", [
    ("'selective:attention'", r"space.recompute='selective:attention' is not allowed: modules among core_attn"),
    ("'full:moe'", r"space.recompute='full:moe' is not allowed: none \| selective \| full, or selective:<modules>"),
])
def test_bad_space_recompute_entries_name_the_key(compose, entry, needle):
    from jctopt.search.engine import build

    with pytest.raises(ConfigError, match=needle):
        build(compose(*SPACE, f"space.recompute=[{entry}]"))
    with pytest.raises(ConfigError, match=r"space.recompute entry 'selective:mla_up_proj' is not allowed: mla_up_proj"):
        build(compose("model=llama3_8b", "training.global_batch=64", "space.recompute=['selective:mla_up_proj']"))


@pytest.mark.slow
def test_a_run_that_does_not_fit_is_told_which_modules_make_it_fit(config):
    """DeepSeek-V3 on 1024 H100 (pp 16, ep 64) with the attention core recomputed needs 116 GB
    per GPU; recomputing Megatron's light modules too (MLA's up-projections, the norms, the
    experts' activation) fits, and the diagnosis says so with that configuration's JCT."""
    from jctopt.job.diagnosis import diagnose

    h100 = ("model=deepseek_v3", "gpu=h100_sxm", "training=modern", "layout.n_gpus=1024", "layout.tp=1",
            "layout.pp=16", "layout.ep=64", "training.global_batch=4096", "training.flash_attention=true",
            "training.recompute=selective")
    core = config(*h100)
    est = jctopt.estimate(core)
    assert not bool(est.feasible) and float(est.mem_total) > float(est.mem_capacity)
    light = jctopt.estimate(config(*h100, "training.recompute_modules=[core_attn,mla_up_proj,layernorm,moe_act]"))
    assert bool(light.feasible)
    text = diagnose(core, est)
    assert (f"Fits with selective recompute of Megatron's light modules (training.recompute_modules: "
            f"core_attn, layernorm, moe_act, and mla_up_proj under MLA): JCT {float(light.jct_s) / 86400:.1f} "
            "days.") in text
