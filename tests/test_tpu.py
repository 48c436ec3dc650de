"""A TPU's arithmetic judged by what it declares (judge/precision.py, ``TPU_V5E``).

A TPU v5e's own answers, recorded (tests/data/tpu/: its probes of single ops and two
training steps), are played back to the judge; and since a recording holds only what the
TPU was asked, a simulated TPU stands in for the rest: the interpreter with its ``dot_general``
multiplying f32 operands as a TPU's matrix unit does at each precision (one bf16 pass at
DEFAULT, three at HIGH, f32 at HIGHEST), an ``add`` that flushes subnormals, an ``exp`` off
by a chosen amount. The judge must call what the TPU declares "within the backend's
declared precision", on one op and on the zoo's training steps, and anything beyond it a
deviation. The TPU's own verdicts over StableHLO's files are replayed in
tests/test_scoreboard.py (tests/data/tpu/conform.json); where a TPU is present, the last
test compares a training step on it live.
"""

from __future__ import annotations

import json
import pathlib

import jax
import ml_dtypes
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp import ops
from stablehlo_interp.backends import InterpreterBackend, RecordedBackend
from stablehlo_interp.backends.recorded import load_values
from stablehlo_interp.engine import registry
from stablehlo_interp.judge.bounds import BEYOND, NOISE, PRECISION
from stablehlo_interp.judge.precision import TPU_V5E, DeclaredPrecision
from stablehlo_interp.program.calls import prepare

ops.load_all()
BUILT_IN = {name: registry.op_builder(name) for name in ("stablehlo.dot_general", "stablehlo.add",
                                                         "stablehlo.exponential")}
TINY = np.finfo(np.float32).tiny


def as_bf16(x) -> np.ndarray:
    return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32)


def bf16_parts(x) -> tuple:
    """``x`` as a high and a low bf16 part (``x ≈ high + low``), as bf16_3x splits it."""
    high = as_bf16(x)
    return high, as_bf16(np.asarray(x, np.float32) - high)


def matrix_unit_dot(info, honours_precision: bool = True):
    """A TPU's f32 dot_general: operands multiplied in one bf16 pass at DEFAULT, in three
    (high·high + high·low + low·high) at HIGH, as f32 at HIGHEST; a precision-blind unit
    multiplies every dot in one pass."""
    run = BUILT_IN["stablehlo.dot_general"](info)
    if info.operand_types[0].dtype != np.float32:
        return run
    passes = TPU_V5E.operand_passes(_StepOf(info)) if honours_precision else "one bf16 pass"

    def dot(lhs, rhs):
        if passes == "one bf16 pass":
            return run(as_bf16(lhs), as_bf16(rhs))
        if passes.startswith("three"):
            (lhs_high, lhs_low), (rhs_high, rhs_low) = bf16_parts(lhs), bf16_parts(rhs)
            return run(lhs_high, rhs_high) + run(lhs_high, rhs_low) + run(lhs_low, rhs_high)
        return run(lhs, rhs)

    return dot


class _StepOf:
    """What ``DeclaredPrecision.operand_passes`` reads of a step: its info."""

    def __init__(self, info):
        self.info = info


def simulated_tpu(honours_precision: bool = True, precision: DeclaredPrecision | None = TPU_V5E, **more_ops):
    backend = InterpreterBackend(
        ops={"stablehlo.dot_general": lambda info: matrix_unit_dot(info, honours_precision), **more_ops},
        name="simulated TPU" if honours_precision else "precision-blind TPU")
    backend.precision = precision
    return backend


def dot_program(precision: str, terms: int) -> str:
    return f"""func.func @main(%a: tensor<32x{terms}xf32>, %b: tensor<{terms}x16xf32>) -> tensor<32x16xf32> {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [{precision}, {precision}] : (tensor<32x{terms}xf32>, tensor<{terms}x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}}"""


def dot_operands(terms: int) -> tuple:
    rng = np.random.default_rng(1)
    return rng.standard_normal((32, terms)).astype(np.float32), rng.standard_normal((terms, 16)).astype(np.float32)


