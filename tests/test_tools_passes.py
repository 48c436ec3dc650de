"""si.passes: XLA CPU's pipeline pass by pass on the interpreter (tools/passes.py), and the
MHLO ops its stages hold (ops/xla.py)."""

import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import stablehlo_interp as si
from stablehlo_interp.backends import xla_passes
from stablehlo_interp.cli import main

passes_module = importlib.import_module("stablehlo_interp.tools.passes")   # (si.tools.passes is the function)
CHANGES, KEEPS, NOT_RUN = passes_module.CHANGES, passes_module.KEEPS, passes_module.NOT_RUN


def log_of_exp(x):
    return jnp.log(jnp.exp(x))


LOG_LINE = log_of_exp.__code__.co_firstlineno + 1
X = np.array([1.0, 50.0, 100.0], np.float32)


def layer(x, w):
    h = jnp.tanh(x.T @ w)
    return h.sum(0), jnp.transpose(h) * 2


RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 3)).astype(np.float32)
W = RNG.standard_normal((4, 5)).astype(np.float32)


def test_algsimp_rewriting_log_of_exp_is_the_first_pass_that_changes_the_values():
    report = si.passes(log_of_exp, X)
    assert not report.ok and report.not_judged_from is None and report.compiled_differs is None
    change = report.first_change
    assert (change.stage.after, change.stage.pipeline) == ("algsimp", "simplification")
    assert change.verdict == CHANGES
    # the original program overflows exp(100) (NumPy's float32 says so); after the pass it is x, as XLA computes
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(X[2])) and report.results[0][2] == np.inf
    np.testing.assert_allclose(report.results[0][:2], X[:2], rtol=1e-6)
    np.testing.assert_array_equal(change.results[0], np.asarray(jax.jit(log_of_exp)(X)))
    np.testing.assert_array_equal(report.compiled[0], X)
    assert report.before.verdict == KEEPS and np.array_equal(report.before.results[0], report.results[0])
    assert change.outputs[0].mismatched == 1 and change.outputs[0].index == (2,)
    removed = [c for c in report.changed if c.side == "-"]
    assert any("log(" in c.instruction and f"test_tools_passes.py:{LOG_LINE}" in c.source for c in removed)
    text = str(report)
    assert "first pass that changes the values: pass algsimp (pipeline simplification)" in text
    assert "after the pass: f32[3] [1 50 100]" in text


def test_every_pass_keeps_the_values_of_a_layer_and_xla_agrees():
    report = si.passes(layer, A, W, every_stage=True)
    assert report.ok and report.compiled_differs is False
    assert len(report.runs) == report.distinct > 3
    assert all(run.verdict == KEEPS for run in report.runs)
    np.testing.assert_allclose(report.runs[-1].results[0], np.tanh(A.T @ W).sum(0), rtol=1e-5)
    assert "every pass keeps the values" in str(report)


SQUARE = RNG.standard_normal((6, 6)).astype(np.float32)
SMALL_PROGRAMS = {   # what XLA CPU's stages hold besides StableHLO: TopK (HLO's op, then its custom call with a
    # comparator), LAPACK's custom calls returning tuples, bitcasts of layouts, copies and fusions
    "top_k": (lambda x: jax.lax.top_k(x, 2), (A,)),
    "cholesky": (lambda m: jnp.linalg.cholesky(m @ m.T + 6 * jnp.eye(6)), (SQUARE,)),
    "solve": (lambda m, x: jnp.linalg.solve(m + 6 * jnp.eye(6), x), (SQUARE, SQUARE[:, :2])),
    "argsort": (lambda x: jnp.argsort(x, axis=0), (A,)),
    "loop": (lambda x: jax.lax.fori_loop(0, 4, lambda i, c: c * 1.5 + i, x), (A,)),
    "scatter": (lambda x: x.at[jnp.array([3, 1, 1])].add(1.0), (A,)),
    "transposes": (lambda x: jnp.transpose(x.reshape(2, 2, 3, 2), (2, 0, 3, 1)).reshape(3, 8) * 2, (A[:, :3].repeat(2, 1),)),
}


