"""codegen_options (tools/codegen.py): XLA's CPU recompiled under each candidate XLA flag in
a child process of its own, against the interpreter; JaxChildBackend, the child it uses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.backends import BackendCrash, JaxChildBackend
from stablehlo_interp.cli import main
from stablehlo_interp.tools.codegen import CANDIDATES, DIFFERS, EQUAL, NOISE, REJECTED

FAST_MATH = "--xla_cpu_enable_fast_math=true"
# x minus itself: 0, and NaN for an infinity (IEEE 754 §7.2: inf - inf is invalid); fast
# math's no-infinities and reassociation make it 0 everywhere.
SELF_DIFFERENCE = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %d = stablehlo.subtract %x, %x : tensor<3xf32>
  %one = stablehlo.constant dense<1.0> : tensor<3xf32>
  %r = stablehlo.add %d, %one : tensor<3xf32>
  return %r : tensor<3xf32>
}
"""
WITH_INFINITY = np.array([1.0, np.inf, 2.0], np.float32)
# clz(-5) is 0 (the sign bit is set); XLA's constant folding makes it -32 (docs/findings.md).
CLZ_OF_A_CONSTANT = """
func.func @main() -> tensor<i32> {
  %c = stablehlo.constant dense<-5> : tensor<i32>
  %0 = stablehlo.count_leading_zeros %c : tensor<i32>
  return %0 : tensor<i32>
}
"""


def test_the_child_compiles_under_its_own_xla_flags():
    plain, fast = JaxChildBackend("cpu"), JaxChildBackend("cpu", FAST_MATH)
    try:
        np.testing.assert_array_equal(plain(SELF_DIFFERENCE, [WITH_INFINITY])[0], si.run(SELF_DIFFERENCE, WITH_INFINITY)[0])
        np.testing.assert_array_equal(fast(SELF_DIFFERENCE, [WITH_INFINITY])[0], np.ones(3, np.float32))
        assert fast.settings == (f"XLA flag {FAST_MATH}",) and plain.settings == ()
    finally:
        plain.close()
        fast.close()


def test_a_flag_xla_does_not_know_aborts_the_child_only():
    backend = JaxChildBackend("cpu", "--xla_no_such_flag=1")
    with pytest.raises(BackendCrash, match="Unknown flag in XLA_FLAGS: --xla_no_such_flag=1"):
        backend(SELF_DIFFERENCE, [WITH_INFINITY])
    backend.close()


def test_a_child_out_of_time_is_killed_and_said_to_be():
    backend = JaxChildBackend("cpu", timeout=0.05)   # JAX alone takes a second to start
    with pytest.raises(BackendCrash, match=r"timed out after 0\.05 s"):
        backend(SELF_DIFFERENCE, [WITH_INFINITY])
    backend.timeout = 600
    try:   # the next request, in time, starts a fresh child
        np.testing.assert_array_equal(backend(SELF_DIFFERENCE, [WITH_INFINITY])[0],
                                      si.run(SELF_DIFFERENCE, WITH_INFINITY)[0])
    finally:
        backend.close()


def test_no_false_alarm_where_xla_differs_by_rounding_noise():
    """XLA's CPU approximates exp and tanh within a few ULP of the interpreter's: with no
    tolerance that is a difference, within the noise of the whole program: no flag is tried."""
    x = np.linspace(-9, 9, 101, dtype=np.float32)

    def smooth(x):
        return jnp.tanh(x) * jnp.exp(x / 4)

    assert not np.array_equal(np.asarray(jax.jit(smooth)(x)), si.run(smooth, x))   # the ULPs the judge must allow
    report = si.codegen_options(smooth, x, flags="", tolerance=(0, 0))
    assert report.default.status == NOISE and report.ok and not report.differs
    assert report.options == [] and report.restoring == ()
    assert str(report) == f"XLA CPU's compiled result {NOISE}: no flag to look for"


def test_default_flags_xla_rejects_are_reported_not_fatal():
    report = si.codegen_options(SELF_DIFFERENCE, WITH_INFINITY, flags="--xla_no_such_flag=1")
    assert report.default.status == REJECTED and not report.ok and not report.differs and report.options == []
    assert str(report) == ("XLA CPU (XLA_FLAGS=--xla_no_such_flag=1) rejected: XLA does not know the flag: "
                           "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1")


def test_a_program_with_host_callbacks_is_refused_before_any_compile():
    def logged(x):
        jax.debug.print("x = {x}", x=x)
        return x + 1

    with pytest.raises(si.InterpreterError, match="calls host callbacks, which XLA compiled in a child process"):
        si.codegen_options(logged, np.float32(1))


