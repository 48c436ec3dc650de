"""Loading: what a plan holds (no MLIR objects), runners shared between equal
element-wise ops, locations of text decoded lazily, the shared MLIR context."""

import functools
import gc
import pathlib
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp import ops
from stablehlo_interp.engine import registry
from stablehlo_interp.engine.plan import IN_TEXT, ModuleInfo, OpInfo, RegionKind, StepColumns, encode_location
from stablehlo_interp.errors import OpError
from stablehlo_interp.ir import sources
from stablehlo_interp.ir.decode import Quantization
from stablehlo_interp.ir.locations import Frame, SourceLocation
from stablehlo_interp.ir.types import TensorType

MANY_KINDS = """
module @many_kinds {
  func.func private @double(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
    %limit = stablehlo.constant dense<3> : tensor<i32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<4xf32>
      cond {
        %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      } do {
        %i1 = stablehlo.add %i, %one : tensor<i32>
        %a = func.call @double(%acc) : (tensor<4xf32>) -> tensor<4xf32>
        stablehlo.return %i1, %a : tensor<i32>, tensor<4xf32>
      }
    %sum = stablehlo.custom_call @my_sum(%r#1) {backend_config = "any text"} : (tensor<4xf32>) -> tensor<4xf32>
    %positive = stablehlo.compare GT, %sum, %x, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    return %sum, %positive : tensor<4xf32>, tensor<4xi1>
  }
}
"""


def _mlir_objects(root) -> list:
    """Every jaxlib MLIR object reachable from ``root`` through containers, instances
    and the closures of functions (not through modules, classes or globals)."""
    found, seen, pending = [], set(), [root]
    while pending:
        obj = pending.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if type(obj).__module__.startswith("jaxlib"):
            found.append(obj)
            continue
        if isinstance(obj, types.FunctionType):
            pending.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
            pending.extend(obj.__defaults__ or ())
        elif not isinstance(obj, (types.CodeType, types.BuiltinFunctionType, np.ufunc)):
            pending.extend(gc.get_referents(obj))
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - reading an empty cell raises
    except ValueError:
        return False
    return True


def test_a_plan_holds_no_mlir_objects():
    def my_sum(info):
        return lambda x: x + 1

    with registry.replaced(custom_calls={"my_sum": my_sum}):
        program = si.load(MANY_KINDS)
    lowered = si.load(jax.jit(lambda a: jnp.tanh(a @ a.T).sum(0)).lower(np.ones((3, 3), np.float32)))
    for loaded in (program, lowered):
        assert loaded.functions, "nothing was compiled"
        assert _mlir_objects(loaded.functions) == []
        assert _mlir_objects(loaded.module_info) == []
    x = np.arange(4, dtype=np.float32)
    total, positive = program.run(x)
    np.testing.assert_array_equal(total, x * 8 + 1)
    np.testing.assert_array_equal(positive, x * 8 + 1 > x)


CHAIN = """
func.func @main(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %0 = stablehlo.add %x, %x : tensor<4xf32>
  %1 = stablehlo.add %0, %x : tensor<4xf32>
  %2 = stablehlo.add %n, %n : tensor<4xi32>
  %3 = stablehlo.add %1, %0 : tensor<4xf32>
  return %3, %2 : tensor<4xf32>, tensor<4xi32>
}
"""


def test_equal_elementwise_ops_share_one_runner_and_keep_their_own_info(monkeypatch):
    ops.load_all()
    builder = registry._OPS.builtin["stablehlo.add"].builder
    built = []

    def counted(info):
        built.append(str(info.result_type))
        return builder(info)

    monkeypatch.setitem(registry._OPS.builtin, "stablehlo.add", registry.Implementation(counted, shareable=True))
    monkeypatch.delitem(registry._OPS.user, "stablehlo.add", raising=False)   # (left by another test)
    program = si.load(CHAIN)
    assert built == ["tensor<4xf32>", "tensor<4xi32>"]   # one build per signature
    steps = program.function("main").region.steps
    assert steps[0].run is steps[1].run is steps[3].run
    assert [step.location.frame.line for step in steps] == [3, 4, 5, 6]
    result, integers = program.run(np.array([1, 2, 3, 4], np.float32), np.array([1, -2, 3, 2**31 - 1], np.int32))
    np.testing.assert_array_equal(result, [5, 10, 15, 20])
    np.testing.assert_array_equal(integers, np.array([2, -4, 6, -2], np.int32))


