"""Design space and sweep engine: exact enumeration, chunking, reductions, resume, sharding."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jctopt
from jctopt import ConfigError
from jctopt.config import check_layout
from jctopt.job import risk as _risk
from jctopt.job import uncertainty as U
from jctopt.search.engine import TRACES, build
from jctopt.search.grid import configured
from jctopt.search.space import int_axis
from jctopt.tasks.sweep import run_sweep

SMALL = [  # a MoE model so that ep and cp splits are exercised; 4 x 2 inner combinations
    # An HGX server (8-GPU nodes) and an NVL72 rack (4-GPU trays) in one space: each its own node.
    "model=mixtral_8x7b", "training=modern", "training.global_batch=64",
    "space.gpu=[h100_sxm,gb200]", "space.fabric=[ib_ndr400,roce400]",
    "space.n_gpus=[8,16,24,64]", "space.tp=[1,2,4,8]", "space.pp=[1,2,4]", "space.cp=[1,2]",
    "space.ep=[1,2,8]", "space.vpp=[1,2]", "space.micro_batch=[1,2,4]",
    "space.recompute=[selective,full]", "space.zero_stage=[1]", "space.precision=[bf16]",
    "space.ckpt_interval_s=[optimal]", "sweep.dtype=float64", "sweep.progress=false",
]


def _sweep_cfg(compose, *extra):
    return compose(*SMALL, *extra)


def _brute_layouts(cfg, accum=None):
    """Every (n, tp, pp, cp, ep, vpp, mb, global_batch) the scalar layout check accepts."""
    m, s = cfg.model, cfg.space
    out = set()
    for n, tp, pp, cp, ep, vpp, mb in itertools.product(s.n_gpus, s.tp, s.pp, s.cp, s.ep, s.vpp, s.micro_batch):
        for acc in (accum or [None]):
            if n % (tp * pp * cp):
                continue
            dp = n // (tp * pp * cp)
            gb = cfg.training.global_batch if acc is None else dp * mb * acc
            try:
                check_layout(m.n_heads, m.n_layers, m.seq_len, m.n_experts, n, tp, pp, cp, ep, vpp, gb, mb)
            except ConfigError:
                continue
            out.add((n, tp, pp, cp, ep, vpp, mb, gb))
    return out


def _layouts(df):
    cols = ["n_gpus", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "global_batch"]
    return set(map(tuple, df[cols].to_numpy().tolist()))


@pytest.mark.slow
@pytest.mark.parametrize("accum", [None, [1, 3]])
def test_space_holds_exactly_the_valid_layouts(compose, tmp_path, accum):
    extra = [] if accum is None else [f"space.accum={accum}".replace(" ", "")]
    cfg = _sweep_cfg(compose, "sweep.keep=all", *extra)
    df = run_sweep(cfg, tmp_path)
    space, _ = build(cfg)
    expected = _brute_layouts(cfg, accum)
    assert len(expected) > 20
    assert _layouts(df) == expected
    # every inner combination of every layout, once
    assert len(df) == len(expected) * 2 * 2 * 2 == space.size
    assert df["config_id"].is_unique and df["config_id"].tolist() == list(range(space.size))


def test_sweep_rows_equal_scalar_estimate(compose, tmp_path):
    """The device-side decode builds the same configuration as the Hydra config path, each GPU
    on its own node (gb200: the default cluster's 4-GPU tray, h100_sxm: 8) as ``gpu=`` composes it."""
    cfg = _sweep_cfg(compose, "sweep.keep=all")
    df = run_sweep(cfg, tmp_path)
    sample = np.random.default_rng(0).choice(len(df), 12, replace=False)
    assert set(df.gpu.iloc[sample]) == {"h100_sxm", "gb200"}
    assert float(jctopt.to_config(compose(*SMALL, "gpu=gb200")).cluster.gpus_per_node) == 4.0
    for i in sample:
        r = df.iloc[i]
        one = jctopt.to_config(compose(*SMALL, f"gpu={r.gpu}", f"fabric={r.fabric}", f"layout.n_gpus={r.n_gpus}",
                                       f"layout.tp={r.tp}", f"layout.pp={r.pp}", f"layout.cp={r.cp}",
                                       f"layout.ep={r.ep}", f"layout.vpp={r.vpp}",
                                       f"training.micro_batch={r.micro_batch}", f"training.recompute={r.recompute}"))
        est = jctopt.estimate(one)
        assert r.reason == jctopt.Reason(int(est.reason)).name
        for field in ("step_s", "jct_s", "mem_total", "cost_usd", "mfu"):
            np.testing.assert_allclose(r[field], float(getattr(est, field)), rtol=1e-12, err_msg=field)
        # Kept rows carry the step time's interval at job.confidence 0.8: the stored 10th and
        # 90th percentile log errors of the MoE basis (Mixtral); none where the step is infinite.
        assert _risk.error_basis(r.gpu, moe=True) == "moe"
        q = _risk.log_quantiles("moe")
        assert cfg.job.confidence == 0.8 and U.LEVELS[2] == 0.1 and U.LEVELS[6] == 0.9
        expected = r.step_s * np.exp([q[2], q[6]]) if np.isfinite(r.step_s) else [np.nan, np.nan]
        np.testing.assert_allclose([r.step_lo_s, r.step_hi_s], expected, rtol=1e-12)


def test_chunk_size_follows_the_devices(compose):
    """sweep.chunk_size null: 262,144 configurations per chunk over CPU devices, 4,194,304 per
    accelerator (benchmarks/chunk_size.py); a space smaller than that is one right-sized chunk."""
    from types import SimpleNamespace

    from jctopt.search.engine import default_chunk_size

    cpu = [SimpleNamespace(platform="cpu")] * 2
    gpu = [SimpleNamespace(platform="gpu")] * 4
    assert default_chunk_size(cpu) == 262144 and default_chunk_size(gpu) == 4 * 4194304
    assert compose(*SMALL).sweep.chunk_size is None
    space, engine = build(compose("model=gpt3_175b", "space=wide", "space.n_gpus=64:16384:32"))
    n_dev = len(engine.devices)
    assert space.size > 262144 and engine.chunk_size == -(-262144 // n_dev) * n_dev
    small, engine = build(_sweep_cfg(compose))
    assert small.size < 262144 and engine.chunk_size == -(-small.size // (256 * n_dev)) * 256 * n_dev


@pytest.mark.slow
def test_chunked_equals_one_shot(compose, tmp_path):
    cfg = _sweep_cfg(compose, "sweep.keep=all")
    one = run_sweep(cfg, tmp_path / "one")
    chunked = run_sweep(_sweep_cfg(compose, "sweep.keep=all", "sweep.chunk_size=256"), tmp_path / "chunked")
    space, engine = build(_sweep_cfg(compose, "sweep.chunk_size=256"))
    assert engine.chunk_size == 256 and space.size % 256 != 0  # several chunks, the last one padded
    assert len(list((tmp_path / "chunked" / "configs.parquet").glob("part-*"))) == space.n_chunks(256) > 3
    pd.testing.assert_frame_equal(one, chunked)


@pytest.mark.slow
def test_one_compilation_for_every_chunk_and_every_engine(compose):
    cfg = _sweep_cfg(compose, "sweep.chunk_size=256", "sweep.keep=best_per_group", "sweep.group_by=[gpu]")
    _, engine = build(cfg)
    before = TRACES[engine.kernel]
    for chunk in range(engine.space.n_chunks(256)):
        engine.collect(engine.dispatch(chunk))
    assert TRACES[engine.kernel] - before <= 1  # traced once here, or already by an earlier test
    traced = TRACES[engine.kernel]
    # A second Engine for the same space, another objective and a deadline: the same kernel.
    _, other = build(configured(cfg, sweep__objective="jct_s", sweep__max_days=40.0))
    assert other.kernel == engine.kernel
    for chunk in range(other.space.n_chunks(256)):
        other.collect(other.dispatch(chunk))
    assert TRACES[engine.kernel] == traced


def _pareto_brute(df, objective):
    pts = df[[objective, "jct_s"]].to_numpy()
    keep = [not np.any(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)) for p in pts]
    front = df[keep].drop_duplicates([objective, "jct_s"])
    return set(map(tuple, front[[objective, "jct_s"]].to_numpy().tolist()))


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["cost_usd", "jct_s"])
def test_reductions_equal_brute_force(compose, tmp_path, objective):
    full = run_sweep(_sweep_cfg(compose, "sweep.keep=all"), tmp_path / "all")
    ok = full[full.reason == "OK"]
    assert 0 < len(ok) < len(full)
    small = ["sweep.chunk_size=256", f"sweep.objective={objective}"]
    top = run_sweep(_sweep_cfg(compose, "sweep.keep=top_k", "sweep.top_k=7", *small), tmp_path / "top")
    assert top.config_id.tolist() == ok.sort_values([objective, "config_id"]).config_id.head(7).tolist()
    # A reduction's rows carry their intervals at job.confidence (model error and failures).
    assert ((top.jct_lo_s < top.jct_s) & (top.jct_s < top.jct_hi_s)).all() and top.p_deadline.between(0, 1).all()
    front = run_sweep(_sweep_cfg(compose, "sweep.keep=pareto", *small), tmp_path / "pareto")
    assert set(map(tuple, front[[objective, "jct_s"]].to_numpy().tolist())) == _pareto_brute(ok, objective)
    best = run_sweep(_sweep_cfg(compose, "sweep.keep=best_per_group", "sweep.group_by=[gpu,n_gpus]", *small),
                     tmp_path / "best")
    expected = ok.groupby(["gpu", "n_gpus"], observed=True)[objective].min()
    got = best.set_index(["gpu", "n_gpus"])[objective]
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index(), check_names=False)
    feasible = run_sweep(_sweep_cfg(compose, "sweep.keep=feasible", *small), tmp_path / "feasible")
    assert feasible.config_id.tolist() == ok.config_id.tolist()