@pytest.mark.slow
def test_fast_math_is_named_the_cause_and_an_unknown_flag_rejected():
    report = si.codegen_options(SELF_DIFFERENCE, WITH_INFINITY, flags=FAST_MATH,
                                options=["--xla_cpu_max_isa=SSE4_2", "--xla_cpu_enable_fast_math=false",
                                         "--xla_cpu_fast_math=false"])
    assert report.differs and not report.ok
    found = report.default.differences[0]
    assert found.index == (1,) and np.isnan(found.ours) and found.theirs == 1.0
    assert [run.status for run in report.options] == [DIFFERS, EQUAL, REJECTED]
    assert report.restoring == ("--xla_cpu_enable_fast_math=false",)
    assert report.rejected == ("--xla_cpu_fast_math=false",)
    text = str(report).splitlines()
    assert text[0] == f"XLA CPU's compiled result (XLA_FLAGS={FAST_MATH}) {DIFFERS}"
    assert "with --xla_cpu_enable_fast_math=false the compiled result equals the interpreter's" in text
    assert text[-3:] == [
        "  equals the interpreter's: --xla_cpu_enable_fast_math=false",
        "  differs from the interpreter's beyond noise: --xla_cpu_max_isa=SSE4_2",
        "  rejected: XLA does not know the flag: --xla_cpu_fast_math=false (Unknown flag in XLA_FLAGS: "
        "--xla_cpu_fast_math=false)"]


@pytest.mark.slow
def test_this_xla_knows_every_candidate_flag():
    report = si.codegen_options(SELF_DIFFERENCE, WITH_INFINITY, flags=FAST_MATH)
    assert [run.flag for run in report.options] == list(CANDIDATES)
    assert report.rejected == () and all(run.message == "" for run in report.options)
    assert "--xla_cpu_enable_fast_math=false" in report.restoring


@pytest.mark.slow
def test_the_candidate_passes_are_ones_xla_has():
    """XLA ignores a pass name it does not have: each candidate pass changes a program."""
    log_of_power = """
    func.func @main(%x: tensor<f64>, %y: tensor<f64>) -> tensor<f64> {
      %0 = stablehlo.power %x, %y : tensor<f64>
      %1 = stablehlo.log %0 : tensor<f64>
      return %1 : tensor<f64>
    }
    """
    passes = [flag for flag in CANDIDATES if flag.startswith("--xla_disable_hlo_passes=")]
    report = si.codegen_options(log_of_power, np.float64(-2), np.float64(3), flags="", options=passes)
    assert np.isnan(si.run(log_of_power, np.float64(-2), np.float64(3))[0])
    assert report.default.differences[0].theirs == pytest.approx(np.log(8))
    assert report.restoring == ("--xla_disable_hlo_passes=algsimp",)
    folded = si.codegen_options(CLZ_OF_A_CONSTANT, flags="", options=passes)
    assert folded.restoring == ("--xla_disable_hlo_passes=constant_folding",)


@pytest.mark.slow
def test_the_command_line(capsys, tmp_path):
    path = tmp_path / "self_difference.mlir"
    path.write_text(SELF_DIFFERENCE)
    np.save(tmp_path / "x.npy", WITH_INFINITY)
    status = main(["codegen", str(path), "-i", str(tmp_path / "x.npy"), f"--flags={FAST_MATH}",
                   "--option=--xla_cpu_enable_fast_math=false"])
    out = capsys.readouterr().out
    assert status == 1
    assert "with --xla_cpu_enable_fast_math=false the compiled result equals the interpreter's" in out
    assert main(["codegen", str(path), "-i", str(tmp_path / "x.npy"), "--flags="]) == 0
    assert capsys.readouterr().out == f"XLA CPU's compiled result {EQUAL}: no flag to look for\n"


@pytest.mark.slow
def test_a_folding_no_flag_undoes_is_said_to_be_none_of_them():
    report = si.codegen_options(CLZ_OF_A_CONSTANT, flags="", options=["--xla_cpu_max_isa=SSE4_2",
                                                                      "--xla_backend_optimization_level=0"])
    assert si.run(CLZ_OF_A_CONSTANT)[0] == 0 and report.default.differences[0].theirs == -32
    assert report.differs and report.restoring == ()
    assert str(report).splitlines()[-1] == (
        "no candidate flag restores the interpreter's result: under each of the 2 flags tried it differs beyond noise "
        "(not a choice these flags control: another pass?)")
