"""Host callbacks (jax.debug.print, debug.callback, pure_callback, io_callback) in a function
lowered for the CPU, JAX's default platform: si.run and every tool call them, once per call
in the program, in program order, with the values XLA CPU gives them, and return what XLA CPU
returns (the oracle: jax.jit on the CPU, its own callbacks recorded apart). The CPU lowering
names each callback by an index into the Python functions JAX keeps in the Lowered
(ops/host_callback.py)."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import io_callback
from jax.sharding import NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from stablehlo_interp.errors import OpExecutionError, UnsupportedOpError

CPU = jax.devices("cpu")[0]
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def every_kind(log: list):
    """A function with one host callback of each kind (and an ordered io_callback in a
    loop), which writes what each callback got into ``log``."""

    def debugged(v):
        log.append(("debug", np.asarray(v).copy()))

    def pure(v):
        log.append(("pure", np.asarray(v).copy()))
        return np.exp(np.asarray(v))

    counter = iter(range(100))

    def ticket(v):
        log.append(("io", np.asarray(v).copy()))
        return np.float32(next(counter))   # a state only an in-order call sequence gets right

    def f(x):
        jax.debug.callback(debugged, x)
        y = jax.pure_callback(pure, jax.ShapeDtypeStruct(x.shape, x.dtype), jnp.sin(x))
        z = lax.fori_loop(0, 3, lambda i, acc: acc + io_callback(
            ticket, jax.ShapeDtypeStruct((), jnp.float32), acc + i, ordered=True), x[0, 0])
        jax.debug.callback(debugged, y * z, ordered=True)
        return {"y": y, "z": z, "w": y * z}

    return f


def oracle(make, *args):
    """XLA CPU's results of ``make(log)`` and what its callbacks got, in order."""
    log = []
    with jax.default_device(CPU):
        results = jax.tree.map(np.asarray, jax.jit(make(log))(*args))
    return results, log


def assert_same_calls(got: list, expected: list):
    assert [name for name, _ in got] == [name for name, _ in expected] and got
    for (name, value), (_, want) in zip(got, expected):
        assert value.dtype == want.dtype, name
        np.testing.assert_allclose(value, want, rtol=1e-6, atol=1e-6, err_msg=name)


