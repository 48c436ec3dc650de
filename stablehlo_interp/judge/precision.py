"""A backend's declared precision: what its arithmetic may do beyond the rounding the spec
allows, so that a difference it explains is labelled as such and not as an error.

The rounding bounds of judge/bounds.py are what any correct implementation of the spec
stays within. An accelerator declares less: on a TPU an f32 ``dot_general`` or
``convolution`` at ``DEFAULT`` precision multiplies its operands rounded to bf16 (one
pass of the matrix unit), at ``HIGH`` in three bf16 passes (``bf16_3x``), and only at
``HIGHEST`` as f32 does; its transcendental functions have accuracies of their own; it
flushes subnormals to zero; it emulates f64. A :class:`DeclaredPrecision` says this of
one backend, and the judge then labels a difference beyond the spec's bound but within
the backend's declared precision "within the backend's declared precision", and one
beyond both "beyond it".

The precision of a dot or convolution is the op's own (``precision_config``, which
``jax.default_matmul_precision`` sets; ``algorithm`` where given), the lower of its two
operands', so the same program under ``jax.default_matmul_precision("highest")`` is held
to the tighter bound. A product of operands rounded to a format of unit roundoff ``v``
is within ``(2v + v²)·|a||b|`` of the exact one (each operand off by at most ``v``
relatively); three passes of bf16 (an operand split into a high and a low bf16 part,
the low·low product dropped) within ``(3v² + 3v³)·|a||b|``; the sums then add the
spec's own bound (judge/bounds.py), so the whole is ``factor·Σ|a||b|`` more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

# What a dot's operands are multiplied as, by precision: one bf16 pass, three, or f32.
BF16, BF16_3X, NATIVE = "one bf16 pass", "three bf16 passes (bf16_3x)", "the operands' own type"
_U_BF16 = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps) / 2
_PRODUCT_ERROR = {BF16: 2 * _U_BF16 + _U_BF16 ** 2, BF16_3X: 3 * _U_BF16 ** 2 + 3 * _U_BF16 ** 3, NATIVE: 0.0}
_PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


@dataclass(frozen=True)
class ElementwiseAccuracy:
    """An element-wise op's declared accuracy: within ``ulps`` ULP of its result plus
    ``absolute`` ULP of 1.0 (a function near zero where the backend's error is absolute:
    ``tanh``, ``logistic``, ``log`` near 1)."""

    ulps: float
    absolute: float = 0.0


@dataclass(frozen=True)
class DeclaredPrecision:
    """What a backend declares of its arithmetic (module docstring).

    ``name`` says which backend and where the figures come from. ``matmul`` maps each
    ``precision_config`` value to how an f32 dot's operands are multiplied (BF16,
    BF16_3X or NATIVE); ``elementwise`` maps ``(op name, element type)`` to its
    :class:`ElementwiseAccuracy` (element type ``"*"``: every float type);
    ``flushes_subnormals``: subnormal operands and results may be read or written as
    zero; ``f64_ulps``: every f64 and complex<f64> op (emulated), constants included,
    within this many ULP."""

    name: str
    matmul: dict = field(default_factory=dict)
    elementwise: dict = field(default_factory=dict)
    flushes_subnormals: bool = False
    f64_ulps: float = 0.0

    def product_error(self, step) -> float:
        """The relative error of each product of a dot or convolution ``step`` beyond the
        spec's: ``factor`` in ``factor·|a||b|`` (0 for operands multiplied in their type)."""
        operand_type = step.info.operand_types[0]
        if operand_type.dtype != np.float32:
            return 0.0
        return _PRODUCT_ERROR[self.operand_passes(step)]

    def operand_passes(self, step) -> str:
        """How ``step``'s operands are multiplied: by its ``algorithm``, else by the lower
        of its two operands' ``precision_config`` (``DEFAULT`` where none is given)."""
        algorithm = step.info.attributes.get("algorithm")
        if algorithm is not None:
            return _passes_of_algorithm(algorithm)
        config = step.info.attributes.get("precision_config") or ("DEFAULT", "DEFAULT")
        lowest = min((_precision_name(p) for p in config), key=_PRECISIONS.index, default="DEFAULT")
        return self.matmul.get(lowest, NATIVE)

    def accuracy(self, op: str, element_type: str) -> ElementwiseAccuracy | None:
        """The declared accuracy of an element-wise ``op`` on ``element_type`` (None: the spec's)."""
        found = self.elementwise.get((op, element_type)) or self.elementwise.get((op, "*"))
        if element_type in ("f64", "c128") and self.f64_ulps:   # complex<f64>: two emulated f64
            emulated = ElementwiseAccuracy(self.f64_ulps)
            return emulated if found is None else ElementwiseAccuracy(max(found.ulps, emulated.ulps), found.absolute)
        return found


