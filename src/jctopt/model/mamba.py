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
- the gate y = out silu(z), inside the scan kernel, and a grouped RMSNorm of y, then ``out_proj``.

Tensor parallelism splits heads and groups (Megatron-Core requires both to divide by tp).
"""

from __future__ import annotations

from .types import ModelSpec

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


def scan_forward_flops_per_token(m: ModelSpec, chunk=CHUNK):
    """SSD forward FLOPs per token (Dao & Gu 2024, Sec. 6, steps 1, 2 and 4, per chunk of Q
    tokens divided by Q): C B^T 2 g Q N; its masked product with x 2 H Q P; chunk states and
    the output from the carried state 2 x 2 H N P. The state passing between chunks (H P N per
    chunk) is negligible. Nemotron-H 8B: 6.6 MFLOP against 219 MFLOP of GEMMs."""
    q, n, p = chunk, m.mamba_state, m.mamba_head_dim
    return 2.0 * (m.mamba_groups * q * n + m.mamba_heads * (q * p + 2.0 * n * p))


def scan_backward_flops_per_token(m: ModelSpec, chunk=CHUNK):
    """SSD backward FLOPs per token, the chunk matmuls of ``_mamba_chunk_scan_combined_bwd``
    (mamba_ssm ops/triton/ssd_combined.py @e9594ce), which recomputes C B^T and the chunk
    states rather than store them: three of 2 g Q N (C B^T again, and the two ``_bmm_chunk_bwd``
    that turn dC B^T into dB and dC), three of 2 H Q P (the masked (C B^T)^T dout inside dx,
    d(C B^T) = dout x^T, and the dA reduction over the same square), five of 2 H N P (the chunk
    states again, the state gradients C^T dout, B dstates inside dx, dB = x dstates, dC = dout
    states). 2.7x the forward for Nemotron 3 Nano, where a backward at twice the forward was
    assumed before."""
    q, n, p = chunk, m.mamba_state, m.mamba_head_dim
    return 2.0 * (3.0 * m.mamba_groups * q * n + m.mamba_heads * (3.0 * q * p + 5.0 * n * p))


def _per_token_terms(m: ModelSpec, chunk=CHUNK):
    """(d, g N, chunk-state elements per token H P N / Q, C B^T elements per token g Q)."""
    d = inner_width(m)
    return d, m.mamba_groups * m.mamba_state, d * m.mamba_state / chunk, m.mamba_groups * chunk


# The path Megatron-Core trains with (MambaMixer._ssm_training, use_mamba_mem_eff_path): in_proj's
# output z x B C dt is made contiguous batch-first, one autograd function
# (mamba_ssm MambaSplitConv1dScanCombinedFn) runs the convolution and the SSD scan with the gate
# z inside the scan (y = out * silu(z)), y is made contiguous sequence-first again, and a grouped
# RMSNorm (ExtendedRMSNorm) normalises it before out_proj. Bytes are bf16 (2) unless noted.


def forward_bytes_per_token(m: ModelSpec):
    """HBM bytes per token of the mixer's memory-bound kernels, forward, before TP: the two
    layout copies read and write in_proj's output and y (4 bytes per channel each); the
    convolution reads and writes x, B, C (4 per channel); the SSD kernels
    (``_mamba_chunk_scan_combined_fwd``) read x twice (chunk state, chunk scan), z once and
    B and C twice each, write the gated output and the ungated one kept for backward, write the
    chunk states in fp32, read them back to pass them on and write them in bf16 for the chunk
    scan to read (12 bytes per state element), and write and read C B^T in fp32 (8 bytes per
    element); the norm reads and writes y (4 per channel)."""
    return stream_forward_bytes_per_token(m) + scan_forward_bytes_per_token(m)


def scan_forward_bytes_per_token(m: ModelSpec, chunk=CHUNK):
    """The SSD kernels' share of ``forward_bytes_per_token``, chunks of ``chunk`` tokens."""
    d, gn, states, cb = _per_token_terms(m, chunk)
    return 10.0 * d + 8.0 * gn + 12.0 * states + 8.0 * cb


def stream_forward_bytes_per_token(m: ModelSpec):
    """The share of ``forward_bytes_per_token`` that only streams memory: layout copies,
    convolution, norm."""
    return 4.0 * (in_proj_width(m) + inner_width(m)) + 4.0 * conv_width(m) + 4.0 * inner_width(m)


def backward_bytes_per_token(m: ModelSpec):
    """HBM bytes per token of the mixer's memory-bound kernels, backward, before TP, counted
    kernel by kernel from MambaSplitConv1dScanCombinedFn.backward and
    ``_mamba_chunk_scan_combined_bwd`` (mamba_ssm @e9594ce): the layout copies' gradients
    (as forward); the norm's backward reads y and dy and writes dx (6 per channel); the
    convolution is recomputed (4 per channel of x B C) and its backward reads x B C and their
    gradient and writes the input gradient (6); the SSD backward recomputes C B^T, the chunk
    states and their passing in fp32, ungates dout (reads x, z, out, dout, writes dz and the
    ungated gradient), and runs the dstates, state-passing, dx, dB, dC, d(C B^T), two
    ``_bmm_chunk_bwd`` and dA kernels: 34 bytes per channel of x, 38 per B/C element, 34 per
    chunk-state element, 24 per C B^T element (fp32 dB, dC, d(C B^T) and residuals included;
    the per-head dt and dA vectors are left out, as forward). 3.2x the forward scan's bytes for
    Nemotron 3 Nano."""
    return stream_backward_bytes_per_token(m) + scan_backward_bytes_per_token(m)


def scan_backward_bytes_per_token(m: ModelSpec, chunk=CHUNK):
    """The SSD kernels' share of ``backward_bytes_per_token``, chunks of ``chunk`` tokens."""
    d, gn, states, cb = _per_token_terms(m, chunk)
    return 34.0 * d + 38.0 * gn + 34.0 * states + 24.0 * cb


def stream_backward_bytes_per_token(m: ModelSpec):
    """The share of ``backward_bytes_per_token`` that only streams memory: layout copies,
    norm, convolution."""
    return 4.0 * (in_proj_width(m) + inner_width(m)) + 6.0 * inner_width(m) + 10.0 * conv_width(m)


def stored_activation_bytes_per_token(m: ModelSpec, low_precision):
    """Activations one mixer keeps for its backward pass per token, before TP, beyond its input
    and pre-norm (which every layer keeps): in_proj's output (z, x, B, C, dt), the scan's
    ungated output, the gated output y the norm reads, and the norm's output, out_proj's input,
    at 1 byte where the GEMMs run in low precision (``low_precision`` 1) and 2 otherwise. The
    backward recomputes the convolution and the chunk states (MambaSplitConv1dScanCombinedFn)."""
    d = inner_width(m)
    return 2.0 * (in_proj_width(m) + 2.0 * d) + (2.0 - low_precision) * d
