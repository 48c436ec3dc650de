"""The LAPACK custom calls of JAX's CPU lowering (``lapack_<t><routine>_ffi``).

On CPU, ``jnp.linalg``, ``jax.scipy.linalg`` and ``lax.linalg`` lower their
decompositions to typed-FFI custom calls into jaxlib's LAPACK kernels
(``jaxlib/cpu/lapack_kernels.cc``). A target is named ``lapack_`` + a type
letter (``s`` f32, ``d`` f64, ``c`` c64, ``z`` c128) + the LAPACK routine +
``_ffi``; its flags sit in the ``mhlo.backend_config`` dictionary (characters
such as ``uplo = 76 : ui8`` for ``'L'``, booleans, ints). jaxlib calls the
LAPACK that SciPy ships (it takes the function pointers from
``scipy.linalg.cython_lapack``), so SciPy's wrappers of the same routines,
called with the same arguments and workspace sizes, reproduce XLA's results.

One table (``_ROUTINES``) describes every routine: the signature of its
operands and results, and a *prepare* function that reads the attributes at
load time and returns the kernel for one matrix (one batch element). A single
builder checks the types against the signature and loops the kernel over the
leading batch dimensions.

Layouts. The kernels read every matrix (a buffer whose two minor dimensions
are the matrix) column-major and everything else row-major, and JAX declares
exactly these layouts in ``operand_layouts`` / ``result_layouts``. The logical
shapes in the module are those of the matrices themselves, so with JAX's
layouts the kernels work on the logical (row-major NumPy) arrays as they are.
A module that declares other layouts, or none (XLA then uses the default
row-major layout), hands the kernel its buffers reinterpreted: the builder
reproduces that reinterpretation (``_reinterpret``).

``tridiagonal_solve_perturbed_ffi`` (``jax.scipy.linalg.eigh_tridiagonal``)
is jaxlib's own Gaussian elimination with perturbed pivots, not a LAPACK
routine; it is ported here (``_solve_perturbed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.linalg.blas
import scipy.linalg.lapack

from ..engine.registry import custom_call

_TYPE_LETTERS = {"s": np.dtype(np.float32), "d": np.dtype(np.float64),
                 "c": np.dtype(np.complex64), "z": np.dtype(np.complex128)}
_LETTER_OF = {dtype: letter for letter, dtype in _TYPE_LETTERS.items()}
_REAL = {"s": "s", "d": "d", "c": "s", "z": "d"}
_COMPLEX = {"s": "c", "d": "z", "c": "c", "z": "z"}


@dataclass(frozen=True)
class _Routine:
    """A LAPACK routine as a custom call.

    ``operands`` / ``results`` are signatures, one word per buffer: a letter for
    the element type (``T`` the routine's type, ``R`` its real type, ``C`` its
    complex type, ``i`` int32) and the number of trailing non-batch dimensions
    (``T2`` a matrix, ``R1`` a real vector, ``i0`` one int32 per batch element).
    ``complex_results`` replaces ``results`` for the ``c``/``z`` variants.
    ``prepare(call)`` returns ``kernel(*operand matrices) -> tuple of results``
    for one batch element; a result given as None is left as zeros (jaxlib does
    not write it in that configuration).
    """

    operands: str
    results: str
    prepare: Callable
    complex_results: str | None = None


class _Call:
    """One custom call seen by a routine's prepare function: type, attributes, shapes."""

    def __init__(self, info, target: str, routine: _Routine, letter: str | None, name: str):
        self.info, self.target, self.name = info, target, name
        if letter is None:  # a target for every type: take it from the first operand
            first = info.operand_types[0] if info.operand_types else None
            letter = _LETTER_OF.get(getattr(first, "dtype", None))
            if letter is None:
                raise self.error(f"operands must be f32, f64, c64 or c128, got {info.operand_types}")
        self.letter = letter
        self.dtype = _TYPE_LETTERS[letter]
        self.is_complex = letter in "cz"
        results = routine.complex_results if self.is_complex and routine.complex_results else routine.results
        self.operand_cores = self._check("operand", routine.operands, info.operand_types)
        self.result_cores = self._check("result", results, info.result_types)
        self.batch = info.operand_types[0].shape[:info.operand_types[0].rank - self.operand_cores[0]]
        for kind, types, cores in (("operand", info.operand_types, self.operand_cores),
                                   ("result", info.result_types, self.result_cores)):
            for index, (ttype, core) in enumerate(zip(types, cores)):
                if ttype.shape[:ttype.rank - core] != self.batch:
                    raise self.error(f"{kind} {index} {ttype} does not have the batch dimensions "
                                     f"{self.batch} of operand 0")
        self.operand_shapes = [t.shape[len(self.batch):] for t in info.operand_types]
        config = info.attributes.get("mhlo.backend_config")
        if not isinstance(config, dict):
            config = info.attributes.get("backend_config")
        self.attributes = config if isinstance(config, dict) else {}

    def _check(self, kind: str, signature: str, types) -> list:
        """Element types and ranks against a signature; the core (non-batch) rank of each buffer."""
        words = signature.split()
        if len(types) != len(words):
            raise self.error(f"expects {len(words)} {kind}s ({signature}), got {len(types)}")
        dtypes = {"T": self.dtype, "i": np.dtype(np.int32),
                  "R": _TYPE_LETTERS[_REAL[self.letter]], "C": _TYPE_LETTERS[_COMPLEX[self.letter]]}
        cores = []
        for index, (word, ttype) in enumerate(zip(words, types)):
            core = int(word[1:])
            if not hasattr(ttype, "dtype") or not ttype.is_static:
                raise self.unsupported(f"{kind} {index} must be a statically shaped tensor, got {ttype}")
            if ttype.dtype != dtypes[word[0]] or ttype.rank < core:
                raise self.error(f"{kind} {index} must be a tensor of {dtypes[word[0]]} with at least "
                                 f"{core} dimensions, got {ttype}")
            cores.append(core)
        return cores

    def attr(self, name: str):
        if name not in self.attributes:
            raise self.error(f"missing backend_config attribute {name!r}")
        return self.attributes[name]

    def char(self, name: str, allowed: str) -> str:
        """A flag that jaxlib passes as a character code (``uplo = 76 : ui8`` is ``'L'``)."""
        value = self.attr(name)
        flag = chr(value) if isinstance(value, int) else str(value)
        if flag not in allowed:
            raise self.error(f"attribute {name}={flag!r} is not one of {list(allowed)}")
        return flag

    def lapack(self, routine: str | None = None):
        """SciPy's wrapper of the routine for this call's type (``dgetrf`` ...)."""
        return getattr(scipy.linalg.lapack, self.letter + (routine or self.name))

    def error(self, reason: str):
        return self.info.error(f"{self.target}: {reason}")

    def unsupported(self, reason: str):
        return self.info.unsupported(f"{self.target}: {reason}")


