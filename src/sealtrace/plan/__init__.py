"""ONNX -> Plan: opset resolution, topological order, subgraphs, static shapes."""

from sealtrace.plan.builder import ModelSource, build_plan, load_model
from sealtrace.plan.model import Plan, Step, ValueInfo

__all__ = ["ModelSource", "Plan", "Step", "ValueInfo", "build_plan", "load_model"]
