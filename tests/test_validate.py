"""validate: the exact command-line contract, row mapping and defaults, error per source."""

import re
import subprocess
import sys

import jax.numpy as jnp
import pandas as pd
import prose
import pytest
import runs_rules

import jctopt
from jctopt import ConfigError
from jctopt.config import RECOMPUTE, to_config
from jctopt.config.resources import VALIDATION_DIR, validation_file
from jctopt.job.jct import Reason
from jctopt.runs import cells as runs_cells
from jctopt.runs import place as runs_place
from jctopt.runs import predict as runs_predict
from jctopt.runs import read as runs_read
from jctopt.runs.catalog_models import catalog_model, hybrid_mamba
from jctopt.runs.spellings import RowError, recompute_mode, row_gpu, row_precision
from jctopt.tasks import validate

RUNS = validation_file("runs_dev.csv")


@pytest.fixture(scope="module")
def runs():
    return pd.read_csv(RUNS)


@pytest.fixture(scope="module")
def predicted(compose, runs):
    return runs_predict.run_validate(compose("task=validate"), RUNS)


@pytest.mark.slow
def test_cli_contract(tmp_path, runs):
    small = runs[runs.source.str.contains("Table 1")].head(6).copy()
    v100 = runs[runs.gpu == "v100"].head(1)
    bad = small.head(1).copy()
    bad["id"], bad["tp"], bad["dp"] = "bad_tp", 5, None  # 5 does not divide 24 heads
    extra = small.head(1).copy()
    extra["id"], extra["an_extra_column"] = "extra", "ignored"
    table = pd.concat([small, v100, bad, extra], ignore_index=True)
    table.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "out" / "val.parquet"
    proc = subprocess.run([sys.executable, "-m", "jctopt.app", "task=validate", f"validate.runs={tmp_path}/runs.csv",
                           f"validate.out={out}", f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"median_abs_pct_error=([0-9.]+) n=(\d+)", last)
    assert m, last
    df = pd.read_parquet(out)
    assert df.id.tolist() == table.id.tolist()
    assert {"id", "predicted_iter_time_s", "predicted_mfu_pct", "reason", "compute_s"} <= set(df.columns)
    compared = df.predicted_iter_time_s.notna()
    assert int(m.group(2)) == compared.sum() == len(small) + 1
    assert float(m.group(1)) == pytest.approx(df.abs_pct_error.median(), abs=1e-4)
    by_id = df.set_index("id")
    assert pd.isna(by_id.loc[v100.id.iloc[0], "predicted_iter_time_s"]) and "v100" in by_id.loc[v100.id.iloc[0], "reason"]
    assert pd.isna(by_id.loc["bad_tp", "predicted_iter_time_s"]) and "layout.tp=5" in by_id.loc["bad_tp", "reason"]
    assert (tmp_path / "run" / "validate.md").read_text().startswith("# Validation")
    assert (tmp_path / "run" / "validate.png").stat().st_size > 10_000


def test_row_mapping_and_documented_defaults(compose):
    base = compose("task=validate")
    row = {"id": "r", "source": "NeMo 24.07", "model": "LLAMA3-8B", "params_b": 8.0, "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "seq_len": 8192, "vocab": None, "gpu": "h100_sxm",
           "precision": "fp8", "gpus_per_node": 8, "inter_node": "unknown", "num_gpus": 64, "tp": None, "pp": None,
           "dp": 8, "cp": 1, "ep": 1, "sp": 1, "vpp": None, "micro_batch": 1, "global_batch": 128,
           "recompute": None, "zero_stage": 1}
    cfg, used = prose.row_config(base, row)
    assert cfg.model.vocab == 128256 and cfg.model.glu  # SwiGLU: 8.0 B params with 3 matrices
    assert (cfg.layout.tp, cfg.layout.pp) == (8, 1)
    assert cfg.fabric.name == "ib_ndr400" and cfg.cluster.nics_per_node == 8
    assert cfg.training.precision == "fp8" and cfg.training.recompute == "none" and cfg.training.flash_attention
    assert cfg.training.fused_attention  # NeMo 2024: Transformer Engine's cuDNN attention
    assert set(used) == {"architecture", "tp", "inter_node", "vpp", "recompute"}  # vocab: the catalog's Llama 3 8B
    llama2, used = prose.row_config(base, dict(row, model="Llama 2 13B"))  # not in the catalog: the family rule
    assert llama2.model.vocab == 32000 and "vocab" in used and "architecture" not in used
    row.update(inter_node="roce_1600gbps_node", gpu="a100_class", source="Narayanan et al. 2021")
    cfg, used = prose.row_config(base, row)
    assert cfg.fabric.nic_gbit == 200.0 and cfg.gpu.name == "a100_80gb" and not cfg.training.flash_attention
    assert not cfg.training.fused_attention
    for source, fused in [("pytorch/torchtitan benchmarks (2025-06)", False), ("MosaicML llm-foundry 2024", False),
                          ("NVIDIA/dgxc-benchmarking v25.04 (nemo:25.02.01)", True),
                          ("Megatron-LM README (2024-07, MCore r0.8.0)", True)]:
        assert prose.row_config(base, dict(row, source=source))[0].training.fused_attention == fused, source
    with pytest.raises(RowError, match="precision='int4' is not modelled"):
        prose.row_config(base, dict(row, precision="int4"))
    nvfp4, _ = prose.row_config(base, dict(row, precision="NVFP4"))
    with pytest.raises(ConfigError, match=r"training.precision='nvfp4' is not allowed: bf16 \| fp16 \(gpu=a100_80gb has no nvfp4"):
        to_config(nvfp4)


@pytest.mark.parametrize("cell, precision", [("BF16", "bf16"), ("FP8-CS", "fp8"), ("FP8-CS(inferred)", "fp8"),
                                             ("FP8-MX", "mxfp8"), ("MXFP8(inferred)", "mxfp8"), ("fp16_or_bf16", "bf16"),
                                             ("FP8-blockwise(inferred)", "fp8"), ("NVFP4", "nvfp4"),
                                             ("FP8-DS", "fp8"), ("float8 rowwise", "fp8"), ("fp8_tensorwise", "fp8"),
                                             ("bfloat16", "bf16"), ("FP8 (MXFP8)", "mxfp8"), ("fp8-mxfp8", "mxfp8"),
                                             ("FP8 (current scaling)", "fp8"), ("NVFP4 (BF16 last layers)", "nvfp4")])
def test_precision_spellings_of_the_sources(cell, precision):
    assert row_precision(cell) == precision


@pytest.mark.parametrize("cell, gpu, aliased", [("gb200", "gb200", False), ("DGX-GB200", "gb200", False),
                                                ("HGX B200", "b200", False), ("DGX-GB300", "gb300", False),
                                                ("H100", "h100_sxm", True), ("h100-sxm5-80gb", "h100_sxm", False),
                                                ("a100_class", "a100_80gb", True), ("GB200 NVL72", "gb200", False),
                                                ("v100", "v100", False), ("NVIDIA H100 80GB HBM3", "h100_sxm", True),
                                                ("NVIDIA DGX H100", "h100_sxm", False), ("H200 SXM 141GB", "h200", False),
                                                ("A100-SXM4-40GB", "a100_40gb", False), ("A100 SXM", "a100_80gb", True),
                                                ("AMD Instinct MI355X", "mi355x", False), ("MI350X", "mi350x", False),
                                                ("B300 (Blackwell Ultra)", "b300", False),
                                                ("NVIDIA GB200 Grace Blackwell Superchip", "gb200", False),
                                                ("H100 PCIe", "h100_pcie", False), ("H200 NVL", "h200_nvl", False),
                                                ("B300 SXM6", "b300", False), ("B200-SXM6", "b200", False),
                                                ("Blackwell Ultra GB300", "gb300", False), ("B300 HGX 8-GPU", "b300", False),
                                                ("GB300 NVL72 rack", "gb300", False), ("A100 40 GB", "a100_40gb", False),
                                                ("GB200 NVL4", "gb200_nvl4", False), ("8x B300", "b300", False),
                                                ("8xH100 SXM", "h100_sxm", False), ("B200 x 8", "b200", False),
                                                ("MI300X 192", "mi300x", False)])
def test_gpu_spellings_of_the_sources(cell, gpu, aliased):
    """Case, separators, a parenthesis, a GPU count and the vendor, system, architecture or HBM
    words are spelling; an H100 or A100 of unstated form factor or memory is an assumption, recorded
    among the defaults used; PCIe and NVL name other parts, outside the catalog."""
    assert row_gpu(cell) == (gpu, aliased)


def test_table_spellings_of_layout_cells(compose):
    """Benchmark tables print "n/a" for a parallelism that does not apply and annotate the
    recompute mode; both are read, and a mode the model lacks is refused by name."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Some stack 2025", "model": "GPT", "layers": 24, "hidden": 2048, "ffn_hidden": 8192,
           "heads": 16, "seq_len": 2048, "vocab": 51200, "gpu": "h100_sxm", "precision": "bf16", "num_gpus": 16,
           "tp": 2, "pp": 1, "cp": 1, "ep": "n/a", "vpp": "n/a", "global_batch": 64, "recompute": "selective_op"}
    cfg, used = prose.row_config(base, row)
    assert cfg.layout.vpp == 1 and cfg.layout.ep == 1 and {"vpp", "ep"} <= set(used)
    assert cfg.training.recompute == "selective"
    cfg, _ = prose.row_config(base, dict(row, kv_heads="n/a"))  # a column read as blank before _int
    assert cfg.model.n_kv_heads == 16
    for cell, mode in (("Off", "none"), ("no (AC disabled)", "none"), ("full/uniform", "full")):
        cfg, _ = prose.row_config(base, dict(row, recompute=cell))
        assert cfg.training.recompute == mode, cell
    with pytest.raises(RowError, match=r"recompute='offload' is not one of none, selective, full"):
        prose.row_config(base, dict(row, recompute="offload"))


def test_a_gpu_outside_the_catalog_names_itself(compose):
    row = {"id": "r", "source": "Paper 2024", "model": "GPT", "layers": 24, "hidden": 2048, "ffn_hidden": 8192,
           "heads": 16, "seq_len": 2048, "vocab": 51200, "gpu": "V100", "precision": "fp16", "num_gpus": 8,
           "tp": 1, "pp": 1, "global_batch": 64}
    with pytest.raises(RowError, match=r"gpu='V100' is not in the catalog"):
        prose.row_config(compose("task=validate"), row)
    cfg, used = prose.row_config(compose("task=validate"), dict(row, gpu="DGX-H100", precision="bf16"))
    assert cfg.gpu.name == "h100_sxm" and "gpu" not in used


# Regression guards: today's median |error| per source plus a margin. They make a change that
# degrades fidelity fail CI; calibration (task=calibrate) is what brings them to the targets.
BOUNDS = {  # shipped (calibrated) medians + ~2 points: a regression guard, not the targets
    "Narayanan et al. 2021 (arXiv:2104.04473), Table 1": 6.5,
    # 6.0 % (8.0 % since the fit to both files, before cuDNN's measured rate on Hopper; 4.8 % fitted to runs_dev.csv alone)
    "Megatron-LM README (2024-07, MCore r0.8.0), model_table.png": 9.5,
    # 16.0 %: no split stated, placed at the fastest that fits (13.4 % too fast at 96 GPUs, 19.3 %
    # too slow at 4608)
    "Megatron-LM README (2024-07, MCore r0.8.0), strong-scaling text": 18.5,
    "Korthikanti et al. 2022 (arXiv:2205.05198), Tables 3+5": 5.0,
    "Korthikanti et al. 2022 (arXiv:2205.05198), Appendix C": 3.0,
    "Korthikanti et al. 2022 (arXiv:2205.05198), Sec 6.3": 3.5,
    "MosaicML llm-foundry benchmarking README, \"A100 80GB with 1600 Gbps node-node interconnect (RoCE)\"": 5.0,
    "MosaicML llm-foundry benchmarking README, \"A100 40GB with 1600 Gbps node-node interconnect (RoCE)\"": 5.0,
    # 4.9 % (too fast) since cuDNN's attention runs at its measured rate on Hopper (2.2 % before)
    "NeMo 24.07 performance_summary.md, Pretraining table": 6.0,
    # 7.5 %, its runs eager PyTorch (fms-fsdp, no torch.compile; 8.0 % fitted to runs_dev.csv alone)
    "PyTorch blog 2024-03-13 \"Maximizing training throughput using PyTorch FSDP\", Table 1": 10.0,
    "MosaicML llm-foundry benchmarking README, \"H100 80GB BF16 (Large Scale, >= 128 GPUs)\"": 6.0,
    # 8.2 %: six PTD-P rows within 1.4 %, six DeepSpeed ZeRO-3 rows 15-43 % too fast (10.2 % before
    # DeepSpeed's gather for the recomputed forward, model.zero3_gathers)
    "Narayanan et al. 2021 (arXiv:2104.04473), Table 2": 10.0,
    "MosaicML llm-foundry benchmarking README, \"H100 80GB BF16\"": 5.5,
    "MosaicML llm-foundry benchmarking README, \"H100 80GB FP8\"": 5.5,
}


@pytest.mark.slow
def test_all_rows_meet_the_fidelity_targets(predicted):
    """The targets on runs_dev.csv: median |error| <= 5 %, 90th percentile <= 12 %. Shipped
    (fitted to runs_dev.csv + runs_dev2.csv, 2026-11-26): 3.7 % and 11.5 % (3.1 / 11.6 % before
    eager PyTorch's elementwise traffic was priced, model.eager). Every row whose GPU
    is in the catalog is placed; 280 have a measured time (the two Llama 2 34B rows with the
    fms-fsdp shapes of catalog model llama2_34b)."""
    err = predicted.abs_pct_error.dropna()
    assert len(err) == 280
    assert err.median() <= 5.0 and err.quantile(0.9) <= 12.0


def test_every_placeable_source_is_guarded(predicted):
    placed = set(predicted[predicted.abs_pct_error.notna()].source)
    assert placed <= set(BOUNDS)


@pytest.fixture(scope="module")
def predicted_dev2(compose):
    return runs_predict.run_validate(compose("task=validate"), validation_file("runs_dev2.csv"))


# runs_dev2.csv's sources: shipped medians (catalog fitted 2026-11-26 to both files; in the comment, as of
# 2026-11-27) + ~2 points.
DEV2_BOUNDS = {
    'NVIDIA/dgxc-benchmarking v24.11.1..v25.01.1 (ghcr.io/nvidia/jax:maxtext-2024-12-09), README "Expected Performance" table': 6.5,  # 5.1 (2.5 before cuDNN's measured rate on Hopper)
    'NVIDIA/dgxc-benchmarking v24.11.1..v25.01.1 (ghcr.io/nvidia/jax:pax-2024-03-04), README "Expected Performance" table': 17.0,  # 15.2 (16.9 before its remat policies were read)
    'NVIDIA/dgxc-benchmarking v24.11.1..v25.01.1 (nemo:24.05), README "Expected Performance" table': 5.5,  # 4.3
    'NVIDIA/dgxc-benchmarking v24.11.1..v25.01.1 (nemo:24.09), README "Expected Performance" table': 6.0,  # 2.3
    'NVIDIA/dgxc-benchmarking v24.11.1..v25.03 (nemo:24.09), README "Expected Performance" table': 3.5,  # 1.3
    'NVIDIA/dgxc-benchmarking v25.02..v25.03 (nemo:24.12), README "Expected Performance" table': 6.5,  # 1.7
    'NVIDIA/dgxc-benchmarking v25.02..v25.04.01 (ghcr.io/nvidia/jax:25.01-maxtext-py3), README "Expected Performance" table': 11.5,  # 9.4
    'NVIDIA/dgxc-benchmarking v25.02..v25.04.01 (nemo:24.12), README "Expected Performance" table': 6.5,  # 3.7
    'NVIDIA/dgxc-benchmarking v25.04..v25.04.01 (nemo:25.02.01), README "Expected Performance" table': 6.5,  # 2.9
    'NVIDIA/dgxc-benchmarking v25.05..v25.05.05 (nemo:25.04.00), README "Expected Performance" table': 5.0,  # 2.9
    'NVIDIA/dgxc-benchmarking v25.05..v25.05.05 (nemo:25.04.01), README "Expected Performance" table': 5.0,  # 2.6
    'NVIDIA/dgxc-benchmarking v25.05.01..v25.05.05 (nemo:25.04.01), README "Expected Performance" table': 4.0,  # 1.9
    'NeMo Framework user guide performance summary, NeMo 25.02 container, DGX-B200, pre-training table': 7.0,  # 4.6
    'NeMo Framework user guide performance summary, NeMo 25.02 container, DGX-H100, pre-training table': 11.0,  # 7.0
    'NeMo Framework user guide performance summary, NeMo 25.04 container, DGX-GB200, pre-training table': 7.5,  # 5.3 (5.9 before Megatron-FSDP's own overlap)
    'NeMo Framework user guide performance summary, NeMo 25.07 container, DGX-GB200, pre-training table': 11.0,  # 9.2 (12.5 before Megatron-FSDP's own overlap)
    # 10.8: read with the interleaving the report states (fastest depth, 8 chunks per rank), too fast;
    # 6.5 when it was read as one chunk per rank
    'Nemotron-4 340B Technical Report (NVIDIA 2024, arXiv:2406.11704), Table 2 - via secondary transcriptions': 11.5,
    'Parmar et al. 2024, Nemotron-4 15B Technical Report (arXiv:2402.16819v2), Table 2': 7.0,  # 6.9
    'pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (torchtitan 820504e, torch 38410cf9), Llama3 70b table': 5.5,  # 3.5
    'pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (torchtitan 820504e, torch 38410cf9), Llama3 8b table': 16.0,  # 13.7
    'pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy on WhiteFiber, torchtitan e7c0cae, 2025-06)': 7.5,  # 5.0
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 1': 10.0,  # 7.5
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 2': 13.0,  # 10.8
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 3': 9.0,  # 6.9
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 4': 5.0,  # 2.6
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 5': 13.5,  # 11.1
    'pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, 2024-12), Table 6': 7.5,  # 5.2
    'pytorch/torchtitan docs/performance.md (2024-04, FSDP2 on 64 A100 80GB), Llama 2 table': 5.5,  # 3.2
    'pytorch/torchtitan docs/performance.md (2024-04, FSDP2 on 64 A100 80GB), Llama 3 table': 8.0,  # 5.6
    'pytorch/torchtitan docs/performance.md (2024-08, Llama 3.1 405B on 128 H100, FSDP2 x TP)': 9.0,  # 6.8
}


@pytest.mark.slow
@pytest.mark.parametrize("fixture, source", [("predicted", s) for s in sorted(BOUNDS)]
                         + [("predicted_dev2", s) for s in sorted(DEV2_BOUNDS)])
def test_median_error_per_source_within_bound(request, fixture, source):
    predicted = request.getfixturevalue(fixture)
    rows = predicted[(predicted.source == source) & predicted.abs_pct_error.notna()]
    assert len(rows) > 0
    assert rows.abs_pct_error.median() <= {**BOUNDS, **DEV2_BOUNDS}[source]


def test_dev2_is_placed_and_blackwell_is_fitted(predicted_dev2):
    """Every row placed; shipped (fitted to runs_dev.csv + runs_dev2.csv, 2026-11-26): median
    4.40 %, p90 14.1 % (targets 5 / 15 %); H100 4.4 %, B200 4.6 %, GB200 3.3 % (target <= 10 %
    each). The fit before eager PyTorch's elementwise traffic was priced (model.eager) gave 5.08 /
    13.7 %. Before B200/GB200 rows were fitted they were 26 % too fast."""
    df = predicted_dev2
    assert df.predicted_iter_time_s.notna().all() and len(df) == 315
    assert set(df[df.abs_pct_error.notna()].source) <= set(DEV2_BOUNDS)
    err = df.abs_pct_error
    assert err.median() <= 5.0 and err.quantile(0.9) <= 15.0
    assert err[df.gpu == "h100_sxm"].median() <= 5.0
    for gpu in ("b200", "gb200"):
        assert err[df.gpu == gpu].median() <= 10.0, gpu


# torchtitan's tables print each run's peak memory ("memory 82.4 GiB": torch.cuda's max reserved).
PRINTED_MEMORY = re.compile(r"memory:?\s*([0-9.]+)\s*GiB")


def test_torchtitan_peak_memory_against_their_printed_peaks(predicted_dev2):
    """The 20 torchtitan rows of runs_dev2.csv that print their peak memory: the memory model
    within a median 10 % of it (7.4 %: the per-op policy keeps only what it saves, model.sac, and the
    eager loss its fp32 logits three times over, logit_bytes 12; 30.9 % before, the selective
    rows 7-48 % over and the full-recompute ones 12-45 % under), the 8B rows within 10 % each."""
    runs = pd.read_csv(validation_file("runs_dev2.csv")).set_index("id")
    printed = runs.notes.str.extract(PRINTED_MEMORY)[0].astype(float) * 2**30 / 1e9
    titan = runs.source.str.contains("torchtitan") & printed.notna()
    df = predicted_dev2.set_index("id").loc[runs.index[titan]]
    error = 100.0 * (df.mem_total_gb / printed[titan] - 1.0)
    assert len(error) == 20
    assert error.abs().median() <= 10.0
    small = runs.loc[error.index].params_b <= 8
    assert error[small].abs().max() <= 10.0


@pytest.fixture(scope="module")
def predicted_mbridge(compose):
    return runs_predict.run_validate(compose("task=validate"), validation_file("runs_mbridge_dense.csv"))


@pytest.mark.slow
def test_mbridge_dense_is_placed_and_guarded(predicted_mbridge):
    """runs_mbridge_dense.csv (Megatron-Bridge's dense Llama tables, containers 25.09-26.06, not
    in the fit): every row placed. Shipped (catalog fitted 2026-11-26 to runs_dev.csv +
    runs_dev2.csv; GB300's GEMM rates set by its measured step ratio to GB200, 2026-11-28): median
    11.2 %; H100 4.1 %, B200 9.7 %, GB200 11.3 %, GB300 12.9 %, the Blackwell rows too slow (2026
    stacks run Blackwell faster than the 2025 ones fitted). The bounds are those figures + ~2
    points: a regression guard, not a target."""
    df = predicted_mbridge
    assert len(df) == 89 and df.predicted_iter_time_s.notna().all()
    err = df.abs_pct_error
    assert err.median() <= 13.0
    for gpu, bound in {"h100_sxm": 6.0, "b200": 11.5, "gb200": 13.5, "gb300": 15.0}.items():
        assert err[df.gpu == gpu].median() <= bound, gpu


@pytest.fixture(scope="module")
def predicted_mbridge_moe(compose):
    return runs_predict.run_validate(compose("task=validate"), validation_file("runs_mbridge_moe.csv"))


@pytest.mark.slow
def test_mbridge_moe_is_placed_and_guarded(predicted_mbridge_moe):
    """runs_mbridge_moe.csv (Megatron-Bridge's MoE tables, containers 25.09-26.08, the rows
    runs_moe_dev.csv lacks; not in the fit): every row placed. Shipped: median 15.3 %, the
    families runs_moe_dev.csv has or resembles close (DeepSeek-V3 2.3 %, Kimi K2 1.1 %, Qwen3
    30B-A3B 4.5 %, Qwen3 235B-A22B 10.1 %), the two it has nothing like too fast: GPT-OSS 120B
    33.8 %, Nemotron 3 Nano 10.1 % and Super 21.9 %. The bounds are those figures + ~2 points: a
    regression guard, not a target."""
    df = predicted_mbridge_moe
    assert len(df) == 146 and df.predicted_iter_time_s.notna().all()
    err = df.abs_pct_error
    assert err.median() <= 17.0
    bounds = {"DeepSeekV3": 4.5, "Kimi_K2": 3.5, "Qwen3_30B_a3B": 6.5, "Qwen3_235B_a22B": 12.0,
              "GPT OSS 120B": 36.0, "Nemotron_3_Nano": 12.0, "Nemotron_3_Super": 24.0}
    for model, bound in bounds.items():
        assert err[df.model == model].median() <= bound, model


def test_package_errata_hold():
    """The package's copy of runs_dev2.csv corrects the eight Nemotron-4 340B rows of dgxc-benchmarking
    v25.04: its README prints VP=NA, its launcher runs VP=12; that of runs_moe_dev.csv reads
    torchtitan's two Llama 4 Scout rows at local batch 1, as pytorch/ao prints the same table
    (data/validation/README.md, Errata). A copy taken afresh from ../shared would lose them."""
    dev2 = pd.read_csv(validation_file("runs_dev2.csv"))
    rows = dev2[dev2.id.str.startswith("dgxc_n4_2502_nemotron4_340b")]
    assert len(rows) == 8 and (rows.vpp == 12).all() and rows.notes.str.contains("ERRATUM").all()
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    scout = moe[moe.id.str.startswith("torchtitan_llama4_scout_gb200")]
    assert len(scout) == 2 and (scout.micro_batch == 1).all() and (scout.global_batch == 256).all()
    assert scout.notes.str.startswith("ERRATUM").all()
    # Step = local batch x seq_len / tokens per second per GPU: 8192 / 6169 and 8192 / 7401 s.
    assert sorted(scout.measured_iter_time_s) == pytest.approx([8192 / 7401, 8192 / 6169], rel=1e-4)


@pytest.mark.parametrize("source, year", [
    ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (torchtitan 820504e)", 2025),
    ("Megatron-LM README (2024-07, MCore r0.8.0), strong-scaling text", 2024),
    ("Narayanan et al. 2021 (arXiv:2104.04473), Table 1 on 2048 GPUs", 2021),
    ("NVIDIA-NeMo/Megatron-Bridge docs, '26.02 NeMo Container'", 2026),
    ("a source that names no year", 2024),
])
def test_a_source_names_its_year(source, year):
    """The latest year a source names, after an underscore too; a GPU count (2048) is not one."""
    assert runs_rules.source_year({"source": source}) == year


@pytest.mark.parametrize("source, notes, logit_bytes", [
    ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, 2024-12)", "compile", 12.0),
    ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md", "torch.compile on", 4.0),
    ("crusoecloud/torchtitan README 2025", "[compile] enable=false; compile off", 12.0),
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md 2026", "", 4.0),
])
def test_an_eager_torchtitan_loss_keeps_its_logits_three_times(compose, source, notes, logit_bytes):
    """torchtitan's loss runs PyTorch's eager cross-entropy on fp32 logits (12 bytes per logit at
    its backward's peak) with torch.compile off and at its 2024 commits; compiled, and under
    Megatron's fused cross-entropy, the fp32 logits alone (4)."""
    row = {"id": "r", "source": source, "model": "Llama", "layers": 32, "hidden": 4096, "ffn_hidden": 14336,
           "heads": 32, "kv_heads": 8, "seq_len": 8192, "vocab": 128256, "gpu": "h100_sxm", "precision": "bf16",
           "gpus_per_node": 8, "inter_node": "ib_ndr400x8", "num_gpus": 8, "tp": 1, "pp": 1, "dp": 8,
           "global_batch": 8, "recompute": "selective", "notes": notes}
    cfg, _ = prose.row_config(compose("task=validate"), row)
    assert cfg.training.logit_bytes == logit_bytes


def test_blank_sp_and_zero_follow_the_year_rules(compose):
    """sp and the asynchronous TP backward on from 2022, FSDP's one ZeRO-3 gather per layer from
    2022 (DeepSpeed's one per weight matrix before, and again for a recomputed forward), distributed optimizer and DP overlap from
    2023, TP/PP overlap and hybrid sharding from 2024 (full in torchtitan and AutoModel, whose FSDP2
    shards over every data-parallel rank); sharding named in the notes wins."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Some stack 2024", "model": "GPT", "layers": 24, "hidden": 2048, "ffn_hidden": 8192,
           "heads": 16, "seq_len": 2048, "vocab": 51200, "gpu": "h100_sxm", "precision": "bf16", "gpus_per_node": 8,
           "inter_node": "ib_ndr400x8", "num_gpus": 16, "tp": 2, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "sp": None,
           "vpp": 1, "micro_batch": 1, "global_batch": 64, "recompute": "none", "zero_stage": None}
    cfg, used = prose.row_config(base, row)
    assert cfg.training.seq_parallel and cfg.training.zero_stage == 1 and cfg.training.mp_comm_overlap
    assert "sp" in used  # zero_stage: the conversion's year rule, written as a cell
    assert cfg.training.dp_overlap and cfg.training.tp_async_backward
    cfg, _ = prose.row_config(base, dict(row, zero_stage=3))  # the sharding flags matter at ZeRO-3
    assert cfg.training.hybrid_shard and cfg.training.zero3_collectives_per_layer == 1 and not cfg.training.zero3_regather
    cfg, _ = prose.row_config(base, dict(row, source="Paper 2021", zero_stage=3))
    assert cfg.training.zero3_collectives_per_layer == 4  # QKV, output, MLP in, MLP out
    assert cfg.training.zero3_regather  # DeepSpeed gathers again for a recomputed forward
    cfg, _ = prose.row_config(base, dict(row, source="Paper 2021"))
    assert not cfg.training.seq_parallel and cfg.training.zero_stage == 0 and not cfg.training.mp_comm_overlap
    assert not cfg.training.dp_overlap and not cfg.training.hybrid_shard and not cfg.training.tp_async_backward
    cfg, _ = prose.row_config(base, dict(row, source="Paper 2021", ffn_hidden=5461, zero_stage=3))
    assert cfg.training.zero3_collectives_per_layer == 5  # + the GLU gate
    cfg, _ = prose.row_config(base, dict(row, notes="FSDP FULL_SHARD"))
    assert not cfg.training.hybrid_shard  # the notes name the strategy
    for stack in ("pytorch/torchtitan benchmarks 2024-12", "NVIDIA-NeMo/Automodel docs 2025"):
        cfg, used = prose.row_config(base, dict(row, source=stack))
        assert cfg.training.zero_stage == 3 and not cfg.training.hybrid_shard and "hybrid_shard" in used
        cfg, _ = prose.row_config(base, dict(row, source=stack, notes="HSDP 2 x 8"))
        assert cfg.training.hybrid_shard
    for notes in ("FSDP HYBRID_SHARD", "the production run used HSDP"):
        cfg, _ = prose.row_config(base, dict(row, source="Paper 2021", notes=notes, zero_stage=3))
        assert cfg.training.hybrid_shard
    cfg, _ = prose.row_config(base, dict(row, tp=1, dp=16))
    assert not cfg.training.seq_parallel  # no SP without TP
    assert cfg.training.metric_loss_passes == 0
    cfg, _ = prose.row_config(base, dict(row, source="MosaicML llm-foundry benchmarking README"))
    assert cfg.training.metric_loss_passes == 2  # Composer's train cross-entropy and perplexity


def test_a_blank_split_cell_is_what_the_stated_dp_leaves(compose):
    """A row that states dp: a blank cp (tables without a CP column) is num_gpus / (dp tp pp), a
    blank pp or tp num_gpus / (dp x the others, cp 1 where blank too); a split the count does
    not divide is refused by the blank cell's name. 128 GPUs, dp 2, tp 4, pp 8 -> cp 2."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Some stack 2025", "model": "GPT", "layers": 32, "hidden": 4096, "ffn_hidden": 16384,
           "heads": 32, "seq_len": 8192, "vocab": 51200, "gpu": "h100_sxm", "precision": "bf16", "gpus_per_node": 8,
           "num_gpus": 128, "tp": 4, "pp": 8, "dp": 2, "cp": None, "micro_batch": 1, "global_batch": 64,
           "recompute": "none"}
    cfg, used = prose.row_config(base, row)
    assert (cfg.layout.tp, cfg.layout.pp, cfg.layout.cp) == (4, 8, 2) and "cp" in used
    cfg, used = prose.row_config(base, dict(row, pp=None, cp=2))
    assert (cfg.layout.tp, cfg.layout.pp, cfg.layout.cp) == (4, 8, 2) and "pp" in used
    cfg, used = prose.row_config(base, dict(row, tp=None))  # cp blank beside it: 1
    assert (cfg.layout.tp, cfg.layout.pp, cfg.layout.cp) == (8, 8, 1) and {"tp", "cp"} <= set(used)
    with pytest.raises(RowError, match=r"pp is blank and num_gpus=128 is not a multiple of dp x the other two \(24\)"):
        prose.row_config(base, dict(row, pp=None, cp=3))
    with pytest.raises(RowError, match="pp is blank and its default rule does not apply"):
        prose.row_config(base, dict(row, pp=None, dp=None))  # nothing pins the depth
    # tp and pp both blank: TP fills the 8-GPU node as far as num_gpus / (dp cp) allows, PP the rest.
    for dp, split in ((2, (8, 8)), (32, (4, 1)), (128, (1, 1)), (8, (8, 2))):
        cfg, used = prose.row_config(base, dict(row, tp=None, pp=None, cp=1, dp=dp))
        assert (cfg.layout.tp, cfg.layout.pp) == split and "tp" in used
    with pytest.raises(RowError, match=r"tp and pp blank and num_gpus=128 is not a multiple of dp x cp = 96"):
        prose.row_config(base, dict(row, tp=None, pp=None, cp=3, dp=32))


def test_blank_micro_batch_is_the_replica_batch_under_fsdp(compose):
    """torchtitan and MaxText run a data-parallel replica's batch at once: with ZeRO-3 and no
    pipeline the blank micro-batch is global_batch / dp (one micro-batch per step); otherwise
    Megatron's 1."""
    base = compose("task=validate")
    row = {"id": "r", "source": "torchtitan 2025", "model": "Llama", "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "seq_len": 8192, "vocab": 128256, "gpu": "h100_sxm",
           "precision": "bf16", "gpus_per_node": 8, "inter_node": "ib_ndr400x8", "num_gpus": 64, "tp": 8, "pp": 1,
           "dp": 8, "cp": 1, "ep": 1, "sp": 1, "vpp": 1, "micro_batch": None, "global_batch": 96,
           "recompute": "selective", "zero_stage": 3}
    cfg, used = prose.row_config(base, row)
    assert cfg.training.micro_batch == 12 and "micro_batch" in used  # 96 / dp 8
    cfg, _ = prose.row_config(base, dict(row, pp=2, dp=4))
    assert cfg.training.micro_batch == 12  # torchtitan's pipeline: pp = 2 micro-batches of 24 / 2
    cfg, _ = prose.row_config(base, dict(row, pp=2, dp=4, source="MaxText 2025"))
    assert cfg.training.micro_batch == 1  # other pipelines: Megatron's micro-batch of 1
    cfg, _ = prose.row_config(base, dict(row, zero_stage=1))
    assert cfg.training.micro_batch == 1


def test_torchtitan_rows_run_on_the_hardware_their_notes_state(compose):
    """torchtitan's Table 5 (Llama 3.1 405B, PP 8, local batch 32, "Interleaved 1F1B", vpp and
    micro-batch not printed): torchtitan's defaults, pp = 8 micro-batches of 4 and two stages
    per rank; Meta's Grand Teton H100s as the notes state them: 96 GB of HBM2e at 2.4 TB/s,
    a 500 W power limit, and "backend RDMA 400 Gb/s per GPU" (unknown_400gbps per GPU, not per
    node as where the notes say nothing)."""
    dev2 = pd.read_csv(validation_file("runs_dev2.csv"))
    row = _row(dev2, "torchtitan2412_t5_405b_512g_interleaved1f1b")
    base = compose("task=validate")
    cfg, used = prose.row_config(base, row)
    # torchtitan's defaults, written as the row's cells by scripts/convert_runs.py
    assert (cfg.layout.vpp, cfg.training.micro_batch) == (2, 4) and not {"vpp", "micro_batch"} & set(used)
    assert (cfg.gpu.hbm_gb, cfg.gpu.hbm_tbps, cfg.cluster.gpu_power_limit_w) == (96.0, 2.4, 500.0)
    assert (cfg.fabric.nic_gbit, cfg.cluster.nics_per_node) == (400.0, 8)
    one_f_one_b, _ = prose.row_config(base, _row(dev2, "torchtitan2412_t5_405b_512g_1f1b"))
    assert one_f_one_b.layout.vpp == 1
    # The file's inter_node is roce400, as scripts/convert_runs.py writes "unknown_400gbps" per GPU.
    assert row["inter_node"] == "roce400"
    per_node, _ = prose.row_config(base, dict(row, inter_node="unknown_400gbps",
                                              notes="400Gbps inter-node (fabric/NIC count not stated)"))
    assert per_node.fabric.nic_gbit == 50.0 and per_node.cluster.gpu_power_limit_w is None
    # The limit as other pages word it (pytorch/ao's B200 table: "8xB200 GPUs limited to 750W").
    for notes, watts in (("8xB200 GPUs limited to 750W", 750.0), ("a 700 W power cap", 700.0),
                         ("power-capped at 600 W", 600.0), ("a 1000W power limit", 1000.0), ("limited to 5 W", None)):
        capped, _ = prose.row_config(base, dict(row, notes=notes))
        assert capped.cluster.gpu_power_limit_w == watts, notes


def test_torchtitan_tp_is_exposed_unless_async_tp_and_fsdp2_is_zero3(compose):
    """torchtitan's DTensor TP runs its collectives between the GEMMs (no Megatron async
    backward either) unless the notes name async TP; the asyncTP benchmark's "vanilla TP" rows
    mention the async-TP speedup column and must still read as vanilla. torchtitan and AutoModel
    rows silent on ZeRO shard parameters, gradients and optimizer state (FSDP2: ZeRO-3)."""
    dev2 = pd.read_csv(validation_file("runs_dev2.csv"))
    base = compose("task=validate")
    vanilla, _ = prose.row_config(base, _row(dev2, "torchtitan2506_asynctp_70b_256g_bf16_vanillatp"))
    assert "async-TP speedup" in _row(dev2, "torchtitan2506_asynctp_70b_256g_bf16_vanillatp")["notes"]
    assert not vanilla.training.mp_comm_overlap and not vanilla.training.tp_async_backward
    for row_id in ("torchtitan2412_t4_70b_256g_asynctp", "torchtitan2408_405b_128g_float8_asynctp",
                   "torchtitan2506_asynctp_70b_256g_bf16_asynctp"):  # the last is vanilla's twin, used below
        asynctp, _ = prose.row_config(base, _row(dev2, row_id))
        assert asynctp.training.mp_comm_overlap, row_id
    for row_id in ("torchtitan2412_t4_70b_256g_2d", "torchtitan2408_405b_128g_float8"):
        plain, _ = prose.row_config(base, _row(dev2, row_id))
        assert not plain.training.mp_comm_overlap, row_id
    # Same layout, same hardware: vanilla exposes what async TP hides, and nothing else moves.
    slow, fast = (jctopt.estimate(to_config(c)) for c in (vanilla, asynctp))
    assert float(slow.tp_comm_s) > float(fast.tp_comm_s)
    assert float(slow.compute_s) == pytest.approx(float(fast.compute_s), rel=1e-9)
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    for row_id in ("torchtitan_llama4_scout_gb200_bf16_n256", "am_deepseek_v3_h100_bf16_n256"):
        cfg, used = prose.row_config(base, _row(moe, row_id))
        assert cfg.training.zero_stage == 3 and "zero_stage" in used, row_id
    megatron, _ = prose.row_config(base, _row(moe, "mb_2604_qwen3_30b_a3b_b200_mxfp8_n8_gbs512"))
    assert megatron.training.zero_stage == 1  # Megatron-Core's distributed optimizer


def _row(table: pd.DataFrame, row_id: str) -> dict:
    return table[table.id == row_id].iloc[0].to_dict()


def test_blank_global_batch_from_the_rows_throughput_or_one_micro_batch_per_replica(compose):
    """A silent global batch: the row's step time x tokens/s per GPU x GPUs / seq_len (rounded
    to whole micro-batches per replica) where it states both; else dp x micro_batch (x pp)."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2025 page", "model": "Llama", "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "seq_len": 131072, "vocab": 128256, "gpu": "h100_sxm",
           "precision": "bf16", "gpus_per_node": 8, "inter_node": "ib_ndr400x8", "num_gpus": 64, "tp": 8, "pp": 1,
           "dp": 2, "cp": 4, "micro_batch": 1, "global_batch": None, "recompute": "full",
           "measured_iter_time_s": 20.0, "tokens_per_s_per_gpu": 410.0}
    cfg, used = prose.row_config(base, row)
    assert cfg.training.global_batch == 4 and "global_batch" in used  # 20 x 410 x 64 / 131072 = 4.0
    cfg, _ = prose.row_config(base, dict(row, tokens_per_s_per_gpu=None))
    assert cfg.training.global_batch == 2  # dp 2 x micro-batch 1
    cfg, _ = prose.row_config(base, dict(row, tokens_per_s_per_gpu=None, pp=2, dp=1, cp=4))
    assert cfg.training.global_batch == 2  # dp 1 x micro-batch 1 x pp 2


@pytest.mark.parametrize("key, node_gbit", [
    ("ib_hdr200x8", 1600), ("ib_ndr400x8", 3200), ("ib_hdr200x4", 800), ("ib_edr100x8", 800),
    ("roce400x8", 3200), ("roce200x8", 1600), ("roce_1600gbps_node", 1600), ("omnipath", 800),
    ("unknown_400gbps", 400), ("unknown_800gbps", 800), ("unknown", 3200)])
def test_every_documented_inter_node_key_is_placed(compose, key, node_gbit):
    """The inter_node keys of the validation README, as Gbit/s per 8-GPU H100 node by hand:
    NICs x rate; Omni-Path 100 one port per GPU; unknown_X X per node where the notes do not say
    per GPU; unknown the GPU's reference fabric (NDR400, one NIC per GPU)."""
    row = {"id": "r", "source": "A 2024 page", "model": "Llama", "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "seq_len": 8192, "vocab": 128256, "gpu": "h100_sxm",
           "precision": "bf16", "gpus_per_node": 8, "inter_node": key, "num_gpus": 64, "tp": 8, "pp": 1,
           "dp": 8, "global_batch": 64, "recompute": "full"}
    cfg, _ = prose.row_config(compose("task=validate"), row)
    assert cfg.fabric.nic_gbit * cfg.cluster.nics_per_node == pytest.approx(node_gbit)


@pytest.mark.parametrize("cell, fabric, node_gbit", [
    ("8x 400G NDR InfiniBand", "ib_ndr400", 3200), ("RoCEv2 200 Gb/s x 8", "roce400", 1600),
    ("IB HDR", "ib_hdr200", 1600), ("4x NDR", "ib_ndr400", 1600), ("Spectrum-X 400G Ethernet", "roce400", 3200),
    ("100 Gb/s Ethernet TCP", "eth100_tcp", 800), ("InfiniBand XDR 800 Gb/s (4 per node)", "ib_xdr800", 3200)])
def test_inter_node_written_out_in_words(compose, cell, fabric, node_gbit):
    """An inter_node cell in words names the fabric kind (InfiniBand or its generation, RoCE or
    RDMA Ethernet, TCP), the NIC rate (stated, else the generation's) and the NIC count (one per
    GPU where none is given): Gbit/s per 8-GPU node by hand."""
    row = {"id": "r", "source": "A 2025 page", "model": "Llama", "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "seq_len": 8192, "vocab": 128256, "gpu": "h100_sxm",
           "precision": "bf16", "gpus_per_node": 8, "inter_node": cell, "num_gpus": 64, "tp": 8, "pp": 1,
           "dp": 8, "global_batch": 64, "recompute": "full"}
    cfg, used = prose.row_config(compose("task=validate"), row)
    assert cfg.fabric.name == fabric and "inter_node" not in used
    assert cfg.fabric.nic_gbit * cfg.cluster.nics_per_node == pytest.approx(node_gbit)


def test_blank_recompute_is_the_fewest_layers_that_fit(compose):
    """Llama 2 70B on 64 H100s with ZeRO-3 (full), 2 x 4096 tokens per GPU: selective recompute does
    not fit, full does; the least that fits recomputes only some layers (block method)."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Some JAX stack 2025", "model": "Llama 2 70B", "layers": 80, "hidden": 8192,
           "ffn_hidden": 28672, "heads": 64, "kv_heads": 8, "seq_len": 4096, "vocab": 32000, "gpu": "h100_sxm",
           "precision": "bf16", "gpus_per_node": 8, "inter_node": "ib_ndr400x8", "num_gpus": 64, "tp": 1, "pp": 1,
           "dp": 64, "cp": 1, "ep": 1, "sp": 0, "vpp": 1, "micro_batch": 2, "global_batch": 128,
           "recompute": None, "zero_stage": 3, "notes": "FSDP FULL_SHARD"}
    rc, _ = prose.row_config(base, row)
    chosen = runs_place._least_recompute_that_fits(rc)
    share = float(chosen.train.recompute) - 1.0
    assert 0.0 < share < 1.0
    k = round(share * 80)
    assert share == pytest.approx(k / 80, abs=1e-6)
    fits = jctopt.estimate(chosen).reason != Reason.MEMORY
    one_fewer = chosen._replace(train=chosen.train._replace(recompute=jnp.asarray(1.0 + (k - 1) / 80)))
    assert bool(fits) and int(jctopt.estimate(one_fewer).reason) == Reason.MEMORY


def test_recompute_said_on_is_the_least_that_fits_from_selective(compose):
    """A cell that says only that recompute was on ("yes", "true") starts where a blank cell
    starts after none: Llama 3 8B on 8 H100s with ZeRO-1 at 1 x 2048 tokens fits without any
    recompute, so a blank cell is placed without, "yes" with selective; both marked as defaults."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Some stack 2025", "model": "Llama 3 8B", "gpu": "h100_sxm", "precision": "bf16",
           "num_gpus": 8, "tp": 1, "pp": 1, "cp": 1, "micro_batch": 1, "global_batch": 64, "seq_len": 2048,
           "zero_stage": 1, "recompute": None}
    blank, _, used_blank = prose.place(base, row)
    said, _, used_said = prose.place(base, dict(row, recompute="yes"))
    assert float(blank.train.recompute) == RECOMPUTE["none"]
    assert float(said.train.recompute) == RECOMPUTE["selective"]
    assert "recompute" in used_blank and "recompute" in used_said
    stated, _, used_stated = prose.place(base, dict(row, recompute="true"))
    assert float(stated.train.recompute) == RECOMPUTE["selective"] and "recompute" in used_stated


@pytest.mark.parametrize("gpu, cell, fabric, nic_gbit, nics, defaulted", [
    ("h100_sxm", "InfiniBand", "ib_ndr400", 400, 8, True),  # a kind alone: the reference system's IB rate
    ("gb300", "IB", "ib_xdr800", 800, 72, True),
    ("h100_sxm", "ConnectX-7", "ib_ndr400", 400, 8, False),  # the NIC generation names the rate
    ("h100_sxm", "CX8 800G", "ib_xdr800", 800, 8, False),
    ("h100_sxm", "ConnectX-7 x4", "ib_ndr400", 400, 4, False),  # the generation is not the count
    ("h100_sxm", "Quantum-X800", "ib_xdr800", 800, 8, False),
    ("h100_sxm", "IB NDR400 x8", "ib_ndr400", 400, 8, False),  # the count follows the x, not the rate before it
    ("h100_sxm", "RoCEv2", "roce400", 400, 8, True),
    ("h100_sxm", "Spectrum-X 800G", "roce400", 800, 8, False),
    ("h100_sxm", "AWS EFA 3200 Gbps", "roce400", 400, 8, False),  # above any NIC: the node's total over 8 NICs
    ("h100_sxm", "16x 200G EFA", "roce400", 200, 16, False),
    ("gb200", "EFA 1600 Gbps", "roce400", 400, 72, False),  # a GB200 node is its 4-GPU tray
    ("h100_sxm", "HPE Slingshot 200G", "roce400", 200, 8, False),
    ("h100_sxm", "GPUDirect-TCPXO", "eth100_tcp", 100, 8, True),
    ("h100_sxm", "8x400Gb/s", "ib_ndr400", 400, 8, True),  # a rate alone: the reference system's kind
    ("mi300x", "8x400Gb/s", "roce400", 400, 8, True),
    ("gb200", "NVLink", "ib_ndr400", 400, 72, True),  # no scale-out fabric named: as blank
    ("gb200", "nvlink_nvl72 (all nodes in same IMEX partition)", "ib_ndr400", 400, 72, True),
    ("gb200", "NVLink5 (NVL72)", "ib_ndr400", 400, 72, True),
    ("h100_sxm", "none", "ib_ndr400", 400, 8, True),
])
def test_inter_node_cells_in_words(compose, gpu, cell, fabric, nic_gbit, nics, defaulted):
    """Fabrics as sources write them: the kind (InfiniBand, its generations, ConnectX and
    Quantum parts; RoCE, Spectrum-X, EFA, Slingshot as RoCE; TCP), the NIC rate or the node's
    total, a NIC count; what is not said comes from the GPU's reference system, marked."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3 8B", "gpu": gpu, "precision": "bf16",
           "num_gpus": 8, "tp": 1, "pp": 1, "global_batch": 128, "inter_node": cell}
    cfg, used = prose.row_config(base, row)
    assert (cfg.fabric.name, cfg.fabric.nic_gbit, cfg.cluster.nics_per_node) == (fabric, pytest.approx(nic_gbit), nics)
    assert ("inter_node" in used) == defaulted


def test_a_rack_scale_gpus_node_is_its_tray_or_its_domain(compose):
    """GB200 rows: gpus_per_node 4 (a compute tray) and 72 (the NVL72 domain) as stated; 36 an
    NVL36 rack, whose NVLink domain is 36; 8 or 2 (HGX habit, a superchip) the tray, marked."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3 8B", "gpu": "gb200", "precision": "bf16",
           "num_gpus": 64, "tp": 1, "pp": 1, "global_batch": 128}
    for cell, node, domain, marked in ((4, 4, 72, False), (72, 72, 72, False), (36, 36, 36, False),
                                       (8, 4, 72, True), (2, 4, 72, True)):
        cfg, used = prose.row_config(base, dict(row, gpus_per_node=cell))
        assert (cfg.cluster.gpus_per_node, cfg.gpu.nvlink_domain, "gpus_per_node" in used) == (node, domain, marked)
        to_config(cfg)  # a valid cluster


def test_counts_with_thousands_separators_units_and_context_lengths_in_k(compose):
    """"1,024" GPUs is 1024; a sequence length printed "8K" is 8192 tokens (1024 each); a count
    may carry its own unit or a remark ("1024 GPUs", "8 (HGX)"); a K on another count, or
    another column's unit ("2 nodes" GPUs, "2048 tokens" of global batch), is refused by name."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3 8B", "gpu": "h100_sxm", "precision": "bf16",
           "num_gpus": "1,024", "tp": 1, "pp": 1, "global_batch": "2,048", "seq_len": "8K"}
    cfg, _ = prose.row_config(base, row)
    assert (cfg.layout.n_gpus, cfg.training.global_batch, cfg.model.seq_len) == (1024, 2048, 8192)
    cfg, _ = prose.row_config(base, dict(row, num_gpus="1024 GPUs", gpus_per_node="8 (HGX)", seq_len="8K tokens",
                                            global_batch="2048 sequences"))
    assert (cfg.layout.n_gpus, cfg.cluster.gpus_per_node, cfg.model.seq_len, cfg.training.global_batch) == (
        1024, 8, 8192, 2048)
    for key, cell in (("num_gpus", "1k"), ("num_gpus", "2 nodes"), ("global_batch", "2048 tokens")):
        with pytest.raises(RowError, match=rf"{key}='{cell}' is not a number"):
            prose.row_config(base, dict(row, **{key: cell}))


def test_zero3_on_megatron_core_stacks_is_megatron_fsdp(compose):
    """ZeRO-3 on NeMo or Megatron-Bridge is Megatron-FSDP: full sharding and its own overlap
    (model.megatron_fsdp), as is ZeRO-3 where the notes turn on use_megatron_fsdp; torchtitan's and
    AutoModel's FSDP2 and a 2024 table's FSDP are not; a row without ZeRO-3 is not either."""
    base = compose("task=validate")
    row = {"id": "r", "source": "NeMo Framework user guide performance summary, NeMo 25.07 container",
           "model": "Llama 3 70B", "gpu": "gb200", "precision": "fp8", "num_gpus": 64, "tp": 1, "pp": 1, "cp": 1,
           "global_batch": 128, "zero_stage": 3}
    for source in (row["source"], "Megatron-Bridge docs/performance-summary.md, 26.04 NeMo Container"):
        cfg, _ = prose.row_config(base, dict(row, source=source))
        assert cfg.training.megatron_fsdp and not cfg.training.hybrid_shard, source
    for source in ("pytorch/torchtitan benchmarks 2024-12", "NVIDIA-NeMo/Automodel docs 2025", "Some stack 2024"):
        cfg, _ = prose.row_config(base, dict(row, source=source))
        assert not cfg.training.megatron_fsdp, source
    # A stack the source does not name is Megatron-FSDP where the notes turn it on.
    cfg, _ = prose.row_config(base, dict(row, source="Some stack 2024", notes="use_megatron_fsdp=True"))
    assert cfg.training.megatron_fsdp and not cfg.training.hybrid_shard
    cfg, _ = prose.row_config(base, dict(row, zero_stage=1, tp=8))  # without ZeRO-3 the switch is moot
    fsdp = jctopt.estimate(jctopt.to_config(cfg))
    cfg.training.megatron_fsdp = not cfg.training.megatron_fsdp
    assert float(jctopt.estimate(jctopt.to_config(cfg)).step_s) == float(fsdp.step_s)


@pytest.mark.parametrize("cell, stage, hybrid", [("ZeRO-1", 1, None), ("zero3", 3, None), ("ZeRO stage 2", 2, None),
                                                  ("distributed optimizer", 1, None), ("DDP", 0, None),
                                                  ("FSDP2 (full shard)", 3, False), ("HSDP", 3, True)])
def test_optimizer_sharding_and_sequence_parallel_cells_in_words(compose, cell, stage, hybrid):
    """zero_stage as tables name it (ZeRO-n, Megatron's distributed optimizer = 1, FSDP = 3, its
    full or hybrid sharding as named, DDP = 0); sp as a flag (True/False, yes/no)."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3 8B", "gpu": "h100_sxm", "precision": "bf16",
           "num_gpus": 16, "tp": 2, "pp": 1, "global_batch": 64, "zero_stage": cell, "sp": "False"}
    cfg, _ = prose.row_config(base, row)
    assert cfg.training.zero_stage == stage and not cfg.training.seq_parallel
    if hybrid is not None:
        assert cfg.training.hybrid_shard == hybrid
    assert prose.row_config(base, dict(row, sp="TRUE"))[0].training.seq_parallel


