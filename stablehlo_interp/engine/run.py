"""Run time: execute the plans built by plan.py.

The run loop reads operands from a list of value slots, calls each step's
runner, stores its results and releases the slots whose last use it was. It
never touches MLIR objects. When listeners are attached (trace, probes, NaN
search, breakpoints, backend diff) the same loop runs in its observed form,
which reports each op before and after it runs and lets a listener replace the
results or stop the run.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InterpreterError, OpError, OpExecutionError, StopExecution, counted
from .grid import OUTSIDE_GRID, Process
from .hostio import HostQueues, Instruments
from .plan import BINARY, CALL, SINGLE, TERNARY, UNARY, OpInfo, Region, RunProgram, Step
from .semantics import RULES, SEMANTICS, SPEC, Report, semantics_named


try:  # NumPy's floating-point error setting, and the setting "ignore all" built once
    from numpy._core._ufunc_config import _extobj_contextvar as _NUMPY_ERRORS, _make_extobj

    _IGNORE_ERRORS = _make_extobj(all="ignore")
    del _make_extobj
except ImportError:  # another NumPy layout
    _NUMPY_ERRORS = None


class numpy_warnings_off:
    """``with numpy_warnings_off():`` NumPy's floating-point warnings are off.

    NaN, inf and overflow are values the spec defines, not errors. The same as
    ``np.errstate(all="ignore")``, with the setting built once instead of at every
    entry (it is entered once per run, which matters for short programs; a run's
    entry, :meth:`Execution.run_entry`, sets it without this object).
    """

    __slots__ = ("_token",)

    def __enter__(self):
        if _NUMPY_ERRORS is None:
            self._token = np.errstate(all="ignore")
            self._token.__enter__()
        else:
            self._token = _NUMPY_ERRORS.set(_IGNORE_ERRORS)

    def __exit__(self, *error):
        if _NUMPY_ERRORS is None:
            self._token.__exit__(*error)
        else:
            _NUMPY_ERRORS.reset(self._token)


@dataclass(frozen=True)
class RegionFrame:
    """An active region: the op that owns it, which of its regions, which call.

    ``call`` counts from 0: for ``stablehlo.while`` the body's call number is the
    loop iteration. ``vectorized`` marks a region that an op runs once on whole
    tensors where the program applies it element by element (reduce, map, sort
    ... with element-wise bodies): its values have extra leading dimensions.
    """

    step: Step
    region_index: int
    call: int
    process: int = 0
    vectorized: bool = False


class RegionStack(tuple):
    """The regions enclosing an op: a tuple of :class:`RegionFrame`, outermost first
    (empty for ops of the entry function), and ``process``, the
    :class:`~stablehlo_interp.engine.grid.Process` running the op (its ``id``,
    ``replica_id``, ``partition_id``)."""

    def __new__(cls, frames, process):
        stack = super().__new__(cls, frames)
        stack.process = process
        return stack


class Listener:
    """Base class for tools that observe a run. Override what you need.

    ``stack`` is a :class:`RegionStack`: the enclosing regions, outermost first,
    and ``stack.process``, the process that runs the op.
    """

    def before_op(self, step: Step, operands: list, stack: tuple) -> None:
        """Called before an op runs. Raise StopExecution to stop the run."""

    def after_op(self, step: Step, operands: list, results: list, stack: tuple) -> list | None:
        """Called after an op ran. Return a list to replace its results, or None."""
        return None

    def on_report(self, report: Report) -> None:
        """Called when an op meets behaviour the spec leaves to the implementation or
        where XLA departs from it (engine/semantics.py), before its ``after_op``."""

    def enter_run(self, region: Region, arguments: Sequence[Any], process: Process) -> None:
        """Called as a run of an entry function begins (in a grid, in each process), with
        the function's region and arguments, before its first op."""

    def exit_run(self, region: Region, arguments: Sequence[Any], results: Sequence[Any], process: Process) -> None:
        """Called as the run ends, with its results. Raise StopExecution to stop the run
        there: the caller gets it instead of the results."""


