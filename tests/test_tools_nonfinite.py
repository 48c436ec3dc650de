"""si.find_nonfinite: where the NaNs and infs of a program's results came from (the op
that made them from finite operands), and, with mode="first", the first op anywhere
whose results hold a NaN or inf that its operands did not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.tools import NonFiniteFinder


def running_log_sum(xs):
    def body(total, x):
        total = total + jnp.log(x)     # NaN at the iteration where x < 0
        return total, total * 2
    return jax.lax.scan(body, 0.0, xs)


LOG_LINE = running_log_sum.__code__.co_firstlineno + 2


def test_nan_introduced_inside_a_scan():
    xs = np.array([1.0, 2.0, -3.0, 4.0], np.float32)
    report = si.find_nonfinite(running_log_sum, xs)
    # both results hold NaNs: the total, and the running totals from iteration 2 on
    assert [index for index, _ in report.nonfinite_results] == [0, 1]
    assert len(report.origins) == 1
    origin = report.origins[0]
    assert origin.op == report.op == "stablehlo.log"
    assert origin.location.frame.line == LOG_LINE
    assert [(c.op, c.region, c.call) for c in origin.stack] == [
        ("stablehlo.while", "body", 2), ("func.call", "@closed_call", 0)]
    assert origin.new == [(0, "nan", 1, ())] and origin.reaches == (0, 1) and origin.executions == 1
    np.testing.assert_array_equal(origin.operands[0], np.float32(-3.0))
    assert np.isnan(origin.results[0])
    # from the log: the add, out of the call, into iteration 3 and out of the loop; without
    # jax_enable_x64 (which other tests switch on) the carry goes through a convert first
    ops = [link.op for link in origin.chain]
    converted = ops[2:3] == ["stablehlo.convert"]
    assert [op for op in ops if op != "stablehlo.convert"] == [
        "stablehlo.add", "func.call @closed_call", "stablehlo.add", "func.call @closed_call", "stablehlo.while"]
    assert [call.call for call in origin.chain[2].stack] == [3, 0]
    lines = str(report).splitlines()
    assert lines[:2] == ["non-finite result[0]: f32[] nan", "non-finite result[1]: f32[4] [0 1.3863 nan nan]"]
    assert lines[2] == f"NaN made by stablehlo.log at test_tools_nonfinite.py:{LOG_LINE} " \
                       "(running_log_sum.<locals>.body)"
    assert lines[3] == "  source: total = total + jnp.log(x)     # NaN at the iteration where x < 0"
    assert lines[4:6] == ["  result #0 has 1 NaN: f32[] nan", "  operand #0: f32[] -3"]
    assert lines[6].startswith("  inside func.call @closed_call at test_tools_nonfinite.py:")
    assert lines[7].startswith("  inside stablehlo.while at") and lines[7].endswith("body, iteration 2")
    add = f"stablehlo.add (test_tools_nonfinite.py:{LOG_LINE})"
    call = f"func.call @closed_call (test_tools_nonfinite.py:{LOG_LINE + 2})"
    if converted:
        convert = f"stablehlo.convert (test_tools_nonfinite.py:{LOG_LINE})"
        path = f"{add} → {call} → {convert} → {add} → {call}"
    else:    # the same links twice: written once (compress_chain)
        path = f"[{add} → {call}] ×2"
    loop = f"stablehlo.while (test_tools_nonfinite.py:{LOG_LINE + 2})"
    assert lines[8] == f"  reaches result[0], result[1]: {path} → {loop} → result[0]"


def test_mode_first_reports_the_first_op_anywhere():
    xs = np.array([1.0, 2.0, -3.0, 4.0], np.float32)
    report = si.find_nonfinite(running_log_sum, xs, mode="first")
    assert report.op == "stablehlo.log" and report.new == [(0, "nan", 1, ())]
    lines = str(report).splitlines()
    assert lines[0] == f"first non-finite value: stablehlo.log at test_tools_nonfinite.py:{LOG_LINE} " \
                       "(running_log_sum.<locals>.body)"
    assert lines[2:4] == ["  result #0 has 1 NaN: f32[] nan", "  operand #0: f32[] -3"]
    assert lines[5].startswith("  inside stablehlo.while at") and lines[5].endswith("body, iteration 2")
    with pytest.raises(ValueError, match="mode is one of origins, first"):
        si.find_nonfinite(running_log_sum, xs, mode="last")


def test_inf_and_nan_of_one_op_and_where_they_are():
    report = si.find_nonfinite(lambda x: jnp.log(x) + 1, np.array([1.0, 0.0, -1.0, 2.0], np.float32))
    assert report.op == "stablehlo.log"
    assert report.new == [(0, "nan", 1, (2,)), (0, "inf", 1, (1,))]
    assert "result #0 has 1 NaN (first at [2]) and 1 inf (first at [1])" in str(report)


def test_the_op_that_makes_it_not_the_ops_it_flows_through():
    def f(x, y):
        big = jnp.exp(x)        # overflows to inf
        return (big - big) * y  # inf - inf is a NaN, but the inf came first

    report = si.find_nonfinite(f, np.float32(100.0), np.float32(2.0))
    assert report.op == "stablehlo.exponential" and report.new[0][1] == "inf"


def test_the_infinities_jax_writes_as_reduction_identities_are_not_reported():
    # softmax reduces with a max whose initial value is the constant -inf; the first
    # non-finite value the program computes is the log of a negative number.
    x = np.array([1.0, 2.0, 3.0], np.float32)
    report = si.find_nonfinite(lambda x: jnp.log(jax.nn.softmax(x) - 0.5), x)
    assert report.op == "stablehlo.log"
    assert report.new == [(0, "nan", 2, (0,))]   # softmax(x) = [0.090, 0.245, 0.665]


def test_a_nan_constant_is_reported():
    report = si.find_nonfinite(lambda x: jnp.where(x > 0, x, jnp.nan), np.array([1.0, -1.0], np.float32))
    assert report.op == "stablehlo.constant" and report.new[0][1] == "nan"


def embedding_loss(table, ids, target):
    vectors = jnp.take(table, ids, axis=0)    # lowers to func.call @_take: gather, then a NaN fill
    return jnp.log(vectors.sum(-1) - target).mean()   # log of a negative: the loss's NaN


EMBEDDING_LOG_LINE = embedding_loss.__code__.co_firstlineno + 2


def test_a_take_fill_that_is_selected_away_is_not_blamed():
    table = np.arange(15, dtype=np.float32).reshape(5, 3)   # row sums 3, 12, 21, 30, 39
    ids = np.array([1, 3], np.int32)
    report = si.find_nonfinite(embedding_loss, table, ids, np.float32(20.0))   # log([-8, 10])
    assert [o.op for o in report.origins] == ["stablehlo.log"]
    origin = report.origins[0]
    assert origin.location.frame.line == EMBEDDING_LOG_LINE and origin.stack == ()
    assert origin.new == [(0, "nan", 1, (0,))]
    np.testing.assert_array_equal(origin.operands[0], np.float32([-8.0, 10.0]))
    assert [link.op for link in origin.chain] == ["stablehlo.reduce", "stablehlo.divide"]
    # The NaN constant inside @_take is the first non-finite value anywhere.
    first = si.find_nonfinite(embedding_loss, table, ids, np.float32(20.0), mode="first")
    assert first.op == "stablehlo.constant" and first.stack[-1].region == "@_take"
    # An id out of range does select the fill: then both reach the loss.
    report = si.find_nonfinite(embedding_loss, table, np.array([1, 7], np.int32), np.float32(20.0))
    assert [(o.op, o.stack[-1].region if o.stack else None) for o in report.origins] == [
        ("stablehlo.constant", "@_take"), ("stablehlo.log", None)]
    assert [link.op for link in report.origins[0].chain][:3] == [
        "stablehlo.broadcast_in_dim", "stablehlo.select", "func.call @_take"]
    assert si.find_nonfinite(embedding_loss, table, ids, np.float32(2.0)) is None


def test_masked_values_and_reduction_identities_are_not_blamed():
    x = np.array([1.0, -1.0, 4.0], np.float32)
    safe_log = lambda v: jnp.where(v > 0, jnp.log(v), 0.0).sum()   # noqa: E731 - a lambda reads as the expression it names
    assert si.find_nonfinite(safe_log, x) is None
    assert si.find_nonfinite(safe_log, x, mode="first").op == "stablehlo.log"
    # max and softmax reduce from -inf on finite data
    assert si.find_nonfinite(lambda v: jax.nn.softmax(v) * jnp.max(v), x) is None


def test_a_reduction_result_follows_its_inputs_not_its_initial_value():
    def masked_max(v, mask):
        return jnp.max(jnp.where(mask, v, -jnp.inf))   # every element masked: -inf

    report = si.find_nonfinite(masked_max, np.array([1.0, 2.0], np.float32), np.array([False, False]))
    assert report.nonfinite_results[0][1].values == (float("-inf"),)
    # the where's -inf (a constant that @_where broadcasts and selects), not the max's -inf initial value
    (origin,) = report.origins
    assert origin.op == "stablehlo.constant" and origin.results[0] == -np.inf
    assert [link.op for link in origin.chain] == [
        "stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.select", "func.call @_where", "stablehlo.reduce"]
    assert si.find_nonfinite(masked_max, np.array([1.0, 2.0], np.float32), np.array([False, True])) is None


def test_the_operand_a_max_did_not_pick_is_not_blamed():
    # max(-inf, NaN) is the NaN's; the -inf lost
    report = si.find_nonfinite(lambda v: jnp.maximum(jnp.log(v), -jnp.inf), np.array([2.0, -1.0], np.float32))
    assert [(o.op, o.new) for o in report.origins] == [("stablehlo.log", [(0, "nan", 1, (1,))])]
    # softmax's max starts from a -inf that a maximum then combines with the row's max:
    # an inf in the input reaches the results, the -inf does not
    x = np.array([[1.0, np.inf, 2.0], [0.0, 1.0, 2.0]], np.float32)
    report = si.find_nonfinite(lambda v: jax.nn.softmax(v, axis=-1), x)
    assert [o.op for o in report.origins] == ["argument #0"]
    assert report.origins[0].new == [(0, "inf", 1, (0, 1))]


def overflowing_loop(x):
    def body(i, v):
        return v * jnp.float32(1e10)     # 3e10, 3e20, 3e30, then inf in iteration 3
    return jax.lax.fori_loop(0, 6, body, x)


OVERFLOW_LINE = overflowing_loop.__code__.co_firstlineno + 2


def test_an_overflow_inside_a_loop_body():
    report = si.find_nonfinite(overflowing_loop, np.float32(3.0))
    (origin,) = report.origins
    assert origin.op == "stablehlo.multiply" and origin.location.frame.line == OVERFLOW_LINE
    assert [(c.op, c.call) for c in origin.stack] == [("stablehlo.while", 3), ("func.call", 0)]
    before = np.float32(3.0) * np.float32(1e10) * np.float32(1e10) * np.float32(1e10)   # iterations 0-2
    np.testing.assert_array_equal(origin.operands, [before, np.float32(1e10)])
    assert origin.new == [(0, "inf", 1, ())] and origin.executions == 1
    assert origin.chain[-1].op == "stablehlo.while"
    # iterations 4 and 5 carry it: their multiplies are links, not origins
    assert [link.stack[0].call for link in origin.chain if link.op == "stablehlo.multiply"] == [4, 5]
    # an overflow that the loop then replaces does not reach the result
    clipped = lambda x: jax.lax.fori_loop(0, 6, lambda i, v: jnp.where(jnp.isinf(v * 1e10), 1.0, v * 1e10), x)  # noqa: E731 - a lambda reads as the expression it names
    assert si.find_nonfinite(clipped, np.float32(3.0)) is None
    assert si.find_nonfinite(clipped, np.float32(3.0), mode="first").op == "stablehlo.multiply"


def test_each_iteration_that_makes_a_nan_counts():
    xs = np.array([1.0, -1.0, 2.0, -2.0, -3.0], np.float32)
    (origin,) = si.find_nonfinite(lambda v: jax.lax.scan(lambda t, x: (t + jnp.log(x), None), 0.0, v)[0],
                                  xs).origins
    assert origin.op == "stablehlo.log" and origin.executions == 3
    assert origin.stack[0].call == 1            # the first of them is shown
    np.testing.assert_array_equal(origin.operands[0], np.float32(-1.0))


@jax.jit
def shifted_sqrt(a):
    return jnp.sqrt(a - 2.0)


SQRT_LINE = shifted_sqrt.__wrapped__.__code__.co_firstlineno + 2


def test_through_a_jitted_nested_function():
    report = si.find_nonfinite(lambda a: shifted_sqrt(a) * 2, np.array([1.0, 9.0, -2.0], np.float32))
    (origin,) = report.origins
    assert origin.op == "stablehlo.sqrt" and origin.location.frame.line == SQRT_LINE
    assert [(c.op, c.region) for c in origin.stack] == [("func.call", "@shifted_sqrt")]
    assert origin.new == [(0, "nan", 2, (0,))]
    np.testing.assert_array_equal(origin.operands[0], np.float32([-1.0, 7.0, -4.0]))
    assert [link.op for link in origin.chain] == ["func.call @shifted_sqrt", "stablehlo.multiply"]


def test_through_the_branch_a_switch_took():
    def pick(index, v, w):
        return jax.lax.switch(index, [lambda a, b: jnp.log(a - 5.0), lambda a, b: b, lambda a, b: a * 2], v, w)

    line = pick.__code__.co_firstlineno + 1
    v, w = np.float32(1.0), np.float32(np.inf)
    (origin,) = si.find_nonfinite(pick, np.int32(0), v, w).origins     # log(-4) in branch 0
    assert origin.op == "stablehlo.log" and origin.location.frame.line == line
    assert [(c.op, c.region) for c in origin.stack][0] == ("stablehlo.case", "branch 0")
    assert origin.chain[-1].op == "stablehlo.case"
    # branch 1 passes its operand through: the inf came in as an argument
    assert [o.op for o in si.find_nonfinite(pick, np.int32(1), v, w).origins] == ["argument #2"]
    assert si.find_nonfinite(pick, np.int32(2), v, w) is None          # the inf was not taken


def test_a_nan_gradient():
    # d/dv sqrt(v) = 0.5 / sqrt(v): at 0 the divide makes an inf, and the chain rule's
    # product with 2v = 0 for |v|^2 makes it a NaN; the divide is where it starts.
    report = si.find_nonfinite(jax.grad(jnp.sqrt), np.float32(0.0))
    (origin,) = report.origins
    assert origin.op == "stablehlo.divide" and origin.new == [(0, "inf", 1, ())]
    np.testing.assert_array_equal(origin.operands, [np.float32(0.5), np.float32(0.0)])
    report = si.find_nonfinite(jax.grad(lambda v: jnp.sqrt(jnp.sum(v * v))), np.zeros(3, np.float32))
    assert report.nonfinite_results[0][1].nan == 3
    (origin,) = report.origins
    assert origin.op == "stablehlo.divide" and origin.new == [(0, "inf", 1, ())]
    np.testing.assert_array_equal(origin.operands, [np.float32(0.5), np.float32(0.0)])
    assert "stablehlo.multiply" in [link.op for link in origin.chain]


def test_an_update_or_scatter_that_overwrites_a_fill_blames_only_the_update():
    def fill_then_write(y):
        buffer = jnp.full(2, jnp.inf, jnp.float32)
        return jax.lax.dynamic_update_slice(buffer, jnp.log(y), (0,))   # every inf overwritten

    (origin,) = si.find_nonfinite(fill_then_write, np.array([-1.0, 1.0], np.float32)).origins
    assert origin.op == "stablehlo.log"
    def fill_then_write_part(y):
        return jax.lax.dynamic_update_slice(jnp.full(3, jnp.inf, jnp.float32), jnp.log(y), (0,))

    report = si.find_nonfinite(fill_then_write_part, np.array([-1.0, 1.0], np.float32))
    assert sorted(o.op for o in report.origins) == ["stablehlo.constant", "stablehlo.log"]

    def fill_then_scatter(y, rows):    # a solver's saved steps: .at[].set is a scatter
        return jnp.full(3, jnp.inf, jnp.float32).at[rows].set(jnp.log(y))

    y = np.array([-1.0, 1.0, 2.0], np.float32)
    (origin,) = si.find_nonfinite(fill_then_scatter, y, np.array([0, 1, 2], np.int32)).origins
    assert origin.op == "stablehlo.log" and [link.op for link in origin.chain] == ["stablehlo.scatter"]
    report = si.find_nonfinite(fill_then_scatter, y, np.array([0, 1, 1], np.int32))   # row 2 keeps its inf
    assert sorted(o.op for o in report.origins) == ["stablehlo.constant", "stablehlo.log"]


def test_values_that_come_in_non_finite():
    # The default answer follows a result's NaN back to the argument it came in with ...
    report = si.find_nonfinite(lambda x: x * 2 + 1, np.array([np.nan, 1.0], np.float32))
    assert [(o.op, o.new) for o in report.origins] == [("argument #0", [(0, "nan", 1, (0,))])]
    assert "NaN in argument x" in str(report) and report.op == "argument #0"
    # ... and names each origin of a result: the argument's NaN and the divide's inf.
    report = si.find_nonfinite(lambda x: 1 / x, np.array([np.nan, 0.0], np.float32))
    assert [(o.op, o.new) for o in report.origins] == [
        ("argument #0", [(0, "nan", 1, (0,))]), ("stablehlo.divide", [(0, "inf", 1, (1,))])]
    assert si.find_nonfinite(lambda x: jnp.sqrt(x), np.array([4.0, 9.0], np.float32)) is None
    # mode="first" reports only what an op made, not what came in.
    assert si.find_nonfinite(lambda x: x * 2 + 1, np.array([np.nan, 1.0], np.float32), mode="first") is None
    report = si.find_nonfinite(lambda x: 1 / x, np.array([np.nan, 0.0], np.float32), mode="first")
    assert report.op == "stablehlo.divide" and report.new == [(0, "inf", 1, (1,))]


def test_on_a_module_file(tmp_path):
    path = tmp_path / "divide.mlir"
    path.write_text("""func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<2xf32>
  %0 = stablehlo.subtract %x, %one : tensor<2xf32>
  %1 = stablehlo.divide %one, %0 : tensor<2xf32>
  return %1 : tensor<2xf32>
}""")
    report = si.find_nonfinite(path, np.array([3.0, 1.0], np.float32))
    assert report.op == "stablehlo.divide" and report.location.frame.line == 4
    assert report.new == [(0, "inf", 1, (1,))]


def test_finder_without_stopping_keeps_one_report_per_run():
    program = si.load(jax.jit(lambda x: jnp.log(x) * jnp.log(x)).lower(np.float32(1)))
    finder = NonFiniteFinder(stop=False)
    for value in (-1.0, 2.0, 0.0):
        program.run(np.float32(value), listeners=[finder])
    assert [r.new[0][1] for r in finder.reports] == ["nan", "inf"]
    assert finder.report is finder.reports[0]


def interp_device():
    try:
        return jax.devices("interp")[0]
    except RuntimeError:
        pytest.skip("the interp device is not available")


def test_device_mode_stops_the_computation_with_the_report():
    device = interp_device()
    x = jax.device_put(np.array([1.0, -1.0], np.float32), device)
    with si.on_device(NonFiniteFinder()) as finder:
        with pytest.raises(Exception, match="NaN made by stablehlo.log"):
            jax.block_until_ready(jax.jit(lambda v: jnp.log(v) * 3)(x))
    assert finder.report.op == "stablehlo.log"
    from stablehlo_interp.device.session import device_listeners

    assert finder not in device_listeners()


def optax_step_with_a_bad_scale():
    """An Optax step whose loss picks each row's label with take_along_axis (a gather JAX
    lowers with a NaN fill for indices out of bounds, selected away) and scales it by the
    square root of a parameter gone negative: the NaN the results hold is the sqrt's."""
    import optax

    optimizer = optax.adam(1e-2)

    def loss(params, features, labels):
        logits = features @ params["w"]
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
        return -picked.mean() * jnp.sqrt(params["scale"])   # the NaN: sqrt of -0.5

    def step(params, opt_state, features, labels):
        value, grads = jax.value_and_grad(loss)(params, features, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return {"loss": value, "params": optax.apply_updates(params, updates), "opt_state": opt_state}

    params = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "scale": np.float32(-0.5)}
    features = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    return step, (params, optimizer.init(params), features, np.array([0, 2], np.int32))


