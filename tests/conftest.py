import os
import subprocess
import zlib

# Multi-device tests on CPU need several host devices; must be set before jax is imported
# (added to the flags a run brings, such as --xla_cpu_max_isa).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_SLOW_SHARE = pytest.StashKey[tuple]()


def pytest_configure(config):
    """64-bit types on (jax_enable_x64) for the whole session, set here once before any test
    module is imported, so that a test sees the same flag whichever files a run selects (the
    oracles compare f64 and i64 programs as written). A test that needs it off says so itself."""
    import jax

    jax.config.update("jax_enable_x64", True)


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="run the exhaustive tests marked slow (CI runs a sample)")


def slow_rotation() -> int:
    """Which share of the slow tests this run takes: STABLEHLO_INTERP_SLOW_ROTATION if
    set, else the number of commits up to HEAD (so each commit takes the next share),
    else 0 (no git, or not a repository)."""
    if "STABLEHLO_INTERP_SLOW_ROTATION" in os.environ:
        return int(os.environ["STABLEHLO_INTERP_SLOW_ROTATION"])
    try:
        count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=os.path.dirname(__file__),
                               capture_output=True, text=True, timeout=30).stdout
        return int(count)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def pytest_collection_modifyitems(config, items):
    """Without --run-slow, a rotating share of the slow tests runs: one in
    STABLEHLO_INTERP_SLOW_SAMPLE (default 25), the tests whose stable hash of the
    test id is the rotation (slow_rotation) modulo that: a different share for each
    commit, every slow test once in that many consecutive commits."""
    if config.getoption("--run-slow") or not any("slow" in item.keywords for item in items):
        return   # (and the summary names no share)
    one_in = int(os.environ.get("STABLEHLO_INTERP_SLOW_SAMPLE", "25"))
    share = slow_rotation() % one_in
    config.stash[_SLOW_SHARE] = (share, one_in)
    skip = pytest.mark.skip(reason=f"slow: not in share {share} of {one_in} (run all with --run-slow)")
    for item in items:
        if "slow" in item.keywords and zlib.crc32(item.nodeid.encode()) % one_in != share:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, config):
    if _SLOW_SHARE in config.stash:
        share, one_in = config.stash[_SLOW_SHARE]
        terminalreporter.write_line(f"slow tests: share {share} of {one_in} (STABLEHLO_INTERP_SLOW_ROTATION={share} "
                                    f"repeats it; --run-slow runs all)")


@pytest.fixture(scope="session")
def reference():
    """The C++ StableHLO reference interpreter (in a child process)."""
    from oracles import reference_interpreter

    interpreter = reference_interpreter()
    yield interpreter
    interpreter.close()


def _jax_option(name: str, value):
    import jax

    previous = getattr(jax.config, name)
    jax.config.update(name, value)
    yield
    jax.config.update(name, previous)


@pytest.fixture
def without_shardy():
    """JAX lowers shardings to ``Sharding`` custom calls (GSPMD) instead of sdy ops."""
    yield from _jax_option("jax_use_shardy_partitioner", False)


@pytest.fixture
def ran():
    """The names of the ops the interpreter runs on the interp device during the test
    (``ran.ops``): proof that nothing fell back silently to the CPU."""
    import stablehlo_interp as si
    from stablehlo_interp import device as interp_device

    class OpRecorder(si.Listener):
        def __init__(self):
            self.ops: list[str] = []

        def after_op(self, step, operands, results, stack):
            self.ops.append(step.info.name)

    recorder = OpRecorder()
    interp_device.listeners.append(recorder)
    yield recorder
    interp_device.listeners.remove(recorder)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose child process ran past its timeout (subprocess.TimeoutExpired) shows
    what the child printed until then."""
    outcome = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, subprocess.TimeoutExpired):
        report = outcome.get_result()
        for name, text in (("stdout", error.stdout), ("stderr", error.stderr)):
            if text:
                text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
                report.sections.append((f"the child's {name} until its timeout", text[-6000:]))