def test_blank_cells_read_from_the_settings_the_notes_print(compose):
    """A blank recompute cell is the notes' recompute_granularity (as a config's repr or Megatron's
    flag; --recompute-activations is selective; a recipe summary's "recompute=none"), stated, not
    defaulted, as its memory estimate would otherwise choose; a blank zero_stage is
    Megatron-FSDP's sharding strategy (optim_grads_params = 3 where none is named), sharded over
    the whole data-parallel group. A filled cell wins over the notes."""
    row = dict(_row(pd.read_csv(validation_file("runs_dev2.csv")), "nemofw2507_gb200_llama31_405b_128g"),
               recompute=None, zero_stage=None)
    base = compose("task=validate")
    for notes, mode in (("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1", "full"),
                        ("yaml recompute_granularity=null", "none"), ("recompute_granularity: selective", "selective"),
                        ("--recompute-activations", "selective"), ("fp8_param_gather=False; recompute=none; nccl_ub=", "none")):
        cfg, used = prose.row_config(base, dict(row, notes=notes))
        assert cfg.training.recompute == mode and "recompute" not in used, notes
    cfg, used = prose.row_config(base, dict(row, notes="recompute_granularity=full", recompute="none"))
    assert cfg.training.recompute == "none"
    for notes, stage in (("use_megatron_fsdp=True; data_parallel_sharding_strategy='optim_grads'", 2),
                         ("--use-megatron-fsdp --fsdp-double-buffer", 3), ("use_megatron_fsdp=False", 1)):
        cfg, used = prose.row_config(base, dict(row, notes=notes))
        assert cfg.training.zero_stage == stage and ("zero_stage" in used) == (stage == 1), notes
        assert not cfg.training.hybrid_shard or stage < 3, notes
    cfg, _ = prose.row_config(base, dict(row, notes="--use-megatron-fsdp", zero_stage=1))
    assert cfg.training.zero_stage == 1


