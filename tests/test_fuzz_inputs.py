"""Damaged inputs never kill the process: each is a clear error (issue 13).

Hypothesis flips, deletes and inserts bytes of MLIR text, bytecode, StableHLO
portable artifacts and ``jax.export`` serializations of a few real programs;
each damaged case is loaded and run in a child process (tests/load_in_child.py,
a batch per child), and the test fails on any death by signal and on any error
that is not one of ours (an ``si.InterpreterError``: mostly a ``ModuleError``).
"""

from __future__ import annotations

import io
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jax import export
from jaxlib.mlir.dialects import stablehlo

import stablehlo_interp as si
from stablehlo_interp.ir import sources
from load_in_child import ChildLoader

DATA = pathlib.Path(__file__).parent / "data"


def _programs():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    yield "affine", (lambda a: a * 2 + 1), (x,)
    yield "row sums of sines", (lambda a: jnp.sum(jnp.sin(a), axis=1)), (x,)
    yield "loop", (lambda a: jax.lax.fori_loop(0, 3, lambda i, c: c * 1.5 + i, a)), (x,)
    yield "gram matrix", (lambda a: a @ a.T), (x,)


class _Originals(list):
    """``(label, data, args, is_text)`` for each program in each form a user may hand us."""

    def __repr__(self) -> str:   # hypothesis prints the fixtures of a failing example
        return f"<{len(self)} originals: {', '.join(label for label, *_ in self)}>"


@pytest.fixture(scope="module")
def originals():
    forms = _Originals()
    for name, function, args in _programs():
        lowered = jax.jit(function).lower(*args)
        bytecode = io.BytesIO()
        lowered.compiler_ir("stablehlo").operation.write_bytecode(bytecode)
        # serialize_portable_artifact turns the module it is given into VHLO: a copy, not JAX's
        portable = stablehlo.serialize_portable_artifact(sources.parse_bytes(bytecode.getvalue()),
                                                         stablehlo.get_current_version())
        forms += [(f"{name}: jax.export", bytes(export.export(jax.jit(function))(*args).mlir_module_serialized),
                   args, False),
                  (f"{name}: portable artifact", bytes(portable), args, False),
                  (f"{name}: bytecode", bytecode.getvalue(), args, False),
                  (f"{name}: text", lowered.as_text().encode(), args, True)]
    return forms


@pytest.fixture(scope="module")
def loader():
    child = ChildLoader()
    yield child
    child.close()


_edit = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
    st.tuples(st.just("delete"), st.floats(0, 1, exclude_max=True), st.integers(1, 8)),
    st.tuples(st.just("insert"), st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=8)))

# (which original, its edits, text handed over as str rather than bytes)
_case = st.tuples(st.integers(0, 15), st.lists(_edit, min_size=1, max_size=4), st.booleans())


def _damaged(data: bytes, edits) -> bytes:
    data = bytearray(data)
    for kind, where, what in edits:
        at = int(where * len(data))
        if kind == "flip":
            data[at] ^= 1 << what
        elif kind == "delete":
            del data[at:at + what]
        else:
            data[at:at] = what
    return bytes(data)


def _check_damaged(loader, originals, batch):
    cases = []
    for index, edits, as_str in batch:
        label, data, args, is_text = originals[index % len(originals)]
        damaged = _damaged(data, edits)
        if is_text and as_str:   # invalid UTF-8 becomes lone surrogates
            damaged = damaged.decode("utf-8", "surrogateescape")
        cases.append((f"{label} {edits}{' as str' if is_text and as_str else ''}", damaged, args))
    outcomes = loader.load_all(cases)
    unclear = [f"{o.label}: {o.result} {o.message[-300:]}" for o in outcomes if not o.clear]
    assert not unclear, "\n".join(unclear)


@settings(max_examples=2, phases=[Phase.generate])
@given(batch=st.lists(_case, min_size=30, max_size=30))
def test_damaged_inputs_are_clear_errors(loader, originals, batch):
    _check_damaged(loader, originals, batch)


