"""One exception hierarchy for sealtrace.

Every error a user can cause is a subclass of :class:`SealtraceError`. The CLI maps each class to
one exit code (``exit_code``): 2 for bad input or usage, 1 for a check that ran and failed.
"""

from __future__ import annotations


class SealtraceError(Exception):
    """Base class of every error sealtrace raises on purpose."""

    exit_code = 2


class InvalidModelError(SealtraceError):
    """The file or proto is not a usable ONNX model (not ONNX, truncated, malformed graph)."""


class UnsupportedError(SealtraceError):
    """The model needs operators, opset versions or domains that the chosen backend lacks.

    ``problems`` lists every unsupported node, so a user sees all of them at once.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        shown = "; ".join(self.problems[:20])
        more = f" (and {len(self.problems) - 20} more)" if len(self.problems) > 20 else ""
        super().__init__(f"{len(self.problems)} unsupported node(s): {shown}{more}")


class PlanError(SealtraceError):
    """The graph cannot be turned into a Plan (dangling input, cycle, duplicate output ...)."""


class InputError(SealtraceError):
    """The feeds given to a run do not match the model (name, dtype, shape, missing input)."""


class KernelError(SealtraceError):
    """A kernel failed while executing one step; names the step and the op."""


class BackendError(SealtraceError):
    """A backend is unknown, not installed, or failed outside of a single step."""


class CheckFailedError(SealtraceError):
    """A check ran to completion and found a mismatch (integrity, parity, conformance)."""

    exit_code = 1
