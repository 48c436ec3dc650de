"""Programs: a module compiled into plans with the registered ops, run on NumPy values;
the front door (calls.py) that calls one as a JAX function or as its module."""

from .calls import Call, DeviceRun, prepare, prepare_per_device, run
from ..sharding.per_device import PerDeviceProgram, PerDeviceWarning
from .program import Program, coerce_arguments, load
from .registration import register_custom_call, register_op
from .signature import JaxSignature

__all__ = ["Call", "DeviceRun", "JaxSignature", "PerDeviceProgram", "PerDeviceWarning", "Program", "coerce_arguments",
           "load", "prepare", "prepare_per_device", "register_custom_call", "register_op", "run"]
