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
class TupleSpec:
    """A tuple type (spec: "Types"), of :class:`Spec` parts; its ``element`` is
    ``tuple``, which no op but ``get_tuple_element`` reads."""

    parts: tuple
    shape: tuple = ()
    element: str = "tuple"

    def __str__(self) -> str:
        return "tuple<" + ", ".join(str(part) for part in self.parts) + ">"

    @property
    def size(self) -> int:
        return 1


@dataclass(frozen=True)
class Op:
    """One op: ``name`` (``stablehlo.add``), the values it reads (indices into the
    program's values), its results' types, the attribute dictionary's text (without
    braces) and its regions' text, written by :meth:`text` in the generic syntax.
    ``captures``: values of the enclosing function its regions use (spec: a region
    may use values defined above it, "Programs"), written in the regions' text as
    ``$c0``, ``$c1`` ...; they count as read, as operands do."""

    name: str
    operands: tuple
    results: tuple
    attributes: str = ""
    regions: str = ""
    captures: tuple = ()

    @property
    def reads(self) -> tuple:
        return self.operands + self.captures

    def text(self, result: str, names: list, types: list) -> str:
        operands = ", ".join(names[i] for i in self.operands)
        regions = self.regions
        for i in reversed(range(len(self.captures))):   # ($c10 before $c1)
            regions = regions.replace(f"$c{i}", names[self.captures[i]])
        regions = f" ({regions})" if regions else ""
        attributes = f" {{{self.attributes}}}" if self.attributes else ""
        signature = ", ".join(str(types[i]) for i in self.operands)
        results = ", ".join(str(spec) for spec in self.results)
        if len(self.results) != 1:
            result, results = f"{result}:{len(self.results)}", f"({results})"
        return f'    {result} = "{self.name}"({operands}){regions}{attributes} : ({signature}) -> {results}'

    def renumbered(self, renumber) -> "Op":
        return replace(self, operands=tuple(renumber(v) for v in self.operands),
                       captures=tuple(renumber(v) for v in self.captures))


@dataclass
class Program:
    """``values[:arguments]`` are @main's arguments; then each op's results in order."""

    arguments: int
    values: list = field(default_factory=list)    # Spec per value
    ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)   # indices of the values returned

    def op_values(self, k: int) -> range:
        """The values op ``k`` makes."""
        first = self.arguments + sum(len(op.results) for op in self.ops[:k])
        return range(first, first + len(self.ops[k].results))

    def op_of(self, value: int) -> int | None:
        """The index of the op that makes ``value`` (None: an argument)."""
        made = self.arguments
        for k, op in enumerate(self.ops):
            made += len(op.results)
            if value < made:
                return k if value >= self.arguments else None
        return None

    def names(self) -> list:
        """Each value's name in the text: ``%arg0``, ``%3``, ``%4#1`` (result 1 of op 4)."""
        names = [f"%arg{i}" for i in range(self.arguments)]
        for k, op in enumerate(self.ops):
            names += [f"%{k}"] if len(op.results) == 1 else [f"%{k}#{i}" for i in range(len(op.results))]
        return names

    def text(self) -> str:
        names = self.names()
        arguments = ", ".join(f"{names[i]}: {self.values[i]}" for i in range(self.arguments))
        results = ", ".join(str(self.values[i]) for i in self.outputs)
        lines = [f"func.func @main({arguments}) -> ({results}) {{"]
        lines += [op.text(f"%{k}", names, self.values) for k, op in enumerate(self.ops)]
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
            if k in kept and needed.intersection(self.op_values(k)):
                live.add(k)
                needed.update(self.ops[k].reads)
        made = {v for k in live for v in self.op_values(k)}
        sources = sorted(v for v in needed if v not in made)
        renumber = {old: new for new, old in enumerate(sources)}
        program = Program(len(sources), [self.values[v] for v in sources])
        for k in sorted(live):
            op = self.ops[k]
            for old in self.op_values(k):
                renumber[old] = len(program.values)
                program.values.append(self.values[old])
            program.ops.append(op.renumbered(renumber.__getitem__))
        program.outputs = [renumber[v] for v in outputs]
        return program, sources

    def bypass(self, k: int, operand: int) -> "Program":
        """This program with the uses of op ``k``'s (one) result reading ``operand`` instead
        (a value of the same type): op ``k`` is then dead, and :meth:`keep` drops it."""
        (old,) = self.op_values(k)

        def swap(value):
            return operand if value == old else value

        return Program(self.arguments, list(self.values), [op.renumbered(swap) for op in self.ops],
                       [swap(v) for v in self.outputs])

    def on_one_element(self) -> "Program":
        """This program with every value of rank 0 (for programs of element-wise ops)."""
        return Program(self.arguments, [Spec((), spec.element) for spec in self.values],
                       [replace(op, results=tuple(Spec((), r.element) for r in op.results)) for op in self.ops],
                       list(self.outputs))
