"""``python -m stablehlo_interp``: the ``stablehlo-interp`` command."""

from .cli import main

raise SystemExit(main())
