"""The profiler (tools/profile.py): calls and own time per op name and per source line."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.cli import main
from stablehlo_interp.tools.profile import Profiler
from test_tools_trace import DOUBLING

# DOUBLING with n = 5, counted by hand: two constants in @main and two in each of the 5
# bodies, the while, 6 conds of one compare, 5 bodies of broadcast, multiply and add,
# the reduce: 35 ops.
DOUBLING_CALLS = {"stablehlo.constant": 12, "stablehlo.while": 1, "stablehlo.compare": 6,
                  "stablehlo.broadcast_in_dim": 5, "stablehlo.multiply": 5, "stablehlo.add": 5,
                  "stablehlo.reduce": 1}


@pytest.fixture
def doubling(tmp_path):
    path = tmp_path / "doubling.mlir"
    path.write_text(DOUBLING)
    return si.load(path)


def test_calls_per_op_name_and_per_line(doubling):
    profile = si.profile(doubling, np.array([1, 2, 3], np.float32), np.array(5, np.int32))
    assert {name: spent.calls for name, spent in profile.by_op().items()} == DOUBLING_CALLS
    assert profile.calls == 35
    lines = {line: spent.calls for line, spent in profile.by_line().items()}
    # each line of the module's text is one op: the body's run 5 times, the cond's 6
    assert lines == {"doubling.mlir:2": 1, "doubling.mlir:3": 1, "doubling.mlir:5": 6, "doubling.mlir:8": 5,
                     "doubling.mlir:9": 5, "doubling.mlir:10": 5, "doubling.mlir:11": 5, "doubling.mlir:12": 5,
                     "doubling.mlir:15": 1, "doubling.mlir:16": 1}
    assert all(spent.seconds >= 0 for spent in profile.by_op().values())
    assert profile.wall >= profile.seconds > 0 and profile.overhead >= 0
    assert list(profile.by_op().values()) == sorted(profile.by_op().values(), key=lambda t: -t.seconds)


def test_own_time_leaves_out_the_ops_of_regions(doubling):
    """A clock that ticks once per reading: every op without regions spans one tick; the
    while spans its 31 ops' two readings each, plus one, and its own time is that span less
    the ops' own spans. The own times add up to the spans of @main's ops."""
    ticks = itertools.count()
    profiler = Profiler(clock=lambda: next(ticks))
    doubling.run(np.array([1, 2, 3], np.float32), np.array(5, np.int32), listeners=[profiler])
    profile = profiler.profile()
    for name, spent in profile.by_op().items():
        assert spent.seconds == (2 * 31 + 1 - 31 if name == "stablehlo.while" else spent.calls), name
    assert profile.seconds == 3 + (2 * 31 + 1)   # @main: two constants and the reduce, and the while
    assert profile.wall is None and profile.overhead is None


def test_a_jax_function_and_the_table():
    def f(x):
        return jax.lax.fori_loop(0, 4, lambda i, v: jnp.sin(v) * 2, x)

    x = np.linspace(0, 1, 8, dtype=np.float32)
    profile = si.profile(f, x)
    calls = {name: spent.calls for name, spent in profile.by_op().items()}
    assert calls["stablehlo.sine"] == 4 and calls["stablehlo.while"] == 1
    # the oracle: the ops the trace records, by name
    trace = si.trace(f, x)
    assert calls == {name: sum(r.op == name for r in trace.records) for name in calls}
    assert sum(calls.values()) == len(trace.records)
    table = profile.text(top=2).splitlines()
    assert table[0].split() == ["op", "time", "share", "calls", "per", "call"]
    assert len(table) == 1 + 2 + 2   # the heading, two rows, "... more", the summary
    assert table[-1].startswith(f"{len(trace.records)} ops, ")
    line_table = profile.text(by="line")
    assert "test_tools_profile.py:" in line_table


def test_a_failing_run_raises(doubling):
    with pytest.raises(si.ArgumentError):
        si.profile(doubling, np.array([1, 2, 3], np.float32))


def test_cli(capsys, tmp_path):
    path = tmp_path / "doubling.mlir"
    path.write_text(DOUBLING)
    status = main(["profile", str(path), "-i", "[1, 2, 3]", "-i", "5", "--top", "3", "--repeat", "2"])
    out = capsys.readouterr().out.splitlines()
    assert status == 0 and len(out) == 1 + 3 + 2
    names = [row.split()[0] for row in out[1:4]]
    assert set(names) <= set(DOUBLING_CALLS)
    assert all(int(row.split()[-3]) == DOUBLING_CALLS[row.split()[0]] for row in out[1:4])
    assert out[-1].startswith("35 ops, ")
    status = main(["profile", str(path), "-i", "[1, 2, 3]", "-i", "5", "--by", "line"])
    out = capsys.readouterr().out
    assert status == 0 and "doubling.mlir:10" in out


def test_a_devices_collective_leaves_out_the_other_devices_work():
    """In a per-device run the 8 processes run one at a time, and each waits at the
    all-reduce while the others multiply: the all-reduce's own time is its exchange, not
    their dots (which their own dot ops count). Before, each all-reduce counted the others'
    work, and the ops' times summed to several times the run's wall time. The dots contract
    16384 columns into a 64x64 result, so each dot is some 30 times its all-reduce and the
    comparison holds on a loaded machine (192x768 dots were as fast as the exchange)."""
    import time

    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("x",))
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((64, 8 * 16384)).astype(np.float32), NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(rng.standard_normal((8 * 16384, 64)).astype(np.float32), NamedSharding(mesh, P("x", None)))
    matmul = jax.jit(lambda a, b: jnp.tanh(a @ b))
    profiler = Profiler(clock=time.process_time)
    start = time.process_time()
    si.run_per_device(matmul, a, b, listeners=[profiler])
    spent = time.process_time() - start
    profile = profiler.profile()
    by_op = profile.by_op()
    assert by_op["stablehlo.all_reduce"].calls == by_op["stablehlo.dot_general"].calls == 8
    assert profile.seconds <= spent
    assert by_op["stablehlo.all_reduce"].seconds < by_op["stablehlo.dot_general"].seconds
