"""Loops and decisions stepped on the backend (tools/loops.py): where compare's answer was
"unbounded" (a difference inside a while, case or if), the iteration, the op and the decision.

Every expectation is checked by hand or against an oracle: the solvers below are simulated
in NumPy float32 (the interpreter's path, and the backend's with its deliberately different
op), and XLA's own runs give its path where XLA is the backend.
"""

import importlib.util
import pathlib
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.backends import CommandBackend, IreeBackend, JaxBackend, RecordedBackend, RecordingBackend
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.ir.edit import operands_module, region_module
from stablehlo_interp.judge.bounds import BEYOND, UNBOUNDED
from stablehlo_interp.tools import InterpreterBackend

F32 = np.float32


@pytest.fixture(autouse=True)
def float32_programs():
    """The solvers are float32 programs, with 32-bit counters, as users write them."""
    with jax.enable_x64(False):
        yield


def line_of(function, text: str) -> int:
    """The line of ``function``'s source that holds ``text``."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


# ---- a Newton solver: an op wrong from the fourth iteration on -------------------------------

def newton_sqrt(a, x0):
    """Newton's iteration for the square root of ``a``, until a step changes ``x`` by 1e-6 of it."""
    def cond(state):
        x, previous, _ = state
        return jnp.abs(x - previous) > 1e-6 * x

    def body(state):
        x, _, count = state
        return 0.5 * (x + a / x), x, count + 1

    return jax.lax.while_loop(cond, body, (x0, jnp.zeros_like(x0), 0))


def divide_off_below(threshold):
    """A deliberately wrong divide: 1e-3 too large where the divisor is below ``threshold``."""
    def builder(info):
        return lambda a, b: np.where(np.abs(b) < threshold, a / b * F32(1.001), a / b).astype(a.dtype)
    return builder


WRONG_DIVIDE = InterpreterBackend(ops={"stablehlo.divide": divide_off_below(1.5)}, name="divide off below 1.5")


def newton_iterates(a, x0):
    """The interpreter's path, in NumPy float32: x0, x1 ..."""
    iterates = [x0]
    while len(iterates) < 2 or abs(iterates[-1] - iterates[-2]) > F32(1e-6) * iterates[-1]:
        x = iterates[-1]
        iterates.append(F32(F32(0.5) * (x + a / x)))
    return iterates


def test_a_wrong_op_at_a_later_iteration_is_named_with_its_iteration():
    a, x0 = F32(2), F32(10)
    comparison = si.compare(newton_sqrt, a, x0, backend=WRONG_DIVIDE)
    loop = comparison.divergence
    assert loop.op == "stablehlo.while" and loop.kind == UNBOUNDED
    iterates = newton_iterates(a, x0)
    first = next(k for k, x in enumerate(iterates) if x < 1.5)   # 10, 5.1, 2.746, 1.737, 1.444: the fifth
    assert first == 4
    stepping = loop.stepping
    inside = stepping.beyond
    assert (inside.iteration, inside.region) == (first, "body")
    divide = inside.divergence
    assert divide.op == "stablehlo.divide" and divide.kind == BEYOND
    assert divide.location.frame.line == line_of(newton_sqrt, "a / x")
    assert divide.ours == a / iterates[first] and divide.theirs == F32(a / iterates[first] * F32(1.001))
    assert divide.operands_agree and [float(v) for v in divide.operands] == [a, iterates[first]]
    assert stepping.split is None and stepping.iterations is None   # stepped up to that iteration only
    line = line_of(newton_sqrt, "a / x")
    assert stepping.verdict() == (f"beyond noise: stablehlo.divide at test_tools_loops.py:{line} "
                                  "(newton_sqrt.<locals>.body) (iteration 4, body)")
    text = str(comparison)
    assert ("the difference arises inside its regions (cond, body)\n  stepped on divide off below 1.5 iteration "
            "by iteration (its cond and body compiled alone, run from divide off below 1.5's carried state): "
            "beyond noise: stablehlo.divide") in text
    assert "    iteration 4 from divide off below 1.5's carried state, its body op by op:\n" \
           "      first divergent op: stablehlo.divide" in text
    assert "it may be rounding noise or an error" not in text


