"""Programs that show an accelerator's arithmetic: its matrix products at each precision,
its transcendental functions, its subnormals, its emulated f64 (judge/precision.py states
what a TPU declares; `compare --backend recorded:FOLDER` judges the recorded answers by it).

    python tests/tpu_probes.py PLATFORM FOLDER     # run each on PLATFORM, answers kept in FOLDER

Each probe is ``(name, module text, arguments)``, made from a fixed seed.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

UNARY = [("stablehlo.exponential", "unit"), ("stablehlo.log", "positive"), ("stablehlo.tanh", "unit"),
         ("stablehlo.sine", "unit"), ("stablehlo.cosine", "unit"), ("stablehlo.sqrt", "positive"),
         ("stablehlo.rsqrt", "positive"), ("stablehlo.logistic", "unit"), ("stablehlo.exponential_minus_one", "unit"),
         ("stablehlo.log_plus_one", "positive"), ("stablehlo.cbrt", "wide"), ("stablehlo.tan", "unit"),
         ("stablehlo.exponential", "wide"), ("stablehlo.log", "wide"), ("stablehlo.sine", "wide"),
         ("stablehlo.abs", "subnormal"), ("stablehlo.negate", "subnormal"), ("stablehlo.sqrt", "subnormal"),
         ("stablehlo.log", "subnormal")]
CHLO = [("chlo.erf", "unit"), ("chlo.erfc", "unit"), ("chlo.erf_inv", "open unit"), ("chlo.lgamma", "positive"),
        ("chlo.digamma", "positive"), ("chlo.asin", "open unit"), ("chlo.acos", "open unit"), ("chlo.atan", "unit"),
        ("chlo.sinh", "unit"), ("chlo.cosh", "unit"), ("chlo.asinh", "unit"), ("chlo.acosh", "above one"),
        ("chlo.atanh", "open unit")]
BINARY = [("stablehlo.divide", ("unit", "unit")), ("stablehlo.power", ("positive", "unit")),
          ("stablehlo.atan2", ("unit", "unit")), ("stablehlo.add", ("subnormal", "subnormal")),
          ("stablehlo.multiply", ("subnormal", "unit")), ("stablehlo.divide", ("subnormal", "unit")),
          ("stablehlo.multiply", ("wide", "wide")), ("stablehlo.maximum", ("wide", "subnormal"))]
SIZE = 4096


def _unary(op: str, dtype: str = "f32", n: int = SIZE) -> str:
    return (f"func.func @main(%a: tensor<{n}x{dtype}>) -> tensor<{n}x{dtype}> {{\n"
            f"  %0 = {op} %a : tensor<{n}x{dtype}>\n  return %0 : tensor<{n}x{dtype}>\n}}")


def _chlo(op: str, n: int = SIZE) -> str:
    return (f"func.func @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n"
            f"  %0 = \"{op}\"(%a) : (tensor<{n}xf32>) -> tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}")


def _binary(op: str, dtype: str = "f32", n: int = SIZE) -> str:
    return (f"func.func @main(%a: tensor<{n}x{dtype}>, %b: tensor<{n}x{dtype}>) -> tensor<{n}x{dtype}> {{\n"
            f"  %0 = {op} %a, %b : tensor<{n}x{dtype}>\n  return %0 : tensor<{n}x{dtype}>\n}}")


def dot(m: int, k: int, n: int, precision: str, dtype: str = "f32") -> str:
    return (f"func.func @main(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{\n"
            f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [{precision}, {precision}] "
            f": (tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>\n"
            f"  return %0 : tensor<{m}x{n}x{dtype}>\n}}")


def _transpose_then_scale() -> str:
    """A transpose whose result is returned: a compiler that picks the result's layout may
    return it column-major (backends/jax.py asks for the default one)."""
    return ("func.func @main(%a: tensor<10x64xf32>) -> (tensor<64x10xf32>, tensor<64x10xf32>) {\n"
            "  %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<10x64xf32>) -> tensor<64x10xf32>\n"
            "  %1 = stablehlo.add %0, %0 : tensor<64x10xf32>\n"
            "  return %0, %1 : tensor<64x10xf32>, tensor<64x10xf32>\n}")


def _reduce_sum(n: int) -> str:
    return (f"func.func @main(%a: tensor<{n}xf32>) -> tensor<f32> {{\n"
            "  %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
            f"  %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] "
            f": (tensor<{n}xf32>, tensor<f32>) -> tensor<f32>\n  return %0 : tensor<f32>\n}}")


def inputs(kind: str, rng, n: int = SIZE, dtype=np.float32) -> np.ndarray:
    if kind == "wide":      # magnitudes from 1e-30 to 1e30, both signs, and the special values
        values = np.concatenate([np.geomspace(1e-30, 1e30, n // 2), -np.geomspace(1e-30, 1e30, n // 2)])
        values[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    elif kind == "unit":    # where the functions curve: [-10, 10]
        values = np.linspace(-10, 10, n)
    elif kind == "open unit":
        values = np.linspace(-0.999, 0.999, n)
    elif kind == "above one":
        values = np.geomspace(1.001, 1e6, n)
    elif kind == "positive":
        values = np.geomspace(1e-30, 1e30, n)
    elif kind == "subnormal":
        values = np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, -120, n)) * rng.choice([-1, 1], n)
    else:
        raise ValueError(kind)
    return values.astype(dtype)


def probes(seed: int = 0) -> list:
    """Every probe: ``(name, module text, arguments)``."""
    rng = np.random.default_rng(seed)
    found = [(f"{op} {kind}", _unary(op), [inputs(kind, rng)]) for op, kind in UNARY]
    found += [(f"{op} {kind}", _chlo(op), [inputs(kind, rng)]) for op, kind in CHLO]
    for op in ("stablehlo.exponential", "stablehlo.tanh", "stablehlo.log"):
        kind = "positive" if op == "stablehlo.log" else "unit"
        found.append((f"{op} bf16", _unary(op, "bf16"), [inputs(kind, rng).astype(ml_dtypes.bfloat16)]))
    found.append(("stablehlo.exponential f64", _unary("stablehlo.exponential", "f64"),
                  [inputs("unit", rng, dtype=np.float64)]))
    found.append(("stablehlo.add f64", _binary("stablehlo.add", "f64"), [inputs("unit", rng, dtype=np.float64)] * 2))
    for op, (first, second) in BINARY:
        found.append((f"{op} {first} {second}", _binary(op), [inputs(first, rng), rng.permutation(inputs(second, rng))]))
    for precision in ("DEFAULT", "HIGH", "HIGHEST"):
        for m, k, n in ((64, 512, 64), (8, 4096, 8), (128, 128, 128)):
            found.append((f"dot {m}x{k}x{n} {precision}", dot(m, k, n, precision),
                          [rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)]))
    found.append(("dot bf16 DEFAULT", dot(64, 512, 64, "DEFAULT", "bf16"),
                  [rng.standard_normal((64, 512)).astype(ml_dtypes.bfloat16),
                   rng.standard_normal((512, 64)).astype(ml_dtypes.bfloat16)]))
    found.append(("transpose returned", _transpose_then_scale(), [rng.standard_normal((10, 64)).astype(np.float32)]))
    for n in (1000, 100000):
        found.append((f"reduce sum {n}", _reduce_sum(n), [rng.standard_normal(n).astype(np.float32) + 1]))
    return found


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
    from stablehlo_interp.backends import BackendError, JaxBackend, RecordingBackend

    platform, folder = sys.argv[1], sys.argv[2]
    backend = RecordingBackend(JaxBackend(platform), folder, command=f"python tests/tpu_probes.py {platform} FOLDER")
    for name, text, arguments in probes():
        try:
            print(f"{name}: ok {[value.dtype for value in backend(text, arguments)]}", flush=True)
        except BackendError as refusal:
            print(f"{name}: {refusal}", flush=True)
