"""The house keeps its layers: no import cycles between modules, imports run down the
floors (docs/engine.md), the package root holds only the public face, and only ir/
and the compiler read MLIR."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "stablehlo_interp"

# Floors, lowest first: a module imports from its own floor or lower ones only.
FLOORS = [
    {"errors", "ir"},
    {"engine", "sharding"},
    {"ops"},
    {"program"},
    {"tools", "frontends", "device"},
    {"cli", "pytest_plugin", "__init__", "__main__"},
]
PUBLIC_FACE = {"__init__.py", "__main__.py", "cli.py", "pytest_plugin.py", "errors.py"}
# Who may import jaxlib.mlir: the loader, the compiler that walks a module once, and
# the places that hand a module to something else (XLA through JAX; PJRT's program bytes).
READS_MLIR = ("ir.", "program.compiler", "tools.backends", "device.pjrt.calls_platform", "frontends.coverage")


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


def _floor(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, floor in enumerate(FLOORS) if top in floor)


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


def test_the_package_root_holds_only_the_public_face():
    assert {p.name for p in PACKAGE.glob("*.py")} <= PUBLIC_FACE


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_loader_reads_mlir(path):
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    reads = any(isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (getattr(node, "module", None) or alias.name).startswith("jaxlib.mlir") for alias in node.names)
        for node in ast.walk(ast.parse(path.read_text())))
    assert not reads or name.startswith(READS_MLIR), f"{name} imports jaxlib.mlir"
