"""Shared helpers for differential tests: XLA CPU through JAX, the C++ reference
interpreter, and comparisons bit-exact or within a ULP bound."""

from __future__ import annotations

import functools

import jax
import ml_dtypes
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.ir.types import element_type_of

FLOAT_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
COMPLEX_DTYPES = [np.complex64, np.complex128]
SIGNED_DTYPES = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED_DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]
SUB_BYTE_DTYPES = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
INTEGER_DTYPES = SIGNED_DTYPES + UNSIGNED_DTYPES
F8_DTYPES = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz]
SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3)]


def dtype_id(dtype) -> str:
    return element_type_of(dtype)


def run_xla(fn, *args):
    """fn jitted on XLA's CPU backend; results as a list of NumPy arrays."""
    cpu = jax.devices("cpu")[0]
    out = jax.jit(fn)(*[jax.device_put(a, cpu) for a in args])
    leaves = jax.tree_util.tree_leaves(out)
    return [np.asarray(leaf) for leaf in leaves]


def run_interp(fn, *args):
    """fn lowered by jax.jit and run by stablehlo_interp (with result type checks)."""
    lowered = jax.jit(fn).lower(*args)
    outputs = si.run(lowered, *args, listeners=[si.validation.ResultTypeChecker()])
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(outputs)]


def edge_values(dtype, size: int = 0, seed: int = 0) -> np.ndarray:
    """Edge values of a dtype (NaN, +-inf, +-0, denormals, min/max ...) then random ones."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        values = np.array([True, False] + list(rng.integers(0, 2, size).astype(bool)))
        return values
    if dtype.kind in "iu" or dtype in map(np.dtype, SUB_BYTE_DTYPES):
        info = ml_dtypes.iinfo(dtype)
        special = [0, 1, info.min, info.max, info.min + 1, info.max - 1]
        if info.min < 0:
            special += [-1, -2]
        randoms = rng.integers(int(info.min), int(info.max), size, endpoint=True)
        return np.array(special + list(randoms)).astype(dtype)
    if dtype.kind == "c":
        part = np.float32 if dtype == np.complex64 else np.float64
        re, im = edge_values(part, size, seed), edge_values(part, size, seed + 1)[::-1]
        out = np.empty(len(re), dtype)
        out.real, out.imag = re, im
        return out
    finfo = ml_dtypes.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, float(finfo.max), -float(finfo.max),
               float(finfo.smallest_normal), float(finfo.smallest_subnormal),
               -float(finfo.smallest_subnormal)]
    try:
        np.array(np.inf).astype(dtype)
        if np.isinf(np.array(np.inf).astype(dtype)):
            special += [np.inf, -np.inf]
    except (OverflowError, ValueError):
        pass
    if np.isnan(np.array(np.nan).astype(dtype)):
        special += [np.nan]
    scale = min(float(finfo.max), 1e4)
    randoms = rng.standard_normal(size) * rng.choice([0.01, 1.0, scale], size)
    return np.array(special + list(randoms), dtype=np.float64).astype(dtype)


def assert_same(actual, expected, *, max_ulp: int = 0, context: str = "", zero_signs: bool = True,
                flushes_subnormals: bool = False, empty_ok: bool = False) -> int:
    """Bit-exact equality (NaN matches NaN), or within ``max_ulp`` for floats; returns
    how many elements it compared. With ``zero_signs=False`` a zero matches a zero of
    either sign: for results whose zero signs depend on an order the spec leaves to the
    implementation.

    ``flushes_subnormals`` is the oracle's to say: XLA CPU flushes subnormal results
    to zeros of their sign, so against it our subnormals are flushed the same way
    before comparing, and the smallest normal is one step from zero
    (``ulp_difference(subnormals_as_one_step=True)``). Every other oracle (the C++
    reference interpreter, NumPy, hand-computed values) keeps subnormals: each is a
    step of its own. (Subnormal *inputs*, which XLA reads as zero, are the caller's
    to leave out: a decision from the inputs.)

    A comparison of no elements fails (a mask that left nothing proves nothing),
    unless ``empty_ok`` says the oracle's result is empty by its shape (the shapes,
    compared first, were the whole check)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}shape {actual.shape} != {expected.shape}"
    if actual.size == 0:
        assert empty_ok, f"{context}no elements compared"
        return 0
    if _is_float(actual.dtype):
        if flushes_subnormals:
            actual, expected = flush_subnormals(actual), flush_subnormals(expected)
        distance = ulp_difference(actual, expected, subnormals_as_one_step=flushes_subnormals)
        bad = distance > max_ulp
        if max_ulp == 0 and zero_signs:   # bit-exact: -0.0 and +0.0 are 0 ULP apart, their bits differ
            bad |= _zero_signs_differ(actual, expected)
    else:
        bad = actual != expected
    if np.any(bad):
        index = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{context}{int(np.sum(bad))} of {actual.size} elements differ (max_ulp={max_ulp}); first at "
            f"{list(index)}: got {actual[index]!r}, expected {expected[index]!r}")
    return int(actual.size)


