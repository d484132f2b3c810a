"""Recurrent modules on CUDA (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``), traced as cuDNN's kernel.

ATen's composite ``lstm`` (``gru``, ``rnn_tanh``, ``rnn_relu``) on CUDA takes cuDNN's path. When
the weights lie in order in one storage (``flatten_parameters``, which ``.cuda()`` calls), it
views that storage as the flat weight buffer with ``set_(storage, ...)``, and a storage is no
value an FX graph can hold: the trace failed, and every graph with a recurrent module ran
eagerly. While this mode is active such a call gets copies of its weights, which share no
storage: cuDNN's ``_cudnn_rnn`` then packs them itself (one copy of the weights a call, a few
microseconds) and the graph holds ``_cudnn_rnn`` and its backward as ATen calls. Other devices
are left as they are (the CPU's oneDNN layer reads the weights one by one).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_RECURRENT = tuple(getattr(torch._VF, name) for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"))


def _weights_at(args: tuple) -> int | None:
    """The position of the weights: the last argument that is a list or tuple of tensors (an
    LSTM's state ``(h, c)`` is one too, and comes before)."""
    found = None
    for i, a in enumerate(args):
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            found = i
    return found


class RecurrentWeightsApart(TorchFunctionMode):
    """While active, a CUDA recurrent op's weights are passed as copies (see the module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RECURRENT and not kwargs:
            at = _weights_at(args)
            if at is not None and any(t.is_cuda for t in args[at]):
                args = (*args[:at], [t.clone() for t in args[at]], *args[at + 1 :])
        return func(*args, **kwargs)
