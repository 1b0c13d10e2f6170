"""Per-op parity across backends: where two runtimes start to disagree, and why."""

from sealtrace.parity.checker import DriftReport, StepComparison, check_parity
from sealtrace.parity.metrics import ValueDiff, compare_values
from sealtrace.parity.tolerance import Tolerance, ToleranceTable

__all__ = [
    "DriftReport",
    "StepComparison",
    "Tolerance",
    "ToleranceTable",
    "ValueDiff",
    "check_parity",
    "compare_values",
]
