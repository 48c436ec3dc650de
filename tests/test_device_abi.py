"""The plugin's ctypes layout against the PJRT C API 0.102 layout that gcc gives the header.

The reference is ``pjrt_c_api_0.102.abi.json`` (every struct with its size and
field offsets, the PJRT_Api slot order, the enums), in the project's shared/
folder beside the repository; ``PJRT_ABI_JSON`` may point elsewhere.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import pathlib

import pytest

from stablehlo_interp.device.pjrt import abi

# shared/ sits beside the repository (locally and in CI).
ABI_JSON = pathlib.Path(os.environ.get(
    "PJRT_ABI_JSON", pathlib.Path(__file__).resolve().parents[2] / "shared" / "pjrt" / "pjrt_c_api_0.102.abi.json"))
if not ABI_JSON.exists():
    pytest.skip(f"no PJRT ABI table at {ABI_JSON} (set PJRT_ABI_JSON)", allow_module_level=True)
LAYOUT = json.loads(ABI_JSON.read_text())
OUR_STRUCTS = {name: cls for name, cls in vars(abi).items()
               if inspect.isclass(cls) and issubclass(cls, ctypes.Structure) and name.startswith("PJRT_")
               and not name.startswith("PJRT_Layouts_")}

# pjrt_c_api_layouts_extension.h (openxla/xla), which the ABI table lacks: each struct's
# fields and their offsets as gcc lays them out on 64-bit Linux. Every field is a
# pointer or size_t except the PJRT_Buffer_Type enum (4 bytes, padded to 8).
_ARGS = ("struct_size", "extension_start")
LAYOUTS_STRUCTS = {
    "PJRT_Layouts_MemoryLayout_Destroy_Args": (*_ARGS, "layout"),
    "PJRT_Layouts_MemoryLayout_Serialize_Args": (*_ARGS, "layout", "serialized_bytes", "serialized_bytes_size",
                                                 "serialized_layout", "serialized_layout_deleter"),
    "PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args": (*_ARGS, "client", "type", "dims", "num_dims", "layout"),
    "PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args": (*_ARGS, "buffer", "layout"),
    "PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args": (*_ARGS, "topology_description", "type", "dims",
                                                         "num_dims", "layout"),
    "PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args": (*_ARGS, "executable", "num_outputs", "layouts"),
    "PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args": (*_ARGS, "executable", "num_parameters", "layouts"),
    "PJRT_Layouts_Extension": ("base", None, None, "PJRT_Layouts_MemoryLayout_Destroy",
                               "PJRT_Layouts_MemoryLayout_Serialize", "PJRT_Layouts_PJRT_Client_GetDefaultLayout",
                               "PJRT_Layouts_PJRT_Buffer_MemoryLayout", "PJRT_Layouts_PJRT_Topology_GetDefaultLayout",
                               "PJRT_Layouts_PJRT_Executable_GetOutputLayouts",
                               "PJRT_Layouts_PJRT_Executable_GetParameterLayouts"),
}


def test_api_version():
    assert (abi.API_MAJOR, abi.API_MINOR) == (LAYOUT["pjrt_api_major"], LAYOUT["pjrt_api_minor"])


def test_we_define_the_structs_we_use():
    assert len(OUR_STRUCTS) > 80
    assert set(OUR_STRUCTS) <= set(LAYOUT["structs"])


@pytest.mark.parametrize("name", sorted(OUR_STRUCTS))
def test_struct_layout(name):
    ours, reference = OUR_STRUCTS[name], LAYOUT["structs"][name]
    assert ctypes.sizeof(ours) == reference["size"]
    for field in reference["fields"]:
        # An anonymous union is reached through each of its alternatives.
        for field_name in [a["name"] for a in field.get("alternatives", ())] or [field["name"]]:
            assert getattr(ours, field_name).offset == field["offset"], field_name
            if "alternatives" not in field and field["size"] in (1, 4, 8):
                assert getattr(ours, field_name).size == field["size"], field_name


@pytest.mark.parametrize("name", sorted(LAYOUTS_STRUCTS))
def test_layouts_extension_struct_layout(name):
    """One 8-byte word per field (``None``: a word of the field before, the 24-byte
    PJRT_Extension_Base)."""
    ours, fields = getattr(abi, name), LAYOUTS_STRUCTS[name]
    assert ctypes.sizeof(ours) == 8 * len(fields)
    for index, field in enumerate(fields):
        if field is not None:
            assert getattr(ours, field).offset == 8 * index, field
    assert {name for name, cls in vars(abi).items() if inspect.isclass(cls) and name.startswith("PJRT_Layouts_")} \
        == set(LAYOUTS_STRUCTS)


def test_api_slots_in_order():
    assert [f"PJRT_{name}" for name in abi.API_SLOTS] == [slot["name"] for slot in LAYOUT["api_slots"]]
    for slot in LAYOUT["api_slots"]:
        assert getattr(abi.PJRT_Api, slot["name"]).offset == slot["offset"]


def test_the_args_of_every_implemented_call_match():
    """Each implementation reads the args structure its slot takes (or one laid out the same)."""
    from stablehlo_interp.device import plugin
    from stablehlo_interp.device.pjrt import api

    plugin.table()
    arg_structs = {slot["name"].removeprefix("PJRT_"): slot["args"] for slot in LAYOUT["api_slots"]}
    arg_structs.update({"Shardings_OutputShardings": "PJRT_Shardings_PJRT_Executable_OutputShardings_Args",
                        "Shardings_ParameterShardings": "PJRT_Shardings_PJRT_Executable_ParameterShardings_Args"})
    for name, (_, args_type) in api.CALLS.implementations.items():
        if name.startswith("Layouts_"):
            assert args_type is getattr(abi, f"PJRT_{name}_Args"), name   # test_layouts_extension_struct_layout
            continue
        reference = LAYOUT["structs"][arg_structs[name]]
        assert ctypes.sizeof(args_type) <= reference["size"], name
        for field in reference["fields"]:
            if field["offset"] + field["size"] <= ctypes.sizeof(args_type) and "alternatives" not in field:
                ours = [f for f, *_ in args_type._fields_] + [f for f, *_ in abi.Args._fields_]
                offsets = {getattr(args_type, f).offset for f in ours}
                assert field["offset"] in offsets, (name, field["name"])


def test_enums():
    enums = LAYOUT["enums"]
    for code, name in abi.BUFFER_TYPES.items():
        suffix = {"bool": "PRED", "bfloat16": "BF16", "complex64": "C64", "complex128": "C128"}.get(name)
        if suffix is None:
            suffix = name.replace("float8_", "F8").replace("float4_", "F4").replace("float", "F").replace(
                "uint", "U").replace("int", "S").upper()
        assert enums["PJRT_Buffer_Type"][f"PJRT_Buffer_Type_{suffix}"] == code, name
    assert enums["PJRT_Buffer_Type"]["PJRT_Buffer_Type_TOKEN"] == abi.BUFFER_TYPE_TOKEN
    codes = enums["PJRT_Error_Code"]
    for name in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE", "UNIMPLEMENTED",
                 "INTERNAL"):
        assert codes[f"PJRT_Error_Code_{name}"] == getattr(abi, name)
    assert enums["PJRT_Extension_Type"]["PJRT_Extension_Type_Shardings"] == abi.EXTENSION_SHARDINGS
    assert enums["PJRT_Extension_Type"]["PJRT_Extension_Type_Layouts"] == abi.EXTENSION_LAYOUTS
    named = enums["PJRT_NamedValue_Type"]
    assert [named[f"PJRT_NamedValue_k{kind}"] for kind in ("String", "Int64", "Int64List", "Float", "Bool")] == \
        [abi.NAMED_STRING, abi.NAMED_INT64, abi.NAMED_INT64_LIST, abi.NAMED_FLOAT, abi.NAMED_BOOL]
    layout_types = enums["PJRT_Buffer_MemoryLayout_Type"]
    assert (layout_types["PJRT_Buffer_MemoryLayout_Type_Tiled"], layout_types["PJRT_Buffer_MemoryLayout_Type_Strides"]) \
        == (abi.LAYOUT_TILED, abi.LAYOUT_STRIDES)
