"""Every catalog entry composes; bad keys and impossible values stop with a clear message."""

import itertools
import math
import re

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

import jctopt
from jctopt.config import load_option
from jctopt.config.resources import CONF_DIR
from jctopt.config.schema import GPUConf
from jctopt.model import flops as Fl

GROUPS = {g: sorted(p.stem for p in (CONF_DIR / g).glob("*.yaml")) for g in ("gpu", "fabric", "cluster", "model")}


def test_catalogs_are_complete():
    assert {"a100_80gb", "a100_40gb", "h100_sxm", "h200", "b200", "gb200", "mi300x"} <= set(GROUPS["gpu"])
    assert {"ib_hdr200", "ib_ndr400", "ib_xdr800", "roce400", "eth100_tcp"} <= set(GROUPS["fabric"])
    assert {"gpt3_175b", "llama3_8b", "llama3_70b", "llama3_405b", "mixtral_8x7b", "gpt_1p7b",
            "gpt_1008b"} <= set(GROUPS["model"])


@pytest.mark.parametrize("gpu,fabric", list(itertools.product(GROUPS["gpu"], GROUPS["fabric"])))
def test_every_gpu_and_fabric_composes_and_evaluates(compose, gpu, fabric):
    cluster = "nvl72" if gpu in ("gb200", "gb300") else "default"
    cfg = compose(f"gpu={gpu}", f"fabric={fabric}", f"cluster={cluster}", "model=gpt_7p5b",
                  "layout.n_gpus=64", "layout.tp=4", "layout.pp=1", "training=modern",
                  "training.global_batch=64")
    est = jctopt.estimate(jctopt.to_config(cfg))
    assert bool(est.feasible)
    assert 0 < float(est.efficiency) <= 1


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_an_nvl72_gpu_on_8_gpu_nodes_names_the_cluster(compose, gpu):
    """An NVL72 rack is 18 compute trays of 4 GPUs: the default cluster's node follows the GPU
    (8 on HGX, the 4-GPU tray here, one NIC per GPU); an 8-GPU node (hosts, NICs and failures
    counted per 8 GPUs) is refused, the tray (cluster=nvl72) or the whole 72-GPU domain
    (validate's gpus_per_node column) is taken."""
    with pytest.raises(jctopt.ConfigError, match=rf"cluster.gpus_per_node=8 is not allowed: 4 \(gpu={gpu} is a "
                                                 r"rack of 4-GPU compute trays: cluster=nvl72\) or 72"):
        jctopt.to_config(compose(f"gpu={gpu}", "cluster.gpus_per_node=8"))
    for cluster in ("cluster=default", "cluster=nvl72"):
        c = jctopt.to_config(compose(f"gpu={gpu}", cluster)).cluster
        assert (float(c.gpus_per_node), float(c.nics_per_node)) == (4.0, 4.0)
    assert float(jctopt.to_config(compose("gpu=b200")).cluster.gpus_per_node) == 8.0
    assert float(jctopt.to_config(compose(f"gpu={gpu}", "cluster.gpus_per_node=72",
                                          "cluster.nics_per_node=72")).cluster.gpus_per_node) == 72.0


@pytest.mark.parametrize("gpu", ["h100_sxm", "b200", "mi300x"])
def test_a_server_gpu_in_nvl72_trays_is_refused_by_name(compose, gpu):
    """cluster=nvl72's nodes are a rack-scale GPU's 4-GPU compute trays: an HGX or OAM GPU there
    (which would run as 4-GPU nodes, twice its hosts' failures) is refused, naming the cluster,
    alone or as an entry of a design space; the default cluster gives it its own 8-GPU node."""
    from jctopt.search.engine import build

    with pytest.raises(jctopt.ConfigError, match=rf"cluster='nvl72' is not allowed: a cluster of servers with "
                                                 rf"gpu={gpu} \(cluster=nvl72's nodes are compute trays"):
        jctopt.to_config(compose(f"gpu={gpu}", "cluster=nvl72"))
    with pytest.raises(jctopt.ConfigError, match=rf"space.gpu entry '{gpu}' is not allowed with cluster='nvl72'"):
        build(compose("task=sweep", "gpu=gb200", "cluster=nvl72", f"space.gpu=[{gpu},gb200]"))
    assert float(jctopt.to_config(compose(f"gpu={gpu}")).cluster.gpus_per_node) == 8.0


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_a_whole_rack_as_one_node_keeps_a_nic_per_gpu_and_a_host_per_tray(compose, gpu):
    """gpus_per_node=72 on an NVL72 GPU: the node is the rack, whose 18 trays are 18 hosts with 4
    NICs each, so it has 72 NICs and fails 18 times as often as one host (mtbf_node_h / 18);
    the cluster's MTBF is the same as counted per 4-GPU tray (equal hosts, NICs and switches)."""
    from jctopt.job.timeline import cluster_mtbf_s

    tray = jctopt.to_config(compose(f"gpu={gpu}", "layout.n_gpus=1152", "layout.tp=4", "layout.pp=4", "training.global_batch=1152"))
    rack = jctopt.to_config(compose(f"gpu={gpu}", "layout.n_gpus=1152", "layout.tp=4", "layout.pp=4", "training.global_batch=1152",
                                    "cluster.gpus_per_node=72"))
    assert float(rack.cluster.nics_per_node) == 72.0 and float(tray.cluster.nics_per_node) == 4.0
    assert float(rack.cluster.mtbf_node_h) == pytest.approx(24350 / 18, rel=1e-12)
    assert float(tray.cluster.mtbf_node_h) == 24350.0
    assert float(cluster_mtbf_s(rack)) == pytest.approx(float(cluster_mtbf_s(tray)), rel=1e-12)
    h100 = jctopt.to_config(compose("gpu=h100_sxm", "cluster.gpus_per_node=4")).cluster
    assert (float(h100.nics_per_node), float(h100.mtbf_node_h)) == (4.0, 24350.0)  # a host of 4 GPUs, 4 NICs


