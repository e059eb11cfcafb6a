"""ZeRO-3: how many times a micro-batch gathers each layer's parameters.

Every ZeRO-3 implementation gathers a layer's parameters before its forward and again before
its backward (Rajbhandari et al. 2020 Sec. 7.2.2). A recomputed forward (activation
checkpointing) needs them a third time. PyTorch FSDP runs the recomputation inside the
layer's backward, after its pre-backward hook has gathered them, so it costs no gather.
DeepSpeed's ZeRO-3 hooks every submodule's forward, the recomputed one included: its forward
pre-hook gathers the weights, its forward post-hook partitions them again, and the backward
pre-hook gathers them once more (deepspeed/runtime/zero/stage3.py @c83e49f9e, 2021-04:
``pre_sub_module_forward_function`` -> ``fetch_sub_module``, ``post_sub_module_forward_function``
-> ``release_sub_module`` -> ``param.partition()``, ``pre_sub_module_backward_function`` ->
``fetch_sub_module``). ``training.zero3_regather`` marks that behaviour.
"""

from __future__ import annotations

from .types import Training


def gathers_per_micro_batch(t: Training, recompute_full):
    """Parameter all-gathers per layer and micro-batch: forward and backward, plus one for the
    recomputed forward of the ``recompute_full`` share of layers (model.compute.full_recompute_share)
    where the ZeRO-3 implementation releases the weights after every forward."""
    return 2.0 + t.zero3_regather * recompute_full
