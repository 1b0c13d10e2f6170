"""Falsification: find counterexamples to network properties, each certified by an audited reference run.

- :mod:`~sealtrace.falsify.property`: :class:`Property` (input boxes, linear output constraints,
  disjunctions), usable from Python; :mod:`~sealtrace.falsify.vnnlib` reads VNNLIB files into one;
- :mod:`~sealtrace.falsify.search`: random sampling, then PGD / Adam with restarts on the torch module;
- :mod:`~sealtrace.falsify.certify`: the sealed container on the reference interpreter decides;
- :func:`falsify` ties them together; :mod:`~sealtrace.falsify.instances` runs VNN-COMP instance lists.
See docs/falsify.md.
"""

from sealtrace.falsify.certify import Certificate, Certifier, ConstraintValue, sealed_container
from sealtrace.falsify.errors import PropertyError, VnnlibSyntaxError
from sealtrace.falsify.falsifier import FalsifyResult, falsify, save_violation
from sealtrace.falsify.network import BatchedNetwork, NetworkLayout, layout_of
from sealtrace.falsify.property import Box, LinearConstraint, OutputSet, Property, Region
from sealtrace.falsify.search import Candidate, Search, SearchSettings, SearchStats
from sealtrace.falsify.vnnlib import load_vnnlib, parse_vnnlib

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
    "Region",
    "Search",
    "SearchSettings",
    "SearchStats",
    "VnnlibSyntaxError",
    "falsify",
    "layout_of",
    "load_vnnlib",
    "parse_vnnlib",
    "save_violation",
    "sealed_container",
]
