"""Control flow, calls, tuples and tokens: JAX control flow against XLA's CPU
backend, and what JAX cannot emit (if, out-of-range case, map, tuples, tokens,
composite) against the C++ StableHLO reference interpreter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.engine.plan import BRANCH, CALL
from oracles import assert_same, same_as_reference, same_as_xla
# ------------------------------------------------------------------- JAX loops


@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_with_mixed_carries(n):
    def f(n, x, z):
        def cond(carry):
            i, _, flag, _ = carry
            return (i < n) & flag

        def body(carry):
            i, acc, flag, z = carry
            acc = acc * 1.5 + i.astype(acc.dtype)
            return i + 1, acc, jnp.all(acc < 1e6), z * z - z  # (0-d complex constants hit a decode.py bug)

        return jax.lax.while_loop(cond, body, (np.int32(0), x, True, z))

    same_as_xla(f, np.int32(n), np.linspace(-1, 1, 5, dtype=np.float32), np.complex64(1 - 2j))


def test_fori_loop_captures_outer_values_in_nested_loops():
    def f(x, k, m):
        def outer(i, acc):
            def inner(j, a):
                return a * k + (i * j).astype(a.dtype) - m  # k, m and i from enclosing scopes
            return jax.lax.fori_loop(0, 3, inner, acc)
        return jax.lax.fori_loop(0, 4, outer, x)

    same_as_xla(f, np.arange(3, dtype=np.float64), np.float64(0.5), np.float64(2.0))


def test_fori_loop_with_dynamic_trip_count():
    f = lambda n, x: jax.lax.fori_loop(0, n, lambda i, a: a + jnp.sin(a) * i, x)  # noqa: E731 - a lambda reads as the expression it names
    for n in [-2, 0, 5]:
        same_as_xla(f, np.int32(n), np.float32(0.3))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan(reverse):
    def f(xs, init):
        def step(carry, x):
            total, count = carry
            total = total + x
            return (total, count + 1), total * count.astype(x.dtype)
        return jax.lax.scan(step, (init, np.int32(0)), xs, reverse=reverse)

    same_as_xla(f, np.arange(12, dtype=np.float32).reshape(4, 3), np.ones(3, np.float32))


def test_scan_of_length_zero_and_unrolled():
    def f(xs):
        a = jax.lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)
        b = jax.lax.scan(lambda c, x: (c * 2 + x, c), 1.0, xs[:0])
        c = jax.lax.scan(lambda c, x: (c - x, x * x), 1.0, xs, unroll=2)
        return a, b, c

    same_as_xla(f, np.linspace(0, 1, 5))


def test_associative_scan():
    f = lambda x: jax.lax.associative_scan(jnp.maximum, x)  # noqa: E731 - a lambda reads as the expression it names
    same_as_xla(f, np.array([3, -1, 4, -1, 5, -9, 2, 6], np.int32))


# ------------------------------------------------------------- JAX conditionals


@pytest.mark.parametrize("pred", [True, False])
def test_cond(pred):
    def f(p, x, y):
        return jax.lax.cond(p, lambda: (x + y, y), lambda: (x * y, -y))

    same_as_xla(f, np.bool_(pred), np.float32(3), np.arange(4, dtype=np.int8))


@pytest.mark.parametrize("index", [-5, 0, 1, 2, 3, 99])
def test_switch_clamps_index_in_jax(index):
    branches = [lambda x: x + 1, lambda x: x * 2, lambda x: -x, jnp.cos]
    f = lambda i, x: jax.lax.switch(i, branches, x)  # noqa: E731 - a lambda reads as the expression it names
    same_as_xla(f, np.int32(index), np.float32(0.25))


def test_cond_inside_while_inside_cond():
    def f(x):
        def body(i, acc):
            return jax.lax.cond(i % 2 == 0, lambda a: a + i, lambda a: a * 2, acc)
        return jax.lax.cond(x > 0, lambda: jax.lax.fori_loop(0, 5, body, x), lambda: x - 100)

    for x in [3, -3]:
        same_as_xla(f, np.int64(x))


# ------------------------------------------------------ barrier, calls, composite


def test_optimization_barrier():
    f = lambda x, y: jax.lax.optimization_barrier((x + 1, y, x))  # noqa: E731 - a lambda reads as the expression it names
    same_as_xla(f, np.arange(3, dtype=np.float16), np.bool_(True))


def test_nested_jit_becomes_func_call():
    inner = jax.jit(lambda x, y: (x * y, x - y))

    def f(x, y):
        a, b = inner(x, y)
        c, _ = inner(a, b)
        return c + jax.jit(lambda z: z ** 2)(b)

    assert "call @" in jax.jit(f).lower(np.float32(0), np.float32(0)).as_text()
    same_as_xla(f, np.float32(1.5), np.float32(-0.25))


def test_jax_composite_runs_its_decomposition():
    @jax.jit
    def f(x, y):
        scaled = jax.lax.composite(lambda x, scale: x * scale + 1, name="my.scaled")(x, scale=2.0)
        return scaled, jax.lax.composite(lambda x, y: jnp.maximum(x, y) - y, name="my.relu_shifted")(x, y)

    x, y = np.linspace(-2, 2, 6, dtype=np.float32), np.float32(0.5)
    assert "stablehlo.composite" in f.lower(x, y).as_text()
    same_as_xla(f, x, y)


def test_call_graph_with_recursion_depth_and_shared_callee():
    text = """
