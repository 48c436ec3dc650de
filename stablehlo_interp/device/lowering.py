"""How JAX lowers primitives for the interp platform: like the CPU.

Most lowering rules are platform-independent, but some primitives have rules
registered per platform only (linear algebra through LAPACK custom calls,
``debug_callback``, RNG bit generation, ...): without a rule for ``interp``
those primitives could not be lowered for it at all. JAX looks rules up in
``mlir._platform_specific_lowerings[platform]``; this module makes the
``interp`` entry a ``ChainMap`` over the CPU's, so every CPU rule (including
those registered later, by modules imported after the plugin) also lowers
for ``interp``, and a rule registered for ``interp`` itself takes precedence.
The resulting custom calls (``lapack_*``, ``ducc_fft`` ...) are implemented by
the interpreter's custom-call registry. Where a CPU rule only adds the limits
of XLA's CPU (:func:`_cpu_limits_only`), ``interp`` keeps the generic rule.

JAX also keeps a list of the platforms that implement buffer donation (and
otherwise ignores ``donate_argnums`` with a warning); the device does, see
``runtime.Executable.execute``.

``lax.platform_dependent`` picks the ``cpu`` branch on ``interp`` where no branch names
``interp`` (:func:`_platform_branches_as_cpu`): the code written for the CPU is the code
the device checks, as it is for every other rule. So does Pallas's ``mpmd_map`` (what
``pl.core_map`` binds, e.g. a TPU kernel's cores in interpret mode), whose one rule
picks its lowering by platform name and refuses others (:func:`_register_pallas_as_cpu`).

Host callbacks are the exception: ``emit_python_callback`` refuses platforms
other than cpu/cuda/rocm/tpu; ``host_callbacks.py`` handles them, and
``buffer_callbacks.py`` the buffer callbacks JAX lowers for cpu/cuda/rocm only. So is
``jax.debug.inspect_array_sharding``, which XLA answers while it partitions:
``inspect_sharding.py``.
"""

from __future__ import annotations

import collections

from ..program.calls import INTERP_PLATFORM as PLATFORM



def _cpu_limits_only() -> tuple:
    """Primitives whose CPU rule only adds limits of XLA's CPU: ``dot_general``
    refuses the dot algorithms it does not implement (``BF16_BF16_F32_X9``,
    ``TF32_TF32_F32`` ...). ``interp`` lowers them with the generic rule and the
    interpreter runs every algorithm the spec defines."""
    from jax._src.lax import lax as lax_internal

    return (lax_internal.dot_general_p,)


def _call_exported_like_the_cpu(generic_rule):
    """The lowering of ``Exported.call`` on ``interp``: a function exported for platforms
    that include ``cpu`` but not ``interp`` (``platforms=("cpu", "tpu")``) runs its CPU
    lowering, as every primitive on ``interp`` lowers like the CPU. JAX's own rule
    picks the exported module's branch for the platform being lowered for and refuses
    one it was not exported for; to it, ``interp`` is presented as ``cpu``. An
    export that names ``interp`` keeps its own branch; one with neither is refused,
    with JAX's message and the way to run it all the same."""
    from jax.export import DisabledSafetyCheck

    def rule(ctx, *args, exported):
        platforms = ctx.module_context.platforms
        if PLATFORM in platforms and PLATFORM not in exported.platforms:
            if "cpu" in exported.platforms:
                as_cpu = tuple("cpu" if platform == PLATFORM else platform for platform in platforms)
                as_cpu_ctx = ctx.replace(module_context=ctx.module_context.replace(platforms=as_cpu))
                results = generic_rule(as_cpu_ctx, *args, exported=exported)
                if as_cpu_ctx.tokens_out is not None:   # an export with ordered effects threads their tokens
                    ctx.set_tokens_out(as_cpu_ctx.tokens_out)
                return results
            if DisabledSafetyCheck.platform() not in exported.disabled_safety_checks:
                raise ValueError(
                    f"Function '{exported.fun_name}' was exported for platforms '{exported.platforms}' but it is "
                    f"used on '{tuple(platforms)}'. The interp device runs the 'cpu' lowering of an export made "
                    "for it (platforms=(..., 'cpu', ...)); stablehlo_interp.run(exported, *args) runs this one.")
        return generic_rule(ctx, *args, exported=exported)

    return rule