class RunContext:
    """The state of one run, shared by every process of it: the listeners, the host
    side of transfer ops (``io``, empty queues made on first use when the caller gave
    none), the ``semantics`` it follows (``"spec"`` or ``"xla"``, engine/semantics.py),
    where ``interpreter.print`` and ``interpreter.probe`` write (``instruments``, made
    on first use too) and, when a caller asks for them, the per-device results of
    manual computations (``local_results``, see ops/sdy.py). ``partials``: values
    unreduced along mesh axes are carried as per-device partials (the device's global
    programs, sharding/unreduced.py); otherwise manual code's unreduced results are summed.
    ``partitioned_callbacks``: in a global program over several devices, the tiling of each
    operand of each partitioned host callback, by ``id`` of its OpInfo, which the callback
    calls its function with once per device (ops/host_callback.py; Program.execute sets it).
    ``loops``: a list in which the run keeps an :class:`OpenLoop` for each ``while`` it is
    in, outermost first, for a progress line another thread reads (tools/progress.py);
    None (the default): not kept, at no cost."""

    __slots__ = ("listeners", "_io", "local_results", "semantics", "_instruments", "partials",
                 "partitioned_callbacks", "loops")

    def __init__(self, listeners=(), io: HostQueues | None = None, local_results: dict | None = None,
                 semantics: str = SPEC, instruments: Instruments | None = None, partials: bool = False,
                 partitioned_callbacks: dict | None = None, loops: list | None = None):
        self.listeners = listeners if type(listeners) is tuple else tuple(listeners)
        self._io = io
        self.local_results = local_results
        self.semantics = semantics if semantics in SEMANTICS else semantics_named(semantics)
        self._instruments = instruments
        self.partials = partials
        self.partitioned_callbacks = partitioned_callbacks
        self.loops = loops

    @property
    def io(self) -> HostQueues:
        if self._io is None:
            self._io = HostQueues()
        return self._io

    @property
    def instruments(self) -> Instruments:
        if self._instruments is None:
            self._instruments = Instruments()
        return self._instruments

    def with_io(self, io: HostQueues) -> "RunContext":
        """The same run with other host queues (a grid fed by its own infeed)."""
        return RunContext(self.listeners, io, self.local_results, self.semantics, self.instruments, self.partials,
                          self.partitioned_callbacks, self.loops)


class OpenLoop:
    """A ``while`` a run is in (RunContext.loops): its op and the iterations it has begun."""

    __slots__ = ("info", "iterations")

    def __init__(self, info: OpInfo):
        self.info = info
        self.iterations = 0


class BoundRegion:
    """A region bound to the values it captures, callable by its op's runner."""

    __slots__ = ("region", "captures", "execution", "step", "index", "calls", "vectorized")

    def __init__(self, region: Region, captures: list, execution: "Execution", step: Step, index: int,
                 vectorized: bool = False):
        self.region = region
        self.captures = captures
        self.execution = execution
        self.step = step
        self.index = index
        self.calls = 0
        self.vectorized = vectorized

    def as_vectorized(self) -> "BoundRegion":
        """The same region, called on whole tensors (see RegionFrame.vectorized)."""
        return BoundRegion(self.region, self.captures, self.execution, self.step, self.index, True)

    def for_process(self, process: Process) -> "BoundRegion":
        """The same region run by ``process`` of a grid: its own Execution in the same
        run, with the enclosing frames so far."""
        execution = self.execution.for_process(process)
        return BoundRegion(self.region, self.captures, execution, self.step, self.index, self.vectorized)

    def __call__(self, *args) -> list:
        call = self.calls
        self.calls = call + 1
        try:
            return self.execution.run_region(self.region, args, self.captures, self, call)
        except OpError as error:
            self.add_enclosing(error, call)
            raise

    def repeated(self):
        """The region as a function of the sequence of its arguments, returning the
        sequence of its outputs, for a runner that calls it many times with as many
        arguments as its op's verified types say (``while``'s cond and body).
        Unobserved, the run loop with all but the arguments bound once: no argument
        check, no listener check, no Python frame but the loop's. Observed, the region
        itself: listeners see each call in its own numbered RegionFrame."""
        if self.execution.listeners:
            return lambda args: self(*args)
        region = self.region
        return functools.partial(_run_steps, region.flat_steps, tuple(self.captures), region.result_slots,
                                 region.output_values, self.execution, self)

    def unobserved(self, predicate: bool = False):
        """The run loop of this region with all but the arguments bound, for
        :func:`run_while`: a function of the sequence of its arguments returning the
        sequence of its outputs, or with ``predicate`` its one output itself. Its
        calls are not numbered: the caller numbers them for errors."""
        region = self.region
        outputs = operator.itemgetter(region.outputs[0]) if predicate else region.output_values
        return functools.partial(_run_steps, region.flat_steps, tuple(self.captures), region.result_slots,
                                 outputs, self.execution, None)

    def add_enclosing(self, error: OpError, call: int) -> None:
        """Say in ``error`` that it happened inside call ``call`` of this region."""
        _add_enclosing(error, self.step, self.region, call)

    @property
    def arg_types(self):
        return self.region.arg_types

    @property
    def output_types(self):
        return self.region.output_types


