"""Activation offloading (model.offload): what leaves HBM for host memory and what the copies cost,
against hand counts."""

import jax.numpy as jnp
import pandas as pd
import prose
import pytest
import runs_rules

import jctopt
from jctopt.config.resources import validation_file
from jctopt.job.jct import Reason
from jctopt.model import memory as Mem
from jctopt.runs import place as runs_place


def _llama70b(config, gpu, *extra):
    """Llama 3 70B (80 layers) on 64 GPUs, ZeRO-3 over all of them (tp = pp = 1), two 8192-token
    sequences per micro-batch, 256 per step: 2 micro-batches per GPU, no recompute; the 2024 stack
    (training=modern: flash attention, overlapped communication)."""
    return config("model=llama3_70b", f"gpu={gpu}", "training=modern", "layout.n_gpus=64", "layout.tp=1", "layout.pp=1",
                  "training.zero_stage=3", "training.global_batch=256", "training.micro_batch=2",
                  "training.recompute=none", "training.precision=fp8", *extra)


def test_offloaded_layers_leave_hbm_for_host_memory(config):
    """40 of 80 layers offloaded: host memory holds 40 layers' stored activations of the one
    micro-batch in flight (pp = 1), HBM the other 40 and one layer's copy in transit."""
    kept = _llama70b(config, "gb200")
    half = _llama70b(config, "gb200", "training.offload_layers=40")
    per_layer, _ = Mem.activation_bytes_per_layer(half.model, half.layout, half.train)
    base, off = jctopt.estimate(kept), jctopt.estimate(half)
    assert float(base.mem_host) == 0.0
    assert float(off.mem_host) == pytest.approx(40 * float(per_layer), rel=1e-9)
    assert float(base.mem_activations) - float(off.mem_activations) == pytest.approx(39 * float(per_layer), rel=1e-9)
    assert float(off.compute_s) == pytest.approx(float(base.compute_s), rel=1e-12)  # nothing recomputed


def _copy_exposure(est, cfg, layers):
    """Hand count: one micro-batch's stored activations of ``layers`` layers go out during the
    forward third of its compute and come back during the backward two thirds."""
    per_layer, _ = Mem.activation_bytes_per_layer(cfg.model, cfg.layout, cfg.train)
    copy = layers * float(per_layer) / (1e9 * float(cfg.gpu.host_link_gbps))
    t = float(est.compute_s) / float(est.n_micro)
    return copy, max(copy - t / 3, 0.0) + max(copy - 2 * t / 3, 0.0)


def test_copies_hide_behind_compute_over_nvlink_c2c(config):
    """GB200's NVLink-C2C (225 GB/s per GPU each way) moves 40 layers' activations within the
    forward pass: nothing is exposed."""
    cfg = _llama70b(config, "gb200", "training.offload_layers=40")
    est = jctopt.estimate(cfg)
    copy, exposed = _copy_exposure(est, cfg, 40)
    assert exposed == 0.0 and copy > 0.0
    assert float(est.offload_s) == 0.0


def test_copies_over_pcie_outlast_the_forward_pass(config):
    """An H100's PCIe 5.0 x16 (63 GB/s each way) takes longer than the forward pass to copy all
    80 layers out: the rest is on the critical path, per micro-batch."""
    cfg = _llama70b(config, "h100_sxm", "training.offload_layers=80")
    est = jctopt.estimate(cfg)
    copy, exposed = _copy_exposure(est, cfg, 80)
    t = float(est.compute_s) / float(est.n_micro)
    assert copy > t / 3  # the case the test is about
    assert float(est.offload_s) == pytest.approx(float(est.n_micro) * exposed, rel=1e-9)
    assert float(est.offload_s) > 0.0


def test_host_memory_bounds_offloading(config):
    """What does not fit in the host's memory is masked like what does not fit in HBM."""
    cfg = _llama70b(config, "gb200", "training.offload_layers=80", "gpu.host_mem_gb=1")
    assert Reason(int(jctopt.estimate(cfg).reason)) == Reason.MEMORY


