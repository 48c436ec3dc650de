"""Ctrl-C during a run on the interp device raises KeyboardInterrupt, and the device stays usable.

A child process runs long jitted loops on ``interp``; each run tells the parent
that it has started (a host callback inside the program, so the signal lands in
the run itself, not in tracing or compiling), and the parent sends it a real
SIGINT. The child must catch ``KeyboardInterrupt`` itself (not a
``JaxRuntimeError``), then compute the right value with the same function.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

CHILD = """
    import sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    devices = jax.devices("interp")
    FOREVER = 10**9

    def counting(case):
        def started(n):
            print("running", case, int(n), flush=True)

        def loop(x, n):
            jax.debug.callback(started, n)
            return jax.lax.fori_loop(0, n, lambda i, v: v + 1, x)
        return loop

    def attempt(case, function, make_argument, expected):
        try:
            function(make_argument(), FOREVER)
            print("finished", case, flush=True)
        except KeyboardInterrupt:
            print("interrupted", case, flush=True)
        except BaseException as error:
            print("failed", case, type(error).__name__, error, flush=True)
        value = np.asarray(function(make_argument(), 5))
        print("next", case, value.tolist() == expected, flush=True)

    fast = jax.jit(counting("fast"))
    fast(jax.device_put(np.float32(0), devices[0]), 1).block_until_ready()
    scalar = jax.device_put(np.float32(0), devices[0])
    attempt("fast", fast, lambda: scalar, 5.0)                       # jaxlib's C++ dispatch path
    attempt("first", jax.jit(counting("first")), lambda: scalar, 5.0)  # JAX's Python path
    donating = jax.jit(counting("donated"), donate_argnums=0)        # a temporary argument dies
    attempt("donated", donating, lambda: jax.device_put(np.float32(0), devices[0]), 5.0)
    mesh = jax.make_mesh((2,), ("d",), devices=devices[:2])
    sharded = jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(mesh, PartitionSpec("d")))
    attempt("sharded", jax.jit(counting("sharded")), lambda: sharded, [5.0, 6.0, 7.0, 8.0])
    print("done", flush=True)
"""

CASES = ("fast", "first", "donated", "sharded")


def test_ctrl_c_raises_keyboard_interrupt_and_the_device_stays_usable():
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu,interp"})
    lines = []
    try:
        for line in child.stdout:
            lines.append(line.split())
            if lines[-1][0] == "running" and lines[-1][2] == str(10**9):
                time.sleep(0.3)
                child.send_signal(signal.SIGINT)
        stderr = child.stderr.read()
        assert child.wait(timeout=60) == 0, stderr[-3000:]
    finally:
        child.kill()
    expected = [["running", "fast", "1"]]   # the warm-up call
    for case in CASES:
        expected += [["running", case, str(10**9)], ["interrupted", case], ["running", case, "5"],
                     ["next", case, "True"]]
    assert lines == expected + [["done"]], stderr[-3000:]
