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
from ..ir.sources import host_callbacks_of
from ..ir.types import Token
from ..program import load


class JaxBackend:
    """Compile and run modules with one of JAX's backends (XLA's PJRT clients).

    A module that calls host callbacks is run with the Python functions they call
    (``host_callbacks``, in the order of their ``index``): what :meth:`lower` returns
    with the module. A token argument is passed as JAX passes one (an empty array)."""

    def __init__(self, platform: str = "cpu"):
        self.platform = platform
        self.name = platform

    def __call__(self, module_text: str, args, host_callbacks: tuple = ()) -> list:
        import jax

        device = jax.devices(self.platform)[0]
        executable = _compile(self.platform, module_text, tuple(host_callbacks))
        buffers = [jax.device_put(_TOKEN_BUFFER if isinstance(a, Token) else np.asarray(a), device) for a in args]
        returned = executable.execute(buffers)
        # a token comes back as an empty bool array that cannot be read: any empty bool array is this one
        return [_TOKEN_BUFFER if out.shape == (0,) and out.dtype == np.bool_ else np.asarray(out) for out in returned]

    def lower(self, traced) -> tuple[str, tuple]:
        """A ``jax.stages.Traced`` lowered for this platform: the module's text (with
        locations) and the host callbacks it calls."""
        from jax._src import xla_bridge

        lowered = traced.lower(lowering_platforms=(xla_bridge.canonicalize_platform(self.platform),))
        return lowered.as_text(debug_info=True), host_callbacks_of(lowered)


_TOKEN_BUFFER = np.zeros(0, np.bool_)   # what JAX passes for a token (jax/_src/dispatch.py)


@functools.lru_cache(maxsize=32)
def _compile(platform: str, module_text: str, host_callbacks: tuple = ()):
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
        if host_callbacks:
            return backend.compile_and_load(module, devices, options, host_callbacks=list(host_callbacks))
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