@pytest.mark.slow
def test_deadline_filter(compose, tmp_path):
    full = run_sweep(_sweep_cfg(compose, "sweep.keep=feasible"), tmp_path / "all")
    days = float(np.median(full.jct_s)) / 86400
    kept = run_sweep(_sweep_cfg(compose, "sweep.keep=feasible", f"sweep.max_days={days}"), tmp_path / "dl")
    assert kept.config_id.tolist() == full[full.jct_s <= days * 86400].config_id.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["feasible", "top_k"])
def test_resume_after_interruption_equals_uninterrupted(compose, tmp_path, keep):
    cfg = _sweep_cfg(compose, f"sweep.keep={keep}", "sweep.chunk_size=256")
    whole = run_sweep(cfg, tmp_path / "whole")
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, out, stop_after=2)
    parts = out / ("candidates" if keep == "top_k" else "configs.parquet")
    assert len(list(parts.glob("part-*.parquet"))) == 2
    (parts / ".part-00000005.parquet.tmp").write_bytes(b"half a file")  # a write cut short
    resumed = run_sweep(cfg, out)
    pd.testing.assert_frame_equal(whole, resumed)
    assert not list(parts.glob(".*.tmp"))
    assert json.loads((out / "sweep.json").read_text())["reason_counts"] == \
        json.loads((tmp_path / "whole" / "sweep.json").read_text())["reason_counts"]


