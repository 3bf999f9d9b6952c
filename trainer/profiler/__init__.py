"""``trainer profile``: time real training steps, measure what the GPU did, and say what
bounds the step and whether a faster GPU would pay."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "measure": ["Batches", "StepTiming", "measure_steps", "measure_gpu_busy"],
    "verdict": ["Measures", "judge", "costs"],
})
