"""si.trace: every executed op with value summaries, nesting and folding; the device recorder."""

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.engine import registry
from stablehlo_interp.tools import NoMatchWarning, TraceRecorder
from stablehlo_interp.judge.summary import summarize
from oracles import run_xla

# x doubled n times in a while loop, then summed. Line numbers matter: the
# transcript below names them.
DOUBLING = """func.func @main(%x: tensor<3xf32>, %n: tensor<i32>) -> (tensor<3xf32>, tensor<f32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i32>, tensor<3xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %two = stablehlo.constant dense<2.0> : tensor<f32>
    %b = stablehlo.broadcast_in_dim %two, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %w = stablehlo.multiply %v, %b : tensor<3xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %w : tensor<i32>, tensor<3xf32>
  }
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%r#1 init: %init) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %r#1, %s : tensor<3xf32>, tensor<f32>
}
"""

# Checked by hand: [1 2 3] doubled 5 times is [32 64 96], whose sum is 192. The
# loop runs cond 6 times (iterations 0-5) and body 5 times; iterations 2-4 are
# folded: 3 conds of 1 op and 3 bodies of 5 ops.
DOUBLING_TRANSCRIPT = """\
%zero = stablehlo.constant          i32[] 0  # doubling.mlir:2
%r#0, %r#1 = stablehlo.while        i32[] 5, f32[3] [32 64 96]  # doubling.mlir:3
  cond, iteration 0
    %lt = stablehlo.compare         i1[] true  # doubling.mlir:5
  body, iteration 0
    %two = stablehlo.constant       f32[] 2  # doubling.mlir:8
    %b = stablehlo.broadcast_in_dim f32[3] [2 2 2]  # doubling.mlir:9
    %w = stablehlo.multiply         f32[3] [2 4 6]  # doubling.mlir:10
    %one = stablehlo.constant       i32[] 1  # doubling.mlir:11
    %j = stablehlo.add              i32[] 1  # doubling.mlir:12
  cond, iteration 1
    %lt = stablehlo.compare         i1[] true  # doubling.mlir:5
  body, iteration 1
    %two = stablehlo.constant       f32[] 2  # doubling.mlir:8
    %b = stablehlo.broadcast_in_dim f32[3] [2 2 2]  # doubling.mlir:9
    %w = stablehlo.multiply         f32[3] [4 8 12]  # doubling.mlir:10
    %one = stablehlo.constant       i32[] 1  # doubling.mlir:11
    %j = stablehlo.add              i32[] 2  # doubling.mlir:12
  ⋯ iterations 2–4 folded (3 × cond, 3 × body; 18 ops)
  cond, iteration 5
    %lt = stablehlo.compare         i1[] false  # doubling.mlir:5
%init = stablehlo.constant          f32[] 0  # doubling.mlir:15
%s = stablehlo.reduce               f32[] 192  # doubling.mlir:16"""

X = np.array([1, 2, 3], np.float32)


@pytest.fixture
def doubling(tmp_path):
    path = tmp_path / "doubling.mlir"
    path.write_text(DOUBLING)
    return path


def test_transcript_of_a_known_program(doubling):
    trace = si.trace(doubling, X, np.int32(5))
    assert str(trace) == DOUBLING_TRANSCRIPT
    np.testing.assert_array_equal(trace.outputs[0], [32, 64, 96])
    assert trace.outputs[1] == 192 and trace.error is None


def test_trace_is_data(doubling):
    trace = si.trace(doubling, X, np.int32(5), values=True)
    # 1 constant + while + 6 conds x 1 + 5 bodies x 5 + constant + reduce
    assert len(trace) == 1 + 1 + 6 + 25 + 2
    multiplies = trace.find("multiply")
    assert [r.stack[-1].call for r in multiplies] == [0, 1, 2, 3, 4]
    assert all(r.stack[-1].region == "body" and r.stack[-1].op == "stablehlo.while" for r in multiplies)
    np.testing.assert_array_equal(multiplies[-1].values[0], [32, 64, 96])
    assert multiplies[-1].parent == 1 and trace[1].op == "stablehlo.while"
    assert trace.find("doubling.mlir:5")[0].results[0].values == (True,)
    record = trace.as_dicts()[-1]
    assert record["op"] == "stablehlo.reduce" and record["results"] == ["f32[] 192"]
    assert record["source"].endswith("doubling.mlir:16") and record["nonfinite"] == 0