def test_stepping_replays_from_a_recording(tmp_path):
    """A recording made while stepping holds every program the stepping ran: played back,
    the same answer, with no backend."""
    a, x0 = F32(2), F32(10)
    recorded = si.compare(newton_sqrt, a, x0, backend=RecordingBackend(WRONG_DIVIDE, tmp_path, command="the test"))
    played = si.compare(newton_sqrt, a, x0, backend=RecordedBackend(tmp_path))
    assert played.divergence.stepping.describe("b") == recorded.divergence.stepping.describe("b")
    assert played.divergence.stepping.beyond.iteration == 4
    assert len(list(tmp_path.glob("*.mlir"))) >= 12   # the program, its prefixes, cond and body, the body's prefix


# ---- a bisection solver whose exit test is computed wrong --------------------------------------

def bisect(lo, hi):
    """Bisection for the root of x³ - 2x - 5 in [lo, hi], until |f(mid)| <= 1e-4 (60 steps at most)."""
    def f(x):
        return x * x * x - 2 * x - 5

    def cond(state):
        lo, hi, count = state
        return (jnp.abs(f((lo + hi) / 2)) > 1e-4) & (count < 60)

    def body(state):
        lo, hi, count = state
        mid = (lo + hi) / 2
        right = jnp.sign(f(mid)) == jnp.sign(f(lo))
        return jnp.where(right, mid, lo), jnp.where(right, hi, mid), count + 1

    return jax.lax.while_loop(cond, body, (lo, hi, 0))


def test_a_wrong_exit_test_is_found_in_the_cond():
    """An ``abs`` that flushes values below 0.05 to zero ends the backend's bisection early:
    the exit test decides otherwise from the same state, and its ops name the abs."""
    flushing = InterpreterBackend(ops={"stablehlo.abs": lambda info: lambda v: np.where(
        np.abs(v) < 0.05, np.zeros_like(v), np.abs(v))}, name="abs flushed below 0.05")
    comparison = si.compare(bisect, F32(2), F32(3), backend=flushing)

    def f(x):
        return F32(F32(F32(x * x) * x - F32(2) * x) - F32(5))

    lo, hi, mids = F32(2), F32(3), []
    while abs(f(F32((lo + hi) / F32(2)))) > F32(1e-4) and len(mids) < 60:   # the interpreter's path
        mid = F32((lo + hi) / F32(2))
        mids.append(mid)
        lo, hi = (mid, hi) if np.sign(f(mid)) == np.sign(f(lo)) else (lo, mid)
    mids.append(F32((lo + hi) / F32(2)))
    first = next(k for k, mid in enumerate(mids) if abs(f(mid)) < 0.05)
    assert (first, len(mids) - 1) == (4, 13)
    assert comparison.outputs[2].ours == 13 and comparison.outputs[2].theirs == first
    inside = comparison.divergence.stepping.beyond
    assert (inside.iteration, inside.region, inside.divergence.op) == (first, "cond", "stablehlo.abs")
    assert inside.divergence.location.frame.line == line_of(bisect, "jnp.abs(f(")
    assert inside.divergence.ours == abs(f(mids[first])) and inside.divergence.theirs == 0


# ---- an optimizer with a line search: the cause inside the inner loop --------------------------

def objective(x):
    return jnp.sum(jnp.exp(x) - 2.0 * x)


def descend(x0):
    """Three steps of gradient descent, each with a backtracking (Armijo) line search; returns
    the point, the steps and the objective's evaluations in the line searches."""
    def line_search(x, f, g):
        slope = jnp.dot(g, g)

        def cond(state):
            t, f_t, _ = state
            return f_t > f - 0.5 * t * slope

        def body(state):
            t, _, evaluations = state
            return t / 2, objective(x - t / 2 * g), evaluations + 1

        t, _, evaluations = jax.lax.while_loop(cond, body, (jnp.float32(1), objective(x - g), 1))
        return t, evaluations

    def cond(state):
        x, steps, _ = state
        return (jnp.linalg.norm(jax.grad(objective)(x)) > 1e-4) & (steps < 3)

    def body(state):
        x, steps, evaluations = state
        f, g = jax.value_and_grad(objective)(x)
        t, n = line_search(x, f, g)
        return x - t * g, steps + 1, evaluations + n

    return jax.lax.while_loop(cond, body, (x0, 0, 0))