def test_runs_name_a_path_or_a_shipped_file(tmp_path):
    assert runs_read.runs_path(None) == VALIDATION_DIR / "runs_dev.csv"
    assert runs_read.runs_path("runs_dev2.csv") == VALIDATION_DIR / "runs_dev2.csv"
    mine = tmp_path / "runs_dev2.csv"  # a path wins over the shipped file of the same name
    mine.write_text("id\n")
    assert runs_read.runs_path(str(mine)) == mine
    with pytest.raises(ConfigError, match=r"validate.runs='nope.csv'.*runs_moe_dev.csv"):
        runs_read.runs_path("nope.csv")
    with pytest.raises(ConfigError, match="no such file"):
        runs_read.runs_path(str(tmp_path / "missing.csv"))


def test_expert_tensor_parallelism_and_folding(compose):
    """Blank etp is tp (Megatron-Core's default), etp 1 keeps experts whole; an etp that does not
    divide tp is refused with a reason naming it. With etp 1, EP may span the TP ranks (MoE
    parallel folding): Mixtral 8x22B on 256 GPUs at tp 2, pp 4 has dp 32, so ep 64 divides
    tp x cp x dp / etp = 64 but not dp x cp, which etp = tp would need."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    row = _row(moe, "nemofw_2504_mixtral_8x22b_gb200_fp8cs_n256")
    assert (row["tp"], row["pp"], row["num_gpus"]) == (2, 4, 256)
    base = compose("task=validate")
    for etp, expected in ((None, 2.0), (1, 1.0), (2, 2.0)):
        cfg, _ = prose.row_config(base, dict(row, etp=etp))
        assert float(jctopt.to_config(cfg).layout.etp) == expected and cfg.model.n_experts == 8
    with pytest.raises(RowError, match=r"etp=4: expert tensor parallelism must divide tp=2"):
        prose.row_config(base, dict(row, etp=4))
    folded = dict(row, etp=1, ep=64, experts=64)
    cfg, _ = prose.row_config(base, folded)
    assert float(jctopt.estimate(jctopt.to_config(cfg)).step_s) > 0
    cfg, _ = prose.row_config(base, dict(folded, etp=2))
    with pytest.raises(ConfigError, match=r"layout.ep=64 is not allowed: a divisor of tp\*cp\*dp/etp=32"):
        jctopt.to_config(cfg)


def test_moe_dispatch_and_overlap_as_the_notes_name_them(compose):
    """The recipe's a2a_overlap or overlap_moe_expert_parallel_comm setting wins (a config's repr
    or Megatron's flag, given alone); DualPipe overlaps; 'overlap paths disabled' does not
    (nor does its TP or data-parallel traffic); Megatron-Bridge's full-iteration helpers overlap,
    and its v0.1.0rc4 launcher overlaps DeepSeek-V3 on H100 only; unnamed, overlap is off
    (Megatron-Core's default) and the row says it used that default. DeepEP, HybridEP and
    node-limited routing dispatch in two hops; the all-to-all dispatcher, or none named, flat."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    row = _row(moe, "nemofw_2504_mixtral_8x22b_gb200_fp8cs_n256")
    base = compose("task=validate")
    cases = [("dispatcher backend=deepep; a2a_overlap=True", True, True, False),
             ("flex dispatcher backend=hybridep; moe_a2a_overlap=False", False, True, False),
             ("DualPipe schedule; node-limited routing (<=4 nodes/token)", True, True, False),
             ("alltoall dispatcher, overlap paths disabled", False, False, False),
             ("calls: _benchmark_common(cfg) | _enable_hybridep_full_iteration_mxfp8(cfg)", True, True, False),
             ("perf config Megatron-Bridge@v0.1.0rc4 (6725f7049) qwen3_30b_a3b_llm_pretrain.yaml", False, False, False),
             ("cfg.comm_overlap.overlap_moe_expert_parallel_comm = True", True, False, False),
             ("--overlap-moe-expert-parallel-comm --delay-wgrad-compute --moe-flex-dispatcher-backend deepep",
              True, True, False),
             ("overlap_moe_expert_parallel_comm not set", False, False, True),
             ("", False, False, True)]
    for notes, overlap, two_hop, defaulted in cases:
        cfg, used = prose.row_config(base, dict(row, notes=notes))
        assert (cfg.training.ep_comm_overlap, cfg.training.ep_two_hop) == (overlap, two_hop), notes
        assert ("ep_comm_overlap" in used) == defaulted, notes
    cfg, _ = prose.row_config(base, dict(row, notes="alltoall dispatcher, overlap paths disabled"))
    assert not (cfg.training.ep_comm_overlap or cfg.training.dp_overlap or cfg.training.mp_comm_overlap)
    assert cfg.training.tp_async_backward  # Megatron's asynchronous all-reduce is no overlap path to disable
    rc4 = "perf config Megatron-Bridge@v0.1.0rc4 (6725f7049) deepseek_v3_llm_pretrain.yaml"
    for gpu, overlap in (("h100_sxm", True), ("DGX-H100", True), ("b200", False)):
        cfg, _ = prose.row_config(base, dict(row, notes=rc4, model="DeepSeekV3", gpu=gpu))
        assert cfg.training.ep_comm_overlap == overlap, gpu
    for source in ("NVIDIA-NeMo/Automodel docs/performance-summary.mdx (2025-10)", "pytorch/torchtitan mxfp8.md (2025-12)"):
        cfg, used = prose.row_config(base, dict(row, notes="", source=source, container_or_version=""))
        assert not cfg.training.ep_comm_overlap and "ep_comm_overlap" in used, source


MOE_FAMILIES = {"deepseek": "DeepSeek", "qwen3": "Qwen3", "mixtral": "Mixtral", "llama4": "Llama.?4"}
# Shipped medians (2026-11-29; only the launch floor is fitted to MoE rows) + ~2 points:
# DeepSeek 11.2, Qwen3 6.9, Mixtral 3.3, Llama 4 11.2 % (22.5 before torchtitan's Scout rows were
# read at the local batch pytorch/ao prints, data/validation/README.md, Errata); all rows 7.8 %.
MOE_BOUNDS = {"deepseek": 13.5, "qwen3": 9.0, "mixtral": 6.0, "llama4": 13.0}


@pytest.fixture(scope="module")
def predicted_moe(compose):
    df = runs_predict.run_validate(compose("task=validate"), validation_file("runs_moe_dev.csv"))
    models = pd.read_csv(validation_file("runs_moe_dev.csv")).set_index("id").model
    return df.assign(model=df.id.map(models))


@pytest.mark.slow
def test_moe_rows_are_placed_and_guarded_per_family(predicted_moe):
    """67 of 68 rows placed (target 95 %): the one left names its EP group, larger than the 32
    GPUs of a pipeline stage. Every family's median |error| within its guard; all rows 7.8 %
    (p90 26.1 %), guarded at 9.5 % (the target is 8 %)."""
    df = predicted_moe
    unplaced = df[df.predicted_iter_time_s.isna()]
    assert len(df) == 68 and len(unplaced) == 1
    assert unplaced.reason.iloc[0].startswith("layout.ep=64 is not allowed: a divisor of tp*cp*dp/etp=32")
    for family, pattern in MOE_FAMILIES.items():
        rows = df[df.model.str.contains(pattern, case=False, regex=True) & df.abs_pct_error.notna()]
        assert len(rows) >= 4, family
        assert rows.abs_pct_error.median() <= MOE_BOUNDS[family], (family, rows.abs_pct_error.median())
    assert df.abs_pct_error.median() <= 9.5


def test_attention_spellings(compose):
    """MHA, MQA and GQA with a sliding window or chunks are GQA shapes (kv_heads says how many KV heads);
    MLA needs its ranks; anything else is refused with a reason naming what is modelled."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    row = _row(moe, "nemofw_2504_mixtral_8x22b_gb200_fp8cs_n256")
    base = compose("task=validate")
    for cell in ("GQA", "mha", "gqa+swa (sliding window 128, attention sinks)", "SWA", "chunked (8192)",
                 "grouped-query attention", "full causal", "Sliding window 4096 + full"):
        cfg, _ = prose.row_config(base, dict(row, attention=cell))
        assert cfg.model.n_kv_heads == row["kv_heads"] and cfg.model.kv_lora_rank == 0, cell
    ds = _row(moe, "dsv3_paper_h800_fp8_n2048")
    for cell in ("MLA", "Multi-head Latent Attention", "MLA+DSA"):
        cfg, _ = prose.row_config(base, dict(ds, attention=cell))
        assert cfg.model.kv_lora_rank == ds["kv_lora_rank"] > 0, cell
    with pytest.raises(RowError, match=r"attention='linear' is not modelled \(gqa, mha, mqa, mla\)"):
        prose.row_config(base, dict(row, attention="linear"))


@pytest.mark.slow
def test_a_row_without_a_split_runs_at_its_fastest_split_that_fits(compose):
    """Megatron-LM's 177B strong-scaling point on 96 H100s states none of tp, pp, dp. It is
    placed at the (tp, pp) of least predicted step time among those that fit, found here by
    brute force over every split given explicitly; the defaults it used name tp and pp."""
    row = pd.read_csv(RUNS).set_index("id").loc["megatronlm24_strong_177b_96g"].to_dict()
    row["id"] = "megatronlm24_strong_177b_96g"
    base = compose("task=validate")
    config, _, used = runs_place._fastest_split(base, row)
    assert {"tp", "pp"} <= set(used)
    best = None
    for tp in (1, 2, 4, 8):
        for pp in (p for p in range(1, 96 // tp + 1) if 96 % (tp * p) == 0):
            try:
                candidate, _, _ = prose.place(base, dict(row, tp=tp, pp=pp))
            except (RowError, ConfigError):
                continue
            est = jctopt.estimate(candidate)
            if Reason(int(est.reason)) != Reason.MEMORY and (best is None or float(est.step_s) < best[0]):
                best = (float(est.step_s), tp, pp)
    assert best is not None
    assert (float(config.layout.tp), float(config.layout.pp)) == best[1:]
    assert float(jctopt.estimate(config).step_s) == pytest.approx(best[0], rel=1e-9)


def _fastest_that_fits(base, row, key, values):
    """(predicted step, value) of the row with ``key`` set to each of ``values`` in turn, the
    fastest of those that place and fit; None where none does."""
    best = None
    for value in values:
        try:
            candidate, _, _ = prose.place(base, dict(row, **{key: value}))
        except (RowError, ConfigError):
            continue
        est = jctopt.estimate(candidate)
        if Reason(int(est.reason)) == Reason.OK and (best is None or float(est.step_s) < best[0]):
            best = (float(est.step_s), value)
    return best


def test_an_moe_row_without_ep_runs_at_its_fastest_ep_that_fits(compose):
    """Megatron-Bridge's Qwen3-30B-A3B row on 8 GB200s with its ep cell emptied: placed at the
    divisor of the 128 experts of least predicted step time that fits, found here by brute
    force over every divisor given explicitly; marked as chosen by speed, ep among the defaults
    used. A dense row's blank ep stays 1."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv")).set_index("id")
    row_id = "mb_2604_qwen3_30b_a3b_gb200_mxfp8_n8_gbs512"
    row = dict(moe.loc[row_id], id=row_id, ep=None)
    base = compose("task=validate")
    best = _fastest_that_fits(base, row, "ep", (1, 2, 4, 8, 16, 32, 64, 128))
    records, _, configs = runs_place.place_rows(base, pd.DataFrame([row]))
    assert records[0]["chosen_by_speed"] and "ep" in records[0]["defaults_used"].split(",")
    assert float(configs[0].layout.ep) == best[1]
    assert float(jctopt.estimate(configs[0]).step_s) == pytest.approx(best[0], rel=1e-9)
    dense = pd.read_csv(RUNS).iloc[0].to_dict()
    dense_config, _, used = prose.place(base, dict(dense, ep=None))
    assert float(dense_config.layout.ep) == 1 and "ep" in used


@pytest.mark.parametrize("key, cell, value", [("tp", "TP8", 8), ("ep", "EP = 64", 64), ("pp", "pp:4", 4),
                                              ("vpp", "VP 4", 4), ("etp", "ETP1", 1)])
def test_a_parallel_degree_printed_with_its_axis(key, cell, value):
    """Layout tables print degrees with their axis ("TP8", "EP = 64"); another axis's name in
    the cell is refused, naming the cell."""
    assert runs_cells._int({key: cell}, key, []) == value
    with pytest.raises(RowError, match=r"tp='PP8' is not a number"):
        runs_cells._int({"tp": "PP8"}, "tp", [])


def test_graphed_moe_layers_launch_nothing(compose):
    """A row whose notes name a full-iteration CUDA graph or CUDA graphs over token-dropping
    (static-shape) MoE layers runs without the host's launch time; Transformer Engine graphs over
    the router and preprocessing with the HybridEP dispatcher (a config's list or Megatron's
    flags) keep the preset's, the router graphed (no floor, the sync stays); any other row keeps
    the preset's, the router eager."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv")).set_index("id")
    base = compose("task=validate")
    preset = base.training.moe_host_s
    assert preset > 0

    def host(row_id, **extra):
        cfg, _ = prose.row_config(base, dict(moe.loc[row_id], id=row_id, **extra))
        return cfg.training.moe_host_s, cfg.training.moe_router_graphed

    assert host("mb_2606_qwen3_30b_a3b_gb200_mxfp8_n8_gbs512") == (0.0, False)  # cuda_graph=full_iteration
    assert host("mb_2509_qwen3_30b_a3b_b200_fp8cs_n8_gbs512") == (0.0, False)  # cuda_graphs=true, tokendrop
    assert host("mb_2509_qwen3_30b_a3b_h100_sxm_fp8cs_n16_gbs512") == (preset, False)  # cuda_graphs=false
    assert host("mb_2604_qwen3_30b_a3b_b200_mxfp8_n8_gbs512") == (preset, True)  # TE graphs [attn, router, preprocess], HybridEP
    assert host("mb_2602_qwen3_30b_a3b_b200_mxfp8_n8_gbs512") == (preset, False)  # TE graphs, all-to-all dispatcher
    assert host("mb_2604_qwen3_30b_a3b_h100_sxm_fp8_n16_gbs1024") == (preset, False)  # HybridEP, no graphs
    flags = ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess "
             "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep")
    assert host("mb_2604_qwen3_30b_a3b_h100_sxm_fp8_n16_gbs1024", notes=flags) == (preset, True)


def test_hybridep_with_te_graphs_against_the_published_overlap_ab(compose):
    """Megatron-Bridge's EP-overlap A/B (skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md
    @067f987df0, 2026-07-25): Qwen3-30B-A3B pre-training on 16 H100, BF16, sequence 4,096, EP 16,
    micro-batch 1, global batch 1,024, HybridEP, TE graphs over moe_router + moe_preprocess:
    24.7138 s a step with the all-to-all overlap off, 20.9920 s with it on; the GPU active
    22.82 s of the first, 21.22 s of the second. The graphs keep the host ahead but for each
    dispatch's sync, which the overlap covers (model.host): the model is 9.3 % over with the overlap
    off (its sync 3.8 s against the 1.9 s idle measured) and 11.4 % short with it on. Each step
    within 12 %; what this 2048-wide model spends beyond the model's count with the overlap on
    is not found."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv")).set_index("id")
    shape = dict(moe.loc["mb_2604_qwen3_30b_a3b_h100_sxm_fp8_n16_gbs1024"], precision="BF16", recompute="none")
    base = compose("task=validate")
    for overlap, measured_s in (("False", 24.7138), ("True", 20.9920)):
        notes = ("flex dispatcher backend=hybridep; cuda_graph=transformer_engine:[moe_router,moe_preprocess]; "
                 f"moe_a2a_overlap={overlap}")
        cfg, _ = prose.row_config(base, dict(shape, id=f"ab_{overlap}", notes=notes))
        assert cfg.training.moe_router_graphed
        est = jctopt.estimate(to_config(cfg))
        assert float(est.step_s) == pytest.approx(measured_s, rel=0.12)
        assert (float(est.host_s) > 0) == (overlap == "False")