def _work_size(work) -> int:
    """The optimal workspace size that a LAPACK workspace query reports."""
    return int(np.real(np.ravel(work)[0]))


def _square(call: _Call, operand: int = 0) -> int:
    rows, cols = call.operand_shapes[operand]
    if rows != cols:
        raise call.error(f"operand {operand} must hold square matrices, got {rows}x{cols}")
    return rows


# ------------------------------------------------------------------- routines


def _getrf(call):
    """LU with partial pivoting: ``x -> (lu, ipiv, info)``. Pivots are 1-based as
    LAPACK returns them (SciPy's wrapper makes them 0-based). ``info > 0``: U is
    exactly singular, the factorization is complete (JAX only rejects info < 0)."""
    getrf = call.lapack()

    def kernel(a):
        lu, pivots, info = getrf(a)
        return lu, pivots + 1, info

    return kernel


def _trsm(call):
    """Triangular solve (BLAS trsm, alpha = 1): ``(a, b) -> x`` with
    ``op(a) x = b`` (side ``L``) or ``x op(a) = b`` (side ``R``)."""
    side, uplo = call.char("side", "LR"), call.char("uplo", "LU")
    trans, diag = call.char("trans_x", "NTC"), call.char("diag", "NU")
    order, (rows, cols) = _square(call), call.operand_shapes[1]
    if order != (rows if side == "L" else cols):
        raise call.error(f"a is {order}x{order} but b is {rows}x{cols} (side {side!r})")
    trsm = getattr(scipy.linalg.blas, call.letter + "trsm")
    flags = dict(side=side == "R", lower=uplo == "L", trans_a="NTC".index(trans), diag=diag == "U")

    def kernel(a, b):
        return (b if b.size == 0 else trsm(1.0, a, b, **flags)),

    return kernel