def test_a_users_builder_is_never_shared():
    """A user's builder may read the op's location or module: each op builds its own."""
    built = []

    def add_with_its_line(info):
        built.append(info.location.frame.line)
        return lambda x, y: x + y

    with registry.replaced(ops={"stablehlo.add": add_with_its_line}):
        program = si.load(CHAIN)
    assert built == [3, 4, 5, 6]
    steps = program.function("main").region.steps
    assert len({id(step.run) for step in steps}) == 4


def test_shared_runner_errors_name_their_own_op_and_line():
    text = """
func.func @main(%x: tensor<2xi32>, %y: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.add %x, %y : tensor<2xi32>
  %1 = stablehlo.add %0, %y : tensor<2x2xi32>
  return %1 : tensor<2xi32>
}"""
    with pytest.raises(si.ModuleError):   # the verifier's: types differ
        si.load(text)
    good = """
func.func @main(%x: tensor<2xi32>, %y: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.add %x, %y : tensor<2xi32>
  %1 = stablehlo.divide %0, %y : tensor<2xi32>
  %2 = stablehlo.add %1, %y : tensor<2xi32>
  return %2 : tensor<2xi32>
}"""

    class FailOnSecondAdd(si.Listener):
        adds = 0

        def after_op(self, step, operands, results, stack):
            if step.name == "stablehlo.add":
                self.adds += 1
                if self.adds == 2:
                    raise ValueError("stop here")

    with pytest.raises(OpError) as error:
        si.run(good, np.array([1, 2], np.int32), np.array([1, 1], np.int32), listeners=[FailOnSecondAdd()])
    assert error.value.op_name == "stablehlo.add"
    assert error.value.location.frame.line == 5


def test_equal_ops_sharing_a_runner_each_report_what_their_builder_watches():
    """divide on integers watches for divisors of 0 (OpInfo.watch): the second, equal
    divide shares the first one's runner and reports at its own line too."""
    text = """
func.func @main(%x: tensor<2xi32>, %y: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.divide %x, %y : tensor<2xi32>
  %1 = stablehlo.divide %0, %y : tensor<2xi32>
  return %1 : tensor<2xi32>
}"""

    class Reports(si.Listener):
        def __init__(self):
            self.seen = []

        def on_report(self, report):
            self.seen.append((report.rule.name, report.location.frame.line, report.detail))

    program = si.load(text)
    steps = program.function("main").region.steps
    assert steps[0].run is steps[1].run
    reports = Reports()
    (result,) = program.run(np.array([7, -8], np.int32), np.array([0, 2], np.int32), listeners=[reports])
    np.testing.assert_array_equal(result, [-1, -2])   # as XLA: x / 0 = -1 (ops/elementwise.py)
    detail = "1 of 2 elements have the divisor 0"
    assert reports.seen == [("integer-division-by-zero", 3, detail), ("integer-division-by-zero", 4, detail)]


def _runner_reaches(runner, target) -> bool:
    """Whether ``target`` is reachable from a runner (closures, partials, bound
    methods, the attributes of callable objects)."""
    seen, pending = set(), [runner]
    while pending:
        obj = pending.pop()
        if obj is target:
            return True
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, str, int, float, np.ufunc, np.dtype)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            pending.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
            pending.extend(obj.__defaults__ or ())
        elif isinstance(obj, functools.partial):
            pending.extend([obj.func, *obj.args, *obj.keywords.values()])
        elif isinstance(obj, types.MethodType):
            pending.extend([obj.__self__, obj.__func__])
        elif isinstance(obj, (tuple, list)):
            pending.extend(obj)
        elif isinstance(obj, dict):
            pending.extend(obj.values())
        elif hasattr(obj, "__dict__"):
            pending.extend(vars(obj).values())
    return False


ops.load_all()   # (the built-in element-wise ops, for the parameters below)
_QUANTIZED = TensorType.quantized((4,), "!quant.uniform<i8:f32, 5.000000e-01:1>",
                                  Quantization("i8", -128, 127, "f32", (0.5,), (1,)))
_TYPES = [TensorType.of((4,), element) for element in ("f32", "i32", "i1", "ui8", "bf16", "complex<f32>")]
_ATTRIBUTES = {"comparison_direction": "LT", "exponent_bits": 5, "mantissa_bits": 10}


