"""The engine: loading from every kind of source, plans, release of dead values,
listeners, and the errors users see."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp import ops
from stablehlo_interp.engine import registry
from stablehlo_interp.engine.run import Listener, RunContext

ADD_TEXT = """
func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %x, %y : tensor<3xf32>
  %1 = stablehlo.multiply %0, %y : tensor<3xf32>
  return %1 : tensor<3xf32>
}
"""


def _f(x, y):
    return jnp.tanh(x @ y).sum(0)


def _xy():
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 4), np.float32), rng.standard_normal((4, 5), np.float32)


def test_run_lowered_matches_xla():
    x, y = _xy()
    out = si.run(jax.jit(_f).lower(x, y), x, y)
    expected = np.asarray(jax.jit(_f)(x, y))
    assert out.dtype == np.float32 and out.shape == (5,)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_sources_text_path_bytes_module_exported(tmp_path):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([0.5, -1.0, 2.0], np.float32)
    expected = (x + y) * y
    path = tmp_path / "add.mlir"
    path.write_text(ADD_TEXT)
    lowered = jax.jit(lambda a, b: (a + b) * b).lower(x, y)
    exported = jax.export.export(jax.jit(lambda a, b: (a + b) * b))(x, y)
    from jaxlib.mlir.dialects import stablehlo

    # serialize_portable_artifact rewrites the module it is given into VHLO: serialize a copy.
    artifact = stablehlo.serialize_portable_artifact(si.load(ADD_TEXT).module, stablehlo.get_current_version())
    module = lowered.compiler_ir("stablehlo")
    bytecode_path = tmp_path / "add.mlirbc"
    bytecode_path.write_bytes(artifact)
    for source in [ADD_TEXT, str(path), path, ADD_TEXT.encode(), module, si.load(lowered), si.load(exported),
                   artifact, bytecode_path]:   # the module's form: a list of @main's results
        (out,) = si.run(source, x, y)
        np.testing.assert_array_equal(out, expected, err_msg=type(source).__name__)
    for source in [lowered, exported]:         # the function's form: its output
        np.testing.assert_array_equal(si.run(source, x, y), expected, err_msg=type(source).__name__)



def test_portable_artifacts_of_early_2023():
    """JAX's exports of early 2023 are portable artifacts whose producer is
    "MLIRxxx-trunk", not "StableHLO_v...": their VHLO ops parse as MLIR bytecode
    as they are, and were loaded as a module of no functions ("no @main"). JAX's
    back-compat data keeps some (in the jax wheel we pin), with XLA's outputs."""
    from jax._src.internal_test_util.export_back_compat_test_data import tpu_ApproxTopK
    from jax._src.internal_test_util.export_back_compat_test_util import dummy_data_dict

    sine = dummy_data_dict["mlir_module_serialized"]
    assert sine.startswith(b"ML\xefR\x03MLIRxxx-trunk")
    assert set(si.load(sine).functions) == {"main"}
    x = np.array(0.5, np.float32)
    np.testing.assert_array_equal(si.run(sine, x)[0], np.sin(x))
    data = tpu_ApproxTopK.data_2023_04_17       # on a TPU; the top 3 of 7 distinct constants
    assert data["mlir_module_serialized"].startswith(b"ML\xefR\x03MLIRxxx-trunk")
    outputs = si.run(data["mlir_module_serialized"], *data["inputs"])
    assert len(outputs) == len(data["expected_outputs"]) == 2
    for ours, theirs in zip(outputs, data["expected_outputs"]):
        assert ours.size > 0
        np.testing.assert_array_equal(ours, theirs, strict=True)

def test_program_functions_and_named_function():
    text = ADD_TEXT + """
func.func @double(%x: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.add %x, %x : tensor<2xi32>
  return %0 : tensor<2xi32>
}"""
    program = si.load(text)
    assert set(program.functions) == {"main", "double"}
    (out,) = program.run(np.array([3, -4], np.int32), function="double")
    np.testing.assert_array_equal(out, [6, -8])


def test_result_names_and_argument_names_from_jax():
    x, y = _xy()
    program = si.load(jax.jit(lambda x, y: {"s": _f(x, y)}).lower(x, y))
    main = program.functions["main"]
    assert main.arg_names == ("x", "y")
    assert main.result_names == ("result['s']",)