@pytest.mark.parametrize("precision", ["DEFAULT", "HIGH", "HIGHEST"])
@pytest.mark.parametrize("terms", [128, 512])
def test_a_dot_as_the_tpus_matrix_unit_computes_it_is_within_its_declared_precision(precision, terms):
    """At each precision the simulated unit is within what the TPU declares; at DEFAULT,
    one bf16 pass of 128 or 512 terms is beyond the spec's bound, (2n+2)·u·Σ|ab|, which is
    narrower there than a bf16 pass's 2v·Σ|ab|."""
    text, (a, b) = dot_program(precision, terms), dot_operands(terms)
    declared = si.compare(text, a, b, backend=simulated_tpu(), tolerance=(0.0, 0.0))
    plain = si.compare(text, a, b, backend=simulated_tpu(precision=None), tolerance=(0.0, 0.0))
    assert declared.explained, str(declared)
    if precision == "DEFAULT":
        assert plain.kinds == [BEYOND] and plain.divergence.op == "stablehlo.dot_general"
        assert declared.kinds == [PRECISION] and "only within the latter: TPU v5e" in str(declared)
    elif precision == "HIGHEST":     # multiplied as f32: the spec's own rounding
        assert plain.explained and plain.ops.get(BEYOND, 0) == 0 and declared.ops.get(PRECISION, 0) == 0


@pytest.mark.parametrize("precision", ["HIGH", "HIGHEST"])
def test_a_unit_that_ignores_the_precision_asked_for_is_beyond_it(precision):
    text, (a, b) = dot_program(precision, 256), dot_operands(256)
    comparison = si.compare(text, a, b, backend=simulated_tpu(honours_precision=False), tolerance=(0.0, 0.0))
    assert comparison.kinds == [BEYOND] and comparison.divergence.op == "stablehlo.dot_general"
    assert "beyond the backend's declared precision" in comparison.divergence.rule


def flushed(values) -> np.ndarray:
    values = np.asarray(values, np.float32)
    return np.where(np.abs(values) < TINY, np.float32(0), values).astype(np.float32)


def flushing_add(info):
    run = BUILT_IN["stablehlo.add"](info)
    return lambda lhs, rhs: flushed(run(flushed(lhs), flushed(rhs)))


def test_subnormals_flushed_by_the_tpu_are_its_declared_behaviour_not_rounding():
    rng = np.random.default_rng(2)
    x, y = (rng.uniform(-1, 1, 4096).astype(np.float32) * TINY for _ in range(2))   # subnormal
    text = """func.func @main(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> tensor<4096xf32> {
  %0 = stablehlo.add %a, %b : tensor<4096xf32>
  return %0 : tensor<4096xf32>
}"""
    tpu = simulated_tpu(**{"stablehlo.add": flushing_add})
    (answer,) = tpu(text, [x, y])
    assert np.all(answer == 0) and np.count_nonzero(x + y == 0) < 10   # two zeros added
    assert si.compare(text, x, y, backend=tpu, tolerance=(0, 0)).kinds == [PRECISION]
    tpu.precision = None
    assert si.compare(text, x, y, backend=tpu, tolerance=(0, 0)).kinds == [BEYOND]


@pytest.mark.parametrize("relative_error, kinds", [(2.0 ** -19, [PRECISION]), (0.01, [BEYOND])])
def test_an_exp_within_the_tpus_64_ulp_is_declared_and_one_1_percent_off_is_named(relative_error, kinds):
    """The TPU declares its f32 exp within 64 ULP: an answer 16 ULP off there (2⁻¹⁹ relative)
    is within it; one element 1% off is a deviation, found at its index."""
    x = np.linspace(-10, 10, 4096, dtype=np.float32)

    def one_off(info):
        run = BUILT_IN["stablehlo.exponential"](info)

        def exp(values):
            exact = run(values)
            return np.where(np.arange(exact.size) == 100, exact * np.float32(1 + relative_error), exact)

        return exp

    comparison = si.compare(jax.numpy.exp, x, backend=simulated_tpu(**{"stablehlo.exponential": one_off}),
                            tolerance=(0.0, 0.0))
    assert comparison.kinds == kinds
    if kinds == [BEYOND]:
        assert comparison.divergence.op == "stablehlo.exponential"
        assert comparison.divergence.difference.mismatched == 1 and comparison.divergence.difference.index == (100,)