@pytest.mark.parametrize("name", SMALL_PROGRAMS)
def test_every_pass_keeps_the_values_of_small_programs_and_the_last_stage_is_xlas(name):
    function, arguments = SMALL_PROGRAMS[name]
    report = si.passes(function, *arguments, every_stage=True)
    assert report.ok, str(report)
    assert [run.verdict for run in report.runs] == [KEEPS] * report.distinct
    expected = jax.tree.leaves(jax.jit(function)(*arguments))
    for ours, theirs in zip(report.runs[-1].results, expected):
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=2e-5, atol=1e-6)


SUBNORMAL_PRODUCT = """func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.multiply %a, %b : tensor<f32>
  return %0 : tensor<f32>
}"""
TINY_TIMES_LARGE = (np.float32(1e-39), np.float32(1e10))   # a subnormal operand; the product is normal


def test_a_value_no_pass_changes_and_the_compiled_program_does_is_the_code_generators():
    """XLA CPU's compiled multiply flushes its subnormal operand (0, where the spec's product is
    1e-29) while every stage, run on the interpreter, keeps 1e-29: no pass made it. (The last
    stage's noise judges the compiled value from the stage's own value, not from XLA's.)"""
    report = si.passes(SUBNORMAL_PRODUCT, *TINY_TIMES_LARGE, tolerance=(0, 0), search_flags=False)
    assert report.first_change is None and report.not_judged_from is None
    assert report.results[0] == np.float32(1e-39) * np.float32(1e10) > 0   # NumPy keeps subnormals
    assert all(run.verdict == KEEPS and run.results[0] == report.results[0] for run in report.runs)
    assert report.compiled[0] == 0 and report.compiled_differs is True and not report.ok
    assert report.compiled_comparison.divergence.op == "stablehlo.multiply" and report.codegen is None
    assert "XLA's compiled program differs all the same (its code generator, not a pass)" in str(report)


@pytest.mark.slow
def test_the_code_generators_difference_is_searched_among_xlas_flags():
    report = si.passes(SUBNORMAL_PRODUCT, *TINY_TIMES_LARGE, tolerance=(0, 0))
    assert report.codegen is not None and report.codegen.differs and report.codegen.restoring == ()
    assert len(report.codegen.options) > 20
    assert "XLA's flags, each compiled alone (codegen_options):" in str(report)


FINDINGS = pathlib.Path(__file__).resolve().parent.parent / "examples" / "findings" / "xla_cpu"


@pytest.mark.parametrize("name, inputs, first_pass", [
    ("log_of_power", ["-2.0", "3.0"], "algsimp"),
    ("multiply_of_a_subnormal", ["1e-39", "1e10"], None),
    pytest.param("clz_of_a_constant", [], "constant_folding", marks=pytest.mark.slow),
    pytest.param("cbrt_of_a_subnormal", ["1.4e-45"], None, marks=pytest.mark.slow),
    pytest.param("atan2_of_subnormals", ["-1.4e-45"], None, marks=pytest.mark.slow),
    pytest.param("sign_of_a_complex_subnormal", ["5e-324+0j"], None, marks=pytest.mark.slow),
    pytest.param("divide_of_subnormals", ["1.4e-45"], None, marks=pytest.mark.slow),
    pytest.param("convolution_over_lhs_dilation", ["[[[1, 2]]]", "[[[1e999]]]"], None, marks=pytest.mark.slow),
])
def test_each_xla_cpu_finding_is_a_pass_or_the_code_generator(name, inputs, first_pass, capsys):
    """docs/findings.md's table: the first pass that changes the value, or none (every pass
    keeps it and XLA's compiled program does not), as the command line says it."""
    command = ["passes", "--no-flags", str(FINDINGS / f"{name}.mlir"), "--rtol", "0", "--atol", "0"]
    assert main(command + [f"--input={value}" for value in inputs]) == 1
    text = capsys.readouterr().out
    if first_pass is None:
        assert "every pass keeps the values" in text
        assert "XLA's compiled program differs all the same (its code generator, not a pass)" in text
    else:
        assert f"first pass that changes the values: pass {first_pass} (pipeline simplification)" in text


