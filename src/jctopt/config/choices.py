"""The named choices of the training group and the numbers the model reads for them."""

from __future__ import annotations

from ..model import recompute_modules
from ..model.memory import ZERO_SHARD
from .errors import _fail

RECOMPUTE = {"none": 0.0, "selective": 1.0, "full": 2.0}


def zero_shard_code(value) -> float:
    """Layout.zero_shard of ``layout.zero_shard``: stack | node | all (model.memory.ZERO_SHARD), or
    a positive number of data-parallel ranks."""
    text = str(value).strip().lower()
    if text in ZERO_SHARD:
        return ZERO_SHARD[text]
    if text.isdigit() and int(text) >= 1:
        return float(int(text))
    _fail("layout.zero_shard", value, "stack | node | all | a number of data-parallel ranks >= 1")


SELECTIVE_AC = {"core_attention": 0.0, "op": 1.0}  # -> Training.selective_op


# GEMM precision -> Training.low_precision: 0 bf16/fp16, 1 fp8 (per-tensor or blockwise scaling,
# or MXFP8 block scaling: Training.mxfp8, at the GPU's mxfp8_gemm_ratio of the fp8 rate), 2 NVFP4.
PRECISION = {"bf16": 0.0, "fp16": 0.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 2.0}


PEAK_OF_PRECISION = {1.0: "peak_fp8_tflops", 2.0: "peak_fp4_tflops"}


def is_mxfp8(precision: str) -> float:
    """Training.mxfp8 of a precision: 1 for MXFP8's block-scaled fp8 GEMMs, else 0."""
    return float(precision == "mxfp8")


def runs_precision(gpu, precision: str) -> bool:
    """Whether ``gpu`` has tensor cores for ``precision``'s GEMMs: a peak for its level in the
    catalog, and for MXFP8 block-scaled ones (``mxfp8_gemm_ratio`` > 0). The engine's mask is
    the same test on arrays (job.jct: ``precision_ok``)."""
    peak = PEAK_OF_PRECISION.get(PRECISION[precision])
    return (peak is None or gpu[peak] > 0) and (not is_mxfp8(precision) or gpu.mxfp8_gemm_ratio > 0)


def recompute_choice(key: str, text: str, base_modules) -> tuple[float, list[float]]:
    """(Training.recompute, the module flags in model.recompute_modules.MODULES order) of a design-space
    recompute entry: none | selective | full, selective with the training config's modules, or
    ``selective:<module>,...`` with its own (Megatron-Core's names)."""
    mode, _, listed = str(text).partition(":")
    if mode not in RECOMPUTE or (listed and mode != "selective"):
        _fail(key, text, f"{' | '.join(RECOMPUTE)}, or selective:<modules> "
                         f"(any of {', '.join(recompute_modules.MODULES)})")
    modules = [name.strip() for name in listed.split(",")] if listed else list(base_modules)
    for name in modules:
        if name not in recompute_modules.MODULES:
            _fail(key, text, f"modules among {', '.join(recompute_modules.MODULES)}")
    return RECOMPUTE[mode], [float(name in modules) for name in recompute_modules.MODULES]
