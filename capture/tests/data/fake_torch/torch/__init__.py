"""A stand-in for torch with just what the module hook uses: global module hooks, nn.Module calls and
named_modules, NVTX push/pop, the allocator's counters and torch.compiler.is_compiling. Every NVTX call and
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

_pre_hooks = []
_post_hooks = []


def _register_pre(hook):
    _pre_hooks.append(hook)


def _register_post(hook, always_call=False):
    _post_hooks.append(hook)


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

    def __call__(self, x):
        for hook in _pre_hooks:
            hook(self, (x,))
        out = self.forward(x)
        for hook in _post_hooks:
            hook(self, (x,), out)
        return out


class Linear(Module):
    def forward(self, x):
        _allocated[0] += 100
        return x + 1


nn = types.SimpleNamespace(
    Module=Module,
    Linear=Linear,
    modules=types.SimpleNamespace(
        module=types.SimpleNamespace(
            register_module_forward_pre_hook=_register_pre, register_module_forward_hook=_register_post
        )
    ),
)


def _memory_stats():
    events.append(("stats",))
    return {"allocated_bytes.all.current": _allocated[0], "reserved_bytes.all.current": 4096}


cuda = types.SimpleNamespace(memory_stats=_memory_stats)
compiler = types.SimpleNamespace(is_compiling=lambda: compiling[0])
