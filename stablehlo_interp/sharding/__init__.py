"""The sharding model: meshes and shardings decoded into tilings of values, and
Shardy-style propagation of shardings through a program (used by the device)."""
