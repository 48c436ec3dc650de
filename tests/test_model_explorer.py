"""A run's findings as Model Explorer node data (stablehlo_interp/tools/model_explorer).

The oracle for *which node* is Model Explorer's own graph JSON (its adapter, in a child
process): each node's label, namespace and result types. The oracle for *what value*
is NumPy, computing by hand what each op of a small program made (regions of a loop
and a conditional, called functions), and the ULP distances of a deliberately wrong
sine from the values' bit patterns.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("model_explorer", reason="Model Explorer is not installed (the model-explorer extra)")

import stablehlo_interp as si
from stablehlo_interp.cli import main
from stablehlo_interp.tools import InterpreterBackend
from stablehlo_interp.tools.model_explorer import GraphMismatch, model_explorer_graphs, node_ids
from stablehlo_interp.tools.model_explorer.graphs import graphs_by_id, node_types, op_nodes


def double(z):
    return jnp.sin(z) * 2


def program(x):
    y = jnp.log(x)
    z = jax.lax.fori_loop(0, 3, lambda i, c: c * 2 + 1, y)
    s = jax.jit(double)(z)
    return jnp.exp(s).sum(), jax.lax.cond(s.sum() > 0, lambda: s + 1, lambda: s - 1)


X = np.array([[0.5, 2.0, -1.0], [3.0, 0.25, 1.5]], np.float32)     # log(-1) is the NaN
POSITIVE = np.abs(X)


def loop_values(x):
    """What the loop's body computes in float32: ``2c`` and ``2c + 1`` in each iteration."""
    c, doubled, incremented = np.log(x), [], []
    for _ in range(3):
        doubled.append(c * np.float32(2))
        c = doubled[-1] + np.float32(1)
        incremented.append(c)
    return doubled, incremented, c


def largest(*arrays) -> float:
    values = np.abs(np.concatenate([np.ravel(a).astype(np.float64) for a in arrays]))
    return float(values[np.isfinite(values)].max())


