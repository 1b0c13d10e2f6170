"""Sealed containers: one ``.seal`` file whose digest commits to every byte that affects execution.

- :func:`seal_model` writes a container from an ONNX file or proto (optionally signed), and
  :func:`add_signatures` countersigns an existing one;
- :func:`open_container` reads one strictly; :func:`verify_container` hashes every tensor and names
  each that differs; :func:`load_verified_model` / :func:`load_sealed_plan` give back what runs;
- :func:`unseal` writes the ONNX model back; :func:`describe_container` shows the header;
- :mod:`sealtrace.container.manifest` does the same for checkpoint directories.
"""

from sealtrace.container.describe import describe_container
from sealtrace.container.errors import ContainerFormatError, IntegrityError, Mismatch, SealingError
from sealtrace.container.format import MAGIC, Container, Entry, is_container, open_container
from sealtrace.container.unseal import UnsealResult, unseal
from sealtrace.container.verify import (
    VerifiedModel,
    VerifyReport,
    load_sealed_plan,
    load_verified_model,
    verify_container,
)
from sealtrace.container.writer import ContainerInfo, add_signatures, seal_model

__all__ = [
    "MAGIC",
    "Container",
    "ContainerFormatError",
    "ContainerInfo",
    "Entry",
    "IntegrityError",
    "Mismatch",
    "SealingError",
    "UnsealResult",
    "VerifiedModel",
    "VerifyReport",
    "add_signatures",
    "describe_container",
    "is_container",
    "load_sealed_plan",
    "load_verified_model",
    "open_container",
    "seal_model",
    "unseal",
    "verify_container",
]