def zoo_step(name: str, precision: str | None) -> tuple:
    """A zoo training step (tests/zoo/) lowered at JAX's default matmul precision or under
    ``jax.default_matmul_precision(precision)``, and its arguments."""
    from zoo import PROGRAMS

    with jax.enable_x64(False):          # the zoo is written for 32 bits
        program = PROGRAMS[name]()
        with jax.default_matmul_precision(precision):
            text = program.lowered().as_text(debug_info=True)
        arguments = prepare(jax.jit(program.function), program.args, {}).arguments
    return text, [np.asarray(argument) for argument in arguments]


@pytest.mark.parametrize("name", ["flax_linen_mlp", "keras_mlp"])
def test_training_steps_on_the_tpu_raise_no_false_alarm(name):
    """A Flax + Optax step and a Keras one as a TPU computes their dots: every op within the
    spec's rounding or the TPU's declared precision, and the bf16 passes show."""
    text, arguments = zoo_step(name, None)
    comparison = si.compare(text, *arguments, backend=simulated_tpu(), tolerance=(0.0, 0.0))
    assert comparison.explained and comparison.ops[BEYOND] == 0, str(comparison)
    assert comparison.ops[PRECISION] > 0
    assert "simulated TPU declared precision: TPU v5e" in str(comparison)


def test_the_same_step_at_highest_precision_is_held_to_the_tighter_bound():
    """The MLP step under jax.default_matmul_precision("highest") on a unit that multiplies in
    one bf16 pass anyway: beyond the declared precision, at a dot_general of the user's model,
    while the DEFAULT program's dots in one pass are within it."""
    text, arguments = zoo_step("flax_linen_mlp", "highest")
    assert "precision = [HIGHEST, HIGHEST]" in text
    comparison = si.compare(text, *arguments, backend=simulated_tpu(honours_precision=False), tolerance=(0.0, 0.0))
    assert not comparison.explained
    found = comparison.divergence
    assert found.kind == BEYOND and found.op == "stablehlo.dot_general"
    assert "beyond the backend's declared precision" in found.rule
    assert "products of operands multiplied in the operands' own type" in found.rule
    assert found.location.frame.file.endswith("flax/linen/linear.py")
    default_text, _ = zoo_step("flax_linen_mlp", None)
    blind = si.compare(default_text, *arguments, backend=simulated_tpu(honours_precision=False), tolerance=(0, 0))
    assert blind.explained and blind.ops[PRECISION] > 0


# ---------------------------------------------------------------- the TPU's own answers
# Recorded on a TPU v5e (tests/data/tpu/README.md: the versions and the commands that
# recorded them) and played back here with ``RecordedBackend``.

DATA = pathlib.Path(__file__).parent / "data" / "tpu"
PROBES, ZOO = DATA / "probes", DATA / "zoo"


def recorded_probes() -> list:
    """``(key, text, arguments)`` of each probe of one op the TPU answered (a sum's probe has
    a constant first, whose value its answer does not show)."""
    return [(mlir.stem, mlir.read_text(), load_values(PROBES / f"{mlir.stem}.arguments.npz"))
            for mlir in sorted(PROBES.glob("*.mlir"))
            if (PROBES / f"{mlir.stem}.npz").exists() and "stablehlo.constant" not in mlir.read_text()]


def probe_id(probe) -> str:
    text = probe[1]
    op = next(part for part in text.replace('"', " ").split() if part.startswith(("stablehlo.", "chlo.")))
    return f"{op}-{probe[0][:6]}"


