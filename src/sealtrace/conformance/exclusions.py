"""Node test cases the reference backend deliberately does not claim, each with its reason.

Op family modules declare their own exclusions as a module-level ``CONFORMANCE_EXCLUSIONS``
mapping of case name to reason; this module gathers them so each stays beside its kernel.
"""

from __future__ import annotations

import sys

import sealtrace.ops  # noqa: F401 - importing it loads every family module


def excluded_cases(backend: str = "reference") -> dict[str, str]:
    """Every documented exclusion of ``backend``: case name -> why the case is not claimed.

    The torch backend claims what the reference claims, less the cases its translations exclude
    (types torch has no dtype for: sealtrace.torchops.registry.conformance_exclusions)."""
    found: dict[str, str] = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("sealtrace.ops.") and hasattr(module, "CONFORMANCE_EXCLUSIONS"):
            found.update(module.CONFORMANCE_EXCLUSIONS)
    if backend == "torch":
        from sealtrace.torchops.registry import conformance_exclusions

        found.update(conformance_exclusions())
    return found
