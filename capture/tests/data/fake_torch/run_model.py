"""Runs a small model on the stand-in torch and prints what the module hook did, as JSON."""

import json
import sys

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
print(json.dumps({"events": torch.events, "call_impl": [fast_path_calls, compiled_calls, hooked_calls],
                  "sitecustomize": sorted(m for m in sys.modules if "sitecustomize" in m),
                  "chained": getattr(sys.modules.get("sitecustomize"), "CHAINED", None)}))
