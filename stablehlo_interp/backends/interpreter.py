"""This interpreter as a backend, with some op implementations replaced."""

from __future__ import annotations

from .. import ops as op_families
from ..engine import registry
from ..program import load


class InterpreterBackend:
    """This interpreter, with op (or custom-call) implementations replaced.

    ``ops`` and ``custom_calls`` map names to builders, as for
    :func:`stablehlo_interp.register_op`; each replacement's runners follow the
    calling convention of the implementation it replaces (engine/registry.py),
    and the replacements apply only to the modules this backend loads.
    """

    def __init__(self, ops: dict | None = None, custom_calls: dict | None = None,
                 name: str = "interpreter with replaced ops"):
        self.ops = dict(ops or {})
        self.custom_calls = dict(custom_calls or {})
        self.name = name
        replaced = ", ".join(sorted(self.ops) + sorted(self.custom_calls))
        self.settings = (f"implementations replaced: {replaced}",) if replaced else ()

    def __call__(self, module_text: str, args) -> list:
        op_families.load_all()   # the built-in implementations whose conventions the replacements follow
        with registry.replaced(self.ops, self.custom_calls):
            program = load(module_text)   # builders run at load time: the plan keeps the replacements
        return program.run(*args)
