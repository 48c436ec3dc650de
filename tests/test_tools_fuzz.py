"""The fuzzer (tools/fuzz/): generated programs are deterministic, well typed and cover
the ops and element types they claim; findings are reduced, deduplicated and written;
a backend that crashes or cannot compile is a finding, never a crash of the campaign.
The planted bugs are judged by NumPy (IEEE 754: -0 + -0 is -0)."""

import json
import re
import os
import signal
import time

import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.backends import BackendCompileError, InterpreterBackend
from stablehlo_interp.tools.fuzz.campaign import fuzz, program_seed
from stablehlo_interp.tools.fuzz.check import (COMPILE_FAILURE, CRASH, SIGNED_ZERO, TIMEOUT, WRONG_TYPE, IsolatedCheck,
    check)
from stablehlo_interp.tools.fuzz.generate import ELEMENT_TYPES, OPS, generate, special_values, storage_of
from stablehlo_interp.tools.fuzz.programs import Op, Program, Spec
from stablehlo_interp.tools.fuzz.reduce import reduce_finding

SMALL_OPS = ("add", "multiply", "negate", "reshape", "transpose", "slice", "tanh")
ADDS = ("add", "negate", "multiply", "reshape")


def add_losing_negative_zero(info):
    """A wrong add: a zero sum gets the other sign (-0 + -0 gives +0)."""
    return lambda x, y: np.where(np.add(x, y) == 0, -np.add(x, y), np.add(x, y))


WRONG_ADD = InterpreterBackend({"stablehlo.add": add_losing_negative_zero}, name="add losing -0")


class CrashOnMultiply:
    """A backend whose process dies of SIGSEGV on any program with a multiply."""

    name, settings = "crashes on multiply", ()

    def __call__(self, module_text, args):
        if "stablehlo.multiply" in module_text:
            os.kill(os.getpid(), signal.SIGSEGV)
        return si.load(module_text).run(*args)


class CannotCompileTanh:
    name, settings = "no tanh", ()

    def __call__(self, module_text, args):
        if "stablehlo.tanh" in module_text:
            raise BackendCompileError(self.name, "tanh: no lowering for this op")
        return si.load(module_text).run(*args)


def _bits(arrays):
    return [(np.asarray(a).dtype, np.asarray(a).shape, np.asarray(a).tobytes()) for a in arrays]


def test_programs_are_deterministic_from_the_seed():
    for seed in (0, 7, 123456789):
        first, again = generate(seed), generate(seed)
        assert first.text == again.text
        assert _bits(first.arguments) == _bits(again.arguments)
    assert generate(1).text != generate(2).text
    assert [program_seed(3, i) for i in range(4)] == [program_seed(3, i) for i in range(4)]
    assert len({program_seed(3, i) for i in range(100)}) == 100


def test_generated_programs_are_well_typed_and_run_here():
    """MLIR's verifier (the parse, in a child process) accepts each; the interpreter runs
    it on its arguments; results have the declared types."""
    for seed in range(40):
        generated = generate(program_seed(0, seed))
        try:
            results = si.load(generated.text).run(*generated.arguments)
        except si.UnsupportedOpError as error:
            assert "reduce_precision" in str(error)   # of f8 types (docs/coverage.md)
            continue
        specs = [generated.program.values[i] for i in generated.program.outputs]
        assert [(np.shape(r), si.TensorType.like(np.asarray(r)).element_type) for r in results] == \
               [(s.shape, s.element) for s in specs]


def test_every_op_and_element_type_appears_over_seeds():
    ops, elements, shapes = set(), set(), set()
    for seed in range(400):
        program = generate(program_seed(5, seed)).program
        ops.update(op.name.removeprefix("stablehlo.") for op in program.ops)
        elements.update(spec.element for spec in program.values)
        shapes.update(spec.shape for spec in program.values)
    assert ops == set(OPS) | {"get_tuple_element"}
    assert {"gather", "scatter", "while", "case", "if", "convolution", "fft", "select_and_scatter",
            "batch_norm_inference", "dot_general", "sort", "reduce_window", "batch_norm_training",
            "batch_norm_grad", "rng", "rng_bit_generator", "triangular_solve", "cholesky", "all_reduce",
            "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "collective_broadcast",
            "replica_id", "partition_id", "optimization_barrier", "tuple", "get_tuple_element",
            "uniform_quantize", "uniform_dequantize"} <= ops
    assert elements >= set(ELEMENT_TYPES)
    assert () in shapes and any(0 in shape for shape in shapes)


