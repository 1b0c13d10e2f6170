"""atheris harness for the container reader: only ContainerFormatError / IntegrityError may escape.

Run: python tests/container/fuzz_reader.py -runs=100000 CORPUS_DIR (atheris is optional).
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from sealtrace.container import ContainerFormatError, IntegrityError, verify_container


def one_input(data: bytes) -> None:
    with contextlib.suppress(ContainerFormatError, IntegrityError):
        verify_container(data, workers=1)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