def test_module_and_function_declarations_are_decoded_once():
    program = si.load("""
module @m attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 3 : i32} {
  func.func private @declared(tensor<f32>) -> tensor<f32>
  func.func public @main(%x: tensor<f32> {jax.buffer_donor = true, mhlo.layout_mode = "default"} loc("x"),
                         %y: tensor<f32>) -> (tensor<f32> {jax.result_info = "result"}) {
    return %x : tensor<f32>
  }
}""")
    assert (program.name, program.num_replicas, program.num_partitions) == ("m", 2, 3)
    main, declared = program.functions["main"], program.functions["declared"]
    assert main.arg_attributes == ({"jax.buffer_donor": True, "mhlo.layout_mode": "default"}, {})
    assert main.result_attributes == ({"jax.result_info": "result"},)
    assert (main.arg_names, main.result_names) == (("x", None), ("result",))
    assert (main.visibility, main.has_body, declared.visibility, declared.has_body) == \
        ("public", True, "private", False)


def test_func_call_and_regions_capture_outer_values():
    def f(x, k):
        return jax.lax.fori_loop(0, 5, lambda i, acc: acc * k + i, x)

    x, k = np.float32(1.0), np.float32(2.0)
    out = si.run(jax.jit(f).lower(x, k), x, k)
    assert out == np.float32(jax.jit(f)(x, k))


def test_dead_values_are_released():
    program = si.load(ADD_TEXT)
    steps = program.functions["main"].region.steps
    # %0 dies at the multiply; x dies at the add; y at the multiply.
    assert steps[0].release == (0,)
    assert set(steps[1].release) == {1, 2}


def test_memory_bounded_by_live_values():
    """A chain of 200 ops on a 4 MB tensor keeps only a few tensors alive."""
    import weakref

    n = 200
    lines = ["func.func @main(%a: tensor<1000000xf32>) -> tensor<1000000xf32> {",
             "  %v0 = stablehlo.add %a, %a : tensor<1000000xf32>"]
    lines += [f"  %v{i} = stablehlo.add %v{i - 1}, %a : tensor<1000000xf32>" for i in range(1, n)]
    lines += [f"  return %v{n - 1} : tensor<1000000xf32>", "}"]
    program = si.load("\n".join(lines))

    class Count(Listener):
        def __init__(self):
            self.alive, self.peak = [], 0

        def after_op(self, step, operands, results, stack):
            self.alive = [r for r in self.alive if r() is not None] + [weakref.ref(results[0])]
            self.peak = max(self.peak, len(self.alive))

    counter = Count()
    (out,) = program.run(np.ones(1000000, np.float32), listeners=[counter])
    assert out[0] == n + 1
    assert counter.peak <= 3


def test_listener_sees_every_op_including_regions_and_can_replace_values():
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: a + 1.0, x) * 2.0

    lowered = jax.jit(f).lower(np.float32(0))
    seen = []

    class Record(Listener):
        def before_op(self, step, operands, stack):
            seen.append((step.name, tuple(frame.call for frame in stack)))

        def after_op(self, step, operands, results, stack):
            if step.name == "stablehlo.multiply":
                return [np.asarray(results[0] + 100, results[0].dtype)]

    out = si.run(lowered, np.float32(0), listeners=[Record()])
    assert out == 106.0
    assert ("stablehlo.while", ()) in seen
    body_calls = sorted({calls for name, calls in seen if name == "stablehlo.add" and calls})
    assert (1, 2) in body_calls or any(c[-1] == 2 for c in body_calls)


def test_stop_execution_from_listener():
    class Stop(Listener):
        def before_op(self, step, operands, stack):
            if step.name == "stablehlo.multiply":
                raise si.StopExecution(values=operands)

    with pytest.raises(si.StopExecution) as info:
        si.run(ADD_TEXT, np.ones(3, np.float32), np.ones(3, np.float32), listeners=[Stop()])
    np.testing.assert_array_equal(info.value.values[0], [2, 2, 2])


class RunEnds(Listener):
    """Records each run's ends: the entry region's kind, arguments, results and process."""

    def __init__(self, stop_on=None):
        self.seen, self.stop_on = [], stop_on

    def enter_run(self, region, arguments, process):
        self.seen.append(("enter", region.kind.function, [float(np.sum(a)) for a in arguments], process.id))

    def exit_run(self, region, arguments, results, process):
        self.seen.append(("exit", region.kind.function, [float(np.sum(r)) for r in results], process.id))
        if self.stop_on is not None and process.id == self.stop_on:
            raise si.StopExecution("stopped at the end", values=list(results))


