"""Rounding noise or a real difference: how far another backend's value of one op may
be from the interpreter's (tools/compare.py).

The judgement is local to the op. compare has, for each op of the entry function,
the backend's value ``theirs`` and the backend's values of its operands; the
interpreter re-runs the op on *those* operands (``recomputed``). Whatever the
operands already carried, rounding noise of earlier ops or an earlier error, is
thus not held against the op: every earlier difference is propagated exactly,
where a first-order propagation of bounds would only estimate it. What remains,
``|theirs - recomputed|``, is what the op computed differently, and its bound is
(a ULP is the spacing of the type's numbers there, subnormals included: a
subnormal flushed to zero is no rounding):

* **sums** (``dot_general``, ``dot``, ``convolution``; ``reduce``,
  ``reduce_window`` and ``scatter`` whose body is one ``add``): any order of
  summing n terms is within γ(n)·Σ|terms| of the exact sum, γ(n) = n·u/(1 - n·u),
  u the unit roundoff of the element type (Higham, *Accuracy and Stability of
  Numerical Algorithms*, 2nd ed., §3.1, and §2.6 for a fused multiply-add,
  which only removes roundings). Two orders, the backend's and ours, are at
  most twice that apart; two more units cover operands the backend consumed
  before rounding them (excess precision). The bound per element is
  ``(2n + 2)·u·Σ|terms|``, where Σ|terms| is the op run on the absolute values of
  its float operands and n the op run on ones (the number of terms each element
  sums).
* **every other op with a float result**: :data:`ELEMENTWISE_ULP` ULP of the
  result (its own rounding, and XLA's approximations of ``tanh``, ``expm1``,
  ``logistic`` ..., measured within 4 ULP: tests/test_elementwise.py; those
  measured farther off: :data:`APPROXIMATION_ULP`), plus for
  each float operand the largest change of the result when that operand moves
  one ULP up or down (the operand consumed unrounded: excess precision, a fused
  multiply-add). A result equal to the op's value on such a moved operand is
  within the bound too: so for integer and boolean results (a comparison of a
  value held unrounded); otherwise those must be equal.
* **ops that run their regions as control flow** (``while``, ``case``, ``if``,
  calls that were not inlined, custom calls with called computations): the
  backend shows no value inside their regions, so nothing there is bounded op by
  op. The noise is *estimated* instead: the op runs :data:`NOISE_RUNS` more times
  on the backend's operands with every float result inside its regions moved by
  a random amount within that op's own bound (the rounding of a sum, or
  :data:`ELEMENTWISE_ULP` ULP), and the backend's value is noise when it is
  within :data:`NOISE_SPREAD` times the farthest those runs went (or equal to one
  of them, for integers: a loop that took another number of steps). Beyond
  that, the difference is **unbounded**: not shown to be noise, and not proven
  an error either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..engine.regions import monoid_of
from ..engine.run import Execution, Listener, RunContext
from ..ir.types import Token
from .precision import DeclaredPrecision
from .difference import Difference, differing, is_numeric, mismatched_types, same_values, widened_pair
from .summary import element_name

AGREE, NOISE, BEYOND, UNBOUNDED = "agree", "rounding noise", "beyond its bound", "unbounded"
# Beyond the spec's rounding but within what the backend declares of its arithmetic (judge/precision.py).
PRECISION = "within the backend's declared precision"
ELEMENTWISE_ULP = 4
# ops whose approximation on XLA CPU is measured farther off (tests/test_elementwise.py, XLA_ULP)
APPROXIMATION_ULP = {("stablehlo.log_plus_one", "f64"): 128}
NOISE_RUNS = 3          # runs of a loop or conditional with its ops' results moved within their bounds
NOISE_SPREAD = 4        # the backend's value is noise within this many times their farthest
ESTIMATED = "estimated"
SUMS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
SUMS_WITH_AN_ADD_BODY = frozenset({"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter"})
# Ops whose regions are applied element by element or as a comparator: re-run like any other op.
DATA_PARALLEL_REGIONS = frozenset({"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter",
                                   "stablehlo.select_and_scatter", "stablehlo.sort", "stablehlo.map"})
# Ops across devices whose values are moved or named, never computed (spec: all_gather ... partition_id).
EXACT_ACROSS_DEVICES = frozenset({"stablehlo.all_gather", "stablehlo.all_to_all", "stablehlo.collective_permute",
                                  "stablehlo.collective_broadcast", "stablehlo.replica_id", "stablehlo.partition_id"})


@dataclass
class Verdict:
    """What one op's values on the backend are: ``kind`` is AGREE, NOISE, BEYOND or UNBOUNDED.

    ``rule`` names the bound applied; ``result`` is the result the verdict is about
    (the first beyond its bound); ``difference`` describes its elements beyond the
    bound (BEYOND, UNBOUNDED)."""

    kind: str
    rule: str = ""
    result: int = 0
    difference: Difference | None = None


def classify(execution, step, operands, recomputed, theirs, env, precision: DeclaredPrecision | None = None) -> Verdict:
    """The verdict on ``theirs``, the backend's results of ``step``, against
    ``recomputed``, the interpreter's results of the op on the backend's
    ``operands``. ``env`` holds the values the op's regions capture (by slot).
    ``precision``: the backend's declared precision; a value beyond the spec's bound
    but within it is PRECISION, one beyond both keeps its kind, named so."""
    verdict = _classify(execution, step, operands, recomputed, theirs, env, None)
    if precision is None or verdict.kind not in (BEYOND, UNBOUNDED):
        return verdict
    declared = _classify(execution, step, operands, recomputed, theirs, env, precision)
    if declared.kind in (AGREE, NOISE):
        return Verdict(PRECISION, declared.rule, verdict.result)
    return dataclasses.replace(declared, rule=f"beyond the backend's declared precision: {declared.rule}")


def _classify(execution, step, operands, recomputed, theirs, env, precision) -> Verdict:
    def allowance():
        if step.regions and step.name not in DATA_PARALLEL_REGIONS:
            return _estimated_allowance(execution, step, operands, recomputed, env, precision)
        return _allowance(execution, step, operands, recomputed, env, precision)

    return _judged(recomputed, theirs, allowance)


def _judged(recomputed, theirs, allowance_of, unbounded: bool = False) -> Verdict:
    """The verdict on ``theirs`` against ``recomputed`` under the allowance
    ``allowance_of()`` gives (``(rule, allowance)``, asked for only where they differ):
    beyond it, UNBOUNDED where the rule is estimated (or ``unbounded``), else BEYOND."""
    pairs = [(index, np.asarray(ours), np.asarray(other)) for index, (ours, other) in enumerate(zip(recomputed, theirs))
             if not isinstance(ours, (tuple, Token)) and other is not None]
    for index, ours, other in pairs:
        problem = mismatched_types(ours, other)
        if problem:
            return Verdict(BEYOND, "a value of another type", index, problem)
    differing_results = [(index, ours, other) for index, ours, other in pairs if not _identical(ours, other)]
    if not differing_results:
        return Verdict(AGREE)
    rule, allowance = allowance_of()
    for index, ours, other in differing_results:
        bound, alternatives = allowance(index)
        beyond = differing(ours, other, within(ours, other, bound, alternatives), bound)
        if beyond is not None:
            return Verdict(UNBOUNDED if unbounded or rule.startswith(ESTIMATED) else BEYOND, rule, index, beyond)
    return Verdict(NOISE, rule, differing_results[0][0])


def classify_across_devices(step, recomputed, theirs, group_operands: list | None) -> Verdict:
    """The verdict on ``theirs``, one device's backend results of ``step``, an op that
    involves other devices (a collective, a process id, or an op whose regions hold
    one), against ``recomputed``, the interpreter's results of it with every device
    given its backend operands (tools/compare.py, per device). ``group_operands``: for
    an ``all_reduce`` whose body is one ``add``, the operands of the devices of this
    device's group, in group order (else None). Such a sum of n terms is bounded as a
    sum is, ``(2n+2)·u·Σ|terms|``; the other collectives and the process ids move or
    name values exactly; an op that holds collectives in its regions, or combines
    otherwise, is not bounded op by op here (UNBOUNDED)."""
    if group_operands is not None and step.name == "stablehlo.all_reduce" \
            and monoid_of(step.regions[0]) == "stablehlo.add":
        def sum_bound(index):
            result = np.asarray(recomputed[index])
            if not _is_float(result):
                return None, ()
            terms = [np.abs(np.asarray(operands[index]).astype(np.complex128)) for operands in group_operands]
            return (2 * len(terms) + 2) * unit_roundoff(result.dtype) * sum(terms), ()

        return _judged(recomputed, theirs, lambda: ("a sum across n devices: (2n+2)·u·Σ|terms|", sum_bound))
    if step.name in EXACT_ACROSS_DEVICES:
        return _judged(recomputed, theirs, lambda: ("values moved between devices, or a process id: exact",
                                                    lambda index: (None, ())))
    return _judged(recomputed, theirs, lambda: ("across devices, not bounded op by op", lambda index: (None, ())),
                   unbounded=True)


def within(ours: np.ndarray, other: np.ndarray, bound, alternatives) -> np.ndarray:
    """Per element: ``other`` equals ``ours`` or one of ``alternatives``, or is within
    ``bound`` (an abs error per element; None for integers) of ``ours``."""
    ok = _equal(ours, other)
    for alternative in alternatives:
        ok |= _equal(np.asarray(alternative), other)
    if bound is not None:
        a, b = widened_pair(ours, other)
        with np.errstate(all="ignore"):
            ok |= np.abs(a - b) <= bound
    return ok


def noise_runs(run, semantics: str, reference, precision: DeclaredPrecision | None = None) -> list:
    """The results of :data:`NOISE_RUNS` calls of ``run(listener)``, each with a listener
    that moves every float result of every op it sees by a random amount within that
    op's own bound; a run that fails is left out, and so is one that diverged from
    ``reference`` (the results unmoved, nested as a run's): a result with finite
    elements that has none left. Such a run left the program's path (Diffrax's solve with
    moved step times gave an infinite loss and gradients of 1e-43), and counting it made
    any value noise: a per-device gradient 10% off passed the check. A few elements made
    infinite (an Adam update of a row with no gradient: its zero moment moved below zero
    under a square root) only get no allowance themselves (:func:`spread_allowance`).
    With a backend's declared ``precision``, each op moves within that instead."""
    runs = []
    for seed in range(NOISE_RUNS):
        try:
            moved = run(_Jitter(np.random.default_rng(seed), semantics, precision))
        except Exception:  # noqa: BLE001 - a check that fires on moved values: no allowance from this run
            continue
        if not _diverged(moved, reference):
            runs.append(moved)
    return runs


