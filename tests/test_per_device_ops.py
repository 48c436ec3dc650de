"""Ops on a split dimension, run per device (si.run_per_device): each device's results
equal XLA's shards on that device, bit for bit.

Shardy's global-to-local pass wrote several of these as the global op on the device's
part, and its export combined every reduce's partial results with a sum: a reversed
split dimension gave each device its own rows reversed, a maximum over one gave the sum
of the devices' maxima, and ``si.run_per_device`` handed those back without a word.
The partitioner's child (sharding/partition/) now gathers what Shardy cannot split,
combines a reduce's parts with the reduce's own op, and refuses uneven shards by name;
``si.run_per_device`` and the tools check every per-device run against the global run
(sharding/check.py). The inputs are small integers, so every sum is exact and XLA's
order of sums cannot differ from the devices'.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from stablehlo_interp.sharding import partition
from stablehlo_interp.sharding import per_device
from stablehlo_interp.sharding.per_device import PerDeviceMismatch, PerDeviceWarning

MESH = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 4), ("d", "m"))
RNG = np.random.default_rng(0)


def table(spec, shape=(16, 8)):
    return jax.device_put(RNG.integers(-8, 9, shape).astype(np.float32), NamedSharding(MESH, spec))


def indices(high, shape, spec=None):
    return jax.device_put(RNG.integers(0, high, shape).astype(np.int32), NamedSharding(MESH, spec or P()))


def convolved(x, strides):
    """A 3x3 convolution of an image: every call's op has this line as its location."""
    return lax.conv_general_dilated(x, jnp.ones((1, 1, 3, 3), x.dtype), strides, "SAME")


def window_gather(t, i):
    numbers = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))
    return lax.gather(t, i[:, None], numbers, (2, 8))


CASES = {
    # what Shardy's pass wrote as the global op on the device's part
    "reverse a split dimension": (lambda t: t[::-1], table(P("m", None))),
    "update a slice of a split dimension": (lambda t, u, i: lax.dynamic_update_slice_in_dim(t, u, i, axis=0),
                                            table(P("m", None)), table(P(), (3, 8)), np.int32(5)),
    "maximum over a split dimension": (lambda t: t.max(0), table(P("m", "d"))),
    "minimum over a split dimension": (lambda t: t.min(1), table(P("m", "d"))),
    "logical and over a split dimension": (lambda t: (t > -8).all(0), table(P("m", "d"))),
    "argmax over a split dimension": (lambda t: jnp.argmax(t, axis=0), table(P("m", "d"))),
    # what aborted Shardy's pass or failed in it
    "pad a split dimension": (lambda t: jnp.pad(t, ((1, 2), (0, 0))), table(P("m", None))),
    "slice of a split dimension": (lambda t: t[3:13], table(P("m", None))),
    "roll a split dimension": (lambda t: jnp.roll(t, 3, axis=0), table(P("m", None))),
    "cumulative sum along a split dimension": (lambda t: jnp.cumsum(t, axis=0), table(P("m", None))),
    "max pooling over a split dimension": (
        lambda t: lax.reduce_window(t, -jnp.inf, lax.max, (2, 1), (2, 1), "VALID"), table(P("m", None))),
    "convolution over split rows": (
        lambda x: lax.conv_general_dilated(x[None, None], jnp.ones((1, 1, 3, 3), x.dtype), (1, 1), "SAME")[0, 0],
        table(P("m", None))),
    # two layers' convolutions share a source line: each is matched with its own global op
    "two convolutions of one source line over split rows": (
        lambda x: convolved(convolved(x[None, None], (2, 2)), (1, 1))[0, 0], table(P("m", None))),
    "point gather from a table split both ways": (lambda t, i, j: t[i, j], table(P("m", "d")), indices(16, (5,)),
                                                  indices(8, (5,))),
    "rows in sorted order from a split dimension": (lambda t: t[jnp.argsort(t[:, 0], stable=True)],
                                                    table(P("m", None))),
    "take_along_axis on split logits": (lambda logits, labels: jnp.take_along_axis(logits, labels[:, None], axis=1),
                                        table(P("d", "m"), (8, 16)), indices(16, (8,), P("d"))),
    "take_along_axis on logits split by vocabulary, labels by batch on the same axis": (
        lambda logits, labels: jnp.take_along_axis(logits, labels[:, None], axis=1),
        table(P(None, "m"), (8, 16)), indices(16, (8,), P("m"))),
    "top_k of split rows": (lambda t: lax.top_k(t, 3), table(P("d", "m"))),
    "variance over a split dimension": (lambda t: t.var(0), table(P("m", "d"))),
    "a numpy scalar beside a split table": (lambda t, i: lax.dynamic_slice_in_dim(t, i, 4, axis=0) * i,
                                            table(P("m", None)), np.int32(3)),
    "windows gathered from a split dimension": (window_gather, table(P("m", None)), indices(15, (5,))),
    # a scatter's parts combined by a sum, a whole row's window moved off by the device's
    # offset (its update skipped), random bits made per device
    "segment maximum of split updates": (lambda x, s: jax.ops.segment_max(x, s, num_segments=4),
                                         table(P("m"), (16,)), indices(4, (16,), P("m"))),
    "segment product of split updates": (lambda x, s: jax.ops.segment_prod(x, s, num_segments=4),
                                         indices(3, (16,), P("m")), indices(4, (16,), P("m"))),
    "rows updated in place, their columns split": (
        jax.vmap(lambda x, i, row: lax.dynamic_update_slice_in_dim(x, row[None], i, axis=0)),
        table(P("d", None, "m"), (2, 10, 8)), indices(10, (2,), P("d")), table(P("d", "m"), (2, 8))),
    "random bits split by rows": (
        lambda key: jax.lax.with_sharding_constraint(lax.rng_bit_generator(key, (8, 4))[1],
                                                     NamedSharding(MESH, P("m", None))),
        np.array([1, 2, 3, 4], np.uint32)),
}