@pytest.mark.parametrize("name", sorted(registry.ELEMENTWISE_OPS))
def test_elementwise_runners_do_not_hold_their_op(name):
    """Equal element-wise ops share one runner (program/compiler.py), so the runner
    must not reach the OpInfo it was built from (its location, its module)."""
    implementation = registry._OPS.builtin[name]   # the built-in one (another test may have registered its own)
    assert implementation.shareable
    built = 0
    for arity in (1, 2, 3):
        for operand in [*_TYPES, _QUANTIZED]:
            for result in [operand, *_TYPES, _QUANTIZED]:
                operands = (TensorType.of((4,), "i1"),) * (arity == 3 and name == "stablehlo.select") + \
                    (operand,) * (arity - (arity == 3 and name == "stablehlo.select"))
                info = OpInfo(name, dict(_ATTRIBUTES), operands, (result,),
                              location=SourceLocation(None, (Frame(None, "x.mlir", 1, 1),)), module=ModuleInfo())
                try:
                    runner = implementation.builder(info)
                except Exception:  # noqa: BLE001 - a combination this op does not take
                    continue
                built += 1
                assert not _runner_reaches(runner, info), f"{name}: runner for {operands} -> {result} holds its OpInfo"
                assert not _runner_reaches(runner, info.location)
    assert built, f"{name}: no combination of types built"


def test_locations_of_text_are_values():
    lazy = SourceLocation.at_line("x.mlir", 3, 5)
    eager = SourceLocation(None, (Frame(None, "x.mlir", 3, 5),))
    assert lazy == eager and hash(lazy) == hash(eager)
    assert str(lazy) == "x.mlir:3" and lazy.frame == Frame(None, "x.mlir", 3, 5) and lazy.file_line == "x.mlir:3"
    assert lazy and not SourceLocation()
    assert lazy != SourceLocation("name", (Frame(None, "x.mlir", 3, 5),))


def test_loads_share_a_context_until_its_budget(monkeypatch):
    first, second = si.load(CHAIN), si.load(CHAIN)
    assert first.module.context is second.module.context
    monkeypatch.setattr(sources, "SHARED_CONTEXT_BUDGET", len(CHAIN) + 1)
    third = si.load(CHAIN)
    fourth = si.load(CHAIN)   # past the budget: a fresh context
    assert third.module.context is not fourth.module.context
    for program in (first, second, third, fourth):   # each still runs
        result, _ = program.run(np.ones(4, np.float32), np.ones(4, np.int32))
        np.testing.assert_array_equal(result, np.full(4, 5, np.float32))


_MISMATCHED_ADD = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<3xf32>
  return %a : tensor<4xf32>
}"""


def test_text_is_verified_once_by_its_parse(monkeypatch):
    """MLIR's parser verifies what it parses: a load of text does not verify again,
    and a module that does not verify is still refused, naming the op's rule."""
    calls = []
    monkeypatch.setattr(sources, "verify", lambda module: calls.append(module))
    si.load("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }")
    assert calls == []
    monkeypatch.undo()
    with pytest.raises(si.ModuleError, match="requires the same shape for all operands and results"):
        si.load(_MISMATCHED_ADD)


def _module_that_does_not_verify():
    """A module broken after parsing: @main declares a result type its return does not give."""
    from jaxlib.mlir import ir
    with sources.make_context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                                 "  return %a : tensor<4xf32>\n}")
        module.body.operations[0].attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [ir.RankedTensorType.get([4], ir.F32Type.get())], [ir.RankedTensorType.get([3], ir.F32Type.get())]))
    return module


def test_a_callers_module_is_verified():
    """An ir.Module handed over as an object was not parsed by us: si.load verifies it."""
    with pytest.raises(si.ModuleError, match="does not verify"):
        si.load(_module_that_does_not_verify())


def test_bytecode_that_does_not_verify_is_refused_by_its_parse():
    import io
    module = _module_that_does_not_verify()
    data = io.BytesIO()
    with module.context:
        module.operation.write_bytecode(data)
    with pytest.raises(si.ModuleError, match="doesn't match function result type"):
        si.load(data.getvalue())


def _chain_of(n: int) -> str:
    """n element-wise ops on line 2 onwards, each using the one before and the argument."""
    names = ["add", "multiply", "subtract", "maximum"]
    lines = ["func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {", "  %v0 = stablehlo.add %a, %a : tensor<4xf32>"]
    lines += [f"  %v{i} = stablehlo.{names[i % 4]} %v{i - 1}, %a : tensor<4xf32>" for i in range(1, n)]
    return "\n".join(lines + [f"  return %v{n - 1} : tensor<4xf32>", "}"])


