"""The other side of a comparison: anything that runs a module on arguments.

A backend is a callable ``backend(module_text, args) -> list of arrays`` with
a ``name``. :func:`resolve` turns what users pass as ``backend=`` into one:

* a JAX platform name (``"cpu"``, ``"gpu"``, ``"interp"`` ...): the module is
  compiled by that platform's PJRT client (:class:`JaxBackend`);
* an :class:`InterpreterBackend`: this interpreter with some op
  implementations replaced, e.g. a deliberately wrong one in a test;
* any other callable with that signature (your own backend).
"""

from __future__ import annotations

import functools

import numpy as np

from .. import ops as op_families
from ..engine import registry
from ..ir.decode import load_quant_dialect
from ..program import load


class JaxBackend:
    """Compile and run modules with one of JAX's backends (XLA's PJRT clients)."""

    def __init__(self, platform: str = "cpu"):
        self.platform = platform
        self.name = platform

    def __call__(self, module_text: str, args) -> list:
        import jax

        device = jax.devices(self.platform)[0]
        executable = _compile(self.platform, module_text)
        buffers = [jax.device_put(np.asarray(a), device) for a in args]
        return [np.asarray(out) for out in executable.execute(buffers)]


@functools.lru_cache(maxsize=32)
def _compile(platform: str, module_text: str):
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jaxlib.mlir import ir

    backend = xla_bridge.get_backend(platform)
    with mlir.make_ir_context() as context:
        load_quant_dialect(context)   # for modules with !quant.uniform types
        module = ir.Module.parse(module_text)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        devices = xla_client.DeviceList(tuple(backend.local_devices()[:1]))
        return backend.compile_and_load(module, devices, options)


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

    def __call__(self, module_text: str, args) -> list:
        op_families.load_all()   # the built-in implementations whose conventions the replacements follow
        with registry.replaced(self.ops, self.custom_calls):
            program = load(module_text)   # builders run at load time: the plan keeps the replacements
        return program.run(*args)


def resolve(backend):
    """A backend callable with a ``name`` for what ``compare(..., backend=...)`` accepts."""
    if isinstance(backend, str):
        return JaxBackend(backend)
    if callable(backend):
        if not hasattr(backend, "name"):
            name = getattr(backend, "__name__", type(backend).__name__)
            return _Named(backend, name)
        return backend
    raise TypeError(f"backend must be a JAX platform name or a callable (module_text, args) -> arrays, "
                    f"not {type(backend).__name__}")


class _Named:
    def __init__(self, run, name: str):
        self.run, self.name = run, name

    def __call__(self, module_text: str, args) -> list:
        return self.run(module_text, args)
