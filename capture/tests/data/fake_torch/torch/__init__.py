"""A stand-in for torch with just what the module hook uses: nn.Module calls (`__call__` through `_call_impl`, as torch
2.1 and later, with per-module forward hooks and the global hook tables `_call_impl` checks) and named_modules, NVTX
push/pop, `torch._C._is_tracing`, the allocator's counters and torch.compiler.is_compiling. Every NVTX call and
counter read is logged in `events`, which the test compares with what it expects."""

import os
import types

events = []
compiling = [False]
_allocated = [0]


class _Nvtx:
    @staticmethod
    def rangePushA(message):
        events.append(("push", message))

    @staticmethod
    def rangePop():
        events.append(("pop",))


_C = types.SimpleNamespace(_nvtx=_Nvtx, _is_tracing=lambda: False)
if os.environ.get("FAKE_TORCH_NO_FAST_PATH"):
    del _C._is_tracing
# How many module calls went through `_call_impl` (the hook takes torch's fast path itself where it can).
call_impl_calls = [0]
_global_tables = {name: {} for name in ("_global_backward_pre_hooks", "_global_backward_hooks",
                                        "_global_forward_hooks", "_global_forward_pre_hooks")}

class Module:
    def __init__(self):
        self._children = {}
        self._forward_hooks, self._forward_pre_hooks = {}, {}
        self._backward_hooks, self._backward_pre_hooks = {}, {}

    def register_forward_hook(self, hook):
        self._forward_hooks[len(self._forward_hooks)] = hook

    def add(self, name, child):
        self._children[name] = child
        self.__dict__[name] = child
        return child

    def named_modules(self, prefix="", remove_duplicate=True):
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def forward(self, x):
        for child in self._children.values():
            x = child(x)
        return x

    def _call_impl(self, *args, **kwargs):
        call_impl_calls[0] += 1
        out = self.forward(*args, **kwargs)
        for hook in self._forward_hooks.values():
            hook(self, args, out)
        return out

    def _wrapped_call_impl(self, *args, **kwargs):
        return self._call_impl(*args, **kwargs)

    __call__ = _wrapped_call_impl


class Linear(Module):
    def forward(self, x):
        _allocated[0] += 100
        return x + 1


class Failing(Module):
    def forward(self, x):
        raise ValueError("a forward that raises")


nn = types.SimpleNamespace(Module=Module, Linear=Linear, Failing=Failing,
                           modules=types.SimpleNamespace(module=types.SimpleNamespace(**_global_tables)))


def _memory_stats():
    events.append(("stats",))
    return {"allocated_bytes.all.current": _allocated[0], "reserved_bytes.all.current": 4096}


cuda = types.SimpleNamespace(memory_stats=_memory_stats)
compiler = types.SimpleNamespace(is_compiling=lambda: compiling[0])
