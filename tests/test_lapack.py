"""The LAPACK custom calls of JAX's CPU lowering (ops/lapack.py) against XLA CPU.

Two levels:

* raw calls: a module made of one ``lapack_*_ffi`` custom call, compiled by XLA
  CPU (which runs jaxlib's kernels) and run by the interpreter, every result
  compared, including pivots, Householder reflectors and info codes; for every
  type, batched, with an empty batch, and for failing inputs (singular, not
  positive definite, non-finite);
* the jnp.linalg / jax.scipy.linalg / lax.linalg functions that lower to them,
  lowered by jax.jit and run end to end, compared with XLA CPU through
  invariants where a decomposition is only defined up to signs or phases.
"""

import importlib
import pkgutil

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

import stablehlo_interp as si
from oracles import op_module, run_interp, run_interp_text, run_xla, run_xla_text, tensor_type
from stablehlo_interp.ir.types import element_type_of

# Compiling a module that calls jaxlib's LAPACK kernels needs their LAPACK
# function pointers, which jaxlib fills in when JAX first lowers a linalg op.
jax.jit(jnp.linalg.inv).lower(np.eye(2, dtype=np.float32))

TYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
REAL, COMPLEX = {"s": "s", "d": "d", "c": "s", "z": "d"}, {"s": "c", "d": "z", "c": "c", "z": "z"}
LETTERS = pytest.mark.parametrize("letter", list(TYPES))
# Every type, batched or not, and an empty batch (the batch loop is the same for all).
LETTER_BATCHES = pytest.mark.parametrize("letter, batch", [
    ("s", ()), ("d", (3,)), ("c", (2,)), ("z", ()), ("d", (2, 0)),
], ids=["s", "d-batch", "c-batch", "z", "d-empty"])




def dtype_kind(letter: str, kind: str):
    return np.dtype({"T": TYPES[letter], "R": TYPES[REAL[letter]], "C": TYPES[COMPLEX[letter]],
                     "i": np.int32}[kind])


def random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    values = rng.standard_normal(shape)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def hermitian(rng, shape, dtype):
    a = random(rng, shape, dtype)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)


def positive_definite(rng, shape, dtype):
    a = random(rng, shape, dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


# ----------------------------------------------------------------- raw custom calls


def column_major(rank: int, core: int) -> list:
    """JAX's layouts: matrices column-major in their two minor dims, the rest row-major."""
    if core == 2:
        return [rank - 2, rank - 1, *range(rank - 3, -1, -1)]
    return list(range(rank - 1, -1, -1))


def layouts_attr(buffers) -> str:
    dense = [f"dense<{column_major(len(shape), core)}> : tensor<{len(shape)}xindex>" if shape
             else "dense<> : tensor<0xindex>" for shape, _, core in buffers]
    return "[" + ", ".join(dense) + "]"


def custom_call_text(target, operands, results, config="", layouts=True) -> str:
    """A module whose @main is one custom call; operands/results: (shape, dtype, core rank)."""
    attributes = (f'call_target_name = "{target}", api_version = 1 : i32, backend_config = "", '
                  f"mhlo.backend_config = {{{config}}}")
    if layouts:
        attributes += (f", operand_layouts = {layouts_attr(operands)}, "
                       f"result_layouts = {layouts_attr(results)}")
    types = lambda buffers: [tensor_type(s, element_type_of(d)) for s, d, _ in buffers]  # noqa: E731 - a lambda reads as the expression it names
    return op_module("stablehlo.custom_call", types(operands), types(results), attributes)


def assert_close(actual, expected, context=""):
    """Same dtype, shape, NaNs and infinities; finite values within a few hundred eps of XLA's."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected, err_msg=context)
        return
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=context)
    eps = np.finfo(actual.dtype).eps
    finite = np.isfinite(expected)
    infinite = ~finite & ~np.isnan(expected)
    np.testing.assert_array_equal(actual[infinite], expected[infinite], err_msg=context)
    scale = 1 + (np.abs(expected[finite]).max() if finite.any() else 0)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=0, atol=256 * eps * scale,
                               err_msg=context)


def check_call(target, letter, args, cores, results, config="", ignore=(), layouts=True, rows=None):
    """Run one custom call on XLA CPU and in the interpreter; compare every result
    but those in ``ignore`` (buffers jaxlib leaves unwritten); with ``rows``, only
    those batch elements of the results before the last (info, compared whole).
    ``results``: (shape, kind, core) with kind T/R/C/i as in ops/lapack.py.
    Returns XLA's results."""
    operands = [(a.shape, a.dtype, core) for a, core in zip(args, cores)]
    results = [(shape, dtype_kind(letter, kind), core) for shape, kind, core in results]
    text = custom_call_text(target, operands, results, config, layouts)
    actual = run_interp_text(text, *args)
    expected = run_xla_text(text, *args)
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        if rows is not None and index < len(expected) - 1:
            a, e = a[rows], e[rows]
        if index not in ignore:
            assert_close(a, e, f"{target} result {index}: ")
    return expected


@LETTER_BATCHES
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)], ids=str)
def test_getrf(letter, batch, shape):
    rng = np.random.default_rng(0)
    a = random(rng, batch + shape, TYPES[letter])
    k = min(shape)
    check_call(f"lapack_{letter}getrf_ffi", letter, [a], [2],
               [(batch + shape, "T", 2), (batch + (k,), "i", 1), (batch, "i", 0)])