def _geqrf(call):
    """Householder QR: ``x -> (r and reflectors, tau)``."""
    (rows, cols), = call.operand_shapes
    geqrf = call.lapack()
    lwork = _work_size(call.lapack("geqrf_lwork")(rows, cols)[0]) if rows and cols else 1

    def kernel(a):
        qr, tau, _, _ = geqrf(a, lwork=lwork)
        return qr, tau

    return kernel


def _geqp3(call):
    """QR with column pivoting: ``(x, jpvt) -> (r and reflectors, jpvt, tau)``,
    jpvt 1-based. JAX passes jpvt = 0 (every column free to move)."""
    (rows, cols), _ = call.operand_shapes
    geqp3 = call.lapack()
    lwork = _work_size(geqp3(np.zeros((rows, cols), call.dtype), lwork=-1)[3]) if rows and cols else 1

    def kernel(a, jpvt):
        if np.any(jpvt):
            raise NotImplementedError(f"{call.target}: pre-selected pivot columns (jpvt != 0) "
                                      "are not supported")
        qr, jpvt, tau, _, _ = geqp3(a, lwork=lwork)
        return qr, jpvt, tau

    return kernel


def _orgqr(call):
    """Q from Householder reflectors: ``(reflectors, tau) -> q`` (orgqr / ungqr)."""
    (rows, cols), (k,) = call.operand_shapes
    orgqr = call.lapack()
    lwork = _work_size(orgqr(np.zeros((rows, cols), call.dtype), np.zeros(k, call.dtype),
                             lwork=-1)[1]) if rows and cols else 1

    def kernel(a, tau):
        q, _, _ = orgqr(a, tau, lwork=lwork)
        return q,

    return kernel


def _ormqr(call):
    """Multiply by Q from Householder reflectors: ``(reflectors, tau, c) -> op(Q) c``
    (``left``) or ``c op(Q)``; op is the (conjugate) transpose when ``transpose``."""
    left, transpose = bool(call.attr("left")), bool(call.attr("transpose"))
    (k,) = call.operand_shapes[1]
    side, trans = "L" if left else "R", ("C" if call.is_complex else "T") if transpose else "N"
    ormqr = call.lapack()
    rows, cols = call.operand_shapes[2]
    reflectors = (rows if left else cols, k)
    lwork = _work_size(ormqr(side, trans, np.zeros(reflectors, call.dtype), np.zeros(k, call.dtype),
                             np.zeros((rows, cols), call.dtype), -1)[1]) if rows and cols else 1

    def kernel(a, tau, c):
        if c.size == 0:
            return c,
        cq, _, _ = ormqr(side, trans, a[:, :k], tau, c, lwork)
        return cq,

    return kernel


def _potrf(call):
    """Cholesky: ``x -> (factor, info)``. The other triangle keeps the input (no
    cleaning, as jaxlib); ``info > 0``: not positive definite."""
    lower = call.char("uplo", "LU") == "L"
    _square(call)
    potrf = call.lapack()

    def kernel(a):
        return potrf(a, lower=lower, clean=False)

    return kernel


def _svd(call):
    """SVD (gesdd, divide and conquer; gesvd, QR iteration): ``x -> (x overwritten,
    s, u, vt, info)``. Modes: ``A`` full u/vt, ``S`` reduced, ``N`` none (u and vt
    are not written)."""
    mode = call.char("mode", "ASNO")
    if mode == "O":
        raise call.unsupported("mode 'O' (overwrite x with u or vt) is not implemented "
                               "(jaxlib does not implement it either)")
    (rows, cols), = call.operand_shapes
    compute_uv, full = mode != "N", mode == "A"
    svd = call.lapack()
    lwork = (_work_size(call.lapack(call.name + "_lwork")(rows, cols, compute_uv, full)[0])
             if rows and cols else 1)

    def kernel(a):
        a = np.array(a, order="F")  # LAPACK overwrites it: that is the first result
        u, s, vt, info = svd(a, compute_uv=compute_uv, full_matrices=full, lwork=lwork, overwrite_a=True)
        return (a, s, u, vt, info) if compute_uv else (a, s, None, None, info)

    return kernel