def node(collections, graph, label, namespace="", types=None):
    """The one node of ``graph`` with ``label`` whose namespace contains ``namespace``
    (and whose result types are ``types``, when given)."""
    found = [n for n in graphs_by_id(collections)[graph]["nodes"] if n["label"] == label and namespace in n["namespace"]
             and types in (None, node_types(n))]
    assert len(found) == 1, (graph, label, namespace, found)
    return found[0]["id"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    directory = tmp_path_factory.mktemp("me")
    with np.errstate(invalid="ignore"):
        exploration = si.explore(program, X, model_explorer=directory)
    files = exploration.model_explorer
    overlays = {name: json.loads(path.read_text()) for name, path in files.overlays.items()}
    return files, overlays, model_explorer_graphs(files.module)


def value(overlays, name, graph, node_id):
    return overlays[name][graph]["results"][node_id]["value"]


def test_values_land_on_the_nodes_model_explorer_draws_for_their_ops(written):
    files, overlays, graphs = written
    assert sorted(overlays) == ["max_abs", "nan_origin", "nonfinite"]      # no backend: no ULP overlays
    with np.errstate(invalid="ignore"):
        doubled, incremented, last = loop_values(X)
        sine = np.sin(last)
    # the entry function: the log makes the one NaN
    log = node(graphs, "main", "stablehlo.log")
    assert value(overlays, "max_abs", "main", log) == pytest.approx(largest(np.log(POSITIVE[X > 0])), rel=1e-6)
    assert value(overlays, "nonfinite", "main", log) == 1
    # inside the while's body region: the loop counter's add ran 3 times (1, 2, 3)
    assert value(overlays, "max_abs", "main", node(graphs, "main", "stablehlo.add", "while/add")) == 3
    # the function the loop body calls: every iteration counts (a NaN in each)
    assert value(overlays, "max_abs", "closed_call", node(graphs, "closed_call", "stablehlo.multiply")) == \
        pytest.approx(largest(*doubled), rel=1e-6)
    assert value(overlays, "max_abs", "closed_call", node(graphs, "closed_call", "stablehlo.add",
                                                          types=["tensor<2x3xf32>"])) == \
        pytest.approx(largest(*incremented), rel=1e-6)
    assert value(overlays, "nonfinite", "closed_call", node(graphs, "closed_call", "stablehlo.multiply")) == 3
    # the nested jit: a graph of its own
    assert value(overlays, "max_abs", "double", node(graphs, "double", "stablehlo.sine")) == \
        pytest.approx(largest(sine), rel=1e-6)
    assert value(overlays, "max_abs", "double", node(graphs, "double", "stablehlo.multiply")) == \
        pytest.approx(largest(2 * sine), rel=1e-6)
    # the conditional: its sum is NaN, so the false branch (s - 1) ran and the true one did not
    assert value(overlays, "max_abs", "main", node(graphs, "main", "stablehlo.subtract", "cond/")) == \
        pytest.approx(largest(2 * sine - 1), rel=1e-6)
    assert node(graphs, "main", "stablehlo.add", "cond/") not in overlays["max_abs"]["main"]["results"]
    # the NaN's origin, marked on the log alone
    assert overlays["nan_origin"] == {"main": {"name": "where the NaN or inf of a result was made",
                                               "results": {log: {"value": 1, "bgColor": "#d50000",
                                                                 "textColor": "#ffffff"}}}}


def test_every_op_has_the_node_of_its_name_and_types_in_every_function(written):
    files, _, graphs = written
    program_ = si.load(files.module.read_text())
    nodes = node_ids(program_, graphs)
    drawn = [(graph, n["id"]) for graph, g in graphs_by_id(graphs).items() for n in op_nodes(g)]
    assert sorted((graph, node_id) for graph, node_id, _ in nodes.values()) == sorted(drawn)
    assert len(drawn) > 30 and {graph for graph, _ in drawn} == {"main", "closed_call", "double"}
    by_id = {(graph, n["id"]): n for graph, g in graphs_by_id(graphs).items() for n in g["nodes"]}
    for graph, node_id, step in nodes.values():
        assert by_id[graph, node_id]["label"] == step.info.name


def test_bytecode_is_numbered_otherwise_and_still_mapped(tmp_path):
    from jax._src.interpreters import mlir as jax_mlir
    lowered = jax.jit(program).lower(X)
    path = tmp_path / "program.mlirbc"
    path.write_bytes(jax_mlir.module_to_bytecode(lowered.compiler_ir("stablehlo")))
    loaded = si.load(path.read_bytes())
    graphs = model_explorer_graphs(path)
    nodes = node_ids(loaded, graphs)
    by_id = {(graph, n["id"]): n for graph, g in graphs_by_id(graphs).items() for n in g["nodes"]}
    assert len(nodes) == sum(len(op_nodes(g)) for g in graphs_by_id(graphs).values()) > 30
    assert all(by_id[graph, node_id]["label"] == step.info.name for graph, node_id, step in nodes.values())


def test_a_graph_of_another_program_is_a_clear_error(written):
    files, _, graphs = written
    other = si.load(jax.jit(lambda x: jnp.cos(x) + 1).lower(X))
    with pytest.raises(GraphMismatch, match="Model Explorer"):
        node_ids(other, graphs)


def off_by(factor, function):
    return lambda info: lambda a: (function(a) * factor).astype(a.dtype)


def steps_from_zero(values) -> np.ndarray:
    """How many float32 ULP steps each normal value's magnitude is from zero, the
    subnormal range counted as one step (as compare counts it: XLA CPU flushes them):
    its bit pattern less the 2^23 - 1 subnormals."""
    return np.abs(np.asarray(values, np.float32)).view(np.int32).astype(np.int64) - (2 ** 23 - 1)


def test_ulp_distance_and_verdict_per_op_against_a_backend(tmp_path):
    wrong = InterpreterBackend(ops={"stablehlo.sine": off_by(np.float32(-1), np.sin)}, name="wrong sine")
    exploration = si.explore(program, POSITIVE, backend=wrong, model_explorer=tmp_path)
    overlays = {name: json.loads(path.read_text()) for name, path in exploration.model_explorer.overlays.items()}
    graphs = model_explorer_graphs(exploration.model_explorer.module)
    _, _, last = loop_values(POSITIVE)
    sine = np.sin(last)
    sine_node = node(graphs, "double", "stablehlo.sine")
    multiply_node = node(graphs, "double", "stablehlo.multiply")
    # -sin(x) and sin(x) are twice |sin x|'s steps from zero apart
    assert value(overlays, "ulp", "double", sine_node) == int((2 * steps_from_zero(sine)).max())
    assert value(overlays, "noise", "double", sine_node) == 3            # beyond its rounding bound
    # the multiply after it computes the same on the backend's operands: it agrees, its value is far
    assert value(overlays, "noise", "double", multiply_node) == 0
    assert value(overlays, "ulp", "double", multiply_node) == int((2 * steps_from_zero(2 * sine)).max())
    # before the wrong op, everything is the same value
    log = node(graphs, "main", "stablehlo.log")
    assert value(overlays, "ulp", "main", log) == 0 and value(overlays, "noise", "main", log) == 0
    assert overlays["noise"]["main"]["name"].startswith("vs wrong sine")


def test_the_command_line_writes_the_files(capsys, tmp_path):
    lowered = jax.jit(lambda x: jnp.log(x) * 2).lower(X)
    module = tmp_path / "f.mlir"
    module.write_text(lowered.as_text(debug_info=True))
    np.save(tmp_path / "x.npy", X)
    status = main(["explore", str(module), "--input", str(tmp_path / "x.npy"), "--model-explorer",
                   str(tmp_path / "me"), "--output", str(tmp_path / "f.html")])
    out = capsys.readouterr().out
    assert status == 0
    assert f"for Model Explorer: model-explorer {tmp_path / 'me' / 'module.mlir'} --node_data_paths=" in out
    origin = json.loads((tmp_path / "me" / "nan_origin.json").read_text())
    graphs = model_explorer_graphs(tmp_path / "me" / "module.mlir")
    assert list(origin["main"]["results"]) == [node(graphs, "main", "stablehlo.log")]


def test_the_extension_answers_its_run_with_the_overlays_or_a_clear_error(tmp_path):
    from stablehlo_interp.tools.model_explorer.main import PROVIDER_ID, InterpreterRun

    module = tmp_path / "f.mlir"
    module.write_text(jax.jit(lambda x: jnp.exp(x) * 2).lower(np.ones(3, np.float32)).as_text(debug_info=True))
    np.save(tmp_path / "x.npy", np.array([1.0, 2.0, 3.0], np.float32))
    provider = InterpreterRun()
    answer = provider.run(PROVIDER_ID, str(module), "main", {"inputs": str(tmp_path / "x.npy"), "backend": "cpu"})
    assert answer.error == ""
    names = [data.name for data in answer.result]
    assert names == ["max |value|", "NaN and inf count", "where the NaN or inf of a result was made",
                     "ULP distance from cpu", "vs cpu: 0 same, 1 rounding noise, 2 unbounded, 3 beyond its bound"]
    exp = node(model_explorer_graphs(module), "main", "stablehlo.exponential")
    assert answer.result[0].results[exp].value == float(np.exp(np.float32(3)))
    assert answer.result[4].results[exp].value in (0, 1)         # XLA's exp: the same or within its bound
    wrong = provider.run(PROVIDER_ID, str(module), "main", {"inputs": f"{tmp_path / 'x.npy'},{tmp_path / 'x.npy'}"})
    assert wrong.result is None and "argument" in wrong.error.lower(), wrong.error