def test_steps_made_on_demand_are_each_ops_own():
    """A region keeps its ops column by column and makes Step objects when asked: each
    step has its own name, line, slots and releases; equal ops share the runner and
    the decoded attributes, types and watches, not the location."""
    program = si.load(_chain_of(6))
    region = program.function("main").region
    steps = region.steps
    assert region.steps is steps   # made once, then kept
    assert [step.name for step in steps] == [f"stablehlo.{n}" for n in
                                             ["add", "multiply", "subtract", "maximum", "add", "multiply"]]
    assert [(step.location.frame.line, step.location.frame.column) for step in steps] == \
        [(line, 9) for line in range(2, 8)]   # (column 9: where the op name starts)
    assert [step.index for step in steps] == list(range(6))
    # slot 0 is %a (used by every op: released by the last), slot i + 1 is %v<i>
    assert [step.operands for step in steps] == [(0, 0)] + [(i, 0) for i in range(1, 6)]
    assert [step.results for step in steps] == [(i,) for i in range(1, 7)]
    assert [step.release for step in steps] == [()] + [(i,) for i in range(1, 5)] + [(0, 5)]
    assert steps[4].run is steps[0].run and steps[5].run is steps[1].run
    assert steps[4].info.watches is steps[0].info.watches
    assert steps[4].info.result_types is steps[0].info.result_types
    assert steps[4].info.module is steps[0].info.module is program.module_info
    assert all(not step.regions and not step.captures and not step.variadic and not step.execution
               for step in steps)
    x = np.array([1, -2, 3, 0.5], np.float32)
    expected = x + x
    for operation in [np.multiply, np.subtract, np.maximum, np.add, np.multiply]:
        expected = operation(expected, x)
    np.testing.assert_array_equal(program.run(x)[0], expected)


def test_a_tool_on_a_long_program_sees_each_ops_own_location():
    n = 3000
    program = si.load(_chain_of(n))
    trace = si.trace(program, np.ones(4, np.float32))
    assert len(trace) == n
    assert [record.location.frame.line for record in trace] == list(range(2, n + 2))
    assert [record.op for record in trace[:5]] == ["stablehlo.add", "stablehlo.multiply", "stablehlo.subtract",
                                                   "stablehlo.maximum", "stablehlo.add"]


def test_a_plan_of_shared_ops_holds_no_mlir_objects_before_and_after_its_steps_are_made():
    program = si.load(_chain_of(50))
    assert _mlir_objects(program.functions) == [] and _mlir_objects(program.module_info) == []
    program.function("main").region.steps  # noqa: B018 - reading them makes the steps
    assert _mlir_objects(program.functions) == [] and _mlir_objects(program.module_info) == []


def test_an_unobserved_run_names_the_failing_shared_ops_own_line(monkeypatch):
    """The run loop's entries of ops without a Step made refer to them by index: an
    error still names the op and its own line (not the line of the equal op whose
    runner it shares)."""
    ops.load_all()

    def add_refusing_negatives(info):
        def add(x, y):
            if (x + y).min() < 0:
                raise ValueError("a negative sum")
            return x + y
        return add

    monkeypatch.setitem(registry._OPS.builtin, "stablehlo.add", registry.Implementation(add_refusing_negatives,
                                                                                 shareable=True))
    monkeypatch.delitem(registry._OPS.user, "stablehlo.add", raising=False)   # (left by another test)
    text = """func.func @main(%x: tensor<2xi32>, %y: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.add %x, %x : tensor<2xi32>
  %1 = stablehlo.add %0, %y : tensor<2xi32>
  %2 = stablehlo.add %1, %y : tensor<2xi32>
  return %2 : tensor<2xi32>
}"""
    program = si.load(text)
    steps = program.function("main").region.flat_steps
    assert steps[0][0] is steps[1][0] is steps[2][0]   # one runner
    with pytest.raises(OpError, match="a negative sum") as error:
        program.run(np.array([1, 2], np.int32), np.array([-1, -3], np.int32))
    assert error.value.op_name == "stablehlo.add"
    assert error.value.location.frame.line == 4


def test_a_dropped_program_is_freed_without_the_cyclic_collector():
    """Nothing in a plan refers back to it (ModuleInfo holds its functions weakly):
    dropping the program frees it at once, without a collector pass over every op."""
    import weakref

    runners = []

    def my_sum(info):
        runners.append(lambda x: x + 1)
        return runners[-1]

    with registry.replaced(custom_calls={"my_sum": my_sum}):
        program = si.load(MANY_KINDS)
    gc.disable()
    try:
        kept = [weakref.ref(program.function("main")), weakref.ref(program.module_info), weakref.ref(runners.pop())]
        del program
        assert [ref() for ref in kept] == [None, None, None]
    finally:
        gc.enable()


