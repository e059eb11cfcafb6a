"""Value checks: ``check`` rejects an impossible value with a message that names the key, the value
and what is allowed."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from ..model import hybrid, pipeline, recompute_modules, schedules
from ..model import power as _power
from .choices import PRECISION, RECOMPUTE, SELECTIVE_AC, is_mxfp8, runs_precision, zero_shard_code
from .errors import _fail
from .resources import calibration_record
from .schema import (
    ClusterConf,
    FabricConf,
    GPUConf,
    JobConf,
    LayoutConf,
    ModelConf,
    TrainingConf,
    ranges,
)

# The groups whose numeric fields declare their allowed values (schema.ranged).
GROUP_SCHEMAS = {"model": ModelConf, "gpu": GPUConf, "fabric": FabricConf, "cluster": ClusterConf,
                 "layout": LayoutConf, "training": TrainingConf, "job": JobConf}


def check_ranges(group: str, values, where: str = "") -> None:
    """Raise ConfigError naming the first field of ``values`` (a ``group`` entry) outside the
    range its schema declares; ``where`` prefixes the message (a design space's entry)."""
    for key, allowed in ranges(GROUP_SCHEMAS[group]).items():
        if not allowed.allows(value := values[key]):
            _fail(f"{where}{group}.{key}", value, allowed.what)


def check(cfg: DictConfig, layout: bool = True) -> None:
    """Reject impossible values, naming the key, the value and what is allowed.

    ``layout=False`` skips the ``layout`` group (a design space brings its own layouts). A value
    the composed files leave unset (???) is named with the other unset keys of the groups checked,
    not met as an exception (looked for only once a check meets one: the walk costs 3 ms a call)."""
    groups = [group for group in GROUP_SCHEMAS if layout or group != "layout"]
    try:
        _check(cfg, layout, groups)
    except MissingMandatoryValue:
        missing = [key for group in groups for key in sorted(OmegaConf.missing_keys(cfg[group]))]  # full keys
        if not missing:
            raise
        _fail(missing[0], "???", "a value: its group's file or the command line must set it"
              + (f" (also unset: {', '.join(missing[1:])})" if missing[1:] else ""))


def _check(cfg: DictConfig, layout: bool, groups: list[str]) -> None:
    for group in groups:
        check_ranges(group, cfg[group])
    confidence = cfg.job.confidence
    if not (isinstance(confidence, float) and 0.0 < confidence < 1.0):
        _fail("job.confidence", confidence, "a probability strictly between 0 and 1")
    widest = widest_interval()
    if widest is not None and confidence > widest + 1e-12:
        _fail("job.confidence", confidence, f"a probability in (0, {widest:g}]: the model-error quantiles "
              f"({calibration_record()}, model_error.levels) cover central intervals up to {widest:g}")
    limit = cfg.cluster.gpu_power_limit_w
    if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit)
                                  and _power.STATIC_W < limit):
        _fail("cluster.gpu_power_limit_w", limit, f"watts above the static draw of {_power.STATIC_W:g} W "
              "(_power.STATIC_W), or null for the GPU's TDP")
    if layout and limit is not None and limit > cfg.gpu.tdp_w:
        # A limit caps the board's power; above TDP it would not overclock (model.power), so it
        # is a typo or the wrong GPU. (A design space may span GPUs: there it caps the larger ones.)
        _fail("cluster.gpu_power_limit_w", limit, f"watts in ({_power.STATIC_W:g}, {cfg.gpu.tdp_w:g}]: at most "
              f"gpu.tdp_w={cfg.gpu.tdp_w:g} W of gpu={cfg.gpu.name}, or null for its TDP")

    m, lay, tr, gpu, cl = cfg.model, cfg.layout, cfg.training, cfg.gpu, cfg.cluster
    kv = m.n_kv_heads if m.n_kv_heads is not None else m.n_heads
    if kv <= 0 or m.n_heads % kv:
        _fail("model.n_kv_heads", m.n_kv_heads, f"a positive divisor of model.n_heads={m.n_heads}")
    # Without a stated head_dim the head is hidden / n_heads; with one the query width n_heads x
    # head_dim is its own (GLM-4.5: 96 heads on a hidden size of 5,120).
    if m.head_dim is None and m.hidden % m.n_heads:
        _fail("model.n_heads", m.n_heads, f"a divisor of model.hidden={m.hidden}, or state model.head_dim")
    if m.top_k > m.n_experts:
        _fail("model.top_k", m.top_k, f"<= model.n_experts={m.n_experts}")
    if m.moe_latent_size and not (m.n_experts > 1 and 0 < m.moe_latent_size < m.hidden):
        _fail("model.moe_latent_size", m.moe_latent_size,
              f"0, or below model.hidden={m.hidden} in an MoE model (model.n_experts > 1)")
    if m.kv_lora_rank and not 0 <= m.qk_rope_head_dim < (m.head_dim or m.hidden // m.n_heads):
        _fail("model.qk_rope_head_dim", m.qk_rope_head_dim, "below model.head_dim (the query/key head: nope + rope)")
    _check_layer_pattern(m)
    attention_layers = layer_counts(OmegaConf.to_container(m, resolve=True))["attention_layers"]
    if not 0 <= m.window_layers <= attention_layers or (m.window_layers > 0) != (m.attention_window > 0):
        _fail("model.window_layers", m.window_layers,
              f"0-{attention_layers} (the attention layers), > 0 exactly when model.attention_window > 0")
    if not 0 <= m.n_dense_layers < m.n_layers or (m.n_dense_layers and m.n_experts == 1):
        _fail("model.n_dense_layers", m.n_dense_layers,
              f"0, or below model.n_layers={m.n_layers} in an MoE model (model.n_experts > 1)")
    if tr.recompute not in RECOMPUTE:
        _fail("training.recompute", tr.recompute, " | ".join(RECOMPUTE))
    if tr.selective_ac not in SELECTIVE_AC:
        _fail("training.selective_ac", tr.selective_ac, " | ".join(SELECTIVE_AC))
    for module in tr.recompute_modules:
        if module not in recompute_modules.MODULES:
            _fail("training.recompute_modules", module, " | ".join(recompute_modules.MODULES))
    if "mla_up_proj" in tr.recompute_modules and not m.kv_lora_rank:
        others = " | ".join(name for name in recompute_modules.MODULES if name != "mla_up_proj")
        _fail("training.recompute_modules", "mla_up_proj",
              f"{others} (mla_up_proj needs multi-latent attention, model.kv_lora_rank > 0)")
    if tr.precision not in PRECISION:
        _fail("training.precision", tr.precision, " | ".join(PRECISION))
    if not runs_precision(gpu, tr.precision):
        supported = " | ".join(p for p in PRECISION if runs_precision(gpu, p))
        cores = "block-scaled MXFP8 tensor cores: mxfp8_gemm_ratio 0" if is_mxfp8(tr.precision) else \
            f"{tr.precision} tensor cores"
        _fail("training.precision", tr.precision, f"{supported} (gpu={gpu.name} has no {cores})")
    if tr.fp8_attention and PRECISION[tr.precision] == 0:
        _fail("training.fp8_attention", tr.fp8_attention,
              f"false with training.precision={tr.precision} (FP8 attention runs inside an fp8 recipe: "
              "precision fp8, mxfp8 or nvfp4)")
    if tr.fp8_attention and not (tr.flash_attention and tr.fused_attention):
        _fail("training.fp8_attention", tr.fp8_attention,
              "false unless training.flash_attention and training.fused_attention are true (FP8 attention "
              "is Transformer Engine's cuDNN fused kernel)")
    if tr.zero_stage not in (0, 1, 2, 3):
        _fail("training.zero_stage", tr.zero_stage, "0, 1, 2 or 3")
    if (problem := node_problem(gpu, cl)) is not None:
        _fail(*problem)
    if (layout or OmegaConf.select(cfg, "space.accum") is None) and cfg.job.tokens < tr.global_batch * m.seq_len:
        # A design space with space.accum sets its own global batches; otherwise it is this one.
        _fail("job.tokens", cfg.job.tokens, f"at least one step, training.global_batch x model.seq_len = "
              f"{tr.global_batch} x {m.seq_len} = {tr.global_batch * m.seq_len:,} tokens")
    if layout:
        check_layout(m.n_heads, m.n_layers, m.seq_len, m.n_experts, lay.n_gpus, lay.tp, lay.pp,
                     lay.cp, lay.ep, lay.vpp, tr.global_batch, tr.micro_batch, lay.etp, lay.schedule,
                     mamba_groups=m.mamba_groups if layer_counts(m)["mamba_layers"] else None)
        shard = zero_shard_code(lay.get("zero_shard", "stack"))
        dp_ranks = lay.n_gpus // (lay.tp * lay.pp * lay.cp) * lay.cp
        if shard >= 1 and dp_ranks % int(shard):
            _fail("layout.zero_shard", lay.zero_shard, f"a divisor of dp x cp = {dp_ranks} (or stack | node | all)")
        if lay.pp == 1 and lay.schedule != "1f1b":
            _fail("layout.schedule", lay.schedule, "1f1b when layout.pp=1 (a pipeline schedule needs layout.pp > 1)")
        if tr.offload_layers > 0:
            stage = math.ceil(float(pipeline.stage_layers(m.n_layers, lay.pp, lay.vpp, m.mtp_layers)[0]) - 1e-9)
            if tr.offload_layers > stage:
                _fail("training.offload_layers", tr.offload_layers, f"at most {stage}, the layers of the busiest "
                      f"pipeline stage (model.n_layers={m.n_layers} over layout.pp={lay.pp})")


def _check_layer_pattern(m: DictConfig) -> None:
    """A hybrid model's layer pattern: one symbol per layer (model.hybrid), dense MLP layers counted as
    its n_dense_layers, routed ones only with experts, Mamba layers with a Mamba shape."""
    pattern = m.layer_pattern
    if pattern is None:
        return
    if not pattern or set(pattern) - set(hybrid.PATTERN_SYMBOLS):
        _fail("model.layer_pattern", pattern, f"a string of {' '.join(hybrid.PATTERN_SYMBOLS)} (M Mamba-2, * attention, "
              "- dense MLP, E routed experts), one per layer, without pipeline marks")
    if len(pattern) != m.n_layers:
        _fail("model.n_layers", m.n_layers, f"{len(pattern)}, the length of model.layer_pattern")
    counts = hybrid.pattern_counts(pattern)
    if hybrid.MOE in pattern and m.n_experts == 1:
        _fail("model.layer_pattern", pattern, "without E (routed experts) when model.n_experts=1")
    if m.n_experts > 1 and m.n_dense_layers != counts["dense_mlp_layers"]:
        _fail("model.n_dense_layers", m.n_dense_layers, f"{counts['dense_mlp_layers']}, the - (dense MLP) layers "
              "of model.layer_pattern")
    if counts["mamba_layers"]:
        for key in ("mamba_groups", "mamba_head_dim", "mamba_state"):
            if not m[key] > 0:
                _fail(f"model.{key}", m[key], "a positive integer")
        if not m.mamba_heads > 0 or m.mamba_heads % m.mamba_groups:
            _fail("model.mamba_heads", m.mamba_heads, f"a positive multiple of model.mamba_groups={m.mamba_groups}")


def layer_counts(m: dict) -> dict[str, int]:
    """Layers per kind (model.hybrid): from the pattern, or attention and MLP in every layer."""
    if m.get("layer_pattern") is None:
        return {"attention_layers": m["n_layers"], "mamba_layers": 0, "mlp_layers": m["n_layers"]}
    counts = hybrid.pattern_counts(m["layer_pattern"])
    return {k: counts[k] for k in ("attention_layers", "mamba_layers", "mlp_layers")}


def node_problem(gpu, cluster) -> tuple[str, object, str] | None:
    """(key, value, what it may be) where the nodes of ``cluster`` (a resolved cluster group)
    cannot hold ``gpu``, else None: a cluster of compute trays (``tray_nodes``) for a GPU that
    has none, or a node size the GPU does not come in (``node_sizes``)."""
    if cluster["tray_nodes"] and not gpu.tray_gpus:
        return ("cluster", cluster["name"], f"a cluster of servers with gpu={gpu.name} (cluster={cluster['name']}'s "
                "nodes are compute trays of a rack-scale GPU, gpu.tray_gpus; the default cluster gives each GPU "
                "its own node: 8 on HGX, the tray on NVL72)")
    if (allowed := node_sizes(gpu, cluster["gpus_per_node"])) is not None:
        return ("cluster.gpus_per_node", cluster["gpus_per_node"], allowed)
    return None


def node_sizes(gpu: DictConfig, gpus_per_node: int) -> str | None:
    """What cluster.gpus_per_node may be with this GPU, or None when ``gpus_per_node`` is allowed:
    a divisor of its NVLink domain; for a rack of compute trays (NVL72) the tray, whose hosts,
    NICs and failures a node stands for (cluster=nvl72), or the whole domain as one node; for a
    GPU sold in nodes of its domain (GH200's four) that node."""
    if gpu.nvlink_domain % gpus_per_node:
        return f"a divisor of gpu.nvlink_domain={gpu.nvlink_domain} (gpu={gpu.name})"
    if gpu.tray_gpus and gpus_per_node not in (gpu.tray_gpus, gpu.nvlink_domain):
        if gpu.tray_gpus == gpu.nvlink_domain:
            return f"{gpu.tray_gpus} (gpu={gpu.name} comes in nodes of {gpu.tray_gpus})"
        return (f"{gpu.tray_gpus} (gpu={gpu.name} is a rack of {gpu.tray_gpus}-GPU compute trays: cluster=nvl72) or "
                f"{gpu.nvlink_domain} (the whole NVLink domain as one node)")
    return None


def check_layout(heads, layers, seq_len, experts, n_gpus, tp, pp, cp, ep, vpp, global_batch, micro_batch,
                 etp=None, schedule="1f1b", mamba_groups=None):
    """Raise ConfigError naming the first layout value that does not divide (or a schedule that
    cannot run on it); ``etp`` None = tp; ``mamba_groups`` those of a model with Mamba-2 layers."""
    etp = tp if etp is None else etp
    if schedule not in schedules.SCHEDULES:
        _fail("layout.schedule", schedule, " | ".join(schedules.SCHEDULES))
    if heads % tp:
        _fail("layout.tp", tp, f"a divisor of model.n_heads={heads}")
    if mamba_groups is not None and mamba_groups % tp:
        _fail("layout.tp", tp, f"a divisor of model.mamba_groups={mamba_groups} (Mamba-2 splits its groups over tp)")
    if not pipeline.fits(layers, pp, vpp):
        _fail("layout.pp", pp, f"pp x vpp (vpp={vpp}) at most model.n_layers + 2 = {layers + 2} "
              "(every virtual stage holds a layer, the embedding or the loss)")
    if vpp > 1 and pp == 1:
        _fail("layout.vpp", vpp, "1 when layout.pp=1 (interleaving needs a pipeline)")
    if seq_len % cp:
        _fail("layout.cp", cp, f"a divisor of model.seq_len={seq_len}")
    if experts % ep:
        _fail("layout.ep", ep, f"a divisor of model.n_experts={experts}")
    if n_gpus % (tp * pp * cp):
        _fail("layout.n_gpus", n_gpus, f"a multiple of tp*pp*cp={tp * pp * cp}")
    if etp < 1 or tp % etp:
        _fail("layout.etp", etp, f"a divisor of layout.tp={tp} (expert tensor parallelism within the TP ranks)")
    dp = n_gpus // (tp * pp * cp)
    if (tp * cp * dp) % (etp * ep):
        # MoE parallel folding: the stage's tp*cp*dp ranks split into etp x ep x edp (model.experts).
        _fail("layout.ep", ep, f"a divisor of tp*cp*dp/etp={tp * cp * dp // etp} (etp={etp})")
    if global_batch % (dp * micro_batch):
        _fail("training.global_batch", global_batch,
              f"a multiple of dp x micro_batch = {dp} x {micro_batch} = {dp * micro_batch}")
    if (why := schedules.requirement(schedule, pp, vpp, global_batch // (dp * micro_batch))) is not None:
        _fail("layout.schedule", schedule, f"a schedule that runs here: {schedule} needs {why}")


def widest_interval(record: Path | None = None) -> float | None:
    """The widest central interval (a probability) the calibration's model-error quantiles cover:
    1 - 2 x the lowest of their levels (``model_error.levels`` of ``record``, default the one
    in force, ``resources.calibration_record``); None where the record holds none."""
    return _widest_interval(record or calibration_record())


@functools.cache
def _widest_interval(record: Path) -> float | None:
    if not record.is_file():
        return None
    levels = OmegaConf.select(OmegaConf.load(record), "model_error.levels")
    if not levels:
        return None
    return 1.0 - 2.0 * max(min(levels), 1.0 - max(levels))
