"""Whole-op benchmarks: convolution, gather/scatter, sort, an MLP training step.

Each program is a JAX function; it runs as lowered StableHLO on stablehlo_interp,
compiled by XLA for CPU, as hand-written NumPy, and on jaxlib's C++ reference
interpreter (in a child process, given --reference-timeout seconds: it works
element by element, so large programs do not finish). Target: every program
within 3x of its hand-written NumPy version.

    python benchmarks/ops_bench.py [--repeat N] [--reference-timeout S]
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import best_time, format_time

import stablehlo_interp as si

rng = np.random.default_rng(0)


# ------------------------------------------------------------------ programs


def conv2d_case():
    x = rng.standard_normal((8, 32, 32, 16), np.float32)
    w = rng.standard_normal((3, 3, 16, 32), np.float32)

    def jax_fn(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def numpy_fn(x, w):
        padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))  # N,H,W,C,3,3
        return np.tensordot(windows, w, axes=([4, 5, 3], [0, 1, 2]))

    return "conv2d 8x32x32x16 -> 32, 3x3", jax_fn, numpy_fn, (x, w)


def embedding_case():
    table = rng.standard_normal((50_000, 64), np.float32)
    ids = rng.integers(0, 50_000, 200_000).astype(np.int32)
    segments = np.sort(rng.integers(0, 1000, 200_000)).astype(np.int32)

    def jax_fn(table, ids, segments):
        return jax.ops.segment_sum(jnp.take(table, ids, axis=0), segments, num_segments=1000)

    def numpy_fn(table, ids, segments):
        out = np.zeros((1000, 64), np.float32)
        np.add.at(out, segments, table[ids])
        return out

    return "embedding lookup + segment_sum", jax_fn, numpy_fn, (table, ids, segments)


def sort_case():
    x = rng.standard_normal(1_000_000).astype(np.float32)
    return "sort 1M f32 (stable)", jnp.sort, lambda x: np.sort(x, kind="stable"), (x,)


def mlp_case():
    sizes = [784, 512, 256, 10]
    params = [(rng.standard_normal((a, b), np.float32) * 0.05, np.zeros(b, np.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    flat = [p for layer in params for p in layer]
    x = rng.standard_normal((128, 784), np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]

    def loss(flat, x, labels):
        h = x
        for i in range(0, len(flat) - 2, 2):
            h = jax.nn.relu(h @ flat[i] + flat[i + 1])
        logits = h @ flat[-2] + flat[-1]
        return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))

    def jax_fn(*args):
        flat, (x, labels) = list(args[:-2]), args[-2:]
        grads = jax.grad(loss)(flat, x, labels)
        return [p - 0.01 * g for p, g in zip(flat, grads)]

    def numpy_fn(*args):
        flat, (x, labels) = list(args[:-2]), args[-2:]
        activations, h = [x], x
        for i in range(0, len(flat) - 2, 2):
            h = np.maximum(h @ flat[i] + flat[i + 1], 0)
            activations.append(h)
        logits = h @ flat[-2] + flat[-1]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        softmax = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
        delta = (softmax - labels) / len(x)
        grads = []
        for i in range(len(flat) - 2, -1, -2):
            grads[:0] = [activations[i // 2].T @ delta, delta.sum(axis=0)]
            if i:
                delta = (delta @ flat[i].T) * (activations[i // 2] > 0)
        return [p - np.float32(0.01) * g for p, g in zip(flat, grads)]

    return "MLP training step 784-512-256-10, batch 128", jax_fn, numpy_fn, (*flat, x, labels)


# --------------------------------------------------------- reference interpreter

_REFERENCE_CHILD = r"""
import pickle, sys, time
import numpy as np
from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo
text, args = pickle.load(sys.stdin.buffer)
ELEMENT = {"float32": ir.F32Type.get, "int32": lambda: ir.IntegerType.get_signless(32)}
with jax_mlir.make_ir_context(), ir.Location.unknown():
    module = ir.Module.parse(text)
    attrs = [ir.DenseElementsAttr.get(np.atleast_1d(a), type=ir.RankedTensorType.get(a.shape, ELEMENT[a.dtype.name]()))
             for a in args]
    start = time.perf_counter()
    stablehlo.eval_module(module, attrs)
    print(time.perf_counter() - start)
"""


def reference_time(text: str, args, timeout: float) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", _REFERENCE_CHILD], input=pickle.dumps((text, args)),
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f} s"
    if done.returncode != 0:
        return "fails"
    return format_time(float(done.stdout.decode().strip().splitlines()[-1]))




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-timeout", type=float, default=30.0)
    options = parser.parse_args()
    header = (f"{'program':44} {'interp':>10} {'XLA CPU':>10} {'NumPy':>10} {'C++ ref':>10} "
              f"{'/XLA':>7} {'/NumPy':>7}  target")
    print(header)
    print("-" * len(header))
    for name, jax_fn, numpy_fn, args in (conv2d_case(), embedding_case(), sort_case(), mlp_case()):
        lowered = jax.jit(jax_fn).lower(*args)
        program = si.load(lowered)
        ours = best_time(lambda: program.run(*args), options.repeat)
        compiled = jax.jit(jax_fn)
        xla = best_time(lambda: jax.block_until_ready(compiled(*args)), options.repeat)
        numpy_time = best_time(lambda: numpy_fn(*args), options.repeat)
        reference = reference_time(lowered.as_text(), [np.asarray(a) for a in args], options.reference_timeout)
        print(f"{name:44} {format_time(ours):>10} {format_time(xla):>10} {format_time(numpy_time):>10} "
              f"{reference:>10} {ours / xla:>6.1f}x {ours / numpy_time:>6.2f}x  interp <= 3x NumPy")


if __name__ == "__main__":
    main()
