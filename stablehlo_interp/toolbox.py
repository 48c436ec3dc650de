"""Every tool in one table: its name, where it lives, what ``si`` exports of it, and its
command line. ``si``'s tool exports (``stablehlo_interp/__init__.py``) and the
``stablehlo-interp`` commands (``cli.py``) are made from :data:`TOOLS`; nothing else
lists them (CONTRIBUTING.md, "Where a new tool goes").

A row's ``exports`` are names of its ``module`` that ``si`` hands out, loaded on first
use (JAX imports this package when it finds the device plugin, and most programs never
need a tool). A row with a ``command`` is also ``stablehlo-interp NAME``: its
``arguments`` make the command's parser and ``cli.py``'s function ``command_NAME(args)``
runs it, returning the exit status (docs/cli.md, "Exit status").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .engine.semantics import SEMANTICS, SPEC


@dataclass(frozen=True)
class Argument:
    """One command-line argument: ``argparse``'s ``add_argument(*flags, **options)``."""

    flags: tuple
    options: dict

    def __init__(self, *flags: str, **options):
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "options", options)


@dataclass(frozen=True)
class Command:
    """A tool's command line: a one-line ``help``, the ``description`` its ``--help`` shows,
    and its ``arguments``."""

    help: str
    description: str
    arguments: tuple = ()


@dataclass(frozen=True)
class Tool:
    name: str                 # si.NAME (when exported) and `stablehlo-interp NAME` (with a command)
    module: str               # the module that holds it, in the package
    exports: tuple = ()       # the names si exports from the module
    command: Command | None = None
    doc: str = field(default="docs/tools.md", compare=False)   # where users read about it


# Arguments several commands share.
INPUTS = Argument("--input", "-i", action="append", default=[], metavar="INPUT",
                  help="an argument: a .npy file (one argument), a .npz file (several, in the order they were "
                       "saved, or by argument name) or a Python literal such as 2.5 or '[[1, 2], [3, 4]]' "
                       "(converted to the argument's type); repeat for each")
PROGRAM = (Argument("file", help="the module"),
           Argument("--function", "-f", help="the function to run (default: @main, or the only public one)"),
           INPUTS)
BACKEND = (Argument("--backend", "-b", default="cpu",
                    help="a JAX platform name (cpu, tpu, ...), iree / iree:TARGET (e.g. iree:llvm-cpu; the 'iree' "
                         "extra), reference (StableHLO's C++ reference interpreter in jaxlib), or recorded:FOLDER "
                         "(answers kept by --record) (default: cpu)"),
           Argument("--backend-option", action="append", default=[], metavar="FLAG",
                    help="an extra flag for IREE's compiler, e.g. "
                         "--backend-option=--iree-input-demote-f64-to-f32=true; repeat for each"),
           Argument("--backend-command", metavar="COMMAND",
                    help="instead of --backend, a command that runs each program: {mlir} is the module's file, "
                         "{inputs} its .npy inputs, {outputs} the directory for result_N.npy (docs/conformance.md)"),
           Argument("--record", metavar="FOLDER",
                    help="keep the backend's answers in FOLDER, to play them back later with --backend "
                         "recorded:FOLDER where the backend is absent (docs/conformance.md)"))
TOLERANCE = (Argument("--rtol", type=float, help="relative tolerance for every float type (with --atol)"),
             Argument("--atol", type=float, help="absolute tolerance for every float type (with --rtol)"))
PER_DEVICE = Argument("--per-device", action="store_true",
                      help="a sharded module runs as XLA runs it: each device its partitioned program "
                           "(docs/sharding.md); where Shardy cannot partition it, a warning and the global program")
TEST_FILES = (Argument("paths", nargs="+", metavar="PATH", help="test files, or directories of *.mlir files"),
              Argument("--include-disabled", action="store_true",
                       help="also run files whose interpreter RUN line upstream disabled (RUN-DISABLED)"),
              Argument("--junit-xml", metavar="PATH", help="also write a JUnit XML report"),
              Argument("-j", "--jobs", type=int, default=1, metavar="N", help="run files in N processes"))


