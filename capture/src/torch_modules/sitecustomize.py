"""shardscope capture's start-up hook for `capture --torch-modules`: one NVTX range per nn.Module forward.

`capture` writes this file into a folder of its own and puts that folder first on PYTHONPATH, so that Python's
`site` imports it at start-up. It changes nothing until the program imports torch; then it wraps
`nn.Module._call_impl` (what every module call runs) so that each call pushes and pops an NVTX range named by the
module's qualified path and class, `model.layers.3.self_attn.q_proj (Linear)`. The capture records the ranges like
any other NVTX range, and the analyzer attributes each kernel to the innermost module range open on the thread that
launched it.

What it does per call is kept small: one dictionary lookup for the name (names are resolved once per root
module by walking its `named_modules()`), two NVTX calls, and, with memory on, two reads of the caching
allocator's counters. No synchronisation, and no stack walking per call (the wrapper's frames are read once, for a
module not named yet). Where torch would take its fast path the wrapper calls the module's forward itself, so a
module call still costs one Python frame. While torch.compile traces, the wrapper only calls through, so compiled
programs are not changed.

Settings come from SHARDSCOPE_TORCH_MODULES, `;`-separated: `depth=N` (only modules whose path has at most N
dotted parts; the root is 0) and `memory=1` (allocated and reserved bytes at entry in the range's message, and at
exit in a zero-length range named `mem=A,R` that closes just before the module's range).

A sitecustomize that was on the path before ours is imported after ours, so both run.
"""

import os
import re
import sys
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
    """The wrapped module call and the name cache; one instance per process."""

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
        self.wrapper_code = None  # the code object of the wrapper, to find its frames

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

    def open_modules(self):
        """The modules being called on this thread around the current call, outermost first.

        Read from the wrapper's frames: this runs only for a module not named yet (once per module), so the calls
        themselves keep no stack of their own.
        """
        frame = sys._getframe(3)  # 0 this, 1 name_of, 2 the wrapper call that asked, 3 its caller
        found = []
        while frame is not None:
            if frame.f_code is self.wrapper_code:
                found.append(frame.f_locals.get("module"))
            frame = frame.f_back
        return found[::-1]

    def name_of(self, module):
        """The range message of `module` (None: deeper than the limit); learns the names of its root's modules."""
        entry = self._entry(module)
        if entry is None:
            # A module not seen before: the outermost module being called (a root), or one created or attached
            # after its root was walked. Walk the open root again; a module outside it is named under its caller.
            stack = self.open_modules()
            self._learn(stack[0] if stack else module)
            entry = self._entry(module)
            if entry is None:
                caller = next((m for m in map(self._entry, reversed(stack)) if m is not None and m[1]), None)
                path = caller[1].rsplit(" (", 1)[0] + "." + type(module).__name__ if caller else ""
                entry = (weakref.ref(module), self._message(path, module))
                self.names[id(module)] = entry
        return entry[1]

    def memory_message(self):
        stats = self.memory_stats()
        return f"mem={stats.get('allocated_bytes.all.current', 0)},{stats.get('reserved_bytes.all.current', 0)}"

    def wrap(self, call, torch):
        """`call` (torch's `Module._call_impl`) inside the module's range.

        Why not global forward hooks: with any global hook registered, every module call takes torch's slow path
        (hook tables walked, a closure and a set made per call) and makes two Python hook calls; on an eager
        decode step of a small decoder that was ~15 % of the step (one H100). Why not simply call `call`: one
        more Python frame per module call, forwarding every argument, cost about as much as torch's own
        `_call_impl` frame (a first wrapper that called through added 3.8 us per module call of a small
        transformers decoder on a CPU, this one 0.8; BENCHMARKS.md, "What modules add"). So where torch
        would take its fast path (no hook on the module or globally, not tracing; see `_fast_path_tables`) the
        wrapper calls the module's `forward` itself, as `_call_impl` would; anything else goes through `call`.
        """
        names_get, push, pop, is_compiling = self.names.get, self.push, self.pop, self.is_compiling
        memory = self.memory_stats is not None
        fast = _fast_path_tables(torch)
        direct = fast is not None
        pre_bw, bw, fw, pre_fw, tracing = fast or (None, None, None, None, None)

        def call_in_range(module, *args, **kwargs):
            if is_compiling():  # traced by torch.compile: add nothing to the graph
                return call(module, *args, **kwargs)
            entry = names_get(id(module))
            message = entry[1] if entry is not None and entry[0]() is module else self.name_of(module)
            if message is None:
                return call(module, *args, **kwargs)
            push(f"{message} {self.memory_message()}" if memory else message)
            try:
                if direct and not (
                    fw or pre_fw or bw or pre_bw or module._forward_hooks or module._forward_pre_hooks
                    or module._backward_hooks or module._backward_pre_hooks or tracing()
                ):
                    return module.forward(*args, **kwargs)
                return call(module, *args, **kwargs)
            finally:
                if memory:
                    push(self.memory_message())
                    pop()
                pop()

        self.wrapper_code = call_in_range.__code__
        call_in_range.__wrapped__ = call
        return call_in_range


