"""si.debug_nans: training loops run on XLA CPU at full speed; the call that returns a NaN
or inf is replayed on the interpreter, and its FloatingPointError names the call, the op
and the line (tools/debug_nans.py)."""

import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.tools.debug_nans import NonFiniteCall

STEPS, LATE = 1000, 900          # the loop's length, and the step (0-based) the NaN is brought in at
FEATURES, BATCH = 4, 8
RATE = 0.05


def line_of(marker: str) -> str:
    """``test_debug_nans.py:N``, N the line of this file that ends with ``# marker``."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    [number] = [index + 1 for index, text in enumerate(lines) if text.rstrip().endswith(f"# {marker}")]
    return f"test_debug_nans.py:{number}"


def data(seed: int = 0):
    """The loop's batches: positive features (a Poisson rate stays positive), targets."""
    rng = np.random.default_rng(seed)
    xs = rng.uniform(0.5, 1.5, (STEPS, BATCH, FEATURES)).astype(np.float32)
    ys = rng.uniform(0.5, 1.5, (STEPS, BATCH)).astype(np.float32)
    return xs, ys


def initial_params():
    return {"w": jnp.full((FEATURES,), 0.25, jnp.float32), "b": jnp.zeros((), jnp.float32)}


def sgd(loss_fn):
    """A jitted SGD step on ``loss_fn(params, x, y)``: (new params, loss)."""

    def step(params, x, y):  # the step
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - RATE * g, params, grads), loss

    return step


def train(step, batch_at, params=None, steps: int = STEPS):
    """Run the loop under the guard: the final params and the guard (or the error)."""
    params = initial_params() if params is None else params
    with si.debug_nans() as guard:
        for index in range(steps):
            params, _ = step(params, *batch_at(index))
    return params, guard


def batches_with(bad):
    """Batch ``index`` of the data, ``bad(x, y)`` of it at step LATE."""
    xs, ys = data()
    return lambda index: bad(xs[index], ys[index]) if index == LATE else (xs[index], ys[index])


def raised(step, bad) -> NonFiniteCall:
    with pytest.raises(FloatingPointError) as caught:
        train(step, batches_with(bad))
    error = caught.value
    assert isinstance(error, NonFiniteCall)
    assert error.call == LATE + 1 and str(error).startswith(f"call {LATE + 1} of {step._fun.__qualname__} (")
    return error


# ------------------------------------------------------------------ the classes of NaN


def poisson_loss(params, x, y):
    rate = x @ params["w"] + params["b"]
    return jnp.mean(rate - y * jnp.log(rate))  # log of a negative


def test_log_of_a_negative():
    error = raised(jax.jit(sgd(poisson_loss)), lambda x, y: (-x, y))
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in str(error)
    assert error.report.op == "stablehlo.log"


def normalized_loss(params, x, y):
    x = x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))  # 0/0
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def test_zero_over_zero_in_a_hand_written_norm():
    def zero_row(x, y):
        x = x.copy()
        x[5] = 0.0
        return x, y

    error = raised(jax.jit(sgd(normalized_loss)), zero_row)
    assert f"NaN made by stablehlo.divide at {line_of('0/0')}" in str(error)


def gp_loss(params, x, noise):
    kernel = x @ x.T + noise[0] * jnp.eye(BATCH)
    factor = jnp.linalg.cholesky(kernel)  # cholesky
    loglike = -jnp.sum(jnp.log(jnp.diagonal(factor))) + params["b"]
    return jnp.where(jnp.isfinite(loglike), loglike, -jnp.inf)  # where isfinite


