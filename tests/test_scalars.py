"""The runners on 0-d values (ops/scalars.py) against the ops' own runners, bit for bit.

Each op of 0-d operands gets a second runner that the unobserved run loop calls
(engine/plan.py: BuiltOp.scalar). The oracle is the op's own runner on 1-element
arrays (the array path every other test checks against XLA and the spec): on
NumPy scalars, 0-d arrays and whole arrays (a vectorized region's values) the
scalar runner must give the same bits, the same dtype, and no warning. Loops of
0-d ops also run against XLA CPU through jax.
"""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest

import stablehlo_interp as si
from oracles import assert_same, run_xla_text
from stablehlo_interp.engine.registry import replaced
from stablehlo_interp.engine.run import numpy_warnings_off

FLOATS = ["f16", "f32", "f64"]
SIGNED = ["i8", "i16", "i32", "i64"]
UNSIGNED = ["ui8", "ui16", "ui32", "ui64"]
INTEGERS = SIGNED + UNSIGNED
COMPLEX = ["complex<f32>", "complex<f64>"]
DTYPES = {"i1": np.bool_, "f16": np.float16, "f32": np.float32, "f64": np.float64,
          "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
          "complex<f32>": np.complex64, "complex<f64>": np.complex128}


def special_values(element: str) -> np.ndarray:
    """The values each scalar runner must get right: signed zeros, infinities, NaNs of
    both signs and with a payload, the extremes, subnormals; random values besides."""
    dtype = np.dtype(DTYPES[element])
    rng = np.random.default_rng(len(element))
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        fixed = [0, 1, 2, 3, -1, -2, info.min, info.max, info.min + 1, info.max - 1, 7, 31, 32, 63, 64]
        fixed = np.array([v for v in fixed if info.min <= v <= info.max], dtype=dtype)
        return np.concatenate([fixed, rng.integers(info.min, info.max, 12, dtype=dtype, endpoint=True)])
    if dtype.kind == "c":
        parts = special_values("f32" if dtype.itemsize == 8 else "f64")[:12]
        return np.array([complex(a, b) for a, b in itertools.product(parts, parts[::3])], dtype)
    info = np.finfo(dtype)
    bits = np.dtype(f"u{dtype.itemsize}")
    payload_nan = (np.array(np.nan, dtype).view(bits) | bits.type(5)).view(dtype)
    fixed = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 0.1, np.inf, -np.inf, np.nan, -np.nan, info.max, -info.max,
                      info.smallest_normal, info.smallest_subnormal, -info.smallest_subnormal, 3.0], dtype)
    return np.concatenate([fixed, [payload_nan, -payload_nan],
                           rng.standard_normal(8).astype(dtype) * dtype.type(1e3)]).astype(dtype)


def built_op(text: str):
    """The first op of ``@main`` in ``text`` as the compiler built it (BuiltOp: ``run``, ``scalar``)."""
    program = si.load(text)
    return program.module_info.functions["main"].region.columns.ops[0]


def op_text(op: str, operand_types: list[str], result: str, attributes: str = "") -> str:
    args = ", ".join(f"%a{i}: tensor<{t}>" for i, t in enumerate(operand_types))
    operands = ", ".join(f"%a{i}" for i in range(len(operand_types)))
    types = ", ".join(f"tensor<{t}>" for t in operand_types)
    return (f"func.func @main({args}) -> tensor<{result}> {{\n"
            f"  %0 = \"{op}\"({operands}) {attributes} : ({types}) -> tensor<{result}>\n"
            f"  return %0 : tensor<{result}>\n}}")


def same_bits(actual, expected) -> bool:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    if actual.dtype.kind == "b":
        return bool(np.array_equal(actual, expected))
    return bool(np.array_equal(np.ascontiguousarray(actual).view(np.uint8),
                               np.ascontiguousarray(expected).view(np.uint8)))


