"""The child process of first_parse.py: parses the bytes it is sent, reads every
name in the module, and replies with the module as bytecode it wrote itself (see
:mod:`~stablehlo_interp.ir.first_parse`)."""

from __future__ import annotations

import io

from jaxlib.mlir import ir

from ..errors import ModuleError
from .child_process import serve
from .decode import decode_location, decode_op_attributes
from .sources import parse_bytes


def _read_everything(module) -> None:
    """Read each string of ``module`` that loading it reads: the op and attribute
    names, the attributes and the locations of ops and block arguments."""
    def visit(operation):
        _ = operation.name   # read: the bindings raise on a name that is not UTF-8
        decode_location(operation.location)
        try:
            decode_op_attributes(operation)
        except RuntimeError:   # a name that is not UTF-8: reported by _rewritten
            raise
        except Exception:  # noqa: BLE001 - an attribute the load rejects clearly: not this check's concern
            pass
        for region in operation.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    decode_location(argument.location)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _rewritten(data: bytes) -> bytes:
    """The module of ``data`` as bytecode written here, once every name in it was read."""
    try:
        module = parse_bytes(data)
        _read_everything(module)
        rewritten = io.BytesIO()
        module.operation.write_bytecode(rewritten)
        return rewritten.getvalue()
    except RuntimeError as error:  # nanobind's "conversion error": a name that is not UTF-8
        cause = str(error).strip().splitlines()[-1]   # the walk wraps it with the callback's traceback
        raise ModuleError(f"cannot load the module: a name in it is not valid UTF-8 ({cause})") from None


def seconds_to_read(data: bytes) -> float:
    """The time a first parse of ``data`` gets: MLIR reads tens of megabytes a second,
    and damaged bytecode can make its reader loop for ever."""
    return 10 + len(data) / 1e6


if __name__ == "__main__":
    serve(_rewritten, reported=(ModuleError,), fork_each=seconds_to_read)
