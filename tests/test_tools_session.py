"""Tools on the interp device: on_device(), the environment variables, and the pytest plugin."""

import io
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.tools import TraceRecorder
from stablehlo_interp.device import session

pytest_plugins = ["pytester"]


def interp_device():
    """The interp device (the package's own: its absence is a failure, not a skip)."""
    return jax.devices("interp")[0]


def test_on_device_attaches_to_the_list_the_device_runs_with():
    from stablehlo_interp.device import runtime

    recorder = TraceRecorder()
    with si.on_device(recorder) as attached:
        assert attached is recorder and runtime.listeners[-1] is recorder
    assert recorder not in runtime.listeners


def test_on_device_changes_the_list_under_the_devices_lock():
    """A block entered on another thread waits for the lock before it attaches, and
    blocks on many threads leave the list as it was."""
    import threading

    from stablehlo_interp.device import runtime

    recorder, entered = TraceRecorder(), threading.Event()

    def attach():
        with si.on_device(recorder):
            entered.set()

    with runtime.listeners_lock:
        thread = threading.Thread(target=attach)
        thread.start()
        assert not entered.wait(0.2) and recorder not in runtime.listeners
    thread.join(10)
    assert entered.is_set() and recorder not in runtime.listeners

    before = list(runtime.listeners)

    def enter_and_leave():
        for _ in range(200):
            with si.on_device(TraceRecorder(), TraceRecorder()):
                pass

    threads = [threading.Thread(target=enter_and_leave) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert runtime.listeners == before


def test_trace_every_program_run_on_the_device():
    device = interp_device()
    x = jax.device_put(np.array([1.0, 4.0], np.float32), device)
    with si.on_device(TraceRecorder()) as recorder:
        y = jax.jit(lambda v: jnp.sqrt(v) + 1)(x)
        jax.block_until_ready(jax.jit(lambda v: v * 3)(y))
    assert len(recorder.traces) == 2
    assert {"stablehlo.sqrt", "stablehlo.add"} <= {r.op for r in recorder.traces[0]}
    assert str(recorder.traces[1]).splitlines()[-1].startswith("stablehlo.multiply                  f32[2] [6 9]")


def test_probes_and_breakpoints_on_the_device(tmp_path):
    device = interp_device()
    x = jax.device_put(np.array([1.0, 4.0], np.float32), device)
    with si.on_device(si.tools.ProbeRecorder("sqrt")) as probes:
        jax.block_until_ready(jax.jit(lambda v: jnp.sqrt(v) * 2)(x))
    probes.save(tmp_path / "p.npz")
    np.testing.assert_array_equal(si.load_probes(tmp_path / "p.npz").find("sqrt")[0].value, [1, 2])
    double = si.tools.Breakpoint("sqrt", action=lambda hit: [hit.results[0] * 2])   # replaces a value
    with si.on_device(double):
        np.testing.assert_array_equal(jax.jit(lambda v: jnp.sqrt(v) + 1)(x), [3, 5])


def test_environment_variables_choose_listeners(tmp_path):
    path = tmp_path / "trace.txt"
    trace_to_file, = session.listeners_from_environment({"STABLEHLO_INTERP_TRACE": str(path)})
    finder, = session.listeners_from_environment({"STABLEHLO_INTERP_NONFINITE": "1"})
    assert session.listeners_from_environment({"STABLEHLO_INTERP_TRACE": "0"}) == []
    program = si.load("""func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.log %x : tensor<f32>
  return %0 : tensor<f32>
}""")
    program.run(np.float32(1), listeners=[trace_to_file])
    program.run(np.float32(2), listeners=[trace_to_file])
    assert path.read_text().splitlines() == [
        "== stablehlo-interp trace of @main ==", "stablehlo.log                       f32[] 0  # -:2",
        "== stablehlo-interp trace of @main ==", "stablehlo.log                       f32[] 0.69315  # -:2",
    ]
    with pytest.raises(si.StopExecution, match="NaN made by stablehlo.log"):
        program.run(np.float32(-1), listeners=[finder])


def test_printing_recorder_keeps_nothing():
    stream = io.StringIO()
    recorder = session.printing_recorder(stream)
    si.run("""func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.negate %x : tensor<i32>
  return %0 : tensor<i32>
}""", np.int32(3), listeners=[recorder])
    assert stream.getvalue().endswith("stablehlo.negate                    i32[] -3  # -:2\n")
    assert recorder.traces == []


def test_trace_environment_variable_on_the_device():
    interp_device()
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        x = jax.device_put(np.float32(2), jax.devices("interp")[0])
        print(jax.jit(lambda v: jnp.exp(v) - 1)(x))
    """)
    environment = dict(os.environ, STABLEHLO_INTERP_TRACE="1", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env=environment)
    assert result.returncode == 0, result.stderr
    assert "== stablehlo-interp trace of @main ==" in result.stderr
    assert "stablehlo.exponential               f32[] 7.3891" in result.stderr
    assert result.stdout.strip() == "6.389056"


WRONG_BACKEND = '''
import numpy as np
import stablehlo_interp as si
from stablehlo_interp.tools import InterpreterBackend

# A backend whose dot products are off by 1%: the battery must catch it.
wrong_dot = InterpreterBackend(
    ops={"stablehlo.dot_general": lambda info: lambda a, b: (np.matmul(a, b) * 1.01).astype(a.dtype)},
    name="wrong dot")
'''


def test_pytest_plugin_runs_the_battery(pytester):
    """In process, so with the session's jax_enable_x64 on: a user's 64-bit setting must not
    break the battery's programs (dynamic_slice's start indices once mixed i32 and i64)."""
    result = pytester.runpytest("-p", "stablehlo_interp.pytest_plugin", "--pyargs", "stablehlo_interp.tools.battery",
                                "-k", "matmul or scan or integer or dynamic_slice", "--interp-backend=cpu", "-q")
    result.assert_outcomes(passed=4)


def test_pytest_plugin_reports_the_first_divergent_op_of_a_wrong_backend(pytester):
    pytester.makepyfile(wrong_backend=WRONG_BACKEND)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "stablehlo_interp.pytest_plugin", "--pyargs", "stablehlo_interp.tools.battery",
                                "-k", "matmul or elementwise_f32", "--interp-backend=wrong_backend:wrong_dot", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*first divergent op: stablehlo.dot_general (op #0 of the entry function)*",
                                 "*source: BatteryProgram(\"matmul\", lambda x, y: x @ y*"])


def test_pytest_plugin_fixtures_in_a_users_test_file(pytester):
    pytester.makepyfile(test_mine="""
        import jax.numpy as jnp
        import numpy as np

        def test_softplus(interp_check):
            comparison = interp_check(lambda x: jnp.logaddexp(x, 0.0), np.linspace(-5, 5, 11, dtype=np.float32))
            assert comparison.ok

        def test_tolerances(interp_tolerances):
            assert interp_tolerances == {"f32": (0.001, 0.0001)}
    """)
    result = pytester.runpytest("-p", "stablehlo_interp.pytest_plugin", "--interp-tolerance", "f32=1e-3,1e-4", "-q")
    result.assert_outcomes(passed=2)
