"""``si.compare(..., per_device=True)``: on each device whose results differ, the first
divergent op of its per-device program (tools/compare.py ``_search_devices``). The
backend runs Shardy's per-device program itself, every device at once, inside a manual
computation over the devices (ir/edit.py ``manual_over_devices``).

The oracle is made by hand: a backend that computes one op otherwise (XLA compiling
``tanh`` where the program says ``sine``; the interpreter with ``sine`` off by 0.5 on
large values) differs where the data make that op differ, and only there: on the devices
that hold those elements, which the shardings give.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from stablehlo_interp.backends import JaxBackend
from stablehlo_interp.ir.edit import manual_over_devices


class SineAsTanh(JaxBackend):
    """XLA's CPU compiling ``stablehlo.tanh`` for every ``stablehlo.sine``: equal at 0
    (within a ULP near it), apart elsewhere."""

    def __init__(self):
        super().__init__("cpu")
        self.name = "sine as tanh"

    def __call__(self, module_text, args, host_callbacks=()):
        return super().__call__(module_text.replace("stablehlo.sine", "stablehlo.tanh"), args, host_callbacks)

    def run_per_device(self, module_text, per_device_args, host_callbacks=()):
        return super().run_per_device(module_text.replace("stablehlo.sine", "stablehlo.tanh"), per_device_args,
                                      host_callbacks)


def mesh_of(count: int) -> Mesh:
    return Mesh(np.array(jax.devices("cpu")[:count]), ("x",))


def line_of(function, text: str) -> int:
    """The line of ``function``'s source holding ``text``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def resharded_sine(v):
    w = jax.lax.with_sharding_constraint(v * 2, NamedSharding(mesh_of(8), P(None, "x")))
    return jnp.sin(w) + 1


def test_the_first_divergent_op_on_the_devices_whose_results_differ_on_xla():
    """x (f32[8, 16], rows over 8 devices) is zero but at column 5 and column 10; resharded
    to columns, device 2 holds columns 4-5 and device 5 columns 10-11. XLA runs the
    per-device program (its all_to_all inside the manual computation) with tanh for sine:
    only devices 2 and 5 differ, and on each the first divergent op is the sine, at its
    line, beyond its bound on operands that agree; the other devices agree."""
    x = np.zeros((8, 16), np.float32)
    x[:, 5], x[:, 10] = np.arange(1, 9), -np.arange(1, 9)
    sharded = jax.device_put(x, NamedSharding(mesh_of(8), P("x", None)))
    comparison = si.compare(jax.jit(resharded_sine), sharded, per_device=True, backend=SineAsTanh())
    differing = [device for device, outputs in enumerate(comparison.outputs) if outputs[0] is not None]
    assert differing == [2, 5] and sorted(comparison.divergence_per_device) == [2, 5]
    assert comparison.search_note is None and comparison.compiled_prefixes == 1
    for device, column in [(2, 5), (5, 10)]:
        found = comparison.divergence_per_device[device]
        assert found.op == "stablehlo.sine" and found.kind == "beyond its bound" and found.operands_agree
        assert found.location.frames[0].line == line_of(resharded_sine, "jnp.sin(w)")
        own_column = column % 2
        np.testing.assert_array_equal(found.operands[0][:, own_column], 2 * x[:, column])
        np.testing.assert_allclose(found.theirs[:, own_column], np.tanh(2 * x[:, column]), rtol=1e-6)
        np.testing.assert_allclose(found.ours[:, own_column], np.sin(2 * x[:, column]), rtol=1e-6)
        assert found.difference.mismatched == 8   # the column's 8 nonzero elements; the other column is 0
    text = str(comparison)
    device_2 = text[text.index("device 2: differs"):text.index("device 3:")]
    assert "first divergent op: stablehlo.sine" in device_2
    assert f"test_compare_per_device.py:{line_of(resharded_sine, 'jnp.sin(w)')}" in device_2
    assert "source: return jnp.sin(w) + 1" in device_2
    assert text.count("first divergent op:") == 2


