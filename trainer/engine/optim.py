"""The optimiser and its schedule: AdamW in three parameter groups, a linear warmup,
then a half cosine."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

WARMUP_EPOCHS = 3
FINAL_LR_FRACTION = 0.01
WEIGHT_DECAY = 5e-4


def build_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW with three parameter groups, as Ultralytics logs them: ``pg0`` weights with
    decay, ``pg1`` norm weights and ``pg2`` biases without."""
    decay, norm, bias = [], [], []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if name == "bias":
                bias.append(param)
            elif isinstance(module, nn.modules.batchnorm._BatchNorm):
                norm.append(param)
            else:
                decay.append(param)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": norm, "weight_decay": 0.0},
         {"params": bias, "weight_decay": 0.0}],
        lr=lr, betas=(0.937, 0.999))


def cosine_schedule(epochs: int) -> Callable[[int], float]:
    """LR factor per epoch: a half cosine from 1 down to ``FINAL_LR_FRACTION``."""
    def factor(epoch: int) -> float:
        return 1 - (1 - FINAL_LR_FRACTION) * (1 - math.cos(math.pi * epoch / epochs)) / 2
    return factor


def warmup_iterations(batches_per_epoch: int, epochs: int) -> int:
    """Steps of linear LR warmup: a few epochs (at least 100 steps), at most a third of
    the run."""
    total = batches_per_epoch * epochs
    return max(1, min(max(WARMUP_EPOCHS * batches_per_epoch, 100), total // 3))