def _diverged(moved, reference) -> bool:
    """Whether a float result of ``moved`` has no finite element where ``reference`` has
    some (nested alike)."""
    if isinstance(reference, (list, tuple)):
        return any(_diverged(m, r) for m, r in zip(moved, reference))
    reference, moved = np.asarray(reference), np.asarray(moved)
    if not _is_float(reference) or moved.shape != reference.shape:
        return False
    finite = np.isfinite(reference)
    return bool(finite.any() and not np.isfinite(moved[finite]).any())


def spread_allowance(result, runs: list):
    """``(bound, alternatives)`` for a value whose noise ``runs`` estimate (the same
    value computed with every op moved within its bound): :data:`NOISE_SPREAD` times
    their farthest from ``result``, and :data:`ELEMENTWISE_ULP` ULP. An infinite or NaN
    element gets no distance (every finite value is infinitely far from it): only its
    own value, or what a run gave there, keeps it."""
    result = np.asarray(result)
    if not _is_float(result):
        return None, runs
    base = widened_pair(result, result)[0]
    spread = np.zeros(result.shape)
    for alternative in runs:
        with np.errstate(all="ignore"):
            moved = np.abs(widened_pair(np.asarray(alternative), result)[0] - base)
        spread = np.maximum(spread, np.where(np.isfinite(moved), moved, 0.0))
    bound = ELEMENTWISE_ULP * _ulp(base, result.dtype) + NOISE_SPREAD * spread
    return np.where(np.isfinite(base), bound, 0.0), runs


