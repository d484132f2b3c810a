"""Modules several aot-partition tests trace: batch norm written as ``F.batch_norm`` (nn.BatchNorm's
input-dim check is control flow fx cannot trace) and a linear layer followed by training-mode
batch norm and relu."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def batch_norm(bn: torch.nn.modules.batchnorm._BatchNorm, x, training: bool):
    """``bn`` applied to ``x`` as ``F.batch_norm`` with its statistics, parameters, momentum and
    eps (running statistics updated when ``training``)."""
    return F.batch_norm(
        x, bn.running_mean, bn.running_var, bn.weight, bn.bias, training, bn.momentum, bn.eps
    )


class LinearBatchNorm(torch.nn.Module):
    """Linear(4, 6), batch norm in training mode (running statistics written back), relu."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return batch_norm(self.bn, self.lin(x), True).relu()