def test_a_location_that_ops_share_is_decoded_once(monkeypatch):
    """JAX gives many ops one location (a name around a call stack); the compiler
    decodes each distinct one once (its cache is keyed by the location's
    attribute: a Location object hashes as itself, a new one at each look-up)."""
    from stablehlo_interp.ir import decode

    lines = ['#shared = loc("jit(f)/mul"(callsite("f"("x.py":6:11) at "<module>"("x.py":8:6))))',
             "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {",
             "  %v0 = stablehlo.multiply %a, %a : tensor<4xf32> loc(#shared)"]
    lines += [f"  %v{i} = stablehlo.multiply %v{i - 1}, %a : tensor<4xf32> loc(#shared)" for i in range(1, 50)]
    lines += ["  return %v49 : tensor<4xf32>", "}"]
    decoded = []
    decode_uncached = decode.decode_location

    def counted(loc, file_name=None, cache=None):
        decoded.append(cache)
        return decode_uncached(loc, file_name, cache)

    monkeypatch.setattr(decode, "decode_location", counted)   # (what a cache miss calls)
    program = si.load("\n".join(lines))
    assert decoded == [None]
    steps = program.function("main").region.steps
    assert {str(step.location) for step in steps} == {"x.py:6 (f) [jit(f)/mul]"}
    assert [frame.line for frame in steps[49].location.frames] == [6, 8]


def test_shared_ops_keep_their_file_line_and_column(tmp_path):
    """Equal ops keep their own locations as plain values: a line of the module's
    file, a line of another file its text names, a JAX-style name location."""
    path = tmp_path / "chain.mlir"
    path.write_text("""func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  %1 = stablehlo.add %0, %a : tensor<4xf32>
  %2 = stablehlo.add %1, %a : tensor<4xf32> loc("other.py":70000:123456)
      %3 = stablehlo.add %2, %a : tensor<4xf32>
  %4 = stablehlo.add %3, %a : tensor<4xf32> loc("jit(f)/add"("x.py":6:11))
  return %4 : tensor<4xf32>
}""")
    steps = si.load(str(path)).function("main").region.steps
    frames = [step.location.frame for step in steps]
    assert [(frame.file, frame.line, frame.column) for frame in frames] == [
        (str(path), 2, 8), (str(path), 3, 8), ("other.py", 70000, 123456), (str(path), 5, 12), ("x.py", 6, 11)]
    assert frames[4].function == "jit(f)/add"
    assert len({id(step.run) for step in steps}) == 1


NESTED_EQUAL_OPS = """func.func private @twice(%x: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.add %x, %x : tensor<i32>
  %1 = stablehlo.add %0, %0 : tensor<i32>
  return %1 : tensor<i32>
}
func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %n, %acc = %n) : tensor<i32>, tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %one : tensor<i32>
        %a = stablehlo.add %acc, %i1 : tensor<i32>
      %b = func.call @twice(%a) : (tensor<i32>) -> tensor<i32>
      stablehlo.return %i1, %b : tensor<i32>, tensor<i32>
    }
  %s = stablehlo.add %r#1, %one : tensor<i32>
  return %s : tensor<i32>
}"""


def test_a_load_of_text_without_locations_reads_none_and_finds_them_in_the_text(monkeypatch, tmp_path):
    """Text that writes no ``loc(...)``: each op's location is where it starts in the
    text, so the load reads none of the equal ops' (the bindings' costliest call
    after the operands); the first step asked for parses the text again, once, and
    every op of every region (a while's body, a called function) gets its own line
    and column, in the module's file."""
    parses = []
    parse_again = sources.TextLocations._parse_again
    monkeypatch.setattr(sources.TextLocations, "_parse_again", lambda self: parses.append(1) or parse_again(self))
    path = tmp_path / "nested.mlir"
    path.write_text(NESTED_EQUAL_OPS)
    program = si.load(str(path))
    assert parses == []
    body = program.function("main").region.steps[1].regions[1]
    assert [(step.name, step.location.frame.line, step.location.frame.column) for step in body.steps] == [
        ("stablehlo.add", 13, 13), ("stablehlo.add", 14, 14), ("func.call", 15, 12)]   # (where the name starts)
    twice = program.function("twice").region.steps
    assert [(step.location.frame.file, step.location.frame.line) for step in twice] == [(str(path), 2), (str(path), 3)]
    assert str(program.function("main").region.steps[2].location) == f"{path}:18"
    assert parses == [1]
    assert program.run(np.int32(0))[0] == 5   # one iteration: acc = 0 + 1, twice: 4; then + 1


