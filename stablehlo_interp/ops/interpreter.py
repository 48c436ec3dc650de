"""The instrumentation ops of StableHLO's interpreter dialect and the check that reads
probes back, as ``stablehlo-translate --interpret`` runs them
(stablehlo/reference/InterpreterOps.cpp, stablehlo/tools/StablehloTranslateMain.cpp).
They write where the run's :class:`~stablehlo_interp.engine.hostio.Instruments` say.

- ``interpreter.print %x : T`` writes ``T {values}`` and a newline, values nested by
  dimension as the C++ ``Tensor::print`` does (integers in decimal, booleans as
  ``true``/``false``, floats as ``1.000000e+00``, complex numbers as ``[re, im]``).
  The C++ tool puts the operand's SSA name (``%0 = ``) in front; the interpreter
  does not keep SSA names, so that prefix is left out.
- ``%y = interpreter.probe %x, probe_id = "id" : T`` returns ``%x``, saves it as
  ``probe<N>.npy`` and appends ``id,T,path`` to ``index.csv`` (the C++ tool's
  index format). Arrays are saved with their NumPy dtype; types NumPy lacks (bf16,
  f8 ...) as their raw bits (``uint8``/``uint16``), as the C++ tool does for bf16.
- ``check.expect_serialized_eq %x, probe_id = "id" [, iter = N] : T``: the value
  probe ``id`` saved the N-th time it ran (default 0) has type ``T`` and equals
  ``%x`` exactly. The file's bytes are read as ``T``'s elements, so files the C++
  tool wrote (it saves i64 as ``<u8``, complex<f32> as ``<f8``) read back too.
  (The C++ tool counts the N-th *line* of the index and matches the id as a
  substring; here the N-th line whose id *is* ``id`` counts.)
"""

from __future__ import annotations

import os

import numpy as np

from ..engine.hostio import Instruments
from ..engine.registry import op
from .check import CheckFailure, _equal, _first_mismatch


def format_tensor(value, type_text: str) -> str:
    """``T {...}`` as the C++ reference interpreter's ``Tensor::print`` writes it."""
    array = np.asarray(value)
    if array.ndim == 0:
        return f"{type_text} {{{_element(array[()])}}}"
    return f"{type_text} {{{_nested(array, 1)}\n}}"


def _nested(array, indent: int) -> str:
    if array.ndim == 1:
        return "\n" + "  " * indent + "[" + ", ".join(_element(x) for x in array) + "]"
    rows = ",".join(_nested(row, indent + 1) for row in array)
    return "\n" + "  " * indent + "[" + rows + "\n" + "  " * indent + "]"


def _element(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if np.iscomplexobj(x):
        return f"[{float(x.real):e}, {float(x.imag):e}]"
    if np.asarray(x).dtype.kind in "iu":
        return str(int(x))
    return f"{float(x):e}"


@op("interpreter.print", variadic=True, execution=True)
def interpreter_print(info):
    type_text = str(info.operand_types[0])

    def run(execution, operand):
        execution.context.instruments.write(format_tensor(operand, type_text) + "\n")
        return ()

    return run


def _probe_directory(info, instruments: Instruments) -> str:
    if instruments.probe_directory is None:
        raise info.error("no probe directory: run with stablehlo-interp test --probe-output-dir DIR "
                         "(the test command uses a temporary one by default)")
    return os.fspath(instruments.probe_directory)


def _stored(array: np.ndarray) -> np.ndarray:
    """The array NumPy can save: types NumPy lacks (bf16, f8 ...) as their raw bits."""
    if array.dtype.kind in "biufc" and array.dtype.type.__module__ == "numpy":
        return array
    return array.view({1: np.uint8, 2: np.uint16}[array.dtype.itemsize])


@op("interpreter.probe", execution=True)
def interpreter_probe(info):
    probe_id, type_text = info.attr("probe_id"), str(info.operand_types[0])

    def run(execution, operand):
        instruments = execution.context.instruments
        directory = _probe_directory(info, instruments)
        with instruments.lock:
            instruments.probes_written += 1
            path = os.path.join(directory, f"probe{instruments.probes_written}.npy")
            np.save(path, _stored(np.asarray(operand, order="C")))
            mode = "a" if instruments.probes_written > 1 else "w"   # a new index for each run
            with open(os.path.join(directory, Instruments.INDEX_FILE), mode, encoding="utf-8") as index:
                index.write(f"{probe_id},{type_text},{path}\n")
        return operand

    return run


@op("check.expect_serialized_eq", variadic=True, execution=True)
def expect_serialized_eq(info):
    probe_id, iteration = info.attr("probe_id"), int(info.attributes.get("iteration", 0))
    expected_type = info.operand_types[0]
    type_text = str(expected_type)
    name = info.name

    def run(execution, expected):
        directory = _probe_directory(info, execution.context.instruments)
        records = []
        index_path = os.path.join(directory, Instruments.INDEX_FILE)
        if os.path.exists(index_path):
            with open(index_path, encoding="utf-8") as index:
                records = [line.rstrip("\n").split(",", 2) for line in index if line.strip()]
        matches = [record for record in records if record[0] == probe_id]
        if iteration >= len(matches):
            raise CheckFailure(name, info.location, f"probe {probe_id!r} saved {len(matches)} values; "
                                                    f"there is no iteration {iteration}")
        _, saved_type, path = matches[iteration]
        if saved_type != type_text:
            raise CheckFailure(name, info.location, f"probe {probe_id!r} saved a {saved_type}, "
                                                    f"the check expects {type_text}")
        expected = np.asarray(expected)
        raw = np.load(path, allow_pickle=False).tobytes()
        if len(raw) != expected.nbytes:
            raise CheckFailure(name, info.location, f"{path} holds {len(raw)} bytes, "
                                                    f"{type_text} needs {expected.nbytes}")
        actual = np.frombuffer(raw, expected.dtype).reshape(expected.shape)
        ok = _equal(actual, expected)
        if not np.all(ok):
            raise CheckFailure(name, info.location, f"probe {probe_id!r}, iteration {iteration}: "
                               + _first_mismatch(actual, expected, ok))
        return ()

    return run