def unit_roundoff(dtype) -> float:
    """u = 2^-p for p significand bits (half the machine epsilon)."""
    real = np.empty(0, dtype).real.dtype
    return float(ml_dtypes.finfo(real).eps) / 2


def _allowance(execution, step, operands, recomputed, env, precision=None):
    """``(rule, allowance)``: ``allowance(result)`` is ``(bound, alternatives)``, the
    bound on the abs error of a float result (None for others) and the values
    that count as within it; with a backend's declared ``precision``, that too."""
    if _is_sum(step):
        return _sum_allowance(execution, step, operands, recomputed, env, precision)
    flushed = _run_flushed(execution, step, operands, env) if precision and precision.flushes_subnormals else None
    moved = []   # per float operand: the results with it one ULP down, and up
    for position, operand in enumerate(operands):
        if isinstance(operand, (tuple, Token)):   # get_tuple_element's tuple: its elements are values of other ops
            continue
        operand = np.asarray(operand)
        if not _is_float(operand):
            continue
        for direction in (-1, 1):
            changed = list(operands)
            changed[position] = _one_ulp(operand, direction)
            results = _run_or_none(execution, step, changed, env)
            if results is not None:
                moved.append((position, results))

    def elementwise_bound(index):
        result = np.asarray(recomputed[index])
        alternatives = [results[index] for _, results in moved]
        if flushed is not None:
            alternatives.append(flushed[index])
        if not _is_float(result):
            return None, alternatives
        base = widened_pair(result, result)[0]
        ulps = APPROXIMATION_ULP.get((step.name, element_name(result.dtype)), ELEMENTWISE_ULP)
        bound = ulps * _ulp(base, result.dtype)
        declared = precision and precision.accuracy(step.name, element_name(result.dtype))
        if declared:
            bound = bound + _declared_error(declared, base, result.dtype)
        effects = {}
        for position, results in moved:
            with np.errstate(all="ignore"):
                effect = np.abs(widened_pair(np.asarray(results[index]), result)[0] - base)
            effect = np.where(np.isfinite(effect), effect, 0.0)   # a moved operand out of the domain: no allowance
            effects[position] = np.maximum(effects.get(position, 0.0), effect)
        return bound + sum(effects.values()), alternatives

    rule = f"one op: {ELEMENTWISE_ULP} ULP, and one ULP of each operand"
    if precision is not None:
        rule += f"; {_declared_text(precision, step, recomputed)}"
    return rule, elementwise_bound


