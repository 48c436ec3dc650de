"""The README's main job, examples/quickstart.py, runs and agrees with XLA CPU."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_quickstart_runs_and_matches_xla():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines()
                 if line.startswith(("interpreter:", "XLA CPU:", "max abs difference:")))
    assert lines["interpreter"].split() == lines["XLA CPU"].split()
    assert float(lines["max abs difference"]) == 0.0
    assert "stablehlo.tanh" in done.stdout   # the program it printed
