"""Running what each device runs: Shardy's per-device program on the process grid
(sharding/per_device.py, the device's ``interp_spmd`` modes), against XLA's CPU with 8
host devices and against our global run.

Integer-valued float data make every sum exact, so the devices' results must equal
XLA's bit for bit whatever the order of sums; random data are judged against a bound
on the rounding of a reordered sum computed from the inputs (``reordered_sum_bound``).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from stablehlo_interp.device import placement
from stablehlo_interp.sharding.partition import PartitionError
from stablehlo_interp.sharding.per_device import PerDeviceMismatch, PerDeviceProgram
from test_sharding_device import assert_same_placement

INTEGERS = np.random.default_rng(0).integers(-8, 9, size=(8, 16)).astype(np.float32)


def mesh_of(platform: str) -> Mesh:
    return Mesh(np.array(jax.devices(platform)[:8]), ("x",))


def contracting_dim(platform):
    """``a @ b`` with the contracting dimension sharded: each device multiplies its
    columns of ``a`` by its rows of ``b``, and an all-reduce adds the partial products."""
    mesh = mesh_of(platform)
    a = jax.device_put(INTEGERS[:4], NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(INTEGERS.T[:, :8].copy(), NamedSharding(mesh, P("x", None)))
    return jax.jit(lambda a, b: a @ b), (a, b), "stablehlo.all_reduce"


def batch_dim(platform):
    """``a @ b`` with the rows of ``a`` sharded: each device computes its rows, nothing moves."""
    mesh = mesh_of(platform)
    a = jax.device_put(INTEGERS, NamedSharding(mesh, P("x", None)))
    b = jax.device_put(INTEGERS.T[:, :4].copy(), NamedSharding(mesh, P()))
    return jax.jit(lambda a, b: (a @ b) * 0.5 + 1), (a, b), None


def rows_to_columns(platform):
    """A reshard from rows to columns: an all-to-all."""
    mesh = mesh_of(platform)
    x = jax.device_put(INTEGERS, NamedSharding(mesh, P("x", None)))
    columns = NamedSharding(mesh, P(None, "x"))
    return jax.jit(lambda x: jax.lax.with_sharding_constraint(x * 2, columns)), (x,), "stablehlo.all_to_all"


def gathered(platform):
    """A reshard from rows to replicated: an all-gather."""
    mesh = mesh_of(platform)
    x = jax.device_put(INTEGERS, NamedSharding(mesh, P("x", None)))
    return jax.jit(lambda x: (x + 1).sum(axis=1), out_shardings=NamedSharding(mesh, P())), (x,), \
        "stablehlo.all_gather"


CASES = [contracting_dim, batch_dim, rows_to_columns, gathered]


def held(output) -> dict:
    return {shard.device.id: np.asarray(shard.data) for shard in output.addressable_shards}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_each_device_holds_what_it_holds_on_xla(case):
    """The device in mode per_device: each device runs its program (the case's collective
    too), and its result is XLA's bit for bit and the global run's (the default mode);
    mode check returns the global run's."""
    function, args, collective = case("interp")
    with warnings.catch_warnings(), si.on_device(si.tools.TraceRecorder()) as recorder:
        warnings.simplefilter("error", placement.PerDeviceWarning)
        per_device = jax.jit(function, compiler_options={"interp_spmd": "per_device"})(*args)
    ran = {(record.op, record.process) for record in recorder.traces[0]}
    assert {process for _, process in ran} == set(range(8))   # each device ran its own program
    assert collective is None or {(collective, device) for device in range(8)} <= ran
    with warnings.catch_warnings():
        warnings.simplefilter("error", placement.PerDeviceWarning)
        checked = jax.jit(function, compiler_options={"interp_spmd": "check"})(*args)
    global_run = function(*args)
    cpu_function, cpu_args, _ = case("cpu")
    xla = cpu_function(*cpu_args)
    assert per_device.sharding.spec == xla.sharding.spec
    ours, theirs, global_shards, checked_shards = held(per_device), held(xla), held(global_run), held(checked)
    assert sorted(ours) == sorted(theirs) == list(range(8))
    for device in range(8):
        np.testing.assert_array_equal(ours[device], theirs[device], strict=True)
        np.testing.assert_array_equal(ours[device], global_shards[device], strict=True)
        np.testing.assert_array_equal(checked_shards[device], global_shards[device], strict=True)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_run_per_device_runs_the_collective_and_matches_xla(case):
    """``si.run_per_device``: the devices' results and their global value are XLA's; the
    per-device program runs the collective the case is about, in every process."""
    function, args, collective = case("cpu")
    xla = function(*args)
    traffic = si.tools.CollectiveTraffic()
    run = si.run_per_device(function, *args, listeners=[traffic])
    np.testing.assert_array_equal(run.outputs, np.asarray(xla), strict=True)
    theirs = held(xla)
    assert len(run.per_device) == 8
    for device, results in enumerate(run.per_device):
        np.testing.assert_array_equal(results[0], theirs[device], strict=True)
    assert sorted({t.process for t in traffic.transfers if t.op == collective}) == (
        list(range(8)) if collective else [])
    if collective is None:
        assert traffic.transfers == []


