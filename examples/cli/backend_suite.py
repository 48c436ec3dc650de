"""Check a backend's results against the StableHLO spec with `stablehlo-interp test`.

For each test case (a JAX function and its inputs) this script

1. runs the case on the backend under test: here XLA's CPU backend through
   jax.jit, the stand-in for yours;
2. writes one module per case to a test file: the lowered program (@main), and
   a test function that feeds it the inputs as constants and checks the result
   against the backend's output (check.expect_close for floats, within
   MAX_ULP ULPs; check.expect_eq otherwise);
3. runs `stablehlo-interp test` on the file: every FAILED line is a case where
   the backend and the reference interpreter disagree.

    python examples/cli/backend_suite.py [OUT.mlir]
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.ir.types import TensorType

jax.config.update("jax_enable_x64", True)
MAX_ULP = 2

rng = np.random.default_rng(0)
CASES = {
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), [rng.standard_normal((3, 5), np.float32)]),
    # Sums without cancellation: XLA CPU fuses the dot's multiply-adds, the spec rounds
    # each product, and a sum that cancels would show that difference in many ULPs.
    "matmul_relu": (lambda a, b: jax.nn.relu(a @ b),
                    [rng.uniform(0.5, 1.5, (4, 3)).astype(np.float32),
                     (rng.uniform(0.5, 1.5, (3, 2)) * [1, -1]).astype(np.float32)]),
    "integer_wraparound": (lambda x: x * np.int8(3) + np.int8(100), [np.arange(-4, 4, dtype=np.int8)]),
    "cumulative_max": (lambda x: jax.lax.associative_scan(jnp.maximum, x), [rng.standard_normal(6)]),
    "while_loop": (lambda x: jax.lax.fori_loop(0, 10, lambda i, a: a * 0.5 + jnp.sin(a), x),
                   [np.linspace(-2, 2, 4, dtype=np.float32)]),
}


def dense(array: np.ndarray) -> str:
    """An MLIR dense attribute holding exactly ``array``'s bits."""
    raw = np.ascontiguousarray(array).tobytes()
    return f'dense<"0x{raw.hex().upper()}"> : {TensorType.like(array)}'


def case_module(name: str, fn, inputs) -> str:
    lowered = jax.jit(fn).lower(*inputs)
    outputs = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]  # the backend
    main = si.load(lowered).functions["main"]
    lines = [f"func.func @{name}() {{"]
    for i, x in enumerate(inputs):
        lines.append(f"  %x{i} = stablehlo.constant {dense(x)}")
    args = ", ".join(f"%x{i}" for i in range(len(inputs)))
    arg_types = ", ".join(map(str, main.arg_types))
    result_types = ", ".join(map(str, main.result_types))
    lines.append(f"  %r:{len(outputs)} = func.call @main({args}) : ({arg_types}) -> ({result_types})")
    for i, (out, t) in enumerate(zip(outputs, main.result_types)):
        lines.append(f"  %e{i} = stablehlo.constant {dense(out)}")
        if t.is_float or t.is_complex:
            lines.append(f"  check.expect_close %r#{i}, %e{i}, max_ulp_difference = {MAX_ULP} : {t}, {t}")
        else:
            lines.append(f"  check.expect_eq %r#{i}, %e{i} : {t}")
    lines += ["  func.return", "}"]
    module = lowered.as_text()
    body_end = module.rstrip().rfind("}")  # insert the test into the lowered module
    return module[:body_end] + "\n".join(lines) + "\n}\n"


def main(out_path="backend_suite.mlir") -> int:
    text = "\n// -----\n".join(case_module(name, fn, inputs) for name, (fn, inputs) in CASES.items())
    with open(out_path, "w") as f:
        f.write(text)
    print(f"wrote {out_path}: {len(CASES)} cases")
    return subprocess.run([sys.executable, "-m", "stablehlo_interp", "test", out_path, "--verbose"]).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