def test_the_device_guard_blames_the_op_whose_nan_reaches_a_result_not_a_masked_fill():
    device = interp_device()
    step, args = optax_step_with_a_bad_scale()
    args = jax.device_put(args, device)
    with si.on_device(NonFiniteFinder(mode="first")) as first:
        with pytest.raises(Exception, match="first non-finite value"):
            jax.block_until_ready(jax.jit(step)(*args))
    assert first.report.op == "stablehlo.constant"   # the older answer: take_along_axis's fill, which no result holds
    assert "inside func.call @take_along_axis" in str(first.report)
    with si.on_device(NonFiniteFinder()) as guard:
        with pytest.raises(Exception) as raised:
            jax.block_until_ready(jax.jit(step)(*args))
    message = str(raised.value)
    assert message.startswith("INTERNAL: non-finite result['loss']: f32[] nan")
    assert [origin.op for origin in guard.report.origins][0] == "stablehlo.sqrt"
    assert "NaN made by stablehlo.sqrt at test_tools_nonfinite.py:" in message
    assert "source: return -picked.mean() * jnp.sqrt(params[\"scale\"])" in message
    assert "stablehlo.constant" not in message


def test_a_flax_embedding_model():
    nnx = pytest.importorskip("flax.nnx")

    class Tagger(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(20, 8, rngs=rngs)       # a jnp.take with a NaN fill
            self.out = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, ids):
            return self.out(self.embed(ids))

    graphdef, state = nnx.split(Tagger(nnx.Rngs(0)))

    def loss(state, ids, shift):
        logits = nnx.merge(graphdef, state)(ids)
        return jnp.log(jax.nn.softmax(logits).sum(-1) - shift).mean()   # log of a negative when shift > 1

    line = loss.__code__.co_firstlineno + 2
    step = jax.value_and_grad(loss)
    ids = np.array([3, 7, 11], np.int32)
    for shift, nan in ((0.5, False), (2.0, True)):
        # which results XLA finds non-finite (leaves: loss, then the gradients)
        xla = jax.tree_util.tree_leaves(jax.jit(step)(state, ids, np.float32(shift)))
        expected = [index for index, leaf in enumerate(xla) if not np.isfinite(np.asarray(leaf)).all()]
        assert bool(expected) == nan
        report = si.find_nonfinite(step, state, ids, np.float32(shift))
        if not nan:
            assert report is None
            continue
        assert [index for index, _ in report.nonfinite_results] == expected
        assert [(o.op, o.location.frame.line) for o in report.origins] == [("stablehlo.log", line)]
        assert report.origins[0].reaches == tuple(expected)
    # the first non-finite value anywhere is Embed's fill, inside @_take
    first = si.find_nonfinite(step, state, ids, np.float32(0.5), mode="first")
    assert first.op == "stablehlo.constant" and first.stack[-1].region == "@_take"


