"""si.explain: jaxpr, StableHLO, the run by source line."""

import io
import re

import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si


def relu_sum(x, y):
    z = x @ y
    return jnp.maximum(z, 0.0).sum()


X = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
Y = np.array([[1.0, 0.0], [0.0, -1.0]], np.float32)


def sections(text: str) -> dict:
    parts = re.split(r"^== (.*) ==$", text, flags=re.M)
    return {title: body.strip("\n") for title, body in zip(parts[1::2], parts[2::2])}


def test_explain_a_function():
    out = io.StringIO()
    explanation = si.explain(relu_sum, X, Y, file=out)
    assert out.getvalue() == str(explanation) + "\n"
    parts = sections(out.getvalue())
    assert list(parts) == ["jaxpr", "StableHLO", "run: each op and its results, under the source line it came from",
                           "results"]
    assert "dot_general" in parts["jaxpr"] and "reduce_sum" in parts["jaxpr"]
    assert parts["StableHLO"].startswith("module @jit_relu_sum")
    assert "stablehlo.dot_general" in parts["StableHLO"] and "loc(" not in parts["StableHLO"]
    first = relu_sum.__code__.co_firstlineno
    # x @ y = [[1, 2], [3, -4]]; relu -> [[1, 2], [3, 0]]; sum 6 (by hand)
    assert parts["run: each op and its results, under the source line it came from"].splitlines() == [
        f"── test_tools_explain.py:{first + 1} (relu_sum): z = x @ y",
        "stablehlo.dot_general               f32[2,2] [[1 2] [3 -4]]",
        "stablehlo.constant                  f32[] 0",
        f"── test_tools_explain.py:{first + 2} (relu_sum): return jnp.maximum(z, 0.0).sum()",
        "stablehlo.broadcast_in_dim          f32[2,2] [[0 0] [0 0]]",
        "stablehlo.maximum                   f32[2,2] [[1 2] [3 0]]",
        "stablehlo.constant                  f32[] 0",
        "stablehlo.reduce                    f32[] 6",
    ]
    assert parts["results"] == "result #0: f32[] 6"
    assert repr(explanation) == "<Explanation: 6 ops run>"


def test_explain_a_module_has_no_jaxpr(tmp_path):
    path = tmp_path / "neg.mlir"
    path.write_text("""func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.negate %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}""")
    out = io.StringIO()
    explanation = si.explain(path, np.array([1.0, -2.0], np.float32), file=out)
    parts = sections(out.getvalue())
    assert explanation.jaxpr is None and "jaxpr" not in parts
    assert parts["run: each op and its results, under the source line it came from"].splitlines() == [
        "── neg.mlir:2: %0 = stablehlo.negate %x : tensor<2xf32>",
        "stablehlo.negate                    f32[2] [-1 2]",
    ]