def test_the_interpreter_with_an_op_replaced_as_a_global_backend():
    """A backend without per-device runs (the interpreter with its sine 0.5 off from 250 on)
    runs the per-device program stacked over the devices. 2 * x of arange(128) by columns:
    the elements >= 250 are at row 7, columns 13-15, on device 6 (column 13) and device 7
    (14-15): the sine differs there, on 1 and 2 elements."""
    def wrong_sine(info):
        return lambda a: np.where(a >= 250, np.sin(a) + np.float32(0.5), np.sin(a)).astype(a.dtype)

    wrong = si.tools.InterpreterBackend(ops={"stablehlo.sine": wrong_sine}, name="wrong sine")
    x = jax.device_put(np.arange(128, dtype=np.float32).reshape(8, 16), NamedSharding(mesh_of(8), P("x", None)))
    comparison = si.compare(jax.jit(resharded_sine), x, per_device=True, backend=wrong)
    assert comparison.against == "shards" and sorted(comparison.divergence_per_device) == [6, 7]
    for device, count, where in [(6, 1, (7, 1)), (7, 2, (7, 0))]:
        found = comparison.divergence_per_device[device]
        assert found.op == "stablehlo.sine" and found.difference.mismatched == count
        assert found.difference.index == where and found.difference.max_abs == pytest.approx(0.5)


def test_devices_that_agree_report_no_op():
    """XLA's CPU on the same program: every device agrees, and no op is searched for."""
    x = jax.device_put(np.arange(128, dtype=np.float32).reshape(8, 16), NamedSharding(mesh_of(8), P("x", None)))
    comparison = si.compare(jax.jit(resharded_sine), x, per_device=True)
    assert comparison.ok and comparison.divergence_per_device == {} and comparison.compiled_prefixes == 0
    assert "first divergent op" not in str(comparison)


def test_a_backend_that_cannot_run_the_per_device_program_says_why():
    """A callable that ignores the module it is given (it computes resharded_sine's global
    result, one element off: device 2's) fails on the per-device program stacked over the
    devices: no op is named, the report says why in one line."""
    def off_by_one(module_text, arguments):
        wrong = (np.sin(np.asarray(arguments[0]) * 2) + 1).astype(np.float32)
        wrong[0, 5] += 1
        return [wrong]

    x = jax.device_put(np.arange(128, dtype=np.float32).reshape(8, 16), NamedSharding(mesh_of(8), P("x", None)))
    comparison = si.compare(jax.jit(resharded_sine), x, per_device=True, backend=off_by_one)
    assert [device for device, outputs in enumerate(comparison.outputs) if outputs[0] is not None] == [2]
    assert comparison.divergence_per_device == {}
    assert comparison.search_note.startswith("no search for the first divergent op on each device: off_by_one "
                                             "cannot run the per-device program (IndexError")
    assert comparison.search_note in str(comparison).splitlines()