def test_failed_cholesky_behind_where_isfinite():
    def gp_batches(index):
        xs, _ = data()
        return xs[index], np.full((BATCH,), -100.0 if index == LATE else 1.0, np.float32)

    with pytest.raises(FloatingPointError) as caught:
        train(jax.jit(lambda p, x, noise: (p, gp_loss(p, x, noise))), gp_batches)
    error = caught.value
    assert error.call == LATE + 1
    text = str(error)
    # the -inf the where picked, and why: isfinite(loglike) was false, loglike NaN because
    # the factorization failed; noise -100 on the diagonal: the first leading minor is negative
    assert "inf made by stablehlo.constant" in text
    assert f"func.call @_where ({line_of('where isfinite')})" in text
    assert (f"why: chosen by stablehlo.select at {line_of('where isfinite')} (gp_loss): its predicate was false, "
            f"computed by stablehlo.is_finite at {line_of('where isfinite')} (gp_loss)") in text
    # JAX lowers it for the CPU as a LAPACK call and for other platforms as the spec's cholesky
    factorization = r"stablehlo.custom_call @lapack_[sd]potrf_ffi" if jax.default_backend() == "cpu" else "stablehlo.cholesky"
    assert re.search(rf"← {factorization} at {line_of('cholesky')} \(gp_loss\) failed: "
                     r"the matrix is not positive definite: its leading minor of order 1 is not \(first failing column 1\)",
                     text)


def naive_softmax_loss(params, x, y):
    score = x @ params["w"] + params["b"]
    logits = jnp.stack([score, -score, 2 * score], axis=-1)   # one of them is large and positive
    e = jnp.exp(logits)  # exp overflow
    p = e / jnp.sum(e, axis=-1, keepdims=True)
    return -jnp.mean(jnp.log(p[:, 0]))


def test_exp_overflow_in_a_softmax_without_max_subtraction():
    error = raised(jax.jit(sgd(naive_softmax_loss)), lambda x, y: (x * 1e4, y))
    assert f"inf made by stablehlo.exponential at {line_of('exp overflow')}" in str(error)


def squared_loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)  # squared error


def test_a_nan_brought_in_by_the_data():
    def with_nan(x, y):
        x = x.copy()
        x[3, 2] = np.nan
        return x, y

    error = raised(jax.jit(sgd(squared_loss)), with_nan)
    text = str(error)
    assert "NaN in argument" in text and line_of("squared error") in text
    assert np.isnan(error.arguments[1][3, 2])


# ------------------------------------------------------------------ loops people write


def test_a_finite_loop_raises_nothing_and_computes_what_the_backend_computes():
    step = jax.jit(sgd(squared_loss))
    xs, ys = data()
    params, guard = train(step, lambda index: (xs[index], ys[index]))
    expected = initial_params()
    for index in range(STEPS):
        expected, _ = step(expected, xs[index], ys[index])
    assert guard.calls[step._fun] == STEPS
    for name in expected:
        np.testing.assert_array_equal(params[name], expected[name])


def test_a_donated_step_is_replayed_on_the_inputs_from_before_the_call():
    donating = jax.jit(sgd(poisson_loss), donate_argnums=0)
    batch_at = batches_with(lambda x, y: (-x, y))
    with pytest.raises(FloatingPointError) as caught:
        train(donating, batch_at)
    error = caught.value
    assert error.call == LATE + 1
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in str(error)
    # the params the step was given: the loop's, recomputed without donation
    expected = initial_params()
    plain = jax.jit(sgd(poisson_loss))
    for index in range(LATE):
        expected, _ = plain(expected, *batch_at(index))
    for name in expected:
        np.testing.assert_array_equal(error.arguments[0][name], expected[name])


def test_a_donated_argument_made_outside_the_block_on_the_first_call():
    donating = jax.jit(sgd(poisson_loss), donate_argnums=0)
    xs, ys = data()
    donating(initial_params(), xs[0], ys[0])          # compiled before: the block's first call is its own
    params = initial_params()
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        donating(params, -xs[0], ys[0])
    assert params["w"].is_deleted()                   # the argument was donated
    assert caught.value.call == 1 and "stablehlo.log" in str(caught.value)
    np.testing.assert_array_equal(caught.value.arguments[0]["w"], initial_params()["w"])
    # on the fast path (its second call in the block), given arguments made outside the block:
    # replayed from the copies its program made of them
    from jax._src import test_util as jtu

    first, second = (jax.tree.map(lambda value: value + shift, initial_params()) for shift in (0, 1))
    fresh = jax.jit(sgd(poisson_loss), donate_argnums=0)
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        fresh(first, xs[1], ys[1])
        with jtu.count_pjit_cpp_cache_miss() as python_path:
            fresh(second, -xs[2], ys[2])
    assert python_path() == 0 and second["w"].is_deleted()
    assert caught.value.call == 2 and "stablehlo.log" in str(caught.value)
    np.testing.assert_array_equal(caught.value.arguments[0]["w"], initial_params()["w"] + 1)


