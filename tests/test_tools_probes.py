"""si.probe: intermediate values saved to .npz with an index, inside regions too."""

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si


def cumulative_logs(xs):
    def body(total, x):
        total = total + jnp.log(x)
        return total, total
    return jax.lax.scan(body, 0.0, xs)


XS = np.array([1.0, 2.0, 4.0], np.float32)
LOGS = np.log(XS)


def test_every_iteration_of_one_op(tmp_path):
    path = tmp_path / "logs.npz"
    si.probe(cumulative_logs, XS, path=path, select="log", every_iteration=True)
    probes = si.load_probes(path)
    assert len(probes) == 3
    for iteration, probe in enumerate(probes):
        assert probe.op == "stablehlo.log" and probe.result == 0 and probe.type == "f32[]"
        assert probe.inside[0].endswith(f"body, iteration {iteration}")
        assert probe.inside[1].startswith("func.call @closed_call")
        np.testing.assert_allclose(probe.value, LOGS[iteration], rtol=1e-6)
    assert probes.probes[0].source.endswith(f"test_tools_probes.py:{cumulative_logs.__code__.co_firstlineno + 2}")
    raw = np.load(path)   # a plain .npz: arrays by key, and the index as JSON text
    assert sorted(raw.files) == ["__index__", "v0000", "v0001", "v0002"]


def test_last_iteration_by_default_and_selection_by_source_line(tmp_path):
    line = cumulative_logs.__code__.co_firstlineno + 2
    path = tmp_path / "line.npz"
    si.probe(cumulative_logs, XS, path=path, select=f"test_tools_probes.py:{line}")
    probes = si.load_probes(path)
    # that line makes the log, the add and (without jax_enable_x64, which other
    # tests switch on) a convert between them; one value each, the last iteration's
    ops = [p.op for p in probes]
    assert ops in (["stablehlo.log", "stablehlo.convert", "stablehlo.add"], ["stablehlo.log", "stablehlo.add"])
    np.testing.assert_allclose(probes.find("add")[0].value, LOGS.sum(), rtol=1e-6)
    assert all(p.inside[0].endswith("iteration 2") for p in probes)


def test_all_values_of_a_module(tmp_path):
    text = """func.func @main(%x: tensor<2xi32>) -> tuple<tensor<2xi32>> {
  %0 = stablehlo.multiply %x, %x : tensor<2xi32>
  %1 = stablehlo.add %0, %x : tensor<2xi32>
  %2 = stablehlo.tuple %1 : tuple<tensor<2xi32>>
  return %2 : tuple<tensor<2xi32>>
}"""
    path = tmp_path / "all.npz"
    recorder = si.probe(text, np.array([2, 3], np.int32), path=path)
    probes = si.load_probes(path)
    assert [p.op for p in probes] == ["stablehlo.multiply", "stablehlo.add"]   # tuples are not saved
    np.testing.assert_array_equal(probes["v0001"].value, [6, 12])
    assert probes.find(source="all.mlir") == [] and len(recorder.probes) == 2
    assert str(probes).splitlines()[0] == "v0000 stablehlo.multiply result #0: i32[2] [4 9]"
