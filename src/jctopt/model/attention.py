"""Forward time of the fused (flash) attention core of one layer for one micro-batch.

A fused kernel's time is its FLOPs at the kernel's sustained rate plus a fixed cost per call:
the launch, the pipeline fill of the first tiles and the tail of the last wave, paid once
however few heads a GPU holds. The fixed cost is why a tp-split layer (8 heads per GPU) runs
its attention at a fraction of the rate of an unsplit one (64-128 heads per GPU).

Measured (MooreThreads/SimuMax configs/system/b200_bf16_ceperm.json @4dcaae513b, "sdp_fwd" /
"sdp_bwd": Transformer Engine 2.11 DotProductAttention, causal, bf16, one B200, b = 1,
s = 4096-131072, 4-128 query heads): forward + backward time = 3.5 x (half-square FLOPs) /
(0.43 x peak) + 99 us, a least-squares fit in relative error over 19 shapes, within 21 % on
the GQA shapes (202 us at 4 heads and s = 4096 to 0.25 s at 131072 tokens); MLA's 192/128 head
dimensions run up to 23 % slower than it. Forward alone at s = 4096: 4 heads 92 us, 8 heads
99 us, 16 heads 106 us (a floor), 128 heads 490 us.

The architecture's own kernel (cuDNN fused attention, which Transformer Engine runs in
Megatron-Core and NeMo) has its own measured rate, ``fused_attn_eff``: NVIDIA's cuDNN SDPA
training benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results @3929da2,
Llama 3.1 shape: 64 query heads, 8 KV heads, d = 128, causal, bf16, non-deterministic backward,
s = 2048-32768), fitted as above (fwd + bwd = 3.5 x half-square FLOPs / (eff x peak) + 99 us, least
squares in relative error): H200 (cuDNN 9.19) 0.575 of 989 TFLOP/s, within 14 %; GB200 (cuDNN
9.22) 0.537 of 2500, within 11 %; GB300 0.615, within 10 % (Blackwell Ultra's doubled exponent
rate). The Hopper parts carry it; ``attn_eff`` stays the rate of FlashAttention-2 and PyTorch's
SDPA there, which `calibrate` fits. The Blackwell parts do not: every Blackwell row ran cuDNN's
kernel, so their fitted attn_eff (0.30, about half the kernel's 0.537) is what those rows imply
for it. The kernel has grown faster on Blackwell release by release (the same benchmark's history,
Llama 3.1 405B shape, 128 query heads, forward + backward over the bf16 peak at s = 4096 / 8192 /
16384): B200 through PyTorch's SDPA, cuDNN 9.10 and 9.13, 0.33 / 0.44 / 0.51 (@f937055, @0b1577c);
GB300 0.38 / 0.49 / 0.55 at cuDNN 9.13 (PyTorch's SDPA) and 0.49 / 0.57 / 0.61 at 9.17 (cuDNN's
frontend called directly; @0b1577c, @b372d39). The
catalog's Blackwell parts at the kernel's 2026 rate, refitted on runs_dev.csv + runs_dev2.csv
(2026-11-28, not applied): dense 2025 rows as good (runs_dev2.csv 2.9 %), but runs_moe_dev.csv 14.5 %
(7.8 % now), and the 2026 rows of runs_mbridge_dense.csv no closer (13.3 %, 13.8 % now; GB200 still
10 % too slow, the refit lowers Blackwell's GEMM rates to keep the 2025 rows): the fitted value
carries Blackwell costs the model does not itemise, and stays until they are found. Two more
trials, neither applied: (1) the kernel's 2026 rate only for stacks with cuDNN 9.17 or later (NeMo's
containers: 25.09 cuDNN 9.11, 25.11 9.13, 26.02 9.18, 26.04 9.20, 26.06 9.21; Megatron-Bridge
docs/releases/software-versions.md @067f987df0), 2025 rows at the fitted rate: runs_mbridge_dense.csv
13.8 -> 11.1 %, but runs_moe_dev.csv 7.8 -> 11.5 % (10.6 % with the launch floor refitted, 0.013 s;
leave-one-family-out 13.7 %) and runs_mbridge_moe.csv 16.6 -> 17.4 %: Megatron-Bridge's 2026
Qwen3-30B-A3B rows, close now, come out 10-16 % too fast. (2) runs_mbridge_dense.csv added to the
calibration (661 rows): the fit raises Blackwell's attn_eff to 0.48 (GB300 0.54) and keeps the GEMM
rates; fitted 4.04 %, leave-one-source-out 4.56 %, the 2026 sections still 9-13 % off fitted;
runs_mbridge_moe.csv 14.4 %, but runs_moe_dev.csv 13.2 % (launch floor refitted to 0.0125 s; 12.0 %
at 0.009).

One call per layer, micro-batch and pass is charged; context parallelism's ring steps are not
counted apart.

FP8 attention (Transformer Engine's ``fp8_dot_product_attention``, cuDNN's FP8 fused kernel):
the two GEMMs of the core run on the fp8 tensor cores, the softmax does not, so the gain depends
on how much of the kernel's time is tensor work. The same cuDNN benchmark, fp8 against bf16,
forward + backward, causal, s = 4096 and 8192 (mean of the two): heads with their own K/V (DeepSeek-V3's
MLA shape, 128 heads of 192/128, and Kimi's, 64 heads) 1.59x on GB200 and 1.75x on GB300; grouped-query
heads (Llama 3.1's 64 query / 8 KV heads of 128) 1.11x and 1.25x, their backward barely faster;
on H200 (cuDNN 9.19, Llama shape) 1.08x at 4096 and 0.90x at 8192. The catalog carries the two
ratios per GPU (``fp8_attn_speedup``, ``fp8_attn_speedup_gqa``; 1 where none is measured), and
the core's time (fixed cost included) is divided by the one for the model's heads. Not modelled:
the same benchmark's FP8 backward of a 128-token sliding window (gpt-oss's band, 128 heads of 64)
visits the whole causal square, 0.39x the bf16 kernel's speed forward + backward at s = 4096 on GB300;
windowed layers take the ratio of their heads as the others.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import GPUSpec, ModelSpec, Training

# Fixed time of one forward attention call (s): the 99 us of a forward + backward pair split as
# the FLOPs are (backward = 2.5 x forward, model.compute.core_backward_factor): 99 / 3.5. Measured
# on B200 (module docstring); taken as the same on other GPUs (no per-shape kernel table
# published for them): launch and tile pipeline latency, not throughput.
ATTENTION_CALL_S = 99e-6 / 3.5


def flash_forward_time(half_square_flops, g: GPUSpec, t: Training):
    """Forward time (s) of a fused attention call that runs ``half_square_flops`` (the causal
    half of the square, as FlashAttention's benchmarks count them; Dao 2023, Sec. 4.1) at
    attn_eff of the bf16 peak, or at fused_attn_eff where the stack runs the architecture's
    own kernel and the catalog has its rate, plus the fixed cost of the call."""
    eff = jnp.where((t.fused_attention > 0) & (g.fused_attn_eff > 0), g.fused_attn_eff, g.attn_eff)
    return half_square_flops / (1e12 * g.peak_bf16_tflops * eff) + ATTENTION_CALL_S


def fp8_speedup(m: ModelSpec, g: GPUSpec, t: Training):
    """Divisor of the fused attention core's time under FP8 attention: the catalog's measured
    bf16 / fp8 ratio for the model's heads (grouped-query where a KV head serves several query
    heads, else heads with their own K/V, as MLA's), 1 without FP8 attention, without the cuDNN
    kernel it is, or where the GEMMs are not in a low precision (Transformer Engine runs FP8
    attention inside its fp8 recipe)."""
    ratio = jnp.where(m.n_kv_heads < m.n_heads, g.fp8_attn_speedup_gqa, g.fp8_attn_speedup)
    return jnp.where((t.fp8_attention > 0) & (t.fused_attention > 0) & (t.low_precision >= 1), ratio, 1.0)