def test_a_scan_inside_jit():
    def epoch(params, xs, ys):
        def body(p, batch):
            return sgd(poisson_loss)(p, *batch)

        return jax.lax.scan(body, params, (xs, ys))

    xs, ys = data()
    step = jax.jit(epoch)
    bad = xs[:20].copy()
    bad[13] = -bad[13]
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        for index in range(40):
            step(initial_params(), bad if index == 30 else xs[:20], ys[:20])
    text = str(caught.value)
    assert caught.value.call == 31
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in text


def test_sharded_arrays_on_eight_devices():
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices("cpu")[:8])
    rows = NamedSharding(mesh, P("data"))
    step = jax.jit(sgd(poisson_loss))
    xs, ys = data()
    params = initial_params()
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        for index in range(60):
            x = -xs[index] if index == 50 else xs[index]
            params, _ = step(params, jax.device_put(x, rows), jax.device_put(ys[index], rows))
    assert caught.value.call == 51
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in str(caught.value)


def test_the_guard_leaves_when_the_block_ends():
    step = jax.jit(sgd(poisson_loss))
    xs, ys = data()
    with si.debug_nans():
        step(initial_params(), xs[0], ys[0])
    params, loss = step(initial_params(), -xs[0], ys[0])     # no guard: JAX's NaN comes back
    assert np.isnan(loss)