def reordered_sum_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What two orders of the sums of ``a @ b`` (float32) can differ by: each order's error
    is at most ``(n - 1) u sum_k |a_ik b_kj|`` (Higham, Accuracy and Stability, 3.1)."""
    n, u = a.shape[1], np.finfo(np.float32).eps / 2
    return 2 * (n - 1) * u * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def test_random_contracting_dim_within_the_reordering_bound_and_check_says_why():
    """On random floats the per-device sums (each device's part, then the all-reduce) and
    the global program's differ in the last bits: both are within the bound of a
    reordered sum of XLA's result, and mode check warns naming the all-reduce."""
    rng = np.random.default_rng(1)
    a_value, b_value = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)
    results = {}
    for platform in ("cpu", "interp"):
        mesh = mesh_of(platform)
        a = jax.device_put(a_value, NamedSharding(mesh, P(None, "x")))
        b = jax.device_put(b_value, NamedSharding(mesh, P("x", None)))
        results[platform] = (jax.jit(lambda a, b: a @ b), a, b)
    function, a, b = results["interp"]
    xla = np.asarray(results["cpu"][0](*results["cpu"][1:]))
    bound = reordered_sum_bound(a_value, b_value)
    with pytest.warns(placement.PerDeviceWarning, match="within the rounding noise of the global program"):
        per_device = np.asarray(jax.jit(function, compiler_options={"interp_spmd": "per_device"})(a, b))
    assert (np.abs(per_device.astype(np.float64) - xla) <= bound).all()
    assert (np.abs(np.asarray(function(a, b)).astype(np.float64) - xla) <= bound).all()
    with pytest.warns(placement.PerDeviceWarning, match=r"(?s)result #0 differs on device.*adds floats in another "
                                                        r"order: .*stablehlo\.all_reduce"):
        checked = jax.jit(function, compiler_options={"interp_spmd": "check"})(a, b)
    np.testing.assert_array_equal(np.asarray(checked), np.asarray(function(a, b)))   # the global run's


def test_check_refuses_a_difference_no_reordered_sum_explains():
    """Where the per-device program sums no floats in another order (a reshard from rows to
    columns: no collective adds, no contraction), any difference between the two runs is
    a fault: one element changed is a PerDeviceMismatch naming it (the judge of rounding
    noise is not even asked)."""
    function, args, _ = rows_to_columns("cpu")
    call = si.program.prepare(function, args, per_device=True)
    assert call.partitioned.reordered_sums == []
    per_device = call.run_devices()
    expected = [list(results) for results in per_device]
    assert call.partitioned.check(expected, per_device, lambda: []) == []
    expected[5][0] = expected[5][0].copy()
    expected[5][0][0, 1] += 1
    with pytest.raises(PerDeviceMismatch, match=r"result #0 differs on device\(s\) \[5\]; device 5: 1 of 16 "
                                                r"element\(s\) differ, the first at \[0, 1\]"):
        call.partitioned.check(expected, per_device, lambda: pytest.fail("no sum is reordered: nothing to judge"))


def test_a_doubled_unreduced_value_runs_per_device():
    """Doubling an unreduced argument and reducing it: Shardy's per-device program gave
    each device twice the sum XLA and the global run give (found by mode per_device over
    tests/test_sharding_unreduced.py), until the partitioner's child made
    "replicated to unreduced" XLA's select on the partition id. Both modes now run the
    per-device program and give the global result, with no warning."""
    import warnings

    from jax.sharding import AxisType, reshard

    rows = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    mesh = Mesh(np.array(jax.devices("interp")[:8]).reshape(2, 2, 2), ("x", "y", "z"),
                axis_types=(AxisType.Explicit,) * 3)
    with jax.set_mesh(mesh):
        a = jax.device_put(rows, P(None, "x"))
        b = jax.device_put(rows.T, P("x", None))
        partials = jax.jit(lambda a, b: jnp.einsum("ij,jk->ik", a, b, out_sharding=P(None, None, unreduced={"x"})))(
            a, b)
        for mode in ("global", "per_device", "check"):
            doubled = jax.jit(lambda p: reshard(p + p, P(None, None)), compiler_options={"interp_spmd": mode})
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                np.testing.assert_array_equal(np.asarray(doubled(partials)), 2 * rows @ rows.T)


@pytest.mark.parametrize("factorization", [jax.lax.linalg.cholesky, jax.lax.linalg.qr, jax.lax.linalg.eigh,
                                           jax.lax.linalg.svd], ids=lambda function: function.__name__)
