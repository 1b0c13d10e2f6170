"""Session: run a model the way onnxruntime.InferenceSession does, on any sealtrace backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sealtrace.backends import Backend, StepObserver, get_backend
from sealtrace.errors import InputError
from sealtrace.plan import ModelSource, Plan, ValueInfo, build_plan
from sealtrace.plan.feeds import check_feeds


class Session:
    """Compile a model once into a Plan and run it on a backend.

    ``Session(path).run(None, {"x": array})`` mirrors ``onnxruntime.InferenceSession``.
    """

    def __init__(self, model: ModelSource | Plan, backend: str | Backend = "reference") -> None:
        self.plan = model if isinstance(model, Plan) else build_plan(model)
        self.backend = get_backend(backend) if isinstance(backend, str) else backend

    def get_inputs(self) -> list[ValueInfo]:
        """The inputs a run must feed (weights excluded), like InferenceSession.get_inputs()."""
        return list(self.plan.inputs)

    def get_outputs(self) -> list[ValueInfo]:
        """The graph outputs, in order."""
        return list(self.plan.outputs)

    def run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        *,
        observers: Sequence[StepObserver] = (),
    ) -> list[Any]:
        """Run the Plan; return the requested outputs (all graph outputs when None) in order."""
        wanted = list(output_names) if output_names else self.plan.output_names
        unknown = [n for n in wanted if n not in self.plan.output_names]
        if unknown:
            raise InputError(
                f"unknown output(s) {', '.join(map(repr, unknown))}; "
                f"outputs are: {', '.join(self.plan.output_names)}"
            )
        checked = check_feeds(self.plan, feeds)
        results = self.backend.run(self.plan, checked, observers)
        return [results[name] for name in wanted]
