"""The zoo (tests/zoo/): real programs written with Flax, Optax, Equinox, Diffrax, NumPyro, Haiku,
Keras and Optimistix, on the interp device and through ``si.run``, each compared with XLA's CPU backend,
and every tool run on them.

How results are judged. A float result computed in a different order (NumPy's pairwise sums
and BLAS dots against XLA's blocked loops, correctly rounded transcendentals against XLA's
approximations) legitimately differs from XLA's. How much depends on the program: a gradient
entry of 0.03 summed from terms reaching 17 carries rounding noise far above its own ulp. So
the bound is measured on the oracle itself: XLA runs the program again on its float inputs
perturbed by a few ulp (``PERTURBATION``), and the largest change this makes to a result leaf
(its *spread*) is the size of the rounding noise that leaf carries. The interpreter's result
must lie within ``NOISE_MARGIN`` spreads of XLA's, plus ``ULP_FLOOR`` ulp of each value (for
the correctly rounded exp/log/tanh against XLA's few-ulp approximations, which an input
perturbation need not show). Integer results (counts, accuracies, NUTS's tree sizes) are exact.

Leaves that are rounding noise alone. Some parameters have a true gradient of exactly zero: a
conv bias before BatchNorm (BatchNorm subtracts the batch mean, so the bias cancels), an
attention key bias (it adds the same q.b to every logit of a query, and softmax ignores that).
Their computed gradients are rounding noise of a sum whose terms do not vanish, and so is the
optimizer state made from them, and an Adam step of them (Adam divides the noise by its own
magnitude: a step of up to the learning rate, of either sign). The oracle shows such a leaf
by its spread: the values move by more than ``NOISE_FRACTION`` of their size when the inputs
move by a few ulp. For those the interpreter's values must be noise of the same size: at most
``NOISE_MARGIN**2`` times the oracle's (squared, as Adam's second moment squares the noise).
"""

from __future__ import annotations

import functools
import io
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import jax

import stablehlo_interp as si
from stablehlo_interp import device as interp_device, ops
from stablehlo_interp.engine import registry
from zoo import PROGRAMS, ZooProgram

EPS32 = float(np.finfo(np.float32).eps)
PERTURBATION = 4 * EPS32      # relative size of the oracle's input perturbations
PERTURBED_RUNS = 3
NOISE_MARGIN = 8              # a different summation order is allowed this many spreads
ULP_FLOOR = 16
NOISE_FRACTION = 0.01         # a leaf whose spread reaches this fraction of its size is noise

DEV = jax.devices("interp")[0]
CPU = jax.devices("cpu")[0]


# The tools run on every program, and each answer is checked against what is known of the program
# from XLA (every result is finite; the interpreter agrees with XLA within rounding). A tool that
# misleads on a program is a strict xfail here, so that a fix is noticed:
KNOWN_FAILURES: dict = {}
# Tool runs too heavy for the default run: (tool, program) -> seconds measured on a loaded machine
HEAVY = {("compare", "flax_nnx_transformer_lm"): 43, ("compare", "flax_nnx_cnn_batchnorm"): 14,
         ("explore", "flax_nnx_transformer_lm"): 9}


@pytest.fixture(autouse=True)
def as_users_run_them():
    """The zoo's programs run as their users run them, with 64-bit types off (the session
    turns them on, conftest.py): Diffrax's solvers refuse float32 inputs under x64."""
    with jax.enable_x64(False):
        yield


def program_params(tool: str | None = None) -> list:
    """The zoo's program names as test parameters: slow programs (and ``tool``'s heavy runs)
    marked slow, ``tool``'s known failures marked as strict xfails (see ``KNOWN_FAILURES``)."""
    params = []
    for name in PROGRAMS:
        marks = [pytest.mark.slow] if PROGRAMS[name].slow or (tool, name) in HEAVY else []
        if (tool, name) in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[tool, name]))
        params.append(pytest.param(name, id=name, marks=marks))
    return params


@functools.cache
def program(name: str) -> ZooProgram:
    return PROGRAMS[name]()


def _perturbed(args, seed: int):
    """``args`` with every float32 leaf moved by up to ``PERTURBATION`` of itself."""
    rng = np.random.default_rng(seed)

    def move(leaf):
        leaf = np.asarray(leaf)
        if leaf.dtype != np.float32:
            return leaf
        return (leaf * (1 + PERTURBATION * rng.uniform(-1, 1, leaf.shape))).astype(np.float32)

    return jax.tree.map(move, args)