@LETTERS
def test_getrf_singular(letter):
    a = np.array([[[1, 2, 3], [2, 4, 6], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 0, 1]]], TYPES[letter])
    lu, pivots, info = check_call(f"lapack_{letter}getrf_ffi", letter, [a], [2],
                                  [((2, 3, 3), "T", 2), ((2, 3), "i", 1), ((2,), "i", 0)])
    assert list(info) == [2, 1]  # the 1-based index of the first exactly zero pivot


TRSM_FLAGS = [("L", "L", "N", "N"), ("L", "U", "T", "U"), ("R", "L", "C", "N"), ("R", "U", "N", "U")]


@LETTER_BATCHES
@pytest.mark.parametrize("flags", TRSM_FLAGS, ids="".join)
def test_trsm(letter, batch, flags):
    side, uplo, trans, diag = flags
    rng = np.random.default_rng(1)
    a = (random(rng, batch + (4, 4), TYPES[letter]) + 4 * np.eye(4)).astype(TYPES[letter])
    b_shape = batch + ((4, 3) if side == "L" else (3, 4))
    b = random(rng, b_shape, TYPES[letter])
    config = ", ".join(f"{name} = {ord(flag)} : ui8" for name, flag in
                       zip(["side", "uplo", "trans_x", "diag"], flags))
    check_call(f"lapack_{letter}trsm_ffi", letter, [a, b], [2, 2], [(b_shape, "T", 2)], config)


@LETTER_BATCHES
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)], ids=str)
def test_geqrf_orgqr(letter, batch, shape):
    rng = np.random.default_rng(2)
    a = random(rng, batch + shape, TYPES[letter])
    k = min(shape)
    qr, tau = check_call(f"lapack_{letter}geqrf_ffi", letter, [a], [2],
                         [(batch + shape, "T", 2), (batch + (k,), "T", 1)])
    name = "ungqr" if letter in "cz" else "orgqr"
    reflectors = qr[..., :k] if shape[0] > shape[1] else qr[..., :k, :k]
    check_call(f"lapack_{letter}{name}_ffi", letter, [np.ascontiguousarray(reflectors), tau], [2, 1],
               [(reflectors.shape, "T", 2)])


@LETTER_BATCHES
@pytest.mark.parametrize("shape", [(5, 4), (3, 5)], ids=str)
def test_geqp3(letter, batch, shape):
    rng = np.random.default_rng(3)
    a = random(rng, batch + shape, TYPES[letter])
    jpvt = np.zeros(batch + shape[1:], np.int32)
    check_call(f"lapack_{letter}geqp3_ffi", letter, [a, jpvt], [2, 1],
               [(batch + shape, "T", 2), (batch + shape[1:], "i", 1), (batch + (min(shape),), "T", 1)])


