"""Dynamism: dynamic_* ops, set_dimension_size, get_dimension_size on dynamic
dimensions, and shape-polymorphic modules (JAX's jax.export with symbolic
shapes) refined per argument shapes.

Oracles: XLA CPU through the Exported's own call, the C++ reference
interpreter, and hand-checked values (the spec's examples).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si

jax.config.update("jax_enable_x64", True)

DYNAMIC_OPS = """
func.func @main(%arg0: tensor<1x3xi64>, %shape: tensor<3xi64>) -> (tensor<2x3x2xi64>, tensor<?x?xi32>, tensor<?xi64>,
                                                                  tensor<?x?xi64>, tensor<?x?xi64>) {
  %0 = stablehlo.dynamic_broadcast_in_dim %arg0, %shape, dims = [2, 1] : (tensor<1x3xi64>, tensor<3xi64>)
       -> tensor<2x3x2xi64>
  %iota_shape = stablehlo.constant dense<[2, 3]> : tensor<2xi64>
  %1 = stablehlo.dynamic_iota %iota_shape, dim = 1 : (tensor<2xi64>) -> tensor<?x?xi32>
  %flat = stablehlo.constant dense<[3]> : tensor<1xi64>
  %2 = stablehlo.dynamic_reshape %arg0, %flat : (tensor<1x3xi64>, tensor<1xi64>) -> tensor<?xi64>
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %low = stablehlo.constant dense<[1, -1]> : tensor<2xi64>
  %high = stablehlo.constant dense<[0, 2]> : tensor<2xi64>
  %interior = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
  %3 = stablehlo.dynamic_pad %arg0, %zero, %low, %high, %interior : (tensor<1x3xi64>, tensor<i64>, tensor<2xi64>,
       tensor<2xi64>, tensor<2xi64>) -> tensor<?x?xi64>
  %start = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
  %limit = stablehlo.constant dense<[1, 3]> : tensor<2xi64>
  %strides = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %4 = stablehlo.real_dynamic_slice %arg0, %start, %limit, %strides : (tensor<1x3xi64>, tensor<2xi64>,
       tensor<2xi64>, tensor<2xi64>) -> tensor<?x?xi64>
  return %0, %1, %2, %3, %4 : tensor<2x3x2xi64>, tensor<?x?xi32>, tensor<?xi64>, tensor<?x?xi64>, tensor<?x?xi64>
}
"""

EXPECTED = [
    [[[1, 1], [2, 2], [3, 3]], [[1, 1], [2, 2], [3, 3]]],  # the spec's dynamic_broadcast_in_dim example
    [[0, 1, 2], [0, 1, 2]],
    [1, 2, 3],
    [[0, 0, 0, 0, 0, 0], [0, 2, 0, 3, 0, 0]],  # row padded low by 1; columns: interior 1, cropped 1, high 2
    [[2]],
]


def test_dynamic_ops_by_hand():
    results = si.run(DYNAMIC_OPS, np.array([[1, 2, 3]]), np.array([2, 3, 2]))
    for result, expected in zip(results, EXPECTED):
        np.testing.assert_array_equal(result, expected)
        assert result.shape == np.shape(expected)


def test_static_result_dimensions_above_256_are_compared_by_value():
    """The shape operand's sizes are checked against the result type's static sizes
    (ints above 256 are distinct objects in Python: compared by value, not identity)."""
    text = """
    func.func @main(%shape: tensor<2xi64>) -> tensor<300x2xi32> {
      %0 = stablehlo.dynamic_iota %shape, dim = 0 : (tensor<2xi64>) -> tensor<300x2xi32>
      return %0 : tensor<300x2xi32>
    }"""
    (result,) = si.run(text, np.array([300, 2]))
    np.testing.assert_array_equal(result, np.broadcast_to(np.arange(300)[:, None], (300, 2)))
    with pytest.raises(si.OpExecutionError, match=r"dynamic_iota.*shape \[299, 2\] does not match the result type"):
        si.run(text, np.array([299, 2]))


# The reference interpreter aborts on dynamic result types and on real_dynamic_slice.
REFERENCE_CASES = {
    "dynamic_broadcast_in_dim": """
    func.func @main(%arg0: tensor<1x3xi64>, %shape: tensor<3xi64>) -> tensor<2x3x2xi64> {
      %0 = stablehlo.dynamic_broadcast_in_dim %arg0, %shape, dims = [2, 1] : (tensor<1x3xi64>, tensor<3xi64>)
           -> tensor<2x3x2xi64>
      return %0 : tensor<2x3x2xi64>
    }""",
    "dynamic_iota": """
    func.func @main(%arg0: tensor<1x3xi64>, %shape: tensor<3xi64>) -> tensor<2x3x2xf32> {
      %0 = stablehlo.dynamic_iota %shape, dim = 1 : (tensor<3xi64>) -> tensor<2x3x2xf32>
      return %0 : tensor<2x3x2xf32>
    }""",
    "dynamic_pad": """
    func.func @main(%arg0: tensor<1x3xi64>, %pads: tensor<3xi64>) -> tensor<4x6xi64> {
      %low = stablehlo.slice %pads [0:2] : (tensor<3xi64>) -> tensor<2xi64>
      %high = stablehlo.slice %pads [1:3] : (tensor<3xi64>) -> tensor<2xi64>
      %interior = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
      %value = stablehlo.constant dense<-1> : tensor<i64>
      %0 = stablehlo.dynamic_pad %arg0, %value, %low, %high, %interior : (tensor<1x3xi64>, tensor<i64>,
           tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<4x6xi64>
      return %0 : tensor<4x6xi64>
    }""",
    "dynamic_reshape": """
    func.func @main(%arg0: tensor<1x3xi64>, %shape: tensor<3xi64>) -> tensor<3x1xi64> {
      %0 = stablehlo.slice %shape [1:3] : (tensor<3xi64>) -> tensor<2xi64>
      %1 = stablehlo.dynamic_reshape %arg0, %0 : (tensor<1x3xi64>, tensor<2xi64>) -> tensor<3x1xi64>
      %2 = stablehlo.negate %1 : tensor<3x1xi64>
      return %2 : tensor<3x1xi64>
    }""",
}


@pytest.mark.parametrize("name", sorted(REFERENCE_CASES))
def test_dynamic_ops_against_reference(reference, name):
    text = REFERENCE_CASES[name]
    shape = {"dynamic_pad": [2, 1, 0], "dynamic_reshape": [0, 3, 1]}.get(name, [2, 3, 2])
    args = [np.array([[1, 2, 3]]), np.array(shape)]
    (ours,) = si.run(text, *args)
    (theirs,) = reference.evaluate(text, args)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


def test_dynamic_op_results_change_with_their_shape_operands():
    text = """
    func.func @main(%shape: tensor<2xi32>) -> tensor<?x?xf32> {
      %0 = stablehlo.dynamic_iota %shape, dim = 0 : (tensor<2xi32>) -> tensor<?x?xf32>
      return %0 : tensor<?x?xf32>
    }"""
    program = si.load(text)
    for shape in [(2, 3), (4, 1), (0, 5), (2, 3)]:
        (result,) = program.run(np.array(shape, np.int32))
        np.testing.assert_array_equal(result, np.broadcast_to(np.arange(shape[0], dtype=np.float32)[:, None], shape))


@pytest.mark.parametrize("body, args, message", [
    ("stablehlo.dynamic_reshape %arg0, %arg1 : (tensor<6xf32>, tensor<2xi32>) -> tensor<?x?xf32>",
     [np.zeros(6, np.float32), np.array([4, 2], np.int32)], "cannot reshape"),
    ("stablehlo.dynamic_broadcast_in_dim %arg0, %arg1, dims = [1] : (tensor<6xf32>, tensor<2xi32>) -> tensor<?x6xf32>",
     [np.zeros(6, np.float32), np.array([2, 5], np.int32)], "does not match the result type"),
    ("stablehlo.real_dynamic_slice %arg0, %arg1, %arg1, %arg1 : (tensor<6xf32>, tensor<1xi32>, tensor<1xi32>, "
     "tensor<1xi32>) -> tensor<?xf32>", [np.zeros(6, np.float32), np.array([7], np.int32)], "slice"),
])
def test_bad_shape_operands_are_errors_naming_the_op(body, args, message):
    types = ", ".join(f"%arg{i}: tensor<{a.shape[0]}x{si.TensorType.like(a).element_type}>" for i, a in enumerate(args))
    result_type = body.rsplit("-> ", 1)[1]
    text = f"func.func @main({types}) -> {result_type} {{\n  %0 = {body}\n  return %0 : {result_type}\n}}"
    op_name = body.split()[0]
    with pytest.raises(si.OpExecutionError, match=message) as info:
        si.run(text, *args)
    assert info.value.op_name == op_name


def test_set_and_get_dimension_size():
    text = """
    func.func @main(%arg0: tensor<2x4xf32>, %size: tensor<i32>) -> (tensor<2x?xf32, #stablehlo.bounds<?, 4>>, tensor<i32>) {
      %0 = stablehlo.set_dimension_size %arg0, %size, dim = 1 : (tensor<2x4xf32>, tensor<i32>)
           -> tensor<2x?xf32, #stablehlo.bounds<?, 4>>
      %1 = stablehlo.get_dimension_size %0, dim = 1 : (tensor<2x?xf32, #stablehlo.bounds<?, 4>>) -> tensor<i32>
      return %0, %1 : tensor<2x?xf32, #stablehlo.bounds<?, 4>>, tensor<i32>
    }"""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    sliced, size = si.run(text, x, np.int32(3))
    np.testing.assert_array_equal(sliced, x[:, :3])
    assert size == 3
    with pytest.raises(si.OpExecutionError, match="size 5"):
        si.run(text, x, np.int32(5))


# ----------------------------------------------------------- shape polymorphism


def _export(fn, *specs):
    shapes = jax.export.symbolic_shape(",".join(s for s, _ in specs))
    structs, i = [], 0
    for spec, dtype in specs:
        rank = len(spec.split(","))
        structs.append(jax.ShapeDtypeStruct(shapes[i:i + rank], dtype))
        i += rank
    return jax.export.export(jax.jit(fn))(*structs)


POLYMORPHIC = {
    "elementwise_reduce_reshape": (
        lambda x: (jnp.sum(jnp.tanh(x) * 2, axis=1), x.reshape(-1), jnp.concatenate([x, x], 0),
                   jnp.arange(x.shape[0])),
        [("b, 4", np.float32)], lambda b: [(b, 4)]),
    "matmul_softmax": (
        lambda x, w: jax.nn.softmax(x @ w, axis=-1),
        [("b, 4", np.float32), ("4, 3", np.float32)], lambda b: [(b, 4), (4, 3)]),
    "two_dimensions": (
        lambda x: (jnp.pad(x, ((1, 0), (0, 2))), x[:, 1:], jnp.cumsum(x, axis=0), x.T @ x, jnp.mean(x)),
        [("b, n", np.float64)], lambda b: [(b, b + 2)]),
    "broadcast_where_argmax": (
        lambda x, y: (jnp.where(x > 0, x, y[None, :]), jnp.argmax(x, axis=0), jnp.sort(x, axis=0)),
        [("b, m", np.float32), ("m", np.float32)], lambda b: [(b, 3), (3,)]),
}


@pytest.mark.parametrize("name", sorted(POLYMORPHIC))
def test_shape_polymorphic_export_against_xla(name):
    fn, specs, shapes_of = POLYMORPHIC[name]
    exported = _export(fn, *specs)
    program = si.load(exported)
    assert program.shape_polymorphic
    rng = np.random.default_rng(0)
    for batch in [1, 3, 6]:
        args = [rng.normal(size=shape).astype(dtype) for shape, (_, dtype) in zip(shapes_of(batch), specs)]
        expected = jax.tree_util.tree_leaves(exported.call(*args))
        ours = program.run(*args)
        assert len(ours) == len(expected)
        for a, b in zip(ours, expected):
            b = np.asarray(b)
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_refined_programs_are_cached_per_shapes():
    program = si.load(_export(lambda x: x * 2, ("b, 4", np.float32)))
    three = np.zeros((3, 4), np.float32)
    assert program.refined(three) is program.refined(np.ones((3, 4), np.float32))
    refined = program.refined(three)
    assert refined is not program.refined(np.zeros((5, 4), np.float32))
    assert not refined.shape_polymorphic
    assert refined.function("main").arg_types[0].shape == (3, 4)


def test_shape_assertion_failure_names_the_dimension_variable():
    program = si.load(_export(lambda x: x + 1, ("b, 4", np.float32)))
    with pytest.raises(si.ModuleError, match="Expected value >= 1 for dimension variable 'b'") as info:
        program.run(np.zeros((0, 4), np.float32))
    assert "'b' = 0" in str(info.value)


def test_shape_assertion_custom_call():
    """In a module whose shapes were refined already, the assertion runs at run time."""
    text = """
    func.func @main(%arg0: tensor<i32>) -> tensor<i32> {
      %c = stablehlo.constant dense<1> : tensor<i32>
      %ok = stablehlo.compare GE, %arg0, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.custom_call @shape_assertion(%ok, %arg0) {api_version = 2 : i32,
          error_message = "Expected value >= 1 for 'b' (= {0})", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
      return %arg0 : tensor<i32>
    }"""
    assert si.run(text, np.int32(2))[0] == 2
    with pytest.raises(si.OpExecutionError, match=r"Expected value >= 1 for 'b' \(= -3\)"):
        si.run(text, np.int32(-3))


def test_polymorphic_arguments_still_checked():
    program = si.load(_export(lambda x: x + 1, ("b, 4", np.float32)))
    with pytest.raises(si.ArgumentError, match="expected tensor<\\?x4xf32>"):
        program.run(np.zeros((2, 5), np.float32))


def test_polymorphic_module_text_with_listeners():
    text = """
    func.func @main(%arg0: tensor<?xf32>) -> tensor<?xf32> {
      %n = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?xf32>) -> tensor<i32>
      %shape = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
      %0 = stablehlo.dynamic_iota %shape, dim = 0 : (tensor<1xi32>) -> tensor<?xf32>
      %1 = stablehlo.add %arg0, %0 : tensor<?xf32>
      return %1 : tensor<?xf32>
    }"""

    class Names(si.Listener):
        def __init__(self):
            self.seen = []

        def after_op(self, step, operands, results, stack):
            self.seen.append((step.name, results[0].shape))

    listener = Names()
    (result,) = si.run(text, np.ones(4, np.float32), listeners=[listener])
    np.testing.assert_array_equal(result, [1, 2, 3, 4])
    # refined: the dimension size is a constant, the iota static
    assert [name for name, _ in listener.seen][-1] == "stablehlo.add"
    assert all(shape in ((4,), (1,), ()) for _, shape in listener.seen)


@pytest.mark.parametrize("text, message", [
    ("""func.func @main(%arg0: tensor<?x!quant.uniform<i8:f32, 0.5:1>>) -> tensor<?xf32> {
      %0 = stablehlo.uniform_dequantize %arg0 : (tensor<?x!quant.uniform<i8:f32, 0.5:1>>) -> tensor<?xf32>
      return %0 : tensor<?xf32>
    }""", "quantized arguments are not supported"),
    ("""func.func @f(%arg0: tensor<?xi8>) -> tensor<?xi8> {
      return %arg0 : tensor<?xi8>
    }""", "to be @main, not @f"),
])
def test_unsupported_refinements_are_clear_errors(text, message):
    with pytest.raises(si.ModuleError, match=message):
        si.run(text, np.zeros(3, np.int8))


def test_a_refinement_that_fails_reports_the_passes_diagnostics():
    """The passes' diagnostics come through the diagnostic handler of ir/sources.py
    (never through jaxlib's MLIRError text), each with its location and notes."""
    text = """func.func @main(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
      %0 = stablehlo.add %a, %b : tensor<?xf32>
      return %0 : tensor<?xf32>
    }"""
    with pytest.raises(si.ModuleError) as raised:
        si.run(text, np.ones(3, np.float32), np.ones(4, np.float32))
    lines = str(raised.value).splitlines()
    assert lines[0] == "cannot refine the shapes of @main for arguments of types (tensor<3xf32>, tensor<4xf32>):"
    assert lines[1] == ("""  loc("-":2:12): 'stablehlo.add' op requires the same shape for all operands and """
                        """results""")
    assert lines[2].startswith("""    note: loc("-":2:12): see current operation: %0 = "stablehlo.add\"""")
    assert len(lines) == 3


def _stored_export(module_name: str, data_name: str) -> dict:
    """A module JAX's back-compat tests keep (shipped in the jax wheel we pin), with
    its inputs and the outputs XLA gave when it was serialized."""
    import importlib

    module = importlib.import_module(f"jax._src.internal_test_util.export_back_compat_test_data.{module_name}")
    return getattr(module, data_name)


@pytest.mark.parametrize("module_name, data_name", [
    ("stablehlo_dynamic_top_k", "data_2023_07_16"),                      # XLA's CPU
    ("stablehlo_dynamic_rng_bit_generator", "data_2023_06_17"),          # XLA's CPU
    ("tpu_stablehlo_dynamic_reduce_window", "data_unary_2023_06_17"),    # a cumulative sum, on a TPU
])
def test_exports_older_than_the_shape_polymorphism_attribute(module_name, data_name):
    """Exports of JAX's calling convention 6 have no ``jax.uses_shape_polymorphism``
    attribute, and call ``stablehlo.dynamic_*`` custom calls with dynamic shapes that
    only JAX's refinement makes static (StableHLO's refine-shapes leaves them, and
    the interpreter refused them as unsupported). The outputs stored with each are
    XLA's, bit for bit."""
    data = _stored_export(module_name, data_name)
    assert data["xla_call_module_version"] == 6
    assert "jax.uses_shape_polymorphism" not in data["mlir_module_text"]
    program = si.load(data["mlir_module_serialized"])
    assert program.shape_polymorphic
    outputs = program.run(*data["inputs"])
    assert len(outputs) == len(data["expected_outputs"])
    for ours, theirs in zip(outputs, data["expected_outputs"]):
        assert ours.dtype == theirs.dtype and ours.size > 0
        np.testing.assert_array_equal(ours, theirs)


def test_dynamic_top_k_custom_call_by_hand():
    """``stablehlo.dynamic_top_k`` (JAX's lowering of ``lax.top_k`` with a symbolic k)
    in a module written by hand, with no attribute saying it comes from JAX."""
    text = """
    func.func @main(%x: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xi32>) {
      %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %k1 = stablehlo.subtract %n, %one : tensor<i32>
      %0:2 = stablehlo.custom_call @stablehlo.dynamic_top_k(%x, %k1) {api_version = 2 : i32}
          : (tensor<?xf32>, tensor<i32>) -> (tensor<?xf32>, tensor<?xi32>)
      return %0#0, %0#1 : tensor<?xf32>, tensor<?xi32>
    }"""
    values, indices = si.run(text, np.array([3.0, 1.0, 4.0, 1.5], np.float32))
    np.testing.assert_array_equal(values, np.array([4.0, 3.0, 1.5], np.float32))
    np.testing.assert_array_equal(indices, np.array([2, 0, 3], np.int32))
