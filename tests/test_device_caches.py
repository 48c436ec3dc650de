"""The device's memos stay bounded, and starting one again frees nothing a live handle uses."""

from __future__ import annotations

import ctypes
import gc

import numpy as np

from stablehlo_interp.device import runtime
from stablehlo_interp.device.pjrt import calls, calls_buffers, calls_platform
from stablehlo_interp.device.pjrt.calls_buffers import HEADER_DIMS, HEADER_NUM_DIMS, buffer_handle


def _dimensions(handle: int) -> tuple:
    """The shape a buffer's PJRT header gives (what Buffer_Dimensions hands jaxlib)."""
    count = calls.header_word(handle, HEADER_NUM_DIMS)
    return tuple((ctypes.c_int64 * count).from_address(calls.header_word(handle, HEADER_DIMS))) if count else ()


def test_buffer_headers_keep_their_dimensions_when_the_memos_start_again(monkeypatch):
    monkeypatch.setattr(calls_buffers, "MEMO_LIMIT", 3)
    device = calls_platform.ClientView(runtime.Client()).client.devices[0]
    shapes = [(n, n + 1) for n in range(1, 11)] + [(7,), ()]
    handles = [buffer_handle(runtime.Buffer(device, np.zeros(shape, np.float32))) for shape in shapes]
    try:
        assert len(calls_buffers._headers) <= 3 and len(calls_buffers._dimension_arrays) <= 3
        gc.collect()
        scribbles = [(ctypes.c_int64 * 4)(-1, -1, -1, -1) for _ in range(1000)]   # reuse freed memory, if any
        assert [_dimensions(handle) for handle in handles] == shapes
        del scribbles
    finally:
        for handle in handles:
            calls.release_header(handle)


def test_row_major_strides_memo_stays_bounded(monkeypatch):
    monkeypatch.setattr(calls_buffers, "MEMO_LIMIT", 3)
    for n in range(1, 20):
        array = np.arange(n * 2, dtype=np.int32).reshape(n, 2)
        copy = calls_buffers.array_from_host(array.ctypes.data, array.dtype, array.shape, None)
        np.testing.assert_array_equal(copy, array)
    assert len(calls_buffers._row_major_strides) <= 3
