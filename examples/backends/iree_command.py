"""IREE's command-line programs as a backend command: a stand-in for your own
toolchain, which needs no Python bindings, only the contract of
``--backend-command`` (docs/conformance.md):

    stablehlo-interp conform TESTS --backend-command \
        'python examples/backends/iree_command.py {mlir} {inputs} {outputs}'

It compiles the module with ``iree-compile`` (exit status 3 and the compiler's
diagnostics when it cannot), runs ``@main`` with ``iree-run-module`` on the
``.npy`` inputs, and has it write each result as ``result_N.npy``.
"""

import pathlib
import subprocess
import sys

CANNOT_COMPILE = 3
TOOLS = pathlib.Path(sys.executable).parent   # where pip installed IREE's programs (the iree extra)


def main(mlir: str, inputs: list, outputs: pathlib.Path) -> int:
    module = outputs / "program.vmfb"
    compiled = subprocess.run([TOOLS / "iree-compile", "--iree-hal-target-device=local",
                               "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                               "--iree-input-demote-f64-to-f32=false", mlir, "-o", module],
                              capture_output=True, text=True)
    if compiled.returncode != 0:
        sys.stderr.write(compiled.stderr)
        return CANNOT_COMPILE
    # how many results @main has: its ABI declaration, "sync func @main(%input0: ...) -> (%output0: ...)"
    dump = subprocess.run([TOOLS / "iree-dump-module", module], capture_output=True, text=True, check=True).stdout
    declaration = next(line for line in dump.splitlines() if "iree.abi.declaration: sync func @main(" in line)
    results = declaration.split("->", 1)[1].count("%output")
    ran = subprocess.run([TOOLS / "iree-run-module", f"--module={module}", "--device=local-task", "--function=main",
                          *(f"--input=@{path}" for path in inputs),
                          *(f"--output=@{outputs / f'result_{index}.npy'}" for index in range(results))],
                         capture_output=True, text=True)
    sys.stderr.write(ran.stderr)
    return 0 if ran.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:-1], pathlib.Path(sys.argv[-1])))