def test_an_absurd_count_is_refused_by_name(compose):
    """A count so large that the row's parameter and FLOP products leave the float range is
    refused naming its column, not raised as an overflow."""
    row = pd.read_csv(RUNS).iloc[0].to_dict()
    with pytest.raises(RowError, match=r"layers=4e\+299 is not allowed: an integer <= 1e\+15"):
        prose.row_config(compose("task=validate"), dict(row, layers=4e299))


def test_case_of_gpu_and_fabric_keys_and_mla_variants(compose):
    """Sources print "GB200" and "IB_NDR400x8": keys are read in any case. MLA with DeepSeek-
    V3.2's sparse attention ("MLA+DSA") is placed with MLA's shapes, its ranks as stated."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv")).set_index("id")
    row_id = "mb_2606_deepseek_v3_gb200_mxfp8_n256_gbs4096"
    row = dict(moe.loc[row_id], id=row_id)
    base = compose("task=validate")
    plain, _ = prose.row_config(base, row)
    shouted, _ = prose.row_config(base, dict(row, gpu="GB200", attention="MLA+DSA"))
    assert shouted.gpu.name == plain.gpu.name == "gb200"
    assert shouted.model.kv_lora_rank == plain.model.kv_lora_rank == 512
    assert shouted.model.head_dim == plain.model.head_dim == 192
    fabric, _ = prose.row_config(base, dict(row, inter_node="IB_NDR400x8", gpus_per_node=8, gpu="b200"))
    assert fabric.fabric.name == "ib_ndr400" and fabric.cluster.nics_per_node == 8


@pytest.mark.parametrize("cell, key", [("LLAMA3.1-405B", "llama3_405b"), ("Meta-Llama-3-70B", "llama3_70b"),
                                       ("Llama 3.1 8B", "llama3_8b"), ("DeepSeekV3", "deepseek_v3"),
                                       ("DeepSeek-V3 truncated to 4 layers", "deepseek_v3"),
                                       ("Qwen3_30B_a3B", "qwen3_30b_a3b"), ("Qwen3-235B-A22B", "qwen3_235b_a22b"),
                                       ("Qwen3 MoE 30B", "qwen3_30b_a3b"), ("Qwen3-235B", "qwen3_235b_a22b"),
                                       ("Qwen3-32B", "qwen3_32b"), ("qwen3_0.6b", "qwen3_0p6b"),
                                       ("Qwen3-1.7B-Base", "qwen3_1p7b"), ("Qwen3 8B", "qwen3_8b"),
                                       ("Qwen3-VL-8B", None), ("Qwen2.5-32B", "qwen2p5_32b"),
                                       ("Qwen2.5-72B-Instruct", "qwen2p5_72b"),
                                       ("Qwen2.5-VL-7B", None), ("Qwen2.5-Coder-32B", None),
                                       ("GLM-4.5", "glm45_355b_a32b"), ("glm45_air_106b", "glm45_air_106b_a12b"),
                                       ("GLM-4.5V", None),
                                       ("GPT-OSS-120B", "gpt_oss_120b"), ("GPT-OSS 20B", "gpt_oss_20b"), ("Kimi-K2", "kimi_k2"),
                                       ("Mixtral-8x22B", "mixtral_8x22b"), ("Llama4 Scout (17Bx16E)", "llama4_scout"),
                                       ("Llama 2 70B", "llama2_70b"), ("Llama 3 80B", None), ("LLAMA2-13B", None),
                                       ("llama31_405b", "llama3_405b"), ("llama31_8b", "llama3_8b"),
                                       ("DeepSeek-V2 truncated to 4 layers", "deepseek_v2"),
                                       ("DeepSeek-V2-Lite", "deepseek_v2_lite"), ("DeepSeek-V3 16B", "deepseek_v2_lite"),
                                       ("DeepSeek V3 671B", "deepseek_v3"), ("mini_kimi_k2_llep", None),
                                       ("DeepSeek-R1", "deepseek_v3"), ("DeepSeek-R1-Zero", "deepseek_v3"),
                                       ("DeepSeek-R1-Distill-Llama-70B", None),
                                       ("Nemotron 3 30B", "nemotron3_nano_30b_a3b"),
                                       ("Nemotron Nano v3 30B", "nemotron3_nano_30b_a3b"),
                                       ("Nemotron 3 120B", "nemotron3_super_120b_a12b"),
                                       ("Nemotron5-H_56B", "nemotron_h_56b"), ("Nemotron-4 340B", "nemotron4_340b"),
                                       ("Nemotron-15B", "nemotron4_15b"), ("Grok-1", "grok1_314b"),
                                       ("Nemotron-H-56B", "nemotron_h_56b"), ("NemotronH 8B", "nemotron_h_8b"),
                                       ("Nemotron_3_Nano", "nemotron3_nano_30b_a3b"),
                                       ("NVIDIA-Nemotron-3-Nano-30B-A3B", "nemotron3_nano_30b_a3b"),
                                       ("Nemotron 3 Nano 4B", None), ("Nemotron-3-Super", "nemotron3_super_120b_a12b"),
                                       ("Nemotron_3_Super", "nemotron3_super_120b_a12b"),
                                       ("Nemotron_3_Ultra", "nemotron3_ultra_550b_a55b"),
                                       ("Nemotron_3_5_Lightning", "nemotron3_5_lightning_30b_a3b"),
                                       ("NVIDIA-Nemotron-3.5-Lightning-30B-A3B", "nemotron3_5_lightning_30b_a3b"),
                                       ("Nemotron 3.5 Nano", None),
                                       ("Nemotron V3 Super 120B (26.02)", "nemotron3_super_120b_a12b"),
                                       ("Nemotron V3 Nano 30B", "nemotron3_nano_30b_a3b"),
                                       ("Llama-2-style 34B (FSDP)", "llama2_34b"), ("Llama 2 34B", "llama2_34b")])
def test_model_cells_name_catalog_models(cell, key):
    assert catalog_model(cell) == key


@pytest.mark.parametrize("cell, params_b, key", [("Llama 3.1", 405, "llama3_405b"), ("Nemotron4", 340, "nemotron4_340b"),
                                                 ("GPT3", 175, "gpt3_175b"), ("Qwen3", 235, "qwen3_235b_a22b"),
                                                 ("Llama 3.1", 13, None), ("LLAMA3-70B", 8, "llama3_70b"),
                                                 ("Llama 3.1", "n/a", None)])
def test_a_family_cell_reads_the_size_from_params_b(cell, params_b, key):
    """dgxc-benchmarking prints the model family and its size in two columns: a cell that names no
    catalog model is read with params_b appended; one that names a model keeps it."""
    assert catalog_model(cell, params_b) == key


def test_blank_architecture_is_the_named_catalog_models(compose):
    """A row that names a catalog model and leaves its architecture blank is placed with the
    catalog's shapes (Llama 3.1 405B: 126 layers, 16384 wide, 8 KV heads; DeepSeek-V3: 256
    experts of 2048, MLA with 192-wide query/key heads); a cell the row states is kept; a model
    outside the catalog is still refused by the cell it lacks."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3.1 405B", "gpu": "gb300", "precision": "FP8",
           "num_gpus": 256, "tp": 4, "pp": 8, "cp": 1, "vpp": 4, "global_batch": 1536, "recompute": "none"}
    cfg, used = prose.row_config(base, row)
    m = cfg.model
    assert (m.n_layers, m.hidden, m.ffn_hidden, m.n_heads, m.n_kv_heads, m.vocab, m.seq_len) == (
        126, 16384, 53248, 128, 8, 128256, 8192)
    assert "architecture" in used and m.glu
    truncated, _ = prose.row_config(base, dict(row, layers=8))
    assert truncated.model.n_layers == 8 and truncated.model.hidden == 16384
    ds, _ = prose.row_config(base, dict(row, model="DeepSeek-V3", tp=1, pp=4, ep=64, vpp=None))
    d = ds.model
    assert (d.n_experts, d.top_k, d.moe_ffn_hidden, d.n_shared_experts, d.n_dense_layers) == (256, 8, 2048, 1, 3)
    assert (d.head_dim, d.v_head_dim, d.kv_lora_rank, d.q_lora_rank, d.qk_rope_head_dim) == (192, 128, 512, 1536, 64)
    assert d.mtp_layers == 0  # mtp_layers keeps its own rule: blank is none
    qwen, _ = prose.row_config(base, dict(row, model="Qwen3-32B", tp=2, pp=1, vpp=None))
    q = qwen.model  # 64 query heads of 128 on a 5120-wide model: the head is not hidden / heads
    assert (q.n_layers, q.hidden, q.ffn_hidden, q.n_heads, q.n_kv_heads, q.head_dim, q.vocab) == (
        64, 5120, 25600, 64, 8, 128, 151936)
    with pytest.raises(RowError, match="layers is blank and has no documented default"):
        prose.row_config(base, dict(row, model="Falcon 180B"))


