"""Quantized tensors at run time (spec: "Quantization computations").

A quantized tensor's value is an ndarray of its storage type; its TensorType
carries the scales and zero points (types.Quantization). ``dequantize`` and
``quantize`` convert to and from the expressed (floating-point) type as the
spec defines them.

Op builders never see quantized types, except the quantization ops themselves:
:func:`build_quantized` (called by the compiler when an op has quantized operands
or results) chooses one of two ways to run the op at load time:

* on the stored integers, for ops with regions (their bodies are typed with
  the quantized types: each body op dequantizes and quantizes itself, so a
  reduction rounds at every step where the spec's dequantize_op_quantize of
  ``reduce`` rounds once), for transfers, bit-level and structural ops, and
  for ops that only move or copy elements when every quantized type involved
  has the same parameters;
* otherwise ``dequantize_op_quantize``: quantized operands are dequantized,
  the op runs on the expressed type and quantized results are quantized again
  (this also covers the spec's ``dequantize_compare``,
  ``dequantize_select_quantize``, ``hybrid_dequantize_then_op`` and the
  several-result batch_norm form).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.types import TensorType
from .passes import run_program
from .plan import OpInfo, Region, Step, StepColumns

# Ops defined on quantized tensors directly by the spec (no dequantization).
QUANTIZATION_OPS = frozenset({"stablehlo.uniform_quantize", "stablehlo.uniform_dequantize"})

# Ops that see a quantized tensor as its stored integers: transfers (the host
# exchanges stored integers), bit-level and structural ops, custom calls.
_ON_STORED_INTEGERS = frozenset({
    "stablehlo.bitcast_convert", "stablehlo.custom_call", "stablehlo.get_dimension_size",
    "stablehlo.get_tuple_element", "stablehlo.infeed", "stablehlo.optimization_barrier", "stablehlo.outfeed",
    "stablehlo.recv", "stablehlo.send", "stablehlo.tuple",
})

# Ops whose result elements are operand elements (or operand-independent
# values): exact on the stored integers when the quantization parameters agree.
_MOVES_ELEMENTS = frozenset({
    "stablehlo.all_gather", "stablehlo.all_to_all", "stablehlo.broadcast", "stablehlo.broadcast_in_dim",
    "stablehlo.collective_broadcast", "stablehlo.collective_permute", "stablehlo.concatenate",
    "stablehlo.constant", "stablehlo.dynamic_broadcast_in_dim", "stablehlo.dynamic_gather",
    "stablehlo.dynamic_pad", "stablehlo.dynamic_reshape", "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice", "stablehlo.gather", "stablehlo.pad", "stablehlo.real_dynamic_slice",
    "stablehlo.reshape", "stablehlo.reverse", "stablehlo.set_dimension_size", "stablehlo.slice",
    "stablehlo.transpose",
})


def is_quantized(ttype) -> bool:
    return isinstance(ttype, TensorType) and ttype.is_quantized


def dequantize(value, ttype: TensorType) -> np.ndarray:
    """Stored integers -> expressed type: ``(i - zero_point) * scale`` (the difference
    is taken in int64, so it never wraps)."""
    quantization = ttype.quantization
    scales, zero_points = quantization.parameters(np.ndim(value))
    difference = np.asarray(value).astype(np.int64) - zero_points
    # int64 -> f64 is exact for any storage difference; one rounding to the expressed type.
    return difference.astype(np.float64).astype(quantization.expressed_dtype) * scales


def quantize(value, ttype: TensorType) -> np.ndarray:
    """Expressed type -> stored integers: ``round_nearest_even(clamp(min, x / scale +
    zero_point, max))``, each step in the expressed type as the spec's ``quantize``."""
    quantization = ttype.quantization
    dtype = quantization.expressed_dtype
    scales, zero_points = quantization.parameters(np.ndim(value))
    shifted = np.asarray(value, dtype) / scales + zero_points.astype(dtype)
    low = np.array(quantization.storage_min).astype(dtype)
    high = np.array(quantization.storage_max).astype(dtype)
    clamped = np.minimum(np.maximum(shifted, low), high)
    return np.rint(clamped.astype(np.float64)).astype(quantization.storage_dtype)


def build_quantized(info, implementation):
    """The runner of an op with quantized operands or results (see the module docstring)."""
    builder = implementation.builder
    if info.name in QUANTIZATION_OPS:
        return builder(info)
    quantized = [t for t in (*info.operand_types, *info.result_types) if is_quantized(t)]
    agree = len({t.quantization for t in quantized}) == 1
    if info.regions:
        retyped = _retyped(info, TensorType.storage)
        retyped.regions = tuple(region and _opaque(region) for region in info.regions)  # None: a recursive call (OpInfo)
        return builder(retyped)
    if info.name in _ON_STORED_INTEGERS or (info.name in _MOVES_ELEMENTS and agree):
        return builder(_retyped(info, TensorType.storage))
    return _dequantize_op_quantize(info, builder(_retyped(info, TensorType.expressed)), implementation)


def _retyped(info, convert):
    def retype(ttype):
        return convert(ttype) if is_quantized(ttype) else ttype

    return dataclasses.replace(info, operand_types=tuple(map(retype, info.operand_types)),
                               result_types=tuple(map(retype, info.result_types)))


def _opaque(region):
    """``region`` behind one step that calls it: the same computation, which op
    builders cannot recognize as a NumPy reduction or comparison of the stored
    integers (their meaning depends on the quantization parameters)."""
    n_captures, n_args, n_results = region.n_captures, region.n_args, len(region.output_types)
    arguments = tuple(range(n_captures, n_captures + n_args))
    outputs = tuple(range(n_captures + n_args, n_captures + n_args + n_results))
    info = OpInfo("stablehlo_interp.quantized_region", {}, region.arg_types, region.output_types, (region,))

    def call(regions, *args):
        return regions[0](*args)

    step = Step(info, call, arguments, outputs, (), (region,), (tuple(range(n_captures)),), 0,
                variadic=True)
    columns = StepColumns.of_steps([step])
    return Region(region.kind, columns, n_captures, region.arg_types, outputs, region.output_types,
                  region.return_location, n_captures + n_args + n_results, run_program(columns, outputs))


def _converter(ttype, convert):
    if is_quantized(ttype):
        return lambda value: convert(value, ttype)
    return None


def _dequantize_op_quantize(info, run, implementation):
    """Spec: ``dequantize_op_quantize(op, *inputs, output_type)`` (and its variants
    for several results and non-quantized operands or results). A runner that takes
    the Execution first gets it unchanged."""
    inputs = [_converter(t, dequantize) for t in info.operand_types]
    outputs = [_converter(t, quantize) for t in info.result_types]
    leading = 1 if implementation.execution else 0

    def converted(values, converters):
        return [x if f is None else f(x) for f, x in zip(converters, values)]

    if implementation.variadic:
        def runner(*arguments):
            results = run(*arguments[:leading], *converted(arguments[leading:], inputs))
            return converted(results, outputs)
    else:
        quantize_result = outputs[0] or (lambda value: value)

        def runner(*arguments):
            return quantize_result(run(*arguments[:leading], *converted(arguments[leading:], inputs)))

    return runner