def _eigh(call):
    """Hermitian eigendecomposition (syevd / heevd): ``x -> (vectors, w, info)``;
    mode ``N`` computes eigenvalues only (x is then overwritten, not vectors)."""
    lower, vectors = call.char("uplo", "LU") == "L", call.char("mode", "VN") == "V"
    _square(call)
    eigh = call.lapack()

    def kernel(a):
        w, v, info = eigh(a, compute_v=vectors, lower=lower)
        return v, w, info

    return kernel


def _unpack_eigenvectors(wi, packed):
    """LAPACK's real eigenvectors as complex ones: a conjugate pair (wi != 0) is
    stored as real part in column j, imaginary part in column j + 1."""
    vectors = packed.astype(np.result_type(packed.dtype, np.complex64))
    j, n = 0, len(wi)
    while j < n:
        if wi[j] == 0 or np.isnan(wi[j]) or j + 1 == n:
            j += 1
        else:
            vectors[:, j] = packed[:, j] + 1j * packed[:, j + 1]
            vectors[:, j + 1] = np.conj(vectors[:, j])
            j += 2
    return vectors


def _geev(call):
    """General eigendecomposition: real ``x -> (wr, wi, vl, vr, info)`` with the
    vectors unpacked to complex (only when info == 0), complex ``x -> (w, vl, vr,
    info)``. Vectors are computed when ``compute_left`` / ``compute_right`` is
    ``V``. Like jaxlib, a matrix with a non-finite entry is not factored: info = -4."""
    left = call.char("compute_left", "VN") == "V"
    right = call.char("compute_right", "VN") == "V"
    n = _square(call)
    geev = call.lapack()
    lwork = _work_size(call.lapack("geev_lwork")(n, left, right)[0]) if n else 1
    untouched = (None,) * (3 if call.is_complex else 4)

    def kernel(a):
        if not np.isfinite(a).all():
            return (*untouched, -4)
        if call.is_complex:
            w, vl, vr, info = geev(a, compute_vl=left, compute_vr=right, lwork=lwork)
            return w, vl if left else None, vr if right else None, info
        wr, wi, vl, vr, info = geev(a, compute_vl=left, compute_vr=right, lwork=lwork)
        unpack = info == 0
        return (wr, wi, _unpack_eigenvectors(wi, vl) if left and unpack else None,
                _unpack_eigenvectors(wi, vr) if right and unpack else None, info)

    return kernel


def _gees(call):
    """Schur decomposition: real ``x -> (t, vs, wr, wi, sdim, info)``, complex
    ``x -> (t, vs, w, sdim, info)``; Schur vectors when ``mode`` is ``V``."""
    vectors = call.char("mode", "VN") == "V"
    if call.char("sort", "NS") == "S":
        raise call.unsupported("sorted Schur forms (sort='S') are not implemented "
                               "(jaxlib does not implement them either)")
    n = _square(call)
    gees = call.lapack()

    def no_selection(*_):
        return False

    lwork = (_work_size(gees(no_selection, np.zeros((n, n), call.dtype), compute_v=vectors,
                             lwork=-1)[-2]) if n else 1)

    def kernel(a):
        *values, _, info = gees(no_selection, a, compute_v=vectors, lwork=lwork)
        t, sdim, *eigenvalues, vs = values
        return (t, vs if vectors else None, *eigenvalues, sdim, info)

    return kernel


def _gehrd(call):
    """Hessenberg reduction: ``x -> (h and reflectors, tau, info)``; ``low`` /
    ``high`` are LAPACK's 1-based ilo / ihi."""
    low, high = int(call.attr("low")), int(call.attr("high"))
    n = _square(call)
    gehrd = call.lapack()
    lwork = _work_size(call.lapack("gehrd_lwork")(n, low - 1, high - 1)[0]) if n else 1

    def kernel(a):
        return gehrd(a, lo=low - 1, hi=high - 1, lwork=lwork)

    return kernel


def _sytrd(call):
    """Tridiagonal reduction (sytrd / hetrd): ``x -> (reflectors, d, e, tau, info)``."""
    lower = call.char("uplo", "LU") == "L"
    n = _square(call)
    sytrd = call.lapack()
    # jaxlib sizes the workspace with a query for uplo 'L', whatever uplo is.
    lwork = _work_size(call.lapack(call.name + "_lwork")(n, lower=True)[0]) if n else 1

    def kernel(a):
        return sytrd(a, lower=lower, lwork=lwork)

    return kernel