def held(output) -> dict:
    return {shard.device.id: np.asarray(shard.data) for shard in output.addressable_shards}


@pytest.mark.parametrize("name", list(CASES))
def test_each_device_holds_xlas_shard(name):
    function, *args = CASES[name]
    function = jax.jit(function)
    xla = function(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerDeviceWarning)   # no fallback, no difference from the global run
        run = si.run_per_device(function, *args)
    for index, output in enumerate(jax.tree.leaves(xla)):
        shards = held(output)
        assert sorted(shards) == list(range(8))
        for device, shard in shards.items():
            np.testing.assert_array_equal(run.per_device[device][index], shard, strict=True,
                                          err_msg=f"result {index} on device {device}")


def test_a_kernels_gradient_from_an_image_split_by_rows_is_the_programs_value():
    """The gradient of a convolution's kernel sums over the image; split by rows, each
    device's window needs its neighbours' rows of the image and of its gradient (both
    gathered). Each device gets the program's value, XLA's unpartitioned one. XLA's CPU
    partitioner gives twice it here, where the mesh's axis d replicates the image (as many
    times as d has devices; right on a 1-D mesh): docs/semantics.md."""
    def function(kernel, image):
        return jax.grad(lambda k: (lax.conv_general_dilated(image[None, None], k, (1, 1), "SAME") ** 2).sum())(kernel)

    kernel = jax.device_put(RNG.integers(-2, 3, (1, 1, 3, 3)).astype(np.float32), NamedSharding(MESH, P()))
    image = table(P("m", None))
    program_value = np.asarray(jax.jit(function)(np.asarray(kernel), np.asarray(image)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerDeviceWarning)
        run = si.run_per_device(jax.jit(function), kernel, image)
    assert len(run.per_device) == 8
    for results in run.per_device:
        np.testing.assert_array_equal(results[0], program_value, strict=True)
    np.testing.assert_array_equal(np.asarray(jax.jit(function)(kernel, image)), 2 * program_value)   # XLA's


def test_argmax_with_its_indices_constrained_to_the_split_is_gathered():
    """In JAX's explicit sharding mode the argmax's iota is constrained to the operand's
    sharding: both of the reduce's inputs are gathered along the reduced dimension, not
    only the values (Shardy's reshards split the gathered values again to match)."""
    mesh = Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("x", "y"),
                axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        x = jax.device_put(RNG.permutation(16).reshape(8, 2).astype(np.float32), P("x", "y"))
        function = jax.jit(lambda x: (jnp.argmax(x, axis=0), jnp.argmin(x, axis=1)))
        xla = function(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerDeviceWarning)
            run = si.run_per_device(function, x)
    for index, output in enumerate(xla):
        for device, shard in held(output).items():
            np.testing.assert_array_equal(run.per_device[device][index], shard, strict=True)


def test_a_contraction_of_a_devices_part_is_judged_by_rounding_noise():
    """BLAS sums a convolution of 32 images in another order than one of 64 (JAX's
    test_vmap_conv_general_dilated: 87108 of 262144 elements differ in the last bit), with
    no collective in sight: the contraction counts as a reordered sum, so the difference
    is judged by the global program's rounding noise (a warning naming it), not refused."""
    rng = np.random.default_rng(1)
    kernel = rng.standard_normal((3, 1, 16)).astype(np.float32)
    inputs = jax.device_put(rng.standard_normal((64, 16, 32, 1)).astype(np.float32),
                            NamedSharding(Mesh(np.array(jax.devices("cpu")[:2]), ("x",)), P("x")))

    def model(kernel, inputs):
        return lax.conv_general_dilated(inputs, kernel, (1,), "VALID",
                                        dimension_numbers=lax.ConvDimensionNumbers((0, 2, 1), (2, 1, 0), (0, 2, 1)))

    function = jax.jit(jax.vmap(model, in_axes=(None, 0), out_axes=1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PerDeviceWarning)
        run = si.run_per_device(function, kernel, inputs)
    assert any(label.startswith("stablehlo.convolution at") for label in run.program.reordered_sums)
    notes = [str(w.message) for w in caught if w.category is PerDeviceWarning]
    assert all("adds floats in another order: stablehlo.convolution" in note for note in notes)
    xla = np.asarray(function(kernel, inputs), np.float64)
    bound = 8 * np.finfo(np.float32).eps * np.asarray(jax.jit(jax.vmap(model, in_axes=(None, 0), out_axes=1))(
        np.abs(kernel), np.abs(np.asarray(inputs))), np.float64)   # 3 terms each: two orders within 2γ(3)Σ|terms|
    assert (np.abs(np.asarray(run.outputs, np.float64) - xla) <= bound).all()


def test_a_maximum_over_a_split_dimension_is_combined_by_a_maximum():
    """Each device takes the maximum of its part and an all-reduce by ``maximum`` (as
    XLA's) combines them; argmax's pairs are gathered whole before the reduce instead."""
    function, table_ = CASES["maximum over a split dimension"]
    text = si.run_per_device(jax.jit(function), table_).program.text
    all_reduce = text[text.index('"stablehlo.all_reduce"'):]
    assert "stablehlo.maximum" in all_reduce[:all_reduce.index("})")]
    assert "stablehlo.add" not in all_reduce[:all_reduce.index("})")]
    function, table_ = CASES["argmax over a split dimension"]
    text = si.run_per_device(jax.jit(function), table_).program.text
    assert '"stablehlo.all_gather"' in text[:text.index("stablehlo.reduce(")]


def test_a_wrong_per_device_program_is_an_error_not_a_number(monkeypatch):
    """A per-device program that computes other values than the global one (here the
    maximum's all-reduce made a sum again, as Shardy's export wrote it) is a
    PerDeviceMismatch from si.run_per_device and from the tools, never results."""
    function, table_ = CASES["maximum over a split dimension"]
    made = partition.per_device_program

    def summed(module):
        text = made(module)
        start = text.index('"stablehlo.all_reduce"')
        return text[:start] + text[start:].replace("stablehlo.maximum", "stablehlo.add", 1)

    monkeypatch.setattr(partition, "per_device_program", summed)
    with pytest.raises(PerDeviceMismatch, match=r"result #0 differs on device\(s\) \[0, 1, 2, 3, 4, 5, 6, 7\]"):
        si.run_per_device(jax.jit(function), table_)
    with pytest.raises(PerDeviceMismatch):
        si.trace(jax.jit(function), table_, per_device=True)


def host_calls(calls: list):
    """A host function that records the shape it is called with and triples its operand."""
    def triple(value):
        calls.append(value.shape)
        return value * 3
    return triple


def test_a_callback_on_one_device_runs_there_and_broadcasts():
    """JAX places a host callback on device 0 (a maximal sharding), which Shardy's
    partitioner left with its global types on split operands: device 0 alone calls it,
    with the whole operand, and broadcasts what it returns, as XLA does. A pure_callback may
    be called again, so the run is checked against the global run (one call each)."""
    calls: list = []
    function = jax.jit(lambda t: jax.pure_callback(host_calls(calls), jax.ShapeDtypeStruct(t.shape, t.dtype), t + 1)
                       * 2 + t)
    x = table(P("m", None))
    xla = function(x).block_until_ready()
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerDeviceWarning)
        run = si.run_per_device(function, x)
    assert "stablehlo.collective_broadcast" in run.program.text
    for device, shard in held(xla).items():
        np.testing.assert_array_equal(run.per_device[device][0], shard, strict=True)
    assert calls == [(16, 8), (16, 8)]


def test_an_io_callback_on_one_device_is_called_once_and_not_checked():
    """An io_callback has a side effect: the per-device run calls it once, on its device,
    and is not run twice to be checked (a PerDeviceWarning says so)."""
    calls: list = []
    function = jax.jit(lambda t: io_callback(host_calls(calls), jax.ShapeDtypeStruct(t.shape, t.dtype), t + 1) * 2)
    x = table(P("m", None))
    xla = function(x).block_until_ready()
    calls.clear()
    with pytest.warns(PerDeviceWarning, match="side effects"):
        run = si.run_per_device(function, x)
    for device, shard in held(xla).items():
        np.testing.assert_array_equal(run.per_device[device][0], shard, strict=True)
    assert calls == [(16, 8)]


def test_a_gradient_through_calls_is_split_as_xla_splits_it():
    """Equinox's bounded while loop lowers to calls; the sharding propagation of the global
    run stopped at them and left the gradient replicated, while the per-device program
    (made with the calls inlined) and XLA split it: the two now agree, and each device
    holds XLA's shard (dyadic values: every sum exact)."""
    eqxi = pytest.importorskip("equinox.internal")
    weights = jax.device_put(RNG.integers(-2, 3, (16, 2)).astype(np.float32) / 4, NamedSharding(MESH, P("m", None)))

    def loss(w):
        def step(carry):
            return carry[0] + 1, carry[1] + (w @ carry[1]) @ w / 4
        return jnp.sum(eqxi.while_loop(lambda c: c[0] < 3, step, (0, jnp.ones(2)), max_steps=4, kind="bounded")[1] ** 2)

    function = jax.jit(jax.grad(loss))
    xla = function(weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerDeviceWarning)
        run = si.run_per_device(function, weights)
    shards = held(xla)
    assert xla.sharding.spec == P("m", None) and sorted(shards) == list(range(8))
    for device, shard in shards.items():
        np.testing.assert_array_equal(run.per_device[device][0], shard, strict=True)


def test_a_per_device_result_other_than_the_global_runs_shard_is_refused(monkeypatch):
    """Where the per-device program's result is not the device's shard of the global run's
    (the global run's propagation said replicated, here made to), its results are refused,
    named, not put together."""
    made = per_device.value_tilings

    def replicated_results(*arguments, **options):
        argument_tilings, result_tilings, rest = made(*arguments, **options)
        return argument_tilings, [None] * len(result_tilings), rest

    monkeypatch.setattr(per_device, "value_tilings", replicated_results)
    with pytest.raises(partition.PartitionError, match=r"the per-device program's result 0 is tensor<4x8xf32>, "
                                                       r"device 0's shard of it is tensor<16x8xf32>"):
        si.run_per_device(jax.jit(lambda t: t * 2), table(P("m", None)))


def test_uneven_shards_are_refused_naming_the_value():
    """An associative scan over 16 rows split 4 ways slices them into pieces of 2 rows:
    Shardy has no per-device type for 2 rows split 4 ways (XLA pads); the refusal names
    the op, its source line and the split."""
    with pytest.raises(partition.PartitionError, match=r"sdy\.all_slice at .*test_per_device_ops\.py:\d+ .*"
                                                       r"\(tensor<2x8xf32>\) is split 4 ways along dimension 0, "
                                                       r"of 2 elements"):
        si.run_per_device(jax.jit(lambda t: lax.associative_scan(jnp.add, t, axis=0)), table(P("m", None)))


OUTFEED = """
module @outfeed attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
      -> (tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
    %token = stablehlo.after_all : !stablehlo.token
    %0 = "stablehlo.outfeed"(%arg0, %token) {outfeed_config = ""} : (tensor<4xf32>, !stablehlo.token) -> !stablehlo.token
    %1 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""


def test_a_run_with_the_callers_host_queues_is_not_run_twice():
    """The check runs the global program too: with the caller's host queues it would
    write them again, so such a run is per device only and a PerDeviceWarning says it is
    unchecked; each device's outfeed wrote its own shard once. Without the caller's
    queues the global run gets queues of its own, and the run is checked."""
    x = np.arange(4.0, dtype=np.float32)
    queues = si.HostQueues()
    with pytest.warns(PerDeviceWarning, match="not checked against the global run: the program calls the host"):
        run = si.run_per_device(OUTFEED, x, io=queues)
    np.testing.assert_array_equal(run.outputs[0], 2 * x)
    assert sorted(entry[0].tolist() for entry in queues.outfeed) == [[0.0, 1.0], [2.0, 3.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerDeviceWarning)
        np.testing.assert_array_equal(si.run_per_device(OUTFEED, x).outputs[0], 2 * x)


def unreduced_cases(mesh):
    """Unreduced results: whole values made unreduced (the ones of a sum's gradient, a
    constant; an argument given an unreduced out_sharding: JAX's test_reduce_precision and
    test_cet_unreduced), and a product left as each device's partial sum (which si.run's
    global view holds as the sum: test_unreduced_einsum_basic)."""
    reduced = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P(None, reduced={"x"})))
    whole = jax.device_put(np.arange(4, dtype=np.int32).reshape(2, 2), NamedSharding(mesh, P()))
    columns = jax.device_put(np.arange(4, dtype=np.int32).reshape(2, 2), NamedSharding(mesh, P(None, "x")))
    rows = jax.device_put(np.arange(4, dtype=np.int32).reshape(2, 2), NamedSharding(mesh, P("x", None)))
    product = jax.jit(lambda a, b: jnp.einsum("ab,bc->ac", a, b, out_sharding=P(None, None, unreduced={"x"})))
    return [
        (jax.jit(jax.grad(lambda x: lax.reduce_precision(x, 8, 7).sum())), (reduced,)),
        (jax.jit(lambda x: jnp.array(x, out_sharding=P(None, None, unreduced={"x"}))), (whole,)),
        (product, (columns, rows)),
    ]


def test_unreduced_results_are_xlas_partials():
    """Each device's partial of an unreduced result is XLA's, with no mismatch against the
    global run: a whole value made unreduced with no replicated_to_unreduced written was
    kept whole on every device by Shardy's program (their sum n times the value); as XLA,
    the first device holds it and the others zeros. The partials of a product are summed
    before they are compared with the global view's sum."""
    mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):
        for function, arguments in unreduced_cases(mesh):
            xla = function(*arguments)
            with warnings.catch_warnings():
                warnings.simplefilter("error", PerDeviceWarning)
                run = si.run_per_device(function, *arguments)
            for device, shard in held(xla).items():
                np.testing.assert_array_equal(run.per_device[device][0], shard, strict=True)


def test_a_converted_argument_made_unreduced_sums_to_the_value():
    """With a conversion to f32 before the unreduced constraint XLA's CPU keeps the whole
    value on both devices (their sum twice the value; without the conversion it gives
    the second device zeros, as JAX's test_cet_unreduced expects): both runs here give
    what the sharding means, a sum over the devices equal to the value
    (docs/semantics.md)."""
    mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):
        whole = jax.device_put(np.arange(4, dtype=np.int32).reshape(2, 2), NamedSharding(mesh, P()))
        function = jax.jit(lambda x: jnp.array(x, dtype=jnp.float32, out_sharding=P(None, None, unreduced={"x"})))
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerDeviceWarning)
            run = si.run_per_device(function, whole)
    np.testing.assert_array_equal(run.per_device[0][0], np.arange(4, dtype=np.float32).reshape(2, 2), strict=True)
    np.testing.assert_array_equal(run.per_device[1][0], np.zeros((2, 2), np.float32), strict=True)
