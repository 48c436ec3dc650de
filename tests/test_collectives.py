"""Collectives and process ids on a grid of processes (ops/collectives.py, process_grid.py).

Per-process programs run with ``Program.run_grid``, compared with

* XLA's CPU backend running the same module as a replica program on several host
  devices (``num_replicas`` > 1, one argument list per device);
* the C++ reference interpreter (``interpreter.run_parallel``) for strategies XLA
  cannot run (partitions without SPMD partitioning, collective_broadcast), with
  two processes: more processes than cores deadlock it;
* the spec's own examples.

Also: collectives that can never complete fail with a report instead of hanging,
whatever the number of processes and cores.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxlib import xla_client

import stablehlo_interp as si
from stablehlo_interp.conformance import testfile
from stablehlo_interp.engine.grid import Grid

ADD = """({
      ^bb0(%x: tensor<ELEMENT>, %y: tensor<ELEMENT>):
        %s = stablehlo.OP %x, %y : tensor<ELEMENT>
        stablehlo.return %s : tensor<ELEMENT>
    })"""


def module(body: str, arguments: str, results: str, replicas: int = 1, partitions: int = 1) -> str:
    return f"""
module @m attributes {{mhlo.num_replicas = {replicas} : i32, mhlo.num_partitions = {partitions} : i32}} {{
  func.func @main({arguments}) -> ({results}) {{
{body}
  }}
}}"""


def reduction(op: str, element: str) -> str:
    return ADD.replace("OP", op).replace("ELEMENT", element)


def run_xla_replicas(text: str, per_process: list, platform: str = "cpu") -> list:
    """The module as a replica program on XLA CPU (or another JAX platform): one process
    per device, each with its own arguments."""
    count = len(per_process)
    options = xla_client.CompileOptions()
    options.num_replicas, options.num_partitions = count, 1
    options.device_assignment = xla_client.DeviceAssignment.create(np.arange(count).reshape(count, 1))
    devices = jax.devices(platform)[:count]
    executable = devices[0].client.compile_and_load(text.encode(), xla_client.DeviceList(tuple(devices)), options)
    mesh = Mesh(np.array(devices), ("replicas",))
    arguments = [jax.make_array_from_single_device_arrays(
        per_process[0][k].shape, NamedSharding(mesh, P()),
        [jax.device_put(args[k], device) for args, device in zip(per_process, devices)])
        for k in range(len(per_process[0]))]
    outputs = executable.execute_sharded(arguments).disassemble_into_single_device_arrays()
    return [[np.asarray(output[i]) for output in outputs] for i in range(count)]


def assert_same(expected: list, actual: list) -> None:
    assert len(expected) == len(actual)
    for process, (want, got) in enumerate(zip(expected, actual)):
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape, f"process {process}"
            np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"process {process}")


def per_process_arguments(count: int, shape, dtype, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(shape) * 10).astype(dtype)] for _ in range(count)]


def check_against_xla(text: str, per_process: list) -> None:
    assert_same(run_xla_replicas(text, per_process), si.load(text).run_grid(per_process))


# ---------------------------------------------------------------------------- against XLA CPU

GROUPS = {
    "all": "[[0, 1, 2, 3, 4, 5, 6, 7]]",
    "halves": "[[0, 1, 2, 3], [4, 5, 6, 7]]",
    "strided": "[[0, 2, 4, 6], [1, 3, 5, 7]]",
    "pairs_out_of_order": "[[5, 0], [3, 6], [1, 7], [4, 2]]",
    "singletons": "[[0], [1], [2], [3], [4], [5], [6], [7]]",
}


@pytest.mark.parametrize("groups", GROUPS)
@pytest.mark.parametrize("op, element, dtype", [("add", "f32", np.float32), ("maximum", "f32", np.float32),
                                                ("multiply", "i32", np.int32), ("minimum", "i32", np.int32)])
def test_all_reduce(groups, op, element, dtype):
    body = f"""    %r = "stablehlo.all_reduce"(%a) {reduction(op, element)}
        {{replica_groups = dense<{GROUPS[groups]}> : tensor<{_shape(GROUPS[groups])}xi64>}}
        : (tensor<3x2x{element}>) -> tensor<3x2x{element}>
    return %r : tensor<3x2x{element}>"""
    text = module(body, f"%a: tensor<3x2x{element}>", f"tensor<3x2x{element}>", replicas=8)
    check_against_xla(text, per_process_arguments(8, (3, 2), dtype))


@pytest.mark.parametrize("groups", ["all", "strided", "pairs_out_of_order"])
def test_cross_replica_sum(groups):
    """The HLO-compatibility op: an all_reduce with add over replica groups."""
    body = f"""    %r = "stablehlo.cross-replica-sum"(%a)
        {{replica_groups = dense<{GROUPS[groups]}> : tensor<{_shape(GROUPS[groups])}xi64>}}
        : (tensor<3x2xf32>) -> tensor<3x2xf32>
    return %r : tensor<3x2xf32>"""
    text = module(body, "%a: tensor<3x2xf32>", "tensor<3x2xf32>", replicas=8)
    check_against_xla(text, per_process_arguments(8, (3, 2), np.float32))


def test_async_start_and_done_around_a_collective():
    """async_start runs its region, async_done hands over its results (XLA's async pair)."""
    body = """    %f = "stablehlo.async_start"(%a) ({
      ^bb0(%x: tensor<2xf32>):
        %g = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
            replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<2xf32>) -> tensor<8xf32>
        stablehlo.return %g : tensor<8xf32>
    }) : (tensor<2xf32>) -> !stablehlo.future<tensor<8xf32>>
    %r = "stablehlo.async_done"(%f) : (!stablehlo.future<tensor<8xf32>>) -> tensor<8xf32>
    return %r : tensor<8xf32>"""
    text = module(body, "%a: tensor<2xf32>", "tensor<8xf32>", replicas=4)
    per_process = per_process_arguments(4, (2,), np.float32)
    results = si.load(text).run_grid(per_process)
    gathered = np.concatenate([args[0] for args in per_process])
    for (result,) in results:
        np.testing.assert_array_equal(result, gathered)


def _shape(groups: str) -> str:
    rows = eval(groups)  # noqa: S307 - a literal of this file
    return f"{len(rows)}x{len(rows[0])}"


def test_all_reduce_variadic_and_empty_groups():
    """Two operands reduced at once; no replica_groups: one group of every replica."""
    body = f"""    %r:2 = "stablehlo.all_reduce"(%a, %b) {reduction("add", "f32")}
        {{replica_groups = dense<> : tensor<0x0xi64>}}
        : (tensor<4xf32>, tensor<2xf32>) -> (tensor<4xf32>, tensor<2xf32>)
    return %r#0, %r#1 : tensor<4xf32>, tensor<2xf32>"""
    text = module(body, "%a: tensor<4xf32>, %b: tensor<2xf32>", "tensor<4xf32>, tensor<2xf32>", replicas=4)
    rng = np.random.default_rng(1)
    per_process = [[rng.standard_normal(4).astype(np.float32), rng.standard_normal(2).astype(np.float32)]
                   for _ in range(4)]
    check_against_xla(text, per_process)


def test_all_reduce_ragged_groups():
    """-1 pads a shorter group (the reference interpreter's tests write groups so; XLA CPU
    crashes on some of these modules, so NumPy is the oracle)."""
    body = f"""    %r = "stablehlo.all_reduce"(%a) {reduction("add", "i64")}
        {{replica_groups = dense<[[0, 1], [2, -1]]> : tensor<2x2xi64>}} : (tensor<4xi64>) -> tensor<4xi64>
    return %r : tensor<4xi64>"""
    text = module(body, "%a: tensor<4xi64>", "tensor<4xi64>", replicas=3)
    inputs = [np.arange(4) * (i + 1) for i in range(3)]
    results = si.load(text).run_grid([[x] for x in inputs])
    expected = [inputs[0] + inputs[1], inputs[0] + inputs[1], inputs[2]]
    for (got,), want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("groups", ["all", "strided", "pairs_out_of_order"])
@pytest.mark.parametrize("dimension", [0, 1])
def test_all_gather(groups, dimension):
    size = len(eval(GROUPS[groups])[0])  # noqa: S307 - our own literal table (GROUPS), not input
    result = "x".join(str(d * size if i == dimension else d) for i, d in enumerate((3, 2)))
    body = f"""    %r = "stablehlo.all_gather"(%a) {{all_gather_dim = {dimension} : i64,
        replica_groups = dense<{GROUPS[groups]}> : tensor<{_shape(GROUPS[groups])}xi64>}}
        : (tensor<3x2xf32>) -> tensor<{result}xf32>
    return %r : tensor<{result}xf32>"""
    text = module(body, "%a: tensor<3x2xf32>", f"tensor<{result}xf32>", replicas=8)
    check_against_xla(text, per_process_arguments(8, (3, 2), np.float32))


@pytest.mark.parametrize("groups", ["all", "halves", "pairs_out_of_order"])
def test_reduce_scatter(groups):
    size = len(eval(GROUPS[groups])[0])  # noqa: S307 - our own literal table (GROUPS), not input
    body = f"""    %r = "stablehlo.reduce_scatter"(%a) {reduction("add", "f32")}
        {{scatter_dimension = 0 : i64, replica_groups = dense<{GROUPS[groups]}> : tensor<{_shape(GROUPS[groups])}xi64>}}
        : (tensor<{2 * size}x3xf32>) -> tensor<2x3xf32>
    return %r : tensor<2x3xf32>"""
    text = module(body, f"%a: tensor<{2 * size}x3xf32>", "tensor<2x3xf32>", replicas=8)
    check_against_xla(text, per_process_arguments(8, (2 * size, 3), np.float32))


@pytest.mark.parametrize("groups", ["all", "strided", "pairs_out_of_order"])
@pytest.mark.parametrize("split, concat", [(0, 1), (1, 0), (0, 0)])
def test_all_to_all(groups, split, concat):
    size = len(eval(GROUPS[groups])[0])  # noqa: S307 - our own literal table (GROUPS), not input
    operand = [2 * size, size]
    result = list(operand)
    result[split] //= size
    result[concat] *= size
    text_operand, text_result = "x".join(map(str, operand)), "x".join(map(str, result))
    body = f"""    %r = "stablehlo.all_to_all"(%a) {{split_dimension = {split} : i64, concat_dimension = {concat} : i64,
        split_count = {size} : i64, replica_groups = dense<{GROUPS[groups]}> : tensor<{_shape(GROUPS[groups])}xi64>}}
        : (tensor<{text_operand}xf32>) -> tensor<{text_result}xf32>
    return %r : tensor<{text_result}xf32>"""
    text = module(body, f"%a: tensor<{text_operand}xf32>", f"tensor<{text_result}xf32>", replicas=8)
    check_against_xla(text, per_process_arguments(8, tuple(operand), np.float32))


@pytest.mark.parametrize("pairs", ["[[0, 1], [1, 2], [2, 3], [3, 0]]", "[[0, 2], [3, 1]]", "[[1, 1]]"])
def test_collective_permute(pairs):
    """Processes no pair targets get zeros."""
    count = len(eval(pairs))  # noqa: S307 - our own literal table (GROUPS), not input
    body = f"""    %r = "stablehlo.collective_permute"(%a)
        {{source_target_pairs = dense<{pairs}> : tensor<{count}x2xi64>}}
        : (tensor<2x2xi32>) -> tensor<2x2xi32>
    return %r : tensor<2x2xi32>"""
    text = module(body, "%a: tensor<2x2xi32>", "tensor<2x2xi32>", replicas=4)
    check_against_xla(text, [[np.arange(4, dtype=np.int32).reshape(2, 2) + 10 * i] for i in range(4)])


def test_replica_programs_on_the_interp_device():
    """A program with num_replicas = 8 compiled for the interp devices: each device runs
    one process of the replica grid."""
    body = f"""    %r = "stablehlo.all_reduce"(%a) {reduction("add", "f32")}
        {{replica_groups = dense<{GROUPS["strided"]}> : tensor<2x4xi64>}} : (tensor<3xf32>) -> tensor<3xf32>
    %id = stablehlo.replica_id : tensor<ui32>
    %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %o = stablehlo.multiply %r, %b : tensor<3xf32>
    return %o : tensor<3xf32>"""
    text = module(body, "%a: tensor<3xf32>", "tensor<3xf32>", replicas=8)
    per_process = per_process_arguments(8, (3,), np.float32)
    assert_same(run_xla_replicas(text, per_process), run_xla_replicas(text, per_process, "interp"))


def test_replica_id_and_partition_id():
    body = """    %r = stablehlo.replica_id : tensor<ui32>
    %p = stablehlo.partition_id : tensor<ui32>
    return %r, %p : tensor<ui32>, tensor<ui32>"""
    text = module(body, "", "tensor<ui32>, tensor<ui32>", replicas=8)
    check_against_xla(text, [[] for _ in range(8)])


def test_collectives_in_a_loop():
    """A psum per iteration of a while loop: the k-th exchanges of each process meet."""
    body = f"""    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %v = %a) : tensor<i32>, tensor<3xf32>
      cond {{
        %limit = stablehlo.constant dense<3> : tensor<i32>
        %c = stablehlo.compare LT, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      }} do {{
        %one = stablehlo.constant dense<1> : tensor<i32>
        %next = stablehlo.add %i, %one : tensor<i32>
        %sum = "stablehlo.all_reduce"(%v) {reduction("add", "f32")}
            {{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}} : (tensor<3xf32>) -> tensor<3xf32>
        %half = stablehlo.constant dense<0.5> : tensor<3xf32>
        %scaled = stablehlo.multiply %sum, %half : tensor<3xf32>
        stablehlo.return %next, %scaled : tensor<i32>, tensor<3xf32>
      }}
    return %r#1 : tensor<3xf32>"""
    text = module(body, "%a: tensor<3xf32>", "tensor<3xf32>", replicas=4)
    check_against_xla(text, per_process_arguments(4, (3,), np.float32))


# ---------------------------------------------------- against the C++ reference interpreter

PARALLEL = """
module @parallel {{
  func.func @process({arguments}) -> {result} {{
{body}
  }}
  func.func @main({main_arguments}) -> ({results}) {{
    %r:2 = "interpreter.run_parallel"({inputs}) {{programs = {programs}}} : ({input_types}) -> ({results})
    return %r#0, %r#1 : {results}
  }}
}}"""


def parallel_module(body: str, operand: str, result: str, programs: str) -> str:
    return PARALLEL.format(arguments=f"%a: {operand}", result=result, body=body,
                           main_arguments=f"%a0: {operand}, %a1: {operand}", results=f"{result}, {result}",
                           inputs="%a0, %a1", programs=programs, input_types=f"{operand}, {operand}")


CHANNEL = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>"
ONE_BY_TWO, TWO_BY_ONE = "[[@process, @process]]", "[[@process], [@process]]"

# (grid, op, result type): valid process groups for a 1 x 2 or a 2 x 1 grid (the
# reference interpreter aborts on groups that name processes the grid lacks).
REFERENCE_CASES = {
    "all_reduce_cross_replica": (TWO_BY_ONE, f"""all_reduce"(%a) {reduction("add", "i64")}
        {{replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}}""", "tensor<4xi64>"),
    "all_reduce_cross_replica_and_partition": (ONE_BY_TWO, f"""all_reduce"(%a) {reduction("maximum", "i64")}
        {{replica_groups = dense<[[0]]> : tensor<1x1xi64>, {CHANNEL}}}""", "tensor<4xi64>"),
    # a channel id <= 0 is no channel (spec: all_reduce): cross_replica, each partition apart
    "all_reduce_negative_channel_id": (ONE_BY_TWO, f"""all_reduce"(%a) {reduction("add", "i64")}
        {{replica_groups = dense<[[0]]> : tensor<1x1xi64>,
        channel_handle = #stablehlo.channel_handle<handle = -1, type = 0>}}""", "tensor<4xi64>"),
    "all_reduce_flattened_ids": (ONE_BY_TWO, f"""all_reduce"(%a) {reduction("add", "i64")}
        {{replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>, {CHANNEL}, use_global_device_ids}}""",
                                 "tensor<4xi64>"),
    "all_gather_cross_replica": (TWO_BY_ONE, """all_gather"(%a) {all_gather_dim = 0 : i64,
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}""", "tensor<8xi64>"),
    "all_gather_flattened_ids": (ONE_BY_TWO, f"""all_gather"(%a) {{all_gather_dim = 0 : i64,
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>, {CHANNEL}, use_global_device_ids}}""", "tensor<8xi64>"),
    "all_to_all_cross_replica": (TWO_BY_ONE, """all_to_all"(%a) {split_dimension = 0 : i64,
        concat_dimension = 0 : i64, split_count = 2 : i64, replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}""",
                                 "tensor<4xi64>"),
    "all_to_all_cross_partition": (ONE_BY_TWO, f"""all_to_all"(%a) {{split_dimension = 0 : i64,
        concat_dimension = 0 : i64, split_count = 2 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
        {CHANNEL}}}""", "tensor<4xi64>"),
    "collective_permute_cross_replica": (TWO_BY_ONE, """collective_permute"(%a) {
        source_target_pairs = dense<[[1, 0]]> : tensor<1x2xi64>}""", "tensor<4xi64>"),
    "collective_permute_cross_partition": (ONE_BY_TWO, f"""collective_permute"(%a) {{
        source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>, {CHANNEL}}}""", "tensor<4xi64>"),
    "collective_broadcast_cross_replica": (TWO_BY_ONE, """collective_broadcast"(%a) {
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}""", "tensor<4xi64>"),
    "collective_broadcast_cross_partition": (ONE_BY_TWO, f"""collective_broadcast"(%a) {{
        replica_groups = dense<[[1]]> : tensor<1x1xi64>, {CHANNEL}}}""", "tensor<4xi64>"),
    "reduce_scatter_cross_replica": (TWO_BY_ONE, f"""reduce_scatter"(%a) {reduction("add", "i64")}
        {{scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}""", "tensor<2xi64>"),
    "reduce_scatter_cross_replica_and_partition": (ONE_BY_TWO, f"""reduce_scatter"(%a) {reduction("add", "i64")}
        {{scatter_dimension = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>, {CHANNEL}}}""",
                                                   "tensor<2xi64>"),
}


@pytest.mark.parametrize("case", REFERENCE_CASES)
def test_against_the_reference_interpreter(reference, case):
    programs, op, result = REFERENCE_CASES[case]
    body = f"""    %r = "stablehlo.{op} : (tensor<4xi64>) -> {result}
    return %r : {result}"""
    text = parallel_module(body, "tensor<4xi64>", result, programs)
    inputs = [np.array([1, 5, -3, 8]), np.array([7, -2, 4, 6])]
    expected = reference.evaluate(text, inputs)
    actual = si.run(text, *inputs)
    for want, got in zip(expected, actual):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("programs", [ONE_BY_TWO, TWO_BY_ONE], ids=["1x2", "2x1"])
def test_process_ids_against_the_reference_interpreter(reference, programs):
    body = """    %p = stablehlo.partition_id : tensor<ui32>
    %r = stablehlo.replica_id : tensor<ui32>
    %c = stablehlo.add %p, %r : tensor<ui32>
    %t = stablehlo.multiply %c, %c : tensor<ui32>
    %i = stablehlo.convert %t : (tensor<ui32>) -> tensor<i64>
    %b = stablehlo.broadcast_in_dim %i, dims = [] : (tensor<i64>) -> tensor<4xi64>
    %s = stablehlo.add %a, %b : tensor<4xi64>
    return %s : tensor<4xi64>"""
    text = parallel_module(body, "tensor<4xi64>", "tensor<4xi64>", programs)
    inputs = [np.array([1, 5, -3, 8]), np.array([7, -2, 4, 6])]
    for want, got in zip(reference.evaluate(text, inputs), si.run(text, *inputs)):
        np.testing.assert_array_equal(got, want)


def test_spec_example_collective_broadcast():
    """spec.md, collective_broadcast: replica_groups [[2, 1]] over 4 replicas."""
    body = """    %r = "stablehlo.collective_broadcast"(%a) {replica_groups = dense<[[2, 1]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>} : (tensor<1x2xi64>) -> tensor<1x2xi64>
    return %r : tensor<1x2xi64>"""
    text = module(body, "%a: tensor<1x2xi64>", "tensor<1x2xi64>", replicas=4)
    results = si.load(text).run_grid([[np.array([[1, 2]])], [np.array([[3, 4]])], [np.array([[5, 6]])],
                                      [np.array([[7, 8]])]])
    assert [r[0].tolist() for r in results] == [[[0, 0]], [[5, 6]], [[5, 6]], [[0, 0]]]


def test_collective_broadcast_traffic_by_hand():
    """sharding/traffic.py on collective_broadcast over 4 replicas: groups [[0], [2]] keep
    each group's one operand where it is (0 and 2 get their own, 1 and 3 zeros): no
    byte moves. Group [[2, 1]] (the spec's example) moves process 2's i64[1, 2], 16
    bytes, to process 1: 2 sends 16 bytes, 1 receives 16, 0 and 3 (outside) neither."""
    body = """    %r = "stablehlo.collective_broadcast"(%a) {replica_groups = dense<[[0], [2]]> : tensor<2x1xi64>}
        : (tensor<1x2xi64>) -> tensor<1x2xi64>
    %s = "stablehlo.collective_broadcast"(%a) {replica_groups = dense<[[2, 1]]> : tensor<1x2xi64>}
        : (tensor<1x2xi64>) -> tensor<1x2xi64>
    return %r, %s : tensor<1x2xi64>, tensor<1x2xi64>"""
    text = module(body, "%a: tensor<1x2xi64>", "tensor<1x2xi64>, tensor<1x2xi64>", replicas=4)
    traffic = si.tools.CollectiveTraffic()
    inputs = [[np.array([[2 * i + 1, 2 * i + 2]])] for i in range(4)]
    results = si.load(text).run_grid(inputs, listeners=[traffic])
    assert [[r.tolist() for r in process] for process in results] == [
        [[[1, 2]], [[0, 0]]], [[[0, 0]], [[5, 6]]], [[[5, 6]], [[5, 6]]], [[[0, 0]], [[0, 0]]]]
    assert sorted((t.step, t.process, t.sent, t.received) for t in traffic.transfers) == [
        (0, 0, 0, 0), (0, 1, 0, 0), (0, 2, 0, 0), (0, 3, 0, 0),
        (1, 0, 0, 0), (1, 1, 0, 16), (1, 2, 16, 0), (1, 3, 0, 0)]
    assert (traffic.sent, traffic.received) == (16, 16)


def test_cross_replica_pairs_within_each_partition_by_hand():
    """Without a channel id, collective_permute and collective_broadcast pair replicas
    within each partition (spec: cross_replica). Over 2 replicas x 2 partitions
    (process id = replica * 2 + partition): pairs [[0, 1]] move replica 0's operand
    to replica 1 of the same partition, zeros elsewhere; group [[1, 0]] gives replica
    1's operand to both replicas of its partition."""
    body = """    %p = "stablehlo.collective_permute"(%a) {source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>}
        : (tensor<2xi32>) -> tensor<2xi32>
    %b = "stablehlo.collective_broadcast"(%a) {replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}
        : (tensor<2xi32>) -> tensor<2xi32>
    return %p, %b : tensor<2xi32>, tensor<2xi32>"""
    text = module(body, "%a: tensor<2xi32>", "tensor<2xi32>, tensor<2xi32>", replicas=2, partitions=2)
    inputs = [np.array([10 * i + 1, 10 * i + 2], np.int32) for i in range(4)]
    results = si.load(text).run_grid([[x] for x in inputs])
    zeros = [0, 0]
    assert [[r.tolist() for r in process] for process in results] == [
        [zeros, inputs[2].tolist()], [zeros, inputs[3].tolist()],
        [inputs[0].tolist(), inputs[2].tolist()], [inputs[1].tolist(), inputs[3].tolist()]]


# ------------------------------------------------------------------- the grid and its errors

DIVERGING = """
module @diverging {
  func.func @reduce(%a: tensor<2xi32>) -> tensor<2xi32> {
    %r = "stablehlo.all_reduce"(%a) ADD {replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>}
        : (tensor<2xi32>) -> tensor<2xi32>
    return %r : tensor<2xi32>
  }
  func.func @gather(%a: tensor<2xi32>) -> tensor<2xi32> {
    %g = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>}
        : (tensor<2xi32>) -> tensor<6xi32>
    %r = stablehlo.slice %g [0:2] : (tensor<6xi32>) -> tensor<2xi32>
    return %r : tensor<2xi32>
  }
  func.func @idle(%a: tensor<2xi32>) -> tensor<2xi32> {
    return %a : tensor<2xi32>
  }
  func.func @main(%a: tensor<2xi32>) -> (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) {
    %r:3 = "interpreter.run_parallel"(%a, %a, %a) {programs = PROGRAMS}
        : (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>)
    return %r#0, %r#1, %r#2 : tensor<2xi32>, tensor<2xi32>, tensor<2xi32>
  }
}""".replace("ADD", reduction("add", "i32"))


def test_a_process_that_never_arrives_is_reported():
    text = DIVERGING.replace("PROGRAMS", "[[@reduce], [@reduce], [@idle]]")
    with pytest.raises(si.OpError) as raised:
        si.run(text, np.array([1, 2], np.int32))
    message = str(raised.value)
    assert raised.value.op_name == "stablehlo.all_reduce"
    assert "can never complete" in message
    assert "process 0 (replica 0, partition 0) waits in stablehlo.all_reduce for processes [2]" in message
    assert "process 2 (replica 2, partition 0) has finished" in message


def test_processes_at_different_collectives_are_reported():
    text = DIVERGING.replace("PROGRAMS", "[[@reduce], [@gather], [@reduce]]")
    with pytest.raises(si.OpError, match=r"reached different collectives: process 0 .* reached "
                                         r"stablehlo.all_reduce; process 1 .* reached stablehlo.all_gather"):
        si.run(text, np.array([1, 2], np.int32))


def test_a_failing_process_stops_the_grid_and_is_named():
    text = module("""    %p = stablehlo.partition_id : tensor<ui32>
    %r = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, use_global_device_ids}
        : (tensor<2xf32>) -> tensor<8xf32>
    %c = stablehlo.custom_call @fails_on_partition_2(%p) : (tensor<ui32>) -> tensor<ui32>
    return %r : tensor<8xf32>""", "%a: tensor<2xf32>", "tensor<8xf32>", partitions=4)

    def fails_on_partition_2(info):
        def run(partition):
            if partition == 2:
                raise ValueError("partition 2 is broken")
            return partition
        return run

    from stablehlo_interp.engine import registry

    with registry.replaced(custom_calls={"fails_on_partition_2": fails_on_partition_2}):
        program = si.load(text)
        with pytest.raises(si.OpError) as raised:
            program.run_grid([[np.zeros(2, np.float32)]] * 4)
    assert "partition 2 is broken" in str(raised.value)
    assert "inside device 2 (partition 2)" in str(raised.value)   # one replica: the processes are devices


def test_many_more_processes_than_cores():
    """128 processes in a 4 x 32 grid with collectives over replicas and partitions."""
    body = f"""    %r = "stablehlo.all_reduce"(%a) {reduction("add", "i64")}
        {{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}} : (tensor<1xi64>) -> tensor<1xi64>
    %g = "stablehlo.all_gather"(%r) {{all_gather_dim = 0 : i64,
        replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>}} : (tensor<1xi64>) -> tensor<128xi64>
    return %g : tensor<128xi64>"""
    text = module(body, "%a: tensor<1xi64>", "tensor<128xi64>", replicas=4, partitions=32)
    results = si.load(text).run_grid([[np.array([i])] for i in range(128)])
    # cross_replica: process (r, p) sums replicas 0..3 of partition p; cross_replica_and_partition
    # with groups [[0, 1, 2, 3]] gathers, for each partition, then each replica.
    sums = [sum(r * 32 + p for r in range(4)) for p in range(32)]
    expected = [sums[p] for p in range(32) for _ in range(4)]
    assert all(result[0].tolist() == expected for result in results)


def test_run_grid_checks_the_number_of_processes():
    text = module("    return %a : tensor<2xf32>", "%a: tensor<2xf32>", "tensor<2xf32>", replicas=2)
    with pytest.raises(si.ArgumentError, match=r"runs as 2 process\(es\) \(2 replica\(s\) x 1 partition\(s\)\); "
                                               "got arguments for 3"):
        si.load(text).run_grid([[np.zeros(2, np.float32)]] * 3)


def test_run_asks_for_run_grid_on_a_per_process_program():
    text = module("""    %p = stablehlo.replica_id : tensor<ui32>
    return %p : tensor<ui32>""", "", "tensor<ui32>", replicas=2)
    with pytest.raises(si.ArgumentError, match=r"runs as 2 processes .* uses stablehlo.replica_id: run it with "
                                               r"program.run_grid"):
        si.run(text)


def test_one_process_needs_no_grid():
    text = module("""    %p = stablehlo.replica_id : tensor<ui32>
    %r = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>}
        : (tensor<2xf32>) -> tensor<2xf32>
    return %p, %r : tensor<ui32>, tensor<2xf32>""", "%a: tensor<2xf32>", "tensor<ui32>, tensor<2xf32>")
    replica, gathered = si.run(text, np.array([1.0, 2.0], np.float32))
    assert replica == 0 and gathered.tolist() == [1.0, 2.0]


def test_processes_share_the_host_queues():
    """Each process's outfeed lands in the run's queues (processes run one at a time,
    in order, until they wait at a collective)."""
    text = module("""    %t = stablehlo.create_token : !stablehlo.token
    %p = stablehlo.replica_id : tensor<ui32>
    %t2 = "stablehlo.outfeed"(%p, %t) : (tensor<ui32>, !stablehlo.token) -> !stablehlo.token
    return %p : tensor<ui32>""", "", "tensor<ui32>", replicas=3)
    io = si.HostQueues()
    si.load(text).run_grid([[], [], []], io=io)
    assert [entry[0].tolist() for entry in io.outfeed] == [0, 1, 2]


def test_listeners_see_which_process_runs_an_op():
    text = module("""    %p = stablehlo.replica_id : tensor<ui32>
    return %p : tensor<ui32>""", "", "tensor<ui32>", replicas=2)

    class Processes(si.Listener):
        def __init__(self):
            self.seen = []

        def after_op(self, step, operands, results, stack):
            self.seen.append((stack.process.id, step.info.name, int(results[0])))

    listener = Processes()
    si.load(text).run_grid([[], []], listeners=[listener])
    assert listener.seen == [(0, "stablehlo.replica_id", 0), (1, "stablehlo.replica_id", 1)]


def test_grid_runs_functions_directly():
    grid = Grid(2, 3)

    def body(process):
        peers = process.grid.exchange(process, tuple(range(6)), process.partition_id * 10 + process.replica_id,
                                      "test")
        return process.id, peers

    results = grid.run(body)
    assert [r[0] for r in results] == list(range(6))
    assert all(r[1] == [0, 10, 20, 1, 11, 21] for r in results)


TEST_FILE = """
// A StableHLO interpreter test, as `stablehlo-interp test` runs it.
module @cross_replica {
  func.func @all_gather(%operand : tensor<2xi64>) -> tensor<4xi64> {
    %result = "stablehlo.all_gather"(%operand) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>} : (tensor<2xi64>) -> tensor<4xi64>
    return %result : tensor<4xi64>
  }
  func.func @main() {
    %inputs0 = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
    %inputs1 = stablehlo.constant dense<[3, 4]> : tensor<2xi64>
    %results:2 = "interpreter.run_parallel"(%inputs0, %inputs1) {
      programs=[[@all_gather], [@all_gather]]
    } : (tensor<2xi64>, tensor<2xi64>) -> (tensor<4xi64>, tensor<4xi64>)
    check.expect_eq_const %results#0, dense<[3, 4, 1, 2]> : tensor<4xi64>
    check.expect_eq_const %results#1, dense<[3, 4, 1, 2]> : tensor<4xi64>
    func.return
  }
}
"""


def test_run_parallel_in_a_test_file():
    outcomes = testfile.run_text(TEST_FILE, "all_gather.mlir")
    assert [(o.test, o.passed) for o in outcomes] == [("main", True)], [o.report() for o in outcomes]


def test_run_parallel_refuses_a_program_without_a_body():
    """A process program that is only declared has nothing to run: a clear error at load."""
    text = parallel_module("    return %a : tensor<2xi32>", "tensor<2xi32>", "tensor<2xi32>",
                           "[[@process, @external]]").replace(
        "  func.func @main", "  func.func private @external(tensor<2xi32>) -> tensor<2xi32>\n  func.func @main")
    with pytest.raises(si.OpError, match="interpreter.run_parallel .*@external is declared without a body"):
        si.load(text)


def test_groups_naming_missing_processes_are_errors():
    body = f"""    %r = "stablehlo.all_reduce"(%a) {reduction("add", "f32")}
        {{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}} : (tensor<2xf32>) -> tensor<2xf32>
    return %r : tensor<2xf32>"""
    text = module(body, "%a: tensor<2xf32>", "tensor<2xf32>", replicas=2)
    with pytest.raises(si.OpError, match=r"stablehlo.all_reduce .*process group \[2, 3\] names replica 2, but the "
                                         r"grid has 2 replica\(s\) x 1 partition\(s\)"):
        si.load(text).run_grid([[np.zeros(2, np.float32)]] * 2)
    # A channel id makes the pairwise ops' ids partitions (spec: cross_partition): over
    # 4 replicas x 1 partition, partition 2 is missing even though process 2 is not.
    for op, groups, missing in [("collective_broadcast", "replica_groups = dense<[[0], [2]]> : tensor<2x1xi64>",
                                 r"process group \[2\] names partition 2"),
                                ("collective_permute", "source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>",
                                 r"process group \[0, 1\] names partition 1")]:
        body = f"""    %r = "stablehlo.{op}"(%a) {{{groups}, {CHANNEL}}} : (tensor<2xf32>) -> tensor<2xf32>
    return %r : tensor<2xf32>"""
        text = module(body, "%a: tensor<2xf32>", "tensor<2xf32>", replicas=4)
        with pytest.raises(si.OpError, match=rf"stablehlo.{op} .*{missing}, but the grid has 4 replica\(s\)"):
            si.load(text).run_grid([[np.zeros(2, np.float32)]] * 4)


INFEED_GRID = """module {
  func.func @read_twice(%token: !stablehlo.token) -> (tensor<2xi32>, tensor<2xi32>) {
    %first:2 = "stablehlo.infeed"(%token) : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
    %second:2 = "stablehlo.infeed"(%first#1) : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
    return %first#0, %second#0 : tensor<2xi32>, tensor<2xi32>
  }
  func.func @feed_a() -> tensor<2xi32> {
    %a = stablehlo.constant dense<[3, -1]> : tensor<2xi32>
    return %a : tensor<2xi32>
  }
  func.func @feed_b() -> tensor<2xi32> {
    %b = stablehlo.constant dense<[7, 9]> : tensor<2xi32>
    return %b : tensor<2xi32>
  }
  func.func @main() -> (tensor<2xi32>, tensor<2xi32>) {
    %token = stablehlo.after_all : !stablehlo.token
    %r:2 = "interpreter.run_parallel"(%token) {infeed = [@feed_b, @feed_a], programs = [[@read_twice]]}
        : (!stablehlo.token) -> (tensor<2xi32>, tensor<2xi32>)
    return %r#0, %r#1 : tensor<2xi32>, tensor<2xi32>
  }
}"""


def test_run_parallel_infeed_feeds_the_grid_in_order(reference):
    """``infeed = [@f, ...]``: the functions' values are the grid's infeed queue, in order."""
    first, second = si.run(INFEED_GRID)
    assert first.tolist() == [7, 9] and second.tolist() == [3, -1]
    for want, got in zip(reference.evaluate(INFEED_GRID, []), (first, second)):
        np.testing.assert_array_equal(got, want)