def test_the_program_stacked_over_the_devices_runs_each_device_on_xla():
    """manual_over_devices: XLA runs a per-device program with an all_reduce over 4
    devices, each on its own part; every device's partial product and their sum are
    what NumPy computes (integers: exact)."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(-4, 5, (2, 8)).astype(np.float32), rng.integers(-4, 5, (8, 3)).astype(np.float32)
    mesh = mesh_of(4)
    function = jax.jit(lambda a, b: a @ b)
    lowered = function.lower(jax.device_put(a, NamedSharding(mesh, P(None, "x"))),
                             jax.device_put(b, NamedSharding(mesh, P("x", None))))
    from stablehlo_interp.ir.edit import inline_calls, prefix_module
    from stablehlo_interp.sharding.per_device import PerDeviceProgram
    partitioned = PerDeviceProgram(si.load(lowered.as_text()))
    text = inline_calls(partitioned.text, "main")
    stacked = manual_over_devices(prefix_module(text, "main", 1, [(0, 0), (1, 0)]), "main", 4)
    per_device = JaxBackend("cpu").run_per_device(
        stacked, [[a[None, :, 2 * d:2 * d + 2], b[None, 2 * d:2 * d + 2]] for d in range(4)])
    for device, (partial, total) in enumerate(per_device):
        np.testing.assert_array_equal(partial[0], a[:, 2 * device:2 * device + 2] @ b[2 * device:2 * device + 2])
        np.testing.assert_array_equal(total[0], a @ b)


def sine_then_contract(a, b):
    return jnp.sin(a) @ b


def test_a_difference_that_reaches_other_devices_through_a_collective():
    """sin(a) @ b with the contracting dimension over 4 devices: each device multiplies its
    two columns of sin(a) by its rows of b, and an all_reduce adds the partial products. a
    is zero but in device 2's columns (4-5), so XLA's tanh for sine differs there only;
    the sum carries it to every device. Device 2's first divergent op is the sine; on the
    others every op agrees on the backend's operands (the all_reduce too, given device 2's
    partial product as XLA computed it), and the report says where the difference came
    from."""
    a = np.zeros((3, 8), np.float32)
    a[:, 4:6] = [[0.5, 1.0], [-1.0, 2.0], [1.5, -0.25]]
    b = np.arange(24, dtype=np.float32).reshape(8, 3) / 8
    mesh = mesh_of(4)
    args = (jax.device_put(a, NamedSharding(mesh, P(None, "x"))), jax.device_put(b, NamedSharding(mesh, P("x", None))))
    comparison = si.compare(jax.jit(sine_then_contract), *args, per_device=True, backend=SineAsTanh())
    assert all(outputs[0] is not None for outputs in comparison.outputs)
    expected = np.tanh(a[:, 4:6]).astype(np.float64) @ b[4:6]
    for device in range(4):
        np.testing.assert_allclose(comparison.theirs[device][0], expected, rtol=1e-6)
    found = comparison.divergence_per_device[2]
    assert found.op == "stablehlo.sine" and found.location.frames[0].line == line_of(sine_then_contract, "jnp.sin")
    np.testing.assert_array_equal(found.operands[0], a[:, 4:6])
    assert [comparison.divergence_per_device[device] for device in (0, 1, 3)] == [None] * 3
    for device in (0, 1, 3):
        assert comparison.device_notes[device] == (f"every op of device {device} agrees on the backend's operands: "
                                                   "the difference came from other devices, through the collectives "
                                                   "(the first divergent op is on device 2)")
        assert comparison.device_notes[device] in str(comparison)


def collective_steps():
    """The all_reduce and all_to_all of small per-device programs over 4 devices, as steps."""
    mesh = mesh_of(4)
    terms = jax.device_put(np.zeros(4, np.float32), NamedSharding(mesh, P("x")))
    summed = jax.jit(lambda v: v.sum()).lower(terms).as_text()
    x = jax.device_put(np.zeros((4, 4), np.float32), NamedSharding(mesh, P("x", None)))
    moved = jax.jit(lambda v: jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P(None, "x")))).lower(x).as_text()
    from stablehlo_interp.engine.grid import steps_within
    from stablehlo_interp.sharding.per_device import PerDeviceProgram

    def step_named(text, name):
        local = PerDeviceProgram(si.load(text)).local
        return next(step for step in steps_within(local.function("main").region) if step.name == name)

    return step_named(summed, "stablehlo.all_reduce"), step_named(moved, "stablehlo.all_to_all")


def test_collectives_are_judged_across_devices():
    """classify_across_devices: an all_reduce adding 1, 1e8, -1e8 and 1e-3 (one term per
    device) in another order is within a sum's bound, (2·4+2)·2^-24·(2e8 + 1.001) ≈ 119;
    1000 off is beyond it; an all_to_all moves values exactly, so any difference is
    beyond; the same values agree."""
    from stablehlo_interp.judge.bounds import classify_across_devices

    all_reduce, all_to_all = collective_steps()
    group = [[np.float32(term)] for term in (1.0, 1e8, -1e8, 1e-3)]
    ours, reordered = np.float32(1.001), np.float32(0.0)   # (1 + 1e8) - 1e8 + 1e-3 rounds the 1 away
    verdict = classify_across_devices(all_reduce, [ours], [reordered], group)
    assert verdict.kind == "rounding noise" and verdict.rule == "a sum across n devices: (2n+2)·u·Σ|terms|"
    verdict = classify_across_devices(all_reduce, [ours], [np.float32(1001.0)], group)
    assert verdict.kind == "beyond its bound"
    assert verdict.difference.bound == pytest.approx(10 * 2.0 ** -24 * (2e8 + 1.001), rel=1e-6)
    assert classify_across_devices(all_reduce, [ours], [ours], group).kind == "agree"
    block = np.arange(4, dtype=np.float32).reshape(4, 1)
    verdict = classify_across_devices(all_to_all, [block], [block + np.float32(2.0 ** -20)], None)
    assert verdict.kind == "beyond its bound" and verdict.rule.endswith("exact")


def test_a_token_cannot_be_stacked_over_the_devices():
    """manual_over_devices refuses a per-device program with a token argument (a
    ModuleError, which compare reports as its reason for not searching)."""
    from stablehlo_interp.errors import ModuleError

    text = ("module attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {\n"
            "  func.func public @main(%t: !stablehlo.token, %x: tensor<2xf32>) -> tensor<2xf32> {\n"
            "    return %x : tensor<2xf32>\n  }\n}\n")
    with pytest.raises(ModuleError, match="a value of type !stablehlo.token cannot be stacked over the devices"):
        manual_over_devices(text, "main", 2)


def sine_row_sums(x):
    return jnp.sin(x).sum(axis=1)


def test_a_2x4_mesh_names_the_device_and_its_group():
    """sin(x).sum(axis=1) of an f32[4, 8] over a 2x4 mesh ("a" rows, "b" columns): device
    (i, j), id 4i + j, holds rows 2i-2i+1 and columns 2j-2j+1, and an all_reduce adds the
    partial sums over "b", in groups {0..3} and {4..7}. x is zero but on device (1, 2),
    id 6: with XLA's tanh for sine, device 6's first divergent op is the sine; its
    group's devices 4, 5 and 7 differ through the all_reduce only; devices 0-3 agree."""
    mesh = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 4), ("a", "b"))
    x = np.zeros((4, 8), np.float32)
    x[2:4, 4:6] = [[0.5, 1.0], [1.5, -2.0]]
    sharded = jax.device_put(x, NamedSharding(mesh, P("a", "b")))
    comparison = si.compare(jax.jit(sine_row_sums), sharded, per_device=True, backend=SineAsTanh())
    assert [device for device, outputs in enumerate(comparison.outputs) if outputs[0] is not None] == [4, 5, 6, 7]
    assert sorted(comparison.divergence_per_device) == [4, 5, 6, 7]
    found = comparison.divergence_per_device[6]
    assert found.op == "stablehlo.sine" and found.location.frames[0].line == line_of(sine_row_sums, "jnp.sin")
    np.testing.assert_array_equal(found.operands[0], x[2:4, 4:6])
    for device in (4, 5, 7):
        assert comparison.divergence_per_device[device] is None
        assert comparison.device_notes[device].endswith("(the first divergent op is on device 6)")
    for device in range(8):
        expected = np.tanh(x[2:4]).sum(axis=1) if device >= 4 else np.zeros(2, np.float32)
        np.testing.assert_allclose(comparison.theirs[device][0], expected, rtol=1e-6)


