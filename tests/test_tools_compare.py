"""si.compare: agreement with another backend, and the first divergent op when they differ."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.tools import InterpreterBackend, JaxBackend
from stablehlo_interp.judge.bounds import BEYOND, NOISE, UNBOUNDED, noise_runs, spread_allowance, unit_roundoff, within
from stablehlo_interp.ir.edit import inline_calls, prefix_module


def model(x, w):
    h = x @ w
    a = jnp.tanh(h)
    s = jnp.where(a > 0, a, 0.1 * a)
    return jnp.exp(s).sum(0), s


TANH_LINE = model.__code__.co_firstlineno + 2
EXP_LINE = model.__code__.co_firstlineno + 4
RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
W = RNG.standard_normal((4, 5)).astype(np.float32)


def off_by(factor, function):
    """A deliberately wrong implementation: ``function`` scaled by ``factor``."""
    return lambda info: lambda a: (function(a) * factor).astype(a.dtype)


def test_agrees_with_xla_cpu():
    comparison = si.compare(model, X, W, backend="cpu")
    assert comparison.ok and comparison.divergence is None and comparison.outputs == [None, None]
    assert str(comparison) == "the interpreter and cpu agree on all 2 results"


def test_wrong_op_in_a_second_interpreter_is_found():
    wrong = InterpreterBackend(ops={"stablehlo.tanh": off_by(np.float32(1.01), np.tanh)}, name="wrong tanh")
    comparison = si.compare(model, X, W, backend=wrong)
    assert not comparison.ok
    found = comparison.divergence
    assert found.op == "stablehlo.tanh" and found.location.frame.line == TANH_LINE
    np.testing.assert_allclose(found.ours, np.tanh(X @ W), rtol=1e-5)
    np.testing.assert_allclose(found.theirs, found.ours * np.float32(1.01), rtol=1e-6)
    # the largest error is where |tanh| is largest
    assert found.difference.index == np.unravel_index(np.argmax(np.abs(found.ours)), found.ours.shape)
    assert found.difference.mismatched == 15 and found.difference.max_ulp > 1000
    np.testing.assert_allclose(found.difference.max_abs, 0.01 * np.abs(found.ours).max(), rtol=1e-3)
    text = str(comparison)
    assert f"first divergent op: stablehlo.tanh (op #1 of the entry function) at test_tools_compare.py:{TANH_LINE}" \
           " (model)" in text
    assert "  source: a = jnp.tanh(h)" in text and "its operands agree on both sides" in text
    # the replacement applied only to the modules that backend loaded
    assert si.run(jax.jit(jnp.tanh).lower(np.float32(1)), np.float32(1)) == np.tanh(np.float32(1))


def test_a_later_wrong_op_is_found_after_agreeing_ones():
    wrong = InterpreterBackend(ops={"stablehlo.exponential": off_by(np.float32(1.001), np.exp)})
    found = si.compare(model, X, W, backend=wrong).divergence
    assert found.op == "stablehlo.exponential" and found.location.frame.line == EXP_LINE


def test_wrong_op_inside_a_nested_jit_is_found_after_inlining():
    @jax.jit
    def inner(v):
        return jnp.sin(v) * 2

    def f(v):
        return inner(v + 1) - 1

    wrong = InterpreterBackend(ops={"stablehlo.sine": off_by(np.float32(-1), np.sin)})
    comparison = si.compare(f, np.arange(4, dtype=np.float32), backend=wrong)
    assert comparison.divergence.op == "stablehlo.sine"
    assert comparison.divergence.location.frame.line == inner.__wrapped__.__code__.co_firstlineno + 2


def test_wrong_op_inside_a_loop_names_the_loop():
    """Beyond the noise estimated for the loop (runs with every op inside moved within its
    bound): unbounded, the first divergent op when no op is beyond its bound; the loop
    stepped on the backend names the cosine of its first iteration (tests/test_tools_loops.py)."""
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: jnp.cos(a) + i, x)

    wrong = InterpreterBackend(ops={"stablehlo.cosine": off_by(np.float32(2), np.cos)})
    comparison = si.compare(f, np.float32(0.5), backend=wrong)
    found = comparison.divergence
    assert found.op == "stablehlo.while" and found.regions == ("cond", "body") and found.kind == UNBOUNDED
    assert comparison.kinds == [UNBOUNDED] and not comparison.noise_only
    inside = found.stepping.beyond
    assert (inside.iteration, inside.region, inside.divergence.op) == (0, "body", "stablehlo.cosine")
    assert inside.divergence.location.frame.line == f.__code__.co_firstlineno + 1
    np.testing.assert_equal((inside.divergence.ours, inside.divergence.theirs), (np.cos(np.float32(0.5)),
                                                                                 2 * np.cos(np.float32(0.5))))
    assert "the difference arises inside its regions (cond, body)\n  stepped on x iteration by iteration" \
        in found.describe("x")


def test_a_reordered_sum_inside_a_loop_is_estimated_noise():
    """The loop adds the cancelling dot 3 times: 0.003 here, 3 summed right to left. The
    loop's runs with each op inside moved within its bound (the dot's: 119.2) spread far
    wider: noise. Summed correctly plus 1000 each time, it is not."""
    def f(a, b):
        return jax.lax.fori_loop(0, 3, lambda i, total: total + jnp.dot(a, b), np.float32(0))

    reordered = InterpreterBackend(ops={"stablehlo.dot_general": dot_summed(right_to_left)})
    comparison = si.compare(f, CANCELLING_A, CANCELLING_B, backend=reordered)
    assert not comparison.ok and comparison.kinds == [NOISE] and comparison.divergence is None
    far_off = InterpreterBackend(ops={"stablehlo.dot_general": dot_summed(range, 1000.0)})
    comparison = si.compare(f, CANCELLING_A, CANCELLING_B, backend=far_off)
    assert comparison.kinds == [UNBOUNDED] and comparison.divergence.op == "stablehlo.while"


def test_a_deliberately_wrong_xla_build_as_a_callable_backend():
    def xla_with_a_bug(module_text, args):
        return JaxBackend("cpu")(module_text.replace("stablehlo.tanh", "stablehlo.sine"), args)

    comparison = si.compare(model, X, W, backend=xla_with_a_bug)
    assert comparison.backend == "xla_with_a_bug"
    assert comparison.divergence.op == "stablehlo.tanh" and comparison.compiled_prefixes == 1
    # windows of one op each: a prefix for each of the 12 ops, every value shown to classify every op
    small = si.compare(model, X, W, backend=xla_with_a_bug, window_bytes=1)
    assert small.divergence.op == "stablehlo.tanh" and small.compiled_prefixes == 12


def test_tolerances_per_element_type():
    slightly = InterpreterBackend(ops={"stablehlo.tanh": off_by(np.float32(1 + 1e-6), np.tanh)})
    assert si.compare(model, X, W, backend=slightly).ok             # within f32's default rtol 1e-5
    assert not si.compare(model, X, W, backend=slightly, tolerance={"f32": (1e-7, 0.0)}).ok
    assert not si.compare(model, X, W, backend=slightly, tolerance=(0.0, 0.0)).ok


def test_integer_results_must_be_equal_and_shapes_must_match():
    off_by_one = InterpreterBackend(ops={"stablehlo.multiply": lambda info: lambda a, b: a * b + 1})
    comparison = si.compare(lambda a: a * 3 - 1, np.arange(4, dtype=np.int32), backend=off_by_one)
    assert comparison.divergence.op == "stablehlo.multiply"
    assert comparison.divergence.difference.describe("b") == \
        "4 of 4 elements differ; largest at [0]: 0 (interpreter) vs 1 (b)"

    def transposed(module_text, args):
        return [out.T for out in si.run(module_text, *args)]

    comparison = si.compare(lambda a: a + 1, np.ones((2, 3), np.float32), backend=transposed)
    assert comparison.outputs[0].problem == "expected f32[2, 3], got f32[3, 2]"


def test_prefix_modules_return_intermediate_values():
    text = si.load(jax.jit(model).lower(X, W)).module.operation.get_asm(enable_debug_info=True)
    inlined = inline_calls(text, "main")
    assert "call @" not in si.load(inlined).module.operation.get_asm()
    prefix = prefix_module(inlined, "main", 1, [(0, 0), (1, 0)])
    h, a = si.run(prefix, X, W)
    np.testing.assert_allclose(h, X @ W, rtol=1e-5)
    np.testing.assert_allclose(a, np.tanh(X @ W), rtol=1e-5)
    np.testing.assert_allclose(JaxBackend("cpu")(prefix, [X, W])[1], a, rtol=1e-6)   # XLA: within 1 ULP


def test_compare_needs_main():
    text = """func.func @other(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}"""
    with pytest.raises(si.InterpreterError, match="compare runs @main"):
        si.compare(text, np.float32(1))


# ---------------------------------------------------------------- rounding bounds


# Terms of a dot that cancel: summed left to right in f32, ((1 + 1e8) - 1e8) + 1e-3 = 1e-3;
# right to left, 1; exactly, 1.001. Every term and partial sum is exact in f32 but these.
CANCELLING_A = np.array([1.0, 1e8, -1e8, 1e-3], np.float32)
CANCELLING_B = np.ones(4, np.float32)
# The bound of the dot's one element: (2n+2)·u·Σ|aᵢbᵢ|, n = 4 terms
CANCELLING_BOUND = 10 * 2.0 ** -24 * float(np.abs(CANCELLING_A.astype(np.float64)).sum())   # 119.2


def dot_summed(order, offset=0.0):
    """A dot_general of two vectors summed term by term in f32 in ``order``, plus ``offset``."""
    def builder(info):
        def run(a, b):
            total = np.float32(0)
            for i in order(len(a)):
                total = np.float32(total + a[i] * b[i])
            return np.asarray(total + np.float32(offset), a.dtype)
        return run
    return builder


def right_to_left(n):
    return range(n - 1, -1, -1)


def test_a_reordered_cancelling_sum_is_rounding_noise():
    assert 119 < CANCELLING_BOUND < 120 and unit_roundoff(np.float32) == 2.0 ** -24
    reordered = InterpreterBackend(ops={"stablehlo.dot_general": dot_summed(right_to_left)}, name="reordered")
    comparison = si.compare(jnp.dot, CANCELLING_A, CANCELLING_B, backend=reordered)
    assert not comparison.ok                                   # 1 against ~0.001: far beyond any tolerance
    assert comparison.kinds == [NOISE] and comparison.noise_only and comparison.divergence is None
    assert comparison.ops[NOISE] == 1 and comparison.ops[BEYOND] == 0
    text = str(comparison)
    assert "result #0 differs (rounding noise: every op it depends on is within its bound)" in text
    assert "ops whose value differs: 1 rounding noise" in text


@pytest.mark.parametrize("offset, kind", [(100.0, NOISE), (140.0, BEYOND)])
def test_the_bound_of_a_dot_is_2n_plus_2_units_of_the_sum_of_magnitudes(offset, kind):
    """An error of 100 is within the bound (119.2) of that dot; 140 is beyond it."""
    shifted = InterpreterBackend(ops={"stablehlo.dot_general": dot_summed(range, offset)})
    comparison = si.compare(jnp.dot, CANCELLING_A, CANCELLING_B, backend=shifted)
    assert comparison.kinds == [kind]
    if kind == BEYOND:
        found = comparison.divergence
        assert found.op == "stablehlo.dot_general" and found.kind == BEYOND
        assert found.difference.bound == pytest.approx(CANCELLING_BOUND, rel=1e-6)
        assert "beyond its rounding bound (a sum of n terms: (2n+2)·u·Σ|terms|)" in str(comparison)
    else:
        assert comparison.divergence is None


def test_a_cancelled_gradient_feeding_an_adam_step_is_noise():
    """Terms summing to 0 exactly: left to right 1e8 + 1 - 1e8 - 1 = -1 in f32, right to left 0.
    Adam's normalised step g / (sqrt(g²) + eps) then turns that into -1 against 0 (or
    whatever NumPy's order gives): every op after the dot is exact on the backend's operands."""
    terms = np.array([1e8, 1.0, -1e8, -1.0], np.float32)

    def adam_like(a, b, m):
        g = jnp.dot(a, b)
        m = 0.9 * m + 0.1 * g
        return m / (jnp.sqrt(m * m) + 1e-8), g

    backends = [InterpreterBackend(ops={"stablehlo.dot_general": dot_summed(order)}) for order in (range, right_to_left)]
    outcomes = [si.compare(adam_like, terms, CANCELLING_B, np.float32(0), backend=b) for b in backends]
    differing = [c for c in outcomes if not c.ok]
    assert differing   # one of the two orders is not NumPy's
    for comparison in differing:
        assert comparison.noise_only and comparison.divergence is None
        assert all(k in (None, NOISE) for k in comparison.kinds) and NOISE in comparison.kinds


@pytest.mark.parametrize("ulps, kind", [(4, NOISE), (8, BEYOND)])
def test_an_elementwise_op_is_allowed_4_ulp_and_one_ulp_of_its_operand(ulps, kind):
    def negate_off(info):
        return lambda a: np.asarray(-(a.astype(np.float64) + ulps * np.spacing(a).astype(np.float64)), a.dtype)

    x = np.float32([1.5, -3.0, 1e-3])
    wrong = InterpreterBackend(ops={"stablehlo.negate": negate_off})
    comparison = si.compare(lambda v: -v * 1, x, backend=wrong, tolerance=(0.0, 0.0))   # within the default one
    assert comparison.kinds == [kind]
    assert (comparison.divergence is not None) == (kind == BEYOND)


# ---------------------------------------------------------------- host callbacks

def test_host_callbacks_run_on_both_sides_and_compare(capsys):
    """jax.debug.print, pure_callback and io_callback (ordered and not): the interpreter
    runs the function lowered for interp, XLA CPU the one lowered for cpu, each calling
    the callbacks; with no tolerance, XLA's tanh (within 3 ULP) and sums make the search
    run the backend's prefixes, whose callbacks run too."""
    from jax.experimental import io_callback

    received = []

    def record(v):
        received.append(np.array(v))
        return (v * 2).astype(v.dtype)

    def f(x):
        jax.debug.print("sum {s}", s=x.sum())
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        z = io_callback(record, jax.ShapeDtypeStruct(x.shape, x.dtype), y, ordered=True)
        w = io_callback(record, jax.ShapeDtypeStruct(x.shape, x.dtype), z)
        return jnp.tanh(w * 3).sum(), jnp.tanh(w)

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    comparison = si.compare(f, x, backend="cpu", tolerance=(0.0, 0.0))
    # ours, XLA's, each prefix XLA ran (and the noise estimate's runs of the whole program, when XLA
    # computed a result otherwise than in its prefixes)
    runs = len(received) // 2
    assert comparison.compiled_prefixes >= 1 and runs >= 2 + comparison.compiled_prefixes
    for first, second in zip(received[::2], received[1::2]):   # each run: sin(x), then 2 sin(x)
        np.testing.assert_array_equal(first, np.sin(x))
        np.testing.assert_array_equal(second, 2 * np.sin(x))
    assert len(received) == 2 * runs and capsys.readouterr().out.count("sum ") == runs
    expected = jax.jit(f)(x)
    ours = si.run(jax.jit(f).trace(x).lower(lowering_platforms=("interp",)), x)
    np.testing.assert_allclose(ours[1], expected[1], rtol=0, atol=4e-7)
    assert comparison.noise_only and comparison.divergence is None


