"""The tools on .mlir files from the command line: trace, explain, explore, compare."""

import json

import numpy as np

import stablehlo_interp as si
from stablehlo_interp.cli import main
from test_tools_trace import DOUBLING, DOUBLING_TRANSCRIPT


def cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trace(capsys, tmp_path):
    path = write(tmp_path, "doubling.mlir", DOUBLING)
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 3]", "-i", "5", "--json", tmp_path / "t.json")
    assert status == 0 and out == DOUBLING_TRANSCRIPT + "\n"
    records = json.loads((tmp_path / "t.json").read_text())
    assert len(records) == 35 and records[-1]["results"] == ["f32[] 192"]
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 3]", "-i", "5", "--head", "9")
    assert status == 0 and "folded" not in out and "iteration 4" in out


def test_trace_nonfinite_first_nonfinite_and_probe(capsys, tmp_path):
    path = write(tmp_path, "doubling.mlir", DOUBLING)
    # 3e38 doubled overflows in iteration 0; iteration 1 doubles the inf; the sum adds it
    the_multiply = [
        "  source: %w = stablehlo.multiply %v, %b : tensor<3xf32>",
        "  result #0 has 1 inf (first at [1]): f32[3] [2 inf 6]",
        "  operand #0: f32[3] [1 3e+38 3]",
        "  operand #1: f32[3] [2 2 2]",
        "  inside stablehlo.while at doubling.mlir:3: body, iteration 0",
    ]
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 3e38, 3]", "-i", "2", "--nonfinite")
    assert status == 1   # a finding
    assert out.splitlines() == [
        "non-finite result #0: f32[3] [4 inf 12]",
        "non-finite result #1: f32[] inf",
        "inf made by stablehlo.multiply at doubling.mlir:10",
        *the_multiply,
        "  reaches results #0, #1: stablehlo.multiply (doubling.mlir:10) → stablehlo.while (doubling.mlir:3) "
        "→ result #0",
    ]
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 3]", "-i", "2", "--nonfinite")
    assert status == 0 and out == "all results finite\n"
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 3e38, 3]", "-i", "2", "--first-nonfinite")
    assert status == 1
    assert out.splitlines() == ["first non-finite value: stablehlo.multiply at doubling.mlir:10", *the_multiply]
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 3]", "-i", "2", "--first-nonfinite")
    assert status == 0 and out == "every value is finite\n"
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 3]", "-i", "3", "--probe", tmp_path / "p.npz",
                         "--select", "multiply", "--every-iteration")
    assert status == 0 and out == f"saved 3 values to {tmp_path / 'p.npz'}\n"
    values = [p.value for p in si.load_probes(tmp_path / "p.npz")]
    np.testing.assert_array_equal(values, [[2, 4, 6], [4, 8, 12], [8, 16, 24]])


def test_explain(capsys, tmp_path):
    path = write(tmp_path, "doubling.mlir", DOUBLING)
    status, out, _ = cli(capsys, "explain", path, "-i", "[1, 2, 3]", "-i", "1")
    assert status == 0
    assert out.startswith("== StableHLO ==\nmodule {\n  func.func @main(")
    assert "── doubling.mlir:10: %w = stablehlo.multiply %v, %b : tensor<3xf32>" in out
    assert out.endswith("== results ==\nresult #0: f32[3] [2 4 6]\nresult #1: f32[] 12\n")


def test_explore(capsys, tmp_path):
    path = write(tmp_path, "doubling.mlir", DOUBLING)
    status, out, _ = cli(capsys, "explore", path, "-i", "[1, 3e38, 3]", "-i", "2")
    page = tmp_path / "doubling.html"
    # 1 constant, the while, cond 3 times (1 op), body twice (5 ops), then constant and reduce
    assert status == 0 and out.splitlines()[0] == f"wrote {page}: 17 ops run"
    assert out.splitlines()[1:4] == ["non-finite result #0: f32[3] [4 inf 12]", "non-finite result #1: f32[] inf",
                                     "inf made by stablehlo.multiply at doubling.mlir:10"]
    data = explorer_data(page.read_text())
    # a module from a file: its own text is the source the ops point at
    multiply = next(step for step in data["steps"].values() if step["op"] == "stablehlo.multiply")
    assert data["files"][0]["name"] == "doubling.mlir" and multiply["line"] == 10
    # the module as printed (a "module {" line first) has it on line 11
    assert multiply["hlo"] == 11 and " = stablehlo.multiply " in data["stablehlo"][10]
    overlay = data["overlays"]["nonfinite"]
    record = next(r for r in data["records"]["ops"] if r["n"] == overlay["record"])
    assert record["s"] == multiply["id"] and record["c"] == 0 and record["res"][0]["s"] == "f32[3] [2 inf 6]"


def test_explore_without_inputs_draws_the_module_without_running_it(capsys, tmp_path):
    path = write(tmp_path, "doubling.mlir", DOUBLING)
    status, out, _ = cli(capsys, "explore", path, "-o", tmp_path / "structure.html")
    assert status == 0 and out == f"wrote {tmp_path / 'structure.html'}: 0 ops run\n"
    data = explorer_data((tmp_path / "structure.html").read_text())
    assert not data["ran"] and data["records"] == {"ops": [], "total": 0, "arguments": []}
    # main: constant, while (cond: compare; body: constant, broadcast, multiply, constant, add), constant, reduce
    # (and the reduce's body: add)
    assert len(data["steps"]) == 11 and data["overlays"] == {}


def explorer_data(page: str) -> dict:
    """The JSON an explorer page carries."""
    start = page.index('<script type="application/json" id="explorer-data">') + len(
        '<script type="application/json" id="explorer-data">')
    return json.loads(page[start:page.index("</script>", start)])


