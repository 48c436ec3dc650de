"""Ctrl-C during a call on the interp device raises KeyboardInterrupt, and the device stays usable.

A child process makes long device calls; the parent sends it real SIGINTs (a
user's Ctrl-C) and reads what it reports. In the first test each run tells the
parent that it has started (a host callback inside the program, so the signal
lands in the run itself, not in tracing or compiling); the child must catch
``KeyboardInterrupt`` itself (not a ``JaxRuntimeError``), then compute the right
value with the same function. The stress test sends the signal at random moments
of calls of every kind, beside a process that keeps a core busy, and each one
must stop its call within a second (device/pjrt/interrupts.py: a Ctrl-C that
Python handled in a garbage-collector callback was once lost, and one handled at
the entry of a PJRT call aborted the process).

Every wait on the child has a deadline; a test that fails says which case, what
the child printed so far, and its stderr (with every thread's stack: the child
dumps them on SIGUSR1 before the parent kills it).
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

FOREVER = 10**9

# The child is a program started at a terminal: Ctrl-C raises KeyboardInterrupt. (A test run
# started in the background by a non-interactive shell ignores SIGINT, and its children inherit
# that: Python keeps an ignored SIGINT ignored, and so does the device.)
PRELUDE = """
    import faulthandler, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    devices = jax.devices("interp")
    FOREVER = 10**9