def _platform_branches_as_cpu(branches_platforms: tuple) -> tuple:
    """``lax.platform_dependent``'s branches (a tuple of platform tuples, ``None`` for the
    default branch) with ``interp`` joining the branch that names ``cpu``, unless a branch
    names ``interp`` itself. ``interp`` models XLA's CPU: it lowers with the CPU's rules and
    runs the CPU's custom calls, so the branch written for the CPU is the one it runs (JAX's
    own tests of ``platform_dependent`` expect the cpu branch where they run for cpu)."""
    names = {name for platforms in branches_platforms if platforms is not None for name in platforms}
    if PLATFORM in names or "cpu" not in names:
        return branches_platforms
    return tuple(platforms + (PLATFORM,) if platforms is not None and "cpu" in platforms else platforms
                 for platforms in branches_platforms)


def _register_platform_dependent_as_cpu(mlir) -> None:
    """``platform_dependent`` is a ``cond`` whose index is a ``platform_index``; both
    lowering rules read the branches' platforms (``platforms``, ``branches_platforms``),
    and both get them with ``interp`` in the cpu branch."""
    from jax._src.lax.control_flow import conditionals

    index_rule = mlir._lowerings[conditionals.platform_index_p]
    cond_rule = mlir._lowerings[conditionals.cond_p]

    def platform_index(ctx, *args, platforms):
        return index_rule.rule(ctx, *args, platforms=_platform_branches_as_cpu(platforms))

    def cond(ctx, *args, **params):
        if params.get("branches_platforms") is not None:
            params["branches_platforms"] = _platform_branches_as_cpu(params["branches_platforms"])
        return cond_rule.rule(ctx, *args, **params)

    mlir.register_lowering(conditionals.platform_index_p, platform_index, platform=PLATFORM,
                           inline=index_rule.inline)
    mlir.register_lowering(conditionals.cond_p, cond, platform=PLATFORM, inline=cond_rule.inline)


def _register_pallas_as_cpu(mlir) -> None:
    """``mpmd_map`` lowers on ``interp`` as on the CPU: JAX's rule for it is registered for
    every platform and refuses those it does not name ("Unsupported platform"); the CPU
    gets its fallback lowering, which runs each mesh's function in turn."""
    from jax._src.pallas import mpmd

    mlir.register_lowering(mpmd.mpmd_map_p, mpmd._mpmd_map_fallback_lowering, platform=PLATFORM)


def register() -> None:
    from jax._src.interpreters import mlir

    rules = mlir._platform_specific_lowerings
    current = rules.get(PLATFORM)
    if isinstance(current, collections.ChainMap):
        return
    rules[PLATFORM] = collections.ChainMap(dict(current or {}), rules["cpu"])
    for primitive in _cpu_limits_only():
        rules[PLATFORM].maps[0].setdefault(primitive, mlir._lowerings[primitive])
    from jax._src.export import _export

    generic = mlir._lowerings[_export.call_exported_p]
    mlir.register_lowering(_export.call_exported_p, _call_exported_like_the_cpu(generic.rule), platform=PLATFORM,
                           inline=generic.inline)
    _register_platform_dependent_as_cpu(mlir)
    _register_pallas_as_cpu(mlir)
    if PLATFORM not in mlir._platforms_with_donation:
        mlir._platforms_with_donation.append(PLATFORM)
    from . import buffer_callbacks, host_callbacks, inspect_sharding

    buffer_callbacks.register()
    host_callbacks.register()
    inspect_sharding.register()