def _probe_key(text: str, values) -> tuple:
    steps = tuple(step.name for step in si.load(text).function("main").region.steps)
    return steps, tuple((np.asarray(v).dtype.name, np.asarray(v).shape, np.asarray(v).tobytes()) for v in values)


class ProbeAnswers(RecordedBackend):
    """The TPU's answer to a probe, found by the probe's ops and arguments: compare hands the
    backend the probe's module as MLIR prints it, not the text recorded."""

    def __init__(self, folder, precision: DeclaredPrecision | None = TPU_V5E):
        super().__init__(folder)
        self.precision = precision
        self.recorded = {_probe_key(path.read_text(), load_values(self.folder / f"{path.stem}.arguments.npz")):
                         path.stem for path in self.folder.glob("*.mlir")}

    def __call__(self, module_text, args, **options):
        key = self.recorded[_probe_key(module_text, args)]
        return super().__call__((self.folder / f"{key}.mlir").read_text(), args, **options)


class PrecisionBlind(RecordedBackend):
    """A TPU that ignores ``precision = HIGHEST``: it answers a program with the answers it
    gave the same program at DEFAULT."""

    def __call__(self, module_text, args, **options):
        return super().__call__(module_text.replace("HIGHEST", "DEFAULT"), args, **options)


def test_the_recordings_say_what_recorded_them():
    for folder in (PROBES, ZOO):
        recording = json.loads((folder / "recording.json").read_text())
        assert recording["platform"] == "tpu" and recording["device_kind"] == "TPU v5 lite"
        assert recording["jax"] == recording["jaxlib"] == "0.10.2" and "TPU v5 lite" in recording["platform_version"]
        assert recording["command"].startswith("python tests/tpu_")
    assert RecordedBackend(PROBES).precision is TPU_V5E
    assert len(recorded_probes()) >= 50


@pytest.mark.parametrize("probe", recorded_probes(), ids=probe_id)
def test_each_recorded_probe_answer_is_within_the_tpus_declared_precision(probe):
    _, text, arguments = probe
    comparison = si.compare(text, *arguments, backend=ProbeAnswers(PROBES), tolerance=(0.0, 0.0))
    assert comparison.explained, str(comparison)
    plain = si.compare(text, *arguments, backend=ProbeAnswers(PROBES, None), tolerance=(0.0, 0.0))
    if not plain.explained:   # beyond the spec's rounding: a TPU's own arithmetic, and only that
        assert comparison.kinds == [PRECISION] and comparison.ops[PRECISION] == 1
    if "precision = [HIGHEST" in text:
        assert comparison.ops.get(PRECISION, 0) == 0 and set(comparison.kinds) <= {None, NOISE}


def test_the_tpus_default_dots_are_beyond_the_specs_rounding_and_within_its_declared_precision():
    """The TPU's DEFAULT f32 products of 512 and 128 terms: beyond the spec's bound,
    (2n+2)·u·Σ|ab|, within a bf16 pass's 2v·Σ|ab| (of 4096 terms the spec's is wider)."""
    defaults = [p for p in recorded_probes() if "precision = [DEFAULT" in p[1] and "x4096x" not in p[1]
                and "xf32>" in p[1]]
    assert len(defaults) == 2
    for _, text, arguments in defaults:
        plain = si.compare(text, *arguments, backend=ProbeAnswers(PROBES, None), tolerance=(0.0, 0.0))
        assert plain.kinds == [BEYOND] and plain.divergence.op == "stablehlo.dot_general"
        declared = si.compare(text, *arguments, backend=ProbeAnswers(PROBES), tolerance=(0.0, 0.0))
        assert declared.kinds == [PRECISION] and "only within the latter: TPU v5e" in str(declared)


