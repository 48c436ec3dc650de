"""``compiled.as_text()`` on interp shows the per-device program, against XLA's CPU with
8 host devices.

XLA's text is its SPMD partitioner's program for one device: each parameter and
result has the device's local shape, and collectives move the data. Ours is made by
Shardy's partitioner in a child process (stablehlo_interp/sharding/partition/). Each case
checks that both texts agree on the local shapes of the entry computation and on the
kinds of collective, and then *runs* the per-device program on the interpreter's
process grid, one process per device with that device's shards, to check that it
computes what the device computes (our global-view run, and XLA's).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, reshard
from jax._src.lax import parallel
from jax._src.random import threefry2x32

import stablehlo_interp as si
from stablehlo_interp.sharding import partition

PLATFORMS = ("cpu", "interp")
COLLECTIVES = re.compile(r"\b(all-reduce|all-gather|all-to-all|reduce-scatter|collective-permute)\(")
ROWS = np.arange(16.0, dtype=np.float32).reshape(8, 2)
SQUARE = np.arange(16.0, dtype=np.float32).reshape(4, 4)


def make_mesh(platform: str, shape, names, axis_type=AxisType.Explicit) -> Mesh:
    devices = np.array(jax.devices(platform)[:int(np.prod(shape))]).reshape(shape)
    return Mesh(devices, names, axis_types=(axis_type,) * len(names))


def sum_over_sharded_rows(platform):
    mesh = make_mesh(platform, (2, 2), ("x", "y"))
    return mesh, jax.jit(lambda x: jnp.sum(x, axis=0)), (jax.device_put(ROWS, NamedSharding(mesh, P("x", "y"))),)


def matmul_fsdp(platform):
    """The contracting dimension of the weights is sharded on "x" as the rows of the
    batch are: the weights are gathered."""
    mesh = make_mesh(platform, (2, 2), ("x", "y"))
    batch = jax.device_put(ROWS, NamedSharding(mesh, P("x", None)))
    weights = jax.device_put(ROWS.T, NamedSharding(mesh, P("x", None)))
    return mesh, jax.jit(lambda a, b: jnp.matmul(a, b, out_sharding=P("x", None))), (batch, weights)


def threefry_bits_on_three_devices(platform):
    mesh = make_mesh(platform, (3,), ("x",), AxisType.Auto)
    def bits_plus(x):
        return threefry2x32.threefry_random_bits(jnp.array([0, 0], dtype="uint32"), 32, x.shape) + x
    return mesh, jax.jit(bits_plus), (jax.device_put(np.arange(9, dtype=np.uint32), NamedSharding(mesh, P("x"))),)


def unreduced_matmul_then_reshard(platform):
    mesh = make_mesh(platform, (2,), ("x",))
    a = jax.device_put(SQUARE, NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(SQUARE.T, NamedSharding(mesh, P("x", None)))
    return mesh, jax.jit(lambda a, b: reshard(jnp.matmul(a, b, out_sharding=P(unreduced={"x"})), P())), (a, b)


def scan_over_sharded_columns(platform):
    """Each step slices a whole row of a value sharded by columns: a while loop whose
    body holds a dynamic_slice."""
    mesh = make_mesh(platform, (2,), ("x",))
    def running_sums(xs):
        return jax.lax.scan(lambda total, row: (total + row * 2, total.sum()), jnp.zeros_like(xs[0]), xs)
    return mesh, jax.jit(running_sums), (jax.device_put(ROWS.T.reshape(4, 4), NamedSharding(mesh, P(None, "x"))),)


def gradients_accumulated_unreduced_over_a_scan(platform):
    """A training step's minibatch loop: each step's gradients of two weights stay partial
    sums (unreduced over "x", the batch's axis) and add up in the loop's carry, which
    starts as zeros made unreduced (device 0 holds them, the others zeros); they are
    all-reduced once, after the loop."""
    mesh = make_mesh(platform, (2,), ("x",))

    def loss(weights, batch):
        for w in weights:
            batch = jnp.dot(batch, w)
        return jnp.sum(batch)

    def step(weights, batches):
        def accumulate(total, batch):
            return jax.tree.map(jnp.add, total, jax.grad(loss)(weights, batch)), None

        zeros = reshard(jax.tree.map(jnp.zeros_like, weights), P(unreduced={"x"}))
        total, _ = jax.lax.scan(accumulate, zeros, batches)
        return jax.tree.map(lambda w, g: w - g * 0.5, reshard(weights, P()), reshard(total, P()))

    weights = tuple(jax.device_put(w, NamedSharding(mesh, P(reduced={"x"}))) for w in (SQUARE, SQUARE.T))
    batches = jax.device_put(ROWS.reshape(2, 2, 4), NamedSharding(mesh, P(None, "x", None)))
    return mesh, jax.jit(step), (weights, batches)


def async_collective(name, start, out_specs=None):
    """A shard_map whose collective is JAX's async pair, ``start(x, "i").done()``, which lowers
    to ``stablehlo.async_start`` / ``async_done`` (XLA's converter refuses them; the text
    shows the collective, as XLA's CPU does), beside a product it may overlap."""
    def case(platform):
        mesh = make_mesh(platform, (2,), ("i",))

        @jax.jit
        @jax.shard_map(mesh=mesh, out_specs=(out_specs or P("i"), P("i")))
        def overlapped(x, a):
            return start(x, "i").done(), a @ a.T

        x = jax.device_put(ROWS, NamedSharding(mesh, P("i")))
        a = jax.device_put(SQUARE, NamedSharding(mesh, P("i")))
        return mesh, overlapped, (x, a)
    case.__name__ = f"async_{name}"
    return case


ASYNC_CASES = [
    async_collective("psum", parallel.psum_start),
    async_collective("all_gather", lambda x, axis: parallel.all_gather_start(x, axis, tiled=True, to="reduced"),
                     P(None, reduced={"i"})),
    async_collective("psum_scatter", lambda x, axis: parallel.psum_scatter_start(x, axis, scatter_dimension=0, tiled=True)),
    async_collective("all_to_all", lambda x, axis: parallel.all_to_all_start(x, axis, split_axis=0, concat_axis=0, tiled=True)),
    async_collective("ppermute", lambda x, axis: parallel.ppermute_start(x, axis, [(0, 1), (1, 0)])),
]

# A lower triangle with 1 and 2 on its diagonal: every step of a Cholesky factorization of
# FACTOR @ FACTOR.T (divisions by 1 and 2, square roots of 1 and 4, sums of small
# integers) is exact in float32, so the factorization is FACTOR itself, bit for bit.
FACTOR = np.tril(np.array([[1, 0, 0, 0], [2, 2, 0, 0], [-1, 3, 1, 0], [0, -2, 1, 2]], dtype=np.float32))


def cholesky_of_a_matrix_split_by_rows(platform):
    """LAPACK's ``potrf`` of a matrix split by rows over two devices: the call takes a
    whole matrix (its result is aliased to it), so each device gathers the rows first,
    as XLA's partitioner does."""
    mesh = make_mesh(platform, (2,), ("x",), AxisType.Auto)
    return mesh, jax.jit(jax.lax.linalg.cholesky), (jax.device_put(FACTOR @ FACTOR.T, NamedSharding(mesh, P("x"))),)


def cholesky_split_by_rows_into_rows(platform):
    """The same call with its result split by rows too: each device gathers the rows,
    factorizes the whole matrix and keeps its rows of the factor (XLA's ``dynamic-slice``
    by ``partition-id``)."""
    mesh = make_mesh(platform, (2,), ("x",), AxisType.Auto)
    rows = NamedSharding(mesh, P("x"))
    return mesh, jax.jit(jax.lax.linalg.cholesky, out_shardings=rows), (jax.device_put(FACTOR @ FACTOR.T, rows),)


def cholesky_of_a_batch_split_by_matrices(platform):
    """The same call on a batch of two matrices split over the batch: each device
    factorizes its own matrix and nothing moves (the batch dimension is the results' too)."""
    mesh = make_mesh(platform, (2,), ("x",), AxisType.Auto)
    batch = np.stack([FACTOR @ FACTOR.T, 4 * (FACTOR @ FACTOR.T)])
    return mesh, jax.jit(jax.lax.linalg.cholesky), (jax.device_put(batch, NamedSharding(mesh, P("x"))),)


CASES = [sum_over_sharded_rows, matmul_fsdp, threefry_bits_on_three_devices, unreduced_matmul_then_reshard,
         scan_over_sharded_columns, gradients_accumulated_unreduced_over_a_scan,
         cholesky_of_a_matrix_split_by_rows, cholesky_split_by_rows_into_rows,
         cholesky_of_a_batch_split_by_matrices, *ASYNC_CASES]


def entry_shapes(text: str) -> list:
    """The entry computation's parameter and result shapes, from the ``HloModule`` line."""
    layout = text.splitlines()[0].split("entry_computation_layout=")[1]
    return re.findall(r"\w+\[[\d,]*\]", layout)


def collective_kinds(text: str) -> set:
    return set(COLLECTIVES.findall(text))


def compiled_text(case, platform) -> str:
    mesh, function, args = case(platform)
    with jax.set_mesh(mesh), jax.threefry_partitionable(True):
        return function.lower(*args).compile().as_text()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_text_shows_the_per_device_program(case):
    """Local shapes as XLA's; its collectives, except the ``collective-permute`` XLA's
    partitioner puts before an all-gather to line the devices up with its own order
    (Shardy's all-gather names its groups of devices instead; a shard_map's collectives
    are the user's own)."""
    xla, ours = compiled_text(case, "cpu"), compiled_text(case, "interp")
    assert "interp.per_device_program" not in ours
    assert entry_shapes(ours) == entry_shapes(xla)
    partitioners = set() if case in ASYNC_CASES else {"collective-permute"}
    assert collective_kinds(ours) == collective_kinds(xla) - partitioners


def test_a_steps_gradients_are_all_reduced_once_after_the_loop():
    """As XLA's: the unreduced carry is not all-reduced in the loop's body, and the two
    gradients' all-reduces after it are one (XLA CPU's all-reduce combiner)."""
    xla, ours = (compiled_text(gradients_accumulated_unreduced_over_a_scan, platform) for platform in PLATFORMS)
    assert xla.count("all-reduce(") == 1
    assert ours.count("all-reduce(") == 1
    reduce_line = next(line for line in ours.splitlines() if "all-reduce(" in line)
    assert reduce_line.split("=")[1].strip().startswith("(f32[4,4]{1,0}, f32[4,4]{1,0}) all-reduce(")


@pytest.mark.parametrize("case", ASYNC_CASES, ids=lambda case: case.__name__)
def test_async_pair_is_its_collective_as_xla_shows_it(case):
    """XLA's CPU compiles ``async_start`` / ``async_done`` to the collective alone, marked
    ``async_collective_name`` with the start's name; so does our text, with no async op
    left. The interpreter still runs the pair (values: the per-device test)."""
    xla, ours = compiled_text(case, "cpu"), compiled_text(case, "interp")
    lowered = case("interp")[1].lower(*case("interp")[2]).as_text()
    assert "stablehlo.async_start" in lowered and "stablehlo.async_done" in lowered
    marked = []
    for text in (xla, ours):
        assert "-start(" not in text and "-done(" not in text
        marked.append({found.group(1) for line in text.splitlines() if "async_collective_name=" in line
                       for found in [COLLECTIVES.search(line)] if found})
    assert len(marked[0]) == 1 and marked[1] == marked[0]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_per_device_program_computes_what_each_device_holds(case):
    """Run the per-device program on a grid of processes, one per device with its shards:
    each process's result is what that device holds after our global-view run and XLA's."""
    mesh, function, args = case("interp")
    with jax.set_mesh(mesh), jax.threefry_partitionable(True):
        text = partition.per_device_program(function.lower(*args).compiler_ir("stablehlo"))
        ours = function(*args)
    cpu_mesh, cpu_function, cpu_args = case("cpu")
    with jax.set_mesh(cpu_mesh), jax.threefry_partitionable(True):
        xla = cpu_function(*cpu_args)
    devices = list(mesh.devices.flat)
    shard_data = [{shard.device: np.asarray(shard.data) for shard in arg.addressable_shards}
                  for arg in jax.tree.leaves(args)]
    results = si.Program(text).run_grid([[data[device] for data in shard_data] for device in devices])
    for output, xla_output, number in zip(jax.tree.leaves(ours), jax.tree.leaves(xla), range(len(results[0]))):
        held = {shard.device: np.asarray(shard.data) for shard in output.addressable_shards}
        xla_held = {shard.device.id: np.asarray(shard.data) for shard in xla_output.addressable_shards}
        for device, result in zip(devices, results):
            np.testing.assert_array_equal(result[number], held[device])
            np.testing.assert_array_equal(result[number], xla_held[device.id])


def test_a_lapack_call_on_a_split_matrix_gathers_it_first():
    """Before the ``lapack_spotrf_ffi`` call an all-gather, on XLA's CPU and ours; the
    batch split by matrices gathers nothing on either. Each device's run of our program
    gives the factor whole (hand-checked: FACTOR, exactly)."""
    for platform in PLATFORMS:
        text = compiled_text(cholesky_of_a_matrix_split_by_rows, platform)
        call = text.index('custom_call_target="lapack_spotrf_ffi"')
        assert "all-gather(" in text[:call], platform
        assert "all-" not in compiled_text(cholesky_of_a_batch_split_by_matrices, platform), platform
    mesh, function, (matrix,) = cholesky_of_a_matrix_split_by_rows("interp")
    with jax.set_mesh(mesh):
        text = partition.per_device_program(function.lower(matrix).compiler_ir("stablehlo"))
    rows = [np.asarray(shard.data) for shard in sorted(matrix.addressable_shards, key=lambda shard: shard.device.id)]
    for (result,) in si.Program(text).run_grid([[part] for part in rows]):
        np.testing.assert_array_equal(result, FACTOR)


def test_text_is_the_global_program_and_why_when_the_partitioner_fails():
    """Shardy's global-to-local pass cannot split a dimension into shards the mesh does not
    divide evenly (XLA pads it): the text is then the global program, with a note. Its
    sharding constraint is HLO's ``Sharding`` custom call (XLA's converter refuses Shardy
    ops), with the HLO sharding JAX's NamedSharding names."""
    mesh = make_mesh("interp", (2,), ("x",), AxisType.Auto)
    x = jax.device_put(ROWS[:4], NamedSharding(mesh, P("x")))
    rows = NamedSharding(mesh, P("x"))
    text = jax.jit(lambda x: jax.lax.with_sharding_constraint(x[:3], rows).sum(0)).lower(x).compile().as_text()
    header = text.splitlines()[0]
    assert "interp.per_device_program=\"not made (Shardy\\'s partitioner failed" in header
    assert "is split 2 ways along dimension 0, of 3 elements" in header
    assert entry_shapes(text) == ["f32[4,2]", "f32[2]"]
    calls = [line for line in text.splitlines() if 'custom_call_target="Sharding"' in line]
    assert len(calls) == 1 and f"sharding={rows._to_xla_hlo_sharding(2)}" in calls[0]


UNEVEN = """
module @uneven attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
      -> (tensor<3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}"""


def test_uneven_shards_are_refused_before_the_pass_aborts():
    """On a dimension the mesh does not divide the global-to-local pass aborts its process
    (a failed Check, "non-divisible sharding"); the child refuses such a module first, a
    PartitionError naming the value, and goes on partitioning the next module."""
    with pytest.raises(partition.PartitionError, match=r"failed: sdy\.all_slice at -:4 \(tensor<3xf32>\) is split "
                                                       r"2 ways along dimension 0, of 3 elements"):
        partition.per_device_program(si.load(UNEVEN).module)
    assert "all-reduce" in compiled_text(sum_over_sharded_rows, "interp")


def test_only_as_text_runs_the_partitioner(monkeypatch):
    """Compiling and calling never fetch the program text (jaxlib learns layouts through
    the Layouts extension), so the partitioner runs only when ``as_text()`` asks."""
    asked = []
    make = partition.per_device_program
    monkeypatch.setattr(partition, "per_device_program", lambda module: asked.append(module) or make(module))
    mesh, function, args = sum_over_sharded_rows("interp")
    with jax.set_mesh(mesh):
        function(*args)
        compiled = jax.jit(lambda x: jnp.sum(x * 3, axis=0)).lower(*args).compile()
        assert not asked
        assert "all-reduce" in compiled.as_text()
    assert len(asked) == 1


def all_reduce_text(result: str, operand: str, reduction: str) -> str:
    return f"""
  {result} = "stablehlo.all_reduce"({operand}) ({{
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %s = stablehlo.{reduction} %x, %y : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}} : (tensor<2xf32>) -> tensor<2xf32>"""


REDUCES = f"""
module attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32}} {{
func.func public @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {{
  {all_reduce_text("%0", "%a", "add")}
  {all_reduce_text("%1", "%b", "add")}
  %2 = stablehlo.multiply %0, %1 : tensor<2xf32>
  {all_reduce_text("%3", "%2", "add")}
  {all_reduce_text("%4", "%b", "maximum")}
  return %0, %3, %4 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}}
}}"""


def test_all_reduces_combine_when_independent_and_alike():
    """The first two become one; the third uses their results (after a multiply) and the
    fourth reduces by another computation: each stays alone. The program computes the
    same on a grid of two processes."""
    from jaxlib.mlir import ir

    from stablehlo_interp.sharding.partition.partial_sums import combine_all_reduces
    from stablehlo_interp.ir.sources import make_context

    with make_context():
        module = ir.Module.parse(REDUCES)
        combine_all_reduces(module)
        module.operation.verify()
        combined = str(module)
    assert combined.count('"stablehlo.all_reduce"') == 3
    assert re.search(r'"stablehlo.all_reduce"\(%arg0, %arg1\)', combined)
    a, b = np.array([1.0, -2.0], np.float32), np.array([3.0, 0.5], np.float32)
    grid = [[a, b], [a * 4, b * -1]]
    expected = si.Program(REDUCES).run_grid(grid)
    results = si.Program(combined).run_grid(grid)
    np.testing.assert_array_equal(expected[0][0], a * 5)
    np.testing.assert_array_equal(expected[0][2], np.abs(b))
    for ours, reference in zip(results, expected):
        for value, wanted in zip(ours, reference):
            np.testing.assert_array_equal(value, wanted)


def test_async_pair_on_one_device_is_its_collective_in_the_global_text():
    """On one device the text is the global program (no partitioner): its async pair is the
    collective there too, as XLA's CPU shows it, and the values are XLA's."""
    texts, values = {}, {}
    for platform in PLATFORMS:
        mesh = make_mesh(platform, (1,), ("i",))
        double_sum = jax.jit(jax.shard_map(lambda v: parallel.psum_start(v, "i").done() * 2, mesh=mesh,
                                           out_specs=P("i")))
        x = jax.device_put(ROWS[:, 0], NamedSharding(mesh, P("i")))
        with jax.set_mesh(mesh):
            values[platform] = np.asarray(double_sum(x))
            texts[platform] = double_sum.lower(x).compile().as_text()
    np.testing.assert_array_equal(values["interp"], values["cpu"])
    np.testing.assert_array_equal(values["cpu"], ROWS[:, 0] * 2)
    for text in texts.values():
        assert "-start(" not in text and "-done(" not in text
        assert collective_kinds(text) == {"all-reduce"}
        assert entry_shapes(text) == ["f32[8]", "f32[8]"]
