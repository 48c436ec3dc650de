"""Quantization ops (spec: uniform_quantize, uniform_dequantize). Other ops on
quantized tensors go through quantized.build_quantized."""

from __future__ import annotations

from ..engine.quantized import dequantize, quantize
from ..engine.registry import op


@op("stablehlo.uniform_quantize", elementwise=True)
def uniform_quantize(info):
    """Float -> quantized: ``quantize(operand, type(result))``; quantized ->
    quantized (requantization): ``quantize(dequantize(operand), type(result))``."""
    source, target = info.operand_types[0], info.result_type
    if not target.is_quantized:
        raise info.error(f"result type {target} is not quantized")
    if source.is_quantized:
        return lambda operand: quantize(dequantize(operand, source), target)
    if not source.is_float:
        raise info.error(f"operand type {source} is neither floating-point nor quantized")
    return lambda operand: quantize(operand, target)


@op("stablehlo.uniform_dequantize", elementwise=True)
def uniform_dequantize(info):
    """``result = dequantize(operand)``."""
    source = info.operand_types[0]
    if not source.is_quantized:
        raise info.error(f"operand type {source} is not quantized")
    return lambda operand: dequantize(operand, source)
