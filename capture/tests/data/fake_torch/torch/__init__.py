"""A stand-in for torch with just what the module hook uses: nn.Module calls (`__call__` through `_call_impl`, as
torch 2.1 and later) and named_modules, NVTX push/pop, the allocator's counters and torch.compiler.is_compiling. Every NVTX call and
counter read is logged in `events`, which the test compares with what it expects."""

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


_C = types.SimpleNamespace(_nvtx=_Nvtx)

class Module:
    def __init__(self):
        self._children = {}

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
        return self.forward(*args, **kwargs)

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


nn = types.SimpleNamespace(Module=Module, Linear=Linear, Failing=Failing)


def _memory_stats():
    events.append(("stats",))
    return {"allocated_bytes.all.current": _allocated[0], "reserved_bytes.all.current": 4096}


cuda = types.SimpleNamespace(memory_stats=_memory_stats)
compiler = types.SimpleNamespace(is_compiling=lambda: compiling[0])