@pytest.mark.parametrize("model", GROUPS["model"])
def test_every_model_composes(compose, model):
    # single_node's tp=8 where the heads allow it; Qwen2.5-7B's 28 heads split 4 ways at most.
    tp = math.gcd(8, int(load_option("model", model).n_heads))
    cfg = compose(f"model={model}", "layout=single_node", f"layout.tp={tp}", "training.global_batch=8")
    config = jctopt.to_config(cfg)
    assert float(config.model.n_layers) > 0


def test_misspelled_override_names_the_key(compose):
    with pytest.raises(ConfigCompositionException, match="nvlink_gbs"):
        compose("gpu.nvlink_gbs=900")


def test_misspelled_catalog_key_names_the_key():
    # What a typo inside a conf/gpu/*.yaml file meets when merged into the schema.
    with pytest.raises(ConfigKeyError, match="nvlink_gbs"):
        OmegaConf.merge(OmegaConf.structured(GPUConf), {"nvlink_gbs": 900})
    with pytest.raises(ValidationError, match="hbm_gb"):
        OmegaConf.merge(OmegaConf.structured(GPUConf), {"hbm_gb": "lots"})


@pytest.mark.parametrize("override,key", [
    ("fabric.nic_gbit=-400", "fabric.nic_gbit"),
    ("gpu.hbm_tbps=0", "gpu.hbm_tbps"),
    ("layout.tp=7", "layout.tp"),
    ("cluster.gpus_per_node=16", "cluster.gpus_per_node"),
    ("training.recompute=sometimes", "training.recompute"),
    ("training.global_batch=1001", "training.global_batch"),
    ("gpu.matmul_eff=1.5", "gpu.matmul_eff"),
    ("training.precision=fp8", "training.precision"),  # A100 has no fp8
    ("job.ckpt_interval_s=-100", "job.ckpt_interval_s"),  # was: -29,252 checkpoints, JCT below failure-free
    ("job.ckpt_interval_s=0", "job.ckpt_interval_s"),  # was: feasible with an infinite cost
    ("cluster.oversubscription=nan", "cluster.oversubscription"),  # was: feasible with null times
    ("cluster.oversubscription=inf", "cluster.oversubscription"),
    ("job.deadline_days=0", "job.deadline_days"),
    ("job.deadline_days=-5", "job.deadline_days"),
    ("job.deadline_days=nan", "job.deadline_days"),
])
def test_impossible_values_name_key_value_and_allowed(compose, override, key):
    cfg = compose(override)
    value = override.split("=", 1)[1]
    with pytest.raises(jctopt.ConfigError) as err:
        jctopt.to_config(cfg)
    message = str(err.value)
    assert message.startswith(f"{key}=")
    assert value in message
    assert "allowed" in message


@pytest.mark.parametrize("task", ["deadline", "procure"])
def test_searches_blame_the_deadline_the_user_set(compose, task):
    from jctopt.tasks import deadline, procure

    run = {"deadline": deadline.run_deadline, "procure": procure.run_procure}[task]
    with pytest.raises(jctopt.ConfigError, match=r"^job\.deadline_days=0"):
        run(compose(f"task={task}", "job.deadline_days=0"))


def test_a_query_width_other_than_hidden_needs_its_head_dim(compose):
    """96 query heads on a hidden size of 5,120 with 8 query groups (GLM-4.5's attention,
    Megatron-Bridge docs/models/glm/glm45.md @067f987df0): 5,120 / 96 is no whole head, so the
    head width must be stated (128 here, a query width of 12,288); then the attention weights
    are h (96 + 2 x 8) 128 + 96 x 128 x h per layer. Unstated, the error names the key and the
    way out."""
    shape = ("model=llama3_70b", "model.hidden=5120", "model.n_heads=96", "model.n_kv_heads=8")
    with pytest.raises(jctopt.ConfigError, match=r"model.n_heads=96 is not allowed: a divisor of "
                                                 r"model.hidden=5120, or state model.head_dim"):
        jctopt.to_config(compose(*shape))
    cfg = jctopt.to_config(compose(*shape, "model.head_dim=128"))
    assert float(Fl.attention_params(cfg.model)) == 5120 * (96 + 2 * 8) * 128 + 96 * 128 * 5120
    assert bool(jctopt.estimate(cfg).feasible)


