"""Stand-in for Inductor's wrapper code generators: each keeps its lines; `enter_context` records the FX node a
kernel comes from (as a `ctx NAME` line here), `generate` returns the lines as the generated code's body."""


class PythonWrapperCodegen:
    def __init__(self):
        self.lines = []

    def writeline(self, line):
        self.lines.append(line)

    def enter_context(self, ctx):
        self.lines.append(f"ctx {ctx.name}")

    def generate(self, is_inference):
        return list(self.lines)

    def codegen_while_loop(self, body_nodes):
        """A loop whose body (`body_nodes`, each with one kernel) is written inline, as Inductor's is."""
        self.writeline("while cond:")
        for node in body_nodes:
            self.enter_context(node)
            self.writeline(f"    kernel in loop {node.name}")


class SubgraphPythonWrapperCodegen(PythonWrapperCodegen):
    pass


class CppWrapperCpu(PythonWrapperCodegen):
    pass