@LETTER_BATCHES
@pytest.mark.parametrize("left, transpose", [(True, False), (True, True), (False, False), (False, True)])
def test_ormqr(letter, batch, left, transpose):
    rng = np.random.default_rng(4)
    reflectors, tau = random(rng, batch + (5, 3), TYPES[letter]), random(rng, batch + (3,), TYPES[letter])
    c = random(rng, batch + ((5, 2) if left else (2, 5)), TYPES[letter])
    name = "unmqr" if letter in "cz" else "ormqr"
    config = f"left = {str(left).lower()}, transpose = {str(transpose).lower()}"
    check_call(f"lapack_{letter}{name}_ffi", letter, [reflectors, tau, c], [2, 1, 2],
               [(c.shape, "T", 2)], config)


@LETTER_BATCHES
@pytest.mark.parametrize("uplo", "LU")
def test_potrf(letter, batch, uplo):
    rng = np.random.default_rng(5)
    a = positive_definite(rng, batch + (4, 4), TYPES[letter])
    check_call(f"lapack_{letter}potrf_ffi", letter, [a], [2], [(a.shape, "T", 2), (batch, "i", 0)],
               f"uplo = {ord(uplo)} : ui8")


@LETTERS
def test_potrf_not_positive_definite(letter):
    a = np.array([[[4, 2, 0], [2, 1, 0], [0, 0, 3]], [[1, 0, 0], [0, -1, 0], [0, 0, 1]]], TYPES[letter])
    _, info = check_call(f"lapack_{letter}potrf_ffi", letter, [a], [2], [(a.shape, "T", 2), ((2,), "i", 0)],
                         f"uplo = {ord('L')} : ui8")
    assert list(info) == [2, 2]  # the order of the first leading minor that is not positive


@LETTER_BATCHES
@pytest.mark.parametrize("routine", ["gesdd", "gesvd"])
@pytest.mark.parametrize("mode, shape", [("A", (5, 3)), ("S", (3, 5)), ("N", (5, 3))], ids=["A", "S", "N"])
def test_gesdd_gesvd(letter, batch, routine, mode, shape):
    rng = np.random.default_rng(6)
    a = random(rng, batch + shape, TYPES[letter])
    m, n = shape
    k = min(shape)
    u, vt = ((m, m), (n, n)) if mode == "A" else ((m, k), (k, n))
    check_call(f"lapack_{letter}{routine}_ffi", letter, [a], [2],
               [(batch + shape, "T", 2), (batch + (k,), "R", 1), (batch + u, "T", 2), (batch + vt, "T", 2),
                (batch, "i", 0)], f"mode = {ord(mode)} : ui8", ignore=(2, 3) if mode == "N" else ())


@LETTER_BATCHES
@pytest.mark.parametrize("uplo", "LU")
@pytest.mark.parametrize("mode", "VN")
def test_syevd_heevd(letter, batch, uplo, mode):
    rng = np.random.default_rng(7)
    a = hermitian(rng, batch + (5, 5), TYPES[letter])
    name = "heevd" if letter in "cz" else "syevd"
    check_call(f"lapack_{letter}{name}_ffi", letter, [a], [2],
               [(a.shape, "T", 2), (batch + (5,), "R", 1), (batch, "i", 0)],
               f"mode = {ord(mode)} : ui8, uplo = {ord(uplo)} : ui8")


def geev_results(letter, batch, n):
    if letter in "cz":
        return [(batch + (n,), "T", 1), (batch + (n, n), "T", 2), (batch + (n, n), "T", 2), (batch, "i", 0)]
    return [(batch + (n,), "R", 1), (batch + (n,), "R", 1), (batch + (n, n), "C", 2),
            (batch + (n, n), "C", 2), (batch, "i", 0)]


@LETTER_BATCHES
@pytest.mark.parametrize("left, right", [("V", "V"), ("N", "V"), ("V", "N"), ("N", "N")])
def test_geev(letter, batch, left, right):
    rng = np.random.default_rng(8)
    a = random(rng, batch + (5, 5), TYPES[letter])
    vectors = 1 if letter in "cz" else 2  # index of the left eigenvectors
    ignore = tuple(i for i, flag in zip((vectors, vectors + 1), (left, right)) if flag == "N")
    check_call(f"lapack_{letter}geev_ffi", letter, [a], [2], geev_results(letter, batch, 5),
               f"compute_left = {ord(left)} : ui8, compute_right = {ord(right)} : ui8", ignore)