def test_find_takes_a_file_name_and_says_when_nothing_matches():
    import optax

    def loss(logits, labels):
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean() * 2.0

    logits = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], np.float32)
    labels = np.array([1, 2], np.int32)
    trace = si.trace(loss, logits, labels, values=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # a selector that chooses ops warns of nothing
        in_optax = trace.find("_classification.py")
        here = trace.find("test_tools_trace.py")
        assert trace.find("optax/losses/_classification.py") == in_optax     # a path's end, as FILE:LINE takes
        assert trace.find(inspect.getsourcefile(optax.softmax_cross_entropy_with_integer_labels)) == in_optax
    # the loss's lines in optax: its log-sum-exp, its take_along_axis (a nested jit, one call op)
    assert {"stablehlo.exponential", "stablehlo.log", "func.call"} <= {record.op for record in in_optax}
    assert {record.frame.file for record in in_optax} == {inspect.getsourcefile(optax.losses._classification)}
    per_example = in_optax[-1]      # the loss of each example (its last line), as XLA computes it
    np.testing.assert_allclose(per_example.values[0], run_xla(optax.softmax_cross_entropy_with_integer_labels,
                                                              logits, labels)[0], rtol=1e-6)
    # this file's: the mean and the doubling of loss's line, and the literals jit puts at its call
    line = loss.__code__.co_firstlineno + 1
    assert [(r.op, r.frame.line) for r in here if r.op != "stablehlo.constant"] == [
        ("stablehlo.reduce", line), ("stablehlo.divide", line), ("stablehlo.multiply", line)]
    # every op with a frame of its own came from one of the two files
    assert sorted(r.number for r in in_optax + here) == [r.number for r in trace if r.frame_reason is None]
    # a selector that chooses nothing: an empty list, and a warning that says how it was read and what there is
    with pytest.warns(NoMatchWarning, match=r"'_clasification.py' \(read as the op name _clasification.py or a "
                      r"file named '_clasification.py'\).*the files .*_classification.py"):
        assert trace.find("_clasification.py") == []
    with pytest.warns(NoMatchWarning, match=r"read as the op name stablehlo.softmx\); the trace's ops are "
                      r"broadcast_in_dim, func.call, constant, .* and 8 more, from the files _classification.py, "
                      r"test_tools_trace.py$"):
        assert trace.find("softmx") == []
    with pytest.warns(NoMatchWarning, match="read as the ops of line 9 of a file named 'test_tools_trace.py'"):
        assert trace.find("test_tools_trace.py:9") == []


def flax_optax_step():
    """The zoo's Flax Linen classifier (two hidden layers of Dense, LayerNorm, SiLU and
    dropout) and one step of Optax's AdamW, small: its ``ZooProgram``."""
    from zoo import flax_linen

    return flax_linen.mlp_classifier(features=4, widths=(8, 8), classes=3, batch=4)


def test_every_record_has_a_frame_or_says_why_not():
    from zoo import flax_linen

    with jax.enable_x64(False):        # the zoo is written for 32 bits
        program = flax_optax_step()
        trace = si.trace(program.function, *program.args)
    # JAX lowers a jitted library function (jax.nn.silu, the PRNG's threefry) with no Python
    # frame in its ops' locations: they take the line of the call that ran them
    borrowed = [record for record in trace if record.location.frame is None]
    assert len(borrowed) > 100 and all(record.frame is not None for record in trace)
    assert [record for record in trace if record.frame_reason is not None] == borrowed
    source, first = inspect.getsourcelines(flax_linen.Classifier.__call__)
    silu_line = first + next(k for k, text in enumerate(source) if "nn.silu(x)" in text)
    (call, *_) = [record for record in trace if record.label == "func.call @silu"]
    inside = [record for record in trace if record.parent == call.number]
    assert inside and all(record.frame == call.frame for record in inside)
    assert (call.frame.file, call.frame.line) == (inspect.getsourcefile(flax_linen), silu_line)
    assert inside[0].frame_reason == ("its location has no Python frame: the frame is that of the "
                                      "func.call @silu around it")
    # the printed trace says so, once, at the first op that takes it
    where = f"flax_linen.py:{silu_line} (Classifier.__call__)"
    lines = str(trace).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("func.call @silu ")))
    assert lines[at].endswith(f"# {where}")
    assert lines[at + 1].endswith(f"# inside func.call @silu at {where}") and "#" not in lines[at + 2]
    assert trace.as_dicts()[inside[0].number]["source_reason"] == inside[0].frame_reason