def test_a_listener_sees_each_run_begin_and_end_with_its_arguments_and_results():
    ends = RunEnds()
    x, y = np.ones(3, np.float32), np.full(3, 2, np.float32)
    si.run(ADD_TEXT, x, y, listeners=[ends])
    result = si.run(ADD_TEXT, x, y)[0]
    assert ends.seen == [("enter", "main", [3.0, 6.0], 0), ("exit", "main", [float(np.sum(result))], 0)]
    with pytest.raises(si.StopExecution) as stopped:
        si.run(ADD_TEXT, x, y, listeners=[RunEnds(stop_on=0)])
    np.testing.assert_array_equal(stopped.value.values[0], result)


def test_each_process_of_a_grid_run_begins_and_ends_its_own_run():
    program = si.load("""module attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 2 : i32} {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
        use_global_device_ids} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}""")
    ends = RunEnds()
    program.run_grid([[np.ones(2, np.float32)], [np.full(2, 3, np.float32)]], listeners=[ends])
    assert sorted(ends.seen) == [("enter", "main", [2.0], 0), ("enter", "main", [6.0], 1),
                                 ("exit", "main", [8.0], 0), ("exit", "main", [8.0], 1)]


# ------------------------------------------------------------------ bad input


def test_malformed_text_is_a_module_error():
    with pytest.raises(si.ModuleError, match="cannot parse MLIR text"):
        si.load("func.func @main( {")


def test_unknown_op_names_op_and_location():
    text = """
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %0 = "stablehlo.frobnicate"(%x) : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}"""
    with pytest.raises(si.ModuleError, match="frobnicate"):
        si.load(text)


def test_unsupported_custom_call_names_target_and_source_line(tmp_path):
    text = """func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @no_such_target(%x) : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}"""
    path = tmp_path / "m.mlir"
    path.write_text(text)
    with pytest.raises(si.UnsupportedOpError) as info:
        si.load(path)
    message = str(info.value)
    assert "no_such_target" in message and "stablehlo.custom_call" in message
    assert f"{path}:2" in message


def test_runtime_error_names_op_and_python_line():
    def f(x):
        return jnp.tanh(x) + 1

    lowered = jax.jit(f).lower(np.float32(1))
    program = si.load(lowered)

    def broken(info):
        def run(x):
            raise ValueError("boom")
        return run

    with registry.replaced(ops={"stablehlo.tanh": broken}):   # restores the built-in exactly afterwards
        program = si.load(lowered)
        with pytest.raises(si.OpExecutionError) as info:
            program.run(np.float32(1))
    message = str(info.value)
    assert "stablehlo.tanh" in message and "boom" in message
    assert f"{pathlib.Path(__file__).name}:" in message and "(f)" in message


def test_error_inside_region_shows_enclosing_ops():
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: jnp.sin(a), x)

    lowered = jax.jit(f).lower(np.float32(1))

    def fail_on_third(info):
        calls = []

        def run(x):
            calls.append(1)
            if len(calls) == 3:
                raise ArithmeticError("third call")
            return np.sin(x)
        return run

    with registry.replaced(ops={"stablehlo.sine": fail_on_third}):
        with pytest.raises(si.OpExecutionError) as info:
            si.run(lowered, np.float32(1))
    message = str(info.value)
    assert "inside stablehlo.while" in message and "call 2" in message


@pytest.mark.parametrize("args, match", [
    ((np.ones(3, np.float32),), "takes 2 arguments"),
    ((np.ones(3, np.float32), np.ones(4, np.float32)), r"expected tensor<3xf32>, got an array of shape \(4,\)$"),
    ((np.ones((1, 1), np.float32), np.ones(3, np.float32)),
     r"argument #0 of @main: expected tensor<3xf32>, got an array of shape \(1, 1\)$"),
    ((np.ones(3, np.float32), np.ones(3, np.float64)), "dtype float64"),
])
def test_bad_arguments(args, match):
    with pytest.raises(si.ArgumentError, match=match):
        si.run(ADD_TEXT, *args)