func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %0 = func.call @countdown(%x) : (tensor<i32>) -> tensor<i32>
  %1 = func.call @twice(%0) : (tensor<i32>) -> tensor<i32>
  return %1 : tensor<i32>
}
func.func private @twice(%x: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.add %x, %x : tensor<i32>
  return %0 : tensor<i32>
}
func.func private @countdown(%x: tensor<i32>) -> tensor<i32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %done = stablehlo.compare LE, %x, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %r = "stablehlo.if"(%done) ({
    stablehlo.return %zero : tensor<i32>
  }, {
    %y = stablehlo.subtract %x, %one : tensor<i32>
    %z = func.call @countdown(%y) : (tensor<i32>) -> tensor<i32>
    %w = func.call @twice(%one) : (tensor<i32>) -> tensor<i32>
    %s = stablehlo.add %z, %w : tensor<i32>
    stablehlo.return %s : tensor<i32>
  }) : (tensor<i1>) -> tensor<i32>
  return %r : tensor<i32>
}"""
    program = si.load(text)
    for listeners in ((), [si.Listener()]):   # the run loop's CALL entries, and the observed runner
        (out,) = program.run(np.int32(5), listeners=listeners)
        assert out == 20  # countdown(5) = 2 * 5, then doubled
    assert [entry[4] for entry in program.function("main").region.flat_steps] == [CALL, CALL]


CALLS_THAT_FAIL = """
func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0:2 = func.call @outer(%x) : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3xf32>
}
func.func private @outer(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = func.call @inner(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = stablehlo.multiply %0, %x : tensor<3xf32>
  return %1, %0 : tensor<3xf32>, tensor<3xf32>
}
func.func private @inner(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @fails_on_negative(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""


def test_calls_run_by_the_loop_give_the_runners_values_and_errors():
    """An unobserved func.call is its callee run by the run loop itself (kind CALL):
    the same values as the observed runner, several results in order, and an error
    inside names each call it is inside, as a region's error does."""
    from stablehlo_interp.engine import registry

    def builder(info):
        def run(x):
            if (x < 0).any():
                raise ValueError("negative")
            return np.sqrt(x)
        return run

    x = np.array([1, 4, 9], np.float32)
    with registry.replaced(custom_calls={"fails_on_negative": builder}):
        program = si.load(CALLS_THAT_FAIL)
        messages = []
        for listeners in ((), [si.Listener()]):
            product, root = program.run(x, listeners=listeners)
            np.testing.assert_array_equal(root, [1, 2, 3])
            np.testing.assert_array_equal(product, [1, 8, 27])
            with pytest.raises(si.OpExecutionError) as error:
                program.run(-x, listeners=listeners)
            messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "negative" in messages[0] and messages[0].count("inside func.call") == 2
    assert "(@inner, call 0)" in messages[0] and "(@outer, call 0)" in messages[0]


def test_error_inside_a_branch_names_the_branch():
    """An if or case run by the loop itself (kind BRANCH) says in an error which branch
    it was inside, as the observed run does."""
    text = """
func.func @main(%i: tensor<i32>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "stablehlo.case"(%i) ({
    stablehlo.return %x : tensor<2xf32>
  }, {
    %a = stablehlo.custom_call @always_fails(%x) : (tensor<2xf32>) -> tensor<2xf32>
    stablehlo.return %a : tensor<2xf32>
  }) : (tensor<i32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
    from stablehlo_interp.engine import registry

    def builder(info):
        def run(x):
            raise ArithmeticError("always")
        return run

    x = np.array([1, 2], np.float32)
    with registry.replaced(custom_calls={"always_fails": builder}):
        program = si.load(text)
        messages = []
        for listeners in ((), [si.Listener()]):
            np.testing.assert_array_equal(program.run(np.int32(0), x, listeners=listeners)[0], x)
            with pytest.raises(si.OpExecutionError) as error:
                program.run(np.int32(1), x, listeners=listeners)
            messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "always" in messages[0] and "inside stablehlo.case" in messages[0] and "(region 1, call 0)" in messages[0]


MUTUAL_RECURSION = """
func.func @main(%x: tensor<i32>) -> tensor<i1> {
  %0 = func.call @is_even(%x) : (tensor<i32>) -> tensor<i1>
  return %0 : tensor<i1>
}
func.func private @is_even(%x: tensor<i32>) -> tensor<i1> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %done = stablehlo.compare EQ, %x, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %r = "stablehlo.if"(%done) ({
    %true = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %true : tensor<i1>
  }, {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %y = stablehlo.subtract %x, %one : tensor<i32>
    %odd = func.call @is_odd(%y) : (tensor<i32>) -> tensor<i1>
    stablehlo.return %odd : tensor<i1>
  }) : (tensor<i1>) -> tensor<i1>
  return %r : tensor<i1>
}
func.func private @is_odd(%x: tensor<i32>) -> tensor<i1> {
  %0 = func.call @is_even(%x) : (tensor<i32>) -> tensor<i1>
  %1 = stablehlo.not %0 : tensor<i1>
  return %1 : tensor<i1>
}"""


def test_mutual_recursion_declared_after_its_caller():
    """Callees compile before their callers, whatever the order of declaration; a call
    back into a function being compiled gets that function's own plan."""
    program = si.load(MUTUAL_RECURSION)
    is_even, is_odd = program.function("is_even").region, program.function("is_odd").region
    (call_odd,) = [step for step in is_even.steps[-1].regions[1].steps if step.name == "func.call"]
    assert call_odd.regions == (is_odd,) and is_odd.steps[0].regions == (is_even,)
    assert [bool(program.run(np.int32(n))[0]) for n in range(5)] == [True, False, True, False, True]
    deepest = max(si.tools.trace(program, np.int32(2)), key=lambda record: len(record.stack))
    assert [call.region for call in deepest.stack if call.region.startswith("@")] == \
        ["@is_even", "@is_odd", "@is_even", "@is_odd", "@is_even"]


def test_recursive_call_of_quantized_values():
    quantized = "tensor<!quant.uniform<i8:f32, 0.5:2>>"
    text = f"""
func.func @main(%n: tensor<i32>, %x: tensor<f32>) -> tensor<f32> {{
  %q = stablehlo.uniform_quantize %x : (tensor<f32>) -> {quantized}
  %r = func.call @add_n_times(%n, %q, %q) : (tensor<i32>, {quantized}, {quantized}) -> {quantized}
  %y = stablehlo.uniform_dequantize %r : ({quantized}) -> tensor<f32>
  return %y : tensor<f32>
}}
func.func private @add_n_times(%n: tensor<i32>, %step: {quantized}, %sum: {quantized}) -> {quantized} {{
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %done = stablehlo.compare LE, %n, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %r = "stablehlo.if"(%done) ({{
    stablehlo.return %sum : {quantized}
  }}, {{
    %one = stablehlo.constant dense<1> : tensor<i32>
    %m = stablehlo.subtract %n, %one : tensor<i32>
    %more = stablehlo.add %sum, %step : {quantized}
    %s = func.call @add_n_times(%m, %step, %more) : (tensor<i32>, {quantized}, {quantized}) -> {quantized}
    stablehlo.return %s : {quantized}
  }}) : (tensor<i1>) -> {quantized}
  return %r : {quantized}
}}"""
    (out,) = si.run(text, np.int32(3), np.float32(1.5))
    assert out == 6.0


# -------------------------------------------- against the C++ reference interpreter

IF_TEXT = """
func.func @main(%p: tensor<i1>, %x: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) {
  %0:2 = "stablehlo.if"(%p) ({
    %c = stablehlo.constant dense<1> : tensor<i32>
    %a = stablehlo.add %x, %x : tensor<2xf32>
    stablehlo.return %a, %c : tensor<2xf32>, tensor<i32>
  }, {
    %c = stablehlo.constant dense<2> : tensor<i32>
    %a = stablehlo.negate %x : tensor<2xf32>
    stablehlo.return %a, %c : tensor<2xf32>, tensor<i32>
  }) : (tensor<i1>) -> (tensor<2xf32>, tensor<i32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<i32>
}"""


@pytest.mark.parametrize("pred", [True, False])
def test_if(reference, pred):
    x = np.array([1.5, -2.0], np.float32)
    observed = same_as_reference(reference, IF_TEXT, np.bool_(pred), x)
    program = si.load(IF_TEXT)
    assert program.function("main").region.flat_steps[0][4] == BRANCH
    for a, c in (observed, program.run(np.bool_(pred), x)):   # the runner, and the run loop's BRANCH
        np.testing.assert_array_equal(a, x * 2 if pred else -x)
        assert c == (1 if pred else 2)


CASE_TEXT = """
func.func @main(%i: tensor<i32>, %x: tensor<3xi64>) -> (tensor<3xi64>, tensor<3xi64>) {
  %0:2 = "stablehlo.case"(%i) ({
    stablehlo.return %x, %x : tensor<3xi64>, tensor<3xi64>
  }, {
    %a = stablehlo.multiply %x, %x : tensor<3xi64>
    stablehlo.return %a, %x : tensor<3xi64>, tensor<3xi64>
  }, {
    %a = stablehlo.negate %x : tensor<3xi64>
    %b = stablehlo.add %x, %a : tensor<3xi64>
    stablehlo.return %a, %b : tensor<3xi64>, tensor<3xi64>
  }) : (tensor<i32>) -> (tensor<3xi64>, tensor<3xi64>)
  return %0#0, %0#1 : tensor<3xi64>, tensor<3xi64>
}"""


@pytest.mark.parametrize("index, branch", [(0, 0), (1, 1), (2, 2), (3, 2), (-1, 2), (2**31 - 1, 2),
                                           (-2**31, 2)])
def test_case_out_of_range_index_runs_last_branch(reference, index, branch):
    """spec (case): an index outside [0, N) selects branch N - 1."""
    x = np.array([2, -3, 5], np.int64)
    observed = same_as_reference(reference, CASE_TEXT, np.int32(index), x)
    expected = [(x, x), (x * x, x), (-x, 0 * x)][branch]
    for a, b in (observed, si.load(CASE_TEXT).run(np.int32(index), x)):   # the runner, and the loop's BRANCH
        np.testing.assert_array_equal(a, expected[0])
        np.testing.assert_array_equal(b, expected[1])


def test_while_with_several_carries(reference):
    text = """
func.func @main(%n: tensor<i64>, %x: tensor<2x2xf64>) -> (tensor<i64>, tensor<2x2xf64>) {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %0:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i64>, tensor<2x2xf64>
  cond {
    %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i64>
    %next = stablehlo.add %i, %one : tensor<i64>
    %t = stablehlo.transpose %acc, dims = [1, 0] : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %m = stablehlo.dot_general %t, %x, contracting_dims = [1] x [0] : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
    stablehlo.return %next, %m : tensor<i64>, tensor<2x2xf64>
  }
  return %0#0, %0#1 : tensor<i64>, tensor<2x2xf64>
}"""
    x = np.array([[1.0, 0.5], [-0.25, 2.0]])
    for n in [0, 1, 4]:
        i, _ = same_as_reference(reference, text, np.int64(n), x)
        assert i == n


NESTED_WHILES = """
func.func @main(%n: tensor<i32>, %x: tensor<3xf32>, %s: tensor<f32>) -> (tensor<i32>, tensor<3xf32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<3xf32>
  cond {
    %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %inner:2 = stablehlo.while(%j = %zero, %a = %acc) : tensor<i32>, tensor<3xf32>
    cond {
      %c = stablehlo.compare LT, %j, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %sum = stablehlo.reduce(%a init: %s) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
      %b = stablehlo.broadcast_in_dim %sum, dims = [] : (tensor<f32>) -> tensor<3xf32>
      %half = stablehlo.constant dense<0.5> : tensor<3xf32>
      %m = stablehlo.multiply %b, %half : tensor<3xf32>
      %a2 = stablehlo.subtract %m, %a : tensor<3xf32>
      %j1 = stablehlo.add %j, %one : tensor<i32>
      stablehlo.return %j1, %a2 : tensor<i32>, tensor<3xf32>
    }
    %odd = stablehlo.and %i, %one : tensor<i32>
    %p = stablehlo.compare EQ, %odd, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %picked = "stablehlo.if"(%p) ({
      stablehlo.return %inner#1 : tensor<3xf32>
    }, {
      %neg = stablehlo.negate %inner#1 : tensor<3xf32>
      stablehlo.return %neg : tensor<3xf32>
    }) : (tensor<i1>) -> tensor<3xf32>
    %i1 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i1, %picked : tensor<i32>, tensor<3xf32>
  }
  return %r#0, %r#1 : tensor<i32>, tensor<3xf32>
}"""


@pytest.mark.parametrize("n", [0, 1, 4])
def test_nested_whiles_with_captures_reduce_and_if(reference, n):
    """Region calls of a loop (captured %n, %s, %one, the outer counter in the inner
    cond; a reduce and an if in the bodies) give the reference interpreter's values."""
    x = np.array([1.5, -2.0, 0.25], np.float32)
    i, _ = same_as_reference(reference, NESTED_WHILES, np.int32(n), x, np.float32(0.5))
    assert i == n


def test_listeners_see_every_iteration_of_nested_whiles():
    """Observed, each call of a loop's regions is its own numbered frame: the outer
    body's iteration i runs the inner body i times, the conds once more each."""
    seen = []

    class Record(si.Listener):
        def before_op(self, step, operands, stack):
            if step.name in ("stablehlo.reduce", "stablehlo.compare"):
                seen.append((step.name, tuple((frame.region_index, frame.call) for frame in stack)))

    x = np.array([1.5, -2.0, 0.25], np.float32)
    observed = si.run(NESTED_WHILES, np.int32(4), x, np.float32(0.5), listeners=[Record()])
    for got, expected in zip(observed, si.run(NESTED_WHILES, np.int32(4), x, np.float32(0.5))):
        np.testing.assert_array_equal(got, expected)
    reduces = [frames for name, frames in seen if name == "stablehlo.reduce"]
    assert reduces == [((1, i), (1, j)) for i in range(4) for j in range(i)]
    inner_conds = [frames for name, frames in seen if name == "stablehlo.compare" and len(frames) == 2
                   and frames[1][0] == 0]
    assert inner_conds == [((1, i), (0, j)) for i in range(4) for j in range(i + 1)]
    outer_conds = [frames for name, frames in seen if name == "stablehlo.compare" and len(frames) == 1
                   and frames[0][0] == 0]
    assert outer_conds == [((0, i),) for i in range(5)]


MAP_ELEMENTWISE = """
func.func @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "stablehlo.map"(%x, %y) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.multiply %a, %b : tensor<f32>
    %c = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %s = stablehlo.select %c, %m, %b : tensor<i1>, tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"""

# A body that is not element-wise: it builds a vector, sorts nothing, reduces it.
MAP_GENERAL = """
func.func @main(%x: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "stablehlo.map"(%x, %y) ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>):
    %ten = stablehlo.constant dense<10> : tensor<i32>
    %v = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<i32>) -> tensor<3xi32>
    %iota = stablehlo.iota dim = 0 : tensor<3xi32>
    %w = stablehlo.multiply %v, %iota : tensor<3xi32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r = stablehlo.reduce(%w init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<3xi32>, tensor<i32>) -> tensor<i32>
    %t = stablehlo.multiply %b, %ten : tensor<i32>
    %s = stablehlo.add %r, %t : tensor<i32>
    stablehlo.return %s : tensor<i32>
  }) {dimensions = array<i64: 0>} : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}"""

MAP_EMPTY = """
func.func @main(%x: tensor<0x3xi32>) -> tensor<0x3xi32> {
  %0 = "stablehlo.map"(%x) ({
  ^bb0(%a: tensor<i32>):
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.add %a, %one : tensor<i32>
    stablehlo.return %s : tensor<i32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<0x3xi32>) -> tensor<0x3xi32>
  return %0 : tensor<0x3xi32>
}"""


def test_map_elementwise_body(reference):
    x = np.array([[1, -2, 3], [0.5, np.nan, -np.inf]], np.float32)
    y = np.array([[0, 4, 1], [0.25, 1, 2]], np.float32)
    (out,) = same_as_reference(reference, MAP_ELEMENTWISE, x, y)
    assert_same(out, np.where(x > y, x * y, y))


def test_map_general_body(reference):
    x, y = np.array([1, -2, 3, 7], np.int32), np.array([0, 1, 2, 3], np.int32)
    (out,) = same_as_reference(reference, MAP_GENERAL, x, y)
    np.testing.assert_array_equal(out, 3 * x + 10 * y)


def test_map_of_empty_tensor():
    (out,) = si.run(MAP_EMPTY, np.zeros((0, 3), np.int32), listeners=[si.validation.ResultTypeChecker()])
    assert out.shape == (0, 3) and out.dtype == np.int32


def test_map_listeners_see_the_body_per_element_or_vectorized():
    """A general body is observed once per element; an element-wise body once, on
    whole tensors, in a frame marked vectorized."""
    seen = []

    class Record(si.Listener):
        def after_op(self, step, operands, results, stack):
            vectorized = any(frame.vectorized for frame in stack)
            seen.append((step.name, np.shape(results[0])) + (("vectorized",) if vectorized else ()))

    x = np.array([1, 2, 3, 4], np.int32)
    si.run(MAP_GENERAL, x, x, listeners=[Record()])
    assert seen.count(("stablehlo.reduce", ())) == 4 and seen[-1] == ("stablehlo.map", (4,))
    seen.clear()
    si.run(MAP_ELEMENTWISE, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), listeners=[Record()])
    assert seen[-1] == ("stablehlo.map", (2, 3))
    assert seen[:-1] and all(entry[-1] == "vectorized" and entry[1] == (2, 3) for entry in seen[:-1])


TUPLE_TEXT = """
func.func @main(%x: tensor<2xi32>, %y: tensor<f32>) -> (tensor<2xi32>, tensor<f32>, tensor<2xi32>) {
  %t = stablehlo.tuple %x, %y : tuple<tensor<2xi32>, tensor<f32>>
  %n = stablehlo.tuple %t, %x : tuple<tuple<tensor<2xi32>, tensor<f32>>, tensor<2xi32>>
  %inner = stablehlo.get_tuple_element %n[0] : (tuple<tuple<tensor<2xi32>, tensor<f32>>, tensor<2xi32>>) -> tuple<tensor<2xi32>, tensor<f32>>
  %a = stablehlo.get_tuple_element %inner[0] : (tuple<tensor<2xi32>, tensor<f32>>) -> tensor<2xi32>
  %b = stablehlo.get_tuple_element %inner[1] : (tuple<tensor<2xi32>, tensor<f32>>) -> tensor<f32>
  %c = stablehlo.get_tuple_element %n[1] : (tuple<tuple<tensor<2xi32>, tensor<f32>>, tensor<2xi32>>) -> tensor<2xi32>
  %d = stablehlo.add %a, %c : tensor<2xi32>
  return %a, %b, %d : tensor<2xi32>, tensor<f32>, tensor<2xi32>
}"""


# Known bug outside this module: decode.decode_type calls ir.RankedTensorType.isinstance,
# which jaxlib 0.10 no longer has, on any non-tensor type: tuple and token types
# cannot be loaded.
def test_tuples(reference):
    x, y = np.array([3, -4], np.int32), np.float32(2.5)
    a, b, d = si.run(TUPLE_TEXT, x, y, listeners=[si.validation.ResultTypeChecker()])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(d, 2 * x)
    assert b == y
    expected = reference.evaluate(TUPLE_TEXT, [x, y])
    assert_same(a, expected[0])
    assert_same(d, expected[2])


def test_tuple_arguments_and_results():
    text = """
func.func @main(%t: tuple<tensor<i8>, tuple<tensor<2xf32>>>) -> tuple<tensor<2xf32>, tensor<i8>> {
  %a = stablehlo.get_tuple_element %t[0] : (tuple<tensor<i8>, tuple<tensor<2xf32>>>) -> tensor<i8>
  %i = stablehlo.get_tuple_element %t[1] : (tuple<tensor<i8>, tuple<tensor<2xf32>>>) -> tuple<tensor<2xf32>>
  %b = stablehlo.get_tuple_element %i[0] : (tuple<tensor<2xf32>>) -> tensor<2xf32>
  %r = stablehlo.tuple %b, %a : tuple<tensor<2xf32>, tensor<i8>>
  return %r : tuple<tensor<2xf32>, tensor<i8>>
}"""
    (out,) = si.run(text, (np.int8(7), (np.array([1, 2], np.float32),)),
                    listeners=[si.validation.ResultTypeChecker()])
    assert isinstance(out, tuple) and out[1] == 7
    np.testing.assert_array_equal(out[0], [1, 2])


TOKEN_TEXT = """
func.func @main(%x: tensor<3xf32>, %t: !stablehlo.token) -> (tensor<3xf32>, !stablehlo.token) {
  %a = stablehlo.create_token : !stablehlo.token
  %b = stablehlo.after_all %a, %t : !stablehlo.token
  %c = stablehlo.after_all : !stablehlo.token
  %d = stablehlo.after_all %b, %c, %t : !stablehlo.token
  %y = stablehlo.add %x, %x : tensor<3xf32>
  return %y, %d : tensor<3xf32>, !stablehlo.token
}"""


def test_tokens():
    y, token = si.run(TOKEN_TEXT, np.ones(3, np.float32), si.TOKEN,
                      listeners=[si.validation.ResultTypeChecker()])
    assert token is si.TOKEN
    np.testing.assert_array_equal(y, [2, 2, 2])


COMPOSITE_TEXT = """
func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.composite "test.scale_shift" %x {
    composite_attributes = {scale = 3.0 : f32, shift = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>},
    decomposition = @scale_shift, version = 2 : i32
  } : (tensor<4xf32>) -> tensor<4xf32>
  %1:2 = stablehlo.composite "test.pair" %0, %x {decomposition = @pair} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %1#0, %1#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @scale_shift(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = stablehlo.constant dense<3.0> : tensor<4xf32>
  %b = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %m = stablehlo.multiply %x, %s : tensor<4xf32>
  %r = stablehlo.add %m, %b : tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @pair(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %d = stablehlo.subtract %a, %b : tensor<4xf32>
  %e = func.call @scale_shift(%d) : (tensor<4xf32>) -> tensor<4xf32>
  return %e, %d : tensor<4xf32>, tensor<4xf32>
}"""


def test_composite_runs_its_decomposition(reference):
    x = np.array([0.5, -1, 2, 8], np.float32)
    e, d = same_as_reference(reference, COMPOSITE_TEXT, x)
    expected_d = (x * 3 + [1, 2, 3, 4]) - x
    np.testing.assert_allclose(d, expected_d)
    np.testing.assert_allclose(e, expected_d * 3 + [1, 2, 3, 4])


def test_while_body_error_names_iteration():
    text = """
func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.while(%i = %x) : tensor<i32>
  cond {
    %ten = stablehlo.constant dense<10> : tensor<i32>
    %c = stablehlo.compare LT, %i, %ten : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %r = stablehlo.custom_call @fails_on_three(%i) : (tensor<i32>) -> tensor<i32>
    stablehlo.return %r : tensor<i32>
  }
  return %0 : tensor<i32>
}"""

    def builder(info):
        def run(i):
            if i == 3:
                raise ValueError("three")
            return i + np.int32(1)
        return run

    from stablehlo_interp.engine import registry

    with registry.replaced(custom_calls={"fails_on_three": builder}), pytest.raises(si.OpExecutionError) as error:
        si.run(text, np.int32(0))
    message = str(error.value)
    assert "three" in message and "inside stablehlo.while" in message and "call 3" in message
    assert message.count("inside stablehlo.while") == 1


@pytest.mark.parametrize("listeners", [[], [si.Listener()]], ids=["unobserved", "observed"])
def test_while_cond_and_body_errors_name_their_region_and_iteration(listeners):
    """An error in the condition or in the body names the region and the call (the
    iteration) it happened in, observed or not (unobserved, the loop numbers both
    regions' calls itself: run.run_while)."""
    text = """
func.func @main(%x: tensor<i32>, %fail: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.while(%i = %x) : tensor<i32>
  cond {
    %checked = stablehlo.custom_call @fails_on(%i, %fail) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %ten = stablehlo.constant dense<10> : tensor<i32>
    %c = stablehlo.compare LT, %checked, %ten : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %hundred = stablehlo.constant dense<100> : tensor<i32>
    %shifted = stablehlo.add %i, %hundred : tensor<i32>
    %checked = stablehlo.custom_call @fails_on(%shifted, %fail) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %n : tensor<i32>
  }
  return %0 : tensor<i32>
}"""

    def builder(info):
        def run(value, fail):
            if value == fail:
                raise ValueError(f"failed on {fail}")
            return value
        return run

    from stablehlo_interp.engine import registry

    with registry.replaced(custom_calls={"fails_on": builder}):
        program = si.load(text)
        assert program.run(np.int32(0), np.int32(50), listeners=listeners)[0] == 10
        # iteration k: the condition sees i = k (call k of region 0), then the body i + 100 (call k of region 1)
        for fail, where in ((3, "region 0, call 3"), (0, "region 0, call 0"), (104, "region 1, call 4"),
                            (100, "region 1, call 0"), (10, "region 0, call 10")):
            with pytest.raises(si.OpExecutionError) as error:
                program.run(np.int32(0), np.int32(fail), listeners=listeners)
            message = str(error.value)
            assert f"failed on {fail}" in message and message.count("inside stablehlo.while") == 1, message
            assert f"({where})" in message, message