def test_an_op_without_a_frame_says_why(tmp_path):
    text = """func.func @main(%x: tensor<f32>, %c: tensor<i32>) -> tensor<f32> {
  %0 = stablehlo.add %x, %x : tensor<f32> loc(unknown)
  %1 = stablehlo.multiply %0, %0 : tensor<f32> loc("jit(f)/mul")
  %2 = stablehlo.negate %1 : tensor<f32>
  %3 = "stablehlo.case"(%c) ({
    %4 = stablehlo.sqrt %2 : tensor<f32> loc(unknown)
    stablehlo.return %4 : tensor<f32>
  }) : (tensor<i32>) -> tensor<f32>
  return %3 : tensor<f32>
}
"""
    path = tmp_path / "located.mlir"
    path.write_text(text)
    trace = si.trace(path, np.float32(1.5), np.int32(0))
    add, multiply, negate, case, sqrt = trace
    assert (add.frame, add.frame_reason) == (None, "the module gives this op no location")
    assert (multiply.frame, multiply.frame_reason) == (None, "its location names no Python frame, only 'jit(f)/mul'")
    assert (negate.frame.line, negate.frame_reason) == (4, None)
    assert (sqrt.frame, sqrt.frame_reason) == (case.frame, "its location has no Python frame: the frame is that "
                                                           "of the stablehlo.case around it")
    assert str(trace).splitlines() == [
        "stablehlo.add                       f32[] 3  # no source: the module gives this op no location",
        "stablehlo.multiply                  f32[] 9  # no source: its location names no Python frame, only "
        "'jit(f)/mul'",
        "stablehlo.negate                    f32[] -9  # located.mlir:4",   # %2: the printer's kind of name
        "stablehlo.case                      f32[] nan  # located.mlir:5",
        "  branch 0",
        "    stablehlo.sqrt                  f32[] nan  # inside stablehlo.case at located.mlir:5"]
    assert str(sqrt) == "stablehlo.sqrt  f32[] nan  # inside stablehlo.case at located.mlir:5"


def test_folding_is_adjustable(doubling):
    trace = si.trace(doubling, X, np.int32(5))
    assert "folded" not in trace.text(head=5, tail=1)
    lines = trace.text(head=0, tail=0).splitlines()
    assert lines[2] == "  ⋯ iterations 0–5 folded (6 × cond, 5 × body; 31 ops)"


def test_jax_function_with_source_lines():
    def f(x):
        y = jnp.sin(x)
        return jnp.where(y > 0, y, 0.0).sum()

    trace = si.trace(f, np.array([1.0, -1.0], np.float32))
    lines = str(trace).splitlines()
    line = f.__code__.co_firstlineno + 1
    assert lines[0].startswith("stablehlo.sine") and lines[0].endswith(
        f"f32[2] [0.84147 -0.84147]  # test_tools_trace.py:{line} (test_jax_function_with_source_lines.<locals>.f)")
    call = next(r for r in trace if r.op == "func.call")     # jnp.where is a nested jit
    assert call.label == "func.call @_where"
    inside = [r for r in trace if r.parent == call.number]
    assert [r.op for r in inside][-1] == "stablehlo.select" and inside[0].stack[-1].region == "@_where"
    assert trace.outputs[0] == np.float32(np.sin(1.0))


def test_pytree_arguments_and_python_scalars():
    trace = si.trace(lambda p, s: p["w"] * s + p["b"], {"w": np.ones(2, np.float32), "b": np.float32(1)}, 3.0)
    np.testing.assert_array_equal(trace.outputs[0], [4, 4])


def test_failed_run_keeps_the_trace_up_to_the_op():
    def broken(info):
        def run(x):
            raise ValueError("boom")
        return run

    with registry.replaced(ops={"stablehlo.cosine": broken}):
        trace = si.trace(lambda x: jnp.cos(jnp.sin(x)), np.float32(1))
    assert trace.records[-1].op == "stablehlo.cosine" and trace.records[-1].results is None
    assert "boom" in str(trace.error) and str(trace).splitlines()[-1].startswith("error: stablehlo.cosine")