# The spec's scatter skips each out-of-bounds element of a window; XLA skips the
# whole window (see tests/test_indexing.py). By hand: x * 2 = 0; the spec adds
# 1 at [3, 4] (index 3), at [0] (index -1: element -1 skipped), at [4] (index 4):
# [1 0 0 1 2]; XLA only the window at 3: [0 0 0 1 1].
SCATTER = """func.func @main(%a0: tensor<5xf32>, %a1: tensor<4x1xi32>, %a2: tensor<4x2xf32>) -> (tensor<5xf32>) {
  %two = stablehlo.constant dense<2.0> : tensor<5xf32>
  %x = stablehlo.multiply %a0, %two : tensor<5xf32>
  %out = "stablehlo.scatter"(%x, %a1, %a2) ({
  ^bb0(%x0: tensor<f32>, %y0: tensor<f32>):
    %r_0 = stablehlo.add %x0, %y0 : tensor<f32>
    stablehlo.return %r_0 : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false} : (tensor<5xf32>, tensor<4x1xi32>, tensor<4x2xf32>) -> (tensor<5xf32>)
  %e = stablehlo.exponential %out : tensor<5xf32>
  return %e : tensor<5xf32>
}
"""


def test_compare(capsys, tmp_path):
    path = write(tmp_path, "scatter.mlir", SCATTER)
    np.savez(tmp_path / "args.npz", np.zeros(5, np.float32), np.array([[3], [-1], [4], [5]], np.int32),
             np.ones((4, 2), np.float32))
    status, out, _ = cli(capsys, "compare", path, "-i", tmp_path / "args.npz")
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith("result #0 differs (beyond bound: it depends on an op beyond its rounding bound): "
                               "2 of 5 elements differ; largest at [4]: 7.3891 (interpreter) vs 2.7183 (cpu)")
    # the scatter's sum of n terms (n = 2 where the spec adds one update) may be 6·2^-24·Σ|terms| = 3.6e-7 off
    assert lines[1:7] == [
        "ops whose value differs: 1 beyond its bound",
        "first divergent op: stablehlo.scatter (op #2 of the entry function) at scatter.mlir:4",
        '  source: %out = "stablehlo.scatter"(%x, %a1, %a2) ({',
        "  beyond its rounding bound (a sum of n terms: (2n+2)·u·Σ|terms|)",
        "  result #0: 2 of 5 elements are beyond the bound; largest at [0]: 1 (interpreter) vs 0 (cpu), bound there "
        "3.5763e-07; max abs error 1, max 1056964609 ULP",   # 0x3f800000 less the 2**23 - 1 subnormal steps as one
        "    interpreter: f32[5] [1 0 0 1 2]",
    ]
    assert lines[7] == "    cpu: f32[5] [0 0 0 1 1]"
    assert "the difference arises inside its regions (body)" in out

    path = write(tmp_path, "doubling.mlir", DOUBLING)
    status, out, _ = cli(capsys, "compare", path, "-i", "[1, 2, 3]", "-i", "4", "--rtol", "0", "--atol", "0")
    assert status == 0 and out == "the interpreter and cpu agree on all 2 results\n"
    status, _, err = cli(capsys, "compare", path, "-i", "[1, 2, 3]", "-i", "4", "--rtol", "0")
    assert status == 2 and "give both --rtol and --atol" in err


LOG_OF_EXP_TIMES_X = """func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.exponential %x : tensor<3xf32>
  %1 = stablehlo.log %0 : tensor<3xf32>
  %2 = stablehlo.multiply %1, %x : tensor<3xf32>
  return %2 : tensor<3xf32>
}"""


def test_explore_xla_stages_of_a_module_drawn_without_running_it(capsys, tmp_path):
    path = write(tmp_path, "log_of_exp.mlir", LOG_OF_EXP_TIMES_X)
    status, out, _ = cli(capsys, "explore", path, "--xla-stages")
    assert status == 0 and out == (f"wrote {tmp_path / 'log_of_exp.html'}: 0 ops run\n"
                                   "XLA CPU: 2 passes changed the program (not run: no inputs)\n")
    xla = explorer_data((tmp_path / "log_of_exp.html").read_text())["xla"]
    # algsimp rewrites log(exp(x)) * x as x * x: the three instructions out, one in; nothing ran, so no verdict
    algsimp = xla["passes"][0]
    assert algsimp["name"] == "pass algsimp (pipeline simplification)"
    assert (algsimp["removed"], algsimp["added"]) == (3, 1)
    assert [change[1].split(" = ")[1] for change in algsimp["changes"]] == [
        "f32[3]{0} exponential(%Arg_0.1)", "f32[3]{0} log(%exponential.1)",
        "f32[3]{0} multiply(%log.1, %Arg_0.1)", "f32[3]{0} multiply(%Arg_0.1, %Arg_0.1)"]
    assert all(entry["verdict"] is None and not entry["values"] for entry in xla["passes"]) and xla["report"] is None
    # the optimized program: the multiply, fused
    assert any(" = f32[3]{0} fusion(%Arg_0.1), kind=kLoop" in line["text"] for line in xla["lines"])
    # with inputs, si.passes judges the stages: algsimp changes exp(100)'s inf into 100 * 100, a finding
    status, out, _ = cli(capsys, "explore", path, "--xla-stages", "-i", "[1, 50, 100]")
    assert status == 1 and "first pass that changes the values: pass algsimp (pipeline simplification)" in out
    assert "after the pass: f32[3] [1 2500 10000]" in out
