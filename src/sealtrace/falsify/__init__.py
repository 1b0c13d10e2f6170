"""Falsification: find counterexamples to network properties, each certified by an audited reference run.

- :mod:`~sealtrace.falsify.property`: :class:`Property` (input boxes, linear output constraints,
  disjunctions), usable from Python; :mod:`~sealtrace.falsify.vnnlib` reads VNNLIB files into one;
- :mod:`~sealtrace.falsify.search`: random sampling, then PGD / Adam with restarts on the torch module;
- :mod:`~sealtrace.falsify.certify`: the sealed container on the reference interpreter decides;
- :func:`falsify` ties them together; :mod:`~sealtrace.falsify.instances` runs VNN-COMP instance lists.
See docs/falsify.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sealtrace.falsify.errors import PropertyError, PropertyReadTimeoutError, VnnlibSyntaxError
from sealtrace.falsify.property import Box, LinearConstraint, OutputSet, Property, Region
from sealtrace.falsify.vnnlib import load_vnnlib, parse_vnnlib

if TYPE_CHECKING:
    from sealtrace.falsify.certify import Certificate, Certifier, ConstraintValue, sealed_container
    from sealtrace.falsify.falsifier import (
        FalsifyResult,
        falsify,
        save_counterexample,
        save_violation,
        unknown_before_search,
    )
    from sealtrace.falsify.network import BatchedNetwork, NetworkLayout, layout_of
    from sealtrace.falsify.search import Candidate, Search, SearchSettings, SearchStats

# The search and the certifier import torch (over a second): reading a property (VNNLIB, the CLI's
# input checks) must not pay for it, so these are imported on first use.
_LAZY = {
    **dict.fromkeys(["Certificate", "Certifier", "ConstraintValue", "sealed_container"], "certify"),
    **dict.fromkeys(["FalsifyResult", "falsify", "save_counterexample", "save_violation", "unknown_before_search"],
                    "falsifier"),
    **dict.fromkeys(["BatchedNetwork", "NetworkLayout", "layout_of"], "network"),
    **dict.fromkeys(["Candidate", "Search", "SearchSettings", "SearchStats"], "search"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BatchedNetwork",
    "Box",
    "Candidate",
    "Certificate",
    "Certifier",
    "ConstraintValue",
    "FalsifyResult",
    "LinearConstraint",
    "NetworkLayout",
    "OutputSet",
    "Property",
    "PropertyError",
    "PropertyReadTimeoutError",
    "Region",
    "Search",
    "SearchSettings",
    "SearchStats",
    "VnnlibSyntaxError",
    "falsify",
    "layout_of",
    "load_vnnlib",
    "parse_vnnlib",
    "save_counterexample",
    "save_violation",
    "sealed_container",
    "unknown_before_search",
]