# The families the generator added last, each with a mark its programs' text shows.
FAMILIES = {
    "multi-result": (("batch_norm_training", "batch_norm_grad", "optimization_barrier"), ":3 = "),
    "sort of several operands": (("sort",), ':2 = "stablehlo.sort"'),
    "while carrying several values": (("while",), ':3 = "stablehlo.while"'),
    "regions using values from outside": (("if", "case"), '"stablehlo.return"(%arg'),
    "linear algebra": (("triangular_solve", "cholesky"), "stablehlo.cholesky"),
    "random numbers": (("rng", "rng_bit_generator"), "stablehlo.rng_bit_generator"),
    "collectives": (("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                     "collective_broadcast", "replica_id", "partition_id"), "replica_groups = dense<[[0]]>"),
    "tuples": (("tuple",), "stablehlo.get_tuple_element"),
    "quantized": (("uniform_quantize", "uniform_dequantize", "add", "tanh"), "!quant.uniform"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_programs_of_each_family_are_well_typed_and_run_here(family):
    """MLIR's verifier (the parse, in a child process) accepts a sample of each family's
    programs; the interpreter runs them; results have the declared types (a quantized
    result as its stored integers)."""
    ops, mark = FAMILIES[family]
    shown = 0
    for seed in range(40):
        generated = generate(program_seed(17, seed), ops=ops)
        shown += mark in generated.text
        results = si.load(generated.text).run(*generated.arguments)
        specs = [generated.program.values[i] for i in generated.program.outputs]
        assert [(np.shape(r), si.TensorType.like(np.asarray(r)).element_type) for r in results] == \
               [(s.shape, storage_of(s.element)) for s in specs], generated.text
    assert shown >= 3, f"{family}: {mark!r} in {shown} of 40 programs"


def _results_of(op_name: str, ops: tuple, seeds=range(60)):
    """Per program with ``op_name``: its ops, and each value the interpreter computed."""
    from stablehlo_interp.tools.fuzz.reduce import values_of

    for seed in seeds:
        generated = generate(program_seed(19, seed), ops=ops)
        if f'"{op_name}"' in generated.text:
            yield generated.program, values_of(generated.program, generated.arguments)


def test_generated_linear_algebra_is_numpy_s():
    """cholesky's factor of the generated Hermitian positive-definite matrix and
    triangular_solve's solution, against NumPy's (the factor is exact: small integers)."""
    seen = set()
    for program, values in _results_of("stablehlo.cholesky", ("cholesky", "triangular_solve")):
        for k, op in enumerate(program.ops):
            (made,) = program.op_values(k)
            operands = [values[v] for v in op.operands]
            if op.name == "stablehlo.cholesky":
                lower = "lower = true" in op.attributes
                factor = np.linalg.cholesky(operands[0].astype(np.complex128))
                expected = factor if lower else np.conj(np.swapaxes(factor, -1, -2))
                triangle = np.tril if lower else np.triu
                assert np.allclose(triangle(values[made]), expected, rtol=0, atol=1e-12), op.attributes
                seen.add(op.name)
            elif op.name == "stablehlo.triangular_solve" and np.isfinite(operands[1]).all():
                a, rhs = (x.astype(np.complex128) for x in operands)
                a = {"NO_TRANSPOSE": a, "TRANSPOSE": np.swapaxes(a, -1, -2),
                     "ADJOINT": np.conj(np.swapaxes(a, -1, -2))}[op.attributes.split("transpose ")[1].split(">")[0]]
                if "unit_diagonal = true" in op.attributes:
                    a = a - np.eye(a.shape[-1]) * (np.diagonal(a, axis1=-2, axis2=-1)[..., None, :] - 1)
                product = a @ values[made] if "left_side = true" in op.attributes else values[made] @ a
                assert np.allclose(product, rhs, rtol=1e-4, atol=1e-3 * max(1, np.abs(rhs).max(initial=0)))
                seen.add(op.name)
    assert seen == {"stablehlo.cholesky", "stablehlo.triangular_solve"}


def test_generated_random_numbers_are_checked_by_what_the_spec_fixes():
    """The xor of two rng_bit_generator of one state is zeros, rng's uniform values lie
    in [a, b): every such result of the generated programs, on the interpreter."""
    checked = 0
    for program, values in _results_of("stablehlo.rng", ("rng", "rng_bit_generator")):
        for k, op in enumerate(program.ops):
            (made,) = program.op_values(k) if len(op.results) == 1 else (None,)
            readers = [program.op_of(v) for v in op.operands]
            if op.name == "stablehlo.xor" and all(program.ops[r].name == "stablehlo.rng_bit_generator"
                                                  for r in readers if r is not None):
                assert not np.asarray(values[made]).any()
                checked += 1
            elif op.name == "stablehlo.and" and values[made].size:
                assert np.asarray(values[made]).all()
                checked += 1
    assert checked >= 4


def test_captured_values_become_arguments_when_their_op_is_cut():
    """A region's use of an outer value is a read: keep() keeps the value, as an
    argument when the op making it is cut, and the text names it in the region."""
    scalar = Spec((), "f32")
    region = '{\n      "stablehlo.return"($c0) : (tensor<f32>) -> ()\n    }, {\n      "stablehlo.return"($c1) : (tensor<f32>) -> ()\n    }'
    program = Program(2, [scalar, Spec((), "i1"), scalar, scalar],
                      [Op("stablehlo.negate", (0,), (scalar,)),
                       Op("stablehlo.if", (1,), (scalar,), "", region, captures=(2, 0))], [3])
    assert '"stablehlo.return"(%0)' in program.text()
    kept, sources = program.keep([1])
    assert sources == [0, 1, 2] and '"stablehlo.return"(%arg2)' in kept.text()
    negated = np.float32(-2.5)
    for predicate, expected in ((True, negated), (False, 2.5)):
        assert si.load(kept.text()).run(np.float32(2.5), np.bool_(predicate), negated)[0] == expected


def test_arguments_hold_the_special_values():
    f32 = special_values("f32")
    assert any(np.isnan(v) for v in f32) and np.inf in f32 and -np.inf in f32
    assert any(v == 0 and np.signbit(v) for v in f32)
    assert float(np.finfo(np.float32).smallest_subnormal) in f32 and float(np.finfo(np.float32).max) in f32
    assert int(np.iinfo(np.int32).min) in special_values("i32")
    assert not any(np.isinf(v) for v in special_values("f8E4M3FN"))   # it has no infinity
    seen = np.concatenate([np.asarray(a, np.float64).ravel() for seed in range(200)
                           for a in generate(program_seed(9, seed), element_types=("f32",)).arguments])
    assert np.isnan(seen).any() and np.isposinf(seen).any() and np.isneginf(seen).any()
    assert (np.signbit(seen) & (seen == 0)).any() and ((seen != 0) & (np.abs(seen) < 1.2e-38)).any()


def _first_finding(backend, ops, element_types=("f32", "f64"), seeds=range(200)):
    for seed in seeds:
        generated = generate(seed, ops=ops, element_types=element_types)
        outcome = check(generated.text, generated.arguments, backend)
        if outcome is not None:
            return generated, outcome
    raise AssertionError("no program shows the planted bug")


def test_the_reducer_shrinks_a_planted_bug_to_one_op_on_one_element():
    generated, outcome = _first_finding(WRONG_ADD, SMALL_OPS)
    assert outcome.cause == SIGNED_ZERO
    reduced = reduce_finding(generated.program, generated.arguments, outcome, WRONG_ADD)
    assert reduced.program.op_names() == ["stablehlo.add"]
    assert all(np.shape(a) == () for a in reduced.arguments)
    ours = si.load(reduced.program.text()).run(*reduced.arguments)[0]
    expected = np.add(*[reduced.arguments[i] for i in reduced.program.ops[0].operands])
    assert ours == 0 and np.signbit(ours) == np.signbit(expected)   # NumPy agrees with the interpreter
    assert np.signbit(WRONG_ADD(reduced.program.text(), reduced.arguments)[0]) != np.signbit(expected)


def test_a_campaign_deduplicates_and_writes_runnable_findings(tmp_path):
    report = fuzz(WRONG_ADD, seed=3, count=30, ops=ADDS, element_types=("f32",), out=tmp_path, jobs=2)
    assert report.findings, "the planted bug shows in 30 programs"
    keys = [finding.key for finding in report.findings]
    assert len(keys) == len(set(keys))
    add = next(f for f in report.findings if f.key == ("stablehlo.add", "f32", SIGNED_ZERO))
    assert len(add.programs) >= 2 and add.reduced_ops == 1   # duplicates merged into one finding
    assert sum(len(f.programs) for f in report.findings) + report.agreed == report.count
    folder = next(tmp_path.glob("*stablehlo_add-f32-signed_zero"))
    arguments = [np.load(folder / f"arg{i}.npy") for i in range(len(add.arguments))]
    text = (folder / "program.mlir").read_text()
    expected = np.add(*[arguments[i] for i in add_operands(text)])
    ours = si.load(text).run(*arguments)[0]
    assert ours == 0 and np.signbit(ours) == np.signbit(expected)
    assert json.loads((tmp_path / "report.json").read_text())["findings"][0]["op"] == report.findings[0].op
    assert "signed zero" in (tmp_path / "report.md").read_text()


def add_operands(text: str) -> list:
    """The argument numbers a one-op program's add reads."""
    line = next(line for line in text.splitlines() if "stablehlo.add" in line)
    return [int(n) for n in re.findall(r"%arg(\d+)", line)]


def test_a_crashing_backend_is_a_finding_not_a_crash():
    report = fuzz(CrashOnMultiply(), seed=0, count=4, ops=("multiply", "negate"), element_types=("i32",))
    crashes = [f for f in report.findings if f.cause == CRASH]
    assert len(crashes) == 1 and crashes[0].op == "stablehlo.multiply" and crashes[0].reduced_ops == 1
    assert sum(len(f.programs) for f in report.findings) + report.agreed == 4 and report.agreed >= 1


def test_a_program_the_backend_cannot_compile_is_a_finding():
    report = fuzz(CannotCompileTanh(), seed=0, count=4, ops=("tanh", "negate"), element_types=("f32",))
    assert [(f.op, f.cause, f.reduced_ops) for f in report.findings] == [("stablehlo.tanh", COMPILE_FAILURE, 1)]
    assert "no lowering" in report.findings[0].detail


# i >= i holds for every i32: the loop never ends (on any backend).
ENDLESS_WHILE = """
func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %r = stablehlo.while(%i = %x) : tensor<i32>
    cond {
      %c = stablehlo.compare GE, %i, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %n : tensor<i32>
    }
  return %r : tensor<i32>
}
"""


class HangsOnNegate:
    """A backend that never returns from a program with a negate (it sleeps: an alarm gets through)."""

    name, settings = "hangs on negate", ()

    def __call__(self, module_text, args):
        while "stablehlo.negate" in module_text:
            time.sleep(1)
        return si.load(module_text).run(*args)


class HangsInNativeCode:
    """A backend stuck where no alarm gets through (SIGALRM ignored: as good as a loop in
    compiled code, where Python's handler never runs)."""

    name, settings = "stuck", ()

    def __call__(self, module_text, args):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            time.sleep(1)


class AddLosingNegativeZeroHangingWithoutAdd:
    """WRONG_ADD, but a program without an add never returns: candidates of a reduction that cut the add hang."""

    name, settings = "add losing -0, hangs without add", ()

    def __call__(self, module_text, args):
        while "stablehlo.add" not in module_text:
            time.sleep(1)
        return WRONG_ADD(module_text, args)


def test_an_endless_while_is_a_timeout_of_the_interpreter_within_the_deadline():
    start = time.perf_counter()
    outcome = check(ENDLESS_WHILE, [np.int32(0)], si.tools.JaxBackend("cpu"), timeout=1.0)
    assert time.perf_counter() - start < 3
    assert outcome.cause == TIMEOUT and outcome.detail == "the interpreter did not finish in 1 s"
    assert outcome.op is None and not outcome.ours


def test_a_backend_stuck_in_native_code_is_killed_at_the_deadline():
    checker = IsolatedCheck(timeout=1.0)
    try:
        assert checker("func.func @main(%x: tensor<i32>) -> tensor<i32> {\n  return %x : tensor<i32>\n}\n",
                       [np.int32(1)], WRONG_ADD) is None   # the child answers (and is started) before the deadline
        start = time.perf_counter()
        outcome = checker(ENDLESS_WHILE.replace("GE", "LT"), [np.int32(0)], HangsInNativeCode())
        assert time.perf_counter() - start < 10 and outcome.cause == TIMEOUT and "killed" in outcome.detail
    finally:
        checker.close()


def test_a_program_past_the_deadline_is_one_timeout_finding_not_reduced():
    report = fuzz(HangsOnNegate(), seed=0, count=4, ops=("negate", "add"), element_types=("f32",), timeout=1.0)
    timeouts = [f for f in report.findings if f.cause == TIMEOUT]
    assert len(timeouts) == 1 and timeouts[0].detail == "the backend (hangs on negate) did not finish in 1 s"
    assert timeouts[0].reduced_ops == timeouts[0].original_ops and "stablehlo.negate" in timeouts[0].text
    negates = [i for i in range(4) if "stablehlo.negate" in generate(program_seed(0, i), ops=("negate", "add"),
                                                                      element_types=("f32",)).text]
    assert negates and timeouts[0].programs == negates and report.agreed == 4 - len(negates)


@pytest.mark.slow   # three deadlines and their grace: the worker, the worker again alone, the isolated check
def test_a_campaign_worker_stuck_in_native_code_is_a_timeout_finding():
    start = time.perf_counter()
    report = fuzz(HangsInNativeCode(), seed=0, count=1, ops=("negate",), element_types=("i32",), timeout=1.0)
    assert [(f.cause, f.programs) for f in report.findings] == [(TIMEOUT, [0])] and "killed" in report.findings[0].detail
    assert time.perf_counter() - start < 60


def test_a_reduction_whose_candidates_hang_still_finds_the_minimal_program():
    backend = AddLosingNegativeZeroHangingWithoutAdd()
    generated, outcome = _first_finding(WRONG_ADD, SMALL_OPS)
    seen = []
    isolated = IsolatedCheck(timeout=1.0)

    def checker(*arguments):
        seen.append(isolated(*arguments))
        return seen[-1]

    try:
        reduced = reduce_finding(generated.program, generated.arguments, outcome, backend, checker=checker)
    finally:
        isolated.close()
    assert any(o is not None and o.cause == TIMEOUT for o in seen), "a candidate without the add was tried"
    assert reduced.program.op_names() == ["stablehlo.add"] and reduced.outcome.cause == SIGNED_ZERO
    assert all(np.shape(a) == () for a in reduced.arguments)
    expected = np.add(*[reduced.arguments[i] for i in reduced.program.ops[0].operands])
    assert expected == 0 and np.signbit(WRONG_ADD(reduced.program.text(), reduced.arguments)[0]) != np.signbit(expected)


# Ops and element types whose programs XLA CPU runs as the spec says (docs/findings.md,
# "Found by fuzz", lists what it does not: those are left out here).
AGREEING_OPS = ("add", "subtract", "multiply", "negate", "abs", "maximum", "minimum", "compare", "select", "clamp",
                "and", "or", "xor", "not", "reshape", "transpose", "broadcast_in_dim", "slice", "concatenate", "pad",
                "reverse", "iota", "constant", "convert", "dynamic_slice", "dynamic_update_slice", "sort",
                "floor", "ceil", "round_nearest_even", "sqrt", "exponential", "tanh", "reduce", "dot_general",
                "gather", "scatter", "while", "case", "if", "fft")
AGREEING_TYPES = ("f32", "f64", "i32", "i64", "ui32", "ui8", "i8", "i1")


@pytest.mark.parametrize("seed", range(6))
def test_generated_programs_agree_with_xla_cpu(seed):
    generated = generate(program_seed(11, seed), ops=AGREEING_OPS, element_types=AGREEING_TYPES)
    outcome = check(generated.text, generated.arguments, si.tools.JaxBackend("cpu"))
    if "lhs_contracting_dimensions = []" in generated.text and outcome is not None:
        assert outcome.cause == SIGNED_ZERO, generated.text   # an outer product's -0 (docs/findings.md)
        return
    assert outcome is None, generated.text


# Float convolutions with padding or lhs dilation and an inf or NaN in the kernel differ
# from XLA CPU (docs/findings.md: it skips the zeros the spec multiplies): integers here.
@pytest.mark.parametrize("seed", range(3))
def test_generated_convolutions_agree_with_xla_cpu(seed):
    generated = next(g for g in (generate(program_seed(12, s), ops=("convolution", "add", "reshape"),
                                          element_types=("i32", "i64", "ui8", "i8")) for s in range(20 * seed, 20 * seed + 20))
                     if "stablehlo.convolution" in g.text)
    assert check(generated.text, generated.arguments, si.tools.JaxBackend("cpu")) is None, generated.text


CONVOLUTION_OVER_PADDING = """\
func.func @main(%arg0: tensor<1x1x2xf32>, %arg1: tensor<1x1x1xf32>) -> (tensor<1x1x4xf32>) {
    %0 = "stablehlo.convolution"(%arg0, %arg1) {dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, \
window_strides = array<i64: 1>, padding = dense<[[0, 1]]> : tensor<1x2xi64>, lhs_dilation = array<i64: 2>, \
rhs_dilation = array<i64: 1>, feature_group_count = 1 : i64, batch_group_count = 1 : i64} \
: (tensor<1x1x2xf32>, tensor<1x1x1xf32>) -> tensor<1x1x4xf32>
    return %0 : tensor<1x1x4xf32>
}
"""


def test_a_float_convolution_over_padding_is_the_spec_s_nan_here_and_a_finding_on_xla_cpu():
    """Spec (convolution): lhs is dilated and padded with zeros, and 0 × inf is NaN;
    XLA CPU skips those zeros (docs/findings.md)."""
    text = CONVOLUTION_OVER_PADDING
    arguments = [np.array([[[1, 2]]], np.float32), np.array([[[np.inf]]], np.float32)]
    assert np.array_equal(si.load(text).run(*arguments)[0], [[[np.inf, np.nan, np.inf, np.nan]]], equal_nan=True)
    assert np.array_equal(si.tools.JaxBackend("cpu")(text, arguments)[0], [[[np.inf, 0, np.inf, 0]]])
    outcome = check(text, arguments, si.tools.JaxBackend("cpu"))
    assert outcome is not None and outcome.op == "stablehlo.convolution"


ONE_TAP_CONVOLUTION = """\
func.func @main(%arg0: tensor<1x1x1xf32>, %arg1: tensor<1x1x1xf32>) -> (tensor<1x1x1xf32>) {
    %0 = "stablehlo.convolution"(%arg0, %arg1) {dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, \
window_strides = array<i64: 1>, padding = dense<[[0, 0]]> : tensor<1x2xi64>, lhs_dilation = array<i64: 1>, \
rhs_dilation = array<i64: 1>, feature_group_count = 1 : i64, batch_group_count = 1 : i64} \
: (tensor<1x1x1xf32>, tensor<1x1x1xf32>) -> tensor<1x1x1xf32>
    return %0 : tensor<1x1x1xf32>
}
"""


@pytest.mark.parametrize("x, w", [(1e-39, 1e10), (2e-38, 0.5)], ids=["subnormal operand", "subnormal result"])
def test_a_float_convolution_flushes_subnormals_on_xla_cpu(x, w):
    """One tap, x * w: the spec's product (NumPy's, IEEE 754) is a normal number read
    from a subnormal operand, or a subnormal made from normal ones; XLA CPU gives 0
    for both (denormals-are-zero and flush-to-zero, docs/findings.md)."""
    arguments = [np.full((1, 1, 1), x, np.float32), np.full((1, 1, 1), w, np.float32)]
    expected = arguments[0] * arguments[1]
    assert expected.item() != 0
    assert np.array_equal(si.load(ONE_TAP_CONVOLUTION).run(*arguments)[0], expected)
    assert si.tools.JaxBackend("cpu")(ONE_TAP_CONVOLUTION, arguments)[0].item() == 0
    outcome = check(ONE_TAP_CONVOLUTION, arguments, si.tools.JaxBackend("cpu"))
    assert outcome is not None and outcome.op == "stablehlo.convolution"


@pytest.mark.parametrize("seed", range(2))
def test_generated_integer_select_and_scatters_agree_with_xla_cpu(seed):
    """Integers only: with floats XLA CPU loses a +0 (the next test, docs/findings.md)."""
    generated = next(g for g in (generate(program_seed(13, s), ops=("select_and_scatter", "add"),
                                          element_types=("i32", "i64", "ui8", "i8")) for s in range(20 * seed, 20 * seed + 20))
                     if "stablehlo.select_and_scatter" in g.text)
    assert check(generated.text, generated.arguments, si.tools.JaxBackend("cpu")) is None, generated.text


SELECT_AND_SCATTER_THEN_ADD = """\
func.func @main(%arg0: tensor<2xf32>, %arg1: tensor<1xf32>, %arg2: tensor<2xf32>) -> (tensor<2xf32>) {
    %0 = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %1 = "stablehlo.select_and_scatter"(%arg0, %arg1, %0) ({
  ^bb0(%a0: tensor<f32>, %a1: tensor<f32>):
      %r = "stablehlo.compare"(%a0, %a1) {comparison_direction = #stablehlo<comparison_direction GE>, \
compare_type = #stablehlo<comparison_type TOTALORDER>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%r) : (tensor<i1>) -> ()
    }, {
  ^bb0(%a0: tensor<f32>, %a1: tensor<f32>):
      %r = "stablehlo.add"(%a0, %a1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) {window_dimensions = array<i64: 2>, window_strides = array<i64: 2>} \
: (tensor<2xf32>, tensor<1xf32>, tensor<f32>) -> tensor<2xf32>
    %2 = "stablehlo.add"(%1, %arg2) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    return %2 : tensor<2xf32>
}
"""


def test_add_after_select_and_scatter_keeps_plus_zero_here_and_not_on_xla_cpu():
    """The unselected element is the init, +0, and +0 + -0 is +0 (IEEE 754, NumPy)."""
    arguments = [np.array([1, 2], np.float32), np.array([5], np.float32), np.array([-0.0, -0.0], np.float32)]
    ours = si.load(SELECT_AND_SCATTER_THEN_ADD).run(*arguments)[0]
    assert ours.tolist() == [0, 5] and not np.signbit(ours[0]) and not np.signbit(np.float32(0) + np.float32(-0.0))
    outcome = check(SELECT_AND_SCATTER_THEN_ADD, arguments, si.tools.JaxBackend("cpu"))
    assert outcome is not None and outcome.cause == SIGNED_ZERO


def test_batch_norm_inference_near_overflow_is_the_spec_s_formula():
    text = """\
func.func @main(%arg0: tensor<1x1xf64>, %arg1: tensor<1xf64>, %arg2: tensor<1xf64>) -> (tensor<1x1xf64>) {
    %0 = "stablehlo.batch_norm_inference"(%arg0, %arg1, %arg1, %arg1, %arg2) {epsilon = 1.000000e-05 : f32, \
feature_index = 1 : i64} : (tensor<1x1xf64>, tensor<1xf64>, tensor<1xf64>, tensor<1xf64>, tensor<1xf64>) -> tensor<1x1xf64>
    return %0 : tensor<1x1xf64>
}
"""
    big = np.finfo(np.float64).max
    arguments = [np.array([[-12.703]]), np.array([-big]), np.array([0.0])]
    with np.errstate(all="ignore"):
        expected = (arguments[0] + big) / np.sqrt(np.float64(np.float32(1e-5))) * -big - big
    assert np.isneginf(expected).all()
    assert np.array_equal(si.load(text).run(*arguments)[0], expected)
    outcome = check(text, arguments, si.tools.JaxBackend("cpu"))
    assert outcome is not None and outcome.op == "stablehlo.batch_norm_inference"


SIGNED_RANDOM_BITS = """\
func.func @main(%arg0: tensor<2xui64>) -> (tensor<2xui64>, tensor<3xi32>) {
    %0:2 = "stablehlo.rng_bit_generator"(%arg0) {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>} \
: (tensor<2xui64>) -> (tensor<2xui64>, tensor<3xi32>)
    return %0#0, %0#1 : tensor<2xui64>, tensor<3xi32>
}
"""


def test_rng_bit_generator_of_a_signed_type_is_that_type_here_and_unsigned_on_xla_cpu():
    """Spec (rng_bit_generator, C3): the output is an integer or float tensor of the
    declared type; XLA CPU returns the same bits as ui32 (docs/findings.md)."""
    state = np.array([1, 2], np.uint64)
    ours = si.load(SIGNED_RANDOM_BITS).run(state)[1]
    theirs = si.tools.JaxBackend("cpu")(SIGNED_RANDOM_BITS, [state])[1]
    assert ours.dtype == np.int32 and theirs.dtype == np.uint32
    assert np.array_equal(ours.view(np.uint32), theirs)   # the same bits (XLA's Threefry, docs/coverage.md)
    outcome = check(SIGNED_RANDOM_BITS, [state], si.tools.JaxBackend("cpu"))
    assert outcome is not None and outcome.cause == WRONG_TYPE


REDUCE_SCATTER_MAXIMUM = """\
func.func @main(%arg0: tensor<2xf32>) -> (tensor<2xf32>) {
    %0 = "stablehlo.reduce_scatter"(%arg0) ({
  ^bb0(%a0: tensor<f32>, %a1: tensor<f32>):
      %r = "stablehlo.maximum"(%a0, %a1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
}
"""


def test_reduce_scatter_on_one_process_keeps_a_nan_here_and_not_on_xla_cpu():
    """Spec (reduce_scatter): with one process the reduction over the group is the
    operand itself (and maximum propagates NaN, IEEE 754's maximum); XLA CPU gives -inf."""
    x = np.array([np.nan, 1], np.float32)
    assert np.array_equal(si.load(REDUCE_SCATTER_MAXIMUM).run(x)[0], x, equal_nan=True)
    assert si.tools.JaxBackend("cpu")(REDUCE_SCATTER_MAXIMUM, [x])[0].tolist() == [-np.inf, 1]
    assert check(REDUCE_SCATTER_MAXIMUM, [x], si.tools.JaxBackend("cpu")).op == "stablehlo.reduce_scatter"


BATCH_NORM_TRAINING = """\
func.func @main(%arg0: tensor<2x1xf32>, %arg1: tensor<2xf32>, %arg2: tensor<2xf32>) -> (tensor<2x1xf32>, tensor<2xf32>, tensor<2xf32>) {
    %0:3 = "stablehlo.batch_norm_training"(%arg0, %arg1, %arg2) {epsilon = 0.000000e+00 : f32, feature_index = 0 : i64} \
: (tensor<2x1xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x1xf32>, tensor<2xf32>, tensor<2xf32>)
    return %0#0, %0#1, %0#2 : tensor<2x1xf32>, tensor<2xf32>, tensor<2xf32>
}
"""


def test_batch_norm_training_variance_of_one_value_is_zero_here_and_not_on_xla_cpu():
    """Spec (batch_norm_training): variance = mean((x - mean)^2), 0 for one value (NumPy's
    var), and (x - mean) / sqrt(0 + 0) is NaN; XLA CPU's variance of -1.0742 is 3.6e-8."""
    arguments = [np.array([[-1.0742], [3]], np.float32), np.ones(2, np.float32), np.zeros(2, np.float32)]
    output, mean, variance = si.load(BATCH_NORM_TRAINING).run(*arguments)
    assert np.array_equal(variance, np.var(arguments[0], axis=1)) and not variance.any()
    assert np.array_equal(mean, arguments[0][:, 0]) and np.isnan(output).all()
    theirs = si.tools.JaxBackend("cpu")(BATCH_NORM_TRAINING, arguments)
    assert theirs[2][0] > 1e-8 and theirs[0][0, 0] == 0
    assert check(BATCH_NORM_TRAINING, arguments, si.tools.JaxBackend("cpu")).op == "stablehlo.batch_norm_training"


# The families added last whose programs XLA CPU runs as the spec says (docs/findings.md
# lists what it does not: collective_broadcast, reduce_scatter of a NaN, quantized types
# ... are left out).
AGREEING_FAMILIES = ("sort", "while", "if", "case", "optimization_barrier", "tuple", "all_gather", "all_to_all",
                     "collective_permute", "replica_id", "partition_id", "rng", "rng_bit_generator", "cholesky",
                     "add", "negate", "multiply")


@pytest.mark.parametrize("seed", range(4))
def test_generated_programs_of_the_new_families_agree_with_xla_cpu(seed):
    generated = generate(program_seed(24, seed), ops=AGREEING_FAMILIES,
                         element_types=("f32", "f64", "i32", "i64", "ui32", "ui8", "i8", "i1"))
    outcome = check(generated.text, generated.arguments, si.tools.JaxBackend("cpu"))
    if outcome is not None and outcome.cause == WRONG_TYPE and "rng_bit_generator" in generated.text:
        assert re.search(r"uint\d+\[.*the interpreter's int\d+\[", outcome.detail), outcome.detail   # (the test above)
        return
    assert outcome is None, generated.text


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6, 60))
def test_generated_programs_agree_with_xla_cpu_sweep(seed):
    test_generated_programs_agree_with_xla_cpu(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 40))
def test_generated_programs_of_the_new_families_agree_with_xla_cpu_sweep(seed):
    test_generated_programs_of_the_new_families_agree_with_xla_cpu(seed)


def test_a_campaign_runs_on_a_local_ray_instance():
    """The same findings as the local campaign's (XLA CPU: the Ray workers import the
    backend by name, and this test module is not on their path)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    options = dict(seed=0, count=3, ops=("cbrt", "divide"), element_types=("f32",))
    try:
        report = fuzz("cpu", ray="local", **options)
    finally:
        ray.shutdown()
    local = fuzz("cpu", **options)
    assert local.findings and [(f.key, f.programs, f.text) for f in report.findings] == \
        [(f.key, f.programs, f.text) for f in local.findings]


def test_the_command(tmp_path, capsys):
    from stablehlo_interp.cli import main

    assert main(["fuzz", "--count", "2", "--op", "negate", "--element-type", "i32", "--out", str(tmp_path),
                 "--timeout", "30"]) == 0
    assert "2 programs from seed 0 on cpu: 2 agree, 0 findings" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["agreed"] == 2
    assert main(["fuzz", "--op", "no_such_op"]) == 2
    assert "the generator knows no no_such_op" in capsys.readouterr().err


def test_a_deadline_gives_back_an_alarm_pending_before_it():
    """The check's SIGALRM deadline leaves an outer alarm (pytest-timeout's, a caller's)
    pending with the rest of its time, instead of cancelling it."""
    import signal
    import time

    from stablehlo_interp.tools.fuzz.check import _Deadline

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with _Deadline(5):
            time.sleep(0.1)
        time.sleep(0.8)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(fired) == 1 and 0.45 <= fired[0] - start <= 0.8