"""


class Child:
    """A Python child process on the interp device whose stdout lines the parent reads
    with a deadline each; :meth:`report` says what it did (on any failure)."""

    def __init__(self, code: str, *arguments: str):
        self.process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(code), *arguments],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu,interp"})
        self.lines: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self, seconds: float, waiting_for: str) -> list[str]:
        """The next line, split; fails the test if none comes within ``seconds``."""
        try:
            line = self._lines.get(timeout=seconds)
        except queue.Empty:
            pytest.fail(f"no line from the child in {seconds} s (waiting for {waiting_for})\n{self.report()}")
        if line is None:
            pytest.fail(f"the child ended (waiting for {waiting_for})\n{self.report()}")
        self.lines.append(line)
        return line.split()

    def interrupt(self) -> float:
        """Send SIGINT; the time it was sent (time.monotonic, the child's clock too)."""
        sent = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        return sent

    def finish(self, seconds: float = 120) -> None:
        """Wait for the child to exit with status 0."""
        try:
            status = self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the child did not exit within {seconds} s\n{self.report()}")
        assert status == 0, f"the child exited with status {status}\n{self.report()}"

    def report(self) -> str:
        """What the child printed, and its stderr (all threads' stacks if it still runs)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.process.kill()
        try:
            _, stderr = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stderr = "(stderr not read: the child did not end)"
        shown = "\n".join(self.lines[-60:])
        return f"--- the child's output (last {min(len(self.lines), 60)} lines):\n{shown}\n" \
               f"--- its stderr (last 6000 characters):\n{stderr[-6000:]}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


COUNTING = """
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
            print("failed", case, type(error).__name__, str(error).replace("\\n", " "), flush=True)
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
    child = Child(COUNTING)
    try:
        assert child.next_line(300, "the warm-up call") == ["running", "fast", "1"], child.report()
        for case in CASES:
            assert child.next_line(300, f"{case}: its run") == ["running", case, str(FOREVER)], child.report()
            time.sleep(0.3)
            child.interrupt()
            for expected in (["interrupted", case], ["running", case, "5"], ["next", case, "True"]):
                line = child.next_line(60, f"{case}: {' '.join(expected)}")
                assert line == expected, f"case {case}: expected {expected}, got {line}\n{child.report()}"
        assert child.next_line(60, "the end") == ["done"], child.report()
        child.finish()
    finally:
        child.close()


# ---------------------------------------------------------------- stress

# Each case defines call(), a device call that never ends by itself, and usable(),
# whether the device computes the right value after it (checked against the value
# worked out by hand).
STRESS_CASES = {
    # many short calls on jaxlib's C++ dispatch path: most of the time is in JAX and jaxlib
    "fast": """
        step = jax.jit(lambda v: v + 1)
        zero = jax.device_put(np.float32(0), devices[0])
        step(zero)
        def call():
            value = zero
            while True:
                value = step(value)
        def usable():
            return float(step(zero)) == 1.0
    """,
    # a new function each time: tracing, lowering, compiling, then a long run
    "first": """
        zero = jax.device_put(np.float32(0), devices[0])
        def call():
            jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, v: v + 1, x))(zero, FOREVER)
        def usable():
            return float(jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, v: v + 2, x))(zero, 5)) == 10.0
    """,
    # the argument is donated and dies with the call
    "donated": """
        donating = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, v: v + 1, x), donate_argnums=0)
        def call():
            donating(jax.device_put(np.float32(0), devices[0]), FOREVER)
        def usable():
            return float(donating(jax.device_put(np.float32(0), devices[0]), 5)) == 5.0
    """,
    # a global program on two devices, and shard_map's per-device processes (threads)
    "sharded": """
        mesh = jax.make_mesh((2,), ("d",), devices=devices[:2])
        x = jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(mesh, PartitionSpec("d")))
        counting = lambda x, n: jax.lax.fori_loop(0, n, lambda i, v: v + 1, x)
        global_program = jax.jit(counting)
        per_device = jax.jit(jax.shard_map(counting, mesh=mesh, in_specs=(PartitionSpec("d"), PartitionSpec()),
                                           out_specs=PartitionSpec("d")))
        turn = [0]
        def call():
            turn[0] += 1
            (global_program if turn[0] % 2 else per_device)(x, FOREVER)
        def usable():
            return all(np.asarray(f(x, 5)).tolist() == [5.0, 6.0, 7.0, 8.0] for f in (global_program, per_device))
    """,
    # host callbacks that take a while, in a loop
    "callback": """
        def busy(v):
            deadline = time.monotonic() + 0.02
            while time.monotonic() < deadline:
                pass
        def body(i, v):
            jax.debug.callback(busy, v)
            return v + 1
        calling = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, body, x))
        zero = jax.device_put(np.float32(0), devices[0])
        def call():
            calling(zero, FOREVER)
        def usable():
            return float(calling(zero, 3)) == 3.0
    """,
    # nested while loops whose condition depends on the values
    "while": """
        def nested(x, n):
            def inner(v):
                return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 0.5 + 1), (0, v))[1]
            return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, inner(c[1])), (0, x))[1]
        looping = jax.jit(nested)
        zero = jax.device_put(np.float32(0), devices[0])
        def call():
            looping(zero, FOREVER)
        def usable():
            return float(looping(zero, 1)) == 1.75   # 0 -> 1 -> 1.5 -> 1.75
    """,
}

STRESS_ATTEMPTS = 50          # per case: 300 in all
SAMPLE_ATTEMPTS = 2           # per case, by default
LATEST_SIGNAL = {"first": 0.5}   # seconds into a call; 0.2 for the others
DEADLINE = 1.0                # for a call to raise KeyboardInterrupt after the signal

STRESS_CHILD = """
    attempts = int(sys.argv[1])
    for case in sys.argv[2].split(","):
        namespace = dict(globals())
        exec(CASES[case], namespace)
        call, usable = namespace["call"], namespace["usable"]
        usable()   # the modules JAX imports on first use, which a Ctrl-C waits for (an import half done breaks JAX)
        for attempt in range(attempts):
            try:
                print("start", case, attempt, flush=True)
                call()
                outcome = "finished"
            except KeyboardInterrupt:
                outcome = "interrupted"
            except BaseException as error:
                words = str(error).replace(" ", "_").replace("\\n", "_")[:300]
                outcome = "failed:" + type(error).__name__ + ":" + words
            print(outcome, case, attempt, time.monotonic(), flush=True)
            print("usable", case, attempt, usable(), flush=True)
    print("done", flush=True)
"""


@pytest.fixture
def cpu_load():
    """A process that keeps a core busy for the length of the test."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait(timeout=30)


def interrupt_at_random_moments(cases: list[str], attempts: int) -> None:
    """``attempts`` calls of each case in a child, each sent a SIGINT at a random moment:
    every one raises KeyboardInterrupt within DEADLINE, and the device stays usable."""
    rng = random.Random(",".join(cases))
    code = f"CASES = {dict((case, textwrap.dedent(STRESS_CASES[case])) for case in cases)!r}\n"
    child = Child(code + textwrap.dedent(STRESS_CHILD), str(attempts), ",".join(cases))
    late = []
    try:
        for case in cases:
            for attempt in range(attempts):
                what = f"case {case}, attempt {attempt}"
                assert child.next_line(300, f"{what} starting") == ["start", case, str(attempt)], child.report()
                delay = rng.uniform(0, LATEST_SIGNAL.get(case, 0.2))
                time.sleep(delay)
                sent = child.interrupt()
                outcome, *_, when = child.next_line(60, f"{what} (SIGINT {delay:.3f} s in)")
                assert outcome == "interrupted", f"{what}, SIGINT {delay:.3f} s in: {outcome}\n{child.report()}"
                if float(when) - sent > DEADLINE:
                    late.append(f"{what}: SIGINT {delay:.3f} s in, KeyboardInterrupt "
                                f"{float(when) - sent:.3f} s after it")
                usable = child.next_line(120, f"{what}, the device's next call")
                assert usable == ["usable", case, str(attempt), "True"], f"{what}\n{child.report()}"
        assert child.next_line(60, "the end") == ["done"], child.report()
        child.finish()
    finally:
        child.close()
    assert not late, f"{len(late)} of {len(cases) * attempts} calls stopped later than {DEADLINE} s after the " \
                     "SIGINT:\n" + "\n".join(late)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(STRESS_CASES))
def test_ctrl_c_at_random_moments_under_load_always_interrupts_within_a_second(case, cpu_load):
    interrupt_at_random_moments([case], STRESS_ATTEMPTS)


def test_ctrl_c_at_random_moments_a_sample(cpu_load):
    """The stress test's cases, a few calls each."""
    interrupt_at_random_moments(sorted(STRESS_CASES), SAMPLE_ATTEMPTS)