def test_vectorized_regions_are_shown_as_such():
    """An op may run an element-wise region once on whole tensors (bound as vectorized)."""

    def vectorized_map(info):
        return lambda regions, *inputs: regions[0].as_vectorized()(*inputs)[0]

    with registry.replaced(ops={"stablehlo.map": vectorized_map}):
        text = """func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.map"(%x, %x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.multiply %a, %b : tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
        trace = si.trace(text, np.arange(4, dtype=np.float32))
    multiply = trace.find("multiply")[0]
    assert multiply.stack[-1].vectorized and multiply.results[0].shape == (4,)
    assert "  body, call 0, vectorized" in str(trace).splitlines()


def test_recorder_splits_runs_and_reports_each_finished_run():
    program = si.load(DOUBLING)
    finished = []
    recorder = TraceRecorder(on_trace=finished.append)
    program.run(X, np.int32(1), listeners=[recorder])
    program.run(X, np.int32(2), listeners=[recorder])
    assert len(recorder.traces) == 2 and finished == recorder.traces
    assert [len(t) for t in recorder.traces] == [1 + 1 + 2 + 5 + 2, 1 + 1 + 3 + 10 + 2]
    assert recorder.traces[0].function == "main"


@pytest.mark.parametrize("value, text", [
    (np.float32(0.5), "f32[] 0.5"),
    (np.array([0, 1.3862944, np.nan, -np.inf], np.float32), "f32[4] [0 1.3863 nan -inf]"),
    (np.arange(20, dtype=np.int32).reshape(4, 5), "i32[4,5] min=0 max=19 mean=9.5"),
    (np.array([1.0, np.inf, np.nan] * 4), "f64[12] min=1 max=inf mean=inf nan=4 inf=4"),
    (np.ones(10, bool), "i1[10] true=10"),
    (np.array([True, False]), "i1[2] [true false]"),
    (np.array([3 + 4j] * 9, np.complex64), "complex<f32>[9] |x| min=5 max=5 mean=5"),
    ((np.float32(1), np.int8(-2)), "(f32[] 1, i8[] -2)"),
    (si.TOKEN, "token"),
])
def test_value_summaries(value, text):
    assert str(summarize(value)) == text



NAMED = """func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %m = stablehlo.multiply %x, %x : tensor<3xf32>
  %e = "stablehlo.exponential"(%m) : (tensor<3xf32>) -> tensor<3xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %n, %acc = stablehlo.while(%i = %zero, %v = %e) : tensor<f32>, tensor<3xf32>
  cond {
    %c = stablehlo.constant dense<false> : tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    stablehlo.return %i, %v : tensor<f32>, tensor<3xf32>
  }
  %h:2 = call @halves(%acc) : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %s = stablehlo.reduce(%h#1 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %h#0, %s : tensor<3xf32>, tensor<f32>
}
func.func private @halves(%a: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  return %a, %a : tensor<3xf32>, tensor<3xf32>
}
"""


def test_the_names_a_module_s_text_gives_its_values(tmp_path):
    """MLIR keeps no value names (it prints %0, %1 ...): the trace reads them from the
    line each op's location points at: one result, several (``%n, %acc``), a group
    (``%h:2``), the generic form, func.call written ``call``, the short form of reduce
    (whose location is past the op's name). Text given as a string has no file to read."""
    path = tmp_path / "named.mlir"
    path.write_text(NAMED)
    trace = si.trace(path, X)
    assert [record.names for record in trace] == [
        ("%m",), ("%e",), ("%zero",), ("%n", "%acc"), ("%c",), ("%h#0", "%h#1"), ("%s",)]
    assert str(trace).splitlines()[:2] == ["%m = stablehlo.multiply             f32[3] [1 4 9]  # named.mlir:2",
                                           "%e = stablehlo.exponential          f32[3] [2.7183 54.598 8103.1]  "
                                           "# named.mlir:3"]
    assert trace.as_dicts()[3]["names"] == ["%n", "%acc"]
    assert [record.names for record in si.trace(NAMED, X)] == [()] * 7
    # the names MLIR's printer gives (%0, %arg0) number values: no names
    path.write_text(NAMED.replace("%m", "%0").replace("%h", "%1").replace("%x", "%arg0"))
    assert [record.names for record in si.trace(path, X)] == [
        (), ("%e",), ("%zero",), ("%n", "%acc"), ("%c",), (), ("%s",)]
    assert si.load(path).function("main").arg_names == (None,)
    path.write_text(NAMED)
    assert si.load(path).function("main").arg_names == ("%x",)


def test_a_jax_module_has_no_names_to_read(tmp_path):
    """A module JAX lowered points its ops at Python lines, which name no MLIR values."""
    def f(x):
        y = x * x
        return jnp.exp(y)

    path = tmp_path / "f.mlir"
    path.write_text(jax.jit(f).lower(X).as_text(debug_info=True))
    trace = si.trace(path, X)
    assert [record.op for record in trace] == ["stablehlo.multiply", "stablehlo.exponential"]
    assert [record.names for record in trace] == [(), ()]
    assert str(trace).splitlines()[0].startswith("stablehlo.multiply ")
