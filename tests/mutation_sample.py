"""A sampled mutation check of the suite on the op modules (issue 30): mutants of
stablehlo_interp/ops/ (a comparison, arithmetic or bitwise operator swapped, an
integer constant plus one, a boolean flipped, maximum/minimum or floor/ceil
swapped, and/or swapped), one at a time in a copy of HEAD (git archive), each
judged by its module's test file (default run, slow share 0, stopping at the
first failure): killed when a test fails. Prints one JSON line per mutant, then
the share killed.

    python tests/mutation_sample.py COUNT SEED
"""
import ast
import copy
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# op module -> the test file that covers it
TESTS = {
    "bitwise.py": "tests/test_elementwise.py", "comparison.py": "tests/test_elementwise.py",
    "elementwise.py": "tests/test_elementwise.py", "numerics.py": "tests/test_check_dialect.py",
    "conversion.py": "tests/test_conversion.py", "shape.py": "tests/test_shape_ops.py",
    "sorting.py": "tests/test_sort.py", "reduction.py": "tests/test_reduction.py",
    "indexing.py": "tests/test_indexing.py", "fft.py": "tests/test_fft.py", "chlo.py": "tests/test_chlo.py",
    "convolution.py": "tests/test_convolution.py", "linalg.py": "tests/test_linalg.py",
    "random.py": "tests/test_random.py",
}
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
            ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.LShift: ast.RShift, ast.RShift: ast.LShift}
SWAP_NAME = {"maximum": "minimum", "minimum": "maximum", "floor": "ceil", "ceil": "floor"}


def candidates(tree):
    # elementwise=True only opens a faster path for region bodies: flipping it is an equivalent mutant
    flags = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "elementwise"}
    for node in ast.walk(tree):
        if id(node) in flags:
            continue
        if getattr(node, "lineno", None) is None or node.lineno != node.end_lineno:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            yield node, "cmp"
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            yield node, "bin"
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield node, "int"
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            yield node, "bool"
        elif isinstance(node, ast.Attribute) and node.attr in SWAP_NAME:
            yield node, "name"
        elif isinstance(node, ast.BoolOp):
            yield node, "boolop"


def mutated(node, kind):
    node = copy.deepcopy(node)
    if kind == "cmp":
        node.ops[0] = SWAP_CMP[type(node.ops[0])]()
    elif kind == "bin":
        node.op = SWAP_BIN[type(node.op)]()
    elif kind == "int":
        node.value = node.value + 1
    elif kind == "bool":
        node.value = not node.value
    elif kind == "name":
        node.attr = SWAP_NAME[node.attr]
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    return ast.unparse(node)


def main(count, seed):
    with tempfile.TemporaryDirectory() as root:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPOSITORY, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)
        run_sample(root, count, seed)


def run_sample(root, count, seed):
    rng = random.Random(seed)
    sites = []
    for module in TESTS:
        path = f"{root}/stablehlo_interp/ops/{module}"
        source = open(path).read()
        for node, kind in candidates(ast.parse(source)):
            sites.append((module, node.lineno, node.col_offset, node.end_col_offset, kind, node))
    sample = rng.sample(sites, count)
    results = []
    for module, line, col, end, kind, node in sample:
        path = f"{root}/stablehlo_interp/ops/{module}"
        original = open(path).read()
        lines = original.split("\n")
        text = lines[line - 1]
        lines[line - 1] = text[:col] + mutated(node, kind) + text[end:]
        mutant = "\n".join(lines)
        try:
            compile(mutant, path, "exec")
        except SyntaxError:   # the unparsed node does not fit back in its line
            continue
        open(path, "w").write(mutant)
        start = time.time()
        try:
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", TESTS[module]],
                                 cwd=root, env=dict(os.environ, PYTHONPATH=root, STABLEHLO_INTERP_SLOW_ROTATION="0"),
                                 capture_output=True, text=True, timeout=240)
            killed = run.returncode != 0
            tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        except subprocess.TimeoutExpired:   # (a mutant that loops forever)
            killed, tail = True, "timeout"
        finally:
            open(path, "w").write(original)
        result = dict(module=module, line=line, kind=kind, before=text.strip(), after=lines[line - 1].strip(),
                      killed=killed, seconds=round(time.time() - start), tail=tail)
        results.append(result)
        print(json.dumps(result), flush=True)
    killed = sum(r["killed"] for r in results)
    print(f"killed {killed} of {len(results)}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