TOOLS = (
    Tool("run", "program", command=Command(
        "run a function of a module and print its results",
        "Run a function of a module (MLIR text or bytecode, or a StableHLO portable artifact) and print its results.",
        (*PROGRAM,
         Argument("--output", "-o", metavar="OUT.npz",
                  help="also save the results to a .npz file (result_0, result_1, ...)"),
         Argument("--full", action="store_true", help="print every element of large results"),
         Argument("--semantics", choices=SEMANTICS, default=SPEC,
                  help="follow the StableHLO spec (default) or XLA where they differ (docs/semantics.md)"),
         Argument("--portability", action="store_true",
                  help="after the results, list every op whose result depends on the implementation: behaviour "
                       "the spec leaves open or XLA does differently (docs/semantics.md)"))), doc="docs/cli.md"),
    Tool("test", "conformance.testfile", command=Command(
        "run files written like StableHLO's interpreter tests",
        "Run test files: '// -----' splits a file into modules; each public function without arguments is a "
        "test, and its check ops (check.expect_eq ...) decide whether it passes.",
        (*TEST_FILES,
         Argument("--verbose", "-v", action="store_true",
                  help="list every test, not only failures, with the time of each file"),
         Argument("--probe-output-dir", metavar="DIR",
                  help="where interpreter.probe saves values (default: a temporary directory per file)"))),
        doc="docs/cli.md"),
    Tool("conform", "conformance.conform", ("conform",), Command(
        "judge a backend with test files (StableHLO's format)",
        "Run each test of the files on a backend with its check ops turned into results, judge the backend's "
        "values with the file's checks and against the interpreter (docs/conformance.md).",
        (*TEST_FILES, *BACKEND,
         Argument("--verbose", "-v", action="store_true", help="list every test, not only the others"),
         Argument("--json", metavar="PATH", help="also write the results as JSON"),
         Argument("--scoreboard", metavar="OUT.md",
                  help="instead, write a scoreboard of the interpreter and of each --against backend over the "
                       "files, by outcome and op family (docs/scoreboard.md)"),
         Argument("--against", action="append", default=[], metavar="NAME=SPEC",
                  help="with --scoreboard: a column, SPEC a backend as --backend takes it or results:FILE (a "
                       "conform --json file written elsewhere); repeat for each"),
         Argument("--campaign", type=int, default=0, metavar="N",
                  help="with --scoreboard: also run a generator campaign of N programs (seed 0) on each live "
                       "backend"))), doc="docs/conformance.md"),
    Tool("trace", "tools.trace", ("trace",), Command(
        "run a function and print every op it executes",
        "Run a function and print each executed op (inside regions too) with a summary of its results and its "
        "source line.",
        (*PROGRAM,
         Argument("--head", type=int, default=2, help="region calls shown before the folded ones"),
         Argument("--tail", type=int, default=1, help="region calls shown after the folded ones"),
         Argument("--json", metavar="OUT.json", help="also save the trace as JSON records"),
         Argument("--nonfinite", action="store_true",
                  help="instead, report where the NaNs and infs of the results came from, and why "
                       "(the decisions and failed LAPACK calls behind them)"),
         Argument("--first-nonfinite", action="store_true",
                  help="instead, report the first op that makes a NaN or inf, whether or not it reaches a result"),
         Argument("--probe", metavar="OUT.npz",
                  help="instead, save intermediate values (with an index) to a .npz file"),
         Argument("--select", action="append", metavar="OP_OR_LINE",
                  help="with --probe: save only these ops (op name, or FILE:LINE); repeat"),
         Argument("--every-iteration", action="store_true",
                  help="with --probe: save values of every loop iteration, not only the last"),
         PER_DEVICE))),
    Tool("find_nonfinite", "tools.nonfinite", ("find_nonfinite",)),
    Tool("debug_nans", "tools.debug_nans", ("debug_nans",)),
    Tool("probe", "tools.probes", ("probe", "load_probes")),
    Tool("break_at", "tools.breakpoints", ("break_at", "debug")),
    Tool("profile", "tools.profile", ("profile",), Command(
        "run a function and print where its time goes, by op",
        "Run a function and print the own time of each op name (or source line): its share of the run, calls, "
        "time per call.",
        (*PROGRAM,
         Argument("--by", choices=("op", "line"), default="op", help="group by op name or source line"),
         Argument("--top", type=int, default=20, help="rows shown, most time first"),
         Argument("--repeat", type=int, default=1, metavar="R",
                  help="run R times and keep the profile of the run with the least time in ops")))),
    Tool("explain", "tools.explain", ("explain",), Command(
        "print the module and its run, op by op, by source line",
        "Print the module, then run it and print each op with its results under the source line it came from.",
        PROGRAM)),
    Tool("explore", "tools.explorer", ("explore",), Command(
        "write the explorer page (module, graph, values; HTML)",
        "Run the function and write one self-contained HTML page: the module, its dataflow graph and each op's "
        "values, linked by source line, with the op a non-finite result came from marked.",
        (*PROGRAM,   # without --input, a function that takes arguments is drawn, not run
         Argument("--output", "-o", metavar="OUT.html", help="the page (default: FILE with .html)"),
         Argument("--backend", "-b", help="also mark the first op whose value differs on this JAX backend (e.g. cpu)"),
         Argument("--model-explorer", metavar="DIR",
                  help="also write the module and the run's findings per op as Model Explorer's node data into DIR "
                       "(needs the model-explorer extra); with --per-device, the per-device program and each "
                       "device's node data"),
         Argument("--xla-stages", action="store_true",
                  help="also show XLA CPU's optimized program, as text and as a graph (fusions that open), linked "
                       "to the source lines, and the passes that changed it, stepped through one by one, the one "
                       "that changed the values marked (compiled pass by pass in a child, as 'passes' does)"),
         PER_DEVICE))),
    Tool("compare", "tools.compare", ("compare",), Command(
        "compare with another backend; find the first divergent op",
        "Run @main here and on another backend; when the results differ, find the first op whose value differs.",
        (*PROGRAM, *BACKEND, *TOLERANCE, PER_DEVICE))),
    Tool("codegen", "tools.codegen", ("codegen_options",), Command(
        "recompile on XLA's CPU under each candidate XLA flag; which restore the result",
        "Run @main here and on XLA's CPU; when XLA's result differs beyond rounding noise, recompile it under each "
        "candidate XLA flag (--xla_cpu_max_isa=SSE4_2, --xla_cpu_enable_fast_math=false ...), each in a child "
        "process of its own, and name the flags under which it equals the interpreter's (docs/tools.md).",
        (*PROGRAM,
         Argument("--flags", metavar="XLA_FLAGS",
                  help="the XLA flags every compile starts from, as XLA_FLAGS takes them, e.g. "
                       "--flags='--xla_cpu_enable_fast_math=true' (default: the environment's XLA_FLAGS)"),
         Argument("--option", action="append", metavar="FLAG",
                  help="a candidate flag to try instead of the built-in list, e.g. "
                       "--option=--xla_cpu_max_isa=SSE4_2; repeat for each"),
         Argument("--jobs", "-j", type=int, default=2, help="compiles at a time (default 2)"),
         *TOLERANCE))),
    Tool("fuzz", "tools.fuzz.campaign", ("fuzz",), Command(
        "random programs here and on a backend; differences reduced",
        "Generate random StableHLO programs from a seed, run each here and on the backend, and reduce every "
        "difference beyond rounding, crash or compile failure to a minimal program (docs/tools.md).",
        (*BACKEND,
         Argument("--seed", "-s", type=int, default=0, help="the campaign's seed (default 0)"),
         Argument("--count", "-n", type=int, default=100, help="how many programs (default 100)"),
         Argument("--jobs", "-j", type=int, default=1, help="worker processes (default 1)"),
         Argument("--out", "-o", metavar="DIR",
                  help="write report.md, report.json and each finding's program.mlir and arg*.npy there"),
         Argument("--max-ops", type=int, default=12, help="ops per program at most (default 12)"),
         Argument("--op", action="append", default=[], metavar="OP",
                  help="generate only this op (without 'stablehlo.'); repeat for each"),
         Argument("--element-type", action="append", default=[], metavar="TYPE",
                  help="give new values only this element type (f32, bf16, i4 ...); repeat for each"),
         Argument("--no-reduce", action="store_true", help="report findings without reducing them"),
         Argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                  help="seconds a program's check may take, both sides; longer is a 'timed out' finding "
                       "(default 60)"),
         Argument("--ray", metavar="ADDRESS",
                  help="check the programs as tasks on this Ray cluster ('local': start one here; the ray extra)")))),
    Tool("passes", "tools.passes", ("passes",), Command(
        "run XLA CPU's pipeline pass by pass; the first pass that changes the values",
        "Compile @main with XLA's CPU pipeline, run the module after each pass that changed it on the "
        "interpreter, judge each against the program by its rounding noise, and name the first pass after "
        "which it computes something else (docs/tools.md).",
        (*PROGRAM,
         Argument("--every-stage", action="store_true",
                  help="run every stage that changed the module, not a bisection of them"),
         Argument("--no-flags", action="store_true",
                  help="where every pass keeps the values and the compiled program does not, do not recompile it "
                       "under each candidate XLA flag (codegen)"),
         *TOLERANCE))),
    Tool("portability", "tools.portability", ("portability",)),
    Tool("run_per_device", "tools.per_device", ("run_per_device",), doc="docs/sharding.md"),
    Tool("validation", "tools", ("validation",)),
    Tool("on_device", "device.session", ("on_device",), doc="docs/device.md"),
)


def exports() -> dict:
    """``{name si exports: the module (in the package) that holds it}``."""
    return {name: tool.module for tool in TOOLS for name in tool.exports}


def commands() -> tuple:
    """The tools with a command line, in the order ``stablehlo-interp --help`` lists them."""
    return tuple(tool for tool in TOOLS if tool.command is not None)