def test_the_bindings_hash_each_value_as_its_mlir_pointer():
    """The compiler keys a block's values by their hashes (program/compiler.py, _Scope):
    it relies on jaxlib's bindings hashing a Value as its MLIR pointer, distinct for
    the distinct values of a module."""
    import ctypes

    from jaxlib.mlir import ir

    pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
    pointer_of.restype, pointer_of.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    with sources.make_context():
        module = ir.Module.parse(MANY_KINDS)
        values = []
        for function in module.body.operations:
            block = function.regions[0].blocks[0]
            values += [*block.arguments, *(result for op in block.operations for result in op.results)]
        assert len(values) == 10   # (the functions' arguments and results; not the while's regions')
        assert [hash(value) for value in values] == [pointer_of(value._CAPIPtr, b"jaxlib.mlir.ir.Value._CAPIPtr")
                                                     for value in values]
        assert len({hash(value) for value in values}) == len(values)


class _HashedAs:
    """A stand-in for an MLIR value with a chosen hash."""

    def __init__(self, key: int):
        self.key = key

    def __hash__(self) -> int:
        return self.key


def test_values_that_hash_alike_fail_the_compile_rather_than_mix_up():
    from stablehlo_interp.program.compiler import _Scope

    outer = _Scope(None, ("main",))
    outer.define(_HashedAs(1), "f32")
    outer.check_keys_apart()
    outer.define(_HashedAs(1), "f32")   # another value, the same key
    with pytest.raises(si.ModuleError, match="hash alike"):
        outer.check_keys_apart()

    outer = _Scope(None, ("main",))
    captured, shadowed = _HashedAs(1), _HashedAs(2)
    outer.define(captured, "f32")
    outer.define(shadowed, "f32")
    inner = _Scope(outer, ("main", (0, 0)))
    assert inner.lookup(captured) == 0   # captured: its key is the outer value's
    inner.define(_HashedAs(3), "f32")
    inner.check_keys_apart()
    inner.define(_HashedAs(2), "f32")   # the key of a value of the enclosing block
    with pytest.raises(si.ModuleError, match="hash alike"):
        inner.check_keys_apart()


def test_the_processes_of_a_grid_see_the_same_steps():
    """Steps are made on first use; threads that ask at once get the same ones."""
    import sys
    import threading

    region = si.load(_chain_of(2000)).function("main").region
    seen, start = [], threading.Barrier(4)

    def ask():
        start.wait(timeout=60)
        seen.append(region.steps)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # (threads take turns while the steps are made)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    stuck = [thread for thread in threads if thread.is_alive()]
    assert not stuck, f"{len(stuck)} threads still asking after 120 s ({len(seen)} got their steps)"
    assert len(seen) == 4 and all(steps is seen[0] for steps in seen)


_SMALL_TEXT = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}"


def test_a_child_process_closed_is_ended_and_the_next_request_starts_another():
    from stablehlo_interp.ir.child_process import OK, ChildProcess
    child = ChildProcess("stablehlo_interp.ir.first_parse_child")
    status, first = child.ask(_SMALL_TEXT.encode())
    process = child._process
    child.close()
    assert process.returncode == 0 and process.stdin.closed and process.stdout.closed
    status_again, second = child.ask(_SMALL_TEXT.encode())
    assert (status, status_again) == (OK, OK) and first == second and child._process is not process
    child.close()


def test_a_child_that_forks_for_each_request_outlives_a_loop_and_forgets_each_request():
    """serve's fork_each (the first parse's isolation): a computation that does not end
    is killed at its deadline and the child answers the next request; no request sees
    what an earlier one changed; a computation that aborts ends the child by its signal."""
    import pathlib
    from stablehlo_interp.ir.child_process import EXPIRED, OK, ChildDied, ChildProcess
    child = ChildProcess("forking_child", {"PYTHONPATH": str(pathlib.Path(__file__).parent)})
    try:
        assert child.ask(b"loop") == (EXPIRED, b"2")
        assert child.ask(b"count") == (OK, b"1")    # the loop's count and its own are lost with their forks
        assert child.ask(b"count") == (OK, b"1")
        assert child.ask(b"echo") == (OK, b"echo")
        with pytest.raises(ChildDied, match="signal 6"):
            child.ask(b"abort")
        assert child.ask(b"echo") == (OK, b"echo")  # a fresh child
    finally:
        child.close()


def test_the_child_processes_end_with_the_process():
    """A process that used a child (here the first parse of untrusted bytes) exits
    leaving no child running and no pipe open: no ResourceWarning at exit."""
    import subprocess
    import sys
    code = ("import io\nimport numpy as np\nfrom jaxlib.mlir import ir\nimport stablehlo_interp as si\n"
            "from stablehlo_interp.ir import sources\n"
            "with sources.make_context():\n"
            f"    module = ir.Module.parse({_SMALL_TEXT!r})\n"
            "    data = io.BytesIO()\n"
            "    module.operation.write_bytecode(data)\n"
            "print(si.load(data.getvalue()).run(np.ones(4, np.float32))[0].sum())")
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4.0"
    assert "ResourceWarning" not in done.stderr, done.stderr


