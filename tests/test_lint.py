"""The static checks CI runs (.ci/run), in the suite too: ruff on the project's Python
(package, tests, benchmarks, examples) and mypy on stablehlo_interp/ with the configuration
in pyproject.toml, and the public API fully annotated (stablehlo_interp's exports and the CLI's entry point)."""

from __future__ import annotations

import inspect
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
LINTED = ("stablehlo_interp", "tests", "benchmarks", "examples")  # as .ci/run lints


def _tool(name: str) -> str:
    """The tool installed beside this Python (the lint extra), else skip with how to get it."""
    path = pathlib.Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: pip install -e '.[lint]'")
    return found


def test_ruff_passes():
    run = subprocess.run([_tool("ruff"), "check", "--no-cache", *LINTED], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.timeout(300)
def test_mypy_passes():
    # (mypy's cache under .mypy_cache makes a second run take seconds)
    run = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]


def _unannotated(function) -> list[str]:
    signature = inspect.signature(function)
    missing = [p.name for p in signature.parameters.values()
               if p.annotation is inspect.Parameter.empty and p.name not in ("self", "cls")]
    if signature.return_annotation is inspect.Signature.empty and function.__name__ != "__init__":
        missing.append("return")
    return missing


def _public_callables():
    import stablehlo_interp as si
    from stablehlo_interp import cli

    yield "stablehlo_interp.cli.main", cli.main
    for name in si.__all__:
        exported = getattr(si, name)
        if inspect.ismodule(exported):
            continue
        if inspect.isclass(exported):
            for attribute, member in vars(exported).items():
                if attribute.startswith("_") and attribute != "__init__":
                    continue
                function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(function) and function.__module__.startswith("stablehlo_interp"):
                    yield f"{name}.{attribute}", function
        elif inspect.isfunction(exported) or inspect.isfunction(getattr(exported, "__wrapped__", None)):
            yield name, exported


def test_the_public_api_is_fully_annotated():
    public = dict(_public_callables())
    assert len(public) > 40, sorted(public)   # the exports' functions and methods were found
    missing = {name: m for name, function in public.items() if (m := _unannotated(function))}
    assert not missing, f"public functions with parameters or results not annotated: {missing}"