def _precision_name(value) -> str:
    """``DEFAULT`` from a decoded precision attribute (a string or an enum-like value)."""
    text = str(getattr(value, "value", value)).upper()
    return next((name for name in reversed(_PRECISIONS) if name in text), "DEFAULT")


def _passes_of_algorithm(algorithm) -> str:
    """A dot algorithm's operands (ir/decode.py's DotAlgorithm): bf16 in one pass or
    three, else their own type (six bf16 passes are as good as f32)."""
    if "bf16" not in (algorithm.lhs_precision_type, algorithm.rhs_precision_type):
        return NATIVE
    return {1: BF16, 3: BF16_3X}.get(algorithm.num_primitive_operations, NATIVE)


# TPU v5e with libtpu 0.0.42.1 (JAX 0.10.2): the matrix unit's passes are XLA's documented
# meaning of each precision; the element-wise accuracies were measured on 4096 values per op
# (tests/tpu_probes.py: magnitudes from 1e-30 to 1e30 and [-10, 10]), each the largest error
# against the exact value rounded up to a power of two; f64 is emulated (an add 8 ULP off, an
# exp 137); subnormals are flushed (an add of two subnormals is 0).
TPU_V5E = DeclaredPrecision(
    name="TPU v5e (libtpu 0.0.42.1): matrix products per precision_config, element-wise accuracies measured",
    matmul={"DEFAULT": BF16, "HIGH": BF16_3X, "HIGHEST": NATIVE},
    elementwise={
        ("stablehlo.exponential", "f32"): ElementwiseAccuracy(64),
        ("stablehlo.exponential_minus_one", "f32"): ElementwiseAccuracy(64, 256),
        ("stablehlo.log", "f32"): ElementwiseAccuracy(16, 1024),
        ("stablehlo.log_plus_one", "f32"): ElementwiseAccuracy(16, 1024),
        ("stablehlo.logistic", "f32"): ElementwiseAccuracy(16, 256),
        ("stablehlo.tanh", "f32"): ElementwiseAccuracy(16, 512),
        ("stablehlo.power", "f32"): ElementwiseAccuracy(256),
        ("chlo.erfc", "f32"): ElementwiseAccuracy(128),
        ("chlo.erf_inv", "f32"): ElementwiseAccuracy(256, 64),
        ("chlo.sinh", "f32"): ElementwiseAccuracy(64, 32),
        ("chlo.cosh", "f32"): ElementwiseAccuracy(64),
        ("chlo.asinh", "f32"): ElementwiseAccuracy(16, 1024),
        ("chlo.acosh", "f32"): ElementwiseAccuracy(16, 1024),
        ("chlo.atanh", "f32"): ElementwiseAccuracy(16, 1024),
        ("chlo.digamma", "f32"): ElementwiseAccuracy(1024, 128),
        ("chlo.lgamma", "f32"): ElementwiseAccuracy(1024, 2048),
    },
    flushes_subnormals=True,
    f64_ulps=256,
)


def declared_precision(platform: str | None, device_kind: str | None = None) -> DeclaredPrecision | None:
    """The declared precision of a JAX platform's device (None: the spec's rounding, as
    XLA's CPU keeps it)."""
    if platform == "tpu":
        return TPU_V5E
    return None
