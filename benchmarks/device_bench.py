"""The interp JAX device: cost of a call, next to the same call on XLA's CPU.

Measures, per call, on ``cpu`` and on ``interp``, batches of the two devices
taking turns (the machine's speed drifts):

* a trivial jitted call (``jax.jit(lambda v: v + 1)`` on a scalar), whose cost
  on interp is JAX's dispatch, jaxlib's C API path, 12 PJRT calls (two enter
  Python: Execute and Buffer_Destroy; the rest are native fast paths) and one
  interpreted ``stablehlo.add``;
* an eager op (``x + x``: JAX dispatches it as a small jitted program);
* a host-to-device transfer and its read-back (``device_put`` + ``np.asarray``:
  28 PJRT calls, six of which enter Python; the read-back is in place, as on
  the CPU, through an external reference);
* a slightly larger jitted function (a dozen ops) to show the per-op share.

Targets (issue 14): the first three at most 1.5x the CPU's, in the same run.
Each figure is the best of ``--repeat`` batches of ``--calls`` calls. Wall time
is what a user sees; CPU time (this process, all threads) is steadier on a
shared machine, and the ratios are given for both.

Then it profiles the trivial call on interp (:func:`profile_trivial_call`):
the plugin's Python (entering Python from C, the interpreter's run, the device
layer around it) and the rest, JAX's dispatch and jaxlib's C API client. That
rest alone is 1.08 to 1.15x the CPU's whole call (7.4 to 7.8 us against 6.6
to 6.9 on the two-core machine, docs/device.md, "What a call costs"): with the
interpreter's run (2.2 us for one add) and two entries into Python (1.2 us)
the trivial call cannot come below about 1.6x through a Python plugin; it is
2.1 to 2.2x, the device layer 3.2 to 3.4 us of it. And the 12-op call
(:func:`profile_dozen_ops`): its run alone, after a JAX call (caches cold),
and each op alone; 58 to 59 us in all, 29 of them the run, warm.

    python benchmarks/device_bench.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

import jax
import jax.numpy as jnp


def per_call(fn, calls: int, repeat: int) -> tuple[float, float]:
    """Best (wall, cpu) microseconds per call over ``repeat`` batches of ``calls`` calls."""
    return per_call_of_each([fn], calls, repeat)[0]


def per_call_of_each(functions: list, calls: int, repeat: int) -> list:
    """:func:`per_call` of each function, their batches taking turns."""
    for fn in functions:
        for _ in range(min(calls, 200)):
            fn()
    walls, cpus = [[] for _ in functions], [[] for _ in functions]
    for _ in range(repeat):
        for fn, fn_walls, fn_cpus in zip(functions, walls, cpus):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                fn()
            fn_walls.append(time.perf_counter() - wall)
            fn_cpus.append(time.process_time() - cpu)
    return [(min(w) / calls * 1e6, min(c) / calls * 1e6) for w, c in zip(walls, cpus)]


def cases(device):
    scalar = jax.device_put(np.float32(1.0), device)
    vector = jax.device_put(np.arange(16, dtype=np.float32), device)
    host = np.arange(1024, dtype=np.float32)
    increment = jax.jit(lambda v: v + 1)
    dozen_ops = jax.jit(lambda v: jnp.tanh(jnp.sin(v) * 2 + jnp.cos(v) / 3).sum() - v.max() + v.min())
    return {
        "trivial jitted call": lambda: increment(scalar),
        "eager op x + x": lambda: vector + vector,
        "device_put + read back": lambda: np.asarray(jax.device_put(host, device)),
        "jitted call, 12 ops": lambda: dozen_ops(vector),
    }


def profile_trivial_call(calls: int, repeat: int) -> dict:
    """Where the trivial call's time goes on interp (CPU microseconds per call).

    The plugin's part is measured by making the two calls that enter Python
    (``LoadedExecutable_Execute`` of the trivial program, then ``Buffer_Destroy`` of
    its output) the way jaxlib makes them: through the native entry points of the
    PJRT_Api table, with the GIL released around them. Everything else (JAX's C++
    dispatch, jaxlib's C API client, the ten native fast-path calls) is the
    trivial call's total minus that.
    """
    import ctypes

    from stablehlo_interp.device import plugin, runtime
    from stablehlo_interp.device.pjrt import abi, calls as handles
    from stablehlo_interp.device.pjrt.calls_buffers import buffer_handle
    from stablehlo_interp.engine.run import Execution, RunContext

    cpu_scalar = jax.device_put(np.float32(1.0), jax.devices("cpu")[0])
    scalar = jax.device_put(np.float32(1.0), jax.devices("interp")[0])
    increment = jax.jit(lambda v: v + 1)
    increment(scalar)
    table = plugin.table()
    executable = [handle for handle, obj in handles.objects.items() if isinstance(obj, runtime.Executable)][-1]
    program = handles.objects[executable]
    value = np.asarray(np.float32(1.0))
    argument = buffer_handle(runtime.Buffer(program.devices[0], value))
    arguments = (ctypes.c_void_p * 1)(argument)
    argument_lists = (ctypes.c_void_p * 1)(ctypes.addressof(arguments))
    outputs = (ctypes.c_void_p * 1)()
    output_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outputs))
    events = (ctypes.c_void_p * 1)()
    execute_args = abi.PJRT_LoadedExecutable_Execute_Args(
        struct_size=ctypes.sizeof(abi.PJRT_LoadedExecutable_Execute_Args), executable=executable,
        argument_lists=ctypes.addressof(argument_lists), num_devices=1, num_args=1,
        output_lists=ctypes.addressof(output_lists), device_complete_events=ctypes.addressof(events))
    destroy_args = abi.PJRT_Buffer_Destroy_Args(struct_size=ctypes.sizeof(abi.PJRT_Buffer_Destroy_Args))
    event_args = abi.PJRT_Event_Destroy_Args(event=handles.COMPLETE_EVENT)
    entry = {name: abi.API_FUNCTION(table.entry_points[name])
             for name in ("LoadedExecutable_Execute", "Buffer_Destroy", "Event_Destroy")}
    execute_address, destroy_address = ctypes.addressof(execute_args), ctypes.addressof(destroy_args)
    event_address = ctypes.addressof(event_args)

    def plugin_part():
        entry["LoadedExecutable_Execute"](execute_address)
        destroy_args.buffer = outputs[0]
        entry["Buffer_Destroy"](destroy_address)

    def entering_python():   # Buffer_Destroy of no buffer: the guard, the ctypes callback, a lookup
        destroy_args.buffer = 0
        entry["Buffer_Destroy"](destroy_address)

    def native_call():       # a native fast path: what a call costs without Python
        entry["Event_Destroy"](event_address)

    def interpreter_run():   # the run itself, as the device makes it (Executable.run_plain)
        Execution(RunContext((), None, None, program.program.semantics)).run_entry(program.plain_region, [value])

    parts = {"cpu": lambda: increment(cpu_scalar), "total": lambda: increment(scalar), "plugin": plugin_part,
             "entering": entering_python, "native": native_call, "run": interpreter_run}
    measured = {name: cpu_time for name, (_, cpu_time) in zip(parts, per_call_of_each(list(parts.values()),
                                                                                      calls, repeat))}
    handles.release_header(argument)
    return measured


def profile_dozen_ops(calls: int, repeat: int) -> tuple[dict, list]:
    """Where the 12-op call's time goes on interp (CPU microseconds per call): the
    whole call, its run alone (the program's ops back to back, caches warm), the same
    run each time after the function's call on the CPU (less that call's time alone:
    caches as a call finds them, which costs the run more than any op does), and each
    op's runner alone on its operands, in program order."""
    from stablehlo_interp.device import runtime
    from stablehlo_interp.device.pjrt import calls as handles
    from stablehlo_interp.engine import plan, run as engine

    vector = np.arange(16, dtype=np.float32)
    on_cpu, on_interp = jax.device_put(vector, jax.devices("cpu")[0]), jax.device_put(vector, jax.devices("interp")[0])
    function = jax.jit(lambda v: jnp.tanh(jnp.sin(v) * 2 + jnp.cos(v) / 3).sum() - v.max() + v.min())
    function(on_interp)
    executable = [obj for obj in handles.objects.values() if isinstance(obj, runtime.Executable)][-1]
    semantics, region = executable.program.semantics, executable.plain_region

    def run():
        engine.Execution(engine.RunContext((), None, None, semantics)).run_entry(region, [vector])

    def run_between_calls():
        function(on_cpu)
        run()

    parts = {"total": lambda: function(on_interp), "run": run, "cpu call": lambda: function(on_cpu),
             "run between cpu calls": run_between_calls}
    measured = {name: cpu_time for name, (_, cpu_time) in zip(parts, per_call_of_each(list(parts.values()),
                                                                                      calls, repeat))}
    measured["run between cpu calls"] -= measured["cpu call"]
    execution = engine.Execution(engine.RunContext((), None, None, semantics))
    env = [vector, *region.result_slots]
    ops = []
    for runner, operands, results, _, kind, step in region.flat_steps:
        step = region.flat_steps.step(step)
        if kind == plan.UNARY:
            call = functools.partial(runner, env[operands])
        elif kind in (plan.BINARY, plan.TERNARY, plan.SINGLE):
            call = functools.partial(runner, *[env[i] for i in operands])
        else:
            call = functools.partial(runner, *engine._leading_arguments(step, execution, env),
                                     *[env[i] for i in operands])
        with np.errstate(all="ignore"):
            out = call()
            ops.append((step.info.name, per_call(call, calls, repeat)[1]))
        if kind == plan.GENERAL:
            env[results[0]:results[-1] + 1] = out   # (a step's results take consecutive slots)
        else:
            env[results] = out
    return measured, ops


def print_profile(measured: dict) -> None:
    """The profile, less what calling the entry points from Python costs here (a call
    to a native no-op), which jaxlib does not pay."""
    total, cpu, native = measured["total"], measured["cpu"], measured["native"]
    plugin = measured["plugin"] - 2 * native
    entering = 2 * (measured["entering"] - native)
    run = measured["run"]
    print(f"\nwhere the trivial call's time goes on interp (CPU time per call, us):\n"
          f"  total                                            {total:6.1f}  (XLA CPU's whole call: {cpu:.1f})\n"
          f"  the plugin's Python (Execute + Buffer_Destroy)   {plugin:6.1f}\n"
          f"    entering Python twice (guard, ctypes callback) {entering:6.1f}\n"
          f"    the interpreter's run (run_entry of one add)   {run:6.1f}\n"
          f"    the device layer (the rest)                    {plugin - entering - run:6.1f}\n"
          f"  JAX's dispatch and jaxlib's C API path (the rest) {total - plugin:5.1f}  "
          f"= {(total - plugin) / cpu:.2f}x cpu: the ratio with a plugin that cost nothing")


def print_dozen_ops_profile(measured: dict, ops: list) -> None:
    total, run, cold = measured["total"], measured["run"], measured["run between cpu calls"]
    print(f"\nwhere the 12-op call's time goes on interp (CPU time per call, us):\n"
          f"  total                                            {total:6.1f}  (XLA CPU's whole call: "
          f"{measured['cpu call']:.1f})\n"
          f"  the run alone, caches warm                       {run:6.1f}\n"
          f"  the run after a JAX call (less that call alone)  {cold:6.1f}  (caches as a call finds them)\n"
          f"  each op's runner alone, caches warm:")
    for name, cost in ops:
        print(f"    {name:<44} {cost:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    cpu_cases, interp_cases = cases(jax.devices("cpu")[0]), cases(jax.devices("interp")[0])
    print(f"{'per call (us)':<26}{'cpu wall':>10}{'interp wall':>13}{'cpu cpu':>10}{'interp cpu':>12}"
          f"{'ratio wall':>12}{'ratio cpu':>11}")
    for name in cpu_cases:
        (cpu_wall, cpu_cpu), (interp_wall, interp_cpu) = per_call_of_each(
            [cpu_cases[name], interp_cases[name]], options.calls, options.repeat)
        print(f"{name:<26}{cpu_wall:>10.1f}{interp_wall:>13.1f}{cpu_cpu:>10.1f}{interp_cpu:>12.1f}"
              f"{interp_wall / cpu_wall:>11.1f}x{interp_cpu / cpu_cpu:>10.1f}x")
    print_profile(profile_trivial_call(options.calls, options.repeat))
    print_dozen_ops_profile(*profile_dozen_ops(options.calls, options.repeat))


if __name__ == "__main__":
    main()
