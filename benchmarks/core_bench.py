"""Interpreter core benchmarks: per-op cost, large-tensor programs, long loops.

Runs each program on stablehlo_interp, on jaxlib's C++ StableHLO reference
interpreter (``stablehlo.eval_module``) and as hand-written NumPy, and prints
the times side by side with the ratios and the targets; ``floor`` is the
program's kernels alone, each on the operands one observed run gave it
(floor.py: the NumPy work of the run, nothing around it):

* per-op cost below the C++ reference interpreter's (~2.5 us per op here);
* large-tensor programs within 1.5x of hand-written NumPy;
* a NumPy-heavy while loop within 2x of its floor.

    python benchmarks/core_bench.py [--skip-reference] [--repeat N]

BLAS runs on one thread (``OPENBLAS_NUM_THREADS=1`` unless set): on a shared
machine its threads wait for a busy core and a matmul takes milliseconds at
random, on both sides. Where the time goes (issue 14; 2 busy cores, best of
``--repeat 200`` or of 300-3000 interleaved calls, ranges of three runs, and
the same before the last changes, measured in the same session):

* (a) per op: a chain of add/multiply/subtract costs 0.57-0.61 us per op
  against 0.50-0.53 us for NumPy's own loop of the same ufuncs: the run loop
  adds 0.07-0.08 us (fetch the step and its operands, store the result,
  release a slot). ``maximum`` costs 0.87-0.92 us (1.17-1.24 before) against
  ``np.maximum``'s 0.51-0.54: NumPy returns either zero of (-0.0, +0.0), so
  the IEEE maximum counts the zeros of the result before it can return it
  (``count_nonzero``, 0.08 us without NumPy's dispatch wrapper, which cost
  0.27 more) in a runner of its own (0.1 us). The benchmark's mix (a quarter
  maximum) is 0.67-0.75 us (0.75-0.80 before) against NumPy's 0.49-0.54; its
  floor is 3/4 x 0.57 + 1/4 x 0.87 = 0.65 us: 0.6 us per op cannot be reached
  while each op is its own ufunc call (0.5 us on 4 elements) and maximum must
  decide the sign of zeros.
* one ``add``: ``Program.run`` costs 4.4-4.5 us (6.2 before) against
  ``np.add``'s 0.44-0.55. Per call (hot, interleaved): the entry function
  (cached) 0.2, argument checks 0.7 (two arguments), ``RunContext`` 0.5,
  ``Execution`` 0.4, NumPy's error setting at the run's entry 0.45, the
  region's slots and outputs 0.5, the run loop 0.35, result checks 0.55:
  each a few Python operations that a run needs (its own context, checked
  arguments, results the caller owns).
* (b) 128x128: 1.14-1.16x NumPy (1.29-1.31x before); 256x256 1.03x
  (1.06-1.07x). At 128x128 NumPy takes ~99 us (matmul 50, tanh 43, sum 5).
  Our runners called directly add 2.5-3 us: the dot is matmul itself (a plain
  matrix product needs no reshapes), tanh the same ufunc, and the reduce is
  ``np.add.reduce(x, axis=0, initial=init)``, which adds whole rows one after
  another from init: the spec's left fold, bit for bit (tests/
  test_accumulation.py, f16 to f64); its Python frames add 2 us. The run loop
  adds about 3 (four steps; no longer binding the reduce's body, which a plain
  sum never calls, nor calling a runner for the folded constant, which waits in
  its slot of the environment: a program of one 4-element sum runs in 14.7 us
  against 16.3 before), the run's entry 4 and ``Program.run``'s arguments and
  results 3: after 100 us of BLAS and tanh, each Python step costs about twice
  what it costs in a hot loop: the entry and exit that take 3.5 us around one
  add take 7 here. The row is noisy (1.16-1.28x before and after, two runs).
* (c) 10 000 iterations: 4.5-4.6 us per iteration, 1.10-1.12x the C++
  interpreter's 4.0-4.1 (5.4-5.5 us, 1.36x before; two runs of each, same
  session). An iteration is two region calls and four ops. The four runners
  called directly take 2.8 us: each is a ufunc on a NumPy scalar (what the
  last iteration's ufunc returned) and a 0-d array (a captured constant),
  0.7-0.8 us each, where two 0-d arrays cost 0.52 and two scalars 0.88 (their
  own ``+`` 0.05). A region call is the run loop itself, bound once per run of
  the ``while`` to the region's program, captures, result slots and outputs
  (``BoundRegion.repeated``: no argument or listener check per call, outputs
  taken by ``itemgetter``): the two calls and the four steps add 1.7-1.8 us
  (2.6 before, when each call went through ``BoundRegion.__call__``,
  ``Execution.run_region``, the loop and a comprehension for the outputs).
  Below 1x needs cheaper element-wise runners on 0-d values more than cheaper
  region calls. Issue 42 gave them those: ops with a 0-d result run NumPy
  scalars' operators in the unobserved loop (ops/scalars.py), and the loop costs
  0.27 us per executed op against 0.60 before, in one run of scalar_bench.py on a
  loaded machine (2.2x; benchmarks/RESULTS.md).
* (d) a recurrent layer over 256 rows of 64 (issue 29): 1.29x its floor (7.0 ms
  against 5.5; 9.2x hand-written NumPy). Most of the floor is the 256x64 carry that
  ``dynamic_update_slice`` copies at every iteration (an op's result is a fresh
  array), which NumPy writes in place. (c) against its floor: 2.5x, the two region
  calls of an iteration (about 0.5 us each) around four ufuncs on 0-d values
  (0.31 us each). benchmarks/RESULTS.md has both, and the floors of (a) and (b).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads BLAS (see above)

import numpy as np
from floor import KernelRecorder, floor_of
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


ONE_ADD = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


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


def rnn_loop(steps: int, width: int) -> str:
    """A NumPy-heavy while loop: a recurrent layer over ``steps`` rows, each iteration a
    matrix-vector product, tanh and the row stored into the outputs (a scan as JAX lowers
    one, its outputs carried through the loop)."""
    v, m, row = f"tensor<{width}xf32>", f"tensor<{width}x{width}xf32>", f"tensor<1x{width}xf32>"
    xs = f"tensor<{steps}x{width}xf32>"
    return f"""func.func @main(%xs: {xs}, %w: {m}, %h0: {v}) -> ({v}, {xs}) {{
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %limit = stablehlo.constant dense<{steps}> : tensor<i32>
  %ys0 = stablehlo.constant dense<0.0> : {xs}
  %r:3 = stablehlo.while(%i = %zero, %h = %h0, %ys = %ys0) : tensor<i32>, {v}, {xs}
    cond {{
      %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }} do {{
      %x = stablehlo.dynamic_slice %xs, %i, %zero, sizes = [1, {width}] : ({xs}, tensor<i32>, tensor<i32>) -> {row}
      %x1 = stablehlo.reshape %x : ({row}) -> {v}
      %wh = stablehlo.dot_general %w, %h, contracting_dims = [1] x [0] : ({m}, {v}) -> {v}
      %s = stablehlo.add %wh, %x1 : {v}
      %h1 = stablehlo.tanh %s : {v}
      %h2 = stablehlo.reshape %h1 : ({v}) -> {row}
      %ys1 = stablehlo.dynamic_update_slice %ys, %h2, %i, %zero : ({xs}, {row}, tensor<i32>, tensor<i32>) -> {xs}
      %i1 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i1, %h1, %ys1 : tensor<i32>, {v}, {xs}
    }}
  return %r#1, %r#2 : {v}, {xs}
}}"""


def numpy_rnn(xs, w, h):
    ys = np.zeros_like(xs)
    for i in range(len(xs)):
        h = np.tanh(w @ h + xs[i])
        ys = ys.copy()   # a fresh array per iteration, as an op's result is
        ys[i] = h
    return h, ys


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

    def measure(name, text, inputs, numpy_fn, per=1, target=None, calls=1):
        """Times per call (per op: ``per``); each timing covers ``calls`` calls."""
        program = si.load(text)

        def repeated(fn):
            def run():
                for _ in range(calls):
                    fn(*inputs)
            return run

        ours = best_time(repeated(program.run), args.repeat) / per / calls
        reference = None
        if not args.skip_reference:
            reference = best_time(reference_runner(text, inputs), 1) / per
        numpy_time = best_time(repeated(numpy_fn), args.repeat) / per / calls
        recorder = KernelRecorder()
        program.run(*inputs, listeners=[recorder])
        floor = floor_of(recorder, min(args.repeat, 5))["kernels"] / per
        rows.append((name, ours, reference, numpy_time, floor, target))

    a = np.ones(4, np.float32)
    measure("(a) 2000 elementwise ops, per op", elementwise_chain(), [a], numpy_chain, per=2000,
            target="interp < C++")
    measure("(a) one add: Program.run's fixed cost", ONE_ADD, [a, a], np.add, target="-", calls=1000)
    for size in (128, 256):
        x = rng.standard_normal((size, size), np.float32)
        y = rng.standard_normal((size, size), np.float32)
        measure(f"(b) {size}x{size} matmul+tanh+reduce", matmul_tanh_reduce(size), [x, y],
                lambda x, y: np.tanh(x @ y).sum(0), target="interp <= 1.5x NumPy")
    measure("(c) while loop, 10000 iterations", while_loop(10000), [np.float32(1)],
            lambda x: numpy_while(x, 10000), target="interp < C++")
    xs, w = rng.standard_normal((256, 64), np.float32), rng.standard_normal((64, 64), np.float32) / 8
    measure("(d) NumPy-heavy while loop, 256 rows", rnn_loop(256, 64), [xs, w, np.zeros(64, np.float32)],
            numpy_rnn, target="interp <= 2x floor")

    header = (f"{'program':38} {'interp':>11} {'C++ ref':>11} {'NumPy':>11} {'floor':>11} {'/C++':>7} {'/NumPy':>7} "
              f"{'/floor':>7}  target")
    print(header)
    print("-" * len(header))
    for name, ours, reference, numpy_time, floor, target in rows:
        vs_ref = f"{ours / reference:.2f}x" if reference else "-"
        print(f"{name:38} {format_time(ours):>11} {format_time(reference):>11} {format_time(numpy_time):>11} "
              f"{format_time(floor):>11} {vs_ref:>7} {ours / numpy_time:>6.2f}x {ours / floor:>6.2f}x  {target}")


if __name__ == "__main__":
    main()