def test_a_long_loop_keeps_a_short_chain_and_summaries():
    def loop(x):
        def body(i, v):   # an inf at iteration 100 only, carried to the end
            inf = jnp.where(i == 100, jnp.float32(jnp.inf), 0.0)
            return jnp.tanh(v) * 0.9 + jnp.log(jnp.abs(v) + 1.0) - inf
        return jax.lax.fori_loop(0, 300, body, x)

    report = si.find_nonfinite(loop, np.linspace(-1, 1, 4, dtype=np.float32))
    (origin,) = report.origins
    assert origin.op == "stablehlo.constant" and origin.stack[0].call == 100 and origin.executions == 1
    # iteration 0's constant kept its values; iteration 100's keeps their summaries
    assert [str(value) for value in origin.results] == ["f32[] inf"]
    assert len(origin.chain) > 199 * 5     # iterations 101-299 carry it, several ops each
    (reaches,) = [line for line in str(report).splitlines() if line.startswith("  reaches")]
    assert "] ×19" in reaches and len(reaches) < 1500


def test_compress_chain():
    from stablehlo_interp.tools.nonfinite import ChainLink, compress_chain

    links = [ChainLink(name, None, ()) for name in ["log"] + ["add", "call"] * 5 + ["while"]]
    assert compress_chain(links) == ["log", "[add → call] ×5", "while"]
    assert compress_chain([ChainLink("add", None, ())] * 3) == ["add ×3"]
    many = [ChainLink(f"op{index}", None, ()) for index in range(20)]
    assert compress_chain(many) == [f"op{index}" for index in range(6)] + ["… 8 more …"] + \
        [f"op{index}" for index in range(14, 20)]