def test_processes_share_chunks(compose, tmp_path):
    cfg = _sweep_cfg(compose, "sweep.keep=feasible", "sweep.chunk_size=256")
    whole = run_sweep(cfg, tmp_path / "whole")
    first = run_sweep(cfg, tmp_path / "together", process=(0, 2))
    assert first.empty  # the other process's chunks are still missing
    second = run_sweep(cfg, tmp_path / "together", process=(1, 2))
    pd.testing.assert_frame_equal(whole, second)


@pytest.mark.slow
def test_float32_matches_float64(compose, tmp_path):
    f64 = run_sweep(_sweep_cfg(compose, "sweep.keep=all"), tmp_path / "f64")
    f32 = run_sweep(_sweep_cfg(compose, "sweep.keep=all", "sweep.dtype=float32"), tmp_path / "f32")
    assert (f64.reason == f32.reason).all()
    ok = f64.reason == "OK"
    np.testing.assert_allclose(f32.jct_s[ok], f64.jct_s[ok], rtol=1e-4)
    np.testing.assert_allclose(f32.cost_usd[ok], f64.cost_usd[ok], rtol=1e-4)


def test_billion_point_space_is_lazy(compose):
    cfg = compose("space=wide", "space.accum=1:64:1", "space.n_gpus=8:16384:8")
    space, engine = build(cfg)
    assert space.size > 10**9
    # a handful of int arrays per split, none per configuration
    held = sum(v.nbytes for v in space.splits.values()) + space.n_gpus.nbytes + space.counts.nbytes
    assert held < 50e6
    offset, n_valid, rows = engine.chunk_rows(space.n_chunks(engine.chunk_size) - 1)
    assert 0 < n_valid <= engine.chunk_size and rows.count_idx.size == space.rows_per_chunk(engine.chunk_size)