@pytest.mark.parametrize("cell, precision", [("FP8 hybrid", "fp8"), ("FP8 delayed scaling", "fp8"),
                                             ("MX FP8", "mxfp8"), ("BF16 mixed", "bf16"), ("mixed FP8", "fp8"),
                                             ("fp8cs", "fp8"), ("fp8mx", "mxfp8"), ("fp8_ds", "fp8")])
def test_qualified_precision_cells_read_by_the_precision_they_name(cell, precision):
    """A qualifier before or after the precision, and Megatron-Bridge's recipe spellings
    (``fp8_cs``, ``fp8_mx`` glued), name the precision."""
    assert row_precision(cell) == precision


def test_a_hybrids_mtp_depth_on_megatron_stacks(compose):
    """Nemotron 3 Super named on a Megatron-Bridge row trains its two MTP passes (the recipes'
    mtp_num_layers 2); on a NeMo AutoModel row (whose Super benchmark sets none) it trains none;
    a stated mtp_layers cell wins either way."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Megatron-Bridge docs/performance-summary.md, '26.08 NeMo Container'",
           "model": "Nemotron_3_Super", "gpu": "gb300", "precision": "MXFP8", "num_gpus": 64, "tp": 1, "pp": 1,
           "cp": 1, "ep": 64, "micro_batch": 1, "global_batch": 512, "seq_len": 8192, "recompute": "none"}
    mb, _ = prose.row_config(base, row)
    am, _ = prose.row_config(base, dict(row, source="NVIDIA-NeMo/Automodel docs/performance-summary.mdx"))
    stated, _ = prose.row_config(base, dict(row, mtp_layers=1))
    assert (mb.model.mtp_layers, am.model.mtp_layers, stated.model.mtp_layers) == (2, 0, 1)


@pytest.mark.parametrize("cell", ["FP8/BF16", "BF16/FP16", "TF32"])
def test_precision_cells_naming_two_or_none_are_refused(cell):
    """Two precisions as alternatives do not say which the GEMMs ran; TF32 is not modelled.
    ("BF16+FP8", FP8 GEMMs with BF16 master weights, is fp8: tests/test_stacks.py.)"""
    with pytest.raises(RowError, match="is not modelled"):
        row_precision(cell)


def test_blank_precision_and_module_list_recompute_and_generic_fabrics(compose):
    """Blank precision is bf16 (documented, marked); a recompute cell that lists Megatron's
    recompute modules is selective; an inter_node key of the documented form names its NIC rate
    and count (ib_xdr800x4: a GB300 tray's four ConnectX-8 NICs), one NIC per GPU without a count."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Llama 3 8B", "gpu": "gb300", "precision": None,
           "gpus_per_node": 4, "num_gpus": 8, "tp": 1, "pp": 1, "global_batch": 128, "recompute": "mla_up_proj,mlp,moe"}
    cfg, used = prose.row_config(base, row)
    assert cfg.training.precision == "bf16" and "precision" in used
    assert cfg.training.recompute == "selective"
    for key, fabric, node_gbit in (("ib_xdr800x4", "ib_xdr800", 3200), ("IB_NDR400", "ib_ndr400", 1600),
                                   ("roce200x4", "roce400", 800), ("ib_hdr200x2", "ib_hdr200", 400)):
        cfg, _ = prose.row_config(base, dict(row, inter_node=key))
        assert cfg.fabric.name == fabric, key
        assert cfg.fabric.nic_gbit * cfg.cluster.nics_per_node == pytest.approx(node_gbit), key
    with pytest.raises(RowError, match=r"inter_node='tofu-d' is not modelled"):
        prose.row_config(base, dict(row, inter_node="Tofu-D"))
    for off in ("False", "disabled", 0):
        cfg, _ = prose.row_config(base, dict(row, recompute=off))
        assert cfg.training.recompute == "none", off
    with pytest.raises(RowError, match=r"recompute='sometimes' is not one of none, selective, full"):
        prose.row_config(base, dict(row, recompute="sometimes"))


