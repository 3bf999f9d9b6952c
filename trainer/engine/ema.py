"""An exponential moving average of the model's weights, the copy that is validated and
saved as ``best.pt``: it is steadier than the raw weights of the last step."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


class ModelEMA:
    """``ema = d * ema + (1 - d) * model`` after every step; ``d`` ramps up from 0 so that
    the average is not dominated by the random initial weights."""

    def __init__(self, model: nn.Module, *, decay: float = 0.9998, tau: float = 200.0,
                 updates: int = 0) -> None:
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, updates

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Blend the model's current weights into the average (``model`` may be the
        ``DistributedDataParallel`` wrapper of the model)."""
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        model_state = model.state_dict()
        for key, value in self.module.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(d).add_(model_state[key].detach(), alpha=1 - d)
            else:
                value.copy_(model_state[key])
