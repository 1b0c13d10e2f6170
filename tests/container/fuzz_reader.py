"""atheris harness for the container reader: only ContainerFormatError / IntegrityError may escape.

Run: python tests/container/fuzz_reader.py -runs=100000 CORPUS_DIR (atheris is optional).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from sealtrace.container import ContainerFormatError, IntegrityError, verify_container


def one_input(data: bytes) -> None:
    try:
        verify_container(data, workers=1)
    except (ContainerFormatError, IntegrityError):
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