@functools.cache
def oracle(name: str):
    """XLA CPU's results for the program, and each leaf's spread under input perturbation."""
    zoo_program = program(name)
    step = jax.jit(zoo_program.function)
    expected = jax.tree.map(np.asarray, step(*jax.device_put(zoo_program.args, CPU)))
    spreads = [np.zeros(leaf.shape) for leaf in jax.tree.leaves(expected)]
    for seed in range(PERTURBED_RUNS):
        moved = jax.tree.leaves(step(*jax.device_put(_perturbed(zoo_program.args, seed), CPU)))
        for spread, want, got in zip(spreads, jax.tree.leaves(expected), moved):
            if np.issubdtype(want.dtype, np.floating):
                np.maximum(spread, np.abs(np.asarray(got, np.float64) - want), out=spread)
    return expected, [float(spread.max()) if spread.size else 0.0 for spread in spreads]


def test_importing_the_zoo_imports_no_library():
    code = ("import sys, zoo; print(sorted(m for m in ('flax', 'optax', 'equinox', 'diffrax', 'numpyro', "
            "'haiku', 'keras', 'optimistix', 'jax') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=pathlib.Path(__file__).parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow   # a second build and lowering of each program
@pytest.mark.parametrize("name", program_params())
def test_a_program_is_the_same_at_each_build(name):
    """Fixed seeds: a second build has the same arguments and lowers to the same module."""
    first, second = program(name), PROGRAMS[name]()
    assert (first.name, first.slow, first.libraries) == (name, PROGRAMS[name].slow, second.libraries)
    assert first.description == second.description and "\n" not in first.description
    assert jax.tree.structure(first.args) == jax.tree.structure(second.args)
    for one, other in zip(jax.tree.leaves(first.args), jax.tree.leaves(second.args)):
        assert isinstance(one, np.ndarray) and one.dtype == other.dtype
        np.testing.assert_array_equal(one, other)
    assert first.lowered().as_text() == second.lowered().as_text()


def is_noise(want: np.ndarray, spread: float) -> bool:
    """Whether a float result leaf of the oracle is rounding noise alone: a few ulp more or
    less on the inputs move it by ``NOISE_FRACTION`` of its size."""
    return bool(np.issubdtype(want.dtype, np.floating) and want.size and spread > NOISE_FRACTION * np.abs(want).max())


def assert_agrees_with_oracle(name: str, actual) -> None:
    expected, spreads = oracle(name)
    expected_leaves, expected_tree = jax.tree_util.tree_flatten_with_path(expected)
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    assert actual_tree == expected_tree
    compared = 0
    for (path, want), got, spread in zip(expected_leaves, actual_leaves, spreads):
        where = f"{name}{jax.tree_util.keystr(path)}"
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape, where
        if not np.issubdtype(want.dtype, np.floating):
            np.testing.assert_array_equal(got, want, err_msg=where)
            compared += want.size
            continue
        assert np.isfinite(want).all(), f"{where}: the oracle's result is not finite"
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        size = float(np.abs(want64).max()) if want.size else 0.0
        if is_noise(want, spread):
            # rounding noise alone (see the module's docstring): judged by its size
            bound = NOISE_MARGIN ** 2 * max(size, spread)
            assert np.abs(got64).max() <= bound, (
                f"{where}: the oracle's values are rounding noise (size {size:.3g}, spread {spread:.3g}); "
                f"ours reach {np.abs(got64).max():.3g}, above {bound:.3g}")
        else:
            bound = NOISE_MARGIN * spread + ULP_FLOOR * EPS32 * np.abs(want64)
            error = np.abs(got64 - want64)
            worst = np.unravel_index(np.argmax(error - bound), want.shape) if want.size else ()
            assert (error <= bound).all(), (
                f"{where}: {int((error > bound).sum())} of {want.size} values beyond the rounding bound; "
                f"at {worst}: ours {got64[worst]!r}, XLA {want64[worst]!r}, bound {bound[worst]:.3g} "
                f"(spread {spread:.3g})")
        compared += want.size
    assert compared, f"{name}: no value compared"


def noise_leaves(name: str) -> set[str]:
    """The result leaves the oracle shows to be rounding noise alone (see the module's docstring)."""
    expected, spreads = oracle(name)
    return {jax.tree_util.keystr(path) for (path, want), spread in
            zip(jax.tree_util.tree_leaves_with_path(expected), spreads) if is_noise(want, spread)}


# The parameters whose true gradient is zero, and so the leaves that are rounding noise alone:
# their gradient, Adam's two moments of it, and the parameter after Adam's step.
ZERO_GRADIENT = {
    # softmax ignores the q.b_key a key bias adds to every logit of a query
    "flax_nnx_transformer_lm": [f"['blocks'][{block}]['attention']['key']['bias']" for block in (0, 1)],
    # BatchNorm subtracts the batch mean, and the conv bias with it
    "flax_nnx_cnn_batchnorm": ["['conv1']['bias']", "['conv2']['bias']"],
}


@pytest.mark.parametrize("name", program_params())
def test_the_noise_leaves_are_those_of_zero_gradient_parameters(name):
    """The oracle's noise leaves (judged by size alone) are exactly those a zero gradient
    explains: no leaf with a value to check escapes the rounding bound."""
    expected = {f"{prefix}{parameter}" for parameter in ZERO_GRADIENT.get(name, ())
                for prefix in ("['grads']", "['opt_state'][0].mu", "['opt_state'][0].nu", "['params']")}
    assert noise_leaves(name) == expected


class OpCounter(si.Listener):
    def __init__(self):
        self.ops = 0

    def after_op(self, step, operands, results, stack):
        self.ops += 1


@pytest.mark.parametrize("name", program_params())
def test_on_the_interp_device(name):
    zoo_program = program(name)
    counter = OpCounter()
    interp_device.listeners.append(counter)
    try:
        actual = jax.jit(zoo_program.function)(*jax.device_put(zoo_program.args, DEV))
        jax.block_until_ready(actual)
    finally:
        interp_device.listeners.remove(counter)
    assert all(leaf.devices() == {DEV} for leaf in jax.tree.leaves(actual))
    assert counter.ops > 100, "the interpreter did not run the program"
    assert_agrees_with_oracle(name, actual)


GUARDED_RUN = """
import sys
sys.path.insert(0, {tests!r})
import jax
from zoo import PROGRAMS
program = PROGRAMS[{name!r}]()   # its initializers run on the default device, the interpreter
jax.block_until_ready(jax.jit(program.function)(*program.args))
print("finite")
"""


@pytest.mark.parametrize("name", program_params())
def test_the_nan_guard_is_silent_on_the_program_and_its_initializers(name):
    """The documented recipe, ``JAX_PLATFORMS=interp STABLEHLO_INTERP_NONFINITE=1 python
    train.py``, on each program from its model's initializers (Flax's truncated normal makes
    a NaN that no result holds: the guard stopped ``model.init``) to its step: no report
    where every result is finite."""
    script = GUARDED_RUN.format(tests=str(pathlib.Path(__file__).parent), name=name)
    env = {**os.environ, "JAX_PLATFORMS": "interp", "STABLEHLO_INTERP_NONFINITE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and done.stdout.splitlines() == ["finite"], done.stderr[-3000:]


@pytest.mark.parametrize("name", program_params())
def test_through_si_run(name):
    zoo_program = program(name)
    counter = OpCounter()
    actual = si.run(jax.jit(zoo_program.function), *zoo_program.args, listeners=[counter])
    assert counter.ops > 100
    assert_agrees_with_oracle(name, actual)


@pytest.mark.slow
def test_a_failing_equinox_check_stops_the_run_with_its_message():
    """Equinox's runtime checks are host callbacks (a ``pure_callback`` that raises, under a
    ``cond``), lowered for the CPU as JAX lowers by default: the interpreter calls them as XLA
    CPU does. At a frequency of 300 the solve runs out of steps; both stop with Equinox's
    message, and the interpreter's error names the check's op and its line in Equinox."""
    name = "equinox_diffrax_saved_steps"
    params, y0, _ = program(name).args
    step = jax.jit(program(name).function)
    args = (params, y0, np.array(300.0, np.float32))
    message = r"The maximum number of solver steps was reached"
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=message):   # ValueError: fast dispatch
        jax.block_until_ready(step(*jax.device_put(args, CPU)))
    with pytest.raises(si.OpExecutionError, match=r"custom_call at .*equinox/_errors\.py:\d+ .*pure_callback.*: "
                                                  r"the host callback #\d+ raised \w*EquinoxRuntimeError: " + message):
        si.run(step, *args)


def test_the_bound_catches_an_op_wrong_by_84_ulp():
    """The rounding bound has teeth: LayerNorm's rsqrt wrong by 1e-5 relative (84 ulp) in the
    language model fails the comparison."""
    ops.load_all()
    rsqrt = registry.op_builder("stablehlo.rsqrt")

    def rsqrt_off(info):
        right = rsqrt(info)
        return lambda operand: (right(operand) * np.float32(1 + 1e-5)).astype(operand.dtype)

    name = "flax_nnx_transformer_lm"
    zoo_program = program(name)
    with registry.replaced({"stablehlo.rsqrt": rsqrt_off}):
        wrong = si.run(jax.jit(zoo_program.function), *zoo_program.args)
    with pytest.raises(AssertionError, match="beyond the rounding bound"):
        assert_agrees_with_oracle(name, wrong)


@functools.cache
def _ops_run(name: str) -> int:
    """How many ops si.run runs for the program."""
    zoo_program = program(name)
    counter = OpCounter()
    si.run(jax.jit(zoo_program.function), *zoo_program.args, listeners=[counter])
    return counter.ops


def _as_results(name: str, flat: list):
    """A module's flat results in the program's output pytree (the oracle's)."""
    return jax.tree.unflatten(jax.tree.structure(oracle(name)[0]), flat)


def _check_run_record(name: str, trace) -> None:
    """A tool's record of the run is the whole run: every op si.run runs, and its results."""
    assert len(trace) == _ops_run(name)
    assert_agrees_with_oracle(name, _as_results(name, trace.outputs))


@pytest.mark.parametrize("name", program_params("trace"))
def test_trace(name):
    zoo_program = program(name)
    trace = si.trace(jax.jit(zoo_program.function), *zoo_program.args)
    _check_run_record(name, trace)
    dots = trace.find("stablehlo.dot_general")
    assert dots and all(record.location is not None for record in dots)


@pytest.mark.parametrize("name", program_params("find_nonfinite"))
def test_find_nonfinite(name):
    """Every result is finite (the oracle says so): there is no NaN or inf for a user to chase."""
    zoo_program = program(name)
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(oracle(name)[0])
               if np.issubdtype(leaf.dtype, np.floating))
    report = si.find_nonfinite(jax.jit(zoo_program.function), *zoo_program.args)
    assert report is None, str(report)