def test_a_lapack_call_on_a_matrix_split_by_rows_runs_per_device(factorization):
    """A LAPACK call on a matrix split by rows over 2 devices: the per-device program
    gathers the rows before the call (as XLA's), so both modes run it with no warning
    (the partitioner's verifier refused the program before), each device computes the
    whole factorization, and mode check finds it equal to the global run's, which
    equals XLA's CPU (the same LAPACK) bit for bit."""
    import warnings

    matrix = INTEGERS[:6, :6] @ INTEGERS[:6, :6].T + 64 * np.eye(6, dtype=np.float32)
    outputs = {}
    for platform, mode in (("cpu", None), ("interp", "per_device"), ("interp", "check")):
        x = jax.device_put(matrix, NamedSharding(Mesh(np.array(jax.devices(platform)[:2]), ("x",)), P("x")))
        options = {"interp_spmd": mode} if mode else None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            outputs[platform, mode] = jax.tree.leaves(jax.jit(factorization, compiler_options=options)(x))
    for ours in (outputs["interp", "per_device"], outputs["interp", "check"]):
        assert len(ours) == len(outputs["cpu", None])
        for output, xla in zip(ours, outputs["cpu", None]):
            for (_, ours_held), (_, xla_held) in zip(sorted(held(output).items()), sorted(held(xla).items())):
                np.testing.assert_array_equal(ours_held, xla_held)


def test_collective_traffic_counts_the_bytes_by_hand():
    """Contracting dimension over 8 devices, result f32[4, 8]: each device hands the
    all-reduce its partial product (4 * 8 * 4 = 128 bytes) and gets the sum back: 1024
    bytes sent and 1024 received. An all-gather of f32[8, 16] sharded by rows: each
    device sends its row (64 bytes) and gets all 8 (512): 512 sent, 4096 received."""
    function, args, _ = contracting_dim("cpu")
    traffic = si.tools.CollectiveTraffic()
    si.run_per_device(function, *args, listeners=[traffic])
    assert [(t.process, t.sent, t.received) for t in sorted(traffic.transfers, key=lambda t: t.process)] == [
        (device, 128, 128) for device in range(8)]
    assert (traffic.sent, traffic.received) == (1024, 1024)
    assert list(traffic.by_op().values()) == [(1024, 1024)]

    mesh = mesh_of("cpu")
    x = jax.device_put(INTEGERS, NamedSharding(mesh, P("x", None)))
    gather = jax.jit(lambda x: x * 1, out_shardings=NamedSharding(mesh, P()))
    traffic = si.tools.CollectiveTraffic()
    run = si.run_per_device(gather, x, listeners=[traffic])
    np.testing.assert_array_equal(run.outputs, INTEGERS)
    assert {t.op for t in traffic.transfers} == {"stablehlo.all_gather"}
    assert (traffic.sent, traffic.received) == (512, 4096)


def test_trace_shows_what_each_device_computed():
    """``si.trace(..., per_device=True)``: each device's dot_general is the product of its
    own shards (NumPy), on local shapes, and the trace prints each process's ops."""
    function, args, _ = contracting_dim("cpu")
    trace = si.trace(function, *args, per_device=True, values=True)
    dots = trace.find("stablehlo.dot_general")
    assert sorted(record.process for record in dots) == list(range(8))
    a, b = INTEGERS[:4], INTEGERS.T[:, :8]
    for record in dots:
        columns = slice(2 * record.process, 2 * record.process + 2)
        np.testing.assert_array_equal(record.values[0], a[:, columns] @ b[columns])
    text = str(trace)
    assert all(f"device {device}:" in text for device in range(8))
    np.testing.assert_array_equal(trace.outputs[0], a @ b)


def test_device_trace_of_a_per_device_run_is_one_trace():
    """On the device, one TraceRecorder sees one run of the 8 processes as one trace."""
    function, args, _ = contracting_dim("interp")
    with si.on_device(si.tools.TraceRecorder()) as recorder:
        jax.jit(function, compiler_options={"interp_spmd": "per_device"})(*args)
    assert len(recorder.traces) == 1
    assert sorted({record.process for record in recorder.traces[0]}) == list(range(8))


UNEVEN_SLICE = r"\(tensor<3x\dxf32>\) is split 2 ways along dimension 0, of 3 elements; Shardy's partitioner has no per-device type"


def test_where_shardy_cannot_partition_the_global_program_runs_and_says_why():
    """3 of 4 rows kept sharded over 2 devices: Shardy's global-to-local pass has no
    per-device type for uneven shards (XLA pads); the mode warns naming the value and its
    source line, and the global program runs."""
    results = {}
    for platform in ("cpu", "interp"):
        mesh = Mesh(np.array(jax.devices(platform)[:2]), ("x",))
        x = jax.device_put(INTEGERS[:4, :2], NamedSharding(mesh, P("x")))
        rows = NamedSharding(mesh, P("x"))
        results[platform] = (lambda x, rows=rows: jax.lax.with_sharding_constraint(x[:3], rows).sum(0), x)
    function, x = results["interp"]
    with pytest.warns(placement.PerDeviceWarning, match=f"runs the global program.*{UNEVEN_SLICE}"):
        ours = jax.jit(function, compiler_options={"interp_spmd": "per_device"})(x)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.jit(results["cpu"][0])(results["cpu"][1])))
    with pytest.raises(si.ModuleError, match=UNEVEN_SLICE):
        si.run_per_device(jax.jit(results["cpu"][0]), results["cpu"][1])


