"""Interpreter core benchmarks: per-op cost, large-tensor programs, long loops.

Runs each program on stablehlo_interp, on jaxlib's C++ StableHLO reference
interpreter (``stablehlo.eval_module``) and as hand-written NumPy, and prints
the times side by side with the ratios and the targets:

* per-op cost below the C++ reference interpreter's (~2.5 us per op here);
* large-tensor programs within 1.5x of hand-written NumPy.

    python benchmarks/core_bench.py [--skip-reference] [--repeat N]

BLAS runs on one thread (``OPENBLAS_NUM_THREADS=1`` unless set): on a shared
machine its threads wait for a busy core and a matmul takes milliseconds at
random, on both sides. Where the time goes (issue 14; 2 busy cores, process
time, best of many, the same run):

* (a) per op: a chain of add/multiply/subtract costs 0.60 us per op against
  0.52 us for NumPy's own loop of the same ufuncs: the run loop adds 0.09 us.
  ``maximum`` costs 1.0-1.3 us against ``np.maximum``'s 0.5: NumPy returns
  either zero of (-0.0, +0.0), so the IEEE maximum looks for zeros in the
  result (``np.count_nonzero``) before it can return it. The benchmark's mix
  (a quarter maximum) is 0.75-0.8 us; its floor is about 0.7 us.
* (b) at 128x128 NumPy takes ~99 us (matmul 50, tanh 43, sum 5). Our three
  runners called directly take 109-111 us (1.1x): the dot +2 us of reshapes,
  tanh the same ufunc, the reduce's left fold 9-10 us against ``sum(0)``'s 5
  (the same bits: NumPy sums axis 0 of a C-contiguous array row after row,
  which is the fold; ``np.cumsum`` is 100x slower). ``Program.run`` adds its
  fixed cost per call (arguments checked, context, result copies: 5 us
  measured alone, 10-20 us in this run).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads BLAS (see above)

import numpy as np  # noqa: E402
from timing import best_time, format_time

import stablehlo_interp as si


def reference_runner(text: str, args):
    """A callable that runs the module on the C++ reference interpreter."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    context = jax_mlir.make_ir_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(text)
        # The benchmarks use f32 only; 0-d arrays need their type spelled out.
        attrs = [ir.DenseElementsAttr.get(np.atleast_1d(np.ascontiguousarray(a)),
                                          type=ir.RankedTensorType.get(np.shape(a), ir.F32Type.get()))
                 for a in args]

    def run():
        with context:
            return stablehlo.eval_module(module, attrs)

    return run


def elementwise_chain(n: int = 2000) -> str:
    ops = ["add", "multiply", "subtract", "maximum"]
    lines = ["func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {",
             "  %v0 = stablehlo.add %a, %a : tensor<4xf32>"]
    lines += [f"  %v{i} = stablehlo.{ops[i % 4]} %v{i - 1}, %a : tensor<4xf32>" for i in range(1, n)]
    lines += [f"  return %v{n - 1} : tensor<4xf32>", "}"]
    return "\n".join(lines)


def numpy_chain(a, n: int = 2000):
    ops = [np.add, np.multiply, np.subtract, np.maximum]
    v = a + a
    for i in range(1, n):
        v = ops[i % 4](v, a)
    return v


def matmul_tanh_reduce(size: int) -> str:
    t = f"tensor<{size}x{size}xf32>"
    return f"""func.func @main(%x: {t}, %y: {t}) -> tensor<{size}xf32> {{
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}
  %1 = stablehlo.tanh %0 : {t}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%1 init: %zero) applies stablehlo.add across dimensions = [0] : ({t}, tensor<f32>) -> tensor<{size}xf32>
  return %2 : tensor<{size}xf32>
}}"""


def while_loop(iterations: int) -> str:
    return f"""func.func @main(%x: tensor<f32>) -> tensor<f32> {{
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %limit = stablehlo.constant dense<{iterations}> : tensor<i32>
  %half = stablehlo.constant dense<0.5> : tensor<f32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<f32>
    cond {{
      %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }} do {{
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %a1 = stablehlo.multiply %acc, %half : tensor<f32>
      %a2 = stablehlo.add %a1, %half : tensor<f32>
      stablehlo.return %i1, %a2 : tensor<i32>, tensor<f32>
    }}
  return %r#1 : tensor<f32>
}}"""


def numpy_while(x, iterations: int):
    i, acc, half = np.int32(0), np.float32(x), np.float32(0.5)
    while i < iterations:
        i, acc = i + np.int32(1), acc * half + half
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-reference", action="store_true", help="do not time the C++ interpreter")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []

    def measure(name, text, inputs, numpy_fn, per=1, target=None):
        program = si.load(text)
        ours = best_time(lambda: program.run(*inputs), args.repeat) / per
        reference = None
        if not args.skip_reference:
            reference = best_time(reference_runner(text, inputs), 1) / per
        numpy_time = best_time(lambda: numpy_fn(*inputs), args.repeat) / per
        rows.append((name, ours, reference, numpy_time, target))

    a = np.ones(4, np.float32)
    measure("(a) 2000 elementwise ops, per op", elementwise_chain(), [a], numpy_chain, per=2000,
            target="interp < C++")
    for size in (128, 256):
        x = rng.standard_normal((size, size), np.float32)
        y = rng.standard_normal((size, size), np.float32)
        measure(f"(b) {size}x{size} matmul+tanh+reduce", matmul_tanh_reduce(size), [x, y],
                lambda x, y: np.tanh(x @ y).sum(0), target="interp <= 1.5x NumPy")
    measure("(c) while loop, 10000 iterations", while_loop(10000), [np.float32(1)],
            lambda x: numpy_while(x, 10000), target="interp < C++")

    header = f"{'program':38} {'interp':>11} {'C++ ref':>11} {'NumPy':>11} {'/C++':>7} {'/NumPy':>7}  target"
    print(header)
    print("-" * len(header))
    for name, ours, reference, numpy_time, target in rows:
        vs_ref = f"{ours / reference:.2f}x" if reference else "-"
        print(f"{name:38} {format_time(ours):>11} {format_time(reference):>11} {format_time(numpy_time):>11} "
              f"{vs_ref:>7} {ours / numpy_time:>6.2f}x  {target}")


if __name__ == "__main__":
    main()