def _declared_text(precision: DeclaredPrecision, step, results) -> str:
    """What the backend's declared precision allows ``step`` beyond the spec's rounding."""
    dtypes = {np.asarray(r).dtype for r in results if not isinstance(r, (tuple, Token)) and _is_float(r)}
    parts = []
    if step.name in SUMS and any(dtype == np.float32 for dtype in dtypes):
        parts.append(f"products of operands multiplied in {precision.operand_passes(step)}")
    for dtype in dtypes:
        found = precision.accuracy(step.name, element_name(dtype))
        if found:
            parts.append(f"{step.name} on {element_name(dtype)} within {found.ulps:g} ULP"
                         + (f" + {found.absolute:g} ULP of 1" if found.absolute else ""))
    if precision.flushes_subnormals:
        parts.append("subnormals flushed to zero")
    return f"{precision.name}: " + ", ".join(parts or ["nothing more for this op"])


def _declared_error(accuracy, values: np.ndarray, dtype) -> np.ndarray:
    """An element-wise op's declared error at ``values``: its ULP of them, and its ULP of 1."""
    return accuracy.ulps * _ulp(values, dtype) + accuracy.absolute * float(_ulp(np.ones(()), dtype))


def _run_flushed(execution, step, operands, env) -> list | None:
    """The op on its float operands with their subnormals made zero, its results' too (as
    a backend that flushes them computes); None when it fails on them."""
    results = _run_or_none(execution, step, [_flush(x) for x in operands], env)
    return None if results is None else [_flush(r) for r in results]


def _flush(value):
    """``value`` with its subnormal elements made zero of the same sign (other values as they are)."""
    if isinstance(value, (tuple, Token)):
        return value
    array = np.asarray(value)
    if array.dtype.kind != "f" and not (array.dtype.kind == "V" and _is_float(array)):
        return value
    wide = array.astype(np.float64)
    tiny = float(ml_dtypes.finfo(array.dtype).smallest_normal)
    return np.where((wide != 0) & (np.abs(wide) < tiny), np.copysign(0.0, wide), wide).astype(array.dtype)


def _is_sum(step) -> bool:
    return step.name in SUMS or (step.name in SUMS_WITH_AN_ADD_BODY and monoid_of(step.regions[0]) == "stablehlo.add")


def _sum_allowance(execution, step, operands, recomputed, env, precision=None):
    """The bound of a sum, (2n+2)·u·Σ|terms| (module docstring), as :func:`_allowance` gives it;
    with a backend's declared ``precision``, its products' error too (judge/precision.py)."""
    magnitudes = execution.run_alone(step, [np.abs(x).astype(x.dtype) if _is_float(x) else x
                                            for x in map(np.asarray, operands)], env)
    terms = execution.run_alone(step, [np.ones_like(x) if _is_float(x) else x
                                       for x in map(np.asarray, operands)], env)

    products = precision.product_error(step) if precision is not None and step.name in SUMS else 0.0

    def sum_bound(index):
        result = np.asarray(recomputed[index])
        if not _is_float(result):
            return None, ()
        n = np.abs(np.asarray(terms[index]).astype(np.complex128)).real
        total = np.abs(np.asarray(magnitudes[index]).astype(np.complex128))
        u = unit_roundoff(result.dtype)
        if precision is not None and element_name(result.dtype) == "f64" and precision.f64_ulps:
            u *= precision.f64_ulps   # an emulated f64's roundings
        return ((2 * n + 2) * u + products) * total, ()

    rule = "a sum of n terms: (2n+2)·u·Σ|terms|"
    if precision is not None:
        rule += f"; {_declared_text(precision, step, recomputed)}"
    return rule, sum_bound


