"""The one table of tools (stablehlo_interp/toolbox.py): si's exports and the commands
come from it, and each of its rows is whole."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

import stablehlo_interp as si
from stablehlo_interp import cli, toolbox
from stablehlo_interp.cli import main

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("tool", toolbox.TOOLS, ids=lambda tool: tool.name)
def test_every_export_is_its_modules_name_and_si_hands_it_out(tool):
    module = importlib.import_module(f"stablehlo_interp.{tool.module}")
    for name in tool.exports:
        assert getattr(si, name) is getattr(module, name)
        assert name in si.__all__


def test_si_exports_no_tool_the_table_does_not_name():
    core = {"ArgumentError", "HostQueues", "InterpreterError", "Listener", "ModuleError", "OpError", "OpExecutionError",
            "Program", "StopExecution", "TOKEN", "TensorType", "Token", "UnsupportedOpError", "load",
            "register_custom_call", "register_op", "run", "tools"}
    assert set(si.__all__) == core | set(toolbox.exports())
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        si.nothing   # noqa: B018


def test_every_command_has_its_function_and_every_such_function_a_row():
    names = {tool.name for tool in toolbox.commands()}
    functions = {name.removeprefix("command_") for name in vars(cli) if name.startswith("command_")}
    assert names == functions
    assert len({tool.name for tool in toolbox.TOOLS}) == len(toolbox.TOOLS)


@pytest.mark.parametrize("tool", toolbox.commands(), ids=lambda tool: tool.name)
def test_every_command_shows_its_help(tool, capsys):
    with pytest.raises(SystemExit) as exit_status:
        main([tool.name, "--help"])
    assert exit_status.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: stablehlo-interp {tool.name}")
    assert " ".join(tool.command.description.split()[:4]) in " ".join(out.split())


def test_the_top_help_lists_every_command_in_the_tables_order(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\w+)\s", capsys.readouterr().out, re.MULTILINE)
    assert listed == [tool.name for tool in toolbox.commands()]


@pytest.mark.parametrize("tool", toolbox.TOOLS, ids=lambda tool: tool.name)
def test_every_tool_is_in_its_docs(tool):
    text = (DOCS.parent / tool.doc).read_text()
    assert (f"si.{tool.name}" in text or f"stablehlo-interp {tool.name}" in text
            or any(f"si.{name}" in text for name in tool.exports)), f"{tool.doc} names no {tool.name}"