def test_mode_from_the_environment_and_bad_modes(monkeypatch):
    monkeypatch.setenv(placement.SPMD_VARIABLE, "per-device")
    assert placement.spmd_mode() == placement.PER_DEVICE
    assert placement.spmd_mode("check") == placement.CHECK
    monkeypatch.setenv(placement.SPMD_VARIABLE, "everywhere")
    with pytest.raises(si.ArgumentError, match="STABLEHLO_INTERP_SPMD is 'everywhere'; the modes are global, "
                                               "per_device, check"):
        placement.spmd_mode()
    function, args, _ = contracting_dim("interp")
    with pytest.raises(Exception, match="the compiler option interp_spmd is 'sometimes'"):
        jax.jit(function, compiler_options={"interp_spmd": "sometimes"})(*args)


def test_per_device_program_needs_a_sharded_program():
    with pytest.raises(si.ArgumentError, match="1 replica\\(s\\) x 1 partition\\(s\\)"):
        PerDeviceProgram(si.load(jax.jit(jnp.sin).lower(np.float32(1))))


def test_a_host_callback_runs_on_its_device():
    """JAX places a host callback on one device (a maximal sharding, ``<@maximal_mesh_0, []>``
    on a tensor of any rank), which Shardy's partitioner leaves with its global type on every
    device: that device alone calls it and broadcasts its results, as XLA does, and each
    device holds XLA's shards."""
    results = {}
    for platform in ("cpu", "interp"):
        x = jax.device_put(INTEGERS, NamedSharding(mesh_of(platform), P("x")))
        results[platform] = jax.jit(lambda v: jax.pure_callback(lambda w: w * 2, jax.ShapeDtypeStruct(v.shape, v.dtype),
                                                                v) + 1), x
    function, x = results["interp"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", placement.PerDeviceWarning)
        ours = jax.jit(function, compiler_options={"interp_spmd": "per_device"})(x)
    assert_same_placement(results["cpu"][0](results["cpu"][1]), ours)


CUSTOM_CALL_WITHOUT_RULE = """module @m attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%x: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
      -> (tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
    %0 = stablehlo.custom_call @annotate_device_placement(%x) {has_side_effect = true,
        mhlo.frontend_attributes = {_xla_buffer_placement = "device"}} : (tensor<4xf32>) -> tensor<4xf32>
    %1 = stablehlo.add %0, %0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""


def test_a_custom_call_without_a_sharding_rule_is_not_partitioned():
    """Shardy's partitioner gives a custom call without ``sdy.sharding_rule`` its devices'
    shards but keeps its global result type: a per-device run refuses it, naming the call."""
    with pytest.raises(PartitionError, match="custom call @annotate_device_placement at -:5 .* no sdy.sharding_rule"):
        si.run_per_device(CUSTOM_CALL_WITHOUT_RULE, np.arange(4, dtype=np.float32))


def test_nonfinite_finder_names_the_device_whose_op_made_the_nan(monkeypatch):
    """Mode per_device chosen by the environment: the square root of -1 is taken by the
    device holding element 2 of a vector sharded over 4 devices, on its one element."""
    monkeypatch.setenv(placement.SPMD_VARIABLE, "per_device")
    mesh = Mesh(np.array(jax.devices("interp")[:4]), ("x",))
    x = jax.device_put(np.array([4.0, 1.0, -1.0, 9.0], np.float32), NamedSharding(mesh, P("x")))
    finder = si.tools.NonFiniteFinder(stop=False)
    with si.on_device(finder):
        total = jax.jit(lambda v: jnp.sqrt(v).sum())(x)
    assert np.isnan(np.asarray(total))
    (report,) = finder.reports
    assert (report.op, report.process) == ("stablehlo.sqrt", 2)
    np.testing.assert_array_equal(report.operands[0], [-1.0])
    assert "  on device 2" in str(report).splitlines()


def manual_everywhere(text: str) -> str:
    """The per-device program ``text`` with every argument and result of @main marked
    ``{manual}``: XLA's SPMD partitioner then leaves it as it is, and each device runs it
    on its own buffers."""
    from jaxlib.mlir import ir

    from stablehlo_interp.ir.sources import make_context

    with make_context():
        module = ir.Module.parse(text)
        main = next(op for op in module.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        manual = ir.StringAttr.get("{manual}")
        for key, count in (("arg_attrs", len(main.regions[0].blocks[0].arguments)),
                           ("res_attrs", len(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
                                             .results))):
            old = [ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes[key])] if key in main.attributes \
                else [ir.DictAttr.get({})] * count
            main.attributes[key] = ir.ArrayAttr.get([
                ir.DictAttr.get({**{named.name: named.attr for named in d}, "mhlo.sharding": manual}) for d in old])
        return module.operation.get_asm()


def xla_runs(text: str, per_device_args: list) -> list:
    """Each device's results of the per-device program ``text`` compiled by XLA's CPU for 8
    partitions and run on the devices' own arguments."""
    from jaxlib import xla_client

    devices = jax.devices("cpu")[:8]
    options = xla_client.CompileOptions()
    build = options.executable_build_options
    build.num_replicas, build.num_partitions, build.use_spmd_partitioning = 1, 8, True
    build.device_assignment = xla_client.DeviceAssignment.create(np.arange(8).reshape(1, 8))
    executable = devices[0].client.compile_and_load(manual_everywhere(text), xla_client.DeviceList(tuple(devices)),
                                                    options)
    everywhere = NamedSharding(Mesh(np.array(devices), ("d",)), P())
    arrays = [jax.make_array_from_single_device_arrays(
        np.shape(per_device_args[0][i]), everywhere,
        [jax.device_put(per_device_args[d][i], devices[d]) for d in range(8)]) for i in range(len(per_device_args[0]))]
    outputs = executable.execute_sharded(arrays).disassemble_into_single_device_arrays()
    return [[np.asarray(output[d]) for output in outputs] for d in range(8)]


def reshard_rows_to_y_columns_to_x(platform):
    """From rows over x to rows over y and columns over x on a 4 x 2 mesh: Shardy's
    per-device program reorders the devices with a collective_permute."""
    mesh = Mesh(np.array(jax.devices(platform)[:8]).reshape(4, 2), ("x", "y"))
    x = jax.device_put(INTEGERS[:, :8], NamedSharding(mesh, P("x")))
    target = NamedSharding(mesh, P("y", "x"))
    return jax.jit(lambda v: jax.lax.with_sharding_constraint(v, target)), (x,), None


@pytest.mark.parametrize("case", CASES + [reshard_rows_to_y_columns_to_x], ids=lambda case: case.__name__)
def test_the_grid_runs_the_per_device_program_as_xla_runs_it(case):
    """The same per-device program, run by XLA's CPU on each device's shards, gives each
    device what our grid gives it, bit for bit: the collectives move what XLA's move."""
    from stablehlo_interp.sharding import partition

    function, args, _ = case("cpu")
    call = si.program.prepare(function, args)
    text = partition.per_device_program(call.program.module)
    local = si.load(text)
    shards = [[np.asarray(shard) for shard in device_args] for device_args in
              [[held(arg)[device] for arg in args] for device in range(8)]]
    ours = local.run_grid(shards)
    for mine, theirs in zip(ours, xla_runs(text, shards)):
        for a, b in zip(mine, theirs):
            np.testing.assert_array_equal(a, b, strict=True)


def test_a_reshard_shardy_partitions_wrong_runs_globally():
    """Shardy's per-device program for this reshard gives devices other shards than XLA's
    (the test above: XLA runs that program as the grid does); the mode refuses it with
    the reason, and the global program's shards are XLA's."""
    function, args, _ = reshard_rows_to_y_columns_to_x("interp")
    with pytest.warns(placement.PerDeviceWarning, match="collective_permute of its own"):
        ours = jax.jit(function, compiler_options={"interp_spmd": "per_device"})(*args)
    cpu_function, cpu_args, _ = reshard_rows_to_y_columns_to_x("cpu")
    theirs = held(cpu_function(*cpu_args))
    for device, shard in held(ours).items():
        np.testing.assert_array_equal(shard, theirs[device], strict=True)


def test_a_convolution_whose_windows_cross_shard_borders_gathers_the_rows():
    """A 3x3 "SAME" convolution of an image sharded by rows needs the neighbouring rows
    (XLA exchanges them); Shardy's per-device program convolved each device's rows alone.
    Now the rows are gathered whole before the convolution (more bytes than XLA's halo)
    and each device keeps its own rows of the result: its shards are XLA's. Sharded on
    the batch, the same convolution needs no gather."""
    image = INTEGERS[:, :8]
    def convolve(v):
        return jax.lax.conv_general_dilated(v[None, None], jnp.ones((1, 1, 3, 3), v.dtype), (1, 1), "SAME")[0, 0]

    def batch_convolve(v):
        return jax.lax.conv_general_dilated(v[:, None, :, None], jnp.ones((1, 1, 3, 1), v.dtype), (1, 1),
                                            "SAME")[:, 0, :, 0]

    for function, gathers in ((convolve, True), (batch_convolve, False)):
        xla = jax.jit(function)(jax.device_put(image, NamedSharding(mesh_of("cpu"), P("x"))))
        x = jax.device_put(image, NamedSharding(mesh_of("interp"), P("x")))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", placement.PerDeviceWarning)
            ours = jax.jit(function, compiler_options={"interp_spmd": "per_device"})(x)
        assert [str(w.message) for w in caught if w.category is placement.PerDeviceWarning] == []
        cpu_image = jax.device_put(image, NamedSharding(mesh_of("cpu"), P("x")))
        text = si.run_per_device(jax.jit(function), cpu_image).program.text
        before = text[:text.index("stablehlo.convolution")]
        assert ('"stablehlo.all_gather"' in before) == gathers
        theirs = held(xla)
        for device, shard in held(ours).items():
            np.testing.assert_array_equal(shard, theirs[device], strict=True)


CHILD_DROPS_A_PROGRAM = """
import os, warnings
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from stablehlo_interp.sharding.per_device import PerDeviceProgram
PerDeviceProgram._types_other_than_shards = lambda self: "refused for the test"
warnings.simplefilter("ignore")
mesh = Mesh(np.array(jax.devices("interp")), ("x",))
a = jax.device_put(np.ones((4, 16), np.float32), NamedSharding(mesh, P(None, "x")))
print(np.asarray(jax.jit(lambda a: (a * 2).sum(1), compiler_options={"interp_spmd": "per_device"})(a)).tolist())
"""


def test_a_per_device_program_dropped_while_the_device_compiles_leaves_the_process_alive():
    """The device compiles on XLA's threads, whose Python state (thread-locals too) is
    cleared when the call returns; a per-device program loaded there and then refused
    was the last user of that thread's shared MLIR context, which died then and
    crashed the process. Run in a child process: it must live and print the sums."""
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", CHILD_DROPS_A_PROGRAM], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.strip() == "[32.0, 32.0, 32.0, 32.0]"


def sqrt_then_sum(platform):
    """The square root of a vector sharded over 4 devices, then its sum: device 2 holds
    the -1, its sqrt makes the NaN, and the all-reduce hands it to every device."""
    mesh = Mesh(np.array(jax.devices(platform)[:4]), ("x",))
    x = jax.device_put(np.array([4.0, 1.0, -1.0, 9.0], np.float32), NamedSharding(mesh, P("x")))
    return jax.jit(lambda v: (jnp.sqrt(v) * 2, jnp.sqrt(v).sum())), (x,)


def test_find_nonfinite_per_device_follows_the_nan_through_the_all_reduce():
    """``si.find_nonfinite(..., per_device=True)``: each device whose shards hold a NaN
    has an answer; the NaN of every device's sum comes from device 2's sqrt of its own
    element (-1), across the all-reduce; only device 2's elementwise shard is NaN, as on
    XLA (whose shards are the oracle of which devices hold NaNs)."""
    function, args = sqrt_then_sum("cpu")
    doubled, total = function(*args)
    nan_devices = {device for device, shard in held(doubled).items() if np.isnan(shard).any()} | \
        {device for device, shard in held(total).items() if np.isnan(shard).any()}
    found = si.find_nonfinite(function, *args, per_device=True)
    assert sorted(found.devices) == sorted(nan_devices) == [0, 1, 2, 3]
    for device, origins in found.devices.items():
        assert [index for index, _ in origins.nonfinite_results] == ([0, 1] if device == 2 else [1])
        assert len(origins.origins) == (2 if device == 2 else 1)   # the two sqrt ops of the line
        assert {(origin.op, origin.process) for origin in origins.origins} == {("stablehlo.sqrt", 2)}
        origin = origins.origins[-1]
        np.testing.assert_array_equal(origin.operands[0], [-1.0])
        assert origin.location.frame.line == sqrt_then_sum.__code__.co_firstlineno + 5
        if device != 2:
            assert f"stablehlo.all_reduce (test_per_device.py:{origin.location.frame.line}) on device {device}" \
                in str(origins)
    assert str(found).splitlines()[0] == "device 0:"
    first = si.find_nonfinite(function, *args, per_device=True, mode="first")
    assert sorted(first.devices) == [0, 1, 2, 3]
    assert (first.devices[2].op, first.devices[2].process) == ("stablehlo.sqrt", 2)
    assert {first.devices[device].op for device in (0, 1, 3)} == {"stablehlo.all_reduce"}


def test_find_nonfinite_per_device_falls_back_where_shardy_cannot_partition():
    """Where Shardy cannot partition, a PerDeviceWarning says why and the global program
    answers (its sqrt of the -1)."""
    mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
    x = jax.device_put(np.array([[1.0], [-1.0], [4.0], [9.0]], np.float32), NamedSharding(mesh, P("x")))
    rows = NamedSharding(mesh, P("x"))
    function = jax.jit(lambda v: jnp.sqrt(jax.lax.with_sharding_constraint(v[:3], rows)).sum(0))
    with pytest.warns(placement.PerDeviceWarning, match=f"falls back to the global program.*{UNEVEN_SLICE}"):
        found = si.find_nonfinite(function, x, per_device=True)
    assert found.op == "stablehlo.sqrt" and found.origins[0].process is None
    np.testing.assert_array_equal(found.operands[0], [[1.0], [-1.0], [4.0]])


def test_nonfinite_on_the_device_stops_per_device_naming_the_device():
    """What STABLEHLO_INTERP_NONFINITE=1 attaches (a NonFiniteFinder that stops), in mode
    per_device: JAX raises the report, naming the device whose sqrt made the NaN."""
    function, args = sqrt_then_sum("interp")
    with si.on_device(si.tools.NonFiniteFinder(stop=True)), pytest.raises(Exception) as raised:
        jax.jit(function, compiler_options={"interp_spmd": "per_device"})(*args)
    assert "NaN made by stablehlo.sqrt" in str(raised.value)
    assert "on device 2" in str(raised.value)


def test_compare_per_device_against_xla_on_each_device():
    """``si.compare(..., per_device=True)`` on XLA's CPU with 8 devices: the backend's
    results on each device are the addressable shards ``jax.jit`` gives (bit for bit),
    each device's partitioned run agrees with them within tolerance on random floats,
    and the report counts each device's bytes at the all-reduce by hand (a f32[4, 8]
    partial product: 128 bytes sent and 128 received)."""
    rng = np.random.default_rng(2)
    mesh = mesh_of("cpu")
    a = jax.device_put(rng.standard_normal((4, 64)).astype(np.float32), NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(rng.standard_normal((64, 8)).astype(np.float32), NamedSharding(mesh, P("x", None)))
    function = jax.jit(lambda a, b: a @ b)
    xla = held(function(a, b))
    comparison = si.compare(function, a, b, per_device=True)
    assert comparison.ok and comparison.against == "per device" and len(comparison.outputs) == 8
    for device in range(8):
        np.testing.assert_array_equal(comparison.theirs[device][0], xla[device], strict=True)
        bound = reordered_sum_bound(np.asarray(a), np.asarray(b))   # ours and XLA's: two orders of the sums
        assert (np.abs(comparison.ours[device][0].astype(np.float64) - xla[device]) <= 2 * bound).all()
    assert [(t.process, t.sent, t.received) for t in sorted(comparison.traffic.transfers, key=lambda t: t.process)] \
        == [(device, 128, 128) for device in range(8)]
    text = str(comparison)
    assert text.splitlines()[0] == "each device's partitioned program against cpu: its results on each device"
    assert "device 7: agrees" in text and "1024 bytes sent, 1024 received" in text


def test_compare_per_device_names_the_device_whose_shard_differs():
    """A backend that gives global results only (a callable): each device is compared with
    its shards of them. The backend's x * 2 with one element off (row 0, column 5): of
    the columns over 8 devices, device 2 holds columns 4-5, and only it differs."""
    function, args, _ = rows_to_columns("cpu")

    def off_by_one(module_text, arguments):
        wrong = np.asarray(arguments[0]) * 2
        wrong[0, 5] += 1
        return [wrong]

    comparison = si.compare(function, *args, per_device=True, backend=off_by_one)
    assert comparison.against == "shards" and not comparison.ok
    assert [device for device, differences in enumerate(comparison.outputs) if differences[0] is not None] == [2]
    expected = (INTEGERS * 2)[:, 4:6].copy()
    expected[0, 1] += 1
    np.testing.assert_array_equal(comparison.theirs[2][0], expected)
    assert "device 2: differs" in str(comparison) and "stablehlo.all_to_all" in str(comparison)


def test_compare_trace_and_explore_per_device_fall_back_where_shardy_cannot_partition():
    """Each warns with Shardy's reason and answers for the global run: compare agrees
    with XLA, the trace has no process, the page no device chooser; the sums are
    NumPy's."""
    mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
    x = jax.device_put(INTEGERS[:4, :2], NamedSharding(mesh, P("x")))
    rows = NamedSharding(mesh, P("x"))
    function = jax.jit(lambda v: jax.lax.with_sharding_constraint(v[:3], rows).sum(0))
    falls_back = f"falls back to the global program.*{UNEVEN_SLICE}"
    with pytest.warns(placement.PerDeviceWarning, match=falls_back):
        comparison = si.compare(function, x, per_device=True)
    assert isinstance(comparison, si.tools.Comparison) and comparison.ok
    with pytest.warns(placement.PerDeviceWarning, match=falls_back):
        trace = si.trace(function, x, per_device=True)
    assert {record.process for record in trace} == {None}
    np.testing.assert_array_equal(trace.outputs[0], INTEGERS[:3, :2].sum(0))
    with pytest.warns(placement.PerDeviceWarning, match=falls_back):
        exploration = si.explore(function, x, per_device=True)
    assert "devices" not in exploration.data and exploration.traffic is None
    (reduce,) = exploration.trace.find("stablehlo.reduce")
    np.testing.assert_array_equal(reduce.values[0], INTEGERS[:3, :2].sum(0))


def test_the_command_line_runs_each_device(tmp_path, capsys):
    """``--per-device`` on trace --nonfinite, compare and explore: the module of
    sqrt_then_sum, with XLA's shards as the oracle of compare's per-device results."""
    from stablehlo_interp.cli import main

    function, args = sqrt_then_sum("cpu")
    module = tmp_path / "sharded.mlir"
    module.write_text(function.lower(*args).as_text(debug_info=True))
    good = tmp_path / "good.npy"
    np.save(good, np.array([4.0, 1.0, 16.0, 9.0], np.float32))
    bad = tmp_path / "bad.npy"
    np.save(bad, np.asarray(args[0]))
    assert main(["trace", str(module), "--input", str(bad), "--nonfinite", "--per-device"]) == 1   # NaNs found
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("device ")] == [f"device {d}:" for d in range(4)]
    assert out.count("NaN made by stablehlo.sqrt") == 5 and out.count("on device 2") == 5
    assert main(["compare", str(module), "--input", str(good), "--per-device"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "each device's partitioned program against cpu: its results on each device"
    x = jax.device_put(np.array([4.0, 1.0, 16.0, 9.0], np.float32), args[0].sharding)
    doubled = held(function(x)[0])
    for device in range(4):
        assert f"device {device}: agrees\n  result[0]: {si.tools.summarize(doubled[device])}" in out
    page = tmp_path / "page.html"
    assert main(["explore", str(module), "--input", str(good), "--per-device", "--output", str(page)]) == 0
    assert '"devices":{"count":4' in page.read_text()
    assert main(["explore", str(module), "--input", str(bad), "--per-device", "--model-explorer",
                 str(tmp_path / "me")]) == 0
    assert "max_abs_device3.json" in capsys.readouterr().out
    for device, made in [(0, [1]), (2, [1, 1])]:   # the sum's sqrt (as device 2 ran it); on device 2, both
        (origin,) = json.loads((tmp_path / "me" / f"nan_origin_device{device}.json").read_text()).values()
        assert [entry["value"] for entry in origin["results"].values()] == made


def mesh_2x4(platform):
    from jax.sharding import AxisType

    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices(platform)[:8])


def vocabulary_lookup(platform):
    """An embedding table split by rows (vocabulary) over model: each device gathers from
    its rows, zeros elsewhere, and an all-reduce adds them (as XLA partitions it)."""
    mesh = mesh_2x4(platform)
    table = jax.device_put(np.arange(64 * 8, dtype=np.float32).reshape(64, 8), NamedSharding(mesh, P("model", None)))
    ids = jax.device_put((np.arange(16, dtype=np.int32).reshape(2, 8) * 7) % 64, NamedSharding(mesh, P("data", None)))
    return jax.jit(lambda t, i: jnp.take(t, i, axis=0)), (table, ids)


def out_of_range_lookup(platform):
    """Rows past the table's end, in a gather JAX does not clamp (``promise_in_bounds``):
    the spec's gather clamps the start indices to the last row (63) before each device
    looks in its own rows; XLA's devices give that row too."""
    mesh = mesh_2x4(platform)
    table = jax.device_put(np.arange(64 * 8, dtype=np.float32).reshape(64, 8), NamedSharding(mesh, P("model", None)))
    ids = jax.device_put(np.array([[70, -3, 5, 63], [100, 0, 17, 33]], np.int32), NamedSharding(mesh, P("data", None)))
    return jax.jit(lambda t, i: t.at[i].get(mode="promise_in_bounds")), (table, ids)


def label_gather(platform):
    """Cross-entropy's label gather from logits split by vocabulary: take_along_axis
    (batching dimensions, the batch over data too)."""
    mesh = mesh_2x4(platform)
    logits = jax.device_put(INTEGERS.reshape(4, 2, 16), NamedSharding(mesh, P("data", None, "model")))
    labels = jax.device_put(np.array([[0, 15], [4, 7], [8, 3], [12, 11]], np.int32), NamedSharding(mesh, P("data", None)))
    return jax.jit(lambda logits, y: jnp.take_along_axis(logits, y[..., None], axis=-1)), (logits, labels)


def row_parallel_into_split_features(platform):
    """A row-parallel matmul whose result stays split by features (a reduce-scatter in
    Shardy's program, which the partitioner's global-to-local pass aborted on), then a
    LayerNorm's chlo.square (no sharding rule in Shardy)."""
    mesh = mesh_2x4(platform)
    h = jax.device_put(INTEGERS[:, :8], NamedSharding(mesh, P("data", "model")))
    w = jax.device_put(INTEGERS.T[:8, :8].copy(), NamedSharding(mesh, P("model", None)))
    return jax.jit(lambda h, w: jnp.square(h @ w) + 1, out_shardings=NamedSharding(mesh, P("data", "model"))), (h, w)


@pytest.mark.parametrize("case", [vocabulary_lookup, out_of_range_lookup, label_gather,
                                  row_parallel_into_split_features],
                         ids=lambda case: case.__name__)
def test_megatron_layouts_partition_and_match_xla(case):
    """The layouts of a Megatron-style model that Shardy's partitioner alone could not
    partition (sharding/partition/'s rewrites): each device's results are XLA's shards,
    bit for bit (integer-valued floats: every sum exact), without a fallback."""
    function, args = case("cpu")
    xla = function(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", placement.PerDeviceWarning)
        run = si.run_per_device(function, *args)
    np.testing.assert_array_equal(run.outputs, np.asarray(xla), strict=True)
    theirs = held(xla)
    for device in range(8):
        np.testing.assert_array_equal(run.per_device[device][0], theirs[device], strict=True)


def test_a_collective_in_a_loop_is_printed_once_per_device_with_its_runs():
    """A psum of an f32[2] over 8 devices inside a fori_loop of 3: each device sends and
    receives 8 bytes a run, 24 in its 3 runs; the report's line names each device once."""
    mesh = mesh_of("cpu")

    def body(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: v - jax.lax.psum(v, "x") / 8, x)

    function = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("x")))
    traffic = si.tools.CollectiveTraffic()
    run = si.run_per_device(function, x, listeners=[traffic])
    np.testing.assert_allclose(run.outputs, np.asarray(function(x)))
    assert len(traffic.transfers) == 24 and (traffic.sent, traffic.received) == (192, 192)
    (line,) = str(traffic).splitlines()
    assert line.endswith("sent/received " + ", ".join(f"{device}: 24/24 in 3 runs" for device in range(8)) + ")")
