"""NumPy reference kernels, one module per operator family.

Importing this package imports every family module, which registers its kernels with
:mod:`sealtrace.ops.registry`. A new family needs no edit here: drop a module into this folder.
"""

from __future__ import annotations

import importlib
import pkgutil

from sealtrace.ops.registry import Kernel, lookup, register, registered_ops


def _load_families() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "registry" and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_load_families()

__all__ = ["Kernel", "lookup", "register", "registered_ops"]
