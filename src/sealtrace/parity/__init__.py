"""Per-op parity across backends: where two runtimes start to disagree, and why."""

from sealtrace.parity.checker import DriftReport, StepComparison, check_parity
from sealtrace.parity.metrics import Tolerance, ToleranceTable, ValueDiff, compare_values

__all__ = [
    "DriftReport",
    "StepComparison",
    "Tolerance",
    "ToleranceTable",
    "ValueDiff",
    "check_parity",
    "compare_values",
]