def _gtsv(call):
    """Tridiagonal solve: ``(dl, d, du, b) -> (dl, d, du overwritten, x, info)``.
    ``dl[0]`` and ``du[-1]`` are outside the matrix: jaxlib hands LAPACK ``dl + 1``
    and ``du``, so they come back unchanged."""
    gtsv = call.lapack()

    def kernel(dl, d, du, b):
        n = len(d)
        if n <= 1:  # no elimination: SciPy's wrapper cannot take empty sub-diagonals
            singular = n == 1 and d[0] == 0
            x = b if n == 0 or singular else b / d[0]
            return dl, d, du, x, int(singular)
        dl2, d, du_out, x, info = gtsv(dl[1:], d, du[:-1], b)
        return np.concatenate([dl[:1], dl2]), d, np.concatenate([du_out, du[-1:]]), x, info

    return kernel


def _tridiagonal_solve_perturbed(call):
    """``(dl, d, du, b) -> x``: jaxlib's tridiagonal solve that perturbs tiny pivots
    instead of failing (inverse iteration in ``eigh_tridiagonal``)."""
    return lambda dl, d, du, b: (_solve_perturbed(dl, d, du, b),)


_ROUTINES = {
    ("getrf",): _Routine("T2", "T2 i1 i0", _getrf),
    ("trsm",): _Routine("T2 T2", "T2", _trsm),
    ("geqrf",): _Routine("T2", "T2 T1", _geqrf),
    ("geqp3",): _Routine("T2 i1", "T2 i1 T1", _geqp3),
    ("orgqr", "ungqr"): _Routine("T2 T1", "T2", _orgqr),
    ("ormqr", "unmqr"): _Routine("T2 T1 T2", "T2", _ormqr),
    ("potrf",): _Routine("T2", "T2 i0", _potrf),
    ("gesdd",): _Routine("T2", "T2 R1 T2 T2 i0", _svd),
    ("gesvd",): _Routine("T2", "T2 R1 T2 T2 i0", _svd),
    ("syevd", "heevd"): _Routine("T2", "T2 R1 i0", _eigh),
    ("geev",): _Routine("T2", "R1 R1 C2 C2 i0", _geev, complex_results="T1 T2 T2 i0"),
    ("gees",): _Routine("T2", "T2 T2 R1 R1 i0 i0", _gees, complex_results="T2 T2 T1 i0 i0"),
    ("gehrd",): _Routine("T2", "T2 T1 i0", _gehrd),
    ("sytrd", "hetrd"): _Routine("T2", "T2 R1 R1 T1 i0", _sytrd),
    ("gtsv",): _Routine("T1 T1 T1 T2", "T1 T1 T1 T2 i0", _gtsv),
}


def _target_table() -> dict:
    """Target name -> (routine, type letter or None for every type, LAPACK routine name)."""
    targets = {"tridiagonal_solve_perturbed_ffi":
               (_Routine("T1 T1 T1 T2", "T2", _tridiagonal_solve_perturbed), None, "")}
    for names, routine in _ROUTINES.items():
        for letter in _TYPE_LETTERS:
            name = names[-1] if letter in "cz" else names[0]
            targets[f"lapack_{letter}{name}_ffi"] = (routine, letter, name)
    return targets


_TARGETS = _target_table()


@custom_call(*_TARGETS, variadic=True)
def lapack_call(info):
    """Every target of ``_TARGETS``: check the types, prepare the kernel, loop it over the batch."""
    target = info.attr("call_target_name")
    routine, letter, name = _TARGETS[target]
    call = _Call(info, target, routine, letter, name)
    kernel = routine.prepare(call)
    into_kernel = _relayouts(call, "operand", info.operand_types, call.operand_cores, to_kernel=True)
    from_kernel = _relayouts(call, "result", info.result_types, call.result_cores, to_kernel=False)
    result_types, batch = info.result_types, call.batch
    result_cores = [t.shape[len(batch):] for t in result_types]

    def run(*operands):
        operands = [fix(x) if fix else x for fix, x in zip(into_kernel, operands)]
        results = [np.zeros(t.shape, t.dtype) for t in result_types]
        for index in np.ndindex(*batch):
            values = kernel(*[x[index] for x in operands])
            for number, (result, core, value) in enumerate(zip(results, result_cores, values)):
                if value is None:
                    continue
                if np.shape(value) != core:
                    raise ValueError(f"{target}: result {number} holds {core} per batch element, "
                                     f"LAPACK returns {np.shape(value)}")
                result[index] = value
        return [fix(x) if fix else x for fix, x in zip(from_kernel, results)]

    return run


