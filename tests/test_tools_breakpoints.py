"""Breakpoints (programmatic and the interactive prompt) and the listener hook API they use."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.tools import Breakpoint, Debugger


def loop(x):
    def body(carry, _):
        carry = jnp.sqrt(carry) - 1.0          # the NaN appears when carry < 1
        return carry, carry
    return jax.lax.scan(body, x, None, length=4)


SQRT_LINE = loop.__code__.co_firstlineno + 2
LOOP_LINE = loop.__code__.co_firstlineno + 4


def test_break_at_an_op_with_a_condition():
    hit = si.break_at(loop, np.float32(16.0), at="sqrt", condition=lambda h: h.operands[0] < 1)
    # 16 -> 3 -> 0.732 -> -0.144: the third sqrt (iteration 2) sees 0.732
    assert hit.op == "stablehlo.sqrt" and hit.stack[0].call == 2
    np.testing.assert_allclose(hit.operands[0], np.sqrt(3.0) - 1, rtol=1e-6)
    lines = str(hit).splitlines()
    assert lines[0] == f"stablehlo.sqrt at test_tools_breakpoints.py:{SQRT_LINE} (loop.<locals>.body)"
    assert lines[1] == "  source: carry = jnp.sqrt(carry) - 1.0          # the NaN appears when carry < 1"


def test_break_at_a_source_line_and_when_nothing_matches():
    hit = si.break_at(loop, np.float32(16.0), at=SQRT_LINE)
    assert hit.op == "stablehlo.sqrt" and hit.stack[0].call == 0 and hit.results[0] == 4
    assert si.break_at(loop, np.float32(16.0), at="cosine") is None


def test_a_breakpoint_action_can_replace_a_value():
    def clamp(hit):
        return [np.maximum(hit.results[0], np.float32(0))]

    program = si.load(jax.jit(lambda x: jnp.sqrt(x - 1.0) * 2).lower(np.float32(0)))
    (out,) = program.run(np.float32(0.0), listeners=[Breakpoint("subtract", action=clamp)])
    assert out == 0.0      # sqrt(max(-1, 0)) * 2, not NaN


def test_listener_hooks_see_every_op_and_can_replace_and_stop():
    """The hook API every tool is built on: before_op / after_op / StopExecution."""
    events = []

    class Log(si.Listener):
        def before_op(self, step, operands, stack):
            events.append(("before", step.name, len(stack)))

        def after_op(self, step, operands, results, stack):
            events.append(("after", step.name, len(stack)))

    class Negate(si.Listener):
        def after_op(self, step, operands, results, stack):
            if step.name == "stablehlo.add":
                return [-results[0]]

    class StopAtMultiply(si.Listener):
        def before_op(self, step, operands, stack):
            if step.name == "stablehlo.multiply":
                raise si.StopExecution("stopped", values=list(operands))

    text = """func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.add %x, %x : tensor<f32>
  %1 = stablehlo.multiply %0, %x : tensor<f32>
  return %1 : tensor<f32>
}"""
    program = si.load(text)
    assert program.run(np.float32(3), listeners=[Log(), Negate()])[0] == -18
    assert events == [("before", "stablehlo.add", 0), ("after", "stablehlo.add", 0),
                      ("before", "stablehlo.multiply", 0), ("after", "stablehlo.multiply", 0)]
    with pytest.raises(si.StopExecution) as stopped:
        program.run(np.float32(3), listeners=[StopAtMultiply()])
    assert stopped.value.values == [6, 3]


def test_interactive_session():
    commands = "\n".join([
        "v",                      # values at the first sqrt
        "w",
        "l",
        "p results[0] * 10",
        "n",                      # next op at this depth: the constant 1.0
        "n",                      # then the subtract
        "set 0 results[0] + 100",
        "c",                      # to the next sqrt (iteration 1), which sees 103
        "v",
        "q",
    ]) + "\n"
    out = io.StringIO()
    outputs = si.debug(loop, np.float32(16.0), breakpoints=["sqrt"], stdin=io.StringIO(commands), stdout=out)
    assert outputs is None    # quit
    where = f"test_tools_breakpoints.py:{SQRT_LINE} (loop.<locals>.body)"
    assert out.getvalue().splitlines() == [
        f"stopped after stablehlo.sqrt [body, iteration 0] [@closed_call] at {where}",
        "(si) v",
        "operand #0: f32[] 16",
        "result #0: f32[] 4",
        "(si) w",
        f"inside stablehlo.while at test_tools_breakpoints.py:{LOOP_LINE} (loop): body, iteration 0",
        f"inside func.call @closed_call at test_tools_breakpoints.py:{LOOP_LINE} (loop)",
        "(si) l",
        f"{where}: carry = jnp.sqrt(carry) - 1.0          # the NaN appears when carry < 1",
        "(si) p results[0] * 10",
        "np.float32(40.0)",
        "(si) n",
        "stopped after stablehlo.constant [body, iteration 0] [@closed_call]",
        "(si) n",
        f"stopped after stablehlo.subtract [body, iteration 0] [@closed_call] at {where}",
        "(si) set 0 results[0] + 100",
        "result #0 := f32[] 103",
        "(si) c",
        f"stopped after stablehlo.sqrt [body, iteration 1] [@closed_call] at {where}",
        "(si) v",
        "operand #0: f32[] 103",
        "result #0: f32[] 10.149",     # sqrt(103)
        "(si) q",
    ]


def test_debugger_steps_every_op_without_breakpoints():
    out = io.StringIO()
    outputs = si.debug(lambda x: x * 2 + 1, np.float32(1), stdin=io.StringIO("s\ns\ns\ns\n"), stdout=out)
    stops = [line for line in out.getvalue().splitlines() if "stopped after" in line]
    assert [stop.split("stopped after ")[1].split()[0] for stop in stops] == [
        "stablehlo.constant", "stablehlo.multiply", "stablehlo.constant", "stablehlo.add"]
    assert outputs[0] == 3
    assert isinstance(Debugger(), si.Listener)