def test_a_nan_made_inside_shard_map_is_followed_into_each_devices_body():
    """The global run sees ``jax.shard_map``'s manual computation make the NaN as a whole;
    the answer also runs the program per device and names the body's op, its line and the
    device whose block it is (device 2 holds row 2 of the 4 rows over 4 devices)."""
    from jax.sharding import AxisType, PartitionSpec as P

    mesh = jax.make_mesh((4,), ("rows",), axis_types=(AxisType.Auto,), devices=jax.devices("cpu")[:4])

    def body(block):
        doubled = block * 2
        return jnp.log(doubled)  # body log

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("rows"), out_specs=P("rows")))
    x = np.ones((4, 3), np.float32)
    x[2, 1] = -1.0
    assert np.isnan(np.asarray(step(x))[2, 1])
    report = si.find_nonfinite(step, x)
    assert report.op == "sdy.manual_computation"
    assert list(report.inside_manual.devices) == [2]
    inside = report.inside_manual.devices[2].origins[0]
    assert inside.op == "stablehlo.log" and inside.location.frame.line == body.__code__.co_firstlineno + 2
    assert "inside sdy.manual_computation, run per device:\n  device 2:" in str(report)
    assert f"NaN made by stablehlo.log at test_tools_nonfinite.py:{body.__code__.co_firstlineno + 2}" in str(report)

    finite = si.find_nonfinite(step, np.abs(x))
    assert finite is None
