"""The physics of one training step: compute and its FLOPs, attention, collectives, memory,
pipeline schedules, experts, and the step composed of their terms (``model.step``). Pure
functions of the pytrees in ``model.types``; nothing here imports from the rest of jctopt."""