@LETTERS
def test_geev_non_finite(letter):
    a = np.eye(3, dtype=TYPES[letter])[None].repeat(2, 0)
    a[1, 0, 1] = np.nan
    results = geev_results(letter, (2,), 3)
    left_vectors = 1 if letter in "cz" else 2   # not computed: unwritten
    expected = check_call(f"lapack_{letter}geev_ffi", letter, [a], [2], results,
                          f"compute_left = {ord('N')} : ui8, compute_right = {ord('V')} : ui8",
                          ignore=(left_vectors,), rows=[0])   # the NaN matrix's results are undefined
    assert list(expected[-1]) == [0, -4]


@LETTER_BATCHES
@pytest.mark.parametrize("mode", "VN")
def test_gees(letter, batch, mode):
    rng = np.random.default_rng(9)
    a = random(rng, batch + (5, 5), TYPES[letter])
    eigenvalues = [(batch + (5,), "T", 1)] if letter in "cz" else [(batch + (5,), "R", 1)] * 2
    check_call(f"lapack_{letter}gees_ffi", letter, [a], [2],
               [(a.shape, "T", 2), (a.shape, "T", 2), *eigenvalues, (batch, "i", 0), (batch, "i", 0)],
               f"mode = {ord(mode)} : ui8, sort = {ord('N')} : ui8", ignore=(1,) if mode == "N" else ())


@LETTER_BATCHES
@pytest.mark.parametrize("low, high", [(1, 5), (2, 4)])
def test_gehrd(letter, batch, low, high):
    rng = np.random.default_rng(10)
    a = random(rng, batch + (5, 5), TYPES[letter])
    check_call(f"lapack_{letter}gehrd_ffi", letter, [a], [2],
               [(a.shape, "T", 2), (batch + (4,), "T", 1), (batch, "i", 0)],
               f"high = {high} : i32, low = {low} : i32")


@LETTER_BATCHES
@pytest.mark.parametrize("uplo", "LU")
def test_sytrd_hetrd(letter, batch, uplo):
    rng = np.random.default_rng(11)
    a = hermitian(rng, batch + (5, 5), TYPES[letter])
    name = "hetrd" if letter in "cz" else "sytrd"
    check_call(f"lapack_{letter}{name}_ffi", letter, [a], [2],
               [(a.shape, "T", 2), (batch + (5,), "R", 1), (batch + (4,), "R", 1), (batch + (4,), "T", 1),
                (batch, "i", 0)], f"uplo = {ord(uplo)} : ui8")


def tridiagonal(rng, letter, batch, n, rhs=3):
    dtype = TYPES[letter]
    return [random(rng, batch + (n,), dtype) for _ in range(3)] + [random(rng, batch + (n, rhs), dtype)]


def gtsv_results(batch, n, rhs=3):
    return [(batch + (n,), "T", 1)] * 3 + [(batch + (n, rhs), "T", 2), (batch, "i", 0)]


@LETTER_BATCHES
@pytest.mark.parametrize("n", [5, 2, 1])
def test_gtsv(letter, batch, n):
    args = tridiagonal(np.random.default_rng(12), letter, batch, n)
    check_call(f"lapack_{letter}gtsv_ffi", letter, args, [1, 1, 1, 2], gtsv_results(batch, n))


@LETTERS
def test_gtsv_singular(letter):
    dl, d, du, b = tridiagonal(np.random.default_rng(13), letter, (2,), 4)
    dl[:], d[0], du[:] = 0, 0, 0  # batch element 0: zero first pivot; element 1 diagonal
    d[1, 2] = 0
    *_, info = check_call(f"lapack_{letter}gtsv_ffi", letter, [dl, d, du, b], [1, 1, 1, 2],
                          gtsv_results((2,), 4))
    assert list(info) == [1, 3]


@LETTER_BATCHES
@pytest.mark.parametrize("n", [6, 1])
def test_tridiagonal_solve_perturbed(letter, batch, n):
    args = tridiagonal(np.random.default_rng(14), letter, batch, n)
    check_call("tridiagonal_solve_perturbed_ffi", letter, args, [1, 1, 1, 2], [(args[3].shape, "T", 2)])


