"""sort against XLA's CPU backend (jnp.sort, argsort, lax.sort, and comparators
in MLIR text) and the C++ reference interpreter.

Each comparator strategy of ops/sorting.py is reached by a comparator of its
own: JAX's comparators (key sort), the same order written with ``not`` (no
keys recognized: vectorized merge sort) and with a reshape in it (not
element-wise: Python's sort). Sorting is stable in all three, which the spec
allows for ``is_stable = false`` too.

XLA CPU compares subnormal floats as zeros (denormals-are-zero); the spec
(IEEE-754) does not, so the arrays compared with XLA hold no subnormals.
"""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

from oracles import (assert_same, dtype_id, element_values, run_interp_text, same_as_reference,
                     same_as_xla, same_as_xla_text)
from stablehlo_interp.ir.types import element_type_of

DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.uint64, ml_dtypes.int4, ml_dtypes.bfloat16, np.float16,
          np.float32, np.float64, np.complex64, ml_dtypes.float8_e4m3fn]


def with_ties(shape, dtype, seed=0):
    """Edge values (NaN, +-inf, +-0.0, min, max ...) with many repeats, but no
    subnormals: XLA CPU compares those as zeros (denormals-are-zero), the spec
    (IEEE-754) does not."""
    pool = element_values(element_type_of(dtype), 16, seed)
    if np.dtype(dtype).kind in "fc" or dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        parts = [pool.real, pool.imag] if np.dtype(dtype).kind == "c" else [pool]
        normal = ml_dtypes.finfo(parts[0].dtype).smallest_normal
        subnormal = np.zeros(len(pool), bool)
        for part in parts:
            magnitude = np.abs(part.astype(np.float64))
            subnormal |= (magnitude > 0) & (magnitude < float(normal))
        pool = pool[~subnormal]
    rng = np.random.default_rng(seed)
    return pool[rng.integers(0, len(pool), shape)].astype(dtype)


# --------------------------------------------------------- the comparators JAX emits


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_jnp_sort_and_argsort(dtype):
    x = with_ties((5, 33), dtype, seed=1)

    def fn(x):
        return (jnp.sort(x, axis=1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1),
                jnp.argsort(x, axis=0, descending=True), jnp.sort(x, axis=None, descending=True))

    same_as_xla(fn, x)


def test_lax_sort_multiple_operands_and_keys():
    rng = np.random.default_rng(2)
    a = with_ties((4, 40), np.float32, seed=3)
    b = rng.integers(-2, 3, (4, 40)).astype(np.int32)
    c = rng.integers(0, 2, (4, 40)).astype(np.uint8)
    same_as_xla(lambda a, b, c: lax.sort((b, a, c), dimension=1, num_keys=1) +
                lax.sort((b, a, c), dimension=1, num_keys=2) +
                lax.sort((c, b, a), dimension=0, num_keys=3), a, b, c)


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0), (0, 4), (1, 1), (4, 1)], ids=str)
def test_degenerate_shapes(shape):
    x = with_ties(shape, np.float32)
    same_as_xla(lambda x: (jnp.sort(x, axis=0), jnp.argsort(x, axis=-1)), x)


def test_unstable_sort_of_distinct_keys():
    x = np.random.default_rng(4).permutation(50).astype(np.float32)
    y = np.arange(50, dtype=np.int32)
    same_as_xla(lambda x, y: lax.sort((x, y), is_stable=False, num_keys=1), x, y)


def test_programs_built_on_sort():
    x = np.random.default_rng(5).standard_normal((3, 31)).astype(np.float32)
    x[0, 4] = np.nan
    same_as_xla(lambda x: (jnp.median(x, axis=1), jnp.unique(x[1], size=31), jnp.quantile(x[2], 0.3),
                           jnp.searchsorted(jnp.sort(x[1]), x[2])), x)


@given(st.integers(1, 3), st.integers(0, 2 ** 31), st.sampled_from([np.int8, np.float32, np.uint32]))
def test_random_arrays_with_duplicates(rank, seed, dtype):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(0, 6, rank))
    x = rng.integers(-3, 4, shape).astype(dtype)
    axis = int(rng.integers(0, rank))
    same_as_xla(lambda x: (jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis, descending=True)), x)


# ------------------------------------------------- comparators written in MLIR text

