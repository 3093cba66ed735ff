"""shardscope capture's start-up hook for `capture --torch-modules`: one NVTX range per nn.Module forward.

`capture` writes this file into a folder of its own and puts that folder first on PYTHONPATH, so that Python's
`site` imports it at start-up. It changes nothing until the program imports torch; then it registers two global
module hooks (before and after every `nn.Module` forward) that push and pop an NVTX range named by the module's
qualified path and class, `model.layers.3.self_attn.q_proj (Linear)`. The capture records the ranges like any
other NVTX range, and the analyzer attributes each kernel to the innermost module range open on the thread that
launched it.

What it does per forward is kept small: one dictionary lookup for the name (names are resolved once per root
module by walking its `named_modules()`), one NVTX call, and, with memory on, one read of the caching
allocator's counters. No synchronisation and no stack walking. While torch.compile traces, the hooks do nothing,
so compiled programs are not changed.

Settings come from SHARDSCOPE_TORCH_MODULES, `;`-separated: `depth=N` (only modules whose path has at most N
dotted parts; the root is 0) and `memory=1` (allocated and reserved bytes at entry in the range's message, and at
exit in a zero-length range named `mem=A,R` that closes just before the module's range).

A sitecustomize that was on the path before ours is imported after ours, so both run.
"""

import os
import sys
import threading
import weakref

_SETTINGS_ENV = "SHARDSCOPE_TORCH_MODULES"
_OUR_FOLDER = os.path.dirname(os.path.abspath(__file__))


def parse_settings(text):
    """(depth limit or None, memory on) from the settings text; unknown items are reported once and ignored."""
    depth, memory = None, False
    for item in filter(None, (part.strip() for part in text.split(";"))):
        key, _, value = item.partition("=")
        if key == "depth" and value.isdigit():
            depth = int(value)
        elif key == "memory":
            memory = value not in ("0", "")
        elif key != "on":
            print(f"shardscope: {_SETTINGS_ENV}: ignoring {item!r}", file=sys.stderr)
    return depth, memory


class ModuleRanges:
    """The two global hooks and the name cache; one instance per process."""

    def __init__(self, torch, depth, memory):
        self.depth = depth
        nvtx = getattr(getattr(torch, "_C", None), "_nvtx", None)
        # The C functions directly: torch.cuda.nvtx's wrappers add a Python call per range.
        self.push = getattr(nvtx, "rangePushA", None) or torch.cuda.nvtx.range_push
        self.pop = getattr(nvtx, "rangePop", None) or torch.cuda.nvtx.range_pop
        self.memory_stats = torch.cuda.memory_stats if memory else None
        compiler = getattr(torch, "compiler", None)
        self.is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        # id(module) -> (weak reference that proves the id is still that module's, message or None when too deep).
        self.names = {}
        self.local = threading.local()

    def _stack(self):
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def _learn(self, root):
        """Names every module under `root` by its path from it (the root itself has the empty path)."""
        for path, module in root.named_modules(remove_duplicate=False):
            if id(module) not in self.names or self._entry(module) is None:
                self.names[id(module)] = (weakref.ref(module), self._message(path, module))

    def _message(self, path, module):
        parts = path.count(".") + 1 if path else 0
        if self.depth is not None and parts > self.depth:
            return None
        name = type(module).__name__
        return f"{path} ({name})" if path else f"({name})"

    def _entry(self, module):
        entry = self.names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry
        return None

    def _name_of(self, module, stack):
        entry = self._entry(module)
        if entry is None:
            # A module not seen before: the outermost module being called (a root), or one created or attached
            # after its root was walked. Walk the open root again; a module outside it is named under its caller.
            root = next((m for m, _ in stack if m is not None), module)
            self._learn(root)
            entry = self._entry(module)
            if entry is None:
                caller = next((msg for _, msg in reversed(stack) if msg), None)
                path = caller.rsplit(" (", 1)[0] + "." + type(module).__name__ if caller else ""
                entry = (weakref.ref(module), self._message(path, module))
                self.names[id(module)] = entry
        return entry[1]

    def _counters(self):
        stats = self.memory_stats()
        return stats.get("allocated_bytes.all.current", 0), stats.get("reserved_bytes.all.current", 0)

    def before(self, module, args):
        if self.is_compiling():
            return None
        stack = self._stack()
        message = self._name_of(module, stack)
        stack.append((module, message))
        if message is not None:
            if self.memory_stats is not None:
                allocated, reserved = self._counters()
                message = f"{message} mem={allocated},{reserved}"
            self.push(message)
        return None

    def after(self, module, args, output):
        if self.is_compiling():
            return None
        stack = self._stack()
        # Pop up to this module's entry: a forward that raised before an inner hook ran leaves no orphans.
        while stack:
            opened, message = stack.pop()
            if message is not None:
                if opened is module and self.memory_stats is not None:
                    allocated, reserved = self._counters()
                    self.push(f"mem={allocated},{reserved}")
                    self.pop()
                self.pop()
            if opened is module:
                break
        return None


def register(torch, settings_text):
    """Registers the global hooks on an imported torch; returns the ModuleRanges, or None where torch lacks them."""
    depth, memory = parse_settings(settings_text)
    module_api = torch.nn.modules.module
    ranges = ModuleRanges(torch, depth, memory)
    module_api.register_module_forward_pre_hook(ranges.before)
    try:
        # always_call: the range is closed even when the forward raises.
        module_api.register_module_forward_hook(ranges.after, always_call=True)
    except TypeError:
        module_api.register_module_forward_hook(ranges.after)
    return ranges


class _AfterTorchImport:
    """A meta path finder that lets torch import as usual and registers the hooks once it has."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_then_register(module):
            original_exec(module)
            try:
                register(module, os.environ.get(_SETTINGS_ENV, ""))
            except Exception as error:  # never break the user's program over a profiling aid
                print(f"shardscope: module ranges not recorded: {error}", file=sys.stderr)

        spec.loader.exec_module = exec_then_register
        return spec


def _chain_next_sitecustomize():
    """Imports the sitecustomize that ours hides (the next one on sys.path), as Python would have."""
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.abspath(p or ".") != _OUR_FOLDER]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules["sitecustomize"] = ours
        print(f"shardscope: the workload's own sitecustomize failed: {error!r}", file=sys.stderr)


def _install():
    if os.environ.get(_SETTINGS_ENV) is not None:
        if "torch" in sys.modules:
            register(sys.modules["torch"], os.environ[_SETTINGS_ENV])
        else:
            sys.meta_path.insert(0, _AfterTorchImport())
    _chain_next_sitecustomize()


if __name__ == "sitecustomize":
    _install()