@pytest.mark.parametrize("cell, mode", [("activation checkpointing (full)", "full"), ("AC: selective", "selective"),
                                        ("Full AC", "full"), ("recompute_granularity=full", "full"),
                                        ("per-op SAC", "selective"), ("SAC", "selective"), ("1.0", "1"),
                                        ("none (--recompute-granularity full --recompute-method block)", "none"),
                                        ("selective:mla_up_proj", "selective"), ("core_attn", "selective")])
def test_a_recompute_cell_in_activation_checkpointing_words(cell, mode):
    """The mode is the cell's first word but for activation checkpointing's own words ("AC",
    "checkpointing", "granularity"); a stated none stays none whatever its flags say after it;
    SAC and Megatron's module names are selective."""
    assert recompute_mode(cell) == mode


def test_paxml_remat_policies_in_the_notes_are_read(compose, predicted_dev2):
    """A blank recompute cell takes the Paxml remat policy the notes print (praxis
    checkpoint_policy.py): SAVE_QKV_OUT_PROJ recomputes the norms, the attention core and the MLP,
    SAVE_DOT_ONLY the norms and the attention core; a policy not modelled is refused by name. Read
    so, DGX Cloud's GPT-3 175B Paxml rows (SAVE_QKV_OUT_PROJ) come within 4 % (median 2.1 %; 10.5-15.8 %
    too fast before); the 5B rows (SAVE_DOT_ONLY) stay 15-18 % too fast."""
    base = compose("task=validate")
    dev2 = pd.read_csv(validation_file("runs_dev2.csv"))
    expected = {"dgxc_pax_gpt3_175b_h100_fp8_128g": {"layernorm", "core_attn", "mlp"},
                "dgxc_pax_gpt3_5b_h100_bf16_16g": {"layernorm", "core_attn"}}
    for rid, modules in expected.items():
        row = _row(dev2, rid)
        cfg, used = prose.row_config(base, row)
        assert cfg.training.recompute == "selective" and set(cfg.training.recompute_modules) == modules, rid
        assert "recompute" not in used
    row = dict(row, recompute=None)  # the cell as its source left it (scripts/convert_runs.py fills it)
    cfg, _ = prose.row_config(base, dict(row, id="r", notes="checkpoint_policy=save_nothing"))
    assert cfg.training.recompute == "full"
    with pytest.raises(RowError, match=r"remat policy 'SAVE_CONTEXT' in the notes is not modelled"):
        prose.row_config(base, dict(row, id="r", notes="remat SAVE_CONTEXT"))
    err = predicted_dev2.set_index("id").abs_pct_error
    assert err[err.index.str.startswith("dgxc_pax_gpt3_175b")].median() <= 4.0