def check_scalar_runner(op, operand_lists: list[np.ndarray]) -> None:
    """``op.scalar`` on every combination of the operands' values, as NumPy scalars
    and as 0-d arrays, and on all of them at once as arrays, against ``op.run`` on
    1-element arrays: the same dtype and bits, a 0-d value (a NumPy scalar, or a 0-d
    array where the op's runner decides); no warning may leave either."""
    assert op.scalar is not None, f"{op.info.name} has no runner for 0-d values"
    combinations = list(itertools.product(*operand_lists))
    with warnings.catch_warnings(), numpy_warnings_off():
        warnings.simplefilter("error")
        for values in combinations:
            expected = np.asarray(op.run(*[np.array([v]) for v in values]))[0]
            scalar = op.scalar(*values)
            assert np.ndim(scalar) == 0 and same_bits(scalar, expected), \
                (op.info.name, values, scalar, expected)
            zero_d = op.scalar(*[np.array(v) for v in values])
            assert same_bits(np.asarray(zero_d), np.asarray(expected)), (op.info.name, values, zero_d, expected)
        columns = [np.array(c) for c in zip(*combinations)]
        assert same_bits(op.scalar(*columns), op.run(*columns))


# The element kinds each op takes (spec), and those that get a runner on 0-d values.
SPEC_KINDS = {"add": "biufc", "subtract": "iufc", "multiply": "biufc", "negate": "iufc", "divide": "iufc",
              "maximum": "biufc", "minimum": "biufc", "and": "biu", "or": "biu", "xor": "biu", "not": "biu"}
SCALAR_KINDS = {"add": "biuf", "subtract": "iufc", "multiply": "biuf", "negate": "iufc", "divide": "f",
                "maximum": "iuf", "minimum": "iuf", "and": "biu", "or": "biu", "xor": "biu", "not": "biu"}


@pytest.mark.parametrize("element", ["i1", *FLOATS, *INTEGERS, *COMPLEX])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "negate", "divide", "maximum", "minimum",
                                  "and", "or", "xor", "not"])
def test_arithmetic_on_0d_values(name, element):
    kind = np.dtype(DTYPES[element]).kind
    if kind not in SPEC_KINDS[name]:
        pytest.skip(f"the spec allows no {element} {name}")
    unary = name in ("negate", "not")
    op = built_op(op_text(f"stablehlo.{name}", [element] * (1 if unary else 2), element))
    if kind not in SCALAR_KINDS[name]:
        assert op.scalar is None   # (complex multiply and divide, integer division ... keep the ufunc)
        return
    values = special_values(element)
    check_scalar_runner(op, [values] if unary else [values, values])


@pytest.mark.parametrize("element", FLOATS)
def test_next_after_on_0d_values(element):
    """chlo.next_after steps the bit pattern of a NumPy scalar as its runner steps arrays:
    toward and away from zero, across zero, from the largest value to inf, NaNs."""
    op = built_op(op_text("chlo.next_after", [element, element], element))
    values = special_values(element)
    check_scalar_runner(op, [values, values])