class Execution:
    """One process's part of a run: the run's context, the process running (in a
    grid, or the one process outside any) and, while observed, the stack of regions.
    Runners registered with ``execution=True`` receive it."""

    __slots__ = ("context", "listeners", "process", "_stack")

    def __init__(self, context: RunContext, process: Process = OUTSIDE_GRID, stack=()):
        self.context = context
        self.listeners = context.listeners
        self.process = process
        self._stack: list[RegionFrame] = list(stack) if stack else []

    @property
    def semantics(self) -> str:
        """The run's semantics, ``"spec"`` or ``"xla"`` (engine/semantics.py)."""
        return self.context.semantics

    @property
    def reporting(self) -> bool:
        """Whether a listener watches: ops look for :meth:`report`'s cases only then."""
        return bool(self.listeners)

    def report(self, info: OpInfo, rule: str, detail: str) -> None:
        """Tell the listeners that the op ``info`` met ``rule`` (a name in
        engine/semantics.py's RULES); ``detail`` says what happened."""
        report = Report(RULES[rule], info.name, info.location, detail, self.context.semantics,
                        RegionStack(self._stack, self.process))
        for listener in self.listeners:
            listener.on_report(report)

    @property
    def in_grid(self) -> bool:
        """Whether this runs as a process of a grid (Grid.run) rather than on its own."""
        return self.process is not OUTSIDE_GRID

    def for_process(self, process: Process, context: RunContext | None = None) -> "Execution":
        """The execution of ``process`` in the same run (listeners see it too), in
        ``context`` if given (the same run with other host queues)."""
        return Execution(context or self.context, process, self._stack)

    def run_entry(self, region: Region, args) -> list | tuple:
        """:meth:`run_region` for a function's region run from outside any op (a run's
        entry), with NumPy's floating-point warnings off (:class:`numpy_warnings_off`);
        returns the outputs as a sequence (a list for one output, else a tuple).

        Only the number of arguments is checked: every caller already has them in the
        region's types (Program.run and its kin check the user's; the device's come
        checked by jaxlib). Unobserved, it enters the run loop directly (a tiny
        program's run is a few microseconds, and each frame a tenth of one)."""
        if _NUMPY_ERRORS is None:
            with numpy_warnings_off():
                return self._run_entry_observed(region, args) if self.listeners else self.run_region(region, args)
        token = _NUMPY_ERRORS.set(_IGNORE_ERRORS)
        try:
            if not self.listeners:
                if len(args) != region.n_args:
                    raise _argument_count_error(region, args)
                return _run_steps(region.flat_steps, (), region.result_slots, region.output_values, self, None, args)
            return self._run_entry_observed(region, args)
        finally:
            _NUMPY_ERRORS.reset(token)

    def _run_entry_observed(self, region: Region, args) -> list:
        for listener in self.listeners:
            listener.enter_run(region, args, self.process)
        results = self.run_region(region, args)
        for listener in self.listeners:
            listener.exit_run(region, args, results, self.process)
        return results

    def run_region(self, region: Region, args, captures=(), bound: BoundRegion | None = None,
                   call: int = 0) -> list:
        if len(args) != region.n_args:
            raise _argument_count_error(region, args)
        if not self.listeners:
            return list(_run_steps(region.flat_steps, captures, region.result_slots, region.output_values, self,
                                   None, args))
        env = [*captures, *args, *region.result_slots]
        frame = bound and RegionFrame(bound.step, bound.index, call, self.process.id, bound.vectorized)
        if frame:
            self._stack.append(frame)
        try:
            _run_steps_observed(region.steps, env, self, RegionStack(self._stack, self.process))
        finally:
            if frame:
                self._stack.pop()
        return list(region.output_values(env))

    def run_alone(self, step: Step, operands, env=None) -> list:
        """``step``'s results on ``operands``, outside any run loop (a tool asking what
        the op makes of other values). ``env`` maps the enclosing region's slots to
        values, for what the op's regions capture (none needed when they capture
        nothing). No listener sees it. NumPy's floating-point warnings are off, as in a run
        (the regions it calls run their unobserved loop, whose runners on 0-d values report
        integer overflow through NumPy's error setting: ops/scalars.py)."""
        with numpy_warnings_off():
            return list(_results_of(step, step.run(*_leading_arguments(step, self, env or {}), *operands)))

    def bind(self, step: Step, env: list) -> tuple:
        """The step's regions bound to the values they capture from ``env`` (None for
        each when its runner never calls them: OpInfo.regions_called)."""
        if not step.info.regions_called:
            return (None,) * len(step.regions)
        bound = []  # a loop: nested comprehensions cost more than the binding itself
        for index, region in enumerate(step.regions):
            bound.append(BoundRegion(region, [env[s] for s in step.captures[index]], self, step, index))
        return tuple(bound)