def test_a_blank_step_time_from_the_rows_batch_and_throughput(compose):
    """runs_moe_dev.csv derives 52 of its step times as GBS x seq / (tokens/s per GPU x GPUs);
    with those cells emptied, validate derives the same times (within the 5-digit rounding of
    the file) and says so; a row without a stated batch is not compared."""
    moe = pd.read_csv(validation_file("runs_moe_dev.csv"))
    derived = moe[moe.derivation.fillna("").str.contains(r"GBS\*seq/\(tok_s_gpu\*N\)", regex=True)
                  & moe.tokens_per_s_per_gpu.notna()].head(6)
    assert len(derived) == 6
    records, _, _ = runs_place.place_rows(compose("task=validate"), derived.assign(measured_iter_time_s=None))
    for record, stated in zip(records, derived.measured_iter_time_s):
        assert record["measured_iter_time_s"] == pytest.approx(stated, rel=1e-4), record["id"]
        assert "measured_iter_time_s" in record["defaults_used"].split(",")
    unbatched, _, _ = runs_place.place_rows(compose("task=validate"),
                                          derived.head(1).assign(measured_iter_time_s=None, global_batch=None))
    assert pd.isna(unbatched[0]["measured_iter_time_s"])


def test_an_moe_count_among_words():
    """An MoE count printed among words ("top-8", "256 routed", "first 3" dense layers) is read;
    two numbers ("256+1": routed and shared?) are refused, naming the cell."""
    assert [runs_cells._int({k: v}, k, []) for k, v in (("top_k", "top-8"), ("experts", "256 routed"),
                                                        ("dense_layers", "first 3"))] == [8, 256, 3]
    with pytest.raises(RowError, match=r"experts='256\+1' is not a number"):
        runs_cells._int({"experts": "256+1"}, "experts", [])
    with pytest.raises(RowError, match=r"top_k='-8' is not allowed: an integer >= 1"):
        runs_cells._int({"top_k": "-8"}, "top_k", [])


def test_a_batch_counted_in_seqs():
    assert runs_cells._int({"micro_batch": "1 seq"}, "micro_batch", []) == 1
    assert runs_cells._int({"global_batch": "2,048 seqs"}, "global_batch", []) == 2048


def test_blank_etp_keeps_experts_whole_where_tp_wide_experts_cannot_fit_the_ep_group(compose):
    """Qwen3-235B-A22B on 256 H100s at tp 2, pp 8, ep 32 (Megatron-Bridge's layout): a stage's 32
    GPUs hold ep 32 only with whole experts, so a blank etp is 1 there (marked), tp where it fits;
    etp stated 2 is refused by name."""
    base = compose("task=validate")
    row = {"id": "r", "source": "A 2026 table", "model": "Qwen3-235B-A22B", "gpu": "h100_sxm", "precision": "FP8",
           "num_gpus": 256, "tp": 2, "pp": 8, "cp": 1, "ep": 32, "vpp": 4, "global_batch": 8192}
    cfg, used = prose.row_config(base, row)
    assert cfg.layout.etp == 1 and "etp" in used
    fits, used = prose.row_config(base, dict(row, ep=16))
    assert fits.layout.etp is None and "etp" not in used  # tp, Megatron-Core's default
    with pytest.raises(ConfigError, match=r"layout.ep=32 is not allowed"):
        to_config(prose.row_config(base, dict(row, etp=2))[0])