_WRAPPER_MODULE = "torch._inductor.codegen.wrapper"
# The root of Dynamo's source of a module (`L['self']`, `L['args'][0]`, `G['model']`), and the item accesses after it.
_SOURCE_ROOT = re.compile(r"^[A-Z]\[[^\]]*\](?:\[[^\]]*\])*\.?")
_SOURCE_ITEM = re.compile(r"\._modules\[['\"]([^'\"]+)['\"]\]|\[['\"]([^'\"]+)['\"]\]|\[(\d+)\]")


def module_path(source):
    """`model.layers.0.self_attn` from Dynamo's source of that module (`L['self'].model.layers[0].self_attn`,
    `L['args'][0]._modules['model']...`); the compiled root itself is the empty path."""
    path = _SOURCE_ROOT.sub("", source, count=1)
    path = _SOURCE_ITEM.sub(lambda m: "." + (m.group(1) or m.group(2) or m.group(3)), path)
    return path.strip(".")


class CompiledModuleRanges:
    """Module ranges in code torch.compile generates: Inductor's Python wrapper calls each kernel in turn, and
    before each one it records which FX node the kernel came from (`enter_context`); Dynamo left that node's module
    stack in its `nn_module_stack`. Where the stack changes, the generated code gets the NVTX pops and pushes that
    go from one stack to the next, named as the eager ranges are, and every range still open is closed before the
    generated function returns. At run time they are two C calls per module change; a CUDA graph captured from
    the generated code (`mode="reduce-overhead"`) has them open while its nodes are made, which ties each replayed
    kernel to its module. Inductor's caches are turned off in this process, so that code generated with the
    ranges is never reused by a run without them, and the other way round."""

    PUSH, POP = "torch._C._nvtx.rangePushA", "torch._C._nvtx.rangePop()"
    # The wrapper's methods that write a body under a branch or loop into the code being generated.
    CONTROL_FLOW = ("codegen_conditional", "codegen_while_loop", "codegen_subgraph_by_inlining")

    def __init__(self, depth):
        self.depth, self.failed = depth, False

    def stack_of(self, node):
        """The range messages of the modules `node` was traced in, outermost first."""
        meta = getattr(node, "meta", None)
        stack = meta.get("nn_module_stack") if isinstance(meta, dict) else None
        messages = []
        for value in (stack or {}).values():
            if not isinstance(value, tuple) or len(value) < 2 or not isinstance(value[0], str):
                continue
            path, cls = module_path(value[0]), value[1]
            name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
            if self.depth is None or (path.count(".") + 1 if path else 0) <= self.depth:
                messages.append(f"{path} ({name})" if path else f"({name})")
        return messages

    def install(self, wrapper_api):
        """Extends the Python wrapper of this Inductor (`torch._inductor.codegen.wrapper`), where it has what this
        needs; says so on stderr where it does not."""
        # `WrapperCodeGen`: the name before torch 2.5.
        base = getattr(wrapper_api, "PythonWrapperCodegen", None) or getattr(wrapper_api, "WrapperCodeGen", None)
        classes = [base, getattr(wrapper_api, "SubgraphPythonWrapperCodegen", None)]
        if base is None or not all(hasattr(base, n) for n in ("enter_context", "generate", "writeline")):
            print("shardscope: module ranges in torch.compile code: not available with this torch", file=sys.stderr)
            return
        self._caches_off()
        plain = frozenset(c for c in classes if c is not None)  # not the C++ or FX wrappers, which take no Python
        enter_context, generate, ranges = base.enter_context, base.generate, self

        def enter_context_in_ranges(wrapper, ctx):
            enter_context(wrapper, ctx)
            if type(wrapper) in plain and not wrapper.__dict__.get("_shardscope_in_control_flow"):
                ranges.safely(wrapper, lambda: ranges.stack_of(ctx))

        def generate_closing_ranges(wrapper, *args, **kwargs):
            if type(wrapper) in plain:
                ranges.safely(wrapper, list, closing=True)
            return generate(wrapper, *args, **kwargs)

        base.enter_context = enter_context_in_ranges
        base.generate = generate_closing_ranges
        for name in self.CONTROL_FLOW:
            if callable(getattr(base, name, None)):
                setattr(base, name, self._outside_ranges(getattr(base, name), plain))

    def _outside_ranges(self, codegen, plain):
        """`codegen` (of a loop or branch whose body is written inline) with every range closed before it and
        none opened inside: a range opened in a branch not taken would be closed by code that does run."""
        ranges = self

        def codegen_outside_ranges(wrapper, *args, **kwargs):
            if type(wrapper) not in plain:
                return codegen(wrapper, *args, **kwargs)
            ranges.safely(wrapper, list, closing=True)
            depth = wrapper.__dict__.get("_shardscope_in_control_flow", 0)
            wrapper._shardscope_in_control_flow = depth + 1
            try:
                return codegen(wrapper, *args, **kwargs)
            finally:
                wrapper._shardscope_in_control_flow = depth

        return codegen_outside_ranges

    def safely(self, wrapper, wanted, closing=False):
        """`go_to(wrapper, wanted())`, unless a failure here has already stopped this: an error in this addition
        (an Inductor unlike the ones this knows) is said once and never fails the program's compilation. After
        that, code gets no new ranges, and those already opened in a function are still closed before it returns."""
        try:
            if not self.failed:
                self.go_to(wrapper, wanted())
            elif closing and wrapper.__dict__.get("_shardscope_module_ranges"):
                self.go_to(wrapper, [])
        except Exception as error:
            if not self.failed:
                print(f"shardscope: module ranges in torch.compile code stopped: {error!r}", file=sys.stderr)
            self.failed = True

    def go_to(self, wrapper, wanted):
        """Writes the pops and pushes that turn the ranges open in `wrapper`'s code into `wanted`."""
        opened = wrapper.__dict__.setdefault("_shardscope_module_ranges", [])
        common = 0
        while common < min(len(opened), len(wanted)) and opened[common] == wanted[common]:
            common += 1
        for _ in range(len(opened) - common):
            wrapper.writeline(self.POP)
        for message in wanted[common:]:
            wrapper.writeline(f"{self.PUSH}({message!r})")
        opened[:] = wanted

    @staticmethod
    def _caches_off():
        import importlib

        for module_name, setting in (("torch._inductor.config", "fx_graph_cache"),
                                     ("torch._functorch.config", "enable_autograd_cache")):
            try:
                config = importlib.import_module(module_name)
                if hasattr(config, setting):
                    setattr(config, setting, False)
            except Exception as error:
                print(f"shardscope: could not turn off {module_name}.{setting}: {error}", file=sys.stderr)