SORT = """
func.func @main(%k: tensor<{shape}x{t}>, %p: tensor<{shape}xi32>) -> (tensor<{shape}x{t}>, tensor<{shape}xi32>) {{
  %0:2 = "stablehlo.sort"(%k, %p) ({{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>, %i: tensor<i32>, %j: tensor<i32>):
    {body}
  }}) {{dimension = {dimension} : i64, is_stable = true}}
    : (tensor<{shape}x{t}>, tensor<{shape}xi32>) -> (tensor<{shape}x{t}>, tensor<{shape}xi32>)
  return %0#0, %0#1 : tensor<{shape}x{t}>, tensor<{shape}xi32>
}}"""

COMPARATORS = {
    # Keys: descending by |a|, then ascending by the payload. Key sort.
    "abs_then_payload": """%x = stablehlo.abs %a : tensor<{t}>
    %y = stablehlo.abs %b : tensor<{t}>
    %gt = stablehlo.compare GT, %x, %y : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    %eq = stablehlo.compare EQ, %x, %y : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    %lt = stablehlo.compare LT, %i, %j : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %tie = stablehlo.and %eq, %lt : tensor<i1>
    %r = stablehlo.or %gt, %tie : tensor<i1>
    stablehlo.return %r : tensor<i1>""",
    # rhs < lhs: descending. Key sort.
    "swapped_lt": """%r = stablehlo.compare LT, %b, %a : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>""",
    # a < b written as not(a >= b): no keys recognized, the vectorized merge sort.
    "not_ge": """%ge = stablehlo.compare GE, %a, %b : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    %r = stablehlo.not %ge : tensor<i1>
    stablehlo.return %r : tensor<i1>""",
    # The same with a reshape round trip: not element-wise, Python's sort.
    "reshaped_lt": """%lt = stablehlo.compare LT, %a, %b : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    %v = stablehlo.reshape %lt : (tensor<i1>) -> tensor<1xi1>
    %r = stablehlo.reshape %v : (tensor<1xi1>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>""",
    # a < b + 0: an argument against a computed value, not a mirrored pair; the merge sort.
    "argument_against_computed": """%zero = stablehlo.constant dense<0> : tensor<{t}>
    %y = stablehlo.add %b, %zero : tensor<{t}>
    %r = stablehlo.compare LT, %a, %y : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>""",
    # Payload only, descending, through a computed key (2 * j): key sort on the second operand.
    "payload_desc": """%two = stablehlo.constant dense<2> : tensor<i32>
    %x = stablehlo.multiply %i, %two : tensor<i32>
    %y = stablehlo.multiply %j, %two : tensor<i32>
    %r = stablehlo.compare GT, %x, %y : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>""",
}


def sort_text(comparator, element_type, shape, dimension):
    return SORT.format(shape="x".join(map(str, shape)), t=element_type, dimension=dimension,
                       body=COMPARATORS[comparator].format(t=element_type))


@pytest.mark.parametrize("comparator", list(COMPARATORS))
@pytest.mark.parametrize("dimension", [0, 1, -1])
def test_comparators_in_text(reference, comparator, dimension):
    shape = (6, 17)
    keys = np.random.default_rng(6).integers(-4, 5, shape).astype(np.int32)
    payload = np.random.default_rng(7).permutation(np.arange(102, dtype=np.int32)).reshape(shape)
    text = sort_text(comparator, "i32", shape, dimension)
    same_as_xla_text(text, keys, payload)
    same_as_reference(reference, text, keys, payload)


@pytest.mark.parametrize("comparator", ["swapped_lt", "not_ge", "reshaped_lt"])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.uint8], ids=dtype_id)
def test_comparator_strategies_agree_with_xla(dtype, comparator):
    """FLOAT comparisons without NaN (-0.0 and +0.0 tie), on every strategy."""
    shape = (3, 40)
    keys = with_ties(shape, dtype, seed=8)
    if np.dtype(keys.dtype).kind != "u":
        keys[np.isnan(keys.astype(np.float32))] = 0
    payload = np.arange(120, dtype=np.int32).reshape(shape)
    same_as_xla_text(sort_text(comparator, element_type_of(dtype), shape, 1), keys, payload)


def test_comparator_that_is_not_a_strict_weak_order():
    """FLOAT LT with NaN: no sorted order exists; the result is still a permutation."""
    keys = np.array([3.0, np.nan, 1.0, np.nan, 2.0, 0.0, np.nan, -1.0], np.float32)
    payload = np.arange(8, dtype=np.int32)
    for comparator in ["swapped_lt", "not_ge", "reshaped_lt"]:
        out_keys, out_payload = run_interp_text(sort_text(comparator, "f32", (8,), 0), keys, payload)
        assert sorted(out_payload.tolist()) == list(range(8))
        assert_same(out_keys, keys[out_payload])
