"""Load: MLIR (text, bytecode, artifacts, JAX objects) parsed, checked and decoded
into plain Python values (types, attributes, locations, function signatures).

Nothing above this layer touches MLIR objects, except the compiler that walks
a module's ops once to build plans (program/compiler.py).
"""