def test_validate_reads_offloaded_layers_from_the_notes(compose):
    """A row whose notes name cpu_offloading_num_layers runs with that many layers offloaded."""
    row = pd.read_csv(validation_file("runs_dev2.csv")).set_index("id").loc["nemofw2507_gb200_llama31_405b_128g"]
    row = dict(row.to_dict(), id=row.name, recompute="none",
               notes=str(row["notes"]) + "; recipe: cpu_offloading_num_layers=95")
    config, rc, used = prose.place(compose("task=validate"), row)
    assert float(config.train.offload_layers) == 95.0 and rc.training.offload_layers == 95
    assert "offload_layers" not in used
    flag = dict(row, notes="--cpu-offloading --cpu-offloading-num-layers 40 --recompute-granularity full")
    assert runs_rules._stated_offload_layers(flag) == 40
    off = dict(row, notes="cpu_offloading=False; cpu_offloading_num_layers=40")
    assert runs_rules._stated_offload_layers(off) is None


def test_a_silent_row_offloads_where_that_beats_recompute(compose):
    """NeMo 25.07's Llama 3.1 405B on 128 GB200s (tp 2, pp 1, ZeRO-3) states no recompute and
    needs some to fit; NeMo's GB200 configuration offloads 95 of its 126 layers instead
    (model_configs_gb200.csv). Placed, it offloads the fewest layers that fit, which the model
    finds faster than recomputing, and says so in the defaults it used."""
    row = pd.read_csv(validation_file("runs_dev2.csv")).set_index("id").loc["nemofw2507_gb200_llama31_405b_128g"]
    row = dict(row.to_dict(), id=row.name)
    base = compose("task=validate")
    config, _, used = prose.place(base, row)
    assert "offload_layers" in used and float(config.train.recompute) == 0.0
    k = float(config.train.offload_layers)
    assert 0 < k <= 126
    fewer = config._replace(train=config.train._replace(offload_layers=config.train.offload_layers - 1))
    assert Reason(int(jctopt.estimate(fewer).reason)) == Reason.MEMORY  # the fewest that fit
    rc, _ = prose.row_config(base, row)
    recomputed = runs_place._least_recompute_that_fits(rc)
    assert float(recomputed.train.recompute) > 0
    assert float(jctopt.estimate(config).step_s) < float(jctopt.estimate(recomputed).step_s)


def test_a_silent_row_offloads_where_host_memory_cannot_take_every_layer(compose):
    """Megatron-Bridge's 26.04 Llama 3 70B on 64 GB300s (FP8, Megatron-FSDP, tp = pp = 1,
    micro-batch 2), recompute blank: its recipe offloads 20 of 80 layers
    (perf_recipes/llama/gb300/llama3.py @067f987d, cpu_offloading_num_layers = 20). All 80 would
    not fit the Grace's share of host memory; the fewest that fit in HBM do, and are chosen."""
    row = {"id": "mb_2604_llama3_70b_gb300_fp8_n64", "gpu": "gb300", "model": "LLAMA3_70B", "precision": "fp8",
           "source": "Megatron-Bridge docs/performance-summary-archive.md, '26.04 NeMo Container'",
           "num_gpus": 64, "tp": 1, "pp": 1, "cp": 1, "vpp": 1, "micro_batch": 2, "global_batch": 256,
           "seq_len": 8192, "zero_stage": 3, "measured_iter_time_s": 6.25}
    base = compose("task=validate")
    config, _, used = prose.place(base, row)
    every = config._replace(train=config.train._replace(offload_layers=jnp.asarray(80.0)))
    assert Reason(int(jctopt.estimate(every).reason)) == Reason.MEMORY  # host memory: the case the test is about
    assert "offload_layers" in used and float(config.train.recompute) == 0.0
    k = float(config.train.offload_layers)
    assert 10 <= k <= 30  # the recipe's 20, within the memory model's reach
    fewer = config._replace(train=config.train._replace(offload_layers=config.train.offload_layers - 1))
    assert Reason(int(jctopt.estimate(fewer).reason)) == Reason.MEMORY


def test_diagnosis_offers_offloading_instead_of_recompute(config):
    """The diagnosis's candidate for a recomputing job offloads the recomputed layers instead:
    under full recompute, all 80 of the stage's layers, none recomputed, so less compute."""
    from jctopt.job import diagnosis as D

    cfg = _llama70b(config, "gb200", "training.recompute=full")
    change = next(ch for ch in D.CHANGES if "offloading" in ch.label)
    assert change.applicable(cfg)
    offloaded = change.apply(cfg)
    assert float(offloaded.train.recompute) == 0.0 and float(offloaded.train.offload_layers) == 80.0
    assert float(jctopt.estimate(offloaded).compute_s) < float(jctopt.estimate(cfg).compute_s)
    assert not change.applicable(_llama70b(config, "gb200", "training.recompute=selective"))