@LETTERS
def test_tridiagonal_solve_perturbed_singular(letter):
    """T - lambda I for an exact eigenvalue lambda, and an all-zero matrix: the
    pivots that are (numerically) zero get perturbed instead of dividing by zero."""
    dtype = TYPES[letter]
    off = np.array([0, 1, 1, 1], dtype)
    main = np.array([2, 2, 2, 2], dtype) - np.asarray(2 + 2 * np.cos(np.pi / 5), dtype)
    dl = np.stack([off, np.zeros(4, dtype)])
    d = np.stack([main, np.zeros(4, dtype)])
    du = np.stack([np.roll(off, -1), np.zeros(4, dtype)])
    b = np.ones((2, 4, 1), dtype)
    (x,) = check_call("tridiagonal_solve_perturbed_ffi", letter, [dl, d, du, b], [1, 1, 1, 2],
                      [(b.shape, "T", 2)])
    assert np.isfinite(x).all()


@LETTERS
def test_tridiagonal_solve_perturbed_with_zeros_in_the_subdiagonal(letter):
    """A zero below the diagonal leaves its row out of the elimination (xLAGTF's
    dl(k) = 0 branch): the system splits into blocks."""
    dl, d, du, b = tridiagonal(np.random.default_rng(15), letter, (2,), 5)
    dl[0, 2] = dl[1, 1] = dl[1, 3] = 0
    check_call("tridiagonal_solve_perturbed_ffi", letter, [dl, d, du, b], [1, 1, 1, 2], [(b.shape, "T", 2)])


def test_tridiagonal_solve_perturbed_scales_a_subnormal_pivot_by_hand():
    """A 1 x 1 system with a subnormal pivot d and right-hand side b with |b| * safemin
    <= |d|: xLAGTS scales both by 1 / safemin (a power of two, exact) rather than
    perturbing d, so x = b / d exactly. By hand: XLA CPU flushes subnormal inputs."""
    d, b = np.array([1e-310]), np.array([[3e-310, -2e-315]])
    operands = [((1,), np.float64, 1)] * 3 + [((1, 2), np.float64, 2)]
    text = custom_call_text("tridiagonal_solve_perturbed_ffi", operands, [((1, 2), np.float64, 2)], "", True)
    (x,) = run_interp_text(text, np.zeros(1), d, np.zeros(1), b)
    np.testing.assert_array_equal(x, b / d[0])
    assert x[0, 0] == 3.0 and x[0, 1] != 0


def stored_cpu_modules():
    """JAX's back-compat test data: LAPACK modules serialized by earlier JAX versions
    (shipped in the jax wheel we pin: an import error fails the collection)."""
    import jax._src.internal_test_util.export_back_compat_test_data as data

    cases = []
    for found in pkgutil.iter_modules(data.__path__):
        if found.name.startswith("cpu_"):
            module = importlib.import_module(f"{data.__name__}.{found.name}")
            for name in sorted(n for n in vars(module) if n.startswith("data_")):
                for key, case in getattr(module, name).items():
                    if key in ("f64", "c64"):  # the other two types take the same paths
                        cases.append(pytest.param(case, id=f"{found.name[4:]}-{name[5:]}-{key}"))
    assert cases, f"no cpu_ modules in {data.__path__}"
    return cases


@pytest.mark.parametrize("case", stored_cpu_modules())
def test_modules_serialized_by_earlier_jax(case):
    """Compared with XLA CPU running the same module today: the outputs stored with
    them came from other LAPACK builds (eigenvectors differ in sign or phase)."""
    text, inputs = case["mlir_module_text"], case["inputs"]
    actual = run_interp_text(text, *inputs)
    expected = run_xla_text(text, *inputs)
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, f"result {index}: ")


# ------------------------------------------------------------------------ layouts