def test_the_tpu_flushes_subnormals_and_that_is_its_declared_behaviour():
    (probe,) = [p for p in recorded_probes() if "stablehlo.add" in p[1] and "f32" in p[1]
                and np.any(np.abs(p[2][0]) < TINY)]
    _, text, arguments = probe
    (answer,) = ProbeAnswers(PROBES)(text, arguments)
    np.testing.assert_array_equal(np.abs(answer), np.abs(flushed(flushed(arguments[0]) + flushed(arguments[1]))))
    assert np.count_nonzero(answer == 0) > 1000   # most of the sums of two subnormals: zero
    assert si.compare(text, *arguments, backend=ProbeAnswers(PROBES), tolerance=(0, 0)).kinds == [PRECISION]
    assert si.compare(text, *arguments, backend=ProbeAnswers(PROBES, None), tolerance=(0, 0)).kinds == [BEYOND]


def test_a_real_deviation_in_the_tpus_answer_is_still_named():
    """The TPU's exp answer with one element made 1% off: beyond its declared 64 ULP."""
    (key, text, arguments), = [p for p in recorded_probes() if "stablehlo.exponential %a : tensor<4096xf32>" in p[1]
                               and np.all(np.abs(p[2][0]) <= 10)]

    class OneWrong(ProbeAnswers):
        def __call__(self, module_text, args, **options):
            answers = super().__call__(module_text, args, **options)
            return [np.where(np.arange(answers[0].size) == 100, answers[0] * np.float32(1.01), answers[0])]

    comparison = si.compare(text, *arguments, backend=OneWrong(PROBES), tolerance=(0.0, 0.0))
    assert comparison.kinds == [BEYOND] and comparison.divergence.op == "stablehlo.exponential"
    assert comparison.divergence.difference.mismatched == 1 and comparison.divergence.difference.index == (100,)


def recorded_step(stem: str) -> tuple:
    """A zoo step exported for the TPU (``python tests/tpu_zoo.py export``) and its arguments."""
    folder = ZOO / "programs"
    return (folder / f"{stem}.mlir").read_text(), load_values(folder / f"{stem}.npz")


@pytest.mark.parametrize("stem", ["flax_linen_mlp.default", "flax_linen_mlp.highest", "keras_mlp.default",
                                  "keras_mlp.highest"])
def test_training_steps_as_the_tpu_ran_them_raise_no_false_alarm(stem):
    """A Flax + Optax step and a Keras one as the TPU ran them: every op within the spec's
    rounding or the TPU's declared precision (its dots' bf16 passes at DEFAULT)."""
    text, arguments = recorded_step(stem)
    comparison = si.compare(text, *arguments, backend=RecordedBackend(ZOO), tolerance=(0.0, 0.0))
    assert comparison.explained and comparison.ops[BEYOND] == 0, str(comparison)
    assert comparison.ops[PRECISION] > 0
    assert "tpu declared precision: TPU v5e" in str(comparison)


def test_the_tpus_default_answers_to_the_highest_precision_step_are_beyond_its_bound():
    """The MLP step under jax.default_matmul_precision("highest"), answered with the TPU's
    DEFAULT values (a TPU that ignored the precision): beyond its declared precision, at a
    dot_general of the user's model."""
    text, arguments = recorded_step("flax_linen_mlp.highest")
    assert "precision = [HIGHEST, HIGHEST]" in text
    comparison = si.compare(text, *arguments, backend=PrecisionBlind(ZOO), tolerance=(0.0, 0.0))
    assert not comparison.explained
    found = comparison.divergence
    assert found.kind == BEYOND and found.op == "stablehlo.dot_general"
    assert "beyond the backend's declared precision" in found.rule
    assert found.location.frame.file.endswith("flax/linen/linear.py")


def test_live_on_a_tpu_where_one_is_present():
    try:
        jax.devices("tpu")
    except RuntimeError:
        pytest.skip("no TPU here (CI has none): the simulated TPU above stands in for it")
    text, arguments = zoo_step("flax_linen_mlp", None)
    comparison = si.compare(text, *arguments, backend="tpu", tolerance=(0.0, 0.0))
    assert comparison.explained, str(comparison)