# -------------------------------------------------------------------- layouts


def _kernel_layout(rank: int, core: int) -> tuple:
    """The minor-to-major layout a kernel assumes: matrices column-major, batch row-major."""
    if core == 2:
        return (rank - 2, rank - 1, *range(rank - 3, -1, -1))
    return tuple(range(rank - 1, -1, -1))


def _reinterpret(array, written: tuple, read: tuple):
    """The values read with layout ``read`` from the bytes of ``array`` stored with ``written``."""
    stored = np.transpose(array, written[::-1]).reshape(-1)
    order = read[::-1]
    return stored.reshape([array.shape[d] for d in order]).transpose(np.argsort(order))


def _relayouts(call: _Call, kind: str, types, cores, *, to_kernel: bool) -> list:
    """Per buffer: None when the declared layout is the kernel's, else the reinterpretation.

    A module without layouts gets XLA's default (row-major) layout for every buffer.
    """
    declared = call.info.attributes.get(f"{kind}_layouts")
    if declared is not None and len(declared) != len(types):
        raise call.error(f"{len(declared)} {kind}_layouts for {len(types)} {kind}s")
    fixes = []
    for index, (ttype, core) in enumerate(zip(types, cores)):
        layout = (tuple(int(d) for d in declared[index]) if declared is not None
                  else tuple(range(ttype.rank - 1, -1, -1)))
        if sorted(layout) != list(range(ttype.rank)):
            raise call.error(f"{kind} {index}: layout {list(layout)} is not a permutation of the "
                             f"dimensions of {ttype}")
        kernel = _kernel_layout(ttype.rank, core)
        if layout == kernel:
            fixes.append(None)
        elif to_kernel:
            fixes.append(lambda x, layout=layout, kernel=kernel: _reinterpret(x, layout, kernel))
        else:
            fixes.append(lambda x, layout=layout, kernel=kernel: _reinterpret(x, kernel, layout))
    return fixes


# ------------------------------------------- jaxlib's perturbed tridiagonal solve


def _perturb_pivot(perturb, pivot, row):
    """Grow a tiny pivot until neither ``row / pivot`` nor ``1 / pivot`` overflows
    (jaxlib's MaybePerturbPivot, from LAPACK's xLAGTS). Returns (pivot, row)."""
    real = np.abs(pivot).dtype.type
    finfo = np.finfo(real)
    one, tiny, small = real(1), real(finfo.tiny), real(1) / real(finfo.max)
    safemin = tiny if small < tiny else small * (one + real(finfo.eps))
    bignum = one / safemin
    abs_pivot = np.abs(pivot)
    if not abs_pivot < one:
        return pivot, row
    perturb = np.copysign(max(np.abs(perturb), safemin), np.real(pivot))
    max_factor = np.abs(row).max() if row.size else real(0)
    while abs_pivot < one:
        if abs_pivot < safemin:
            if abs_pivot == 0 or max_factor * safemin > abs_pivot:
                pivot, perturb = pivot + perturb, perturb * 2
            else:
                return pivot * bignum, row * bignum
        elif max_factor > abs_pivot * bignum:
            pivot, perturb = pivot + perturb, perturb * 2
        else:
            break
        abs_pivot = np.abs(pivot)
    return pivot, row