def test_a_wrong_op_after_a_callback_is_found():
    def f(x):
        y = jax.pure_callback(np.cos, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return jnp.tanh(y) * 2

    wrong = InterpreterBackend(ops={"stablehlo.tanh": off_by(np.float32(1.01), np.tanh)})
    found = si.compare(f, np.linspace(0, 1, 5, dtype=np.float32), backend=wrong).divergence
    assert found.op == "stablehlo.tanh" and found.kind == BEYOND


def test_equinox_runtime_checks_compare():
    eqx = pytest.importorskip("equinox")

    def checked(x):
        y = eqx.error_if(x, x < -10, "x too small")
        return jnp.tanh(y * 3).sum()

    comparison = si.compare(checked, np.linspace(-1, 1, 16, dtype=np.float32), backend="cpu", tolerance=(0.0, 0.0))
    assert comparison.noise_only
    with pytest.raises(si.InterpreterError, match="x too small"):
        si.compare(checked, np.full(4, -20, np.float32), backend="cpu")


def test_a_module_with_interp_callbacks_needs_the_function_for_a_jax_backend():
    def f(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    lowered = jax.jit(f).trace(np.ones(2, np.float32)).lower(lowering_platforms=("interp",))
    with pytest.raises(si.InterpreterError, match="give compare the function"):
        si.compare(lowered, np.ones(2, np.float32), backend="cpu")
    assert si.compare(lowered, np.ones(2, np.float32), backend=InterpreterBackend()).ok


@pytest.mark.parametrize("offset, kind", [(50.0, NOISE), (5000.0, UNBOUNDED)])
def test_a_result_that_differs_only_from_the_whole_program(offset, kind):
    """A backend whose prefixes agree with the interpreter but whose whole program (one
    result; the prefix returns the dot's and the multiply's) is ``offset`` off. The
    noise estimated for the whole program (runs with the dot moved within its bound,
    119.2, then doubled) covers 50, not 5000."""
    def whole_program_off(module_text, args):
        results = si.run(module_text, *args)
        return [r + np.float32(offset) for r in results] if len(results) == 1 else results

    comparison = si.compare(lambda a, b: jnp.dot(a, b) * 2, CANCELLING_A, CANCELLING_B, backend=whole_program_off)
    assert comparison.kinds == [kind] and comparison.ops[NOISE] == comparison.ops[BEYOND] == 0
    assert "result #0: the backend's value from the whole program is not the one its prefixes showed" in str(comparison)


def test_an_argument_returned_as_it_is_must_be_equal():
    def first_off(module_text, args):
        first, *rest = si.run(module_text, *args)
        return [first + np.float32(1e-7), *rest]

    comparison = si.compare(lambda a, b: (a, b * 2), np.float32(1), np.float32(2), backend=first_off,
                            tolerance=(0.0, 0.0))
    assert comparison.kinds == [BEYOND, None]


def test_xla_cpu_log1p_in_f64_is_within_its_measured_approximation():
    """XLA CPU's f64 log1p is up to 128 ULP off (tests/test_elementwise.py): noise, at no tolerance."""
    with jax.enable_x64(True):   # (the session's setting is left as it was)
        x = np.linspace(-0.9, 5, 4001)
        comparison = si.compare(jnp.log1p, x, backend="cpu", tolerance=(0.0, 0.0))
    assert not comparison.ok and comparison.noise_only and comparison.outputs[0].max_ulp > 4


def test_a_noise_run_that_left_the_programs_path_gives_no_allowance():
    """A run with every op moved that leaves a finite result no finite element (Diffrax's
    adaptive solve with moved step times: an infinite loss, gradients of 1e-43) left the
    program's path and is left out: counted, it made a gradient 10% off rounding noise. A
    run that makes a few elements infinite (an Adam update of a zero moment moved below
    zero under a square root) is kept; those elements alone get no allowance."""
    reference = [np.float32(2.5), np.array([1.0, 2.0], np.float32)]
    diverged = [np.float32(np.inf), np.array([1e-43, 1e-43], np.float32)]
    partly = [np.float32(2.5000002), np.array([np.inf, 2.0000005], np.float32)]
    outcomes = iter([diverged, partly, reference])
    runs = noise_runs(lambda listener: next(outcomes), "spec", reference)
    assert [id(run) for run in runs] == [id(partly), id(reference)]
    bound, alternatives = spread_allowance(reference[1], [run[1] for run in runs])
    assert within(reference[1], np.array([1.0, 2.0000005], np.float32), bound, alternatives).all()
    assert not within(reference[1], np.array([1.000001, 2.0], np.float32), bound, alternatives).all()   # 8 ULP
    assert not within(reference[1], np.array([1e-43, 1e-43], np.float32), bound, alternatives).any()


def test_an_infinite_result_is_kept_only_by_itself_or_by_what_a_noise_run_gave():
    """Every finite value is infinitely far from an infinity: the noise allows no distance
    there (log(exp(100)) = inf rewritten to 100 passed as noise), only the value itself or a
    run's value, as for NaN."""
    result = np.array([1.0, np.inf, -np.inf, np.nan], np.float32)
    bound, alternatives = spread_allowance(result, [np.array([1.0, np.finfo(np.float32).max, -np.inf, np.nan],
                                                             np.float32)])
    assert within(result, np.array([1.0, np.inf, -np.inf, np.nan], np.float32), bound, alternatives).all()
    ok = within(result, np.array([1.0, 100.0, -100.0, 5.0], np.float32), bound, alternatives)
    assert ok.tolist() == [True, False, False, False]
    assert within(result, np.array([1.0, np.finfo(np.float32).max, -np.inf, np.nan], np.float32), bound,
                  alternatives).all()   # what a run gave there


def test_a_difference_prints_with_the_digits_that_tell_the_two_values_apart():
    """One ULP of 0.00099999 (f32) apart: five significant digits showed the same number
    on both sides of "vs"; the report prints as many as the difference needs."""
    one_ulp_up = InterpreterBackend(ops={"stablehlo.multiply": lambda info: lambda a, b: np.nextafter(
        a * b, np.float32(1))}, name="one ULP up")
    x = np.float32(0.00099999)
    comparison = si.compare(lambda v: v * np.float32(1), x, backend=one_ulp_up, tolerance=(0, 0))
    difference = comparison.outputs[0]
    assert difference.ours == float(x) and difference.theirs == float(np.nextafter(x, np.float32(1)))
    ours, theirs = str(comparison).split("largest: ")[1].split(";")[0].split(" vs ")
    assert ours.removesuffix(" (interpreter)") != theirs.removesuffix(" (one ULP up)")
    assert np.float32(ours.split()[0]) == x and np.float32(theirs.split()[0]) == np.nextafter(x, np.float32(1))


def test_results_are_named_by_their_pytree_paths():
    wrong = InterpreterBackend(ops={"stablehlo.tanh": off_by(np.float32(1.01), np.tanh)}, name="wrong tanh")
    comparison = si.compare(lambda x, w: {"hidden": model(x, w)[1], "total": model(x, w)[0]}, X, W, backend=wrong)
    assert comparison.result_names == ("result['hidden']", "result['total']")
    lines = str(comparison).splitlines()
    assert lines[0].startswith("result['hidden'] differs (beyond bound") and lines[1].startswith("result['total'] differs")
    module = si.compare("""func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.tanh %a : tensor<2xf32>
  return %0 : tensor<2xf32>
}""", np.ones(2, np.float32), backend=wrong)
    assert str(module).startswith("result #0 differs")   # a module that names nothing: by number


@pytest.mark.parametrize("ours, theirs", [
    (1.0, float(np.nextafter(1.0, 2.0))),                              # float64 neighbours: 17 digits
    (float(np.float32(0.1)), float(np.nextafter(np.float32(0.1), np.float32(1)))),
    (complex(1, 0.1), complex(1, float(np.nextafter(0.1, 1.0)))),
    (float("nan"), 1.0), (2, 3), (True, False),
])
def test_two_different_numbers_never_print_alike(ours, theirs):
    from stablehlo_interp.judge.summary import format_pair

    first, second = format_pair(ours, theirs)
    assert first != second
    assert format_pair(ours, ours)[0] == format_pair(ours, ours)[1]


def test_xla_aborting_on_a_prefix_the_search_writes_ends_the_child_not_this_process(monkeypatch):
    """XLA's CPU runs the search's prefixes in a child process that reads this process's
    XLA flags: an unknown one aborts XLA there. The comparison of the results stands (XLA
    CPU flushes the subnormal product to zero: a difference), the note says why no op was
    searched for; without the flag, the search names the multiply."""
    def product(x):
        return jnp.log(x * np.float32(1e-30))

    x = np.float32([1e-10, 2.0])
    found = si.compare(jax.jit(product), x, backend="cpu")
    assert found.divergence is not None and found.divergence.op == "stablehlo.multiply", str(found)
    assert found.compiled_prefixes >= 1
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_no_such_flag_here=1")
    comparison = si.compare(jax.jit(product), x, backend="cpu")
    assert not comparison.ok and comparison.divergence is None
    assert comparison.note.startswith("no search for the first divergent op: cpu cannot run a prefix of the program (")
    assert "xla_no_such_flag_here" in comparison.note
