"""The ``stablehlo-interp`` command (also ``python -m stablehlo_interp``).

    stablehlo-interp COMMAND ...     # the commands: stablehlo-interp --help (toolbox.py makes them)

See docs/cli.md and docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import argparse
import contextlib
import ast
import pathlib
import shlex
import sys
import traceback

import numpy as np

from . import __version__, toolbox
from .errors import ArgumentError, InterpreterError, ModuleError, UnsupportedOpError, counted
from .program import Program
from .conformance.testfile import FAILED, expand_paths, report, run_files
from .ir.types import TOKEN, TensorType, Token, TokenType, TupleType
from .backends.errors import BackendError


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


# The exit status of every command (docs/cli.md, "Exit status"); argparse's errors are BAD_INPUT too.
OK, FINDING, BAD_INPUT, CANNOT_DO = 0, 1, 2, 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    args.command_line = shlex.join(["stablehlo-interp", *arguments])   # as typed (also through python -m)
    try:
        return args.command(args)
    except Exception as error:  # noqa: BLE001 - every error is an exit status and a message
        status = exit_status(error)
        print(f"stablehlo-interp {args.name}: {_message(error, status)}", file=sys.stderr)
        return status


def exit_status(error: BaseException | None) -> int:
    """The exit status of a command that met ``error`` (None: it did its work)."""
    if error is None:
        return OK
    if isinstance(error, (UsageError, ModuleError, ArgumentError)):
        return BAD_INPUT       # the command line, an input, the module
    if isinstance(error, (UnsupportedOpError, BackendError)):
        return CANNOT_DO       # an op the interpreter lacks; a backend that could not run
    if isinstance(error, InterpreterError):
        return FINDING         # the program failed as it ran: an op, a check
    return CANNOT_DO           # a bug of the interpreter's


def _message(error: BaseException, status: int) -> str:
    if status == BAD_INPUT:
        return f"error: {error}"
    if isinstance(error, (InterpreterError, BackendError)):
        return str(error)
    return f"internal error (a bug: please report it with this message)\n{traceback.format_exc().rstrip()}"


def _parser() -> argparse.ArgumentParser:
    """The command line of every tool with a command (toolbox.py)."""
    parser = argparse.ArgumentParser(
        prog="stablehlo-interp", description="A pure-Python reference interpreter for StableHLO.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", dest="native_logging", action="store_true",
                        help="let XLA's and PJRT's C++ libraries log everything to stderr (without it: errors only)"
                             "; it goes before COMMAND")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for tool in toolbox.commands():
        command = commands.add_parser(tool.name, help=tool.command.help, description=tool.command.description)
        for argument in tool.command.arguments:
            command.add_argument(*argument.flags, **argument.options)
        command.set_defaults(command=globals()[f"command_{tool.name}"], name=tool.name)
    return parser


def backend_of(args):
    """The backend that toolbox.py's ``BACKEND`` arguments name."""
    from .backends import CommandBackend, JaxBackend, RecordingBackend, resolve

    if args.backend_command:
        if args.backend_option:
            raise UsageError("--backend-option is for --backend iree; a command takes its own options")
        backend = CommandBackend(args.backend_command)
    else:
        try:
            backend = resolve(args.backend, args.backend_option)
        except ValueError as error:
            raise UsageError(str(error)) from None
        if isinstance(backend, JaxBackend):
            _check_platform(backend.platform)
    if args.record:
        backend = RecordingBackend(backend, args.record, command=" ".join(["stablehlo-interp", *sys.argv[1:]]))
    return backend


def _check_platform(platform: str) -> None:
    """A misspelt platform is a usage error, not a failure of the backend (JAX's message lists those it has)."""
    import jax

    try:
        jax.devices(platform)
    except RuntimeError as error:
        raise UsageError(f"--backend {platform}: {error}") from None


# ---------------------------------------------------------------------- run