def _fast_path_tables(torch):
    """What torch's `_call_impl` checks before its fast path, where this torch has all of it (2.0 and later):
    the global backward-pre, backward, forward and forward-pre hook tables and `torch._C._is_tracing`; else None,
    and every call goes through `_call_impl`."""
    module_api = getattr(getattr(torch, "nn", None), "modules", None)
    module_api = getattr(module_api, "module", None)
    names = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks",
             "_global_forward_pre_hooks")
    tables = [getattr(module_api, name, None) for name in names]
    tracing = getattr(getattr(torch, "_C", None), "_is_tracing", None)
    probe = torch.nn.Module()
    per_module = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    if any(t is None for t in tables) or tracing is None or not all(hasattr(probe, n) for n in per_module):
        return None
    return (*tables, tracing)


def register(torch, settings_text):
    """Wraps torch's module call on an imported torch; returns the ModuleRanges, or None where torch lacks it."""
    depth, memory = parse_settings(settings_text)
    module_class = torch.nn.Module
    call = getattr(module_class, "_call_impl", None)
    if call is None:
        print("shardscope: module ranges not recorded: this torch has no nn.Module._call_impl", file=sys.stderr)
        return None
    ranges = ModuleRanges(torch, depth, memory)
    wrapped = ranges.wrap(call, torch)
    module_class._call_impl = wrapped
    if module_class.__call__ is call:  # torch before 2.1: __call__ is _call_impl itself
        module_class.__call__ = wrapped
    compiled = CompiledModuleRanges(depth)
    if _WRAPPER_MODULE in sys.modules:
        compiled.install(sys.modules[_WRAPPER_MODULE])
    else:
        sys.meta_path.insert(0, _AfterImport(_WRAPPER_MODULE, compiled.install))
    return ranges


class _AfterImport:
    """A meta path finder that lets module `name` import as usual and then calls `on_import(module)` once."""

    def __init__(self, name, on_import):
        self.name, self.on_import = name, on_import

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_then_call(module):
            original_exec(module)
            try:
                self.on_import(module)
            except Exception as error:  # never break the user's program over a profiling aid
                print(f"shardscope: module ranges not recorded: {error}", file=sys.stderr)

        spec.loader.exec_module = exec_then_call
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
            sys.meta_path.insert(0, _AfterImport("torch", lambda torch: register(torch, os.environ[_SETTINGS_ENV])))
    _chain_next_sitecustomize()


if __name__ == "sitecustomize":
    _install()