def test_a_program_with_host_callbacks_is_refused_with_the_way_out_for_equinox():
    def checked(x):
        jax.debug.callback(lambda v: None, x)
        return x + 1

    with pytest.raises(si.InterpreterError, match="host callbacks cannot be called .*EQX_ON_ERROR=nan"):
        si.passes(checked, np.float32(1))


SOLVER = """
import sys
sys.path.insert(0, "tests")
import jax
import stablehlo_interp as si
from zoo import PROGRAMS
with jax.enable_x64(False):
    program = PROGRAMS["optimistix_bfgs_logistic"]()
    report = si.passes(jax.jit(program.function), *program.args)
print(report.ok, report.distinct, report.compiled_differs)
"""


@pytest.mark.slow
def test_a_quasi_newton_solver_with_its_line_search_every_pass_keeps_the_values():
    """Optimistix's BFGS (Equinox's checks made values by EQX_ON_ERROR=nan, read at import):
    a solver's loops and decisions through every stage, no false alarm."""
    import os
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", SOLVER], cwd=root, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, EQX_ON_ERROR="nan"))
    ok, distinct, compiled_differs = done.stdout.split()
    assert (ok, compiled_differs) == ("True", "False") and int(distinct) > 10, done.stderr[-2000:]


def test_bisection_finds_the_pass_running_every_stage_finds():
    bisected, every = si.passes(log_of_exp, X), si.passes(log_of_exp, X, every_stage=True)
    assert bisected.first_change.stage.name == every.first_change.stage.name == "pass algsimp (pipeline simplification)"


@pytest.mark.parametrize("verdicts, first", [
    ([KEEPS] * 9, None), ([KEEPS] * 4 + [CHANGES] * 5, 4), ([CHANGES] * 3, 0), ([KEEPS, KEEPS, NOT_RUN], 2),
])
def test_the_first_stage_that_does_not_keep_the_values(verdicts, first):
    class Run:
        def __init__(self, verdict):
            self.verdict = verdict

    seen = []

    def run(position):
        seen.append(position)
        return Run(verdicts[position])

    assert passes_module._first_not_keeping(len(verdicts), run, every_stage=False) == first
    assert passes_module._first_not_keeping(len(verdicts), run, every_stage=True) == first
    assert len(set(seen)) <= len(verdicts)


def test_a_stage_the_translator_refuses_is_not_judged_nor_any_after_it(monkeypatch):
    compile_pipeline, translate, refused_from = xla_passes.compile_pipeline, xla_passes.translate, []

    def compiling(module_text, partitions):
        stages = compile_pipeline(module_text, partitions)
        refused_from.append(next(s.order for s in stages if s.after == "layout-assignment"))
        return stages

    def refusing(stage, partitions):
        if stage.order >= refused_from[0]:
            raise xla_passes.TranslationError("jaxlib's translator refused it: (a test)")
        return translate(stage, partitions)

    monkeypatch.setattr(passes_module, "compile_pipeline", compiling)
    monkeypatch.setattr(passes_module, "translate", refusing)
    report = si.passes(layer, A, W)
    assert report.first_change is None and not report.ok and report.compiled_differs is None
    assert report.not_judged_from.stage.after == "layout-assignment"
    assert report.not_judged_from.verdict == NOT_RUN
    assert str(report).splitlines()[1] == ("not judged from pass layout-assignment (pipeline "
                                           "HLO_passes_through_layout_assignment) on: jaxlib's translator refused it: "
                                           "(a test)")


