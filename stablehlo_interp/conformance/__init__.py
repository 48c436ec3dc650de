"""StableHLO's test files: run on the interpreter (``stablehlo-interp test``,
:mod:`.testfile`), and on another backend as a conformance test (``stablehlo-interp
conform``, :mod:`.conform`); the op coverage table (:mod:`.coverage`) and JUnit
reports (:mod:`.junit`)."""
