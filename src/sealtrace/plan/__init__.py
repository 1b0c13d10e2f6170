"""ONNX -> Plan: opset resolution, topological order, subgraphs, static shapes."""

from sealtrace.plan.builder import ModelSource, build_plan, load_model
from sealtrace.plan.events import StepEvent, StepObserver
from sealtrace.plan.model import Plan, Step, ValueInfo

__all__ = ["ModelSource", "Plan", "Step", "StepEvent", "StepObserver", "ValueInfo", "build_plan", "load_model"]
