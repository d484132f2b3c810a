"""The module a compiler hands back for an ``nn.Module``: an ``nn.Module`` standing for the original.

One proxy for every layer: capture's ``CapturedModule`` (below) and the meta-package's
``CompiledModule`` (torchkiln's api.py) are ``ModuleProxy`` subclasses that differ only in the
callable that runs the compiled forward. What the proxy promises, as torch.compile's
``OptimizedModule`` does:

- parameters, buffers, ``state_dict``/``load_state_dict``, submodules and attributes are the
  original's (the same objects; names without a prefix); setting or deleting an attribute on the
  proxy sets or deletes it on the original, so the compiled forward sees it;
- ``training`` is the original's, and ``train()``/``eval()``/``to()`` reach it (it is the proxy's one
  child, ``_orig_mod``);
- hooks registered on the proxy run through ``nn.Module.__call__`` around the compiled forward, and
  so do global module hooks (an extra time, as torch.compile's do); hooks on the original run
  inside, where the compiled forward calls it. Without hooks a call goes straight to the compiled
  forward, one Python call less per step;
- indexing, ``len`` and iteration are the original's (a compiled ``nn.Sequential`` is still a
  sequence).

nn.Module's own state of the proxy (its hook dicts, ``_is_full_backward_hook``, ...), set in
``nn.Module.__init__``, stays on the proxy: registering a hook on it must not touch the original.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _nn_module


def _has_global_module_hooks() -> bool:
    return bool(
        _nn_module._global_forward_hooks
        or _nn_module._global_forward_pre_hooks
        or _nn_module._global_backward_hooks
        or _nn_module._global_backward_pre_hooks
    )


class ModuleProxy(torch.nn.Module):
    """An ``nn.Module`` standing for ``mod`` whose forward is ``forward(*args, **kwargs)``."""

    # the original module; typed Any: indexing, len() and iter() reach a container's own
    _orig_mod: Any

    def __init__(self, mod: torch.nn.Module, forward: Callable[..., Any]) -> None:
        super().__init__()
        self._orig_mod = mod  # registered as the one submodule (train/eval/to reach it)
        self.__dict__["_proxy_forward"] = forward  # not a submodule: keeps parameters() unique

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._proxy_forward(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if (
            self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
            or _has_global_module_hooks()
        ):
            return torch.nn.Module.__call__(self, *args, **kwargs)
        return self._proxy_forward(*args, **kwargs)

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        # nn.Module.__init__ sets the default before the original is installed: nothing to mirror
        orig = self.__dict__.get("_modules", {}).get("_orig_mod")
        if orig is not None:
            orig.training = value

    def _is_own(self, name: str) -> bool:
        """Whether ``name`` is the proxy's own (nn.Module state, a class attribute), not the original's."""
        return name == "_orig_mod" or name in self.__dict__ or hasattr(type(self), name)

    def __getattr__(self, name: str) -> Any:
        modules = self.__dict__.get("_modules")
        if modules is None or "_orig_mod" not in modules:
            raise AttributeError(name)  # still in nn.Module.__init__
        if name == "_orig_mod":
            return modules["_orig_mod"]
        return getattr(modules["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._is_own(name):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if self._is_own(name):
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(super().__dir__()))

    # container protocols are looked up on the type, never through __getattr__
    def __getitem__(self, key: Any) -> Any:
        return self._orig_mod[key]

    def __len__(self) -> int:
        return len(self._orig_mod)

    def __iter__(self) -> Any:
        return iter(self._orig_mod)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.named_buffers(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._orig_mod!r})"


class CapturedModule(ModuleProxy):
    """What ``capture(module, backend)`` returns: its forward is the ``CapturedFunction``
    ``_captured`` called with the original module (which runs ``module(*args)`` captured)."""

    def __init__(self, mod: torch.nn.Module, captured: Callable[..., Any]) -> None:
        super().__init__(mod, functools.partial(captured, mod))
        self.__dict__["_captured"] = captured


__all__ = ["CapturedModule", "ModuleProxy"]