# ---------------------------------------------------------------- the compiler's hot path builds the general one's plan

def _plan_of(region, seen: set) -> dict:
    """Everything a region's plan is, as plain values: its kind and layout; per op its
    name, decoded attributes, types, location, slots, releases, runner and which earlier
    op's OpInfo and runner it shares (by position: sharing is part of the plan); the
    run loop's entries and the values folded at load; the regions of its ops, each
    once (a called function's body is compared where it is first reached)."""
    columns = region.columns
    first_with = {}
    ops = []
    for index, step in enumerate(region.steps):
        built = columns.ops[index]
        info = step.info
        ops.append((info.name, repr(sorted(info.attributes.items())), info.operand_types, info.result_types,
                    str(info.location), repr(info.location.frames), step.operands, step.results, step.release,
                    step.captures, getattr(step.run, "__qualname__", type(step.run).__qualname__),
                    first_with.setdefault(id(built.info), index), first_with.setdefault(id(built.run), index),
                    step.variadic, step.execution, info.regions_called,
                    [str(inner.kind) for inner in step.regions]))
    entries = [(kind, operands, results, release, reference if type(reference) is int else reference.index)
               for _, operands, results, release, kind, reference in region.flat_steps]
    folded = [(slot, value.dtype, value.shape, value.tobytes()) for slot, value in region.flat_steps.folded]
    plan = {"kind": str(region.kind), "layout": (region.n_captures, region.arg_types, region.outputs,
                                                region.output_types, str(region.return_location), region.n_slots),
            "ops": ops, "releases": list(columns.releases), "entries": entries, "folded": folded,
            "result slots": [None if value is None else value.tobytes() for value in region.result_slots],
            "regions": []}
    for step in region.steps:
        for inner in step.regions:
            if id(inner) not in seen:
                seen.add(id(inner))
                plan["regions"].append(_plan_of(inner, seen))
    return plan


def _plans_of(program) -> dict:
    plans, seen = {}, set()
    for name, function in sorted(program.functions.items()):
        if function.region is not None and id(function.region) not in seen:
            seen.add(id(function.region))
            plans[name] = _plan_of(function.region, seen)
    return plans


def _count_ops(plan: dict) -> int:
    return len(plan["ops"]) + sum(map(_count_ops, plan["regions"]))


def _location_codes(program) -> set:
    """The kinds of location codes (engine/plan.py, encode_location) the program's plans hold."""
    kinds, pending, seen = set(), [f.region for f in program.functions.values() if f.region is not None], set()
    while pending:
        region = pending.pop()
        if id(region) in seen:
            continue
        seen.add(id(region))
        for code in region.columns.locations:
            kinds.add("in text" if code == -1 and type(code) is int else type(code).__name__)
        pending.extend(inner for step in region.steps for inner in step.regions)
    return kinds


def _zoo_texts() -> list:
    from zoo import PROGRAMS
    return [(name, PROGRAMS[name]().lowered().as_text(debug_info=True)) for name in ("flax_linen_mlp", "haiku_mlp")]


def _random_program_texts() -> list:
    from test_random_programs import FLOAT_BINARY, FLOAT_UNARY, INT_BINARY, INT_UNARY, build
    rng = np.random.default_rng(28)
    texts = []
    for index in range(12):
        unary, binary, dtype = ((FLOAT_UNARY, FLOAT_BINARY, np.float32) if index % 2 else
                                (INT_UNARY, INT_BINARY, np.int32))
        plan = [tuple(rng.integers(0, 100, 3)) for _ in range(rng.integers(5, 30))]
        x = np.ones((2, 3), dtype)
        texts.append((f"random {index}", jax.jit(build(unary, binary, plan)).lower(x, x, x).as_text(debug_info=True)))
    return texts


def _corpus(tmp_path) -> list:
    """Real programs: the zoo's, tests/data's test files (each module of them), random
    chains of element-wise and shape ops as JAX writes them (with locations) and as
    text without them (the text's own lines), and modules of this file with regions,
    calls and captures, from a file and from a string."""
    data = pathlib.Path(__file__).parent / "data"
    corpus = [(f"{path.name} {index}", module) for path in sorted(data.glob("*.mlir"))
              for index, module in enumerate(path.read_text().split("// -----"))]
    corpus += _zoo_texts()
    randoms = _random_program_texts()
    corpus += randoms + [(f"{name} without locations", re.sub(r"\s*loc\(#loc\d*\)|#loc.*\n", "\n", text))
                         for name, text in randoms[:4]]
    path = tmp_path / "nested.mlir"
    path.write_text(NESTED_EQUAL_OPS)
    corpus += [("many kinds", MANY_KINDS), ("nested equal ops, a file", str(path)),
               ("nested equal ops", NESTED_EQUAL_OPS)]
    return corpus