def command_run(args) -> int:
    program = Program(pathlib.Path(args.file))
    name = args.function or program.entry_name
    function = program.function(name)
    inputs = _load_inputs(args.input, function)
    report = None
    if args.portability:
        from .tools.portability import PortabilityReport

        report = PortabilityReport()
    from .tools.progress import LoopProgress

    with _progress(LoopProgress) as progress:
        results = program.run(*inputs, function=name, semantics=args.semantics, listeners=[] if report is None else [report],
                              loops=progress.loops if progress else None)
    options = {"threshold": sys.maxsize} if args.full else {}
    with np.printoptions(**options):
        for index, (value, declared) in enumerate(zip(results, function.result_types)):
            label = function.result_names[index]
            print(f"result #{index}{f' ({label})' if label else ''}: {declared}")
            print(_format(value))
    if report is not None:
        print(report)
    if args.output:
        np.savez(args.output, **dict(_flatten("result", results)))
    return OK


def _progress(kind):
    """A progress line of ``kind`` (tools/progress.py) for a long run, on standard error
    when it is a terminal; else nothing (a null context that gives None)."""
    return kind(sys.stderr) if sys.stderr.isatty() else contextlib.nullcontext()


def _load_inputs(specs: list[str], function) -> list:
    """One value per argument, from .npy / .npz files and Python literals."""
    values: list = []
    for spec in specs:
        path = pathlib.Path(spec)
        if path.suffix == ".npz":
            values.extend(_npz_arguments(path, function, len(values)))
        elif path.suffix == ".npy":
            values.append(_load_array(path))
        else:
            values.append(_literal(spec, function, len(values)))
    types = function.arg_types
    if len(values) != len(types):
        expected = ", ".join(map(str, types)) or "none"
        raise UsageError(f"@{function.name} takes {counted(len(types), 'argument')} ({expected}); "
                         f"--input gave {len(values)}")
    return [_as_argument(value, t) for value, t in zip(values, types)]


