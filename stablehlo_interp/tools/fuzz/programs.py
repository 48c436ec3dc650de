"""Generated programs: a flat list of ops in SSA form over typed values, printed as
MLIR text in the generic op syntax, and cut into smaller programs by the reducer.

A :class:`Program` holds its values' types (the function's arguments first, then
one result per op), its ops in order, and the values it returns. Any subset of its
ops is again a program once the values the kept ops use but no kept op makes become
arguments: :meth:`Program.keep` does that, and the reducer gives those arguments the
values the interpreter computed for them in the whole program.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Spec:
    """A tensor type: its shape and its element type as MLIR spells it (``f32``, ``complex<f64>``)."""

    shape: tuple
    element: str

    def __str__(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.element + ">"

    @property
    def size(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count


@dataclass(frozen=True)
class Op:
    """One op: ``name`` (``stablehlo.add``), the values it reads (indices into the
    program's values), the attribute dictionary's text (without braces) and its
    regions' text, written by :meth:`text` in the generic syntax."""

    name: str
    operands: tuple
    result: Spec
    attributes: str = ""
    regions: str = ""

    def text(self, result: str, names: list, types: list) -> str:
        operands = ", ".join(names[i] for i in self.operands)
        regions = f" ({self.regions})" if self.regions else ""
        attributes = f" {{{self.attributes}}}" if self.attributes else ""
        signature = ", ".join(str(types[i]) for i in self.operands)
        return f'    {result} = "{self.name}"({operands}){regions}{attributes} : ({signature}) -> {self.result}'


@dataclass
class Program:
    """``values[:arguments]`` are @main's arguments; op ``k`` makes value ``arguments + k``."""

    arguments: int
    values: list = field(default_factory=list)    # Spec per value
    ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)   # indices of the values returned

    def op_value(self, k: int) -> int:
        return self.arguments + k

    def text(self) -> str:
        names = [f"%arg{i}" for i in range(self.arguments)] + [f"%{k}" for k in range(len(self.ops))]
        arguments = ", ".join(f"{names[i]}: {self.values[i]}" for i in range(self.arguments))
        results = ", ".join(str(self.values[i]) for i in self.outputs)
        lines = [f"func.func @main({arguments}) -> ({results}) {{"]
        lines += [op.text(names[self.op_value(k)], names, self.values) for k, op in enumerate(self.ops)]
        lines.append(f"    return {', '.join(names[i] for i in self.outputs)} : {results}")
        lines.append("}")
        return "\n".join(lines) + "\n"

    @property
    def argument_specs(self) -> list:
        return self.values[:self.arguments]

    def op_names(self) -> list:
        return [op.name for op in self.ops]

    def keep(self, kept_ops, outputs=None) -> tuple["Program", list]:
        """The program of the ops ``kept_ops`` (indices, in order) returning ``outputs``
        (old value indices; default: this program's), without ops nothing returned
        depends on. Values read but made by no kept op become arguments. Returns the
        program and, per new argument, the old value it stands for."""
        outputs = list(self.outputs if outputs is None else outputs)
        kept = set(kept_ops)
        needed, live = set(outputs), set()
        for k in reversed(range(len(self.ops))):
            if k in kept and self.op_value(k) in needed:
                live.add(k)
                needed.update(self.ops[k].operands)
        sources = sorted(v for v in needed if v < self.arguments or (v - self.arguments) not in live)
        renumber = {old: new for new, old in enumerate(sources)}
        program = Program(len(sources), [self.values[v] for v in sources])
        for k in sorted(live):
            op = self.ops[k]
            renumber[self.op_value(k)] = len(program.values)
            program.values.append(op.result)
            program.ops.append(replace(op, operands=tuple(renumber[v] for v in op.operands)))
        program.outputs = [renumber[v] for v in outputs]
        return program, sources

    def bypass(self, k: int, operand: int) -> "Program":
        """This program with the uses of op ``k``'s result reading ``operand`` instead (a
        value of the same type): op ``k`` is then dead, and :meth:`keep` drops it."""
        old = self.op_value(k)

        def swap(value):
            return operand if value == old else value

        return Program(self.arguments, list(self.values),
                       [replace(op, operands=tuple(swap(v) for v in op.operands)) for op in self.ops],
                       [swap(v) for v in self.outputs])

    def on_one_element(self) -> "Program":
        """This program with every value of rank 0 (for programs of element-wise ops)."""
        return Program(self.arguments, [Spec((), spec.element) for spec in self.values],
                       [replace(op, result=Spec((), op.result.element)) for op in self.ops], list(self.outputs))