@pytest.mark.parametrize("key,value,needle", [
    ("space.tp", "[3,0]", "space.tp"), ("space.n_gpus", "divisors", "space.n_gpus"),
    ("space.pp", "'8:1:2'", "space.pp"),
    ("space.gpu", "[h100_sxm,tpu_v9]", "space.gpu entry 'tpu_v9' is not allowed: one of a100_40gb"),
    ("space.recompute", "[some]", "space.recompute"), ("space.ckpt_interval_s", "[-5]", "space.ckpt_interval_s"),
    ("sweep.keep", "best", "sweep.keep"), ("sweep.group_by", "[model]", "sweep.group_by"),
])
def test_bad_space_values_name_the_key(compose, key, value, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        build(compose(f"{key}={value}"))


def test_int_axis_forms():
    assert int_axis("n_gpus", "8:32:8").tolist() == [8, 16, 24, 32]
    assert int_axis("n_gpus", "8:100:x2").tolist() == [8, 16, 32, 64]
    assert int_axis("tp", "divisors", {"n_heads": 12}).tolist() == [1, 2, 3, 4, 6, 12]
    assert int_axis("pp", [4, 2, 4]).tolist() == [2, 4]


SHARDED = """
import sys, jax, pandas as pd
import jctopt
from jctopt.job import risk as _risk
from jctopt.tasks.sweep import run_sweep
assert len(jax.devices()) == 2
cfg = jctopt.compose(sys.argv[2:])
for keep in ("all", "top_k", "pareto", "best_per_group"):
    cfg.sweep.keep = keep
    one = run_sweep(cfg, sys.argv[1] + "/one-" + keep, devices=jax.devices()[:1])
    two = run_sweep(cfg, sys.argv[1] + "/two-" + keep)
    pd.testing.assert_frame_equal(one, two)
    print("equal", keep, len(two))
"""


@pytest.mark.slow
def test_sharded_equals_single_device(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-c", SHARDED, str(tmp_path), *SMALL, "sweep.chunk_size=512"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("equal ")] == \
        ["all", "top_k", "pareto", "best_per_group"]


@pytest.mark.slow
def test_cli_sweep_kill_and_resume(tmp_path):
    """A real process killed with SIGTERM mid-sweep resumes to the uninterrupted result."""
    args = [*SMALL, "sweep.chunk_size=64", "sweep.keep=feasible", "hydra.run.dir=" + str(tmp_path / "runs" / "a")]
    cmd = [sys.executable, "-m", "jctopt.app", "task=sweep"]
    slow = ["space.n_gpus=8:8192:8"]  # ~200 chunks of 64: seconds of writing for the kill to land in
    proc = subprocess.Popen(cmd + args + slow, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    parts = tmp_path / "runs" / "a" / "configs.parquet"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(parts.glob("part-*.parquet"))) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out[-2000:]  # 128 + SIGTERM, as the CLI exits on it
    n_before = len(list(parts.glob("part-*.parquet")))
    manifest = json.loads((tmp_path / "runs" / "a" / "sweep.json").read_text())
    assert manifest["status"] == "running" and 2 <= n_before < manifest["n_chunks"]
    resume = args[:-1] + ["sweep.resume=true", "hydra.run.dir=" + str(tmp_path / "runs" / "b")]
    done = subprocess.run(cmd + resume + slow, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming" in done.stdout
    whole = subprocess.run(cmd + args[:-1] + slow + ["hydra.run.dir=" + str(tmp_path / "whole")],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    resumed = pd.read_parquet(parts)
    pd.testing.assert_frame_equal(resumed, pd.read_parquet(tmp_path / "whole" / "configs.parquet"))
    import duckdb

    n = duckdb.sql(f"select count(*) from read_parquet('{parts}/*.parquet')").fetchall()[0][0]
    assert n == len(resumed) > 0


SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


@pytest.mark.slow
def test_multirun_sweep_file_with_joblib(tmp_path):
    cmd = [sys.executable, "-m", "jctopt.app", "-m", "--config-dir", str(SWEEPS), "--config-name", "gpu_x_fabric",
           "gpu=h100_sxm,b200", "fabric=ib_ndr400",  # command-line values replace the file's
           f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Joblib" in proc.stdout + proc.stderr
    gpus = {json.loads((tmp_path / str(i) / "estimate.json").read_text())["config"]["gpu"]["name"] for i in (0, 1)}
    assert gpus == {"h100_sxm", "b200"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in SWEEPS.glob("*.yaml")))
def test_sweep_files_compose_with_the_slurm_launcher(name):
    cmd = [sys.executable, "-m", "jctopt.app", "--config-dir", str(SWEEPS), "--config-name", name,
           "hydra/launcher=slurm", "--cfg", "hydra"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hydra_plugins.hydra_submitit_launcher" in proc.stdout and "params:" in proc.stdout


def test_expert_tensor_parallel_axis(compose):
    """space.etp: "tp" keeps experts split like the attention, 1 folds them (EP may then span
    the TP ranks). Qwen3-30B-A3B (128 experts) on 16 GPUs at tp 2, pp 1: dp 8, so ep 16 needs
    etp 1 (16 x 1 divides tp x dp = 16), and ep 8 runs either way. A dense model has no experts: its etp is
    tp, and an integer entry (which would run as tp, labelled otherwise) is refused by name, as are
    entries that are neither "tp" nor positive integers."""
    from jctopt.search.space import build_space

    base = ["model=qwen3_30b_a3b", "space.n_gpus=[16]", "space.tp=[2]", "space.pp=[1]", "space.cp=[1]",
            "space.ep=[8,16]", "space.vpp=[1]", "space.micro_batch=[1]", "training.global_batch=64"]
    cfg = compose(*base, "space.etp=[tp,1]")
    space = build_space(cfg.space, cfg.model, 64)
    rows = {(int(space.splits["ep"][i]), int(space.splits["etp"][i])) for i in space.split_rows(0)}
    assert rows == {(8, 2), (8, 1), (16, 1)}
    dense = compose(*base[1:], "model=llama3_8b", "space.ep=[1]", "space.etp=[tp]")
    space = build_space(dense.space, dense.model, 64)
    assert space.splits["etp"].tolist() == space.splits["tp"].tolist() == [2]
    for etp in ("[tp,1]", "[3]"):
        dense = compose(*base[1:], "model=llama3_8b", "space.ep=[1]", f"space.etp={etp}")
        with pytest.raises(ConfigError, match=r"^space.etp=\[.*\] is not allowed: \[tp\] with a dense model "
                                              r"\(model=llama3_8b has no experts to split\)"):
            build_space(dense.space, dense.model, 64)
    with pytest.raises(ConfigError, match=r"space.etp=\['half'\] is not allowed"):
        build_space(compose(*base, "space.etp=[half]").space, cfg.model, 64)
