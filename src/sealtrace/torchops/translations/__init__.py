"""Torch translations, one module per operator family; importing this package registers them all."""

from __future__ import annotations

import importlib
import pkgutil


def _load_families() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_load_families()