def test_windows_of_one_op_find_the_same_op():
    """With a window budget of one byte, the backend shows one op's values per run of the
    per-device program: one run per op of it, and the same first divergent op."""
    from stablehlo_interp.ir.edit import entry_op_names, inline_calls
    from stablehlo_interp.tools.per_device import prepare_checked

    x = np.zeros((8, 16), np.float32)
    x[:, 5] = np.arange(1, 9)
    sharded = jax.device_put(x, NamedSharding(mesh_of(8), P("x", None)))
    comparison = si.compare(jax.jit(resharded_sine), sharded, per_device=True, backend=SineAsTanh(), window_bytes=1)
    assert sorted(comparison.divergence_per_device) == [2]
    assert comparison.divergence_per_device[2].op == "stablehlo.sine"
    text = prepare_checked(jax.jit(resharded_sine), (sharded,)).per_device_program().text
    ops = [name for name in entry_op_names(inline_calls(text, "main"), "main") if name != "func.return"]
    assert comparison.compiled_prefixes == len(ops)


class TanhAsSine(JaxBackend):
    """XLA's CPU compiling ``stablehlo.sine`` for every ``stablehlo.tanh``."""

    def __init__(self):
        super().__init__("cpu")
        self.name = "tanh as sine"

    def __call__(self, module_text, args, host_callbacks=()):
        return super().__call__(module_text.replace("stablehlo.tanh ", "stablehlo.sine "), args, host_callbacks)

    def run_per_device(self, module_text, per_device_args, host_callbacks=()):
        return super().run_per_device(module_text.replace("stablehlo.tanh ", "stablehlo.sine "), per_device_args,
                                      host_callbacks)