def test_a_module_the_translator_cannot_read_is_a_translation_error():
    garbage = xla_passes.Stage(0, "p", "pipeline-start", "x", b"\x08\x01garbage", "")
    with pytest.raises(xla_passes.TranslationError, match="refused"):
        xla_passes.translate(garbage)


def test_flax_linen_training_step_every_pass_keeps_the_values():
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from zoo import PROGRAMS

    program = PROGRAMS["flax_linen_mlp"]()
    report = si.passes(program.function, *program.args)
    assert report.ok, str(report)
    assert report.runs[0].stage.order == 0 and report.runs[-1].stage.order == report.stages[-1].order
    assert len(report.runs) < report.distinct / 3   # bisected: the first, the last and a few between


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flax_nnx_transformer_lm", "haiku_mlp", "keras_mlp"])
def test_zoo_every_pass_keeps_the_values(name):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from zoo import PROGRAMS

    program = PROGRAMS[name]()
    report = si.passes(program.function, *program.args, every_stage=True)
    assert report.first_change is None and report.not_judged_from is None, str(report)


@pytest.mark.slow
def test_zoo_sharded_lm_no_pass_changes_the_values_on_8_devices():
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from zoo import SHARDED

    step, arguments = SHARDED["sharded_flax_nnx_lm"]().sharded("cpu")
    report = si.passes(step, *arguments, every_stage=True)
    assert report.first_change is None, str(report)
    per_device = [run for run in report.runs if run.layout is not None]
    assert len(per_device) >= 3 and all(run.verdict == KEEPS for run in per_device)


def test_the_command_line_names_the_pass(tmp_path, capsys):
    path = tmp_path / "log_of_exp.mlir"
    path.write_text(jax.jit(log_of_exp).lower(X).as_text(debug_info=True))
    assert main(["passes", str(path), "--input", "[1, 50, 100]"]) == 1
    out = capsys.readouterr().out
    assert "first pass that changes the values: pass algsimp (pipeline simplification)" in out


# ------------------------------------------------------------------ sharded programs


def _on_mesh(function, *specs):
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices("cpu")[:8])
    return jax.jit(function, in_shardings=tuple(NamedSharding(mesh, PartitionSpec(*spec)) for spec in specs),
                   out_shardings=NamedSharding(mesh, PartitionSpec()))


def test_the_spmd_partitioners_per_device_program_runs_on_the_devices_and_keeps_the_values():
    x = np.arange(64, dtype=np.float32).reshape(8, 8) / 10
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    step = _on_mesh(lambda x, w: jnp.tanh(x @ w).sum(0), ("data", "model"), ("model", None))
    report = si.passes(step, x, w, every_stage=True)
    assert report.ok and report.devices == 8, str(report)
    partitioned = [run for run in report.runs if run.layout is not None]
    assert partitioned and all(run.verdict == KEEPS for run in partitioned)   # each device's program, on the grid
    assert any("spmd-partitioning" in (run.stage.ran, run.stage.after) for run in partitioned)
    np.testing.assert_allclose(report.compiled[0], np.asarray(step(x, w)), rtol=1e-6)   # XLA's, assembled
    np.testing.assert_allclose(partitioned[-1].results[0], np.tanh(x @ w).sum(0), rtol=1e-5)


def test_collectives_over_a_reordered_mesh_sum_the_devices_xla_names():
    # the vocabulary sharded on "model" of a 2x4 mesh: XLA's text groups the gathered rows' sums over a mesh of
    # devices in transposed order (device_ids=([2,4]T(1,0))), an order jaxlib's translator drops
    table = RNG.standard_normal((64, 32)).astype(np.float32)
    ids = RNG.integers(0, 64, (4, 16)).astype(np.int32)
    step = _on_mesh(lambda table, ids: jax.grad(lambda t: (t[ids] ** 2).sum())(table), ("model", None), ("data",))
    report = si.passes(step, table, ids, every_stage=True)
    assert report.ok, str(report)
    assert any(xla_passes._REORDERED_MESH.search(run.stage.text) for run in report.runs if run.layout is not None)
    expected = np.zeros_like(table)
    np.add.at(expected, ids.reshape(-1), 2 * table[ids.reshape(-1)])
    np.testing.assert_allclose(report.runs[-1].results[0], expected, rtol=1e-6)
    np.testing.assert_allclose(report.compiled[0], np.asarray(step(table, ids)), rtol=1e-6)


