"""The semantics of a run ("spec" or "xla", engine/semantics.py) and the portability
report: the XLA side against XLA CPU through JAX (and on the interp device, where
JAX relies on it), the spec side against the C++ reference interpreter, the
report against hand-checked expectations, and docs/semantics.md's table of rules
against the rules the code knows."""

import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import stablehlo_interp as si
from oracles import run_xla
from stablehlo_interp.engine.semantics import RULES

ROOT = pathlib.Path(__file__).resolve().parent.parent
WINDOWS = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0,))


def scatter_add_fill(x, indices, updates):
    return lax.scatter_add(x, indices, updates, WINDOWS, mode="fill")


SCATTER_ARGS = (np.zeros(10, np.float32), np.array([[-1], [3], [9]], np.int32), np.ones((3, 2), np.float32))

SCATTER_TEXT = """func.func @main(%x: tensor<10xf32>, %i: tensor<3x1xi32>, %u: tensor<3x2xf32>) -> tensor<10xf32> {
  %0 = "stablehlo.scatter"(%x, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<
      update_window_dims = [1], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<10xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<10xf32>
  return %0 : tensor<10xf32>
}"""


# ------------------------------------------------------------------- the choice


def test_scatter_windows_partly_outside_follow_the_spec_by_default(reference):
    """The spec: the in-bounds elements of each window are updated (index -1 updates
    element 0, index 9 updates element 9); so does the C++ reference interpreter."""
    (ours,) = si.run(SCATTER_TEXT, *SCATTER_ARGS)
    np.testing.assert_array_equal(ours, [1, 0, 0, 1, 1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(ours, reference.evaluate(SCATTER_TEXT, list(SCATTER_ARGS))[0])


def test_scatter_windows_partly_outside_are_dropped_as_xla_does():
    expected = run_xla(scatter_add_fill, *SCATTER_ARGS)[0]
    np.testing.assert_array_equal(expected, [0, 0, 0, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(si.run(scatter_add_fill, *SCATTER_ARGS, semantics="xla"), expected)
    np.testing.assert_array_equal(si.load(SCATTER_TEXT, semantics="xla").run(*SCATTER_ARGS)[0], expected)


@pytest.mark.parametrize("mode", ["fill", "drop", "clip"])
@pytest.mark.parametrize("seed", range(4))
def test_random_scatters_match_xla_under_xla_semantics(mode, seed):
    """2-d windows at random starts, some hanging out on either side, some duplicated."""
    rng = np.random.default_rng(seed)
    numbers = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                          scatter_dims_to_operand_dims=(0, 1))
    x = rng.integers(-5, 5, (6, 7)).astype(np.int32)
    indices = rng.integers(-3, 8, (9, 2)).astype(np.int32)
    updates = rng.integers(-5, 5, (9, 3, 2)).astype(np.int32)

    def f(x, indices, updates):
        return lax.scatter_add(x, indices, updates, numbers, mode=mode)

    np.testing.assert_array_equal(si.run(f, x, indices, updates, semantics="xla"), run_xla(f, x, indices, updates)[0])


def test_the_device_follows_xla():
    """On the interp device JAX's mode="fill" scatter means what it means on XLA."""
    interp, cpu = jax.devices("interp")[0], jax.devices("cpu")[0]
    on_interp = jax.jit(scatter_add_fill)(*jax.device_put(SCATTER_ARGS, interp))
    on_cpu = jax.jit(scatter_add_fill)(*jax.device_put(SCATTER_ARGS, cpu))
    np.testing.assert_array_equal(np.asarray(on_interp), np.asarray(on_cpu))


@pytest.mark.parametrize("scatter", [lax.scatter_add, lax.scatter_max])
def test_jax_gradients_of_scatters_match_cpu_on_the_device(scatter):
    """JAX's gradients of scatter_add/scatter_max gather with mode="fill" and scatter
    their cotangents with windows that hang out: they hold on interp as on the CPU."""
    x = np.linspace(-1, 1, 10, dtype=np.float32)
    updates = np.arange(6, dtype=np.float32).reshape(3, 2) / 4

    def loss(x, updates):
        out = scatter(x, np.array([[-1], [3], [9]], np.int32), updates, WINDOWS, mode="fill")
        return jnp.sum(jnp.sin(out) * jnp.arange(10.0))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    interp, cpu = jax.devices("interp")[0], jax.devices("cpu")[0]
    for got, want in zip(grad(*jax.device_put((x, updates), interp)), grad(*jax.device_put((x, updates), cpu))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def test_the_device_semantics_comes_from_the_environment():
    code = ("import os; os.environ['STABLEHLO_INTERP_SEMANTICS'] = 'spec'\n"
            "import jax, numpy as np\nfrom jax import lax\n"
            "dims = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(), "
            "scatter_dims_to_operand_dims=(0,))\n"
            "f = jax.jit(lambda x, i, u: lax.scatter_add(x, i, u, dims, mode='fill'))\n"
            "args = jax.device_put((np.zeros(10, np.float32), np.array([[-1], [3], [9]], np.int32), "
            "np.ones((3, 2), np.float32)), jax.devices('interp')[0])\n"
            "print(np.asarray(f(*args)).astype(int).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         timeout=300)
    assert out.stdout.strip() == "[1, 0, 0, 1, 1, 0, 0, 0, 0, 1]"


def test_an_unknown_semantics_is_refused():
    with pytest.raises(si.ArgumentError, match="semantics must be one of 'spec', 'xla', got 'tpu'"):
        si.run(SCATTER_TEXT, *SCATTER_ARGS, semantics="tpu")


# ------------------------------------------------------------------ the report


def report_of(text: str, *args, semantics=None):
    return si.portability(text, *args, semantics=semantics)


def details(report) -> dict:
    return {finding.report.rule.name: finding.report.detail for finding in report.findings}


def test_a_program_without_such_behaviour_is_portable():
    report = report_of(SCATTER_TEXT, np.zeros(10, np.float32), np.array([[0], [3], [7]], np.int32),
                       np.ones((3, 2), np.float32))
    assert len(report) == 0
    assert str(report).startswith("portable:")


@pytest.mark.parametrize("semantics, effect", [("spec", "their in-bounds elements updated (semantics 'spec')"),
                                               ("xla", "dropped whole (semantics 'xla')")])
def test_partly_outside_scatter_windows_are_reported(semantics, effect):
    report = report_of(SCATTER_TEXT, *SCATTER_ARGS, semantics=semantics)
    assert details(report) == {"scatter-window-out-of-bounds":
                               f"2 of 3 update windows lie partly outside the operand: {effect}"}
    (finding,) = report.findings
    assert finding.report.op == "stablehlo.scatter" and finding.report.location.file_line.endswith(":2")
    assert report.outputs[0].tolist() == ([1, 0, 0, 1, 1, 0, 0, 0, 0, 1] if semantics == "spec"
                                          else [0, 0, 0, 1, 1, 0, 0, 0, 0, 0])


def scatter_text(element: str, body: str) -> str:
    return f"""func.func @main(%x: tensor<4x{element}>, %i: tensor<3x1xi32>, %u: tensor<3x{element}>) -> tensor<4x{element}> {{
  %0 = "stablehlo.scatter"(%x, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<
      inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}}> ({{
  ^bb0(%a: tensor<{element}>, %b: tensor<{element}>):
    {body}
  }}) : (tensor<4x{element}>, tensor<3x1xi32>, tensor<3x{element}>) -> tensor<4x{element}>
  return %0 : tensor<4x{element}>
}}"""


@pytest.mark.parametrize("element, body, reported", [
    ("f32", "%s = stablehlo.add %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>", True),
    ("f32", "stablehlo.return %b : tensor<f32>", True),                       # replace: the last one wins
    ("i32", "%s = stablehlo.add %a, %b : tensor<i32>\n    stablehlo.return %s : tensor<i32>", False),
    ("f32", "%s = stablehlo.maximum %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>", False),
])
def test_duplicate_scatter_indices_are_reported_when_the_order_shows(element, body, reported):
    dtype = np.float32 if element == "f32" else np.int32
    report = report_of(scatter_text(element, body), np.zeros(4, dtype), np.array([[1], [2], [1]], np.int32),
                       np.array([1, 2, 3], dtype))
    expected = {"scatter-duplicate-indices": "1 of 3 updates go to an element updated before; the update "
                                             "body is not associative and commutative, so their order shows"}
    assert details(report) == (expected if reported else {})


def test_integer_division_by_zero_and_overflow_are_reported():
    text = """func.func @main(%a: tensor<4xi8>, %b: tensor<4xi8>) -> (tensor<4xi8>, tensor<4xi8>) {
  %q = stablehlo.divide %a, %b : tensor<4xi8>
  %r = stablehlo.remainder %a, %b : tensor<4xi8>
  return %q, %r : tensor<4xi8>, tensor<4xi8>
}"""
    report = report_of(text, np.array([7, -128, 5, -128], np.int8), np.array([0, -1, 2, 0], np.int8))
    assert [(f.report.op, f.report.rule.name, f.report.detail) for f in report.findings] == [
        ("stablehlo.divide", "integer-division-by-zero", "2 of 4 elements have the divisor 0"),
        ("stablehlo.divide", "integer-division-overflow", "1 of 4 elements divide -128 by -1"),
        ("stablehlo.remainder", "integer-division-by-zero", "2 of 4 elements have the divisor 0"),
        ("stablehlo.remainder", "integer-division-overflow", "1 of 4 elements divide -128 by -1"),
    ]
    quotient, remainder = report.outputs
    assert quotient.tolist() == [-1, -128, 2, -1] and remainder.tolist() == [7, 0, 1, -128]


def test_out_of_range_float_to_integer_converts_are_reported():
    text = """func.func @main(%x: tensor<5xf32>) -> tensor<5xi8> {
  %0 = stablehlo.convert %x : (tensor<5xf32>) -> tensor<5xi8>
  return %0 : tensor<5xi8>
}"""
    report = report_of(text, np.array([1.5, 127.9, 128.0, -129.0, np.nan], np.float32))
    assert details(report) == {"float-to-integer-out-of-range":
                               "3 of 5 values are NaN or outside i8: 1 below, 1 above, 1 NaN"}
    assert report.outputs[0].tolist() == [1, 127, 127, -128, 0]


@pytest.mark.parametrize("op", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
def test_out_of_range_shift_amounts_are_reported(op):
    text = f"""func.func @main(%x: tensor<4xi8>, %n: tensor<4xi8>) -> tensor<4xi8> {{
  %0 = stablehlo.{op} %x, %n : tensor<4xi8>
  return %0 : tensor<4xi8>
}}"""
    report = report_of(text, np.array([-3, 5, 6, 7], np.int8), np.array([1, 8, -1, 7], np.int8))
    assert details(report) == {"shift-out-of-range": "2 of 4 shift amounts are negative or at least the bit width 8"}


def test_clamped_gather_starts_are_reported():
    x = np.arange(10, dtype=np.float32)
    report = si.portability(lambda x, i: lax.gather(
        x, i, lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,)),
        (2,), mode="clip"), x, np.array([[-1], [3], [9], [5]], np.int32))
    assert details(report) == {"gather-start-clamped":
                               "2 of 4 start indices are clamped to keep the slice inside the operand"}
    assert report.outputs.tolist() == [[0, 1], [3, 4], [8, 9], [5, 6]]


def test_reports_name_each_op_once_with_how_often_it_met_the_rule():
    """A divide in a loop body: one finding, met on every iteration."""
    def f(x):
        return lax.fori_loop(0, 3, lambda i, v: v // (v - v), x)

    report = si.portability(f, np.array([4, 6], np.int32))
    (finding,) = [f for f in report.findings if f.report.op == "stablehlo.divide"]
    assert finding.times == 3
    assert "(and 2 more time(s))" in str(report)
    assert [frame.step.info.name for frame in finding.report.stack][0] == "stablehlo.while"


def test_the_cli_runs_with_either_semantics_and_reports(tmp_path):
    path = tmp_path / "scatter.mlir"
    path.write_text(SCATTER_TEXT)
    inputs = ["-i", str([0] * 10), "-i", "[[-1], [3], [9]]", "-i", str([[1, 1]] * 3)]

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "stablehlo_interp", "run", str(path), *inputs, *extra],
                              capture_output=True, text=True, check=True, cwd=ROOT, timeout=300).stdout

    assert "[0. 0. 0. 1. 1. 0. 0. 0. 0. 0.]" in cli("--semantics", "xla")
    out = cli("--portability")
    assert "[1. 0. 0. 1. 1. 0. 0. 0. 0. 1.]" in out
    assert "stablehlo.scatter: scatter-window-out-of-bounds at scatter.mlir:2" in out


# ------------------------------------------------------------------ the docs


def test_the_docs_list_every_rule():
    text = (ROOT / "docs" / "semantics.md").read_text()
    listed = re.findall(r"^\| `([a-z-]+)` \|", text, re.MULTILINE)
    assert sorted(listed) == sorted(RULES)