def test_execute_checks_the_number_of_values_observed_or_not():
    """Program.execute takes values already of the function's types, but a wrong count
    is still an error, not a run on shifted slots (the unobserved entry skips
    run_region, which checks it for every other region)."""
    program = si.load(ADD_TEXT)
    main = program.function("main")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(program.execute(main, [x, x])[0], (x + x) * x)
    for listeners in ((), (Listener(),)):
        with pytest.raises(si.InterpreterError, match="takes 2 arguments, got 3"):
            program.execute(main, [x, x, x], RunContext(listeners))


def test_python_scalars_are_converted_and_checked():
    text = """func.func @main(%x: tensor<i8>) -> tensor<i8> {
  %0 = stablehlo.add %x, %x : tensor<i8>
  return %0 : tensor<i8>
}"""
    (out,) = si.run(text, 100)
    assert out.dtype == np.int8 and out == np.int8(-56)
    with pytest.raises(si.ArgumentError, match="does not fit"):
        si.run(text, 1000)


def test_verifier_failure_is_reported():
    text = """func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "stablehlo.add"(%x, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    with pytest.raises(si.ModuleError):
        si.load(text)


def test_results_are_writable_arrays_even_for_constants():
    text = """func.func @main() -> tensor<2xi32> {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  return %0 : tensor<2xi32>
}"""
    program = si.load(text)
    (out,) = program.run()
    out[0] = 7
    (again,) = program.run()
    np.testing.assert_array_equal(again, [1, 2])


@pytest.mark.parametrize("source", ["i1", "i32", "f32"])
def test_a_scalar_constant_converted_to_a_boolean_folds(source):
    """NumPy's ufuncs answer a 0-d array with a scalar: ``convert`` of a scalar constant to
    i1 (``x != 0``) gave a NumPy bool, which folding could not make read-only: loading
    the module failed (Shardy's per-device programs mask values so). The answer is an
    array, folded as any constant."""
    literal = {"i1": "true", "i32": "3", "f32": "0.5"}[source]
    text = f"""func.func @main(%a: tensor<i1>) -> tensor<i1> {{
  %c = stablehlo.constant dense<{literal}> : tensor<{source}>
  %t = stablehlo.convert %c : (tensor<{source}>) -> tensor<i1>
  %r = stablehlo.and %a, %t : tensor<i1>
  return %r : tensor<i1>
}}"""
    for a in (True, False):
        (result,) = si.run(text, np.array(a))
        assert isinstance(result, np.ndarray) and result.shape == () and bool(result) is a


def test_ops_of_constants_are_folded_at_load_but_still_observed():
    """A literal broadcast to a shape (JAX's `x * 2`) is computed once, at load, and
    left out of the run loop's program: its value waits in its slot of each fresh
    environment. The observed run (every tool) still sees the op, with the same value."""
    text = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c = stablehlo.constant dense<[1.5, -2.0, 4.0]> : tensor<3xf32>
  %b = stablehlo.broadcast_in_dim %c, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %h = stablehlo.convert %b : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %f = stablehlo.convert %h : (tensor<2x3xf16>) -> tensor<2x3xf32>
  %y = stablehlo.multiply %x, %f : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}"""
    program = si.load(text)
    region = program.runnable().region
    flat_steps = region.flat_steps
    assert [flat_steps.step(reference).info.name for *_, reference in flat_steps] == ["stablehlo.multiply"]
    folded = dict(flat_steps.folded)
    assert [region.steps[index].info.name for index, step in enumerate(region.steps)
            if step.results[0] in folded] == ["stablehlo.constant", "stablehlo.broadcast_in_dim",
                                              "stablehlo.convert", "stablehlo.convert"]
    converted = folded[region.steps[3].results[0]]
    assert region.result_slots[region.steps[3].results[0] - region.n_args] is converted
    np.testing.assert_array_equal(converted, [[1.5, -2.0, 4.0]] * 2)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = x * np.array([1.5, -2.0, 4.0], np.float32)
    np.testing.assert_array_equal(program.run(x)[0], expected)
    returns_folded = si.load(text.replace("return %y", "return %f"))
    result = returns_folded.run(x)[0]
    result[0, 0] = 99   # the caller's own array: the folded value of later runs is intact
    np.testing.assert_array_equal(returns_folded.run(x)[0], [[1.5, -2.0, 4.0]] * 2)

    class Seen(Listener):
        names = []

        def after_op(self, step, operands, results, stack):
            self.names.append((step.info.name, np.asarray(results[0]).tolist()))

    np.testing.assert_array_equal(program.run(x, listeners=[Seen()])[0], expected)
    assert ("stablehlo.broadcast_in_dim", [[1.5, -2.0, 4.0]] * 2) in Seen.names
    assert [name for name, _ in Seen.names].count("stablehlo.convert") == 2


def test_tuples_tokens_and_0d_constants_of_small_types():
    text = """func.func @main(%x: tensor<f32>) -> (tuple<tensor<f32>, !stablehlo.token>, tensor<bf16>, tensor<i4>) {
  %t = stablehlo.create_token : !stablehlo.token
  %0 = stablehlo.tuple %x, %t : tuple<tensor<f32>, !stablehlo.token>
  %c = stablehlo.constant dense<1.5> : tensor<bf16>
  %i = stablehlo.constant dense<-3> : tensor<i4>
  return %0, %c, %i : tuple<tensor<f32>, !stablehlo.token>, tensor<bf16>, tensor<i4>
}"""
    (pair, half, small) = si.run(text, np.float32(2))
    assert pair[0] == 2 and pair[1] is si.TOKEN
    assert half.shape == () and half.dtype.name == "bfloat16" and float(half) == 1.5
    assert small.shape == () and int(small) == -3


def test_results_never_alias_the_arguments():
    text = """func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<2xf32>) {
  %0 = stablehlo.slice %x [1:3] : (tensor<4xf32>) -> tensor<2xf32>
  return %x, %0 : tensor<4xf32>, tensor<2xf32>
}"""
    x = np.arange(4, dtype=np.float32)
    same, part = si.run(text, x)
    same[0] = part[0] = 100
    np.testing.assert_array_equal(x, [0, 1, 2, 3])


def test_results_are_fresh_writable_arrays():
    """Whatever a result is inside the run (an argument, a view of one whose base is
    the caller's larger array, a constant, a tuple's element, a 0-d value), the
    caller gets a writable array that neither its arguments nor the program hold."""
    text = """func.func @main(%x: tensor<4xf32>, %y: tensor<3xi32>) -> (tensor<4xf32>, tensor<3xi32>, tensor<2x2xf32>,
                                                            tensor<2xf32>, tensor<4xf32>, tuple<tensor<4xf32>>,
                                                            tensor<f32>) {
  %r = stablehlo.reshape %x : (tensor<4xf32>) -> tensor<2x2xf32>
  %c = stablehlo.constant dense<[7.0, 8.0]> : tensor<2xf32>
  %s = stablehlo.add %x, %x : tensor<4xf32>
  %t = stablehlo.tuple %x : tuple<tensor<4xf32>>
  %z = stablehlo.constant dense<5.0> : tensor<f32>
  return %x, %y, %r, %c, %s, %t, %z : tensor<4xf32>, tensor<3xi32>, tensor<2x2xf32>, tensor<2xf32>, tensor<4xf32>,
                                      tuple<tensor<4xf32>>, tensor<f32>
}"""
    program = si.load(text)
    whole = np.arange(6, dtype=np.float32)
    x = whole[1:5]  # a view: results that alias it have ``whole`` as their base
    y = np.array([1, 2, 3], np.int32)  # owns its data
    same_x, same_y, reshaped, constant, total, (in_tuple,), scalar = results = program.run(x, y)
    results[5] = in_tuple
    assert all(type(r) is np.ndarray and r.flags.writeable for r in results)
    for result in results:
        result[...] = 100
    np.testing.assert_array_equal(whole, [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(y, [1, 2, 3])
    again = program.run(x, y)
    np.testing.assert_array_equal(again[3], [7, 8])
    assert again[6] == 5


def test_function_declared_without_body():
    text = """module {
  func.func private @external(tensor<f32>) -> tensor<f32>
  func.func @main(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}"""
    program = si.load(text)
    assert program.run(np.float32(1))[0] == 1
    with pytest.raises(si.ModuleError, match="without a body"):
        program.run(np.float32(1), function="external")
    calling = text.replace("return %x", "%0 = func.call @external(%x) : (tensor<f32>) -> tensor<f32>\n    return %0")
    with pytest.raises(si.OpError, match="declared without a body"):
        si.load(calling)


def test_index_typed_attributes_decode_as_int64():
    text = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.custom_call @Sharding(%x) {operand_layouts = [dense<[0, 1]> : tensor<2xindex>],
      result_layouts = [dense<[1, 0]> : tensor<2xindex>]} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"""
    program = si.load(text)
    (step,) = program.functions["main"].region.steps
    layouts = step.info.attributes["operand_layouts"]
    assert layouts[0].dtype == np.int64 and list(layouts[0]) == [0, 1]


def test_replaced_implementations_keep_the_convention_and_are_restored_exactly():
    """registry.replaced: a replacement of a variadic op runs with the variadic convention;
    afterwards the built-in (and a user's earlier registration) apply again."""
    ops.load_all()
    builtin = registry.op_implementation("stablehlo.optimization_barrier")
    text = """func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0:2 = stablehlo.optimization_barrier %a, %b : tensor<2xf32>, tensor<2xf32>
  return %0#0, %0#1 : tensor<2xf32>, tensor<2xf32>
}"""
    a, b = np.ones(2, np.float32), np.full(2, 2.0, np.float32)
    swapped = lambda info: lambda x, y: (y, x)  # noqa: E731 - a lambda reads as the expression it names
    with registry.replaced(ops={"stablehlo.optimization_barrier": swapped}):
        first, second = si.run(text, a, b)
    np.testing.assert_array_equal(first, b)
    np.testing.assert_array_equal(second, a)
    assert registry.op_implementation("stablehlo.optimization_barrier") is builtin
    first, second = si.run(text, a, b)
    np.testing.assert_array_equal(first, a)


def test_a_multi_result_op_needs_a_variadic_implementation():
    text = """func.func @main(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0:2 = stablehlo.custom_call @two_results(%a) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<2xf32>
}"""
    x = np.arange(2, dtype=np.float32)
    with registry.replaced(custom_calls={"two_results": lambda info: lambda v: (v, v + 1)}):
        with pytest.raises(si.OpError, match="has 2 results, but its implementation returns one"):
            si.load(text)
        si.register_custom_call("two_results", lambda info: lambda v: (v,), variadic=True)
        with pytest.raises(si.OpExecutionError, match="returned 1 values; the op has 2 results"):
            si.run(text, x)
        si.register_custom_call("two_results", lambda info: lambda v: (v, v + 1), variadic=True)
        first, second = si.run(text, x)
        np.testing.assert_array_equal(second, x + 1)


# ------------------------------------------------ a user's op in the bodies of other ops

CAP = 10   # the user's add below saturates there


@pytest.fixture
def saturating_add():
    """``stablehlo.add`` registered as a user's add that saturates at CAP (observably
    not the built-in one); yields, per call of its runners, whether the operands had
    the shapes of the op's types. Restored afterwards by registering the builder that
    the registration returned."""
    calls = []

    def builder(info):
        shapes = [t.shape for t in info.operand_types]

        def run(x, y):
            calls.append([np.shape(x), np.shape(y)] == shapes)
            return np.asarray(np.minimum(np.add(x, y), CAP), x.dtype)

        return run

    previous = si.register_op("stablehlo.add", builder)
    try:
        yield calls
    finally:
        si.register_op("stablehlo.add", previous)
    assert registry.is_builtin("stablehlo.add")


def _assert_saturated(actual, exact):
    """``actual`` is ``exact`` (non-negative sums) capped at CAP, which changes some of it."""
    expected = np.minimum(exact, CAP)
    assert (expected != exact).any() and (expected == exact).any()   # the data shows the cap
    np.testing.assert_array_equal(actual, expected)
    assert actual.dtype == exact.dtype


def _terms(dtype) -> np.ndarray:
    """A (4, 5) array of small non-negative numbers: its first row sums to 3, the others
    to more than CAP."""
    x = (np.arange(20) % 7).astype(dtype).reshape(4, 5)
    x[0] = [0, 1, 0, 2, 0]
    return x


# Sums of _terms, as jitted JAX functions and in NumPy: some above CAP, some not.
SUMS = {
    "vector": (lambda v: jnp.stack([jnp.sum(v[0]), jnp.sum(v[1]), jnp.sum(v[1:3].reshape(-1))]),   # (whole-vector folds)
               lambda v: np.stack([v[0].sum(), v[1].sum(), v[1:3].sum()])),
    "rows": (lambda v: jnp.sum(v, 1), lambda v: v.sum(1)),
    "all": (lambda v: jnp.stack([jnp.sum(v), jnp.sum(v[:1])]), lambda v: np.stack([v.sum(), v[:1].sum()])),
}


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("sums", sorted(SUMS))
def test_a_registered_add_runs_in_reduce_bodies(saturating_add, dtype, sums):
    """jnp.sum is a reduce whose body is one add: with a user's add it is not NumPy's
    sum (nor the whole-vector fold) but the body, pair by pair on 0-d values. Sums of
    non-negative terms capped at CAP do not depend on the order of the terms."""
    x = _terms(dtype)
    jax_sum, numpy_sum = SUMS[sums]
    exact = numpy_sum(x).astype(jax.eval_shape(jax_sum, x).dtype)   # (int64 under jax_enable_x64)
    _assert_saturated(si.run(jax.jit(jax_sum), x), exact)
    assert saturating_add and all(saturating_add)


def test_a_registered_add_runs_in_reduce_window_bodies(saturating_add):
    """lax.reduce_window with add (a sum pool, padded with the init value 0)."""
    x = (np.arange(36) % 5).astype(np.float32).reshape(6, 6)
    actual = si.run(jax.jit(lambda v: jax.lax.reduce_window(v, 0.0, jax.lax.add, (3, 3), (1, 1), "SAME")), x)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, 1), (3, 3))
    _assert_saturated(actual, windows.sum(axis=(2, 3)))
    assert saturating_add and all(saturating_add)


def test_a_registered_add_runs_in_scatter_bodies(saturating_add):
    """``.at[].add`` with repeated indices: each element gets its updates through the body."""
    x = np.array([0, 1, 2, 3, 4, 5], np.float32)
    indices = np.array([1, 3, 1, 5, 1, 3])
    updates = np.array([4, 3, 5, 2, 1, 6], np.float32)
    actual = si.run(jax.jit(lambda v, i, u: v.at[i].add(u)), x, indices, updates)
    exact = x.copy()
    np.add.at(exact, indices, updates)
    _assert_saturated(actual, exact)
    assert saturating_add and all(saturating_add)


def test_a_registered_add_runs_in_select_and_scatter_bodies(saturating_add):
    """The gradient of a max pool is select_and_scatter: each window's cotangent (3)
    goes to its maximum, summed there by the scatter body from 0."""
    x = np.random.default_rng(0).permutation(16).astype(np.float32).reshape(4, 4)
    x[1, 1] = 100   # the maximum of the 4 windows that hold it: 4 * 3 = 12 capped
    pooled = lambda v: (jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (2, 2), (1, 1), "VALID") * 3).sum()  # noqa: E731 - a lambda reads as the expression it names
    actual = si.run(jax.jit(jax.grad(pooled)), x)
    exact = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            row, column = np.unravel_index(np.argmax(x[i:i + 2, j:j + 2]), (2, 2))
            exact[i + row, j + column] += 3
    _assert_saturated(actual, exact)
    assert saturating_add and all(saturating_add)


def test_a_registered_add_runs_in_map_and_all_reduce_bodies(saturating_add):
    """Bodies of element-wise ops run on whole tensors only when the ops are built in:
    a user's add gets the 0-d values the body's types say."""
    (mapped,) = si.run("""
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.map"(%x, %y) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}""", np.array([1, 4, 8, 9], np.float32), np.array([2, 5, 3, 0], np.float32))
    _assert_saturated(mapped, np.array([3, 9, 11, 9], np.float32))
    program = si.load("""
module @m attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%a: tensor<3xi32>) -> tensor<3xi32> {
    %r = "stablehlo.all_reduce"(%a) ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>):
      %s = stablehlo.add %x, %y : tensor<i32>
      stablehlo.return %s : tensor<i32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<3xi32>) -> tensor<3xi32>
    return %r : tensor<3xi32>
  }
}""")
    per_process = [np.array([1, 6, 9], np.int32), np.array([2, 3, 4], np.int32)]
    for (reduced,) in program.run_grid([[a] for a in per_process]):
        _assert_saturated(reduced, per_process[0] + per_process[1])
    assert saturating_add and all(saturating_add)


def test_a_registered_compare_runs_in_sort_comparators():
    """jnp.sort's comparator is a compare: a user's compare that orders integers by
    their last digit sorts by it (no key sort of the values behind its back)."""
    calls = []

    def by_last_digit(info):
        direction = {"LT": np.less, "GT": np.greater, "EQ": np.equal, "NE": np.not_equal,
                     "LE": np.less_equal, "GE": np.greater_equal}[info.attr("comparison_direction")]

        def run(x, y):
            calls.append(np.shape(x) == np.shape(y) == ())
            return np.asarray(direction(x % 10, y % 10))

        return run

    x = np.array([23, 5, 11, 40, 8, 97, 64, 16, 32, 59], np.int32)
    previous = si.register_op("stablehlo.compare", by_last_digit)
    try:
        actual = si.run(jax.jit(jnp.sort), x)
        rows = si.run(jax.jit(lambda v: jnp.sort(v, axis=1)), x.reshape(2, 5))
    finally:
        si.register_op("stablehlo.compare", previous)
    np.testing.assert_array_equal(actual, x[np.argsort(x % 10, kind="stable")])
    np.testing.assert_array_equal(rows, [r[np.argsort(r % 10, kind="stable")] for r in x.reshape(2, 5)])
    assert calls and all(calls)
    np.testing.assert_array_equal(si.run(jax.jit(jnp.sort), x), np.sort(x))   # the built-in one again


def test_a_registered_add_runs_on_the_device(saturating_add):
    """The interp device compiles with the same registry: a sum and a scatter-add
    jitted on it run the user's add in their bodies."""
    device = jax.devices("interp")[0]
    x = _terms(np.float32)
    indices, updates = np.array([1, 2, 1, 1]), np.array([5, 2, 4, 3], np.float32)
    on_device = jax.device_put((x, indices, updates), device)
    total, scattered = jax.jit(lambda v, i, u: (jnp.sum(v, 1), v[0].at[i].add(u)))(*on_device)
    assert total.devices() == scattered.devices() == {device}
    _assert_saturated(np.asarray(total), x.sum(1))
    exact = x[0].copy()
    np.add.at(exact, indices, updates)
    _assert_saturated(np.asarray(scattered), exact)
    assert saturating_add and all(saturating_add)


def test_recognized_bodies_run_as_numpy_again_once_the_registration_is_undone():
    """While a user's add is registered, a sum's body is called; once the builder the
    registration returned is registered again, the sum is NumPy's (the body is not
    even bound: OpInfo.regions_called) and the user's runner is not called."""
    lowered = jax.jit(lambda v: jnp.sum(v, 1)).lower(np.ones((2, 3), np.float32))
    calls = []

    def counted_add(info):
        return lambda x, y: calls.append(1) or np.add(x, y)

    def reduce_step(program):
        (step,) = [s for s in program.function("main").region.steps if s.name == "stablehlo.reduce"]
        return step

    previous = si.register_op("stablehlo.add", counted_add)
    try:
        assert reduce_step(si.load(lowered)).info.regions_called
        np.testing.assert_array_equal(si.run(lowered, np.full((2, 3), 6, np.float32)), [18, 18])
        assert len(calls) == 6   # one per element: the left fold from init
    finally:
        si.register_op("stablehlo.add", previous)
    assert registry.is_builtin("stablehlo.add")
    assert not reduce_step(si.load(lowered)).info.regions_called
    calls.clear()
    np.testing.assert_array_equal(si.run(lowered, np.full((2, 3), 6, np.float32)), [18, 18])
    assert not calls


def test_the_builder_a_registration_returns_restores_the_builtin_convention():
    """Before any module is loaded too (a fresh process), si.register_op returns the
    built-in builder, and registering it again restores the built-in implementation
    with its calling convention: a variadic reduce runs again."""
    script = """
import numpy as np, stablehlo_interp as si
from stablehlo_interp.engine import registry
previous = si.register_op("stablehlo.reduce", lambda info: None)
assert previous is not None and not registry.is_builtin("stablehlo.reduce")
assert si.register_op("stablehlo.reduce", previous) is not previous
assert registry.is_builtin("stablehlo.reduce") and registry.op_implementation("stablehlo.reduce").variadic
assert si.register_op("my.op", lambda info: None) is None
si.register_op("my.op", None)
assert "my.op" not in registry.registered_ops()
(total,) = si.run('''func.func @main(%x: tensor<3xf32>) -> tensor<f32> {
  %0 = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%x init: %0) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}''', np.array([1, 2, 3], np.float32))
print(total)
"""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "6.0"
