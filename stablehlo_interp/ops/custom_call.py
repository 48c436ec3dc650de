"""stablehlo.custom_call: dispatch on ``call_target_name`` to the custom-call registry."""

from __future__ import annotations

from ..engine import registry
from ..engine.registry import op


@op("stablehlo.custom_call")
def custom_call(info):
    target = info.attr("call_target_name")
    builder = registry.custom_call_builder(target)
    if builder is None:
        raise info.unsupported(f"custom call target {target!r} is not implemented "
                               "(register one with stablehlo_interp.register_custom_call)")
    return builder(info)