def test_nested_loops_are_stepped_into_the_inner_one():
    """An exp 100 times too large on (1.8, 2) only. From (3, -1) the first line search tries
    t = 1, 1/2, 1/4, 1/8 and accepts 1/16, whose point (1.870, -0.898) is the first argument
    of an exp in that range: the outer loop's iteration 0, the line search's iteration 3."""
    wrong = InterpreterBackend(ops={"stablehlo.exponential": lambda info: lambda v: np.where(
        (v > 1.8) & (v < 2.0), np.exp(v) * F32(100), np.exp(v)).astype(v.dtype)}, name="exp off on (1.8, 2)")
    x0 = np.array([3, -1], F32)
    g = np.exp(x0) - F32(2)
    f0 = np.sum(np.exp(x0) - F32(2) * x0)
    trials = [x0 - F32(0.5) ** k * g for k in range(5)]
    armijo = [np.sum(np.exp(x) - F32(2) * x) <= f0 - F32(0.5) * F32(0.5) ** k * g @ g for k, x in enumerate(trials)]
    assert armijo == [False, False, False, False, True]
    in_range = [bool(((x > 1.8) & (x < 2.0)).any()) for x in [x0, *trials]]
    assert in_range == [False] * 5 + [True]
    comparison = si.compare(descend, x0, backend=wrong)
    outer = comparison.divergence.stepping
    inside = outer.beyond
    assert (inside.iteration, inside.region) == (0, "body")
    inner_loop = inside.divergence
    assert inner_loop.op == "stablehlo.while" and inner_loop.kind == UNBOUNDED
    assert inner_loop.location.frame.line == line_of(descend, "t, _, evaluations = jax.lax.while_loop")
    assert (inner_loop.ours, inner_loop.theirs) == (F32(1 / 16), F32(1 / 32))   # the step each accepts
    inner = inner_loop.stepping.beyond
    assert (inner.iteration, inner.region) == (3, "body")
    exp = inner.divergence
    assert exp.op == "stablehlo.exponential" and exp.location.frame.line == line_of(objective, "jnp.exp(x)")
    np.testing.assert_array_equal(exp.operands[0], trials[4])
    assert exp.theirs[0] == F32(np.exp(trials[4][0]) * F32(100)) and exp.theirs[1] == np.exp(trials[4][1])
    line = line_of(objective, "jnp.exp(x)")
    assert outer.verdict() == ("iteration 0, body: inside stablehlo.while: beyond noise: stablehlo.exponential at "
                               f"test_tools_loops.py:{line} (objective) (iteration 3, body)")


# ---- a chaotic map: the paths split on rounding noise -----------------------------------------

def until_near_half(step, limit: int):
    """``x -> step(x)`` from x until x comes within 1e-3 of 1/2 (``limit`` steps at most):
    the final x and the steps taken."""
    def iterate(x):
        def cond(state):
            x, count = state
            return (jnp.abs(x - 0.5) > 1e-3) & (count < limit)

        def body(state):
            x, count = state
            return step(x), count + 1

        return jax.lax.while_loop(cond, body, (x, 0))

    return iterate


logistic_until = until_near_half(lambda x: 3.9 * x * (1 - x), 500)   # the logistic map at r = 3.9


def logistic_path(x, rounded_up: bool, moved=None):
    """The map's path in float32, each product rounded up one ULP for ``rounded_up``;
    ``moved``: a random generator that moves each product by up to 4 ULP (noise)."""
    def product(a, b):
        value = F32(a * b)
        if rounded_up:
            value = np.nextafter(value, F32(np.inf))
        if moved is not None:
            value = F32(value + moved.uniform(-4, 4) * np.spacing(value))
        return value

    path = [F32(x)]
    while abs(path[-1] - F32(0.5)) > F32(1e-3) and len(path) <= 500:
        path.append(product(product(F32(3.9), path[-1]), F32(1) - path[-1]))
    return path