# Numeric keys whose bounds depend on other values: config.checks tests them beside the others.
CONTEXTUAL = {"cluster.gpu_power_limit_w": "(static draw, gpu.tdp_w]", "job.confidence": "up to the widest interval"}


def test_every_numeric_key_declares_its_range():
    """Each int or float field of the model's groups carries its allowed values on the schema
    (config.schema.ranged), read by check, by space.gpu_overrides and by a space's GPU entries."""
    import dataclasses
    import typing

    from jctopt.config.checks import GROUP_SCHEMAS
    from jctopt.config.schema import ranges

    numeric = (int, float, typing.Optional[int], typing.Optional[float])
    undeclared = [f"{group}.{f.name}" for group, conf in GROUP_SCHEMAS.items() for f in dataclasses.fields(conf)
                  if typing.get_type_hints(conf)[f.name] in numeric and f.name not in ranges(conf)]
    assert sorted(undeclared) == sorted(CONTEXTUAL)


def test_a_range_allows_finite_numbers_between_its_ends():
    from jctopt.config.schema import UNIT, Range

    assert [UNIT.allows(v) for v in (0.0, 1e-9, 1, 1.0 + 1e-9, float("nan"), float("inf"), True, "0.5", None)] == \
        [False, True, True, False, False, False, False, False, False]
    assert Range(0, null=True).allows(None) and Range(1).allows(1) and not Range(1).allows(0.999)


@pytest.mark.parametrize("override, allowed", [
    ("gpu.matmul_eff=5", "a fraction in (0, 1]"), ("gpu.matmul_eff=0", "a fraction in (0, 1]"),
    ("gpu.price_per_gpu_hour=0", "a finite number > 0"), ("gpu.nvls_eff=1.5", "a fraction in [0, 1]"),
    ("fabric.nic_eff=0", "a fraction in (0, 1]"), ("model.head_dim=-1", "a positive integer, or null"),
    ("training.overlap_eta=1.5", "a fraction in [0, 1]"), ("training.zero_stage=4", "0, 1, 2 or 3"),
    ("cluster.oversubscription=0.5", "a finite number >= 1 (1 = full bisection)"),
    ("job.ckpt_interval_s=-3", "seconds > 0, or null"),
])
def test_a_value_outside_its_declared_range_is_refused_wherever_it_is_given(compose, override, allowed):
    """The same declaration refuses the value on the command line and, for a GPU's keys, in
    space.gpu_overrides (where matmul_eff 5 once ran at 192 % MFU)."""
    from jctopt.search.engine import build

    key, value = override.split("=")
    with pytest.raises(jctopt.ConfigError, match=rf"{key}={value}(\.0)? is not allowed: {re.escape(allowed)}"):
        jctopt.to_config(compose(override))
    if key.startswith("gpu."):
        field = key.removeprefix("gpu.")
        with pytest.raises(jctopt.ConfigError, match=rf"space.gpu_overrides.h100_sxm.{field}={value} is not allowed: "
                                                     rf"{re.escape(allowed)}"):
            build(compose("task=sweep", "space.gpu=[h100_sxm]", f"space.gpu_overrides={{h100_sxm:{{{field}:{value}}}}}"))


def test_a_users_gpu_file_outside_the_ranges_is_refused_as_a_space_entry(compose, tmp_path, monkeypatch):
    """A GPU file of the user's config directory with matmul_eff 3 (a typo for 0.3), named in a
    design space beside the base GPU, is refused naming the entry and the key."""
    from jctopt.search.engine import build

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "jctopt" / "gpu").mkdir(parents=True)
    text = (CONF_DIR / "gpu" / "h100_sxm.yaml").read_text().replace("name: h100_sxm", "name: my_h100")
    (tmp_path / "jctopt" / "gpu" / "my_h100.yaml").write_text(re.sub(r"(?m)^matmul_eff: .*$", "matmul_eff: 3", text))
    with pytest.raises(jctopt.ConfigError, match=r"space.gpu entry 'my_h100': gpu.matmul_eff=3.0 is not allowed: "
                                                 r"a fraction in \(0, 1\]"):
        build(compose("task=sweep", "space.gpu=[h100_sxm,my_h100]"))


def test_a_value_left_unset_is_named_not_met_as_an_exception(compose):
    """A key a GPU file (or the command line: ???) leaves unset is one ConfigError naming it and
    every other unset key of the model's groups."""
    with pytest.raises(jctopt.ConfigError, match=r"gpu.attn_eff='\?\?\?' is not allowed: a value: its group's file "
                                                 r"or the command line must set it \(also unset: gpu.matmul_eff\)"):
        jctopt.to_config(compose("gpu.matmul_eff=???", "gpu.attn_eff=???"))
