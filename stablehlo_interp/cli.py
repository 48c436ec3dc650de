"""The ``stablehlo-interp`` command (also ``python -m stablehlo_interp``).

    stablehlo-interp run FILE [--function F] [--input x.npy ...] [--output out.npz] [--semantics xla] [--portability]
    stablehlo-interp test FILE_OR_DIR... [--verbose] [-j N] [--junit-xml PATH] [--include-disabled]
    stablehlo-interp conform PATH... [--backend cpu|iree[:TARGET]] [--backend-option FLAG ...]
                             [--backend-command 'TOOL {mlir} {inputs} {outputs}'] [-j N]
                             [--junit-xml PATH] [--json PATH]
    stablehlo-interp trace FILE [--input ...] [--nonfinite | --first-nonfinite | --probe OUT.npz] [--per-device]
    stablehlo-interp explain FILE [--input ...]
    stablehlo-interp profile FILE [--input ...] [--by op|line] [--top N] [--repeat R]
    stablehlo-interp explore FILE [--input ...] [--output OUT.html] [--backend cpu] [--model-explorer DIR]
                             [--per-device]
    stablehlo-interp compare FILE [--input ...] [--backend cpu|iree[:TARGET]] [--backend-option FLAG ...]
                             [--backend-command CMD] [--rtol R --atol A] [--per-device]
    stablehlo-interp fuzz [--backend cpu|iree[:TARGET]] [--seed S] [--count N] [-j N] [--out DIR] [--timeout SECONDS]
                          [--ray ADDRESS]

See docs/cli.md and docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import argparse
import ast
import pathlib
import sys

import numpy as np

from . import __version__
from .engine.semantics import SEMANTICS, SPEC
from .errors import InterpreterError
from .program import Program
from .frontends.testfile import FAILED, expand_paths, report, run_files
from .ir.types import TOKEN, TensorType, Token, TokenType, TupleType
from .tools.backends.errors import BackendError


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.command(args)
    except UsageError as error:
        print(f"stablehlo-interp {args.name}: error: {error}", file=sys.stderr)
        return 2
    except (InterpreterError, BackendError) as error:
        print(f"stablehlo-interp {args.name}: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stablehlo-interp", description="A pure-Python reference interpreter for StableHLO.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a function of a module and print its results",
                              description="Run a function of a module (MLIR text or bytecode, or a "
                                          "StableHLO portable artifact) and print its results.")
    run.add_argument("file", help="the module")
    run.add_argument("--function", "-f", help="the function to run (default: @main, or the only public one)")
    run.add_argument("--input", "-i", action="append", default=[], metavar="INPUT",
                     help="an argument: a .npy file (one argument), a .npz file (several, in the order "
                          "they were saved, or by argument name) or a Python literal such as 2.5 or "
                          "'[[1, 2], [3, 4]]' (converted to the argument's type); repeat for each")
    run.add_argument("--output", "-o", metavar="OUT.npz",
                     help="also save the results to a .npz file (result_0, result_1, ...)")
    run.add_argument("--full", action="store_true", help="print every element of large results")
    run.add_argument("--semantics", choices=SEMANTICS, default=SPEC,
                     help="follow the StableHLO spec (default) or XLA where they differ (docs/semantics.md)")
    run.add_argument("--portability", action="store_true",
                     help="after the results, list every op whose result depends on the implementation: "
                          "behaviour the spec leaves open or XLA does differently (docs/semantics.md)")
    run.set_defaults(command=_run, name="run")

    test = commands.add_parser("test", help="run files written like StableHLO's interpreter tests",
                               description="Run test files: '// -----' splits a file into modules; each "
                                           "public function without arguments is a test, and its check "
                                           "ops (check.expect_eq ...) decide whether it passes.")
    test.add_argument("paths", nargs="+", metavar="PATH", help="test files, or directories of *.mlir files")
    test.add_argument("--verbose", "-v", action="store_true",
                      help="list every test, not only failures, with the time of each file")
    test.add_argument("--include-disabled", action="store_true",
                      help="also run files whose interpreter RUN line upstream disabled (RUN-DISABLED)")
    test.add_argument("--probe-output-dir", metavar="DIR",
                      help="where interpreter.probe saves values (default: a temporary directory per file)")
    test.add_argument("--junit-xml", metavar="PATH", help="also write a JUnit XML report")
    test.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="run files in N processes")
    test.set_defaults(command=_test, name="test")

    conform = commands.add_parser("conform", help="judge a backend with test files (StableHLO's format)",
                                  description="Run each test of the files on a backend with its check "
                                              "ops turned into results, judge the backend's values with the "
                                              "file's checks and against the interpreter (docs/conformance.md).")
    conform.add_argument("paths", nargs="+", metavar="PATH", help="test files, or directories of *.mlir files")
    add_backend_arguments(conform)
    conform.add_argument("--verbose", "-v", action="store_true", help="list every test, not only the others")
    conform.add_argument("--include-disabled", action="store_true",
                         help="also run files whose interpreter RUN line upstream disabled")
    conform.add_argument("--junit-xml", metavar="PATH", help="also write a JUnit XML report")
    conform.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    conform.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="run files in N processes")
    conform.set_defaults(command=_conform, name="conform")

    trace = commands.add_parser("trace", help="run a function and print every op it executes",
                                description="Run a function and print each executed op (inside regions "
                                            "too) with a summary of its results and its source line.")
    _add_program_arguments(trace)
    trace.add_argument("--head", type=int, default=2, help="region calls shown before the folded ones")
    trace.add_argument("--tail", type=int, default=1, help="region calls shown after the folded ones")
    trace.add_argument("--json", metavar="OUT.json", help="also save the trace as JSON records")
    trace.add_argument("--nonfinite", action="store_true",
                       help="instead, report where the NaNs and infs of the results came from")
    trace.add_argument("--first-nonfinite", action="store_true",
                       help="instead, report the first op that makes a NaN or inf, whether or not it "
                            "reaches a result")
    trace.add_argument("--probe", metavar="OUT.npz",
                       help="instead, save intermediate values (with an index) to a .npz file")
    trace.add_argument("--select", action="append", metavar="OP_OR_LINE",
                       help="with --probe: save only these ops (op name, or FILE:LINE); repeat")
    trace.add_argument("--every-iteration", action="store_true",
                       help="with --probe: save values of every loop iteration, not only the last")
    _add_per_device_argument(trace)
    trace.set_defaults(command=_trace, name="trace")

    profile = commands.add_parser("profile", help="run a function and print where its time goes, by op",
                                  description="Run a function and print the own time of each op name (or "
                                              "source line): its share of the run, calls, time per call.")
    _add_program_arguments(profile)
    profile.add_argument("--by", choices=("op", "line"), default="op", help="group by op name or source line")
    profile.add_argument("--top", type=int, default=20, help="rows shown, most time first")
    profile.add_argument("--repeat", type=int, default=1, metavar="R",
                         help="run R times and keep the profile of the run with the least time in ops")
    profile.set_defaults(command=_profile, name="profile")

    explain = commands.add_parser("explain", help="print the module and its run, op by op, by source line",
                                  description="Print the module, then run it and print each op with its "
                                              "results under the source line it came from.")
    _add_program_arguments(explain)
    explain.set_defaults(command=_explain, name="explain")

    explore = commands.add_parser("explore", help="write the explorer page (module, graph, values; HTML)",
                                  description="Run the function and write one self-contained HTML page: "
                                              "the module, its dataflow graph and each op's values, linked "
                                              "by source line, with the op a non-finite result came from marked.")
    _add_program_arguments(explore)   # without --input, a function that takes arguments is drawn, not run
    explore.add_argument("--output", "-o", metavar="OUT.html", help="the page (default: FILE with .html)")
    explore.add_argument("--backend", "-b", help="also mark the first op whose value differs on this JAX "
                                                 "backend (e.g. cpu)")
    explore.add_argument("--model-explorer", metavar="DIR",
                         help="also write the module and the run's findings per op as Model Explorer's node data "
                              "into DIR (needs the model-explorer extra); with --per-device, the per-device "
                              "program and each device's node data")
    _add_per_device_argument(explore)
    explore.set_defaults(command=_explore, name="explore")

    compare = commands.add_parser("compare", help="compare with another backend; find the first divergent op",
                                  description="Run @main here and on another backend; when the results "
                                              "differ, find the first op whose value differs.")
    _add_program_arguments(compare)
    add_backend_arguments(compare)
    compare.add_argument("--rtol", type=float, help="relative tolerance for every float type")
    compare.add_argument("--atol", type=float, help="absolute tolerance for every float type")
    _add_per_device_argument(compare)
    compare.set_defaults(command=_compare, name="compare")

    fuzz = commands.add_parser("fuzz", help="random programs here and on a backend; differences reduced",
                               description="Generate random StableHLO programs from a seed, run each here and "
                                           "on the backend, and reduce every difference beyond rounding, "
                                           "crash or compile failure to a minimal program (docs/tools.md).")
    add_backend_arguments(fuzz)
    fuzz.add_argument("--seed", "-s", type=int, default=0, help="the campaign's seed (default 0)")
    fuzz.add_argument("--count", "-n", type=int, default=100, help="how many programs (default 100)")
    fuzz.add_argument("--jobs", "-j", type=int, default=1, help="worker processes (default 1)")
    fuzz.add_argument("--out", "-o", metavar="DIR", help="write report.md, report.json and each finding's "
                                                          "program.mlir and arg*.npy there")
    fuzz.add_argument("--max-ops", type=int, default=12, help="ops per program at most (default 12)")
    fuzz.add_argument("--op", action="append", default=[], metavar="OP",
                      help="generate only this op (without 'stablehlo.'); repeat for each")
    fuzz.add_argument("--element-type", action="append", default=[], metavar="TYPE",
                      help="give new values only this element type (f32, bf16, i4 ...); repeat for each")
    fuzz.add_argument("--no-reduce", action="store_true", help="report findings without reducing them")
    fuzz.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                      help="seconds a program's check may take, both sides; longer is a 'timed out' finding "
                           "(default 60)")
    fuzz.add_argument("--ray", metavar="ADDRESS",
                      help="check the programs as tasks on this Ray cluster ('local': start one here; "
                           "the ray extra)")
    fuzz.set_defaults(command=_fuzz, name="fuzz")
    return parser


def add_backend_arguments(parser) -> None:
    """``--backend``, ``--backend-option`` and ``--backend-command``: the backend under
    test (tools/backends/); :func:`backend_of` makes it from the parsed arguments."""
    parser.add_argument("--backend", "-b", default="cpu",
                        help="a JAX platform name, or iree / iree:TARGET (e.g. iree:llvm-cpu; the 'iree' extra) "
                             "(default: cpu)")
    parser.add_argument("--backend-option", action="append", default=[], metavar="FLAG",
                        help="an extra flag for IREE's compiler, e.g. "
                             "--backend-option=--iree-input-demote-f64-to-f32=true; repeat for each")
    parser.add_argument("--backend-command", metavar="COMMAND",
                        help="instead of --backend, a command that runs each program: {mlir} is the module's "
                             "file, {inputs} its .npy inputs, {outputs} the directory for result_N.npy "
                             "(docs/conformance.md)")
    parser.add_argument("--record", metavar="FOLDER",
                        help="keep the backend's answers in FOLDER, to play them back later with "
                             "--backend recorded:FOLDER where the backend is absent (docs/conformance.md)")


def backend_of(args):
    """The backend that :func:`add_backend_arguments`' arguments name."""
    from .tools.backends import CommandBackend, RecordingBackend, resolve

    if args.backend_command:
        if args.backend_option:
            raise UsageError("--backend-option is for --backend iree; a command takes its own options")
        backend = CommandBackend(args.backend_command)
    else:
        try:
            backend = resolve(args.backend, args.backend_option)
        except ValueError as error:
            raise UsageError(str(error)) from None
    if args.record:
        backend = RecordingBackend(backend, args.record, command=" ".join(["stablehlo-interp", *sys.argv[1:]]))
    return backend


