"""The whole job: ``estimate`` (the step on the wall clock, with checkpoints, failures, cost and
energy), the failure-time distribution, the model's error intervals, and the diagnosis of what
slows a configuration."""

from .jct import STEP_PARTS, Estimate, Reason, estimate, estimate_batch, unmasked_step

__all__ = ["STEP_PARTS", "Estimate", "Reason", "estimate", "estimate_batch", "unmasked_step"]