@pytest.mark.parametrize("layouts", [False, True], ids=["no-layouts", "row-major"])
def test_layouts_other_than_jax(layouts):
    """XLA hands the kernels buffers in the declared layouts (row-major when there are
    none); the kernels read matrices column-major, so they see the bytes reinterpreted."""
    rng = np.random.default_rng(15)
    a = random(rng, (2, 4, 3), np.float64)
    results = [((2, 4, 3), np.dtype(np.float64), 2), ((2, 3), np.dtype(np.float64), 1)]
    text = custom_call_text("lapack_dgeqrf_ffi", [(a.shape, a.dtype, 2)], results, layouts=False)
    if layouts:
        text = text.replace('backend_config = {}', 'backend_config = {}, operand_layouts = '
                            '[dense<[2, 1, 0]> : tensor<3xindex>], result_layouts = [dense<[2, 1, 0]> : '
                            'tensor<3xindex>, dense<[1, 0]> : tensor<2xindex>]')
    expected = run_xla_text(text, a)
    actual = run_interp_text(text, a)
    assert len(actual) == len(expected) == 2
    for x, e in zip(actual, expected):
        assert_close(x, e)
    # Not the QR of a: the kernel factored each 4x3 matrix's bytes read as 3x4 column-major.
    assert not np.allclose(np.abs(expected[0][0, 0, 0]), np.linalg.norm(a[0, :, 0]))


# ------------------------------------------------------------------ load-time errors


def load_call(target, operands, results, config=""):
    return si.load(custom_call_text(target, operands, results, config, layouts=False))


def test_wrong_operand_type_names_target():
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    with pytest.raises(si.OpError, match="lapack_sgetrf_ffi.*operand 0 must be a tensor of float32"):
        load_call("lapack_sgetrf_ffi", [((3, 3), np.dtype(np.float64), 2)],
                  [((3, 3), f32, 2), ((3,), i32, 1), ((), i32, 0)])
    with pytest.raises(si.OpError, match="lapack_dpotrf_ffi.*square"):
        load_call("lapack_dpotrf_ffi", [((3, 2), np.dtype(np.float64), 2)],
                  [((3, 2), np.dtype(np.float64), 2), ((), i32, 0)], f"uplo = {ord('L')} : ui8")
    with pytest.raises(si.OpError, match="lapack_sgetrf_ffi.*batch dimensions"):
        load_call("lapack_sgetrf_ffi", [((2, 3, 3), f32, 2)],
                  [((2, 3, 3), f32, 2), ((3, 3), i32, 1), ((2,), i32, 0)])
    with pytest.raises(si.OpError, match="lapack_spotrf_ffi.*missing backend_config attribute 'uplo'"):
        load_call("lapack_spotrf_ffi", [((3, 3), f32, 2)], [((3, 3), f32, 2), ((), i32, 0)])


def test_wrong_result_shape_names_target():
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    text = custom_call_text("lapack_sgetrf_ffi", [((3, 3), f32, 2)],
                            [((3, 3), f32, 2), ((4,), i32, 1), ((), i32, 0)], layouts=False)
    with pytest.raises(si.OpExecutionError,
                       match=r"lapack_sgetrf_ffi: result 1 holds \(4,\) per batch element, LAPACK returns \(3,\)"):
        si.run(text, np.eye(3, dtype=f32))


def test_perturbed_solve_takes_floats_only():
    i32 = np.dtype(np.int32)
    with pytest.raises(si.OpError, match="tridiagonal_solve_perturbed_ffi: operands must be f32, f64, c64"):
        load_call("tridiagonal_solve_perturbed_ffi", [((3,), i32, 1)] * 3 + [((3, 1), i32, 2)],
                  [((3, 1), i32, 2)])


def test_unimplemented_modes_name_target():
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    with pytest.raises(si.UnsupportedOpError, match="lapack_sgesdd_ffi: mode 'O'"):
        load_call("lapack_sgesdd_ffi", [((3, 3), f32, 2)],
                  [((3, 3), f32, 2), ((3,), f32, 1), ((3, 3), f32, 2), ((3, 3), f32, 2), ((), i32, 0)],
                  f"mode = {ord('O')} : ui8")
    with pytest.raises(si.UnsupportedOpError, match="lapack_sgees_ffi: sorted Schur"):
        load_call("lapack_sgees_ffi", [((3, 3), f32, 2)],
                  [((3, 3), f32, 2), ((3, 3), f32, 2), ((3,), f32, 1), ((3,), f32, 1), ((), i32, 0),
                   ((), i32, 0)], f"mode = {ord('V')} : ui8, sort = {ord('S')} : ui8")


