"""HBM traffic of low-precision (fp8, MXFP8, NVFP4) GEMM recipes: the casts that feed the
tensor cores.

An fp8 GEMM reads fp8 operands, but the activations and gradients arrive in bf16: each GEMM
input is quantized forward, and each GEMM's output gradient backward. Transformer Engine
does this with a fused cast-transpose (Micikevicius et al. 2022, "FP8 formats for deep
learning", Sec. 4; Transformer Engine ``cast_transpose``): read bf16 once, write the fp8
tensor and its transpose, because the weight- and data-gradient GEMMs consume the other
layout (Hopper fp8 tensor cores take K-major operands only). MXFP8 (OCP Microscaling v1.0)
writes a row-wise and a column-wise quantized copy with one E8M0 scale per 32 elements;
NVFP4 (NVIDIA 2025, "Pretraining LLMs with NVFP4", arXiv:2509.25149, Sec. 4) writes two
4-bit copies with one E4M3 scale per 16 elements, after a pass of its own that reads the tensor
for its global amax: the recipe's random Hadamard transform on the wgrad operands (on by
default for inputs and gradients, Transformer Engine ``NVFP4BlockScaling``) needs the amax of
the transformed tensor, which ``NVFP4Quantizer::quantize_impl`` computes in
``nvte_hadamard_transform_amax`` before the quantize kernel reads the tensor again, and with
RHT on the norm and activation kernels do not fuse the amax (Transformer Engine
pytorch/csrc/quantizer.cpp, extensions/normalization.cpp and activation.cpp @d0067d0). MXFP8
needs no global amax. These kernels are memory bound and do not
get faster with the fp8 peak, which is one reason fp8 speeds a step up by less than the
peak ratio. Weights are quantized once per step and cached across micro-batches
(``is_first_microbatch``), negligible against the activations and left out.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import hybrid as Hy
from . import mamba as Mb
from .types import ModelSpec, Training

# Bytes moved per quantized element: read bf16 (2) + two low-precision copies + scales; NVFP4
# reads the bf16 tensor once more for its amax.
FP8_CAST_BYTES = 2.0 + 1.0 + 1.0 + 2.0 / 32.0  # fp8 + transpose; MXFP8's E8M0 scale per 32 (upper bound for fp8)
FP4_CAST_BYTES = 2.0 + 2.0 + 0.5 + 0.5 + 2.0 / 16.0  # NVFP4: the amax pass, two 4-bit copies, an E4M3 scale per 16


def cast_bytes_per_element(t: Training):
    """HBM bytes per quantized operand element at the run's precision; 0 for bf16/fp16."""
    return jnp.where(t.low_precision >= 2, FP4_CAST_BYTES, jnp.where(t.low_precision >= 1, FP8_CAST_BYTES, 0.0))


def quantized_elements_per_token(m: ModelSpec, t: Training, tp, qkv_width, mlp_width, mlp_input_width=None):
    """(forward, backward) operand elements quantized per token, per layer, per GPU.

    Forward: the inputs of the four GEMMs, QKV (h), attention output (heads x v_head_dim),
    MLP up (h) and MLP down (its width). Backward: their output gradients, QKV (qkv_width),
    attention output (h), MLP up ((1 + glu) x width), MLP down (h). Widths that tensor
    parallelism splits are divided by tp; the hidden-size operands are split by tp under
    sequence parallelism (Transformer Engine quantizes before the all-gather) and replicated
    on every TP rank without it. ``mlp_width``: what a token passes through (MoE: top_k and
    shared experts). An MoE layer's expert GEMMs take the permuted tokens, one copy per chosen
    expert (Transformer Engine's GroupedLinear quantizes each expert's input), and the shared
    experts the token once; LatentMoE's projections add their own: the MLP inputs and the
    output gradients of their last GEMMs are ``mlp_input_width`` elements
    (``model.compute.mlp_input_width_per_token``; None: h, a dense MLP). A hybrid's Mamba-2 mixers cast
    in_proj's input (h) and out_proj's (the inner width) forward, their output gradients
    (in_proj's width, h) backward; each mixer is weighted by its share of the layers (model.hybrid).
    """
    sp_div = jnp.where(t.seq_parallel > 0, tp, 1.0)
    h, context = m.hidden, m.n_heads * m.v_head_dim
    attn, mamba = Hy.attention_share(m), Hy.mamba_share(m)
    mlp_h = (h if mlp_input_width is None else mlp_input_width) / sp_div
    forward = ((attn + mamba) * h / sp_div + mlp_h
               + (attn * context + mamba * Mb.inner_width(m) + mlp_width) / tp)
    backward = ((attn + mamba) * h / sp_div + mlp_h
                + (attn * qkv_width + mamba * Mb.in_proj_width(m) + (1.0 + m.glu) * mlp_width) / tp)
    return forward, backward
