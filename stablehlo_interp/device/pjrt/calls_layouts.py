"""The Layouts extension (``pjrt_c_api_layouts_extension.h``): the memory layouts of
buffers and of a compiled program's parameters and outputs.

A layout is dense (no tiles; 4-bit and 2-bit types one element per byte, where
XLA's CPU packs them): its minor_to_major alone (device/layouts.py). A buffer has
its own (row-major unless a program or a transfer gave it another), a program's
parameters and outputs have those the program asks for. jaxlib reads a layout
as its serialized form, XLA's layout text (``"{1,0}"`` for a row-major matrix,
``"{0,1}"`` for a column-major one, ``"{}"`` for a scalar), which it parses back
(``PjRtLayout::Deserialize``).

Without this extension jaxlib learns a program's layouts by fetching and parsing
``PJRT_Executable_OptimizedProgram`` at every compile; with it, the program text
is asked for only by ``compiled.as_text()`` and its kin.

A ``PJRT_Layouts_MemoryLayout`` is one shared object per minor_to_major, never
freed (there are as many as distinct layouts, a few per rank): its Destroy does nothing, and the bytes
Serialize hands out live as long as it (their deleter does nothing either).
Its handle points at a header that the native Serialize reads (``calls.header_handle``).
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_void_p

from . import abi
from .. import layouts
from .calls import NO_OP_DELETER, Calls, header_handle, lookup, set_header_word

CALLS = Calls()


class MemoryLayout:
    """A dense layout (its minor_to_major); ``text`` is XLA's layout text."""

    __slots__ = ("text",)

    def __init__(self, minor_to_major: tuple):
        self.text = ctypes.create_string_buffer(("{" + ",".join(map(str, minor_to_major)) + "}").encode())


# A layout handle's header: what Serialize hands out (the text, its size, the layout
# itself as the serialized layout, and the deleter that does nothing).
HEADER_TEXT, HEADER_TEXT_SIZE, HEADER_SELF, HEADER_DELETER = range(4)
_LAYOUT_HANDLES: dict[tuple, int] = {}   # minor_to_major -> handle of its MemoryLayout


def layout_handle(minor_to_major: tuple) -> int:
    """The handle of the layout ``minor_to_major``."""
    address = _LAYOUT_HANDLES.get(minor_to_major)
    if address is None:
        layout = MemoryLayout(minor_to_major)
        address = _LAYOUT_HANDLES[minor_to_major] = header_handle(
            layout, (addressof(layout.text), len(layout.text) - 1, 0, NO_OP_DELETER))
        set_header_word(address, HEADER_SELF, address)
    return address


def _layout_array(executable, attribute: str, minor_to_majors: tuple) -> tuple[int, int]:
    """(address, count) of an array of the handles of the layouts ``minor_to_majors``,
    stored on the executable."""
    if not hasattr(executable, attribute):
        setattr(executable, attribute, (c_void_p * len(minor_to_majors))(*map(layout_handle, minor_to_majors)))
    return addressof(getattr(executable, attribute)), len(minor_to_majors)


CALLS.constant_getter("Layouts_MemoryLayout_Destroy", abi.PJRT_Layouts_MemoryLayout_Destroy_Args)   # immortal
CALLS.header_getter("Layouts_MemoryLayout_Serialize", abi.PJRT_Layouts_MemoryLayout_Serialize_Args, "layout",
                    serialized_bytes=HEADER_TEXT, serialized_bytes_size=HEADER_TEXT_SIZE,
                    serialized_layout=HEADER_SELF, serialized_layout_deleter=HEADER_DELETER)


@CALLS.implements("Layouts_PJRT_Client_GetDefaultLayout", abi.PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args)
def client_get_default_layout(args):
    lookup(args.client, "client")
    args.layout = layout_handle(layouts.row_major(args.num_dims))


@CALLS.implements("Layouts_PJRT_Topology_GetDefaultLayout", abi.PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args)
def topology_get_default_layout(args):
    lookup(args.topology_description, "topology description")
    args.layout = layout_handle(layouts.row_major(args.num_dims))


@CALLS.implements("Layouts_PJRT_Executable_GetOutputLayouts", abi.PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args)
def executable_get_output_layouts(args):
    executable = lookup(args.executable, "executable").executable
    args.layouts, args.num_outputs = _layout_array(executable, "c_output_layouts", executable.output_layouts)


@CALLS.implements("Layouts_PJRT_Executable_GetParameterLayouts",
                  abi.PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args)
def executable_get_parameter_layouts(args):
    executable = lookup(args.executable, "executable").executable
    args.layouts, args.num_parameters = _layout_array(executable, "c_parameter_layouts",
                                                      executable.parameter_layouts)
