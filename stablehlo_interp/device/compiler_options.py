"""Compiler options: ``jax.jit(f, compiler_options={...})``, ``lowered.compile(compiler_options=...)``.

The options are XLA's (the fields of its ``DebugOptions``, such as
``xla_embed_ir_in_executable``; ``exec_time_optimization_effort`` and the other
effort levels JAX passes apart, in the build options). None changes what the
interpreter computes, but a name XLA does not know, or a value of the wrong type,
must fail as it does on the CPU (``No such compile option: 'invalid_key'``,
``'x' is not a valid bool value``). The list of names and types is XLA's own and
is not published in Python, so the options are checked by XLA: an empty program is
compiled with them on a CPU client of this plugin's own (XLA applies the options
before it compiles). That costs a few milliseconds (about 35 ms the first time),
once per set of options, and only for programs compiled with options. Whatever
XLA dumps of that empty program (``xla_dump_to`` and the ``xla_dump_*`` options)
goes to a temporary directory that is removed at once.

One option is the interpreter's own and never reaches XLA: ``interp_spmd`` chooses
how a program over several devices runs (device/placement.py: ``global``,
``per_device``, ``check``; docs/sharding.md).
"""

from __future__ import annotations

import tempfile
import threading

_EMPTY_PROGRAM = "module @check_compiler_options { func.func public @main() { return } }"

_lock = threading.Lock()
_client = None
_accepted: set = set()   # the option sets a process compiles with: a few


def problem(overrides: tuple) -> str | None:
    """XLA's message about the options ``overrides`` (``((name, value), ...)``, as
    ``CompileOptions.env_option_overrides``), or None if it accepts them all."""
    if not overrides or overrides in _accepted:
        return None
    from jaxlib import xla_client

    global _client
    with _lock:
        if _client is None:
            _client = xla_client.make_cpu_client()
        with tempfile.TemporaryDirectory(prefix="stablehlo_interp_options_") as dumps:
            options = xla_client.CompileOptions()
            options.env_option_overrides = _dumping_to(overrides, dumps)
            try:
                _client.compile_and_load(_EMPTY_PROGRAM, compile_options=options,
                                         executable_devices=xla_client.DeviceList(tuple(_client.devices()[:1])))
            except xla_client.XlaRuntimeError as error:
                return str(error).removeprefix("INVALID_ARGUMENT: ")
        _accepted.add(overrides)
    return None


def _dumping_to(overrides: tuple, directory: str) -> list:
    """The options with ``xla_dump_to`` set to ``directory`` (one that is not a string
    stays, for XLA to refuse)."""
    if not isinstance(dict(overrides).get("xla_dump_to", ""), str):
        return list(overrides)
    return [(name, value) for name, value in overrides if name != "xla_dump_to"] + [("xla_dump_to", directory)]