def _load_array(path: pathlib.Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot load {path}: {error}") from None


def _npz_arguments(path: pathlib.Path, function, position: int) -> list:
    """The arrays of a .npz file: by argument name when its keys are the names of
    the next arguments (``x`` for a module's ``%x``), else in the order they were
    saved (``arr_0, arr_1 ...`` by number)."""
    archive = _load_array(path)
    with archive:
        keys = list(archive.keys())
        names = [name and name.removeprefix("%") for name in function.arg_names[position:position + len(keys)]]
        if set(keys) == set(names):
            keys = names
        elif all(k.startswith("arr_") and k[4:].isdigit() for k in keys):
            keys.sort(key=lambda k: int(k[4:]))
        return [archive[k] for k in keys]


def _literal(text: str, function, position: int):
    if position >= len(function.arg_types):
        raise UsageError(f"too many --input values: @{function.name} takes {counted(len(function.arg_types), 'argument')}")
    expected = function.arg_types[position]
    if not isinstance(expected, TensorType):
        raise UsageError(f"argument #{position} of @{function.name} is {expected}: give it in a .npz file")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise UsageError(f"--input {text!r} is neither a .npy/.npz file nor a Python literal") from None
    try:
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{type(value).__name__} is not a number")
        converted = array.astype(expected.dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise UsageError(f"--input {text!r} is not a value of {expected}: {error}") from None
    exact = expected.kind in ("bool", "signed", "unsigned")
    if exact and not np.array_equal(converted.astype(array.dtype), array):
        raise UsageError(f"--input {text!r} does not fit {expected}")
    return converted


def _as_argument(value, expected):
    """NumPy saves bf16, f8 and int4 arrays as raw bytes ('V2', 'V1'): view them as
    the argument's type. Tokens need no value."""
    if isinstance(expected, TokenType):
        return TOKEN
    if isinstance(expected, TupleType):
        return value
    array = np.asarray(value)
    if array.dtype.kind == "V" and array.dtype.itemsize == expected.dtype.itemsize:
        return array.view(expected.dtype)
    return array


def _format(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_format(v) for v in value) + ")"
    if isinstance(value, Token):
        return "token"
    return np.array2string(np.asarray(value), max_line_width=100)


def _flatten(prefix: str, values):
    for index, value in enumerate(values):
        if isinstance(value, tuple):
            yield from _flatten(f"{prefix}_{index}", value)
        elif not isinstance(value, Token):
            yield f"{prefix}_{index}", np.asarray(value)


# ------------------------------------------------------------ the tools


def _program_and_inputs(args):
    program = Program(pathlib.Path(args.file))
    name = args.function or program.entry_name
    return program, name, _load_inputs(args.input, program.function(name))


def command_trace(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    if args.nonfinite or args.first_nonfinite:
        mode = "first" if args.first_nonfinite else "origins"
        report = tools.find_nonfinite(program, *inputs, function=name, mode=mode, per_device=args.per_device)
        print(report if report is not None else "every value is finite" if args.first_nonfinite
              else "all results finite")
        return OK if report is None else FINDING
    if args.probe and args.per_device:
        raise UsageError("--probe saves the values of one run: it takes no --per-device")
    if args.probe:
        recorder = tools.probe(program, *inputs, function=name, path=args.probe, select=args.select,
                               every_iteration=args.every_iteration)
        print(f"saved {len(recorder.probes)} values to {args.probe}")
        return OK
    from .tools.progress import RunProgress

    with _progress(RunProgress) as progress:
        trace = tools.trace(program, *inputs, function=name, per_device=args.per_device,
                            listeners=[progress] if progress else [])
    print(trace.text(head=args.head, tail=args.tail))
    if args.json:
        import json

        pathlib.Path(args.json).write_text(json.dumps(trace.as_dicts(), indent=1))
    return exit_status(trace.error)


def command_profile(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    runs = [tools.profile(program, *inputs, function=name) for _ in range(max(args.repeat, 1))]
    print(min(runs, key=lambda run: run.seconds).text(by=args.by, top=args.top))
    return OK


def command_explain(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    explanation = tools.explain(program, *inputs, function=name)
    return exit_status(explanation.trace.error)


def command_explore(args) -> int:
    from . import tools

    if args.input:
        program, name, inputs = _program_and_inputs(args)
    else:   # a function with arguments is drawn without running it
        program = Program(pathlib.Path(args.file))
        name, inputs = args.function or program.entry_name, []
    path = pathlib.Path(args.output or pathlib.Path(args.file).with_suffix(".html"))
    exploration = tools.explore(program, *inputs, function=name, backend=args.backend, path=path,
                                model_explorer=args.model_explorer, per_device=args.per_device,
                                xla_stages=args.xla_stages)
    print(f"wrote {path}: {len(exploration.trace)} ops run")
    if exploration.model_explorer is not None:
        print(f"for Model Explorer: {exploration.model_explorer.command}")
    if exploration.nonfinite is not None:
        print(exploration.nonfinite)
    if exploration.comparison is not None:
        print(exploration.comparison)
    if "xla" in exploration.data:     # --xla-stages: si.passes' report, or why XLA's stages are not shown
        print(exploration.passes if exploration.passes is not None else
              exploration.data["xla"].get("error", f"XLA CPU: {len(exploration.data['xla']['passes'])} passes "
                                                   "changed the program (not run: no inputs)"))
    if exploration.trace.error is not None:
        print(exploration.trace.error)
    if exploration.trace.error is not None:
        return exit_status(exploration.trace.error)
    differs = exploration.comparison is not None and not exploration.comparison.ok
    return FINDING if differs or (exploration.passes is not None and not exploration.passes.ok) else OK


def command_compare(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    tolerance = _tolerance(args)
    comparison = tools.compare(program, *inputs, backend=backend_of(args), tolerance=tolerance, function=name,
                               per_device=args.per_device)
    print(comparison)
    return OK if comparison.ok else FINDING


def _tolerance(args) -> tuple | None:
    """``(rtol, atol)`` from ``--rtol`` and ``--atol`` (None: the defaults)."""
    if (args.rtol is None) != (args.atol is None):
        raise UsageError("give both --rtol and --atol, or neither")
    return None if args.rtol is None else (args.rtol, args.atol)


def command_codegen(args) -> int:
    from .tools.codegen import codegen_options

    program, name, inputs = _program_and_inputs(args)
    tolerance = _tolerance(args)
    report = codegen_options(program, *inputs, options=args.option, flags=args.flags, tolerance=tolerance,
                             jobs=args.jobs, function=name)
    print(report)
    return OK if report.ok else FINDING


def command_passes(args) -> int:
    from .tools.passes import passes

    program, name, inputs = _program_and_inputs(args)
    report = passes(program, *inputs, function=name, every_stage=args.every_stage, search_flags=not args.no_flags,
                    tolerance=_tolerance(args))
    print(report)
    return OK if report.ok else FINDING


# --------------------------------------------------------------------- test and conform


def command_test(args) -> int:
    files = expand_paths(args.paths)
    if not files:
        raise UsageError("no .mlir files under " + ", ".join(args.paths))
    results = run_files(files, args.include_disabled, args.probe_output_dir, args.jobs)
    totals = report(results, sys.stdout, total_files=len(files), verbose=args.verbose, junit_path=args.junit_xml)
    return FINDING if totals[FAILED] else OK


def command_fuzz(args) -> int:
    from .tools.fuzz.campaign import fuzz
    from .tools.fuzz.generate import ELEMENT_TYPES, OPS

    unknown = [op for op in args.op if op not in OPS] + [t for t in args.element_type if t not in ELEMENT_TYPES]
    if unknown:
        raise UsageError(f"the generator knows no {', '.join(unknown)}")
    report = fuzz(backend_of(args), args.seed, args.count, args.jobs, args.out, args.max_ops, tuple(args.op) or None,
                  tuple(args.element_type) or None, not args.no_reduce, ray=args.ray,
                  timeout=args.timeout)
    print(report.markdown() if args.out is None else _fuzz_summary(report, args.out))
    return FINDING if report.findings else OK


def _fuzz_summary(report, out) -> str:
    lines = [f"{report.count} programs from seed {report.seed} on {report.backend}: {report.agreed} agree, "
             f"{len(report.findings)} findings ({report.seconds:.1f} s)"]
    lines += [f"  {f.op} {f.element_type}: {f.cause} ({len(f.programs)} programs, {f.original_ops} -> "
              f"{f.reduced_ops} ops)" for f in report.findings]
    lines.append(f"report and reduced programs in {out}")
    return "\n".join(lines)


def _scoreboard(args, files) -> int:
    from .conformance.scoreboard import build

    against = []
    for entry in args.against:
        name, _, spec = entry.partition("=")
        against.append((name, spec or name))
    pathlib.Path(args.scoreboard).write_text(build(files, against, args.campaign, args.command_line, max(1, args.jobs)))
    print(f"wrote {args.scoreboard}: {len(files)} files, {len(against) + 1} backends")
    return OK


def command_conform(args) -> int:
    from .conformance.conform import BACKEND_ERROR, FAIL, PASS, conform
    from .conformance.progress import ProgressLine

    files = expand_paths(args.paths)
    if not files:
        raise UsageError("no .mlir files under " + ", ".join(args.paths))
    if args.scoreboard:
        return _scoreboard(args, files)
    line, counts = ProgressLine(sys.stdout, len(files)), {PASS: 0, FAIL: 0}

    def file_done(results) -> None:
        for result in results:
            counts[result.verdict] = counts.get(result.verdict, 0) + 1
        line.clear()
        line.file_done(f"{counts[PASS]} pass, {counts[FAIL]} fail")

    report = conform(files, backend_of(args), args.jobs, args.include_disabled, progress=file_done)
    line.clear()
    print(report.table(everything=args.verbose))
    if args.junit_xml:
        report.write_junit(args.junit_xml)
    if args.json:
        report.write_json(args.json)
    counts = report.counts()
    return FINDING if counts[FAIL] or counts[BACKEND_ERROR] else OK