def test_groups_over_a_mesh_of_reordered_devices_read_from_xlas_text():
    text = ("%all-reduce = f32[2]{0} all-reduce(%x), channel_id=4, replica_groups=mesh['axis_0'=4,'axis_1'=2], "
            "device_ids=([2,4]T(1,0)) {'axis_0'}, use_global_device_ids=true, to_apply=%add\n"
            "%all-reduce.1 = f32[2]{0} all-reduce(%y), channel_id=6, replica_groups=mesh['a'=2,'b'=4], "
            "device_ids=([8]) {'b', 'a'}, use_global_device_ids=true, to_apply=%add")
    # mesh [[0, 4], [1, 5], [2, 6], [3, 7]] (axis_0 x axis_1): along axis_0, for each axis_1 coordinate
    assert xla_passes.reordered_groups(text) == {4: [[0, 1, 2, 3], [4, 5, 6, 7]],
                                                 6: [[0, 4, 1, 5, 2, 6, 3, 7]]}
    with pytest.raises(xla_passes.TranslationError, match="does not name plainly"):
        xla_passes.reordered_groups(text.replace("{'axis_0'}", "{'axis_0':(1)2}"))


# ------------------------------------------------------------------ the MHLO ops of the stages


def _run(body: str, *arguments):
    return si.load(body).run(*arguments)


def test_bitcast_reads_the_operands_memory_in_the_results_layout():
    # row-major 2x3 read as a column-major 3x2 ({0,1}: dimension 0 minor): element (i, j) at i + 3j, a transpose
    text = """func.func @main(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
      %0 = mhlo.bitcast %a {result_layout = dense<[0, 1]> : tensor<2xindex>,
                            source_layout = dense<[1, 0]> : tensor<2xindex>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      return %0 : tensor<3x2xf32>
    }"""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = _run(text, a)
    np.testing.assert_array_equal(out, [[0, 3], [1, 4], [2, 5]])


def test_bitcast_that_drops_a_unit_dimension_and_to_a_scalar():
    text = """func.func @main(%a: tensor<4x1xi32>, %b: tensor<1xui32>) -> (tensor<4xi32>, tensor<ui32>) {
      %0 = mhlo.bitcast %a {result_layout = dense<0> : tensor<1xindex>,
                            source_layout = dense<[1, 0]> : tensor<2xindex>} : (tensor<4x1xi32>) -> tensor<4xi32>
      %1 = mhlo.bitcast %b {result_layout = dense<> : tensor<0xindex>,
                            source_layout = dense<0> : tensor<1xindex>} : (tensor<1xui32>) -> tensor<ui32>
      return %0, %1 : tensor<4xi32>, tensor<ui32>
    }"""
    out, scalar = _run(text, np.arange(4, dtype=np.int32).reshape(4, 1), np.array([7], np.uint32))
    np.testing.assert_array_equal(out, [0, 1, 2, 3])
    assert scalar.shape == () and scalar == 7


def test_fusion_computes_its_region_and_copy_is_its_operand():
    text = """func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "mhlo.fusion"(%a, %b) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
      ^bb0(%x: tensor<3xf32>, %y: tensor<3xf32>):
        %1 = stablehlo.multiply %x, %y : tensor<3xf32>
        %2 = stablehlo.add %1, %x : tensor<3xf32>
        mhlo.return %2 : tensor<3xf32>
      }) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %3 = mhlo.copy %0 : tensor<3xf32>
      return %3 : tensor<3xf32>
    }"""
    a, b = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    (out,) = _run(text, a, b)
    np.testing.assert_array_equal(out, a * b + a)