def test_the_hot_path_and_the_general_one_build_the_same_plans(monkeypatch, tmp_path):
    """The compiler's hot path for equal element-wise ops (program/compiler.py,
    _compile_block: its own look-up of the shared runner, location codes, and
    _Scope.define and StepColumns.append inlined) builds, op for op, the plan that
    the general path (_compile_op, for every op: Compiler.shortcuts off) builds, on
    real programs; and the corpus takes the hot path, with each kind of location."""
    from stablehlo_interp.program.compiler import Compiler
    corpus = _corpus(tmp_path)
    codes, compared = set(), 0
    for name, source in corpus:
        loaded = []
        for shortcuts in (True, False):
            with monkeypatch.context() as patch:
                patch.setattr(Compiler, "shortcuts", shortcuts)
                try:
                    with registry.replaced(custom_calls={"my_sum": lambda info: lambda x: x + 1}):   # (MANY_KINDS)
                        loaded.append(si.load(source))
                except si.InterpreterError as error:   # (a test file's module that must not load)
                    loaded.append(f"{type(error).__name__}: {error}")
        fast, general = loaded
        if isinstance(fast, str) or isinstance(general, str):
            assert fast == general and name.startswith("checks_fail.mlir"), (name, fast, general)
            continue
        codes |= _location_codes(fast)
        assert _location_codes(general) <= {"NoneType", "SourceLocation"}, name   # (it reads every location)
        fast_plans, general_plans = _plans_of(fast), _plans_of(general)
        assert fast_plans == general_plans, name
        compared += sum(map(_count_ops, fast_plans.values()))
    assert {"in text", "int", "SourceLocation"} <= codes
    assert compared > 1000


def test_a_regions_kind_is_data():
    """A region says what it is (a function's body, region i of an op) as data, and
    the line an error gains leaving it is made from that (``region 1, call 2``)."""
    with registry.replaced(custom_calls={"my_sum": lambda info: lambda x: x + 1}):
        program = si.load(MANY_KINDS)
    main = program.function("main").region
    assert main.kind == RegionKind.body_of("main", (None,), (None, None)) and main.kind.is_function_body
    assert main.kind.argument_name(0) == "argument #0" and main.kind.result_name(1) == "result #1"   # no names here
    loop = next(step for step in main.steps if step.name == "stablehlo.while")
    assert [region.kind for region in loop.regions] == [RegionKind.of_op("stablehlo.while", 0),
                                                        RegionKind.of_op("stablehlo.while", 1)]
    assert [str(region.kind) for region in loop.regions] == ["region 0 of stablehlo.while",
                                                            "region 1 of stablehlo.while"]
    call = next(step for step in loop.regions[1].steps if step.name == "func.call")
    assert call.regions[0].kind == RegionKind.body_of("double", (None,), (None,)) and call.regions[0].kind.name == "@double"
    assert not loop.regions[1].kind.is_function_body and loop.regions[1].kind.name == "region 1"


def test_an_ops_location_has_one_encoding():
    """encode_location makes each kind of location's code; StepColumns.location reads
    each back (a line of the module's own text, ``-``, in the columns' file)."""
    columns = StepColumns("model.mlir", locate=lambda index: SourceLocation.at_line("found.mlir", index, 1))
    named = SourceLocation("jit(f)/add", (Frame("f", "x.py", 6, 11),))
    locations = [None, IN_TEXT, ("-", 70000, 123456), ("other.py", 3, 4), named]
    codes = [encode_location(location) for location in locations]
    assert [type(code).__name__ for code in codes] == ["NoneType", "int", "int", "SourceLocation", "SourceLocation"]
    assert codes[1] == IN_TEXT and codes[2] == 70000 << 32 | 123456 and codes[4] is named
    columns.locations = codes
    decoded = [columns.location(index) for index in range(len(codes))]
    assert decoded[0] is None
    assert [(frame.file, frame.line, frame.column) for frame in (d.frame for d in decoded[1:4])] == [
        ("found.mlir", 1, 1), ("model.mlir", 70000, 123456), ("other.py", 3, 4)]
    assert decoded[4] is named
    with pytest.raises(TypeError, match="not an op's location"):
        encode_location("x.py:3")
