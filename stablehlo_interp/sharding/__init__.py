"""The sharding model: meshes and shardings decoded into tilings of values, and
the shardings Shardy's own propagation gives a program's values (used by the device)."""
