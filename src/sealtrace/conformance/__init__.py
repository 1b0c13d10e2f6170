"""ONNX backend node test suite, regenerated from the installed onnx package, run on a backend."""

from sealtrace.conformance.runner import CaseResult, ConformanceReport, collect_cases, run_conformance

__all__ = ["CaseResult", "ConformanceReport", "collect_cases", "run_conformance"]