def flush_subnormals(values) -> np.ndarray:
    """``values`` with every subnormal replaced by a zero of its sign, as XLA CPU
    flushes them (per part for complex values)."""
    values = np.array(values)
    if values.dtype.kind == "c":
        values.real, values.imag = flush_subnormals(values.real), flush_subnormals(values.imag)
        return values
    with np.errstate(invalid="ignore"):
        wide = values.astype(np.float64)
    subnormal = (wide != 0) & (np.abs(wide) < float(ml_dtypes.finfo(values.dtype).smallest_normal))
    values[subnormal] = np.copysign(0.0, wide[subnormal]).astype(values.dtype)
    return values


def _is_float(dtype) -> bool:
    """Real or complex floating point, the ml_dtypes ones (bf16, f8, f6, f4) included."""
    return dtype.kind in "fc" or (dtype.kind == "V" and dtype not in map(np.dtype, SUB_BYTE_DTYPES))


def _zero_signs_differ(actual, expected) -> np.ndarray:
    """Where both are zeros of opposite signs (per part, for complex values)."""
    if actual.dtype.kind == "c":
        return _zero_signs_differ(actual.real, expected.real) | _zero_signs_differ(actual.imag, expected.imag)
    with np.errstate(invalid="ignore"):   # widening a signaling NaN raises "invalid"; it stays a NaN
        wide_actual, wide_expected = actual.astype(np.float64), expected.astype(np.float64)
    return (wide_actual == 0) & (wide_expected == 0) & (np.signbit(wide_actual) != np.signbit(wide_expected))


@functools.lru_cache(maxsize=None)
def reference_interpreter():
    from reference_interpreter import ReferenceInterpreter

    return ReferenceInterpreter()


# ------------------------------------------------- single-op modules as MLIR text, run on XLA CPU

# Every element type the spec allows that ml_dtypes can hold, by MLIR spelling.
BOOL_TYPES = ["i1"]
SIGNED_TYPES = ["i2", "i4", "i8", "i16", "i32", "i64"]
UNSIGNED_TYPES = ["ui2", "ui4", "ui8", "ui16", "ui32", "ui64"]
F8_TYPES = ["f8E4M3FN", "f8E5M2", "f8E4M3FNUZ", "f8E5M2FNUZ", "f8E4M3B11FNUZ", "f8E4M3", "f8E3M4",
            "f8E8M0FNU", "f4E2M1FN", "f6E2M3FN", "f6E3M2FN"]
IEEE_TYPES = ["bf16", "f16", "f32", "f64"]
FLOAT_TYPES = F8_TYPES + IEEE_TYPES
COMPLEX_TYPES = ["complex<f32>", "complex<f64>"]
ALL_TYPES = BOOL_TYPES + SIGNED_TYPES + UNSIGNED_TYPES + FLOAT_TYPES + COMPLEX_TYPES


def tensor_type(shape, element_type: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + element_type + ">"


def op_module(op: str, operand_types, result_types, attributes: str = "") -> str:
    """A module whose @main applies one op (generic syntax) to its arguments.

    ``operand_types`` / ``result_types`` are MLIR type strings; ``attributes`` is
    the text between the braces of the attribute dictionary (may be empty).
    """
    if isinstance(result_types, str):
        result_types = [result_types]
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operand_types))
    names = ", ".join(f"%a{i}" for i in range(len(operand_types)))
    results = ", ".join(result_types)
    attrs = f" {{{attributes}}}" if attributes else ""
    outs = ", ".join(f"%r#{i}" for i in range(len(result_types))) if len(result_types) > 1 else "%r"
    lhs = f"%r:{len(result_types)}" if len(result_types) > 1 else "%r"
    return (f"func.func @main({args}) -> ({results}) {{\n"
            f"  {lhs} = \"{op}\"({names}){attrs} : ({', '.join(operand_types)}) -> ({results})\n"
            f"  return {outs} : {results}\n}}\n")


