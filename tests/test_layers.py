"""The house keeps its layers: no import cycles between modules, every import (lazy ones
too) runs down the floors (docs/engine.md), each layer on a floor of its own, the package
root holds only the public face, and only the modules that read and write MLIR import
its bindings."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "stablehlo_interp"

# The layers, lowest first, one to a floor: a module imports from its own layer or lower
# ones only. A module belongs to the layer of the longest name here that starts its name.
FLOORS = [
    ("errors", "the exceptions every layer raises"),
    ("ir", "MLIR in and out: parse, verify, decode, edit; child processes and their pool"),
    ("engine", "plans, the run loop, the op registry, the grid; dtypes, numerics, accumulation orders"),
    ("judge", "rounding noise: each op's bound, noise runs, differences between values"),
    ("sharding", "meshes, shardings, propagation, the partitioner, the per-device program and its check"),
    ("ops", "the op families"),
    ("program", "a loaded program and its calls"),
    ("backends", "what a program is compared with: JAX's platforms, IREE, a command, a recording"),
    ("tools", "the debugging tools"),
    ("device", "the interp JAX device"),
    ("conformance", "StableHLO's test files: run, conform, coverage"),
    (("cli", "toolbox", "pytest_plugin", "__init__", "__main__"), "the front doors"),
]
PUBLIC_FACE = {"__init__.py", "__main__.py", "cli.py", "toolbox.py", "pytest_plugin.py", "errors.py"}
# Who may import jaxlib.mlir: the loader, the compiler that walks a module once, the
# rewrites of sharded modules (before a load, or in the partitioner's child process), and
# the places that hand a module to something else (XLA through JAX; PJRT's program bytes).
READS_MLIR = ("ir.", "program.compiler", "sharding.custom_partitioning", "sharding.manual_borders",
              "sharding.partition", "sharding.shardy_child", "backends.", "device.pjrt.calls_platform",
              "conformance.coverage")


def _modules() -> dict:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name or "__init__"] = path
    return modules


def _imports(name: str, path: pathlib.Path, modules: dict) -> set:
    """The package's modules that ``name`` imports (at any depth of its code)."""
    package = name.split(".") if path.name == "__init__.py" and name != "__init__" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1] if node.level > 1 else package
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{target}.{alias.name}" if target else alias.name
                found.add(full if full in modules else target or "__init__")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stablehlo_interp"):
            target = node.module.removeprefix("stablehlo_interp").lstrip(".")
            found.add(target or "__init__")
    return {module for module in found if module in modules and module != name}


def _graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _names(layer) -> tuple:
    return layer if isinstance(layer, tuple) else (layer,)


def _floor(module: str) -> int:
    """The floor of the layer whose name is the longest start of ``module``'s."""
    matches = [(len(name), floor) for floor, (layer, _) in enumerate(FLOORS) for name in _names(layer)
               if module == name or module.startswith(name + ".")]
    assert matches, f"{module} is on no floor of FLOORS"
    return max(matches)[1]


def test_no_import_cycles():
    graph = _graph()
    cycles, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for imported in sorted(graph[module]):
            if imported.startswith(module + ".") or module == "__init__":
                continue   # a package's __init__ importing its own modules
            if state.get(imported) == "open":
                cycles.append(path[path.index(imported):] + [imported])
            elif imported not in state:
                visit(imported, path + [imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_imports_run_down_the_floors():
    upward = [f"{module} -> {imported}" for module, imports in _graph().items() for imported in imports
              if _floor(imported) > _floor(module)]
    assert upward == []


def test_each_layer_is_a_folder_of_its_own_on_a_floor_of_its_own():
    layers = [name for layer, _ in FLOORS[1:-1] for name in _names(layer)]
    assert len(layers) == len(FLOORS) - 2 and len(set(layers)) == len(layers)
    assert {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()} == set(layers)


def test_every_module_is_on_a_floor():
    for module in _modules():
        _floor(module)


def test_the_package_root_holds_only_the_public_face():
    assert {p.name for p in PACKAGE.glob("*.py")} <= PUBLIC_FACE


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_loader_reads_mlir(path):
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    reads = any(isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (getattr(node, "module", None) or alias.name).startswith("jaxlib.mlir") for alias in node.names)
        for node in ast.walk(ast.parse(path.read_text())))
    assert not reads or name.startswith(READS_MLIR), f"{name} imports jaxlib.mlir"