def _estimated_allowance(execution, step, operands, recomputed, env, precision=None):
    """:func:`_allowance`'s form for an op with control-flow regions: the spread of
    :data:`NOISE_RUNS` runs with every float result inside moved within its bound (the
    backend's declared ``precision``, where given)."""
    def run(listener):
        return Execution(RunContext([listener], semantics=execution.semantics)).run_alone(step, operands, env)

    runs = noise_runs(run, execution.semantics, recomputed, precision)
    bound = "its bound" if precision is None else f"the backend's declared precision ({precision.name})"
    return (f"{ESTIMATED} inside its regions: {NOISE_SPREAD}× the spread of {NOISE_RUNS} runs with every op "
            f"there moved within {bound}"), lambda index: spread_allowance(recomputed[index], [r[index] for r in runs])


class _Jitter(Listener):
    """Moves each float result of the ops it sees by a random amount within the op's
    own rounding bound (a sum's, else ELEMENTWISE_ULP ULP), or within the backend's
    declared ``precision`` where given."""

    def __init__(self, rng, semantics: str, precision: DeclaredPrecision | None = None):
        self.rng = rng
        self.precision = precision
        self.plain = Execution(RunContext(semantics=semantics))   # for the sums' magnitudes, unobserved

    def after_op(self, step, operands, results, stack):
        moved = []
        for result, bound in zip(results, self._bounds(step, operands, results)):
            if bound is None:
                moved.append(result)
                continue
            value = np.asarray(result)
            with np.errstate(all="ignore"):
                shifted = widened_pair(value, value)[0] + self.rng.uniform(-1.0, 1.0, value.shape) * bound
            moved.append(np.where(np.isfinite(shifted), shifted, value).astype(value.dtype))
        return moved

    def _bounds(self, step, operands, results) -> list:
        floats = [not isinstance(r, (tuple, Token)) and _is_float(r) for r in results]
        if not any(floats):
            return [None] * len(results)
        if _is_sum(step):
            try:
                _, bound = _sum_allowance(self.plain, step, operands, results, {}, self.precision)
                return [bound(i)[0] if is_float else None for i, is_float in enumerate(floats)]
            except KeyError:   # a body that captures values of its region: bounded as one op
                pass
        return [self._elementwise_bound(step, np.asarray(r)) if is_float else None for r, is_float in zip(results, floats)]

    def _elementwise_bound(self, step, result: np.ndarray):
        base = widened_pair(result, result)[0]
        bound = ELEMENTWISE_ULP * _ulp(base, result.dtype)
        declared = self.precision and self.precision.accuracy(step.name, element_name(result.dtype))
        if declared:
            bound = bound + _declared_error(declared, base, result.dtype)
        return bound


def _run_or_none(execution, step, operands, env) -> list | None:
    """The op's results on moved operands, or None when it fails on them (a value out
    of an op's domain): that move then allows nothing."""
    try:
        return execution.run_alone(step, operands, env)
    except Exception:  # noqa: BLE001 - any failure of the op: no allowance from this run
        return None


def _is_float(value) -> bool:
    return is_numeric(np.asarray(value).dtype)


def _identical(ours: np.ndarray, theirs: np.ndarray) -> bool:
    return bool(_equal(ours, theirs).all())


def _equal(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    if is_numeric(ours.dtype):
        return same_values(*widened_pair(ours, theirs))
    return np.asarray(ours == theirs)


def _ulp(values: np.ndarray, dtype) -> np.ndarray:
    """The spacing of ``dtype``'s numbers at ``|values|`` (float64; subnormals are
    numbers: flushing them to zero is no rounding noise, docs/semantics.md)."""
    real = np.empty(0, dtype).real.dtype
    finfo = ml_dtypes.finfo(real)
    magnitude = np.abs(values)
    with np.errstate(all="ignore"):
        exponent = np.floor(np.log2(np.maximum(magnitude, float(finfo.smallest_normal))))
    spacing = np.ldexp(float(finfo.eps), np.where(np.isfinite(exponent), exponent, 0).astype(np.int64))
    return np.where(np.isfinite(magnitude), spacing, np.inf)


def _one_ulp(values: np.ndarray, direction: int) -> np.ndarray:
    """``values`` moved one ULP towards ``direction``·∞;
    complex values scaled by 1 ± 2u."""
    if values.dtype.kind == "c":
        return (values * (1 + direction * 2 * unit_roundoff(values.dtype))).astype(values.dtype)
    wide = values.astype(np.float64)
    with np.errstate(all="ignore"):
        moved = wide + direction * _ulp(wide, values.dtype)
    return np.where(np.isfinite(wide), moved, wide).astype(values.dtype)
