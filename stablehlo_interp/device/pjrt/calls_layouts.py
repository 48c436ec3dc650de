"""The Layouts extension (``pjrt_c_api_layouts_extension.h``): the memory layouts of
buffers and of a compiled program's parameters and outputs.

Every array the device holds is dense and row-major (major-to-minor = the
dimensions in order, no tiles; 4-bit and 2-bit types one element per byte, where
XLA's CPU packs them), so a layout depends on the rank alone. jaxlib
reads a layout as its serialized form, XLA's layout text (``"{1,0}"`` for a
matrix, ``"{}"`` for a scalar), which it parses back (``PjRtLayout::Deserialize``).

Without this extension jaxlib learns a program's layouts by fetching and parsing
``PJRT_Executable_OptimizedProgram`` at every compile; with it, the program text
is asked for only by ``compiled.as_text()`` and its kin.

A ``PJRT_Layouts_MemoryLayout`` is one shared object per rank, never freed (there
are as many as distinct ranks): its Destroy does nothing, and the bytes
Serialize hands out live as long as it (their deleter does nothing either).
Its handle points at a header that the native Serialize reads (``calls.header_handle``).
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_void_p

from . import abi
from .calls import NO_OP_DELETER, Calls, header_handle, lookup, set_header_word

CALLS = Calls()


class MemoryLayout:
    """A dense row-major layout of arrays of one rank; ``text`` is XLA's layout text."""

    __slots__ = ("text",)

    def __init__(self, rank: int):
        self.text = ctypes.create_string_buffer(
            ("{" + ",".join(map(str, range(rank - 1, -1, -1))) + "}").encode())


# A layout handle's header: what Serialize hands out (the text, its size, the layout
# itself as the serialized layout, and the deleter that does nothing).
HEADER_TEXT, HEADER_TEXT_SIZE, HEADER_SELF, HEADER_DELETER = range(4)
_LAYOUT_HANDLES: dict[int, int] = {}   # rank -> handle of its MemoryLayout


def layout_handle(rank: int) -> int:
    """The handle of the layout of arrays of ``rank`` dimensions."""
    address = _LAYOUT_HANDLES.get(rank)
    if address is None:
        layout = MemoryLayout(rank)
        address = _LAYOUT_HANDLES[rank] = header_handle(
            layout, (addressof(layout.text), len(layout.text) - 1, 0, NO_OP_DELETER))
        set_header_word(address, HEADER_SELF, address)
    return address


def _layout_array(executable, attribute: str, types) -> tuple[int, int]:
    """(address, count) of an array of the layout handles of ``types``, stored on the executable."""
    if not hasattr(executable, attribute):
        ranks = [len(getattr(t, "shape", ())) for t in types]   # a token has no shape: rank 0
        setattr(executable, attribute, (c_void_p * len(ranks))(*map(layout_handle, ranks)))
    return addressof(getattr(executable, attribute)), len(types)


CALLS.constant_getter("Layouts_MemoryLayout_Destroy", abi.PJRT_Layouts_MemoryLayout_Destroy_Args)   # immortal
CALLS.header_getter("Layouts_MemoryLayout_Serialize", abi.PJRT_Layouts_MemoryLayout_Serialize_Args, "layout",
                    serialized_bytes=HEADER_TEXT, serialized_bytes_size=HEADER_TEXT_SIZE,
                    serialized_layout=HEADER_SELF, serialized_layout_deleter=HEADER_DELETER)


@CALLS.implements("Layouts_PJRT_Client_GetDefaultLayout", abi.PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args)
def client_get_default_layout(args):
    lookup(args.client, "client")
    args.layout = layout_handle(args.num_dims)


@CALLS.implements("Layouts_PJRT_Topology_GetDefaultLayout", abi.PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args)
def topology_get_default_layout(args):
    lookup(args.topology_description, "topology description")
    args.layout = layout_handle(args.num_dims)


@CALLS.implements("Layouts_PJRT_Executable_GetOutputLayouts", abi.PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args)
def executable_get_output_layouts(args):
    executable = lookup(args.executable, "executable").executable
    args.layouts, args.num_outputs = _layout_array(executable, "c_output_layouts", executable.output_types)


@CALLS.implements("Layouts_PJRT_Executable_GetParameterLayouts",
                  abi.PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args)
def executable_get_parameter_layouts(args):
    executable = lookup(args.executable, "executable").executable
    args.layouts, args.num_parameters = _layout_array(executable, "c_parameter_layouts",
                                                      executable.function.arg_types)