def _solve_perturbed(dl, d, du, b):
    """Solve the tridiagonal system (dl, d, du) x = b by Gaussian elimination with
    partial pivoting, perturbing tiny pivots by multiples of eps * max|U| (jaxlib's
    SolveWithGaussianEliminationWithPivotingAndPerturbSingular; LAPACK's xLAGTF +
    xLAGTS). ``dl[0]`` and ``du[-1]`` are outside the matrix."""
    n = len(d)
    x = np.array(b, copy=True)
    if n == 0:
        return x
    eps = np.finfo(np.abs(d[0]).dtype).eps
    if n == 1:
        pivot, row = _perturb_pivot(eps * np.abs(d[0]), d[0], b[0])
        x[0] = row / pivot
        return x
    u = np.zeros((n, 3), d.dtype)  # U's diagonal and two superdiagonals
    u[0, 0], u[0, 1] = d[0], du[0]
    max_abs_u = max(np.abs(u[0, 0]), np.abs(u[0, 1]))
    scale1 = np.abs(u[0, 0]) + np.abs(u[0, 1])
    for k in range(n - 1):
        u[k + 1, 0] = d[k + 1]
        scale2 = np.abs(dl[k + 1]) + np.abs(u[k + 1, 0])
        if k < n - 2:
            scale2 += np.abs(du[k + 1])
        if dl[k + 1] == 0:
            scale1 = scale2
            u[k + 1, 1], u[k, 2] = du[k + 1], 0
            x[k + 1] = b[k + 1]
        else:
            piv1 = 0 if u[k, 0] == 0 else np.abs(u[k, 0]) / scale1
            piv2 = np.abs(dl[k + 1]) / scale2
            if piv2 <= piv1:  # no row interchange
                scale1 = scale2
                factor = dl[k + 1] / u[k, 0]
                u[k + 1, 0] -= factor * u[k, 1]
                u[k + 1, 1], u[k, 2] = du[k + 1], 0
                x[k + 1] = b[k + 1] - factor * x[k]
            else:  # interchange rows k and k + 1
                factor = u[k, 0] / dl[k + 1]
                u[k, 0], u[k + 1, 0], u[k, 1] = dl[k + 1], u[k, 1] - factor * d[k + 1], d[k + 1]
                if k < n - 2:
                    u[k, 2], u[k + 1, 1] = du[k + 1], -factor * du[k + 1]
                x[k + 1] = x[k] - factor * b[k + 1]
                x[k] = b[k + 1]
                scale1 = np.abs(u[k + 1, 0]) + np.abs(u[k + 1, 1])
        if k < n - 2:
            max_abs_u = max(max_abs_u, *np.abs(u[k]))
    max_abs_u = max(max_abs_u, np.abs(u[n - 1, 0]))
    perturb = eps * max_abs_u
    pivot, row = _perturb_pivot(perturb, u[n - 1, 0], x[n - 1])
    x[n - 1] = row * (1 / pivot)
    for k in range(n - 2, -1, -1):
        row = x[k] - u[k, 1] * x[k + 1]
        if k < n - 2:
            row = row - u[k, 2] * x[k + 2]
        pivot, row = _perturb_pivot(np.copysign(perturb, np.real(u[k, 0])), u[k, 0], row)
        x[k] = row * (1 / pivot)
    return x


# -------------------------------------------------------------------- failures


# What ``info > 0`` means, per LAPACK routine (LAPACK's documentation of each; ``{i}`` is info).
_FAILURES = {
    "potrf": "the matrix is not positive definite: its leading minor of order {i} is not "
             "(first failing column {i})",
    "getrf": "the matrix is singular: U({i},{i}) is exactly zero (zero pivot in column {i})",
    "gtsv": "the matrix is singular: U({i},{i}) is exactly zero (zero pivot in column {i})",
    "syevd": "the eigensolver did not converge (info {i})",
    "heevd": "the eigensolver did not converge (info {i})",
    "gesdd": "the SVD did not converge (info {i})",
    "gesvd": "the SVD did not converge: {i} superdiagonals did not converge to zero",
    "geev": "the QR algorithm did not compute all eigenvalues (info {i})",
    "gees": "the QR algorithm did not compute all eigenvalues (info {i})",
}