def test_the_environment_turns_it_on_for_a_script():
    """... and stays on when the script sets JAX's own debug_infs option (which resets the
    post-call hook of every thread)."""
    script = ("import jax, jax.numpy as jnp\n"
              "f = jax.jit(lambda x: jnp.sqrt(x))\n"
              "f(jnp.ones(2))\n"
              "jax.config.update('jax_debug_infs', False)\n"
              "try:\n    f(-jnp.ones(2))\nexcept FloatingPointError as e:\n    print(type(e).__name__, e.call)\n")
    environment = {**os.environ, "STABLEHLO_INTERP_DEBUG_NANS": "1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "NonFiniteCall 2", done.stderr


def test_a_value_the_backend_made_and_the_program_did_not():
    # XLA CPU flushes the subnormal x to zero: log(0) is -inf there; the program (the
    # interpreter, IEEE arithmetic) computes log(1e-39 * 1e10), about -66.8
    step = jax.jit(lambda x: jnp.log(x * 1e10))
    tiny = np.float32(1e-39)
    assert np.isneginf(step(tiny)) and np.isfinite(si.run(step, tiny))
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        step(tiny)
    error = caught.value
    assert error.report is None and error.call == 1
    assert "replay of the same program on the same inputs is finite: the backend made the value" in str(error)
    assert "si.passes(error.lowered, *error.arguments, **error.keyword_arguments)" in str(error)
    assert error.arguments == (tiny,) and error.lowered.as_text() == step.lower(tiny).as_text()


def test_a_block_inside_a_block_checks_once_and_counts_its_own_calls():
    step = jax.jit(sgd(poisson_loss))
    xs, ys = data()
    with si.debug_nans() as outer:
        step(initial_params(), xs[0], ys[0])
        with pytest.raises(FloatingPointError) as caught, si.debug_nans() as inner:
            step(initial_params(), xs[1], ys[1])
            step(initial_params(), -xs[2], ys[2])
    assert caught.value.call == 2 and inner.calls[step._fun] == 2 and outer.calls[step._fun] == 1


def test_a_replay_that_fails_still_reports_the_backends_nan(monkeypatch):
    from stablehlo_interp.tools import debug_nans

    def unable(*args, **kwargs):
        raise si.InterpreterError("no replay today")

    monkeypatch.setattr(debug_nans, "find_nonfinite", unable)
    step = jax.jit(sgd(poisson_loss))
    xs, ys = data()
    with pytest.raises(FloatingPointError) as caught, si.debug_nans():
        step(initial_params(), -xs[0], ys[0])
    assert str(caught.value).endswith(f"returned a NaN or inf on {jax.default_backend()}; the interpreter could "
                                      "not replay it: InterpreterError: no replay today")
    assert isinstance(caught.value.__cause__, si.InterpreterError)


def test_every_nth_call_compared_with_the_interpreter():
    step = jax.jit(sgd(squared_loss))
    xs, ys = data()
    with si.debug_nans(compare_every=250) as guard:
        params = initial_params()
        for index in range(STEPS):
            params, _ = step(params, xs[index], ys[index])
    assert [number for _, number in guard.compared] == [250, 500, 750, 1000]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a TPU declares that it flushes subnormals (its "
                    "precision, judge/precision.py): the same call is within it there")
def test_the_first_compared_call_that_differs_beyond_noise():
    # XLA CPU flushes the subnormal x to zero: log(1e-30) there, log(1.1e-29) in the program
    from stablehlo_interp.tools.debug_nans import DivergentCall

    step = jax.jit(lambda x: jnp.log(x * 1e10 + 1e-30))
    values = [np.float32(1.0), np.float32(2.0), np.float32(1e-39), np.float32(1e-39)]
    with pytest.raises(DivergentCall) as caught, si.debug_nans(compare_every=2):
        for value in values:
            step(value)
    assert caught.value.call == 4 and not caught.value.comparison.explained
    text = str(caught.value)
    assert text.startswith("call 4 of test_the_first_compared_call_that_differs_beyond_noise.<locals>.<lambda>")
    assert "first divergent op: stablehlo.multiply" in text


def test_static_arguments_on_the_fast_path():
    def scaled_log(x, power, *, offset):
        return jnp.log(x ** power + offset)  # static arguments

    step = jax.jit(scaled_log, static_argnums=1, static_argnames="offset")
    large, small = np.full(3, 4.0, np.float32), np.full(3, 2.0, np.float32)
    with pytest.raises(FloatingPointError) as caught, si.debug_nans() as guard:
        step(large, 2, offset=-10.0)     # 6: finite (the Python path: the first call in the block)
        step(large, 2, offset=-10.0)     # the fast path
        step(small, 2, offset=-10.0)     # -6: the fast path's NaN, replayed with the static arguments
    assert caught.value.call == 3 and guard.calls[scaled_log] == 3
    assert f"NaN made by stablehlo.log at {line_of('static arguments')}" in str(caught.value)
    np.testing.assert_array_equal(caught.value.arguments[0], small)


@pytest.mark.parametrize("every", [0, -2, 1.5, True, "3"])
def test_compare_every_that_is_not_a_positive_int_is_a_clear_error(every):
    with pytest.raises(ValueError, match=rf"compare_every .* a positive int .*not {re.escape(repr(every))}"):
        with si.debug_nans(compare_every=every):
            pass


@pytest.mark.parametrize("dtype, bad", [("float16", np.inf), ("bfloat16", np.nan), ("float64", -np.inf),
                                        ("complex64", complex(0, np.inf)), ("float32", np.nan)])
def test_one_bad_element_among_results_of_every_float_dtype_is_found(dtype, bad):
    """The check joins the results of one dtype into one vector: one element of one result
    is found whatever its dtype, and finite extremes of each dtype (f64's 1e300, f16's 65504,
    f32's and bf16's 3e38) are no alarm. (A TPU's f64 has f32's range: docs/findings.md#tpu-f64.)"""
    largest_f64 = 1e300 if jax.default_backend() == "cpu" else 1e38
    extremes = {"float16": 65504.0, "bfloat16": 3e38, "float64": largest_f64, "complex64": complex(3e38, -3e38),
                "float32": 3e38}

    @jax.jit
    def results(late):
        made = {name: jnp.full((3, 5), value, name) for name, value in extremes.items()}
        zeros = jnp.zeros(7, dtype)
        return made | {"count": jnp.arange(4), "bad": jnp.where(late, zeros.at[6].set(bad), zeros)}

    with si.debug_nans() as guard:
        for _ in range(20):
            results(False)
    assert guard.calls == {results._fun: 20}
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(20):
            results(index == 14)
    assert caught.value.call == 15 and "result['bad']" in str(caught.value)


def test_the_check_is_read_one_call_behind_and_at_the_blocks_end():
    """A call's check is dispatched with it and read at the next call (its error raised
    there, naming the call that made the NaN), or at the block's end; an error of the
    block's own that follows the NaN call is the context of the guard's."""
    step = jax.jit(lambda x: jnp.log(x))
    done = []
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for value in (1.0, -1.0, 2.0):
            step(np.float32(value))
            done.append(value)
    assert done == [1.0, -1.0] and caught.value.call == 2
    assert "NaN made by stablehlo.log" in str(caught.value)
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        step(np.float32(-1.0))
    assert caught.value.call == 1
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        loss = step(np.float32(-1.0))
        if np.isnan(loss):
            raise KeyError("the loop's own check")
    assert caught.value.call == 1 and isinstance(caught.value.__context__, KeyError)


def test_equinox_filter_jit_and_a_flax_nnx_training_loop():
    """Libraries' own jits: an Equinox ``filter_jit`` step (named as the user's function,
    not by Equinox's wrapper's file) and a Flax NNX + Optax loop whose data brings a NaN."""
    import equinox as eqx
    import optax
    from flax import nnx

    class Weights(eqx.Module):
        w: jax.Array

    @eqx.filter_jit
    def eqx_step(weights, x):
        grad = jax.grad(lambda m: jnp.sum(jnp.sqrt(x @ m.w)))(weights)  # eqx sqrt
        return jax.tree.map(lambda a, b: a + 0.01 * b, weights, grad)

    xs, _ = data()
    weights = Weights(jnp.full((FEATURES,), 0.25, jnp.float32))
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(STEPS):
            weights = eqx_step(weights, -xs[index] if index == LATE else xs[index])
    assert caught.value.call == LATE + 1
    assert str(caught.value).startswith(f"call {LATE + 1} of test_equinox_filter_jit_and_a_flax_nnx_training_loop"
                                        ".<locals>.eqx_step returned a NaN or inf")   # (not Equinox's _jit.py)
    assert f"NaN made by stablehlo.sqrt at {line_of('eqx sqrt')}" in str(caught.value)

    model = nnx.Linear(FEATURES, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def nnx_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x)[:, 0] - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    xs, ys = data()
    xs[LATE, 2, 1] = np.nan
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(STEPS):
            nnx_step(model, optimizer, xs[index], ys[index])
    assert caught.value.call == LATE + 1 and "NaN in argument x" in str(caught.value)


# ------------------------------------------------------------------ the check in the call's own program


def test_the_check_is_part_of_the_calls_program_which_keeps_jits_fast_path_and_its_values(monkeypatch):
    """A step on one device runs, under the guard, its own program with the check as one
    more result (no check program of its own runs after the call): one compile and one
    pass through JAX's Python path for the whole loop (the C++ fast path runs every later
    call), the results bit for bit those of the program without the guard, a NaN at call
    90 found through the program's check."""
    from jax._src import test_util as jtu
    from stablehlo_interp.tools import debug_nans

    def no_program_of_its_own():
        raise AssertionError("a step on one device is checked by its own program")

    monkeypatch.setattr(debug_nans, "_finite_check", no_program_of_its_own)

    step = jax.jit(sgd(poisson_loss))
    xs, ys = data()
    plain = initial_params()
    for index in range(100):
        plain, plain_loss = step(plain, xs[index], ys[index])
    with jtu.count_pjit_cpp_cache_miss() as python_path, jtu.count_jit_compilation_cache_miss() as compiles:
        params, guard = train(step, lambda index: (xs[index], ys[index]), steps=100)
    assert (python_path(), compiles(), guard.calls[step._fun]) == (1, 1, 100)
    for name in plain:
        np.testing.assert_array_equal(params[name], plain[name])
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(100):
            step(initial_params(), -xs[index] if index == 89 else xs[index], ys[index])
    assert caught.value.call == 90 and "NaN made by stablehlo.log" in str(caught.value)


def test_results_of_every_kind_pass_through_the_check_unchanged():
    """Results the check's program must give back as they are: an argument passed through
    (a NaN in it is the data's), a constant, integers, complex, half floats, a keyword
    argument and a static one; and a function with no float result at all."""
    from functools import partial

    @partial(jax.jit, static_argnums=1)
    def kinds(x, power, *, count):
        return {"x": x, "one": 1.0, "count": count + 1, "z": (x * 1j).astype(jnp.complex64),
                "half": x.astype(jnp.float16) ** power, "brain": x.astype(jnp.bfloat16)}

    counting = jax.jit(lambda n: n * 2)
    x = jnp.arange(3.0, dtype=jnp.float32)   # (f64 times 1j is complex128, which XLA's TPU compiler aborts on)
    expected = kinds(x, 2, count=jnp.int32(7))
    with si.debug_nans() as guard:
        for _ in range(30):
            got = kinds(x, 2, count=jnp.int32(7))
            doubled = counting(jnp.int32(4))
    assert guard.calls == {kinds._fun: 30, counting._fun: 30} and int(doubled) == 8
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for name in expected:
        assert got[name].dtype == expected[name].dtype and got[name].weak_type == expected[name].weak_type
        np.testing.assert_array_equal(got[name], expected[name])
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(30):
            kinds(x.at[1].set(np.nan) if index == 20 else x, 2, count=jnp.int32(7))
    assert caught.value.call == 21 and "NaN in argument x" in str(caught.value)


def test_a_call_with_a_host_callback_takes_the_python_path_checked_without_recompiling():
    """A call with a host callback never takes the fast path: each call is checked by the
    compiled program with the check, compiled once."""
    from jax._src import test_util as jtu

    seen = []

    @jax.jit
    def logged(x):
        jax.debug.callback(lambda value: seen.append(float(value)), x[0])
        return jnp.log(x)

    good, bad = jnp.ones(3), jnp.full(3, -1.0)
    with jtu.count_jit_compilation_cache_miss() as compiles, si.debug_nans() as guard:
        for _ in range(40):
            logged(good)
    assert (compiles(), guard.calls[logged._fun], seen) == (1, 40, [1.0] * 40)
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(40):
            logged(bad if index == 33 else good)
    assert caught.value.call == 34
    assert "NaN made by stablehlo.log" in str(caught.value)


def test_the_guard_outlives_jax_resetting_its_hook_while_tracing():
    """``jnp.var`` traces under ``config.debug_nans(False)``, which resets the thread's
    post-call hook when it ends (as does any ``jax.debug_nans``/``jax.debug_infs`` block
    of the user's): the guard is put back, and a NaN made after the step (or an eager
    ``jnp.var``) was traced inside the block is still found."""

    def normalized_loss(params, x, y):
        centred = (x - jnp.mean(x, axis=0)) / jnp.sqrt(jnp.var(x, axis=0) + 1.0)
        return poisson_loss(params, jnp.abs(centred) + 0.5 + x * 0, y)

    step = jax.jit(sgd(normalized_loss))
    xs, ys = data()
    params = initial_params()
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(60):
            with jax.debug_infs(False):
                jnp.var(xs[index])
            x = np.where(np.arange(FEATURES) == 1, np.inf, xs[index]) if index == 50 else xs[index]
            params, _ = step(params, x, ys[index])
    assert caught.value.call == 51


def test_sharded_results_checked_where_their_blocks_live():
    """Results sharded over a 2x4 mesh (rows over one axis, columns over the other, one
    replicated) are checked block by block on their devices: one inf in one device's
    block is found, finite extremes are no alarm."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((2, 4), ("rows", "columns"), axis_types=(AxisType.Auto,) * 2,
                         devices=jax.devices("cpu")[:8])
    shardings = {"grid": NamedSharding(mesh, P("rows", "columns")), "columns": NamedSharding(mesh, P(None, "columns")),
                 "copy": NamedSharding(mesh, P())}

    @partial_out(shardings)
    def blocks(scale, bad_at):
        grid = jnp.full((4, 8), 3e38, jnp.float32) * scale
        grid = jnp.where(jnp.arange(32).reshape(4, 8) == bad_at, jnp.inf, grid)
        return {"grid": grid, "columns": jnp.ones((2, 8), jnp.bfloat16), "copy": jnp.full(5, 1e300, jnp.float64)
                if jax.config.jax_enable_x64 else jnp.full(5, 65504.0, jnp.float16)}

    with si.debug_nans() as guard:
        for _ in range(10):
            blocks(jnp.float32(1.0), jnp.int32(-1))
    assert guard.calls == {blocks._fun: 10}
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(10):
            blocks(jnp.float32(1.0), jnp.int32(3 * 8 + 6 if index == 7 else -1))   # row 3, column 6: device 7
    assert caught.value.call == 8 and "result['grid']" in str(caught.value)


def partial_out(shardings):
    def jitted(function):
        return jax.jit(function, out_shardings=shardings)

    return jitted


def test_a_donated_state_of_every_kind_is_replayed_from_the_copies_the_program_made():
    """A donating step's program also copies its donated arguments (each dtype's joined
    into one vector, a PRNG key a copy of its own): the state a late call was given, f32
    weights, an int32 counter, f16 and bf16 moments and a PRNG key, is replayed exactly as
    the loop made it (recomputed here without donation)."""

    def update(state, x):
        key, noise_key = jax.random.split(state["key"])
        noise = jax.random.normal(noise_key, state["w"].shape, jnp.float32)
        w = state["w"] + 0.01 * noise + jnp.sqrt(x)  # sqrt of the data
        return {"w": w, "count": state["count"] + 1, "half": (state["half"] + 1).astype(jnp.float16),
                "brain": (state["brain"] * 2).astype(jnp.bfloat16), "key": key}

    def initial():
        return {"w": jnp.zeros((3, 4), jnp.float32), "count": jnp.int32(0), "half": jnp.zeros(5, jnp.float16),
                "brain": jnp.ones((2, 2), jnp.bfloat16), "key": jax.random.key(7)}

    donating = jax.jit(update, donate_argnums=0)
    inputs = [np.full((3, 4), -1.0 if index == 30 else 1.0, np.float32) for index in range(40)]
    state = initial()
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for x in inputs:
            state = donating(state, x)
    assert caught.value.call == 31 and "stablehlo.sqrt" in str(caught.value)
    expected = initial()
    plain = jax.jit(update)
    for x in inputs[:30]:
        expected = plain(expected, x)
    replayed = caught.value.arguments[0]
    for name in ("w", "count", "half", "brain"):
        assert np.asarray(replayed[name]).dtype == expected[name].dtype
        np.testing.assert_array_equal(replayed[name], expected[name])
    np.testing.assert_array_equal(jax.random.key_data(replayed["key"]), jax.random.key_data(expected["key"]))


def test_a_step_compiled_ahead_of_time():
    """``jax.jit(step).lower(...).compile()``: its calls are checked (by a program of its
    own after each call); compiled inside the block, its NaN is replayed (donated
    arguments from host copies made before each call); compiled before the block, the
    error says why it cannot be replayed."""
    xs, ys = data()
    params = initial_params()
    inside_error, outside_error = None, None
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans() as guard:
        compiled = jax.jit(sgd(poisson_loss), donate_argnums=0).lower(params, xs[0], ys[0]).compile()
        for index in range(60):
            params, _ = compiled(params, -xs[index] if index == 40 else xs[index], ys[index])
    inside_error = caught.value
    assert inside_error.call == 41 and inside_error.name == "step (compiled ahead of time)"
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in str(inside_error)
    expected = initial_params()
    plain = jax.jit(sgd(poisson_loss))
    for index in range(40):
        expected, _ = plain(expected, xs[index], ys[index])
    for name in expected:
        np.testing.assert_array_equal(inside_error.arguments[0][name], expected[name])
    assert guard.calls == {compiled: 41}

    before = jax.jit(sgd(poisson_loss)).lower(initial_params(), xs[0], ys[0]).compile()
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(10):
            before(initial_params(), -xs[index] if index == 5 else xs[index], ys[index])
    outside_error = caught.value
    assert outside_error.call == 6 and outside_error.report is None
    assert "it cannot be replayed: it was compiled ahead of time outside si.debug_nans()" in str(outside_error)


def test_a_nan_made_inside_a_shard_map_step_is_named_at_its_op_on_its_device():
    """A step whose loss is computed in ``jax.shard_map`` over 4 devices (each device its
    rows, a ``psum`` of the partial losses): the NaN brought in by device 3's rows at
    call 31 is named at the body's log, on device 3."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices("cpu")[:4])

    def local_loss(params, x, y):
        rate = x @ params["w"] + params["b"]
        return jax.lax.psum(jnp.sum(rate - y * jnp.log(rate)), "data")  # sharded log

    loss = jax.shard_map(local_loss, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
    step = jax.jit(sgd(loss))
    rows = NamedSharding(mesh, P("data"))
    xs, ys = data()
    params = initial_params()
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for index in range(40):
            x = xs[index].copy()
            if index == 30:
                x[7] = -x[7]          # row 7: device 3's block of 8 rows over 4 devices
            params, _ = step(params, jax.device_put(x, rows), jax.device_put(ys[index], rows))
    text = str(caught.value)
    assert caught.value.call == 31
    inside = text[text.index("inside sdy.manual_computation, run per device:"):]
    # the psum gives every device the NaN: each names the log that made it, on device 3
    for device in range(4):
        answer = caught.value.report.inside_manual.devices[device].origins[0]
        assert (answer.op, answer.process) == ("stablehlo.log", 3)
    assert f"NaN made by stablehlo.log at {line_of('sharded log')}" in inside and "on device 3" in inside


def test_a_pmapped_step():
    """``jax.pmap`` (JAX 0.10: jit of a ``shard_map`` of a body of pmap's own) is checked
    as the user's function: a data-parallel step over 4 devices (gradients averaged with
    ``pmean``) whose device 2 gets the bad batch at call 21 is named, with the log that
    made the NaN on device 2."""

    def step(params, x, y):
        loss, grads = jax.value_and_grad(poisson_loss)(params, x, y)
        grads = jax.lax.pmean(grads, "devices")
        return jax.tree.map(lambda p, g: p - RATE * g, params, grads), loss

    parallel = jax.pmap(step, axis_name="devices", devices=jax.devices("cpu")[:4])
    xs, ys = data()
    params = jax.tree.map(lambda p: jnp.stack([p] * 4), initial_params())
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans() as guard:
        for index in range(30):
            x = np.stack([xs[(4 * index + d) % STEPS] for d in range(4)])
            if index == 20:
                x[2] = -x[2]
            params, _ = parallel(params, x, np.stack([ys[(4 * index + d) % STEPS] for d in range(4)]))
    error = caught.value
    assert error.call == 21 and error.name == "step (pmap)"
    assert {origin.process for answer in error.report.inside_manual.devices.values() for origin in answer.origins} \
        == {2}
    assert f"NaN made by stablehlo.log at {line_of('log of a negative')}" in str(error)
    assert list(guard.calls.values()) == [22]   # (read one call behind: the error at the next call)


def test_a_program_the_interpreter_cannot_run_for_its_platform_is_replayed_as_lowered_for_the_cpu(monkeypatch):
    """A TPU's lowering of a host callback passes its operands over transfer channels the
    interpreter cannot receive (found on the TPU: "nothing to receive on channel 3"). Made
    here by a platform that says it is a TPU and a first replay that fails so: the
    function lowered for the CPU is replayed instead, and the error says so."""
    from stablehlo_interp.tools import debug_nans

    replays = []

    def first_fails(lowered, *args, **kwargs):
        replays.append(lowered)
        if len(replays) == 1:
            raise ValueError("nothing to receive on channel 3")
        return si.find_nonfinite(lowered, *args, **kwargs)

    monkeypatch.setattr(debug_nans, "find_nonfinite", first_fails)
    monkeypatch.setattr(debug_nans, "_platforms", lambda where: "tpu")
    step = jax.jit(lambda x: jnp.log(x))
    with pytest.raises(NonFiniteCall) as caught, si.debug_nans():
        for value in (1.0, 2.0, -1.0, 3.0):
            step(np.float32(value))
    text = str(caught.value)
    assert caught.value.call == 3 and len(replays) == 2
    assert text.startswith(f"call 3 of {step._fun.__qualname__} (")
    assert ("returned a NaN or inf on tpu; the interpreter could not run its program for tpu (ValueError: nothing to "
            "receive on channel 3), so it replayed the function lowered for the CPU; the interpreter replayed it on "
            "the same inputs:\n") in text
    assert "NaN made by stablehlo.log" in text and caught.value.report is not None