class XlaUnsupported(Exception):
    """XLA CPU cannot compile or run this module (e.g. an element type it lacks)."""


class XlaLacksType(XlaUnsupported):
    """The module has an element type XLA CPU lacks (XLA_CRASHING_TYPES): a reason
    outside the interpreter, named in the message, to skip a comparison with XLA."""


# XLA CPU rejects most ops on these types and crashes the process on some (compare).
XLA_CRASHING_TYPES = ("f6E2M3FN", "f6E3M2FN")


@functools.lru_cache(maxsize=512)
def _xla_executable(text: str):
    if any(t in text for t in XLA_CRASHING_TYPES):
        raise XlaLacksType(f"XLA CPU does not support the f6 types {XLA_CRASHING_TYPES}")
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jaxlib.mlir import ir

    backend = xla_bridge.get_backend("cpu")
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        devices = xla_client.DeviceList(tuple(backend.local_devices()[:1]))
        try:
            return backend.compile_and_load(module, devices, options)
        except Exception as e:  # noqa: BLE001  (XlaRuntimeError: unimplemented ...)
            raise XlaUnsupported(str(e).splitlines()[0]) from None


def run_xla_text(text: str, *args) -> list:
    """Compile MLIR text with XLA's CPU backend and run it; results as NumPy arrays."""
    executable = _xla_executable(text)
    device = jax.devices("cpu")[0]
    try:
        buffers = [jax.device_put(np.asarray(a), device) for a in args]
    except Exception as e:  # noqa: BLE001  (dtype jax cannot hold)
        raise XlaUnsupported(str(e).splitlines()[0]) from None
    return [np.asarray(out) for out in executable.execute(buffers)]


@functools.lru_cache(maxsize=None)
def legalized(text: str) -> str:
    """``text`` with its chlo ops rewritten as their StableHLO decomposition, by jaxlib's
    own chlo-legalize-to-stablehlo pass (ir/chlo_legalization.py)."""
    from stablehlo_interp.ir.chlo_legalization import legalize_chlo

    legal = legalize_chlo(text)
    assert "chlo." not in legal
    return legal


def run_interp_text(text: str, *args) -> list:
    """MLIR text run by stablehlo_interp, with result type checks."""
    return si.run(text, *args, listeners=[si.validation.ResultTypeChecker()])


def element_values(element_type: str, size: int = 64, seed: int = 0) -> np.ndarray:
    """Test values of an element type: every value for types of at most 8 bits,
    else the edge values (NaN, +-inf, +-0, denormals, min/max ...) followed by
    ``size`` random ones (random bit patterns for floats, so every exponent shows up)."""
    from stablehlo_interp.ir.types import bit_width, dtype_of

    dtype = dtype_of(element_type)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return np.array([False, True])
    bits = bit_width(dtype)
    if dtype.kind == "c":
        part = "f32" if dtype == np.complex64 else "f64"
        re, im = element_values(part, size, seed), element_values(part, size, seed + 1)
        pairs = np.stack(np.meshgrid(re[:24], im[:24]), -1).reshape(-1, 2)
        pairs = np.concatenate([pairs, np.stack([re[24:], im[24:len(re)]], -1)])
        out = np.empty(len(pairs), dtype)
        out.real, out.imag = pairs[:, 0], pairs[:, 1]
        return out
    if dtype.kind in "iu" or dtype in map(np.dtype, SUB_BYTE_DTYPES):
        info = ml_dtypes.iinfo(dtype)
        if bits <= 8:
            return np.arange(int(info.min), int(info.max) + 1).astype(dtype)
        special = [0, 1, 2, 3, int(info.max), int(info.max) - 1, int(info.max) // 2, int(info.max) // 2 + 1]
        if info.min < 0:
            special += [int(info.min), int(info.min) + 1, -1, -2, -3]
        randoms = rng.integers(0, 2 ** bits, size, dtype=np.uint64, endpoint=False)
        randoms = randoms.astype(f"u{dtype.itemsize}").view(dtype)
        storage = np.int64 if info.min < 0 else np.uint64
        return np.concatenate([np.array(special, storage).astype(dtype), randoms])
    if bits <= 8:
        return _small_float_values(dtype, bits)
    finfo = ml_dtypes.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, 0.1, -0.1, 100.0,
               float(finfo.max), -float(finfo.max), float(finfo.smallest_normal),
               -float(finfo.smallest_normal), float(finfo.smallest_subnormal),
               -float(finfo.smallest_subnormal), float(finfo.eps), np.inf, -np.inf, np.nan]
    unsigned = np.dtype(f"u{dtype.itemsize}")
    patterns = rng.integers(0, 2 ** bits, size, dtype=np.uint64).astype(unsigned).view(dtype)
    scale = min(float(finfo.max), 1e4)
    normal = (rng.standard_normal(size) * rng.choice([0.01, 1.0, scale], size)).astype(dtype)
    return np.concatenate([np.array(special, np.float64).astype(dtype), patterns, normal])


