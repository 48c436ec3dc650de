"""Fourier transforms (spec: fft).

``fft_length`` names the sizes of the trailing ``L`` (1 to 3) dimensions that
are transformed. FFT/IFFT are complex-to-complex (IFFT scaled by 1/N), RFFT
keeps the ``n/2 + 1`` non-redundant outputs of the last dimension and IRFFT
inverts it (the imaginary parts of the bins that must be real are ignored).
Every transform is computed in double precision by NumPy's pocketfft and
rounded once to the result type, so complex64 results are within an ULP or so
of exact, whatever the transform size.
"""

from __future__ import annotations

import numpy as np

from ..engine.registry import op

_TRANSFORMS = {
    "FFT": lambda x, lengths, axes: np.fft.fftn(x, lengths, axes),
    "IFFT": lambda x, lengths, axes: np.fft.ifftn(x, lengths, axes),
    "RFFT": lambda x, lengths, axes: np.fft.rfftn(x, lengths, axes),
    "IRFFT": lambda x, lengths, axes: np.fft.irfftn(x, lengths, axes),
}


@op("stablehlo.fft")
def fft(info):
    fft_type = info.attr("fft_type")
    lengths = tuple(int(n) for n in info.attr("fft_length"))
    if not 1 <= len(lengths) <= 3:
        raise info.error(f"fft_length must have 1 to 3 sizes, got {list(lengths)}")
    transform = _TRANSFORMS[fft_type]
    axes = tuple(range(-len(lengths), 0))
    wide = np.float64 if fft_type == "RFFT" else np.complex128
    result_dtype = info.result_type.dtype

    def run(operand):
        operand = np.asarray(operand)
        if operand.size == 0 or 0 in lengths:
            shape = operand.shape[:-len(lengths)] + _result_trailing_shape(fft_type, operand.shape, lengths)
            return np.zeros(shape, result_dtype)
        return transform(operand.astype(wide), lengths, axes).astype(result_dtype)

    return run


def _result_trailing_shape(fft_type, shape, lengths):
    """The trailing dims of the result (spec: fft, C5) when there is nothing to transform."""
    trailing = tuple(shape[-len(lengths):])
    if fft_type == "RFFT":
        return trailing[:-1] + ((lengths[-1] // 2 + 1) if lengths[-1] else 0,)
    if fft_type == "IRFFT":
        return trailing[:-1] + (lengths[-1],)
    return trailing
