"""Tools for people who debug lowered programs, test other backends, or learn how jit lowers.

Every tool is a :class:`~stablehlo_interp.Listener` on the one run loop, with
a function that runs a target on its arguments as ``si.run`` does
(:mod:`stablehlo_interp.program.calls`: a JAX function, a ``Lowered`` or an
``Exported`` with the function's arguments, a module with ``@main``'s):

=====================  =====================================================
``trace``              every op run, with value summaries (:mod:`.trace`)
``find_nonfinite``     the op a result's NaN or inf came from (:mod:`.nonfinite`)
``probe``              intermediate values saved to .npz (:mod:`.probes`)
``break_at``, ``debug`` stop at an op, inspect, replace (:mod:`.breakpoints`)
``compare``            first op that differs on another backend (:mod:`.compare`); a loop or
                       conditional where it arises stepped there (``LoopStepping``, :mod:`.loops`)
``codegen_options``    XLA CPU recompiled under each candidate XLA flag: the flags that restore
                       the interpreter's result (:mod:`.codegen`)
``fuzz``               random programs here and on a backend; findings reduced (:mod:`.fuzz`)
``explain``            jaxpr, StableHLO and the run side by side (:mod:`.explain`)
``explore``            one HTML page: source, jaxpr, StableHLO, graph, values (:mod:`.explorer`);
                       with ``model_explorer=DIR``, overlays for Google's Model Explorer (:mod:`.model_explorer`)
``profile``            each op name's (or source line's) own time, calls, share of the run (:mod:`.profile`)
``passes``             XLA CPU's pipeline pass by pass on the interpreter: the first pass that
                       changes the values (:mod:`.passes`)
``portability``        where the result depends on the implementation (:mod:`.portability`)
``validation``         results checked against the declared types (:mod:`.validation`)
``CollectiveTraffic``  bytes each process sends and receives at each collective (sharding/traffic.py)
=====================  =====================================================

See docs/tools.md.
"""

from ..backends import (Backend, BackendCompileError, BackendCrash, BackendError, CommandBackend, InterpreterBackend,
                        IreeBackend, JaxBackend, JaxChildBackend, RecordedBackend, RecordingBackend)
from ..judge.difference import DEFAULT_TOLERANCES, Difference
from ..judge.summary import ValueSummary, summarize
from ..sharding.traffic import CollectiveTraffic, Transfer
from . import validation
from .breakpoints import BreakHit, Breakpoint, Debugger, break_at, debug
from .codegen import CodegenReport, FlagRun, codegen_options
from .compare import Comparison, Divergence, PerDeviceComparison, compare
from .explain import Explanation, explain
from .explorer import Exploration, explore
from .fuzz.campaign import Finding as FuzzFinding, FuzzReport, fuzz
from .loops import LoopStepping
from .nonfinite import (NonFiniteFinder, NonFiniteOrigin, NonFiniteOrigins, NonFiniteReport, NonFiniteTracer,
                        PerDeviceNonFinite, find_nonfinite)
from .passes import PassesReport, StageRun, passes
from .per_device import run_per_device
from .portability import Finding, PortabilityReport, portability
from .probes import Probe, ProbeFile, ProbeRecorder, load_probes, probe
from .profile import OpTime, Profile, Profiler, profile
from .region_calls import RegionCall
from .trace import NoMatchWarning, OpRecord, Trace, TraceRecorder, trace

__all__ = [
    "Backend", "BackendCompileError", "BackendCrash", "BackendError", "BreakHit", "Breakpoint", "CollectiveTraffic",
    "CodegenReport", "CommandBackend", "Comparison", "DEFAULT_TOLERANCES", "Debugger", "Difference", "Divergence",
    "Exploration", "Explanation", "Finding", "FlagRun", "FuzzFinding", "FuzzReport", "InterpreterBackend", "IreeBackend",
    "JaxBackend", "JaxChildBackend", "LoopStepping", "NoMatchWarning", "NonFiniteFinder", "NonFiniteOrigin", "NonFiniteOrigins",
    "NonFiniteReport", "NonFiniteTracer",
    "OpRecord", "OpTime", "PassesReport", "PerDeviceComparison", "PerDeviceNonFinite", "PortabilityReport", "Profile",
    "Profiler", "Probe", "ProbeFile", "ProbeRecorder", "RecordedBackend", "RecordingBackend", "RegionCall", "StageRun",
    "Trace", "TraceRecorder", "Transfer", "ValueSummary", "break_at", "codegen_options", "compare", "debug", "explain",
    "explore", "find_nonfinite", "fuzz", "load_probes", "passes", "portability", "probe", "profile", "run_per_device",
    "summarize",
    "trace", "validation",
]
