"""Write output files whole or not at all, and never over a user's file unless asked."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from sealtrace.errors import SealtraceError


class OutputExistsError(SealtraceError):
    """The output file already exists and overwriting was not asked for (``--force``)."""


@contextmanager
def atomic_output(path: str | os.PathLike[str], force: bool = False) -> Iterator[BinaryIO]:
    """Yield a file to write; on success it appears at ``path`` in one rename, on failure nothing
    changes. Without ``force`` an existing ``path`` is refused, even one created meanwhile."""
    target = Path(path)
    if target.is_dir():
        raise OutputExistsError(f"{target}: is a directory")
    if target.exists() and not force:
        raise OutputExistsError(f"{target}: already exists (use --force to overwrite)")
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputExistsError(f"{target}: cannot create a file in {directory} ({exc.strerror})") from None
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; outputs get the user's usual mode
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # atomic and fails if the name exists: never clobbers
            except FileExistsError:
                raise OutputExistsError(f"{target}: already exists (use --force to overwrite)") from None
            except OSError:
                if target.exists():  # filesystem without hard links: best effort
                    raise OutputExistsError(f"{target}: already exists (use --force to overwrite)") from None
                os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
