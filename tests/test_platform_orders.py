"""Every tool under every platform order docs/device.md names ("Platform orders"):
``JAX_PLATFORMS`` unset, ``cpu``, ``interp``, ``interp,cpu`` and ``cpu,interp``.

JAX reads ``JAX_PLATFORMS`` once, when it starts its backends, so each order gets one
child process, which runs every tool that takes a JAX function on one program with a
``jax.debug.callback`` and a ``jax.pure_callback`` and prints what each gave as JSON.
The oracle is NumPy (the program is ``log(2x - 1)``, its doubling done by the callback)
and, where JAX has a CPU device, XLA's CPU through ``si.compare``. With ``interp``
alone, JAX itself cannot run a host callback (it places the callback's arguments on a
CPU device): every tool that runs the program stops at the callback with JAX's message,
the op and the source line, and the tools that lower for the CPU say that
``JAX_PLATFORMS`` leaves it out.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHILD = '''
import json, os, sys, tempfile
import numpy as np
import jax, jax.numpy as jnp
import stablehlo_interp as si

seen = []

def f(x):
    jax.debug.callback(lambda v: seen.append(np.asarray(v).tolist()), x)
    doubled = jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return jnp.log(doubled - 1.0)   # LOG LINE

FINITE = jnp.array([1.0, 2.0, 3.0], jnp.float32)
WITH_NAN = jnp.array([1.0, 0.0, 3.0], jnp.float32)   # log(-1) at index 1
scratch = tempfile.mkdtemp()
found = {"default": jax.default_backend()}

def observe(name, thunk):
    before = len(seen)
    try:
        found[name] = thunk()
    except Exception as error:
        found[name] = {"error": type(error).__name__, "message": str(error)}
    if isinstance(found[name], dict):
        found[name]["callbacks"] = len(seen) - before

def values(array):
    return np.asarray(array).tolist()

def traced():
    trace = si.trace(f, FINITE, values=True)
    calls = trace.find("stablehlo.custom_call")
    return {"ops": [r.op for r in trace], "callback_results": [values(r.values[-1]) for r in calls if r.values],
            "error": None if trace.error is None else str(trace.error)}

def nonfinite():
    report = si.find_nonfinite(f, WITH_NAN)
    return {"op": report.op, "line": report.location.frame.line, "text": str(report)}

def probed():
    path = os.path.join(scratch, "probes.npz")
    recorder = si.probe(f, FINITE, path=path, select="stablehlo.log")
    saved = np.load(path)
    return {"log": [values(saved[p.key]) for p in recorder.probes]}

def stopped():
    hit = si.break_at(f, FINITE, at="stablehlo.log")
    return {"operand": values(hit.operands[0]), "result": values(hit.results[0])}

def profiled():
    return {"custom_call_calls": si.profile(f, FINITE).by_op()["stablehlo.custom_call"].calls}

def explained():
    explanation = si.explain(f, FINITE, file=open(os.devnull, "w"))
    return {"jaxpr_callback": "pure_callback" in explanation.jaxpr,
            "stablehlo_callback": "custom_call" in explanation.stablehlo}

def explored():
    path = os.path.join(scratch, "page.html")
    exploration = si.explore(f, FINITE, path=path, backend="cpu")
    return {"agrees": exploration.comparison.ok, "ops": [r.op for r in exploration.trace],
            "page_names_callback": "custom_call" in pathlib.Path(path).read_text()}

def compared():
    comparison = si.compare(f, FINITE, backend="cpu")
    return {"ok": comparison.ok, "text": str(comparison)}

def portable():
    report = si.portability(f, FINITE)
    return {"outputs": values(report.outputs), "findings": len(report.findings)}

def on_interp_device():
    recorder = si.tools.TraceRecorder()
    with si.on_device(recorder):
        result = jax.jit(f, device=jax.devices("interp")[0])(FINITE)
    return {"result": values(result), "ops": [r.op for r in recorder.traces[-1]]}

def per_device():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
    four = jax.device_put(jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32),
                          jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i")))
    run = si.run_per_device(f, four)
    return {"outputs": values(run.outputs), "devices": len(run.per_device)}

def guarded():
    jitted = jax.jit(f)
    with si.debug_nans():
        for index in range(5):
            jitted(WITH_NAN if index == 2 else FINITE)
    return {"raised": None}

import pathlib
observe("jit", lambda: {"result": values(jax.jit(f)(FINITE))})
observe("trace", traced)
observe("find_nonfinite", nonfinite)
observe("probe", probed)
observe("break_at", stopped)
observe("profile", profiled)
observe("explain", explained)
observe("explore", explored)
observe("compare", compared)
observe("codegen_options", lambda: {"report": str(si.codegen_options(f, FINITE))})
observe("passes", lambda: {"report": str(si.passes(f, FINITE))})
observe("portability", portable)
observe("run_per_device", per_device)
observe("debug_nans", guarded)
if "interp" in os.environ.get("JAX_PLATFORMS", "interp"):
    observe("on_device", on_interp_device)
    on_interp = jax.device_put(FINITE, jax.devices("interp")[0])   # committed there
    observe("compare_committed", lambda: {"ok": si.compare(f, on_interp, backend="cpu").ok})
    mesh = jax.sharding.Mesh(np.array(jax.devices("interp")[:3]), ("i",))
    sharded = jax.device_put(FINITE, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i")))
    observe("compare_sharded", lambda: {"ok": si.compare(f, sharded, backend="cpu").ok})
if os.environ.get("JAX_PLATFORMS") == "interp":   # XLA's CPU is there in child processes only
    def g(x):
        return jnp.log(jnp.exp(x) + 1.0)
    observe("compare_in_a_child", lambda: {"text": str(si.compare(g, FINITE, backend=si.tools.JaxChildBackend("cpu")))})
    observe("compare_without_callbacks", lambda: {"text": str(si.compare(g, FINITE, backend="cpu"))})
    observe("codegen_without_callbacks", lambda: {"text": str(si.codegen_options(g, FINITE))})
    def passes_without_callbacks():
        report = si.passes(g, FINITE)
        return {"stages": len(report.stages), "first_change": report.first_change is not None,
                "compiled_differs": report.compiled_differs}
    observe("passes_without_callbacks", passes_without_callbacks)
print("FOUND " + json.dumps(found))
'''

ORDERS = (None, "cpu", "interp", "interp,cpu", "cpu,interp")
EXPECTED = np.log(2 * np.array([1.0, 2.0, 3.0], np.float32) - 1).tolist()
HOST_CALLBACK_OPS = {"stablehlo.custom_call"}
EQUINOX = "host callbacks"


@pytest.fixture(scope="module")
def child_file(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("orders") / "orders_child.py"
    path.write_text(CHILD)
    return path


def _run_child(child_file: pathlib.Path, order: str | None) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if order is not None:
        environment["JAX_PLATFORMS"] = order
    child = subprocess.run([sys.executable, str(child_file)], env=environment, capture_output=True, text=True,
                           timeout=300)
    lines = [line for line in child.stdout.splitlines() if line.startswith("FOUND ")]
    assert child.returncode == 0 and lines, child.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("FOUND "))


def _log_line(child_file: pathlib.Path) -> int:
    return next(number for number, line in enumerate(child_file.read_text().splitlines(), 1) if "# LOG LINE" in line)


@pytest.mark.parametrize("order", ORDERS, ids=lambda order: order or "unset")
def test_every_tool_under_the_order(child_file, order):
    found = _run_child(child_file, order)
    assert found["default"] == ("interp" if order in ("interp", "interp,cpu") else "cpu")
    if order == "interp":
        _check_without_cpu(found)
    else:
        _check_with_cpu(found, _log_line(child_file), order)


def _check_with_cpu(found: dict, log_line: int, order: str | None) -> None:
    np.testing.assert_allclose(found["jit"]["result"], EXPECTED, rtol=1e-6)
    trace = found["trace"]
    assert trace["error"] is None and trace["ops"].count("stablehlo.custom_call") == 2
    assert [2.0, 4.0, 6.0] in trace["callback_results"]   # the pure_callback's values, from the run
    assert trace["callbacks"] == 1                        # the debug callback, called once
    nonfinite = found["find_nonfinite"]
    assert (nonfinite["op"], nonfinite["line"]) == ("stablehlo.log", log_line), nonfinite
    np.testing.assert_allclose(found["probe"]["log"][0], EXPECTED, rtol=1e-6)
    assert found["break_at"]["operand"] == [1.0, 3.0, 5.0]
    np.testing.assert_allclose(found["break_at"]["result"], EXPECTED, rtol=1e-6)
    assert found["profile"]["custom_call_calls"] == 2
    assert found["explain"]["jaxpr_callback"] and found["explain"]["stablehlo_callback"]
    explore = found["explore"]
    assert explore.get("error") is None, explore
    assert explore["agrees"] and explore["page_names_callback"] and "stablehlo.log" in explore["ops"]
    compare = found["compare"]
    assert compare.get("error") is None, compare
    assert compare["ok"] and compare["text"] == "the interpreter and cpu agree on the result"
    assert compare["callbacks"] >= 2        # the interpreter's run and XLA's CPU's each called it
    for refusing in ("codegen_options", "passes"):   # XLA in a child process cannot call back
        assert found[refusing]["error"] == "InterpreterError" and EQUINOX in found[refusing]["message"]
    np.testing.assert_allclose(found["portability"]["outputs"], EXPECTED, rtol=1e-6)
    assert found["portability"]["findings"] == 0
    np.testing.assert_allclose(found["run_per_device"]["outputs"], np.log(2 * np.arange(1.0, 5.0) - 1), rtol=1e-6)
    assert found["run_per_device"]["devices"] == 2
    guarded = found["debug_nans"]   # the third call made the NaN, on JAX's default platform; replayed here
    assert guarded.get("error") == "NonFiniteCall", guarded
    assert guarded["message"].startswith(f"call 3 of f (orders_child.py:{log_line - 3}) returned a NaN or inf on "
                                         f"{found['default']}; the interpreter replayed it"), guarded["message"]
    assert f"NaN made by stablehlo.log at orders_child.py:{log_line} (f)" in guarded["message"]
    assert guarded["callbacks"] >= 3
    if order != "cpu":   # the interp device is there: its listeners see the callbacks it runs
        np.testing.assert_allclose(found["on_device"]["result"], EXPECTED, rtol=1e-6)
        assert found["on_device"]["ops"].count("stablehlo.custom_call") == 2
        assert found["compare_committed"] == {"ok": True, "callbacks": 2}   # lowered for the CPU on the CPU
        sharded = found["compare_sharded"]   # over three interp devices: JAX lowers on them, and says so
        assert sharded["error"] == "ArgumentError" and "put the arguments on cpu devices" in sharded["message"]
    else:
        assert "on_device" not in found


def _check_without_cpu(found: dict) -> None:
    """JAX_PLATFORMS=interp: JAX runs no host callback without a CPU device; each tool
    says so at the op, and those that lower for the CPU say the order leaves it out."""
    no_cpu = 'Make sure "cpu" is listed in --jax_platforms or the JAX_PLATFORMS environment variable'
    assert no_cpu in found["jit"]["message"]
    assert no_cpu in found["trace"]["error"] and found["trace"]["ops"] == ["stablehlo.custom_call"]
    assert no_cpu in found["debug_nans"]["message"]   # the calls themselves cannot run
    for tool in ("find_nonfinite", "probe", "break_at", "profile", "portability", "on_device", "run_per_device"):
        assert no_cpu in found[tool]["message"] and "stablehlo.custom_call at " in found[tool]["message"], tool
    assert found["explain"]["jaxpr_callback"]
    for tool in ("compare", "explore", "passes", "compare_committed", "compare_sharded"):
        assert found[tool]["error"] == "ArgumentError", found[tool]
        assert "JAX_PLATFORMS=interp leaves cpu out: list it too" in found[tool]["message"]
    assert found["codegen_options"]["error"] == "InterpreterError" and EQUINOX in found["codegen_options"]["message"]
    # without callbacks, XLA's CPU runs in the tools' child processes, which start the CPU whatever the order
    assert found["compare_in_a_child"]["text"] == "the interpreter and cpu agree on the result"
    assert found["compare_without_callbacks"]["error"] == "BackendCompileError"
    assert "JAX_PLATFORMS=interp leaves cpu out" in found["compare_without_callbacks"]["message"]
    assert found["codegen_without_callbacks"]["text"].startswith("XLA CPU's compiled result equals the interpreter's")
    passes = found["passes_without_callbacks"]
    assert passes.get("error") is None, passes
    assert passes["stages"] > 1 and not passes["first_change"] and not passes["compiled_differs"]
    for tool, observed in found.items():
        assert not isinstance(observed, dict) or observed.get("callbacks", 0) == 0, tool