def test_a_chaotic_map_splits_on_rounding_noise():
    """Every product rounded up one ULP (within any op's bound): from 0.556 the interpreter's
    path meets the window at step 39, the backend's at 55; every iteration of the backend
    is within noise of the interpreter's from the same state, the paths' states differ from
    the first step, and the first decision that differs is the exit test at step 39."""
    rounded_up = InterpreterBackend(ops={"stablehlo.multiply": lambda info: lambda a, b: np.nextafter(
        a * b, np.asarray(np.inf, a.dtype))}, name="multiply rounded up")
    x0 = F32(0.556)
    ours, theirs = logistic_path(x0, False), logistic_path(x0, True)
    assert (len(ours) - 1, len(theirs) - 1) == (39, 55)
    comparison = si.compare(logistic_until, x0, backend=rounded_up)
    assert comparison.divergence.kind == UNBOUNDED
    stepping = comparison.divergence.stepping
    assert stepping.beyond is None and stepping.iterations == (39, 55) and stepping.whole == 0
    drift = next(k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b)
    assert stepping.drift == (drift, int(ulp_difference(ours[drift], theirs[drift])))
    split = stepping.split
    assert (split.iteration, split.role, split.op) == (39, "the loop's exit test", "stablehlo.compare")
    assert split.location.frame.line == line_of(logistic_until, "jnp.abs(x - 0.5)")
    assert split.taken == (False, True) and split.backend_values
    distance, threshold = split.operands
    assert (distance.interpreter, distance.backend) == (abs(ours[39] - F32(0.5)), abs(theirs[39] - F32(0.5)))
    assert distance.ulp == int(ulp_difference(distance.backend, distance.interpreter))
    assert (threshold.interpreter, threshold.backend, threshold.ulp) == (F32(1e-3), F32(1e-3), 0)
    # noise alone takes such paths: products moved by up to 4 ULP end anywhere by step 39
    noisy = [logistic_path(x0, False, np.random.default_rng(seed)) for seed in range(8)]
    assert any(len(path) - 1 != 39 or abs(path[39] - ours[39]) > abs(theirs[39] - ours[39]) for path in noisy)
    assert split.within_noise
    assert stepping.verdict() == "the paths split at iteration 39 on a difference within rounding noise"
    text = stepping.describe("b")
    assert "  every iteration b ran is within rounding noise of the interpreter's from the same state\n" in text
    assert "  the first decision that went the other way, at iteration 39:\n    the loop's exit test: " \
           "stablehlo.compare at test_tools_loops.py:" in text


# ---- a decision flipped inside one iteration ---------------------------------------------------

def count_below(x):
    """Three times, how many of ``x`` * 1.5 are below 1."""
    def body(i, state):
        x, count = state
        return x, count + jnp.sum(x * 1.5 < 1.0)

    return jax.lax.fori_loop(0, 3, body, (x, 0))


def test_a_decision_flipped_within_an_iteration_is_named():
    """x * 1.5 is 0.99999994 here and one ULP up, 1.0, where products round up: each of the
    8 compares goes the other way in the first iteration already (24 counted against 0).
    Every op of that iteration is within its bound on the backend's operands; the state is
    not (no noise run flips all 8), and the decision named is the compare, its operands one
    ULP apart."""
    rounded_up = InterpreterBackend(ops={"stablehlo.multiply": lambda info: lambda a, b: np.nextafter(
        a * b, np.asarray(np.inf, a.dtype))}, name="multiply rounded up")
    x0 = np.full(8, F32(0.99999994) / F32(1.5), F32)
    product = F32(x0[0] * F32(1.5))
    assert (product, np.nextafter(product, F32(2))) == (F32(0.99999994), F32(1))
    comparison = si.compare(count_below, x0, backend=rounded_up)
    assert (comparison.outputs[1].ours, comparison.outputs[1].theirs) == (24, 0)
    inside = comparison.divergence.stepping.beyond
    assert (inside.iteration, inside.region, inside.divergence) == (0, "body", None)
    decision = inside.decision
    assert (decision.op, decision.role, decision.element, decision.taken) == (
        "stablehlo.compare", "a compare", (0,), (True, False))
    assert decision.location.frame.line == line_of(count_below, "x * 1.5 < 1.0")
    product_distance, one = decision.operands
    assert (product_distance.interpreter, product_distance.backend, product_distance.ulp) == (
        F32(0.99999994), F32(1), 1)
    assert (one.interpreter, one.backend, one.ulp) == (F32(1), F32(1), 0)
    assert decision.backend_values and decision.within_noise
    assert comparison.divergence.stepping.verdict() == (
        "the paths split at iteration 0, body on a difference within rounding noise")
    assert "operand #0: 0.99999994 (interpreter) vs 1.0 (multiply rounded up): 1 ULP apart" in str(comparison)


# ---- a branch -------------------------------------------------------------------------------

def piecewise(k, x):
    return jax.lax.switch(k, [lambda v: v * 2, lambda v: jnp.sin(v) + v, lambda v: jnp.cos(v)], x)


