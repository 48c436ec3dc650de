"""si.explain (jaxpr, StableHLO, the run by source line) and si.graph (dataflow graph as HTML+SVG)."""

import io
import re

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.program import prepare


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
        "stablehlo.dot_general               f32[2,2] [1 2 3 -4]",
        "stablehlo.constant                  f32[] 0",
        f"── test_tools_explain.py:{first + 2} (relu_sum): return jnp.maximum(z, 0.0).sum()",
        "stablehlo.broadcast_in_dim          f32[2,2] [0 0 0 0]",
        "stablehlo.maximum                   f32[2,2] [1 2 3 0]",
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


def test_graph_of_a_run(tmp_path):
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: a * 2.0, jnp.sin(x))

    page = si.graph(f, np.float32(0.5), path=tmp_path / "f.html")
    assert (tmp_path / "f.html").read_text() == page
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 4
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "@main"     # then the loop's regions, then the function its body calls
    assert headings[1].startswith("stablehlo.while at test_tools_explain.py:") and headings[1].endswith("&lt;locals&gt;.f): cond")
    assert headings[2].endswith(".f): body") and headings[3] == "@closed_call"
    main = page.split("<section>")[1]
    program = prepare(f, [np.float32(0.5)]).program
    n_main_ops = len(program.function("main").region.steps)
    # one node per argument, op and return; one edge per operand use and returned value
    assert main.count('class="node') == 1 + n_main_ops + 1
    assert 'class="node region-op"' in main
    # values of the run: sin(0.5) * 8 = 3.8354 is the while's result
    assert "f32[] 3.8354" in main and ">f32[]</text>" in main


def test_graph_of_a_module_without_running_it():
    text = """func.func @main(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = stablehlo.add %0, %0 : tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}"""
    page = si.graph(text)
    assert page.count('class="node') == 4 and page.count('class="edge"') == 4   # x->t, t->add twice, add->return
    # edges are labelled with types; the return node lists the result types
    assert page.count(">f32[3,2]</text>") == 3 + 1 and page.count(">f32[2,3]</text>") == 2
