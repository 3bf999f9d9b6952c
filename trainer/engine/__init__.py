"""Training: the plan (checked arguments, torch-free), the command and the loop, the
processes of a multi-GPU run, checkpoints, the run report, automatic batch size, the
device, EMA, callbacks, graceful stop and the Python API."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "plan": ["TrainArgs", "Plan", "UsageError", "parse_args", "build_plan"],
    "command": ["execute"],
    "loop": ["run"],
    "optim": ["build_optimizer"],
    "world": ["World", "torchrun_world"],
    "collectives": ["Group"],
    "launcher": ["spawn"],
    "callbacks": ["Callbacks", "CallbackContext"],
    "api": ["Trainer", "TrainResult"],
})
