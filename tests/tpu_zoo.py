"""The zoo's programs on a TPU, where JAX users train them: lowered here for the TPU (at JAX's
default matrix precision and under ``jax.default_matmul_precision("highest")``), compared
there with the interpreter, every answer of the TPU kept (played back with `--backend recorded:FOLDER`).

    python tests/tpu_zoo.py export FOLDER [NAME ...]     # needs the zoo's libraries, not a TPU
    python tests/tpu_zoo.py compare FOLDER RECORDING     # on the machine with the TPU

A program with host callbacks (Equinox's checks) is lowered with ``EQX_ON_ERROR=nan``,
which makes them values; one that still calls the host is left out.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import numpy as np

PRECISIONS = ("default", "highest")


def export(folder: pathlib.Path, names: list) -> None:
    os.environ.setdefault("EQX_ON_ERROR", "nan")
    import jax

    from stablehlo_interp.ir.sources import host_callbacks_of
    from stablehlo_interp.program.calls import prepare
    from zoo import PROGRAMS

    folder.mkdir(parents=True, exist_ok=True)
    for name in names or list(PROGRAMS):
        program = PROGRAMS[name]()
        for precision in PRECISIONS:
            with jax.default_matmul_precision(None if precision == "default" else "highest"):
                lowered = jax.jit(program.function).trace(*program.args).lower(lowering_platforms=("tpu",))
            if host_callbacks_of(lowered):
                print(f"{name}: calls the host, left out")
                break
            arguments = prepare(jax.jit(program.function), program.args, {}).arguments
            (folder / f"{name}.{precision}.mlir").write_text(lowered.as_text(debug_info=True))
            np.savez(folder / f"{name}.{precision}.npz", *[np.asarray(a) for a in arguments])
            print(f"{name}.{precision}: {len(arguments)} arguments")


def compare(folder: pathlib.Path, recording: str) -> None:
    import stablehlo_interp as si
    from stablehlo_interp.backends import JaxBackend, RecordingBackend

    backend = RecordingBackend(JaxBackend("tpu"), recording, command="python tests/tpu_zoo.py compare FOLDER RECORDING")
    for module in sorted(folder.glob("*.mlir")):
        with np.load(module.with_suffix(".npz")) as archive:
            arguments = [archive[f"arr_{i}"] for i in range(len(archive.files))]
        started = time.time()
        try:
            comparison = si.compare(module.read_text(), *arguments, backend=backend, tolerance=(0.0, 0.0))
            print(f"== {module.stem} ({time.time() - started:.1f} s): explained {comparison.explained}, "
                  f"ops {comparison.ops}", flush=True)
            print(comparison.divergence.describe("tpu") if comparison.divergence else "no divergent op", flush=True)
        except Exception as error:  # noqa: BLE001 - a report line for each program, whatever happens
            print(f"== {module.stem}: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    here = pathlib.Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parent), str(here)]
    verb, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    export(folder, sys.argv[3:]) if verb == "export" else compare(folder, sys.argv[3])
