"""The op coverage table: complete, and docs/coverage.md regenerated from the registry."""

import pathlib

from stablehlo_interp import ops
from stablehlo_interp.engine import registry
from stablehlo_interp.conformance import coverage
from stablehlo_interp.program.compiler import TERMINATORS

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_stablehlo_and_chlo_op_is_implemented():
    ops.load_all()
    implemented = set(registry.registered_ops()) | TERMINATORS
    missing = [op for dialect in ("stablehlo", "chlo") for op in coverage.dialect_ops(dialect)
               if op not in implemented]
    assert missing == []


def test_every_op_has_a_test_file():
    untested = [op for dialect in ("stablehlo", "chlo") for op in coverage.dialect_ops(dialect)
                if not coverage.tests_mentioning(op)]
    assert untested == []


def test_docs_coverage_is_up_to_date():
    committed = (ROOT / "docs" / "coverage.md").read_text()
    assert committed == coverage.table(), "regenerate: python -m stablehlo_interp.conformance.coverage > docs/coverage.md"