def test_a_case_runs_its_chosen_branch_alone():
    wrong = InterpreterBackend(ops={"stablehlo.sine": lambda info: lambda v: (np.sin(v) * F32(1.01)).astype(
        v.dtype)}, name="sine off")
    x = np.array([0.5, 1.5], F32)
    comparison = si.compare(piecewise, np.int32(1), x, backend=wrong)
    assert comparison.divergence.op == "stablehlo.case" and comparison.divergence.kind == UNBOUNDED
    stepping = comparison.divergence.stepping
    branch = stepping.beyond
    assert (branch.iteration, branch.region, branch.divergence.op) == (None, "branch 1", "stablehlo.sine")
    np.testing.assert_array_equal(branch.divergence.operands[0], x)
    np.testing.assert_array_equal(branch.divergence.theirs, (np.sin(x) * F32(1.01)).astype(F32))
    assert stepping.verdict().startswith("beyond noise: stablehlo.sine at test_tools_loops.py:")
    assert stepping.verdict().endswith("(branch 1)")
    # branch 2 takes no sine: the same program agrees there
    assert si.compare(piecewise, np.int32(2), x, backend=wrong).ok


def test_a_loop_that_calls_back_to_python_is_not_stepped_and_says_why():
    """A host callback in the body: its region, a module of its own, could not call it."""
    def logged(x):
        def body(i, a):
            jax.debug.print("a = {a}", a=a)
            return jnp.cos(a) + i
        return jax.lax.fori_loop(0, 3, body, x)

    wrong = InterpreterBackend(ops={"stablehlo.cosine": lambda info: lambda a: (np.cos(a) * F32(2)).astype(a.dtype)})
    loop = si.compare(logged, F32(0.5), backend=wrong).divergence
    assert loop.kind == UNBOUNDED and loop.stepping.iterations is None and loop.stepping.beyond is None
    assert loop.stepping.describe("b") == ("not stepped on b: its regions call host callbacks, which the backend's "
                                           "copy of them cannot call alone")


# ---- the regions as programs of their own (ir/edit.py) ----------------------------------------

CAPTURING_LOOP = """
func.func @main(%a: tensor<f32>, %n: tensor<i32>) -> tensor<f32> {
  %c = stablehlo.constant dense<2.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %n, %x = %a) : tensor<i32>, tensor<f32>
   cond {
    %z = stablehlo.constant dense<0> : tensor<i32>
    %p = stablehlo.compare GT, %i, %z : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.subtract %i, %one : tensor<i32>
    %y = stablehlo.multiply %x, %c : tensor<f32>
    %w = stablehlo.add %y, %a : tensor<f32>
    stablehlo.return %j, %w : tensor<i32>, tensor<f32>
  }
  return %r#1 : tensor<f32>
}
"""


def test_a_region_becomes_a_module_taking_its_captures_first():
    body, captured = region_module(CAPTURING_LOOP, "main", 1, 1)
    assert captured == [(0, 0), (None, 0)]        # the constant 2 (op 0's result), then the argument %a
    arguments = [F32(2), F32(3), np.int32(5), F32(7)]
    want = [np.int32(4), F32(7 * 2 + 3)]           # one iteration: i - 1, x * c + a
    for backend in (si.run, lambda text, *values: JaxBackend("cpu")(text, values)):
        assert [v.item() for v in backend(body, *arguments)] == [v.item() for v in want]
    cond, captured = region_module(CAPTURING_LOOP, "main", 1, 0)
    assert captured == [] and si.run(cond, np.int32(0), F32(1))[0].item() is False
    assert [v.item() for v in si.run(operands_module(CAPTURING_LOOP, "main", 1), F32(3), np.int32(5))] == [5, 3]


# ---- real backends --------------------------------------------------------------------------

def exp_map_step(x):
    """x -> 7.41 x exp(-x²)."""
    return 3.9 * x * jnp.exp(-x * x) * 1.9


exp_map = until_near_half(exp_map_step, 1000)


def check_exp_map_split(comparison, theirs_final, theirs_count, step_theirs):
    """From 0.09 the interpreter (its exp correctly rounded) meets the window at step 80;
    XLA's exp, a few ULP off at times, sends the backend's path elsewhere (217 steps). The
    exit test at step 80 decides otherwise; every iteration is within noise."""
    x0 = F32(0.09)
    ours_final, ours_count = si.run(exp_map, x0)
    assert (int(ours_count), int(theirs_count)) == (80, 217)
    stepping = comparison.divergence.stepping
    assert stepping.beyond is None and stepping.iterations == (80, 217) and stepping.whole == 0
    split = stepping.split
    assert (split.iteration, split.role, split.taken) == (80, "the loop's exit test", (False, True))
    theirs = x0
    for _ in range(80):
        theirs = step_theirs(theirs)
    distance = split.operands[0]
    assert (distance.interpreter, distance.backend) == (abs(ours_final - F32(0.5)), abs(theirs - F32(0.5)))
    assert split.within_noise
    assert stepping.verdict() == "the paths split at iteration 80 on a difference within rounding noise"