def _add_per_device_argument(parser) -> None:
    parser.add_argument("--per-device", action="store_true",
                        help="a sharded module runs as XLA runs it: each device its partitioned program "
                             "(docs/sharding.md); where Shardy cannot partition it, a warning and the global program")


def _add_program_arguments(parser) -> None:
    parser.add_argument("file", help="the module")
    parser.add_argument("--function", "-f", help="the function to run (default: @main, or the only public one)")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="INPUT",
                        help="an argument, as for 'run': .npy, .npz or a Python literal; repeat for each")


# ---------------------------------------------------------------------- run


def _run(args) -> int:
    program = Program(pathlib.Path(args.file))
    name = args.function or program.entry_name
    function = program.function(name)
    inputs = _load_inputs(args.input, function)
    report = None
    if args.portability:
        from .tools.portability import PortabilityReport

        report = PortabilityReport()
    results = program.run(*inputs, function=name, semantics=args.semantics, listeners=() if report is None else [report])
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
    return 0


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
        raise UsageError(f"@{function.name} takes {len(types)} arguments ({expected}); "
                         f"--input gave {len(values)}")
    return [_as_argument(value, t) for value, t in zip(values, types)]


def _load_array(path: pathlib.Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot load {path}: {error}") from None


def _npz_arguments(path: pathlib.Path, function, position: int) -> list:
    """The arrays of a .npz file: by argument name when its keys are the names of
    the next arguments, else in the order they were saved (``arr_0, arr_1 ...``
    by number)."""
    archive = _load_array(path)
    with archive:
        keys = list(archive.keys())
        names = list(function.arg_names[position:position + len(keys)])
        if set(keys) == set(names):
            keys = names
        elif all(k.startswith("arr_") and k[4:].isdigit() for k in keys):
            keys.sort(key=lambda k: int(k[4:]))
        return [archive[k] for k in keys]


def _literal(text: str, function, position: int):
    if position >= len(function.arg_types):
        raise UsageError(f"too many --input values: @{function.name} takes {len(function.arg_types)}")
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


def _trace(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    if args.nonfinite or args.first_nonfinite:
        mode = "first" if args.first_nonfinite else "origins"
        report = tools.find_nonfinite(program, *inputs, function=name, mode=mode, per_device=args.per_device)
        print(report if report is not None else "every value is finite" if args.first_nonfinite
              else "all results finite")
        return 0
    if args.probe and args.per_device:
        raise UsageError("--probe saves the values of one run: it takes no --per-device")
    if args.probe:
        recorder = tools.probe(program, *inputs, function=name, path=args.probe, select=args.select,
                               every_iteration=args.every_iteration)
        print(f"saved {len(recorder.probes)} values to {args.probe}")
        return 0
    trace = tools.trace(program, *inputs, function=name, per_device=args.per_device)
    print(trace.text(head=args.head, tail=args.tail))
    if args.json:
        import json

        pathlib.Path(args.json).write_text(json.dumps(trace.as_dicts(), indent=1))
    return 1 if trace.error else 0


def _profile(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    runs = [tools.profile(program, *inputs, function=name) for _ in range(max(args.repeat, 1))]
    print(min(runs, key=lambda run: run.seconds).text(by=args.by, top=args.top))
    return 0


def _explain(args) -> int:
    from . import tools

    program, name, inputs = _program_and_inputs(args)
    explanation = tools.explain(program, *inputs, function=name)
    return 1 if explanation.trace.error else 0


def _explore(args) -> int:
    from . import tools

    if args.input:
        program, name, inputs = _program_and_inputs(args)
    else:   # a function with arguments is drawn without running it
        program = Program(pathlib.Path(args.file))
        name, inputs = args.function or program.entry_name, []
    path = pathlib.Path(args.output or pathlib.Path(args.file).with_suffix(".html"))
    exploration = tools.explore(program, *inputs, function=name, backend=args.backend, path=path,
                                model_explorer=args.model_explorer, per_device=args.per_device)
    print(f"wrote {path}: {len(exploration.trace)} ops run")
    if exploration.model_explorer is not None:
        print(f"for Model Explorer: {exploration.model_explorer.command}")
    if exploration.nonfinite is not None:
        print(exploration.nonfinite)
    if exploration.comparison is not None:
        print(exploration.comparison)
    if exploration.trace.error is not None:
        print(exploration.trace.error)
    return 1 if exploration.trace.error else 0


def _compare(args) -> int:
    from . import tools

    if (args.rtol is None) != (args.atol is None):
        raise UsageError("give both --rtol and --atol, or neither")
    program, name, inputs = _program_and_inputs(args)
    tolerance = None if args.rtol is None else (args.rtol, args.atol)
    comparison = tools.compare(program, *inputs, backend=backend_of(args), tolerance=tolerance, function=name,
                               per_device=args.per_device)
    print(comparison)
    return 0 if comparison.ok else 1


# --------------------------------------------------------------------- test and conform


def _test(args) -> int:
    files = expand_paths(args.paths)
    if not files:
        raise UsageError("no .mlir files under " + ", ".join(args.paths))
    results = run_files(files, args.include_disabled, args.probe_output_dir, args.jobs)
    totals = report(results, sys.stdout, total_files=len(files), verbose=args.verbose, junit_path=args.junit_xml)
    return 1 if totals[FAILED] else 0


def _fuzz(args) -> int:
    from .tools.fuzz.campaign import fuzz
    from .tools.fuzz.generate import ELEMENT_TYPES, OPS

    unknown = [op for op in args.op if op not in OPS] + [t for t in args.element_type if t not in ELEMENT_TYPES]
    if unknown:
        raise UsageError(f"the generator knows no {', '.join(unknown)}")
    report = fuzz(backend_of(args), args.seed, args.count, args.jobs, args.out, args.max_ops, tuple(args.op) or None,
                  tuple(args.element_type) or None, not args.no_reduce, ray=args.ray,
                  timeout=args.timeout)
    print(report.markdown() if args.out is None else _fuzz_summary(report, args.out))
    return 1 if report.findings else 0


def _fuzz_summary(report, out) -> str:
    lines = [f"{report.count} programs from seed {report.seed} on {report.backend}: {report.agreed} agree, "
             f"{len(report.findings)} findings ({report.seconds:.1f} s)"]
    lines += [f"  {f.op} {f.element_type}: {f.cause} ({len(f.programs)} programs, {f.original_ops} -> "
              f"{f.reduced_ops} ops)" for f in report.findings]
    lines.append(f"report and reduced programs in {out}")
    return "\n".join(lines)


def _conform(args) -> int:
    from .frontends.conform import BACKEND_ERROR, FAIL, PASS, conform
    from .frontends.progress import ProgressLine

    files = expand_paths(args.paths)
    if not files:
        raise UsageError("no .mlir files under " + ", ".join(args.paths))
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
    return 1 if counts[FAIL] or counts[BACKEND_ERROR] else 0