def test_nvfp4_rows_keep_the_bf16_layers_their_recipe_names(compose):
    """Megatron-Bridge's NVFP4 benchmark recipe (bf16_with_nvfp4_mixed) keeps no layer in BF16;
    Nemotron 3 Super's keeps its last 14 (num_layers_at_end_in_bf16=14); a stack without such a
    recipe takes the NVFP4 paper's 16 % (the training preset)."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Megatron-Bridge docs/performance-summary.md, 26.06 NeMo Container",
           "model": "Llama 3 70B", "gpu": "gb300", "precision": "NVFP4", "num_gpus": 64, "tp": 1, "pp": 4, "cp": 1,
           "vpp": 5, "global_batch": 256, "recompute": "none"}
    cfg, used = prose.row_config(base, row)
    assert cfg.training.nvfp4_bf16_share == 0.0 and "nvfp4_bf16_share" in used
    cfg, used = prose.row_config(base, dict(row, notes="first_last_layers_bf16=True; num_layers_at_end_in_bf16=14"))
    assert cfg.training.nvfp4_bf16_share == pytest.approx(14 / 80) and "nvfp4_bf16_share" not in used
    cfg, _ = prose.row_config(base, dict(row, source="pytorch/torchtitan benchmarks (2026)"))
    assert cfg.training.nvfp4_bf16_share == pytest.approx(base.training.nvfp4_bf16_share) == pytest.approx(0.16)
    # A Nemotron 3 Super row whose notes are silent takes its recipe's last 14 of 88 layers.
    super_row = dict(row, model="Nemotron_3_Super", num_gpus=64, tp=1, pp=1, ep=64, vpp=1, global_batch=512,
                     seq_len=8192, notes="forced-balanced routing")
    cfg, used = prose.row_config(base, super_row)  # the recipe's share, written as a cell
    assert cfg.training.nvfp4_bf16_share == pytest.approx(14 / 88) and "nvfp4_bf16_share" not in used


@pytest.mark.parametrize("model, attention, hybrid", [
    ("Nemotron-3-Nano-4B", None, True), ("Nemotron-H-4B-Base", None, True), ("Some model", "mamba hybrid", True),
    ("Jamba 1.5", None, True), ("Nemotron V3 Omni 30B (26.04)", None, True), ("Qwen3_Next_80B_a3B", None, True),
    ("Kimi-Linear-48B-A3B", None, True), ("Some model", "gated deltanet + gqa", True), ("Qwen3-235B-A22B", None, False),
    ("NVIDIA-Nemotron-Nano-9B-v2", None, True), ("Nemotron-4 340B", "gqa", False), ("Nemotron-15B", None, False),
    ("Llama-3.3-Nemotron-Super-49B", None, False), ("Llama-3.1-Nemotron-Nano-8B-v1", None, False),
    ("Llama 3 70B", "gqa", False)])
def test_hybrid_mamba_models_outside_the_catalog_are_refused_by_name(compose, model, attention, hybrid):
    """A hybrid's layer pattern is no runs column: one outside the catalog is refused naming why,
    not priced as if every layer attended (Nemotron-4 and the Llama-based Nemotrons are
    transformers, as is Nemotron Nano 8B v1; Nemotron Nano 2 is a Nemotron-H hybrid)."""
    assert (hybrid_mamba(model) or hybrid_mamba(attention or "")) == hybrid
    if hybrid:
        row = {"id": "r", "source": "A 2026 table", "model": model, "attention": attention, "layers": 118,
               "hidden": 8192, "ffn_hidden": 32768, "heads": 64, "kv_heads": 8, "seq_len": 8192, "vocab": 131072,
               "gpu": "gb200", "precision": "FP8", "num_gpus": 128, "tp": 4, "pp": 1, "global_batch": 384}
        with pytest.raises(RowError, match=r"is a hybrid Mamba-2 / linear-attention model outside the catalog: its layer "
                                                    r"pattern is unknown \(catalog hybrids: nemotron_h_8b"):
            prose.row_config(compose("task=validate"), row)


def test_catalog_hybrids_are_placed_with_their_layer_pattern(compose):
    """Nemotron-H 56B named with its cells stated, Nemotron 3 Nano and Super with them blank: each
    takes the catalog's pattern and Mamba-2 shape (Super its latent expert width, which no column
    states); a row whose layer count is not the pattern's is refused."""
    base = compose("task=validate")
    row = {"id": "r", "source": "dgxc-benchmarking 2026", "model": "Nemotron-H-56B", "attention": "gqa",
           "layers": 118, "hidden": 8192, "ffn_hidden": 32768, "heads": 64, "kv_heads": 8, "seq_len": 8192,
           "vocab": 131072, "gpu": "gb200", "precision": "FP8", "num_gpus": 128, "tp": 2, "pp": 1, "cp": 1,
           "global_batch": 384, "micro_batch": 1, "recompute": "none"}
    cfg, _ = prose.row_config(base, row)
    m = cfg.model
    assert m.layer_pattern.count("M") == 54 and m.mamba_state == 256 and not m.glu and not m.tied_embeddings
    nano = {"id": "n", "source": "Megatron-Bridge docs/performance-summary.md, 26.08 NeMo Container",
            "model": "Nemotron_3_Nano", "gpu": "gb300", "precision": "MXFP8", "num_gpus": 8, "tp": 1, "pp": 1,
            "cp": 1, "ep": 8, "global_batch": 512, "micro_batch": 4, "seq_len": 8192}
    cfg, used = prose.row_config(base, nano)
    m = cfg.model
    assert (m.n_layers, m.hidden, m.n_experts, m.top_k, m.n_dense_layers) == (52, 2688, 128, 6, 0)
    assert m.layer_pattern.count("E") == 23 and "architecture" in used and m.moe_latent_size == 0
    cfg, _ = prose.row_config(base, dict(nano, model="Nemotron_3_Super", num_gpus=64, ep=64, micro_batch=1))
    m = cfg.model
    assert (m.n_layers, m.hidden, m.n_experts, m.top_k, m.moe_latent_size) == (88, 4096, 512, 22, 1024)
    with pytest.raises(RowError, match=r"layers=80: 'Nemotron-H-56B' is a hybrid Mamba-2 model whose "
                                                r"118-layer pattern"):
        prose.row_config(base, dict(row, layers=80))


def test_an_interleaved_schedule_of_unstated_depth_runs_at_its_fastest_depth(compose):
    """The Nemotron-4 340B report trained on pp 12 with an interleaved schedule whose depth it
    does not print. The row is placed at the depth (2-16 chunks per rank) of least predicted step
    time that fits, found here by brute force over each depth given explicitly; a negated
    mention, a stated depth and torchtitan's own default (two stages per rank) are left alone."""
    table = pd.read_csv(validation_file("runs_dev2.csv"))
    row = _row(table, "nemotron4_340b_paper_t2_1536g")
    assert "interleaved" in row["derivation"] and runs_rules._interleaving_depth_unstated(row)
    base = compose("task=validate")
    config, _, used = runs_place._fastest_interleaving(base, row)
    assert "vpp" in used
    best = _fastest_that_fits(base, row, "vpp", range(2, 17))
    assert best is not None and best[1] > 1
    assert float(config.layout.vpp) == best[1]
    assert float(jctopt.estimate(config).step_s) == pytest.approx(best[0], rel=1e-9)
    one_chunk, _, _ = prose.place(base, dict(row, vpp=1))
    assert best[0] < float(jctopt.estimate(one_chunk).step_s)  # interleaving shortens the bubble

    assert not runs_rules._interleaving_depth_unstated(dict(row, derivation="no interleaving; vpp blank"))
    assert not runs_rules._interleaving_depth_unstated(dict(row, vpp=4))
    assert not runs_rules._interleaving_depth_unstated(dict(row, pp=1))
    torchtitan = _row(table, "torchtitan2412_t5_405b_512g_interleaved1f1b")
    assert not runs_rules._interleaving_depth_unstated(torchtitan)
    cfg, used = prose.row_config(base, torchtitan)
    assert cfg.layout.vpp == 2 and "vpp" not in used  # torchtitan's two stages per rank, written as a cell


@pytest.mark.parametrize("gpus, dp, tflops_per_gpu", [(8192, 64, 430.0), (16384, 128, 400.0)])
def test_llama3_405b_at_16k_gpus_with_its_interleaved_schedule(compose, tmp_path, gpus, dp, tflops_per_gpu):
    """Llama 3 405B pre-training (Dubey et al. 2024, arXiv:2407.21783, Table 4: BF16, TP 8,
    CP 1, PP 16, 8,192 / 16,384 H100s at 430 / 400 TFLOP/s per GPU, 16M tokens per batch of
    8,192-token sequences; Sec. 3.3.2: an interleaved pipeline schedule, depth not printed).
    The step time the printed rate implies, 6 x 405e9 x 16M / (GPUs x rate), is 11.6 / 6.2 s;
    read with the fastest interleaving that fits, the model lands within 12 % of it (with one
    chunk per rank its bubble alone made it 42-75 % too slow)."""
    tokens = 2048 * 8192
    measured = 6.0 * 405e9 * tokens / (gpus * tflops_per_gpu * 1e12)
    runs = tmp_path / "llama3.csv"
    pd.DataFrame([{
        "id": f"llama3_405b_{gpus}", "source": "Dubey et al. 2024, Table 4", "model": "Llama 3 405B",
        "seq_len": 8192, "gpu": "h100_sxm", "precision": "bf16", "gpus_per_node": 8, "num_gpus": gpus,
        "tp": 8, "pp": 16, "dp": dp, "cp": 1, "ep": 1, "sp": 1, "vpp": None, "global_batch": 2048,
        "zero_stage": 1, "measured_iter_time_s": measured, "schedule": "interleaved",
        "notes": "interleaved pipeline schedule (Sec. 3.3.2); chunk count not stated (vpp blank)",
    }]).to_csv(runs, index=False)
    out = runs_predict.run_validate(compose("task=validate"), runs)
    assert "vpp" in out.defaults_used.iloc[0]
    assert out.predicted_iter_time_s.iloc[0] == pytest.approx(measured, rel=0.12)


def test_an_interleaving_depth_no_framework_could_run_is_not_chosen(compose):
    """12 layers on 12 pipeline stages leave no layer for a second chunk: every depth 2-16 is
    refused (pp x vpp beyond the layers + 2 units a split can balance), so the row falls back to
    one chunk per rank."""
    base = compose("task=validate")
    table = pd.read_csv(validation_file("runs_dev2.csv"))
    shallow = dict(_row(table, "nemotron4_340b_paper_t2_1536g"), layers=12)
    assert runs_rules._interleaving_depth_unstated(shallow)
    config, _, _ = runs_place._fastest_interleaving(base, shallow)
    assert float(config.layout.vpp) == 1.0
    assert Reason(int(jctopt.estimate(config).reason)) != Reason.LAYOUT


def test_report_gives_the_error_and_its_sign_per_gpu_and_model_family(tmp_path):
    """Four rows by hand: on gb200 the model is 10 % too slow and 20 % too fast (median |error|
    15, signed -5), on h100 30 % too fast; a model cell naming a catalog model counts under its
    key, another under its own name, an unplaced row under neither."""
    df = pd.DataFrame({
        "id": ["a", "b", "c", "d"], "source": ["s"] * 4, "gpu": ["gb200", "gb200", "h100_sxm", "gb200"],
        "model": ["DeepSeek-V3", "DeepSeekV3 671B", "Some MoE", "DeepSeek-V3"],
        "measured_iter_time_s": [10.0, 10.0, 10.0, 10.0], "predicted_iter_time_s": [11.0, 8.0, 7.0, None],
        "reason": [None, None, None, "not placed"]})
    df["pct_error"] = 100.0 * (df.predicted_iter_time_s / df.measured_iter_time_s - 1.0)
    df["abs_pct_error"] = df.pct_error.abs()
    by_gpu = validate.bias_table(df, "gpu")
    assert list(by_gpu.index) == ["gb200", "h100_sxm"]
    assert by_gpu.loc["gb200"].tolist() == pytest.approx([15.0, -5.0, 2])
    assert by_gpu.loc["h100_sxm"].tolist() == pytest.approx([30.0, -30.0, 1])
    text = validate.report(df, tmp_path / "runs.csv")
    assert "| gb200 | 15.0 | -5.0 | 2 |" in text and "| deepseek_v3 | 15.0 | -5.0 | 2 |" in text
    assert "| Some MoE | 30.0 | -30.0 | 1 |" in text


def test_padded_capacity_sets_the_busiest_ranks_excess(compose):
    """Megatron-Core pads every expert's input to moe_expert_capacity_factor x the mean when
    moe_pad_expert_input_to_capacity is on (Nemotron 3 Super's 64-GPU recipe: 1.10); without the
    padding, or without a factor, the row keeps the preset's forced balance."""
    base = compose("task=validate")
    row = {"id": "r", "source": "Megatron-Bridge docs/performance-summary.md, 26.08 NeMo Container",
           "model": "Qwen3-30B-A3B", "gpu": "gb200", "precision": "BF16", "num_gpus": 8, "tp": 1, "pp": 1, "cp": 1,
           "ep": 8, "global_batch": 512, "micro_batch": 4, "seq_len": 4096}
    padded = "moe_expert_capacity_factor=1.10; moe_pad_expert_input_to_capacity=True"
    assert prose.row_config(base, dict(row, notes=padded))[0].training.moe_imbalance == pytest.approx(1.10)
    for notes in ("moe_expert_capacity_factor=1.10", "forced-balanced routing", ""):
        assert prose.row_config(base, dict(row, notes=notes))[0].training.moe_imbalance == 1.0