@pytest.mark.parametrize("name", program_params("compare"))
def test_compare_with_cpu(name):
    """The interpreter agrees with XLA within rounding (test_on_the_interp_device): compare says
    so, every result equal or rounding noise, and no op named as divergent. (compare lowers the
    function for each side itself: host callbacks run on both.)"""
    zoo_program = program(name)
    comparison = si.compare(jax.jit(zoo_program.function), *zoo_program.args, backend="cpu")
    assert comparison.noise_only and comparison.divergence is None, str(comparison)
    assert str(comparison).startswith("the interpreter and cpu agree") or "differs (rounding noise" in str(comparison)


@pytest.mark.parametrize("name", program_params("explain"))
def test_explain(name):
    zoo_program = program(name)
    explanation = si.explain(jax.jit(zoo_program.function), *zoo_program.args, file=io.StringIO())
    _check_run_record(name, explanation.trace)
    text = str(explanation)
    assert "== jaxpr ==" in text and "== StableHLO ==" in text and "stablehlo.dot_general" in text
    # the ops stand under the Python lines they came from (the model's library, or the zoo's own code)
    assert re.search(r"^── \w+\.py:\d+ ", text[text.index("== run"):], re.MULTILINE)


@pytest.mark.parametrize("name", program_params("explore"))
def test_explore(name, tmp_path):
    zoo_program = program(name)
    exploration = si.explore(jax.jit(zoo_program.function), *zoo_program.args, path=tmp_path / "page.html")
    assert len(exploration.trace) == _ops_run(name)
    page = (tmp_path / "page.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "stablehlo.dot_general" in page