@pytest.mark.parametrize("element", ["i1", *FLOATS, *INTEGERS, *COMPLEX])
@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_compare_on_0d_values(direction, element):
    kind = np.dtype(DTYPES[element]).kind
    compare_type = {"f": "FLOAT", "c": "FLOAT", "i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}[kind]
    attributes = (f"{{comparison_direction = #stablehlo<comparison_direction {direction}>, "
                  f"compare_type = #stablehlo<comparison_type {compare_type}>}}")
    op = built_op(op_text("stablehlo.compare", [element, element], "i1", attributes))
    if kind == "c" and direction not in ("EQ", "NE"):
        assert op.scalar is None
        return
    values = special_values(element)
    check_scalar_runner(op, [values, values])


def test_total_order_compare_keeps_its_runner():
    attributes = ("{comparison_direction = #stablehlo<comparison_direction LT>, "
                  "compare_type = #stablehlo<comparison_type TOTALORDER>}")
    assert built_op(op_text("stablehlo.compare", ["f32", "f32"], "i1", attributes)).scalar is None


@pytest.mark.parametrize("element", ["i1", "f16", "f32", "i64", "ui32", "complex<f32>", "bf16", "f8E4M3FN"])
def test_select_on_0d_values(element):
    op = built_op(op_text("stablehlo.select", ["i1", element, element], element))
    if element in ("bf16", "f8E4M3FN"):
        import ml_dtypes

        values = np.array([0.0, -0.0, np.nan, 1.5], getattr(ml_dtypes, {"bf16": "bfloat16"}.get(element, "float8_e4m3fn")))
    else:
        values = special_values(element)[:8]
    check_scalar_runner(op, [np.array([False, True]), values, values[::-1]])


CONVERSIONS = [(s, t) for s in ["i1", *FLOATS, *INTEGERS] for t in ["i1", *FLOATS, *INTEGERS]] + [
    ("complex<f32>", "complex<f32>"), ("bf16", "bf16")]


@pytest.mark.parametrize("source, target", CONVERSIONS)
def test_convert_on_0d_values(source, target):
    """Conversions a scalar type's constructor does as ``astype`` does, without an
    overflow, get a runner on 0-d values; the others (float to integer, narrowing
    floats: NaN, saturation, overflow) keep the op's runner. Either way the values
    are the op's."""
    op = built_op(op_text("stablehlo.convert", [source], target))
    if op.scalar is None:
        s, t = np.dtype(DTYPES[source]), np.dtype(DTYPES[target])
        assert t.kind != "b" and (s.kind == "f" and (t.kind != "f" or t.itemsize <= s.itemsize)
                                  or s.kind in "iu" and t == np.float16)
        return
    if source == "bf16":
        import ml_dtypes

        values = np.array([0.0, -0.0, np.nan, -np.inf, 1.5], ml_dtypes.bfloat16)
    else:
        values = special_values(source)
    check_scalar_runner(op, [values])


def test_user_registered_builder_gets_no_scalar_runner():
    """A builder a user registers replaces the op on 0-d values too."""
    text = op_text("stablehlo.add", ["f32", "f32"], "f32")
    with replaced(ops={"stablehlo.add": lambda info: np.subtract}):
        op = built_op(text)
        assert op.scalar is None
        assert si.load(text).run(np.float32(3), np.float32(1))[0] == 2


def oscillator(element: str, iterations: int) -> str:
    """A damped oscillator as a while loop of 0-d ops (core_bench's row c, in ``element``)."""
    t = f"tensor<{element}>"
    return f"""func.func @main(%x: {t}, %v: {t}, %k: {t}, %damping: {t}) -> ({t}, {t}, tensor<i32>) {{
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %limit = stablehlo.constant dense<{iterations}> : tensor<i32>
  %r:3 = stablehlo.while(%i = %zero, %px = %x, %pv = %v) : tensor<i32>, {t}, {t}
    cond {{
      %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }} do {{
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %force = stablehlo.multiply %k, %px : {t}
      %drag = stablehlo.multiply %damping, %pv : {t}
      %a = stablehlo.add %force, %drag : {t}
      %v1 = stablehlo.subtract %pv, %a : {t}
      %big = stablehlo.compare GT, %v1, %px : ({t}, {t}) -> tensor<i1>
      %m = stablehlo.maximum %v1, %px : {t}
      %x1 = stablehlo.add %px, %v1 : {t}
      %x2 = stablehlo.select %big, %x1, %m : tensor<i1>, {t}
      stablehlo.return %i1, %x2, %v1 : tensor<i32>, {t}, {t}
    }}
  return %r#1, %r#2, %r#0 : {t}, {t}, tensor<i32>
}}"""


class _Recorder(si.Listener):
    """Records the result of every op an observed run runs."""

    def __init__(self):
        self.results = []

    def after_op(self, step, operands, results, stack):
        self.results.append((step.info.name, list(results)))


@pytest.mark.parametrize("element, dtype", [("f32", np.float32), ("f64", np.float64), ("f16", np.float16)])
def test_loop_of_0d_ops_matches_observed_run_and_xla(element, dtype):
    """The unobserved loop (runners on 0-d values) gives what an observed run (the
    ops' own runners) gives, bit for bit, and what XLA CPU gives; the observed run's
    listener sees the ops' own runners' values (ndarrays and NumPy scalars as before)."""
    text = oscillator(element, 200)
    args = [dtype(1.0), dtype(0.0), dtype(0.3), dtype(0.05)]
    program = si.load(text)
    fast = program.run(*args)
    recorder = _Recorder()
    observed = program.run(*args, listeners=[recorder])
    for a, b in zip(fast, observed):
        assert type(a) is np.ndarray and same_bits(a, b)
    expected = run_xla_text(text, *args)
    for a, e in zip(fast, expected):
        assert_same(a, e, flushes_subnormals=True)
    selects = [r[0] for name, r in recorder.results if name == "stablehlo.select"]
    assert len(selects) == 200 and all(type(r) is np.ndarray and r.dtype == dtype for r in selects)


def test_integer_loop_wraps_as_xla():
    """A xorshift generator and a multiply-add hash in u32 and i32: every step wraps."""
    text = """func.func @main(%s: tensor<ui32>, %h: tensor<i32>) -> (tensor<ui32>, tensor<i32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %limit = stablehlo.constant dense<300> : tensor<i32>
  %k13 = stablehlo.constant dense<13> : tensor<ui32>
  %k17 = stablehlo.constant dense<17> : tensor<ui32>
  %mul = stablehlo.constant dense<1000003> : tensor<i32>
  %r:3 = stablehlo.while(%i = %zero, %x = %s, %y = %h) : tensor<i32>, tensor<ui32>, tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %a = stablehlo.shift_left %x, %k13 : tensor<ui32>
      %x1 = stablehlo.xor %x, %a : tensor<ui32>
      %b = stablehlo.shift_right_logical %x1, %k17 : tensor<ui32>
      %x2 = stablehlo.xor %x1, %b : tensor<ui32>
      %n = stablehlo.not %x2 : tensor<ui32>
      %x3 = stablehlo.or %n, %x2 : tensor<ui32>
      %x4 = stablehlo.subtract %x3, %x1 : tensor<ui32>
      %c = stablehlo.convert %x4 : (tensor<ui32>) -> tensor<i32>
      %m = stablehlo.multiply %y, %mul : tensor<i32>
      %y1 = stablehlo.add %m, %c : tensor<i32>
      %y2 = stablehlo.negate %y1 : tensor<i32>
      %y3 = stablehlo.minimum %y2, %y1 : tensor<i32>
      stablehlo.return %i1, %x4, %y3 : tensor<i32>, tensor<ui32>, tensor<i32>
    }
  return %r#1, %r#2 : tensor<ui32>, tensor<i32>
}"""
    args = [np.uint32(2463534242), np.int32(-7)]
    fast = si.load(text).run(*args)
    observed = si.load(text).run(*args, listeners=[_Recorder()])
    for a, b, e in zip(fast, observed, run_xla_text(text, *args)):
        assert same_bits(a, b)
        assert_same(a, e)


def test_folded_0d_constant_comes_back_as_a_fresh_array():
    """0-d constants wait in their slots as NumPy scalars; the caller still gets arrays."""
    text = """func.func @main() -> (tensor<f32>, tensor<2xf32>) {
  %c = stablehlo.constant dense<-0.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2xf32>
  return %c, %b : tensor<f32>, tensor<2xf32>
}"""
    scalar, pair = si.load(text).run()
    assert type(scalar) is np.ndarray and scalar.shape == () and scalar.flags.writeable
    assert same_bits(scalar, np.array(-0.0, np.float32)) and same_bits(pair, np.array([-0.0, -0.0], np.float32))


@pytest.mark.parametrize("shape", [(), (1,), (1, 1, 1)])
def test_reshape_to_0d_gives_the_element(shape):
    """reshape to a 0-d result gives its one element as a NumPy scalar, bits kept (a NaN's payload)."""
    dims = "x".join(map(str, shape))
    operand = f"tensor<{dims}xf32>" if shape else "tensor<f32>"
    op = built_op(op_text("stablehlo.reshape", [operand[7:-1]], "f32"))
    nan = np.array(np.nan, np.float32).view(np.uint32) | np.uint32(0x80000003)
    values = np.array([-0.0, nan.view(np.float32), 1.5], np.float32)
    for value in values:
        result = op.scalar(value.reshape(shape))
        assert type(result) is np.float32 and same_bits(result, op.run(value.reshape(shape)))


@pytest.mark.parametrize("operand, result, dims", [
    ("f32", "3xf32", "[]"), ("ui32", "2x2xui32", "[]"), ("2xf64", "3x2xf64", "[1]"), ("2xi8", "2x3xi8", "[0]"),
    ("2x3xf32", "3x4x2xf32", "[2, 0]"), ("1xf32", "5xf32", "[0]"), ("3xf16", "1x3xf16", "[1]"),
    ("2x3xi32", "3x1x2xi32", "[2, 0]"), ("f32", "80x80xf32", "[]")])
def test_broadcast_in_dim_fills_small_results(operand, result, dims):
    """broadcast_in_dim makes a small stretched result whole, reshapes where nothing
    stretches, and keeps np.broadcast_to's view for a large result: the same values."""
    text = (f"func.func @main(%x: tensor<{operand}>) -> tensor<{result}> {{\n"
            f"  %0 = stablehlo.broadcast_in_dim %x, dims = {dims} : (tensor<{operand}>) -> tensor<{result}>\n"
            f"  return %0 : tensor<{result}>\n}}")
    program = si.load(text)
    dtype = program.module_info.functions["main"].region.arg_types[0].dtype
    shape = program.module_info.functions["main"].region.arg_types[0].shape
    x = (np.arange(int(np.prod(shape)), dtype=np.float64) - 2.5).astype(dtype).reshape(shape)
    (actual,) = program.run(x)
    dimensions = json.loads(dims)
    order = sorted(range(len(shape)), key=lambda i: dimensions[i])
    expected_shape = program.module_info.functions["main"].region.output_types[0].shape
    expanded = [1] * len(expected_shape)
    for i, size in zip(sorted(dimensions), np.transpose(x, order).shape):
        expanded[i] = size
    expected = np.broadcast_to(np.transpose(x, order).reshape(expanded), expected_shape)
    assert same_bits(actual, expected)
    assert actual.flags.writeable and not np.shares_memory(actual, x)


@pytest.mark.parametrize("element", INTEGERS)
@pytest.mark.parametrize("name", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
def test_shifts_on_0d_values(name, element):
    """Amounts of 0 to past the width, negative ones (as unsigned: past the width) included."""
    op = built_op(op_text(f"stablehlo.{name}", [element, element], element))
    logical_of_signed = name == "shift_right_logical" and element in SIGNED
    arithmetic_of_unsigned = name == "shift_right_arithmetic" and element in UNSIGNED
    if logical_of_signed or arithmetic_of_unsigned:
        assert op.scalar is None   # (computed on a view of the other signedness)
        return
    dtype = np.dtype(DTYPES[element])
    amounts = np.array([0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 200] + ([-1, -64] if dtype.kind == "i" else []))
    amounts = amounts[amounts <= np.iinfo(dtype).max].astype(dtype)
    check_scalar_runner(op, [special_values(element), amounts])


def test_no_warning_leaves_a_run_of_0d_ops():
    """Integer overflow, float overflow, division by zero, NaN from inf - inf: values the
    spec defines, which NumPy scalars' operators would warn of outside a run's error setting."""
    text = """func.func @main(%i: tensor<i32>, %u: tensor<ui8>, %x: tensor<f16>, %z: tensor<f32>)
    -> (tensor<i32>, tensor<ui8>, tensor<f16>, tensor<f32>, tensor<f32>) {
  %big = stablehlo.constant dense<2147483647> : tensor<i32>
  %a = stablehlo.add %i, %big : tensor<i32>
  %b = stablehlo.multiply %a, %a : tensor<i32>
  %m = stablehlo.constant dense<255> : tensor<ui8>
  %n = stablehlo.negate %u : tensor<ui8>
  %s = stablehlo.subtract %n, %m : tensor<ui8>
  %h = stablehlo.constant dense<6.0e4> : tensor<f16>
  %y = stablehlo.multiply %x, %h : tensor<f16>
  %q = stablehlo.divide %z, %z : tensor<f32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %r = stablehlo.divide %one, %z : tensor<f32>
  %d = stablehlo.subtract %r, %r : tensor<f32>
  return %b, %s, %y, %q, %d : tensor<i32>, tensor<ui8>, tensor<f16>, tensor<f32>, tensor<f32>
}"""
    program = si.load(text)
    args = [np.int32(5), np.uint8(3), np.float16(2.0), np.float32(0.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = program.run(*args)
    expected = program.run(*args, listeners=[_Recorder()])
    assert all(same_bits(a, e) for a, e in zip(results, expected))
    def wrapped(value):   # two's complement at 32 bits, by hand
        return (value + 2**31) % 2**32 - 2**31

    total = wrapped(5 + 2147483647)
    assert results[0] == wrapped(total * total) and results[1] == (-3 - 255) % 256
    assert np.isinf(results[2]) and np.isnan(results[3]) and np.isnan(results[4])


@pytest.mark.parametrize("element", FLOATS)
@pytest.mark.parametrize("name", ["exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "sine",
                                  "cosine", "tan", "tanh", "rsqrt", "cbrt"])
def test_math_of_a_numpy_scalar_in_wider_precision(name, element):
    """A transcendental function of a NumPy scalar widens it by its constructor
    (engine/dtypes.py); the same bits as the array path's cast, on random bit patterns
    (NaNs with payloads among them) and the special values."""
    op = built_op(op_text(f"stablehlo.{name}", [element], element))
    dtype = np.dtype(DTYPES[element])
    bits = np.dtype(f"u{dtype.itemsize}")
    patterns = np.random.default_rng(3).integers(0, np.iinfo(bits).max, 300, dtype=bits, endpoint=True)
    values = np.concatenate([patterns.view(dtype), special_values(element)])
    with warnings.catch_warnings(), numpy_warnings_off():
        warnings.simplefilter("error")
        expected = op.run(values)
        for value, want in zip(values, expected):
            got = op.run(value)
            assert np.ndim(got) == 0 and same_bits(got, want), (name, value, got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("depth", [1, 2, 3, 17])
def test_dot_of_two_vectors_folds_as_a_batch_does(dtype, depth):
    """ordered_matmul's path for one row by one column gives the bits of its general
    path (a batch of two, the same vectors first): the left fold from +0.0, signed
    zeros, infinities and NaNs among the products."""
    from stablehlo_interp.ops.linalg import ordered_matmul

    rng = np.random.default_rng(depth)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3, -2.5, 3.0], np.float64)
    for trial in range(20):
        lhs = rng.choice(specials, depth).astype(dtype).reshape(1, 1, depth)
        rhs = rng.choice(specials, depth).astype(dtype).reshape(1, depth, 1)
        if trial % 2:
            lhs, rhs = -lhs, rhs[:, ::-1]
        fold = ordered_matmul(np.dtype(dtype))
        with numpy_warnings_off():
            alone = fold(lhs, rhs)
            batch = fold(np.concatenate([lhs, lhs[:, :, ::-1]]), np.concatenate([rhs, rhs]))
        assert alone.shape == (1, 1, 1) and same_bits(alone[0], batch[0])


@pytest.mark.parametrize("lhs, rhs, dims, result", [
    ("16xf32", "16xf32", "contracting_dims = [0] x [0]", "f32"),
    ("3xf64", "3xf64", "contracting_dims = [0] x [0]", "f64"),
    ("5xf16", "5xf16", "contracting_dims = [0] x [0]", "f16"),
    ("4xbf16", "4xbf16", "contracting_dims = [0] x [0]", "bf16"),
    ("2x3xf32", "3x2xf32", "contracting_dims = [0, 1] x [1, 0]", "f32"),
    ("f32", "f32", "contracting_dims = [] x []", "f32"),
])
def test_dot_to_0d_gives_its_sum_as_a_numpy_scalar(lhs, rhs, dims, result):
    """A small float dot_general of a 0-d result runs, unobserved, a runner giving the
    sum as a NumPy scalar (what the runners on 0-d values after it compute on): the
    bits and dtype of the op's own runner, on vectors with signed zeros, infinities
    and NaNs of two payloads; a dot of another result type or size keeps its runner."""
    text = (f"func.func @main(%a: tensor<{lhs}>, %b: tensor<{rhs}>) -> tensor<{result}> {{\n"
            f"  %0 = stablehlo.dot_general %a, %b, {dims} : (tensor<{lhs}>, tensor<{rhs}>) -> tensor<{result}>\n"
            f"  return %0 : tensor<{result}>\n}}")
    op = built_op(text)
    assert op.scalar is not None
    lhs_type, rhs_type = op.info.operand_types
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3, -2.5, 3.0, 7e3], np.float64)
    with warnings.catch_warnings(), numpy_warnings_off():
        warnings.simplefilter("error")
        for trial in range(40):
            a = rng.choice(specials, lhs_type.shape).astype(lhs_type.dtype)
            b = rng.choice(specials, rhs_type.shape).astype(rhs_type.dtype)
            if trial % 3 == 0 and a.size > 1 and a.dtype.itemsize >= 4:   # NaN times NaN: which payload
                bits = np.dtype(f"u{a.dtype.itemsize}")
                a.reshape(-1)[0] = (np.array(np.nan, a.dtype).view(bits) | bits.type(3)).view(a.dtype)
                sign = bits.type(1 << (8 * bits.itemsize - 1))
                b.reshape(-1)[0] = (np.array(np.nan, b.dtype).view(bits) | bits.type(6) | sign).view(b.dtype)
            got, want = op.scalar(a, b), op.run(a, b)
            assert type(got) is op.info.result_type.dtype.type and same_bits(got, want), (a, b, got, want)


def test_dot_of_a_larger_result_keeps_its_runner():
    text = ("func.func @main(%a: tensor<3x2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {\n"
            "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [0] x [0] : "
            "(tensor<3x2xf32>, tensor<3xf32>) -> tensor<2xf32>\n  return %0 : tensor<2xf32>\n}")
    assert built_op(text).scalar is None
    integers = text.replace("f32", "i32")
    assert built_op(integers.replace("tensor<2xi32>", "tensor<i32>").replace("3x2xi32", "3xi32")).scalar is None


@pytest.mark.parametrize("operand, element, body", [
    ((16,), "f32", "add"), ((5,), "f16", "multiply"), ((3,), "complex<f32>", "add"), ((), "f32", "add"),
    ((1, 1), "f64", "maximum"), ((), "i8", "add"), ((1,), "ui32", "multiply"), ((), "i1", "and"), ((1,), "i1", "or"),
    ((16,), "i1", "and"), ((2, 8), "i8", "add"), ((16,), "ui32", "multiply"), ((3, 2), "i64", "maximum"),
    ((16,), "f32", "maximum"), ((5,), "f16", "minimum"), ((3,), "f64", "maximum"),
])
def test_reduce_to_0d_gives_its_result_as_a_numpy_scalar(operand, element, body):
    """A reduce of a vector or of one element to a 0-d result runs, unobserved, a runner
    of its convention giving the result as a NumPy scalar (Step.scalar): the bits and
    dtype of the op's own runner under both semantics (under "xla" it may answer a 0-d
    array, the general way's), on special values."""
    from stablehlo_interp.engine.run import Execution, RunContext

    dims = list(range(len(operand)))
    vt, st = f"tensor<{''.join(f'{n}x' for n in operand)}{element}>", f"tensor<{element}>"
    text = (f"func.func @main(%x: {vt}, %init: {st}) -> {st} {{\n"
            f"  %0 = stablehlo.reduce(%x init: %init) applies stablehlo.{body} across dimensions = {dims} : "
            f"({vt}, {st}) -> {st}\n  return %0 : {st}\n}}")
    (step,) = si.load(text).function("main").region.steps
    assert step.scalar is not None
    values = special_values(element)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings(), numpy_warnings_off():
        warnings.simplefilter("error")
        for semantics in ("spec", "xla"):
            execution = Execution(RunContext(semantics=semantics))
            nans = [v for v in values if v != v]   # every pair of NaNs (signs, payloads): which one comes out
            pairs = [(np.full(operand, a), b) for a in nans for b in nans]
            for x, init in pairs + [(rng.choice(values, operand), rng.choice(values)) for _ in range(30)]:
                x, init = np.asarray(x, values.dtype), np.asarray(init, values.dtype)
                (want,) = step.run(execution, (None,), x, init)
                # 0-d arrays, and NumPy scalars (what the runners on 0-d values give)
                for operands in ((x, init), (x[()], init[()])) if not operand else ((x, init), (x, init[()])):
                    (got,) = step.scalar(execution, (None,), *operands)
                    assert same_bits(got, want), (operands, got, want)
                    if semantics == "spec":
                        assert type(got) is values.dtype.type, type(got)