# --------------------------------------------------------- JAX functions end to end


def tolerance(dtype):
    """rtol and atol of f32/c64 and f64/c128 results: the interpreter's LAPACK (SciPy's)
    and XLA's (jaxlib's) round differently in eigh, svd, qr, eig and schur of these 4x4
    and 5x5 matrices, and A V = V diag(w) holds to rounding: measured 2.8e-6 at most in
    f32 (all pass at 2e-6, 10 fail at 2e-7); 1e-5 leaves a margin for other builds."""
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


def same_as_xla(fn, *args, unique=()):
    """Results of fn through the interpreter and XLA CPU; those at ``unique`` (defined
    only up to signs or phases) are returned, not compared."""
    actual, expected = run_interp(fn, *args), run_xla(fn, *args)
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        if index not in unique:
            assert a.dtype == e.dtype and a.shape == e.shape, index
            np.testing.assert_allclose(a, e, rtol=tolerance(e.dtype), atol=tolerance(e.dtype),
                                       err_msg=f"result {index}")
    return actual, expected


def close(a, b, dtype):
    np.testing.assert_allclose(a, b, rtol=tolerance(dtype), atol=tolerance(dtype))


def conj_t(a):
    return np.conj(np.swapaxes(a, -1, -2))


MATRIX_CASES = pytest.mark.parametrize("dtype, batch", [
    (np.float32, ()), (np.float64, (3,)), (np.complex64, (2,)), (np.complex128, ()), (np.float64, (0,)),
], ids=["f32", "f64-batch", "c64-batch", "c128", "f64-empty"])


# name -> (function, whether it takes a single matrix (batched here with vmap), argument makers)
FUNCTIONS = {
    "inv": (jnp.linalg.inv, False), "det": (jnp.linalg.det, False), "slogdet": (jnp.linalg.slogdet, False),
    "solve": (jnp.linalg.solve, False), "pinv": (jnp.linalg.pinv, False),
    "lstsq": (lambda x, y: jnp.linalg.lstsq(x, y)[:2], True), "matrix_rank": (jnp.linalg.matrix_rank, False),
    "norm2": (lambda x: jnp.linalg.norm(x, 2, axis=(-2, -1)), False),
    "cholesky": (jnp.linalg.cholesky, False),
    "eigvalsh": (jnp.linalg.eigvalsh, False), "svdvals": (jnp.linalg.svdvals, False),
    "lu": (jsl.lu, True), "lu_solve": (lambda x, y: jsl.lu_solve(jsl.lu_factor(x), y), True),
    "expm": (lambda x: jsl.expm(x / 4), False),
    "hessenberg": (lambda x: jsl.hessenberg(x, calc_q=True), True),
    "solve_triangular": (lambda x, y: jsl.solve_triangular(x + 4 * jnp.eye(4, dtype=x.dtype), y, lower=True,
                                                           trans=1), False),
    "cho_solve": (lambda x, y: jsl.cho_solve(jsl.cho_factor(x), y), True),
    "tridiagonal_solve": (lambda x, y: lax.linalg.tridiagonal_solve(x[0], x[1], x[2], y), True),
}
POSITIVE_DEFINITE = {"cholesky", "cho_solve"}
TAKES_B = {"solve", "lstsq", "lu_solve", "solve_triangular", "cho_solve", "tridiagonal_solve"}