def run_while(cond: BoundRegion, body: BoundRegion, values: Sequence) -> Sequence:
    """``while cond(values): values = body(values)`` unobserved (no listener, no loop
    counted: RunContext.loops), each region's run loop bound once
    (:meth:`BoundRegion.unobserved`): iteration ``k`` is call ``k`` of both regions,
    which an error leaving either says (as :meth:`BoundRegion.__call__` would), so
    neither call counts itself, and the condition's one output is not put in a list
    (a region call of a loop of four 0-d ops is a quarter of an iteration's time)."""
    test, step = cond.unobserved(predicate=True), body.unobserved()
    call = 0
    while True:
        try:
            if not test(values):
                return values
        except OpError as error:
            cond.add_enclosing(error, call)
            raise
        try:
            values = step(values)
        except OpError as error:
            body.add_enclosing(error, call)
            raise
        call += 1


def _add_enclosing(error: OpError, step: Step, region: Region, call: int) -> None:
    """Say in ``error`` that it happened inside call ``call`` of ``step``'s ``region``."""
    error.add_enclosing(step.info.name, step.info.location, f"{region.kind.name}, call {call}")


def _argument_count_error(region: Region, args) -> InterpreterError:
    return InterpreterError(f"{region.description} takes {counted(region.n_args, 'argument')}, got {len(args)}")


def _leading_arguments(step: Step, execution: Execution, env: list) -> tuple:
    """What a GENERAL step's runner takes before its operands: the Execution, the bound regions."""
    if step.regions:
        regions = execution.bind(step, env)
        return (execution, regions) if step.execution else (regions,)
    return (execution,) if step.execution else ()


def _results_of(step: Step, out) -> list | tuple:
    """The results a GENERAL step's runner returned, as a sequence of the op's result count."""
    if not step.variadic:
        return (out,)
    if type(out) not in (tuple, list) or len(out) != len(step.results):
        got = f"{len(out)} values" if type(out) in (tuple, list) else f"a {type(out).__name__}"
        raise OpExecutionError(step.info.name, step.info.location,
                               f"the implementation returned {got}; the op has {len(step.results)} results "
                               "(a variadic runner returns a tuple or list of all of them)")
    return out


# Whether a run has been asked to stop from outside (request_interrupt): the next op of
# a run, in any thread, raises KeyboardInterrupt instead of running. Process-wide, as the
# signal that asks it (the device's SIGINT handler, device/pjrt/interrupts.py) is.
_interrupt_requested = False


def request_interrupt(requested: bool = True) -> None:
    """Ask the run in progress to stop at its next op with ``KeyboardInterrupt`` (or,
    with False, withdraw the request). The first run loop to see it takes it."""
    global _interrupt_requested
    _interrupt_requested = requested


