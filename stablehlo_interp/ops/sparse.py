"""The sparse custom call of JAX's CPU lowering: ``cpu_csr_sparse_dense_ffi``.

``jax.experimental.sparse`` lowers the product of a CSR matrix with a dense
vector or matrix (``bcsr_dot_general`` without batch dimensions,
``csr_matvec``/``csr_matmat``) on the CPU to this typed-FFI call into jaxlib's
kernel (``jaxlib/cpu/sparse_kernels.cc``), an Eigen row-major sparse matrix
times a dense one. Operands: the CSR matrix's ``data``, its row pointers
(``indptr``, Eigen's outer indices), its column indices (inner indices), and
the dense right-hand side, rank 1 or 2; the result has the matrix's rows (the
result's first dimension) and the right-hand side's columns. Data, right-hand
side and result share one element type (s32, s64, f32, f64, c64, c128); both
index arrays are s32 or s64, the same.

Each row of the result is a sum from zero over the row's stored entries, in
their stored order (Eigen's sparse-dense product): ``data[k] *
rhs[indices[k]]`` for ``k`` from ``indptr[r]`` to ``indptr[r + 1]``, products
and sums in the element type (integers wrap). Entries of ``data`` beyond the
last row pointer are not read. Row pointers or column indices out of range are
undefined behaviour in the kernel; here they are an error naming the op.
"""

from __future__ import annotations

import numpy as np

from ..engine.registry import custom_call

TARGET = "cpu_csr_sparse_dense_ffi"
_ELEMENT_TYPES = ("i32", "i64", "f32", "f64", "complex<f32>", "complex<f64>")
_INDEX_TYPES = ("i32", "i64")


@custom_call(TARGET)
def csr_sparse_dense(info):
    """The kernel's checks at load time (types), then the product (module docstring)."""
    data_type, indptr_type, indices_type, rhs_type = info.operand_types
    result_type = info.result_type
    if not data_type.element_type == rhs_type.element_type == result_type.element_type:
        raise info.error(f"{TARGET}: element types differ (data {data_type.element_type}, "
                         f"rhs {rhs_type.element_type}, result {result_type.element_type})")
    if data_type.element_type not in _ELEMENT_TYPES:
        raise info.unsupported(f"{TARGET}: element type {data_type.element_type}")
    if indptr_type.element_type != indices_type.element_type or indptr_type.element_type not in _INDEX_TYPES:
        raise info.error(f"{TARGET}: index types {indptr_type.element_type} and {indices_type.element_type} "
                         f"(the kernel takes both i32 or both i64)")
    if rhs_type.rank not in (1, 2) or result_type.rank != rhs_type.rank \
            or result_type.shape[1:] != rhs_type.shape[1:]:
        raise info.error(f"{TARGET}: result {result_type.shape} for a right-hand side {rhs_type.shape}")
    rows, columns = result_type.shape[0], rhs_type.shape[0]
    dtype = result_type.dtype

    def run(data, indptr, indices, rhs):
        indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices, np.int64)
        if indptr.size < rows + 1:
            raise info.error(f"{TARGET}: {indptr.size} row pointers for {rows} rows")
        starts, stops = indptr[:rows], indptr[1:rows + 1]
        if rows and (starts[0] < 0 or np.any(stops < starts) or stops[-1] > min(data.size, indices.size)):
            raise info.error(f"{TARGET}: row pointers {indptr.tolist()} out of range for "
                             f"{min(data.size, indices.size)} stored entries")
        used = indices[:stops[-1]] if rows else indices[:0]
        if np.any((used < 0) | (used >= columns)):
            raise info.error(f"{TARGET}: a column index out of range for {columns} columns")
        matrix = np.asarray(rhs).reshape(columns, -1)
        result = np.zeros((rows, matrix.shape[1]), dtype)
        lengths = stops - starts
        for position in range(int(lengths.max(initial=0))):   # the left fold of every row at once
            live = np.flatnonzero(lengths > position)
            entries = starts[live] + position
            result[live] += data[entries, None] * matrix[indices[entries]]
        return result.reshape(result_type.shape)

    return run
