"""Programs: a module compiled into plans with the registered ops, run on NumPy values."""