@pytest.mark.parametrize("dtype, batch", [(np.float32, ()), (np.complex128, (2,)), (np.float64, (0,))],
                         ids=["f32", "c128-batch", "f64-empty"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_linalg_functions(name, dtype, batch):
    rng = np.random.default_rng(16)
    fn, single = FUNCTIONS[name]
    make = positive_definite if name in POSITIVE_DEFINITE else random
    args = [make(rng, batch + (4, 4), dtype)]
    if name in TAKES_B:
        args.append(random(rng, batch + (4, 2), dtype))
    if single and batch:
        fn = jax.vmap(fn)
    same_as_xla(fn, *args)


@MATRIX_CASES
def test_eigh(dtype, batch):
    a = hermitian(np.random.default_rng(17), batch + (5, 5), dtype)
    (w, v), (_, v_xla) = same_as_xla(jnp.linalg.eigh, a, unique=(1,))
    close(a @ v, v * w[..., None, :], dtype)  # A V = V diag(w), V unitary
    close(conj_t(v) @ v, np.broadcast_to(np.eye(5), v.shape), dtype)
    close(np.abs(v), np.abs(v_xla), dtype)  # distinct eigenvalues: columns equal up to a phase


@MATRIX_CASES
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd(dtype, batch, full_matrices):
    a = random(np.random.default_rng(18), batch + (5, 3), dtype)
    (u, s, vh), (u_xla, _, vh_xla) = same_as_xla(
        lambda x: jnp.linalg.svd(x, full_matrices=full_matrices), a, unique=(0, 2))
    close((u[..., :, :3] * s[..., None, :]) @ vh[..., :3, :], a, dtype)
    close(conj_t(u) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2), dtype)
    close(np.abs(u[..., :3]), np.abs(u_xla[..., :3]), dtype)
    close(np.abs(vh), np.abs(vh_xla), dtype)


@MATRIX_CASES
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(dtype, batch, mode):
    a = random(np.random.default_rng(19), batch + (5, 3), dtype)
    (q, r), _ = same_as_xla(lambda x: jnp.linalg.qr(x, mode=mode), a)
    close(q @ r, a, dtype)
    close(conj_t(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qr_pivoting(dtype):
    a = random(np.random.default_rng(20), (5, 4), dtype)
    (q, r, p), _ = same_as_xla(lambda x: jsl.qr(x, pivoting=True), a)
    close(q @ r, a[:, p], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qr_multiply(dtype):
    a = random(np.random.default_rng(21), (5, 3), dtype)
    c = random(np.random.default_rng(22), (5,), dtype)
    same_as_xla(lambda x, y: jsl.qr_multiply(x, y)[0], a, c)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_eig(dtype):
    a = random(np.random.default_rng(23), (2, 4, 4), dtype)
    (w, v), (w_xla, v_xla) = same_as_xla(jnp.linalg.eig, a, unique=(1,))
    close(a.astype(v.dtype) @ v, v * w[..., None, :], dtype)
    close(np.abs(v), np.abs(v_xla), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_schur(dtype):
    a = random(np.random.default_rng(24), (5, 5), dtype)
    (t, z), _ = same_as_xla(jsl.schur, a)
    close(z @ t @ conj_t(z), a, dtype)


def test_sqrtm():
    a = positive_definite(np.random.default_rng(25), (4, 4), np.float64)
    (root,), _ = same_as_xla(jsl.sqrtm, a)
    close(root @ root, a, np.float64)


@pytest.mark.parametrize("dtype", [np.float64])
def test_eigh_tridiagonal(dtype):
    rng = np.random.default_rng(26)
    d, e = random(rng, (4,), dtype), random(rng, (3,), dtype)
    (w, v), (_, v_xla) = same_as_xla(lambda x, y: jsl.eigh_tridiagonal(x, y, eigvals_only=False), d, e,
                                     unique=(1,))
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    close(t @ v, v * w, dtype)
    close(np.abs(v), np.abs(v_xla), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_tridiagonal(dtype):
    a = hermitian(np.random.default_rng(27), (5, 5), dtype)
    same_as_xla(lambda x: lax.linalg.tridiagonal(x, lower=True), a)


def test_failures_give_nans_as_on_xla():
    """JAX turns a failing info code into NaNs; the interpreter's info codes must agree."""
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    not_pd = np.array([[1.0, 2.0], [2.0, 1.0]])
    (det,), _ = same_as_xla(jnp.linalg.det, singular)
    assert det == 0
    (factor,), _ = same_as_xla(jnp.linalg.cholesky, not_pd)
    assert np.isnan(factor[np.tril_indices(2)]).all()
    (inverse,), _ = same_as_xla(jnp.linalg.inv, singular)
    assert not np.isfinite(inverse).all()
    (w, v), _ = same_as_xla(jnp.linalg.eigh, np.array([[np.nan, 0.0], [0.0, 1.0]]))
    assert np.isnan(w).any()
