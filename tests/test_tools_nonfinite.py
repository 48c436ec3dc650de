"""si.find_nonfinite: the first op whose results hold a NaN or inf that its operands did not."""

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
    assert report.op == "stablehlo.log"
    assert report.location.frame.line == LOG_LINE
    assert [(c.op, c.region, c.call) for c in report.stack] == [
        ("stablehlo.while", "body", 2), ("func.call", "@closed_call", 0)]
    assert report.new == [(0, "nan", 1, ())]
    np.testing.assert_array_equal(report.operands[0], np.float32(-3.0))
    assert np.isnan(report.results[0])
    lines = str(report).splitlines()
    assert lines[0] == f"first non-finite value: stablehlo.log at test_tools_nonfinite.py:{LOG_LINE} " \
                       "(running_log_sum.<locals>.body)"
    assert lines[1] == "  source: total = total + jnp.log(x)     # NaN at the iteration where x < 0"
    assert lines[2:4] == ["  result #0 has 1 NaN: f32[] nan", "  operand #0: f32[] -3"]
    assert lines[4].startswith("  inside func.call @closed_call at test_tools_nonfinite.py:")
    assert lines[5].startswith("  inside stablehlo.while at") and lines[5].endswith("body, iteration 2")


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


def test_values_that_come_in_non_finite_are_not_reported():
    assert si.find_nonfinite(lambda x: x * 2 + 1, np.array([np.nan, 1.0], np.float32)) is None
    assert si.find_nonfinite(lambda x: jnp.sqrt(x), np.array([4.0, 9.0], np.float32)) is None
    # A NaN input does not hide a new infinity.
    report = si.find_nonfinite(lambda x: 1 / x, np.array([np.nan, 0.0], np.float32))
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
        with pytest.raises(Exception, match="first non-finite value: stablehlo.log"):
            jax.block_until_ready(jax.jit(lambda v: jnp.log(v) * 3)(x))
    assert finder.report.op == "stablehlo.log"
    assert finder not in si.tools.session.device_listeners()