def test_xla_cpu_exp_sends_a_chaotic_map_elsewhere():
    x0 = F32(0.09)
    theirs_final, theirs_count = jax.jit(exp_map)(x0)
    step = jax.jit(exp_map_step)
    comparison = si.compare(exp_map, x0, backend="cpu")
    check_exp_map_split(comparison, theirs_final, theirs_count, lambda x: np.asarray(step(x)))


needs_iree = pytest.mark.skipif(importlib.util.find_spec("iree") is None
                                or importlib.util.find_spec("iree.runtime") is None,
                                reason="IREE is not installed (pip install 'stablehlo-interp[iree]')")


@needs_iree
@pytest.mark.slow   # IREE compiles each program the stepping runs once: about 15 s
def test_iree_steps_the_same_loop():
    x0 = F32(0.09)
    iree = IreeBackend()
    theirs_final, theirs_count = iree(jax.jit(exp_map).lower(x0).as_text(), [x0])
    step = jax.jit(exp_map_step).lower(x0).as_text()
    comparison = si.compare(exp_map, x0, backend=iree)
    check_exp_map_split(comparison, theirs_final, theirs_count, lambda x: iree(step, [x])[0])


@pytest.mark.slow   # every program a child process of its own: about a minute
def test_a_command_backend_is_stepped(tmp_path):
    """The wrong divide of the Newton test in a command (a child process per program)."""
    tool = tmp_path / "wrong_divide.py"
    tool.write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent.parent)!r})
        import numpy as np
        from stablehlo_interp.tools import InterpreterBackend

        def builder(info):
            return lambda a, b: np.where(np.abs(b) < 1.5, a / b * np.float32(1.001), a / b).astype(a.dtype)

        mlir, outputs, *inputs = sys.argv[1:]
        backend = InterpreterBackend(ops={{"stablehlo.divide": builder}})
        results = backend(open(mlir).read(), [np.load(path) for path in inputs])
        for index, value in enumerate(results):
            np.save(f"{{outputs}}/result_{{index}}.npy", np.asarray(value))
        """))
    command = CommandBackend([sys.executable, str(tool), "{mlir}", "{outputs}", "{inputs}"], name="wrong divide")
    comparison = si.compare(newton_sqrt, F32(2), F32(10), backend=command)
    inside = comparison.divergence.stepping.beyond
    assert (inside.iteration, inside.region, inside.divergence.op) == (4, "body", "stablehlo.divide")


@pytest.mark.slow   # the interpreter's path and XLA's, 70 and 71 BFGS steps, stepped: about 15 s
def test_a_line_search_minimizer_from_optimistix():
    """optimistix's BFGS (a backtracking Armijo line search) on the 4-D Rosenbrock function:
    XLA CPU takes one step more than the interpreter. Every step XLA takes is within noise
    of the interpreter's from the same state; the paths split at the line search's Armijo
    test, on rounding noise."""
    optx = pytest.importorskip("optimistix")

    def rosenbrock(x, args):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def solve(x0):
        solution = optx.minimise(rosenbrock, optx.BFGS(rtol=1e-6, atol=1e-6), x0, max_steps=200, throw=False)
        return solution.value, solution.stats["num_steps"]

    x0 = np.array([-1.2, 1.0, -0.5, 0.8], F32)
    ours, theirs = si.run(solve, x0)[1], jax.jit(solve)(x0)[1]
    assert ours != theirs
    comparison = si.compare(solve, x0, backend="cpu")
    stepping = comparison.divergence.stepping
    assert stepping.beyond is None and stepping.whole == 0
    assert stepping.iterations == (int(ours), int(theirs))
    split = stepping.split
    assert split.iteration < min(stepping.iterations) and split.within_noise
    assert split.op == "stablehlo.compare" and split.role.startswith("the compare behind a select")
    assert split.location.frame.file.endswith("backtracking.py")
    assert "satisfies_armijo" in split.describe("cpu")[1]