def assert_same_tree(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def as_tree(expected, outputs: list):
    """A module's flat results as the function's output pytree: the token an ordered effect
    threads through @main left out."""
    return jax.tree.unflatten(jax.tree.structure(expected), [o for o in outputs if isinstance(o, np.ndarray)])


def test_the_function_is_lowered_for_the_cpu_with_its_callbacks():
    """What the rest of this file runs: the CPU's custom call, once per callback in the code."""
    text = jax.jit(every_kind([])).lower(X).as_text()
    assert text.count("stablehlo.custom_call @xla_ffi_python_cpu_callback") == 4
    assert "stablehlo_interp.host_callback" not in text


def test_si_run_calls_every_kind_in_order():
    expected, expected_log = oracle(every_kind, X)
    log = []
    assert_same_tree(si.run(every_kind(log), X), expected)
    assert [name for name, _ in log] == ["debug", "pure", "io", "io", "io", "debug"]
    assert_same_calls(log, expected_log)
    # acc starts at x[0, 0] = -1 and adds the tickets 0, 1, 2 in turn: the callback sees acc + i
    assert [float(v) for name, v in log if name == "io"] == [-1.0, 0.0, 2.0]
    assert float(expected["z"]) == 2.0


def test_a_jitted_function_a_lowered_and_a_loaded_lowered_call_their_callbacks():
    expected, expected_log = oracle(every_kind, X)
    for make_target in (lambda f: jax.jit(f), lambda f: jax.jit(f).lower(X),
                        lambda f: si.load(jax.jit(f).lower(X))):
        log = []
        target = make_target(every_kind(log))
        outputs = target.call(X) if isinstance(target, si.Program) else si.run(target, X)
        assert_same_tree(outputs, expected)
        assert_same_calls(log, expected_log)


def test_trace_find_nonfinite_and_explain_call_the_callbacks_once():
    expected, expected_log = oracle(every_kind, X)
    log = []
    trace = si.trace(every_kind(log), X)
    assert_same_tree(as_tree(expected, trace.outputs), expected)
    assert len(trace.find("stablehlo.custom_call")) == 6    # 4 in the code, one of them 3 times
    assert_same_calls(log, expected_log)

    log = []
    assert si.find_nonfinite(every_kind(log), X) is None
    assert_same_calls(log, expected_log)
    log = []
    assert si.find_nonfinite(every_kind(log), X, mode="first") is None
    assert_same_calls(log, expected_log)

    log = []
    explanation = si.explain(every_kind(log), X, file=io.StringIO())
    assert "xla_ffi_python_cpu_callback" in str(explanation)
    assert_same_calls(log, expected_log)


def test_probe_breakpoints_and_explore_run_the_callbacks(tmp_path):
    expected, expected_log = oracle(every_kind, X)
    log = []
    si.probe(every_kind(log), X, path=tmp_path / "probes.npz")
    assert_same_calls(log, expected_log)

    log = []
    hit = si.break_at(every_kind(log), X, at="stablehlo.multiply")   # y * z, after the loop
    assert hit is not None
    assert [name for name, _ in log] == ["debug", "pure", "io", "io", "io"]   # stopped before the last

    log = []
    exploration = si.explore(every_kind(log), X, path=tmp_path / "page.html")
    assert "xla_ffi_python_cpu_callback" in (tmp_path / "page.html").read_text()
    assert len(exploration.trace) > 0
    assert_same_calls(log, expected_log)


def test_debug_print_prints_what_the_cpu_prints(capsys):
    def f(v):
        jax.debug.print("v={v} max={m}", v=v, m=v.max(), ordered=True)
        jax.debug.print("after {w}", w=v * 2, ordered=True)
        return v + 1

    with jax.default_device(CPU):
        expected = np.asarray(jax.jit(f)(X))
    printed_by_xla = capsys.readouterr().out
    np.testing.assert_array_equal(si.run(f, X), expected)
    printed = capsys.readouterr().out
    assert printed == printed_by_xla and printed.index("v=") < printed.index("after ")


def test_a_callback_that_raises_is_an_error_naming_it():
    def refuses(v):
        raise ValueError("no negative values, please")

    def f(x):
        return jax.pure_callback(refuses, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

    with pytest.raises(OpExecutionError, match=r"stablehlo.custom_call at .*test_host_callbacks\.py:\d+ .*"
                                              r"pure_callback.*: the host callback #0 raised ValueError: "
                                              r"no negative values, please") as raised:
        si.run(f, X)
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_callback_returning_the_wrong_shape_is_an_error():
    def f(x):
        return jax.pure_callback(lambda v: np.zeros(7, np.float32), jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(OpExecutionError, match=r"Incorrect output shape for return value #0"):
        si.run(f, X)


def test_the_text_of_a_lowered_needs_its_callbacks():
    """The module's text does not carry the Python functions: loading it alone is a clear
    error; given the Lowered's functions, it runs."""
    log = []
    lowered = jax.jit(every_kind(log)).lower(X)
    with pytest.raises(UnsupportedOpError, match=r"custom_call at .*test_host_callbacks\.py:\d+.*host callback #0 "
                                                 r".*known only to the jax.stages.Lowered"):
        si.load(lowered.as_text(debug_info=True))
    expected, expected_log = oracle(every_kind, X)
    program = si.load(lowered.as_text(), host_callbacks=si.load(lowered).host_callbacks)
    types = [str(t) for t in program.function("main").arg_types]
    assert types == ["!stablehlo.token", "!stablehlo.token", "tensor<2x3xf32>"]   # one per ordered effect
    assert_same_tree(as_tree(expected, program.run(si.TOKEN, si.TOKEN, X)), expected)
    assert_same_calls(log, expected_log)


def test_compare_runs_a_lowered_with_callbacks_on_both_sides():
    """A Lowered made for the CPU: the interpreter calls its callbacks, and so does XLA CPU,
    given the same functions; another backend cannot, and compare says so."""
    log = []

    def f(x):
        jax.debug.callback(lambda v: log.append(np.asarray(v).copy()), x)
        return jnp.sin(x) * 2

    lowered = jax.jit(f).lower(X)
    comparison = si.compare(lowered, X, backend="cpu")
    assert comparison.ok, str(comparison)
    assert len(log) >= 2   # one run each side at least
    for seen in log:
        np.testing.assert_array_equal(seen, X)
    with pytest.raises(si.InterpreterError, match="host callbacks lowered for the CPU, which reordered cannot call"):
        si.compare(lowered, X, backend=si.tools.InterpreterBackend(name="reordered"))


def test_a_cpu_callback_without_its_index_is_a_clear_error():
    text = """func.func @main(%x: tensor<f32>) -> tensor<f32> {
      %0 = stablehlo.custom_call @xla_ffi_python_cpu_callback(%x) : (tensor<f32>) -> tensor<f32>
      return %0 : tensor<f32>
    }"""
    with pytest.raises(si.OpError, match=r"custom_call at .*: a host callback needs its index"):
        si.load(text)


def test_si_run_calls_a_partitioned_callback_once_per_device_with_its_shards():
    """partitioned=True over 8 CPU devices: XLA calls the callback on every device with its
    shard of each operand (the transpose as constrained, the sum as Shardy's propagation
    shards it); si.run of the same Lowered makes the same calls (XLA's devices run in
    parallel: compared in any order), device by device."""
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")).reshape(2, 4), ("a", "b"))
    log = []

    def f(v):
        t = lax.with_sharding_constraint(v.T, NamedSharding(mesh, P("b", None)))
        jax.debug.callback(lambda *a: log.append(tuple(np.asarray(x).tolist() for x in a)), t, v.sum(0),
                           partitioned=True)
        return t * 2

    x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(4, 8), NamedSharding(mesh, P("a", "b")))
    lowered = jax.jit(f).lower(x)
    assert "stablehlo.custom_call @xla_ffi_partitioned_python_cpu_callback" in lowered.as_text()
    expected = np.asarray(lowered.compile()(x))
    jax.effects_barrier()
    calls_by_xla = sorted(log)
    assert len(calls_by_xla) == 8
    log.clear()
    np.testing.assert_array_equal(si.run(lowered, x), expected)
    assert sorted(log) == calls_by_xla
    assert [sums for _, sums in log] == [[48.0 + 8 * (d % 4), 52.0 + 8 * (d % 4)] for d in range(8)]


def test_a_partitioned_callback_that_raises_names_the_device():
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:2]), ("a",))

    def refuses_odd_shards(v):
        if int(v[0]) % 2:
            raise ValueError("odd shard")

    def f(v):
        jax.debug.callback(refuses_odd_shards, v, partitioned=True)
        return v

    x = jax.device_put(np.arange(2, dtype=np.int32), NamedSharding(mesh, P("a")))
    with pytest.raises(OpExecutionError, match=r"the host callback #0 on device 1 raised ValueError: odd shard"):
        si.run(f, x)


def test_a_partitioned_callback_with_results_is_refused():
    text = """func.func @main(%x: tensor<f32>) -> tensor<f32> {
      %0 = stablehlo.custom_call @xla_ffi_partitioned_python_cpu_callback(%x)
             {mhlo.backend_config = {index = 0 : ui64}} : (tensor<f32>) -> tensor<f32>
      return %0 : tensor<f32>
    }"""
    with pytest.raises(UnsupportedOpError, match=r"a partitioned host callback returns no values"):
        si.load(text, host_callbacks=[lambda v: (v,)])
