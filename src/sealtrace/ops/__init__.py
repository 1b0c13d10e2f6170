"""NumPy reference kernels, one module per operator family.

Importing this package imports every family module, in this folder and in its subpackages (``ml``),
which registers its kernels with :mod:`sealtrace.ops.registry`. A new family needs no edit here: drop
a module into this folder (or a subpackage's).
"""

from __future__ import annotations

import importlib
import pkgutil

from sealtrace.ops.registry import Kernel, lookup, register, registered_ops


def _load_families() -> None:
    for module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        name = module.name.rsplit(".", 1)[-1]
        if name != "registry" and not name.startswith("_"):
            importlib.import_module(module.name)


_load_families()

__all__ = ["Kernel", "lookup", "register", "registered_ops"]