def failure(info, operands: list, results: list) -> str | None:
    """How a factorization or a solve failed, in words (None when it did not, or the op is
    none of these). JAX's CPU lowering calls LAPACK (custom calls): ``info > 0`` as LAPACK
    documents it per routine (``potrf``: the leading minor of order info is not positive
    definite; ``getrf``: U(info, info) is exactly zero), ``info < 0``: an argument LAPACK
    rejected; a triangular solve (``trsm``, no info) with a non-unit diagonal fails where
    that diagonal holds an exact zero and its result is not finite. Other platforms' lowerings
    use the spec's ``cholesky`` and ``triangular_solve``, whose results on such a matrix the
    spec leaves implementation-defined (spec: cholesky, triangular_solve): they are named
    as LAPACK names them. Batched calls name the first failing batch element. 1-based
    indices, as LAPACK's."""
    if info.name == "stablehlo.cholesky":
        return _cholesky_failure(np.asarray(operands[0]), np.asarray(results[0]), lower=bool(info.attr("lower", False)))
    if info.name == "stablehlo.triangular_solve":
        return _singular_triangle(np.asarray(operands[0]), results[0], unit_diagonal=bool(info.attr("unit_diagonal")))
    target = info.attributes.get("call_target_name")
    if target not in _TARGETS or not results:
        return None
    routine, letter, name = _TARGETS[target]
    if name == "trsm":
        return _singular_triangle(np.asarray(operands[0]), results[0],
                                  unit_diagonal=_Call(info, target, routine, letter, name).char("diag", "NU") == "U")
    signature = routine.complex_results if letter in "cz" and routine.complex_results else routine.results
    if name not in _FAILURES or signature.split()[-1] != "i0":
        return None
    codes = np.asarray(results[-1])
    failing = np.argwhere(codes != 0)
    if not len(failing):
        return None
    where = tuple(int(i) for i in failing[0])
    code = int(codes[where])
    text = _FAILURES[name].format(i=code) if code > 0 else f"LAPACK rejected its argument {-code} (info {code})"
    return text + (f", in batch element {list(where)} ({len(failing)} of {codes.size} failed)" if codes.ndim else "")


def _singular_triangle(a: np.ndarray, result, unit_diagonal: bool) -> str | None:
    """A triangular solve with an exact zero on a non-unit diagonal whose result is not finite."""
    if unit_diagonal or np.isfinite(result).all():
        return None
    diagonals = np.diagonal(a, axis1=-2, axis2=-1)
    zeros = np.argwhere(diagonals == 0)
    if not len(zeros):
        return None
    *batch, row = (int(i) for i in zeros[0])
    text = f"the triangular matrix is singular: its diagonal element ({row + 1},{row + 1}) is exactly zero"
    return text + (f", in batch element {batch}" if batch else "")


def _cholesky_failure(a: np.ndarray, factor: np.ndarray, lower: bool) -> str | None:
    """The first batch matrix whose factor is not finite while the matrix is, and the order of
    its first leading minor that is not positive definite (``potrf``'s info): the
    factorization of the Hermitian matrix the op reads (its lower or upper triangle)
    carried out column by column until a pivot is not positive."""
    if a.size == 0 or np.isfinite(factor).all():
        return None
    matrices, factors = a.reshape(-1, *a.shape[-2:]), factor.reshape(-1, *factor.shape[-2:])
    failed = [(index, order) for index in range(len(matrices))
              if not np.isfinite(factors[index]).all() and np.isfinite(matrices[index]).all()
              for order in [_first_failing_minor(matrices[index], lower)] if order]
    if not failed:
        return None
    index, order = failed[0]
    text = _FAILURES["potrf"].format(i=order)
    if a.ndim == 2:
        return text
    batch = [int(i) for i in np.unravel_index(index, a.shape[:-2])]
    return text + f", in batch element {batch} ({len(failed)} of {len(matrices)} failed)"


def _first_failing_minor(matrix: np.ndarray, lower: bool) -> int | None:
    """1-based order of the first leading minor of the Hermitian matrix read from ``matrix``'s
    lower (upper) triangle that is not positive definite; None if all are."""
    triangle = np.tril(matrix) if lower else np.triu(matrix).conj().T
    hermitian = triangle + np.tril(triangle, -1).conj().T
    n = hermitian.shape[0]
    factor = np.zeros_like(hermitian, dtype=np.result_type(hermitian.dtype, np.float64))
    for j in range(n):
        pivot = np.real(hermitian[j, j] - np.vdot(factor[j, :j], factor[j, :j]))
        if not pivot > 0:
            return j + 1
        factor[j, j] = np.sqrt(pivot)
        factor[j + 1:, j] = (hermitian[j + 1:, j] - factor[j + 1:, :j] @ factor[j, :j].conj()) / factor[j, j]
    return None
