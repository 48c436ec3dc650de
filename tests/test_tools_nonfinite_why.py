"""si.find_nonfinite says why, not only where: a non-finite value that a decision (a
``select``, a ``cond``'s branch, a ``while``'s exit) chose because of a predicate computed
from a non-finite value or from a LAPACK call that failed is followed to that cause, and
the LAPACK calls say how they failed (the failing column of a Cholesky factorization, the
zero pivot of an LU). Expected columns and pivots are computed here with numpy or by hand."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.cli import main
from test_tools_cli import explorer_data

FILE = "test_tools_nonfinite_why.py"


def gp_log_likelihood(kernel, y):
    factor = jnp.linalg.cholesky(kernel)
    alpha = jax.scipy.linalg.cho_solve((factor, True), y)
    loglike = -0.5 * y @ alpha - jnp.sum(jnp.log(jnp.diag(factor)))
    return jnp.where(jnp.isfinite(loglike), loglike, -jnp.inf)


GP_LINE = gp_log_likelihood.__code__.co_firstlineno


def not_positive_definite_kernel() -> tuple[np.ndarray, int]:
    """An RBF kernel with jitter whose diagonal entry 5 is lowered until its leading minor of
    order 6 is indefinite, and that order, found by numpy in float64 (the leading minors
    before it are clearly positive definite, the one of that order clearly not, so float32
    rounding cannot move the failing column)."""
    x = np.linspace(0.0, 3.0, 8)
    kernel = np.exp(-(x[:, None] - x[None, :]) ** 2 / (2 * 0.5 ** 2)) + 0.1 * np.eye(8)
    kernel[5, 5] = 0.05
    smallest = [np.linalg.eigvalsh(kernel[:order, :order]).min() for order in range(1, 9)]
    failing = next(order for order, value in enumerate(smallest, 1) if value < 0)
    assert min(smallest[:failing - 1]) > 0.05 and smallest[failing - 1] < -0.05
    return kernel.astype(np.float32), failing


def test_a_failed_cholesky_behind_where_isfinite():
    kernel, failing = not_positive_definite_kernel()
    assert failing == 6
    y = np.ones(8, np.float32)
    report = si.find_nonfinite(gp_log_likelihood, kernel, y)
    assert len(report.origins) == 1
    origin = report.origins[0]
    assert origin.op == "stablehlo.constant" and origin.new == [(0, "inf", 1, ())]
    # the where chose the -inf because isfinite(loglike) was false; loglike is NaN because
    # cholesky's lowering chose its NaN fill where info != 0; spotrf failed at that column
    assert [(step.kind, step.op, step.location.frame.line) for step in origin.why] == [
        ("chosen", "stablehlo.select", GP_LINE + 4),
        ("made", "stablehlo.constant", GP_LINE + 1),
        ("chosen", "stablehlo.select", GP_LINE + 1),
        ("failed", "stablehlo.custom_call @lapack_spotrf_ffi", GP_LINE + 1)]
    assert origin.why[1].detail == "NaN"
    assert origin.why[3].detail == (f"the matrix is not positive definite: its leading minor of order {failing} "
                                    f"is not (first failing column {failing})")
    lines = str(report).splitlines()
    heading = lines.index(next(line for line in lines if line.startswith("  why: ")))
    where = f"{FILE}:{GP_LINE + 4} (gp_log_likelihood)"
    cholesky = f"{FILE}:{GP_LINE + 1} (gp_log_likelihood)"
    assert lines[heading:heading + 4] == [
        f"  why: chosen by stablehlo.select at {where}: its predicate was false, computed by "
        f"stablehlo.is_finite at {where} from a non-finite value",
        f"     ← NaN made by stablehlo.constant at {cholesky}",
        f"     ← chosen by stablehlo.select at {cholesky}: its predicate was false, computed by "
        f"stablehlo.compare EQ at {cholesky} from the result of a call that failed",
        f"     ← stablehlo.custom_call @lapack_spotrf_ffi at {cholesky} failed: the matrix is not positive "
        f"definite: its leading minor of order {failing} is not (first failing column {failing})"]
    # the same kernel made positive definite: every result finite, no report
    kernel[5, 5] = 1.1
    assert si.find_nonfinite(gp_log_likelihood, kernel, y) is None


def solve(a, b):
    return jnp.linalg.solve(a, b)


def test_a_failed_lu_solve_of_a_singular_matrix():
    # by hand: partial pivoting takes row 2 (pivot 2) for column 1, which zeroes row 1; the
    # pivot of column 2 is then -2 (row 3), and what is left of column 3 is 0: U(3,3) = 0
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], np.float32)
    report = si.find_nonfinite(solve, a, np.ones(3, np.float32))
    assert len(report.origins) == 1
    origin = report.origins[0]
    assert origin.op == "stablehlo.custom_call"       # the back substitution divides by U(3,3)
    line = solve.__code__.co_firstlineno + 1
    assert [(step.kind, step.op, step.location.frame.line) for step in origin.why] == [
        ("failed", "stablehlo.custom_call @lapack_strsm_ffi", line),
        ("failed", "stablehlo.custom_call @lapack_sgetrf_ffi", line)]
    assert [step.detail for step in origin.why] == [
        "the triangular matrix is singular: its diagonal element (3,3) is exactly zero",
        "the matrix is singular: U(3,3) is exactly zero (zero pivot in column 3)"]
    assert f"  why: stablehlo.custom_call @lapack_strsm_ffi at {FILE}:{line} (solve) failed: " in str(report)


def branch_on_the_loss(x):
    loss = jnp.sum(jnp.log(x))
    return jax.lax.cond(loss > 0, lambda total: total, lambda total: jnp.full_like(total, -jnp.inf), loss)


def test_a_cond_branch_chosen_by_a_nan_predicate():
    report = si.find_nonfinite(branch_on_the_loss, np.array([1.0, -2.0], np.float32))
    origin = report.origins[0]
    assert origin.op == "stablehlo.constant" and len(report.origins) == 1
    line = branch_on_the_loss.__code__.co_firstlineno
    # NaN > 0 is false: the false branch, branch 0 of the case cond lowers to, wrote -inf
    assert [(step.kind, step.op, step.location.frame.line) for step in origin.why] == [
        ("chosen", "stablehlo.case", line + 2), ("made", "stablehlo.log", line + 1)]
    assert origin.why[0].detail == (f"its index chose branch 0, computed by stablehlo.compare GT at {FILE}:{line + 2} "
                                    "(branch_on_the_loss) from a non-finite value")


def newton_log_root(c, until=False):
    """Newton's method for log(x) = c from x = 1, while the step is above a tolerance
    (``until``: until it is below it) and for at most 50 iterations."""
    def keep_going(state):
        x, step, i = state
        return ~(step < 1e-6) & (i < 50) if until else (step > 1e-6) & (i < 50)

    def newton_step(state):
        x, step, i = state
        x_new = x - (jnp.log(x) - c) * x
        return x_new, jnp.abs(x_new - x), i + 1
    return jax.lax.while_loop(keep_going, newton_step, (jnp.float32(1.0), jnp.float32(1.0), 0))


def test_a_loop_that_left_because_its_condition_was_computed_from_a_nan():
    # by hand, c = -3: x1 = 1 - (0 + 3) * 1 = -2 (step 3); then log(-2) is NaN, so is the
    # step, and NaN > 1e-6 is false: the loop leaves after 2 iterations with x NaN
    report = si.find_nonfinite(newton_log_root, np.float32(-3.0))
    assert [index for index, _ in report.nonfinite_results] == [0, 1]
    origin = report.origins[0]
    line = newton_log_root.__code__.co_firstlineno
    assert origin.op == "stablehlo.log" and origin.location.frame.line == line + 9
    assert [(step.kind, step.op, step.location.frame.line) for step in origin.why] == [
        ("chosen", "stablehlo.while", line + 11), ("made", "stablehlo.log", line + 9)]
    assert origin.why[0].detail == (
        f"the loop stopped after 2 iterations: its condition was false, computed by stablehlo.compare GT at "
        f"{FILE}:{line + 5} (newton_log_root.<locals>.keep_going) from a non-finite value")
    # iterating while not (step < tol): NaN < tol is false, so the loop runs out its 50 iterations
    report = si.find_nonfinite(functools.partial(newton_log_root, until=True), np.float32(-3.0))
    assert [(step.kind, step.op) for step in report.origins[0].why] == [
        ("chosen", "stablehlo.while"), ("made", "stablehlo.log")]
    assert report.origins[0].why[0].detail == (
        f"the loop stopped after 50 iterations: its condition was false, computed by stablehlo.compare LT at "
        f"{FILE}:{line + 5} (newton_log_root.<locals>.keep_going) from a non-finite value")
    # a loop that ran out of iterations on finite values says nothing more
    assert si.find_nonfinite(lambda n: jax.lax.fori_loop(0, n, lambda i, v: v * 1e10, jnp.float32(1.0)),
                             np.int32(5)).origins[0].why == ()


def bounded(x, s):
    lower = jnp.where(jnp.isfinite(jnp.sqrt(s)), s, -jnp.inf)
    return jnp.maximum(jnp.log(x), lower)


def clipped(x, scale):
    upper = jnp.where(jnp.isfinite(scale), 3 * scale, jnp.inf)
    return jnp.clip(jnp.exp(x), 0.0, upper)


def test_maximum_and_clamp_follow_the_bound_they_picked_to_its_why():
    # max(log(0), -inf) is -inf from both: the log, and the bound where() chose because sqrt(-1) is NaN
    report = si.find_nonfinite(bounded, np.array([0.0, 2.0], np.float32), np.float32(-1.0))
    line = bounded.__code__.co_firstlineno
    bound, log = report.origins
    assert (log.op, log.why) == ("stablehlo.log", ())
    assert bound.op == "stablehlo.constant"
    assert [link.op for link in bound.chain][-2:] == ["stablehlo.broadcast_in_dim", "stablehlo.maximum"]
    assert [(step.kind, step.op, step.location.frame.line) for step in bound.why] == [
        ("chosen", "stablehlo.select", line + 1), ("made", "stablehlo.sqrt", line + 1)]
    # clip(exp(100), 0, upper): inf from the exp and from the upper bound chosen because scale is NaN
    report = si.find_nonfinite(clipped, np.array([1.0, 100.0], np.float32), np.float32(np.nan))
    bound, exp = report.origins
    assert (exp.op, exp.why) == ("stablehlo.exponential", ())
    assert "stablehlo.minimum" in [link.op for link in bound.chain]
    assert [(step.kind, step.op) for step in bound.why] == [("chosen", "stablehlo.select"), ("argument", "argument scale")]
    assert str(bound.why[1]) == "NaN in argument scale"


def test_a_fill_chosen_on_finite_values_has_no_why():
    report = si.find_nonfinite(lambda x: jnp.where(x > 0, x, -jnp.inf), np.array([1.0, -1.0], np.float32))
    assert report.origins[0].op == "stablehlo.constant" and report.origins[0].why == ()
    assert "why:" not in str(report)


def test_the_cli_and_the_explorer_print_the_same_chain(capsys, tmp_path):
    kernel, failing = not_positive_definite_kernel()
    y = np.ones(8, np.float32)
    module = jax.jit(gp_log_likelihood).lower(kernel, y).as_text(debug_info=True)
    path = tmp_path / "gp.mlir"
    path.write_text(module)
    np.save(tmp_path / "kernel.npy", kernel)
    np.save(tmp_path / "y.npy", y)
    status = main(["trace", str(path), "-i", str(tmp_path / "kernel.npy"), "-i", str(tmp_path / "y.npy"),
                   "--nonfinite"])
    out = capsys.readouterr().out
    report = si.find_nonfinite(module, kernel, y)
    assert status == 1 and out == f"{report}\n"
    assert report.origins[0].why[-1].detail.startswith(f"the matrix is not positive definite: its leading minor "
                                                       f"of order {failing} is not")
    exploration = si.explore(module, kernel, y, path=tmp_path / "gp.html")
    banner = explorer_data(exploration.html)["overlays"]["nonfinite"]["text"]
    assert banner == str(exploration.nonfinite) == str(report)


def test_a_batch_of_factorizations_names_the_first_that_failed():
    kernel, failing = not_positive_definite_kernel()
    positive = kernel.copy()
    positive[5, 5] = 1.1
    batch = np.stack([positive, kernel, kernel])
    report = si.find_nonfinite(lambda k: jnp.linalg.cholesky(k), batch)
    failed = report.origins[0].why[-1]
    assert failed.op == "stablehlo.custom_call @lapack_spotrf_ffi"
    assert failed.detail == (f"the matrix is not positive definite: its leading minor of order {failing} is not "
                             f"(first failing column {failing}), in batch element [1] (2 of 3 failed)")


def lowered_for_tpu(function, *args):
    """The program JAX hands a TPU (its lowering uses the spec's cholesky and
    triangular_solve where the CPU's calls LAPACK); lowered here, no TPU needed."""
    return jax.jit(function).trace(*args).lower(lowering_platforms=("tpu",))


def test_the_specs_cholesky_as_a_tpu_program_has_it_says_how_it_failed():
    """The GP likelihood as JAX lowers it for a TPU: the same chain, ending at the spec's
    cholesky, whose failing column is numpy's (leading minors' eigenvalues)."""
    kernel, failing = not_positive_definite_kernel()
    y = np.ones(8, np.float32)
    lowered = lowered_for_tpu(gp_log_likelihood, kernel, y)
    assert "stablehlo.cholesky" in lowered.as_text() and "lapack" not in lowered.as_text()
    (origin,) = si.find_nonfinite(lowered, kernel, y).origins
    assert origin.why[0].op == "stablehlo.select" and origin.why[0].location.frame.line == GP_LINE + 4
    assert (origin.why[-1].kind, origin.why[-1].op, origin.why[-1].location.frame.line) == (
        "failed", "stablehlo.cholesky", GP_LINE + 1)
    assert origin.why[-1].detail == (f"the matrix is not positive definite: its leading minor of order {failing} "
                                     f"is not (first failing column {failing})")
    kernel[5, 5] = 1.1
    assert si.find_nonfinite(lowered, kernel, y) is None


def test_the_specs_cholesky_of_a_batch_names_the_first_matrix_that_failed():
    kernel, failing = not_positive_definite_kernel()
    positive = kernel.copy()
    positive[5, 5] = 1.1
    batch = np.stack([positive, kernel, kernel])
    lowered = lowered_for_tpu(jnp.linalg.cholesky, batch)
    (origin,) = si.find_nonfinite(lowered, batch).origins
    assert origin.why[-1].detail == (f"the matrix is not positive definite: its leading minor of order {failing} is "
                                     f"not (first failing column {failing}), in batch element [1] (2 of 3 failed)")


def cholesky_program(element: str, lower: bool) -> str:
    return f"""func.func @main(%a: tensor<3x3x{element}>) -> tensor<3x3x{element}> {{
  %0 = stablehlo.cholesky %a, lower = {str(lower).lower()} : tensor<3x3x{element}>
  return %0 : tensor<3x3x{element}>
}}"""


def test_the_specs_cholesky_reads_the_triangle_it_is_told_to():
    """A matrix whose lower triangle makes a positive definite matrix and whose upper one
    does not (by hand: [[4, 2, ·], [2, 1, ·]]: the minor of order 2 is 4·1 - 2² = 0); and a
    complex Hermitian one failing at order 3 (numpy's eigenvalues)."""
    a = np.array([[4.0, 2.0, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    assert si.find_nonfinite(cholesky_program("f32", lower=True), a) is None
    (origin,) = si.find_nonfinite(cholesky_program("f32", lower=False), a).origins
    assert origin.why[-1].detail.startswith("the matrix is not positive definite: its leading minor of order 2 is not")
    hermitian = np.array([[2, 1j, 0], [-1j, 2, 1 + 1j], [0, 1 - 1j, 0.5]], np.complex64)
    minors = [np.linalg.eigvalsh(hermitian[:k, :k]).min() for k in (1, 2, 3)]
    assert minors[0] > 0 and minors[1] > 0 and minors[2] < 0
    (origin,) = si.find_nonfinite(cholesky_program("complex<f32>", lower=True), hermitian).origins
    assert origin.why[-1].detail.startswith("the matrix is not positive definite: its leading minor of order 3 is not")


def test_the_specs_triangular_solve_names_its_zero_diagonal():
    """A TPU program's triangular solve of a matrix whose diagonal element (3,3) is zero."""
    a = np.tril(np.ones((4, 4), np.float32)) + np.eye(4, dtype=np.float32)
    a[2, 2] = 0.0
    b = np.ones((4, 1), np.float32)
    lowered = lowered_for_tpu(lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True), a, b)
    assert "stablehlo.triangular_solve" in lowered.as_text()
    (origin,) = si.find_nonfinite(lowered, a, b).origins
    assert (origin.op, origin.why[-1].kind) == ("stablehlo.triangular_solve", "failed")
    assert origin.why[-1].detail == "the triangular matrix is singular: its diagonal element (3,3) is exactly zero"


def test_a_failed_eigensolver_given_an_inf_is_followed_to_the_inf():
    """``jnp.linalg.eigh`` symmetrizes its operand first, ``(x + x^H) / 2``: a finite f32
    matrix whose off-diagonal pair sums past f32's largest value gives LAPACK's ``syevd``
    an inf, and it does not converge. JAX's CPU lowering turns the failure into NaN
    eigenvalues (XLA gives NaN, the oracle here); the chain names the failed call with
    the info LAPACK (SciPy's ``ssyevd``) gives on the symmetrized matrix, then the inf's
    own origin, the symmetrization's add."""
    import scipy.linalg.lapack as lapack

    def spectrum_sum(x):
        eigenvalues, _ = jnp.linalg.eigh(x)  # eigh
        return jnp.sum(eigenvalues)

    matrix = np.eye(4, dtype=np.float32)
    matrix[0, 0], matrix[3, 3] = 1e38, -1e38
    matrix[0, 3] = matrix[3, 0] = 3e38
    assert np.isnan(jax.jit(spectrum_sum)(matrix))
    with np.errstate(over="ignore"):
        symmetrized = ((matrix + matrix.T) / 2).astype(np.float32)
    info = lapack.ssyevd(symmetrized, compute_v=1, lower=1)[-1]
    assert info > 0
    text = str(si.find_nonfinite(jax.jit(spectrum_sum).lower(matrix), matrix))
    eigh_line = f"{FILE}:{spectrum_sum.__code__.co_firstlineno + 1} ({spectrum_sum.__qualname__})"
    assert (f"← stablehlo.custom_call @lapack_ssyevd_ffi at {eigh_line} failed: the eigensolver did not converge "
            f"(info {info})\n     ← inf made by stablehlo.add at {eigh_line}") in text