@pytest.mark.slow
def test_the_sharded_lm_step_names_its_gelu_on_every_device():
    """The zoo's sharded Flax NNX LM training step (8 devices, a 2x4 mesh) on XLA with sine
    for tanh: its first tanh is the approximate GELU of the first block's MLP, which every
    device computes on its part of the hidden units: each device's first divergent op is
    that tanh, at the line of ``nnx.gelu`` in tests/zoo/sharded.py (about 20 s)."""
    import warnings

    from test_zoo_per_device import program
    from zoo import sharded

    step, args = program("sharded_flax_nnx_lm").sharded("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the per-device run's reordered sums, within noise
        comparison = si.compare(step, *args, per_device=True, backend=TanhAsSine())
    line = line_of(sharded.MegatronBlock.__call__, "nnx.gelu")
    assert sorted(comparison.divergence_per_device) == list(range(8)) and comparison.search_note is None
    for found in comparison.divergence_per_device.values():
        assert found.op == "stablehlo.tanh" and found.kind == "beyond its bound"
        assert (found.location.frames[0].file.endswith("zoo/sharded.py"), found.location.frames[0].line) == (True, line)


def flushed_log(v):
    return jnp.log(v * 1e10 + 1e-30)  # flushed log


def subnormal_at_column_5():
    """f32[16] over 8 devices, ones but a subnormal 1e-39 at 5 (device 2's second element)."""
    x = np.ones(16, np.float32)
    x[5] = 1e-39
    return jax.device_put(x, NamedSharding(mesh_of(8), P("x")))


def test_xla_cpu_itself_is_searched_in_a_child_process():
    """``backend="cpu"``: the programs the search writes run on XLA's CPU in a child process
    of its own (with 8 host devices). XLA's CPU flushes the subnormal to zero in the
    multiply (the product 1e-29 there is 0): device 2's first divergent op is that
    multiply, on operands that agree; the other devices agree."""
    comparison = si.compare(jax.jit(flushed_log), subnormal_at_column_5(), per_device=True, backend="cpu")
    assert sorted(comparison.divergence_per_device) == [2] and comparison.search_note is None
    found = comparison.divergence_per_device[2]
    assert found.op == "stablehlo.multiply" and found.operands_agree
    assert found.location.frames[0].line == line_of(flushed_log, "# flushed log")
    np.testing.assert_array_equal(found.theirs, np.float32([1e10, 0]))


def test_xla_aborting_on_the_searchs_program_ends_the_child_not_this_process(monkeypatch):
    """The child reads this process's XLA flags: an unknown one aborts XLA there. The
    search says the backend cannot run the per-device program, and the results' comparison
    stands."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_no_such_flag_here=1")
    comparison = si.compare(jax.jit(flushed_log), subnormal_at_column_5(), per_device=True, backend="cpu")
    assert [d for d, outputs in enumerate(comparison.outputs) if outputs[0] is not None] == [2]
    assert comparison.divergence_per_device == {}
    assert comparison.search_note.startswith("no search for the first divergent op on each device: cpu cannot run "
                                             "the per-device program (")
    assert "xla_no_such_flag_here" in comparison.search_note
