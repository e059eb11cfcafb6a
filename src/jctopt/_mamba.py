"""The Mamba-2 mixer of a hybrid layer: weights, FLOPs, HBM traffic and stored activations.

Dao & Gu 2024, "Transformers are SSMs" (arXiv:2405.21060), Sec. 7 (the Mamba-2 block) and
Sec. 6 (the SSD algorithm); Megatron-Core's ``MambaMixer`` (``megatron/core/ssm/mamba_mixer.py``)
as Nemotron-H trains it. Per token, with ``H`` heads of ``P`` channels (inner width
``d = H P``), ``g`` groups of state size ``N``:

- ``in_proj`` (column-parallel) maps the hidden state to z (d), x (d), B and C (g N each) and
  the step sizes dt (H); ``out_proj`` (row-parallel) maps d back. These are the layer's GEMMs.
- a causal depthwise convolution of width 4 and SiLU over x, B, C (``causal_conv1d``);
- the SSD scan in chunks of ``Q`` tokens (``mamba_ssm/ops/triton/ssd_combined.py``,
  ``_mamba_chunk_scan_combined_fwd``): C B^T within a chunk (per group, Q x Q x N), its product
  with x (per head, Q x Q x P), the chunk's state B^T x (N x P) and the output from the
  carried state C h (N x P);
- a gated RMSNorm of y with z, then ``out_proj``.

Tensor parallelism splits heads and groups (Megatron-Core requires both to divide by tp).
"""

from __future__ import annotations

from ._types import ModelSpec

CONV_KERNEL = 4  # d_conv of Mamba-2 and Nemotron-H (Megatron-Core MambaMixer default)
CHUNK = 128  # SSD chunk length Q (Megatron-Core DEFAULT_MAMBA_CHUNK_SIZE)


def inner_width(m: ModelSpec):
    """d = heads x head_dim: the width of x, z and y."""
    return m.mamba_heads * m.mamba_head_dim


def conv_width(m: ModelSpec):
    """Channels of the convolution: x, B and C."""
    return inner_width(m) + 2.0 * m.mamba_groups * m.mamba_state


def in_proj_width(m: ModelSpec):
    """Output width of in_proj: z, x, B, C and dt."""
    return inner_width(m) + conv_width(m) + m.mamba_heads


def mixer_params(m: ModelSpec):
    """Weights of one Mamba-2 mixer (its pre-norm is the caller's): in_proj, the convolution's
    taps and bias, per-head A, D and dt bias, the gated norm, out_proj. Nemotron-H 8B: 109.6 M."""
    d = inner_width(m)
    conv = conv_width(m) * (CONV_KERNEL + 1.0)
    return m.hidden * in_proj_width(m) + conv + 3.0 * m.mamba_heads + d + d * m.hidden


def gemm_params(m: ModelSpec):
    """Weights a token multiplies in GEMMs: in_proj and out_proj."""
    return m.hidden * (in_proj_width(m) + inner_width(m))


def scan_forward_flops_per_token(m: ModelSpec):
    """SSD forward FLOPs per token (Dao & Gu 2024, Sec. 6, steps 1, 2 and 4, per chunk of Q
    tokens divided by Q): C B^T 2 g Q N; its masked product with x 2 H Q P; chunk states and
    the output from the carried state 2 x 2 H N P. The state passing between chunks (H P N per
    chunk) is negligible. Nemotron-H 8B: 6.6 MFLOP against 219 MFLOP of GEMMs."""
    q, n, p = CHUNK, m.mamba_state, m.mamba_head_dim
    return 2.0 * (m.mamba_groups * q * n + m.mamba_heads * (q * p + 2.0 * n * p))


def forward_bytes_per_token(m: ModelSpec):
    """HBM bytes per token of the mixer's memory-bound kernels, forward, before TP:
    the convolution reads and writes x, B, C in bf16 (4 bytes per channel); the SSD kernels
    (``_mamba_chunk_scan_combined_fwd``) read x twice (chunk state, chunk scan) and B and C
    twice each, write y, write the chunk states in fp32 (H P N per chunk), read them back to pass
    them on and write them in bf16 for the chunk scan to read (12 bytes per state element),
    and write and read C B^T in fp32 (g Q per token, 8 bytes); the gated norm reads y and z and
    writes its output (6 bytes per channel)."""
    d, gn = inner_width(m), m.mamba_groups * m.mamba_state
    conv = 4.0 * conv_width(m)
    scan = 6.0 * d + 8.0 * gn + 12.0 * d * m.mamba_state / CHUNK + 8.0 * m.mamba_groups * CHUNK
    gated_norm = 6.0 * d
    return conv + scan + gated_norm


def stored_activation_bytes_per_token(m: ModelSpec, low_precision):
    """Activations one mixer keeps for its backward pass per token, before TP, beyond its input
    and pre-norm (which every layer keeps): in_proj's output (z, x, B, C, dt), the
    convolution's output, the scan output y, and the gated norm's output, out_proj's input, at
    1 byte where the GEMMs run in low precision (``low_precision`` 1) and 2 otherwise.
    The SSD backward recomputes the chunk states (``_mamba_chunk_scan_combined_bwd``)."""
    d = inner_width(m)
    return 2.0 * (in_proj_width(m) + conv_width(m) + d) + (2.0 - low_precision) * d
