"""Runs a small model on the stand-in torch and prints what the module hook did, as JSON."""

import json
import sys
import types

import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.add("q_proj", torch.nn.Linear())
        self.add("o_proj", torch.nn.Linear())


class Model(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        stack = self.add("layers", torch.nn.Module())
        for i in range(layers):
            stack.add(str(i), Block())


model = Model(2)
model(0)
model(0)
fast_path_calls = torch.call_impl_calls[0]
torch.compiling[0] = True
model(0)
torch.compiling[0] = False
compiled_calls = torch.call_impl_calls[0] - fast_path_calls
# A module with a forward hook of its own goes through torch's `_call_impl`, so its hook runs, inside its range.
hooked = model.layers.__dict__["0"].q_proj
hooked.register_forward_hook(lambda module, args, out: torch.events.append(("hook",)))
torch.call_impl_calls[0] = 0
model(0)
hooked_calls = torch.call_impl_calls[0]
# A module called by another without being its child is named under its caller.
stray = torch.nn.Linear()
model.layers.forward = lambda x: stray(x)
model(0)
# A forward that raises still closes its range (and its callers').
model.layers.forward = lambda x: torch.nn.Failing()(x)
try:
    model(0)
except ValueError:
    torch.events.append(("raised",))


# What torch.compile's generated code gets: Inductor's wrapper, driven as its scheduler drives it.
def traced(name, *frames):
    """An FX node traced inside the modules of `frames` ((Dynamo source, class), outermost first); a class given
    as text stands for torch versions that keep the class's qualified name there."""
    stack = {source: (source, cls if "." in cls else type(cls, (), {})) for source, cls in frames}
    return types.SimpleNamespace(name=name, meta={"nn_module_stack": stack})


import torch._inductor.codegen.wrapper as inductor_wrapper  # noqa: E402

layer = [("L['self'].model", "Model"), ("L['self'].model.layers[0]", "Block")]
generated = {}
for kind in ("PythonWrapperCodegen", "SubgraphPythonWrapperCodegen", "CppWrapperCpu"):
    wrapper = getattr(inductor_wrapper, kind)()
    wrapper.enter_context(traced("mm", *layer, ("L['self'].model.layers[0].q_proj", "Linear")))
    wrapper.writeline("kernel 1")
    wrapper.enter_context(traced("mm_1", *layer, ("L['self'].model.layers[0]._modules['o_proj']", "torch.nn.Linear")))
    wrapper.writeline("kernel 2")
    wrapper.enter_context(traced("add", *layer))
    wrapper.writeline("kernel 3")
    wrapper.enter_context(traced("sum", ("L['self']", "Model")))
    wrapper.writeline("kernel 4")
    wrapper.codegen_while_loop([traced("loop_mm", *layer)])
    wrapper.enter_context(traced("mm_2", *layer))
    wrapper.writeline("kernel 5")
    generated[kind] = wrapper.generate(True)

class Unreadable(dict):
    """An FX node's meta that fails when read, as an Inductor unlike the known ones might."""

    def get(self, key, default=None):
        raise RuntimeError("unreadable meta")


wrapper = inductor_wrapper.PythonWrapperCodegen()
wrapper.enter_context(traced("mm", *layer))
wrapper.writeline("kernel 1")
wrapper.enter_context(types.SimpleNamespace(name="odd", meta=Unreadable()))
wrapper.writeline("kernel 2")
wrapper.enter_context(traced("mm_1", ("L['self'].other", "Other")))
wrapper.writeline("kernel 3")
generated["after a failure"] = wrapper.generate(True)
import torch._functorch.config  # noqa: E402
import torch._inductor.config  # noqa: E402

caches = [torch._inductor.config.fx_graph_cache, torch._functorch.config.enable_autograd_cache]
print(json.dumps({"events": torch.events, "call_impl": [fast_path_calls, compiled_calls, hooked_calls],
                  "generated": generated, "caches": caches,
                  "sitecustomize": sorted(m for m in sys.modules if "sitecustomize" in m),
                  "chained": getattr(sys.modules.get("sitecustomize"), "CHAINED", None)}))