def _interrupt() -> KeyboardInterrupt:
    """The KeyboardInterrupt a run raises when asked to stop; the request is taken."""
    request_interrupt(False)
    return KeyboardInterrupt()


def _run_steps(program: RunProgram, head: tuple, tail: tuple, outputs, execution: Execution,
               bound: BoundRegion | None, args):
    """The run loop: a region's unobserved call. Its environment is ``head`` (the
    captures), the arguments (not checked) and ``tail`` (a slot per result, those
    computed at load filled in: Region.result_slots); it returns the values
    ``outputs`` takes from it (Region.output_values). A call of
    ``bound`` is numbered (BoundRegion.calls) for the ``inside ...`` line that an
    error gains as it leaves the region. The arguments come last and the rest is
    the same for every call of a region: BoundRegion.repeated binds it once.

    A CALL or BRANCH step (plan.RegionCallRunner: ``func.call``, ``composite``; ``if``,
    ``case``) is its region run here, its ``run`` the region's index or the function
    choosing it: each run of such an op binds its regions afresh, so an error inside
    is in the region's call 0."""
    env = [*head, *args, *tail]
    if bound is not None:
        call = bound.calls
        bound.calls = call + 1
    step: Any = None   # the op's Step, or its index: program.step(step) is the Step
    kind = called = -1   # called: the region a CALL or BRANCH step runs
    try:
        try:
            for run, operands, results, release, kind, step in program:
                if _interrupt_requested:
                    raise _interrupt()
                if kind == BINARY:   # (the commonest first)
                    env[results] = run(env[operands[0]], env[operands[1]])
                elif kind == UNARY:
                    env[results] = run(env[operands])
                elif kind == TERNARY:   # (a comprehension would cost a Python frame)
                    env[results] = run(env[operands[0]], env[operands[1]], env[operands[2]])
                elif kind == SINGLE:
                    env[results] = run(*[env[i] for i in operands])
                elif kind >= CALL:
                    if kind == CALL:
                        called, arguments = run, [env[i] for i in operands]
                    else:
                        called, arguments = run(env[operands]), []
                    region = step.regions[called]
                    captures = step.captures[called]
                    out = _run_steps(region.flat_steps, [env[i] for i in captures] if captures else (),
                                     region.result_slots, region.output_values, execution, None, arguments)
                    for slot, value in zip(results, out):
                        env[slot] = value
                else:
                    unbound = step.unbound
                    if unbound is None:
                        out = run(*_leading_arguments(step, execution, env), *[env[i] for i in operands])
                    else:   # (Execution.bind's answer for regions never called, made once: a reduce)
                        out = run(execution, unbound, *[env[i] for i in operands])
                    for slot, value in zip(results, _results_of(step, out)):
                        env[slot] = value
                for slot in release:
                    env[slot] = None
        except OpError as error:
            if kind >= CALL:   # (what raised it ran inside the region)
                _add_enclosing(error, step, step.regions[called], 0)
            raise
        except StopExecution:
            raise
        except Exception as error:
            raise _op_failure(step if step is None else program.step(step), error) from error
    except OpError as error:
        if bound is not None:
            bound.add_enclosing(error, call)
        raise
    return outputs(env)


def _run_steps_observed(steps, env, execution, stack) -> None:
    listeners = execution.listeners
    step = None
    try:
        for step in steps:
            if _interrupt_requested:
                raise _interrupt()
            operands = [env[i] for i in step.operands]
            for listener in listeners:
                listener.before_op(step, operands, stack)
            results = list(_results_of(step, step.run(*_leading_arguments(step, execution, env), *operands)))
            for rule, check in step.info.watches:
                detail = check(*operands, *results)
                if detail:
                    execution.report(step.info, rule, detail)
            for listener in listeners:
                replaced = listener.after_op(step, operands, results, stack)
                if replaced is not None:
                    results = list(replaced)
            for slot, value in zip(step.results, results):
                env[slot] = value
            for slot in step.release:
                env[slot] = None
    except (OpError, StopExecution):
        raise
    except Exception as error:
        raise _op_failure(step, error) from error


def _op_failure(step: Step | None, error: Exception) -> Exception:
    if step is None:
        return error
    return OpExecutionError(step.info.name, step.info.location, f"{type(error).__name__}: {error}")