def _small_float_values(dtype, bits: int) -> np.ndarray:
    """Every value of a float type of at most 8 bits (sub-byte types are stored one per byte)."""
    if bits == 8:
        return np.arange(256, dtype=np.uint8).view(dtype)
    # The bit patterns of sub-byte floats: build them from their fields through float64.
    finfo = ml_dtypes.finfo(dtype)
    mantissa = int(finfo.nmant)
    exponent = bits - 1 - mantissa
    bias = 2 ** (exponent - 1) - 1
    values = []
    for pattern in range(2 ** bits):
        sign = -1.0 if pattern >> (bits - 1) else 1.0
        e = (pattern >> mantissa) & (2 ** exponent - 1)
        m = pattern & (2 ** mantissa - 1)
        magnitude = (m / 2 ** mantissa) * 2.0 ** (1 - bias) if e == 0 else \
            (1 + m / 2 ** mantissa) * 2.0 ** (e - bias)
        values.append(sign * magnitude)
    return np.array(values).astype(dtype)


# ------------------------------------------------------------ differential checks


def same_as_xla(fn, *args, max_ulp: int = 0, zero_signs: bool = True) -> list:
    """fn on the interpreter and on XLA CPU: same results (within ``max_ulp`` for floats;
    ``zero_signs`` as for assert_same)."""
    actual, expected = run_interp(fn, *args), run_xla(fn, *args)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_same(a, e, max_ulp=max_ulp, context=f"result {i}: ", zero_signs=zero_signs,
                    flushes_subnormals=True, empty_ok=True)
    return actual


def same_as_xla_text(text: str, *args, max_ulp: int = 0) -> list:
    """An MLIR module on the interpreter and on XLA CPU (skipped only for an element
    type XLA CPU lacks; any other failure of XLA's fails the test)."""
    try:
        expected = run_xla_text(text, *args)
    except XlaLacksType as e:
        pytest.skip(str(e))
    actual = run_interp_text(text, *args)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e, max_ulp=max_ulp, context=text + "\n", flushes_subnormals=True, empty_ok=True)
    return actual


def same_as_reference(reference, text: str, *args, max_ulp: int = 0) -> list:
    """An MLIR module on the interpreter and on the C++ reference interpreter."""
    actual = run_interp_text(text, *args)
    expected = reference.evaluate(text, list(args))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e, max_ulp=max_ulp, context=text + "\n", empty_ok=True)
    return actual


def training_step_matches_xla(step, params, *batch, rtol: float, atol: float) -> None:
    """A training step ``step(params, *batch)`` (pytrees) on the interpreter and on
    XLA CPU: every updated leaf within the tolerances."""
    leaves, tree = jax.tree_util.tree_flatten((params, *batch))
    flat_step = lambda *leaves: step(*jax.tree_util.tree_unflatten(tree, leaves))  # noqa: E731 - a lambda reads as the expression it names
    expected, actual = run_xla(flat_step, *leaves), run_interp(flat_step, *leaves)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
