"""Front ends besides the Python API: StableHLO's interpreter test files and the op
coverage table (the command line is stablehlo_interp.cli, the pytest plugin
stablehlo_interp.pytest_plugin)."""