@pytest.mark.slow
@settings(max_examples=40, phases=[Phase.generate])   # a failure names its case: no shrinking of the batch
@given(batch=st.lists(_case, min_size=100, max_size=100))
def test_thousands_of_damaged_inputs_are_clear_errors(loader, originals, batch):
    _check_damaged(loader, originals, batch)


def _in_child(code: str) -> str:
    """The output of ``code`` run by a fresh Python (it may abort: then the test sees why)."""
    process = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                             errors="replace", timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    return process.stdout


def test_a_diagnostic_that_is_not_utf8_is_reported_not_fatal():
    """A damaged producer string is quoted by the reader's note; jaxlib's MLIRError
    aborted the process converting it (nanobind's "conversion error")."""
    output = _in_child("""
        import numpy as np, jax
        from jax import export
        from stablehlo_interp.errors import ModuleError
        from stablehlo_interp.ir import sources

        data = bytes(export.export(jax.jit(lambda a: a * 2))(np.ones(3, np.float32)).mlir_module_serialized)
        version = data.index(b"StableHLO_v") + len(b"StableHLO_v")
        try:
            sources.parse_bytes(data[:version] + b"\\xff" + data[version + 1:len(data) // 2])
        except ModuleError as error:
            print(error)
    """)
    assert output.startswith("cannot deserialize StableHLO portable artifact:\n")
    assert re.search(r"attempting to parse \d+ bytes when only \d+ remain", output)
    assert "note: (a diagnostic whose text is not valid UTF-8)" in output


def test_bytecode_that_corrupts_the_readers_heap_is_a_module_error_and_harms_no_later_load():
    """This damaged portable artifact makes the bytecode reader corrupt the heap
    ("invalid dialect index: 11", then "malloc(): unsorted double linked list
    corrupted" and an abort). Its first parse runs in a child process: in a fresh
    child the abort comes at once; in one that parsed before, the heap's layout can
    let the reader report its error and the abort wait for the next request (CI saw
    a valid artifact's load killed so). Either way the load is a ModuleError, and the
    next load, in a fresh child, reads a valid artifact."""
    for _ in range(2):   # once in a fresh child, once in one that has parsed
        with pytest.raises(si.ModuleError, match=r"reading it killed the child process .* \(signal 6\)"
                                                 r"|invalid dialect index"):
            si.load(DATA / "heap_corrupting_portable_artifact.mlirbc")
        x = np.ones(3, np.float32)
        (result,) = si.run(bytes(export.export(jax.jit(lambda a: a * 2))(x).mlir_module_serialized), x)
        np.testing.assert_array_equal(result, 2 * x)


def test_bytes_parse_errors_carry_the_parsers_diagnostics():
    x = np.ones(3, np.float32)
    data = bytes(export.export(jax.jit(lambda a: a * 2))(x).mlir_module_serialized)
    with pytest.raises(si.ModuleError, match="cannot deserialize StableHLO portable artifact:\n  loc"):
        si.run(data[:len(data) // 2], x)


def test_a_location_name_that_is_not_utf8_is_a_module_error():
    """``\\FF`` escapes a byte that is not UTF-8 into the name: jaxlib aborts reading it."""
    text = ('func.func @main(%a: tensor<f32>) -> tensor<f32> {\n'
            '  %0 = stablehlo.add %a, %a : tensor<f32> loc("x\\FFy")\n'
            '  return %0 : tensor<f32>\n}')
    with pytest.raises(si.ModuleError, match=r"killed the child process .* \(signal 6\)"):
        si.load(text)
    (result,) = si.run(text.replace("\\FF", "\\41"), np.float32(2))   # an ASCII escape: loaded here
    assert result == 4


def test_text_with_lone_surrogates_is_a_module_error():
    with pytest.raises(si.ModuleError, match="not valid Unicode.*surrogates not allowed"):
        si.load("func.func @main() {\n  \udcff\n}")
