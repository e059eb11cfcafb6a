"""Extra HBM traffic of a transformer layer whose elementwise operators run as eager PyTorch kernels.

Fused stacks (Megatron-Core with Transformer Engine and Apex kernels, NeMo, MaxText under XLA,
torch.compile'd torchtitan) run a norm, the gated activation and the rotary embedding as one kernel
each, reading their input and writing their output once (model.compute.layer_times prices that). Eager
PyTorch runs every operator of the module's Python definition as its own kernel, each reading and
writing its operands through HBM, upcasting to fp32 on the way. Counted per element from the
operators of the Llama code torchtitan (models/norms.py RMSNorm, models/llama/model.py
apply_rotary_emb and FeedForward) and IBM's fms-fsdp run, bf16 activations (2 bytes; fp32 4):

- RMSNorm: x.float() (read 2, write 4), pow(2) (4, 4), mean (read 4), x * rsqrt (4, 4), type_as
  (4, 2), * weight (2, 2): 36 bytes against the fused kernel's 4, i.e. 32 more per element of h, per norm.
- SwiGLU: silu(w1 x) (read 2, write 2), times w3 x (read 4, write 2): 10 bytes per element of the MLP
  width against the fused 8 that model.compute counts, 2 more (a GELU MLP runs one kernel either way).
- RoPE as a complex product: float() (2, 4), the product (4, 4), type_as (4, 2): 20 bytes against a
  fused kernel's 4, 16 more per element of the query and key widths.

Backward's elementwise traffic is taken as twice the forward's, as for the fused kernels (model.compute).
"""

from __future__ import annotations

from . import hybrid as Hy
from .types import ModelSpec, Training

NORM_EXTRA_BYTES = 32.0  # per element of h, per norm
GLU_EXTRA_BYTES = 2.0  # per element of the gated MLP width
ROPE_EXTRA_BYTES = 16.0  # per element of the query and key widths


def extra_forward_bytes_per_token(m: ModelSpec, t: Training, tp, sp_div, mlp_width_per_token):
    """Forward bytes per token of one layer that eager kernels move beyond fused ones (0 when
    ``t.fused_elementwise``): the pre-norms (split over ``sp_div``, the caller's sequence-parallel
    share: tp under sequence parallelism, else 1), the gated activation and, where positions are
    rotary, the query and key rotation, split over tp (under MLA the whole head is counted though
    only its RoPE part rotates: an upper bound)."""
    norms = NORM_EXTRA_BYTES * Hy.sublayers(m) * m.hidden / sp_div
    glu = GLU_EXTRA_BYTES * m.glu * mlp_width_per_token / tp
    rope = ROPE_EXTRA_BYTES * Hy.attention_share(m) * (1.0 - m.learned_positions) * (
        (m.n_heads + m.n_kv_heads) * m.head_dim) / tp
    return (1.0 - t.fused_elementwise) * (norms + glu + rope)
