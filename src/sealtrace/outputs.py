"""Where sealtrace writes: output paths checked before any work, files written whole or not at all.

Every verb that writes checks each of its outputs with :func:`check_output` before it starts, so a
typo in a directory name or an existing file fails at once, not after a long run; the file itself
is then written through :func:`atomic_output` (never half-written, never over a user's file unless
``force``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from sealtrace.errors import InputError


class OutputExistsError(InputError):
    """The output file already exists and overwriting was not asked for (``--force``)."""


class OutputPathError(InputError):
    """An output cannot be written where asked: its directory is missing or not a directory."""


def check_output(path: str | os.PathLike[str], force: bool = False, what: str = "output") -> Path:
    """Refuse, before any work is done, an output that could not be written at the end.

    ``what`` names the option in messages (e.g. "--out"). A directory in the way, a missing or
    non-directory parent, and (without ``force``) an existing file are refused.
    """
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputPathError(f"{what} {target}: is a directory")
    if not parent.exists():
        raise OutputPathError(f"{what} {target}: directory {parent} does not exist")
    if not parent.is_dir():
        raise OutputPathError(f"{what} {target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise OutputPathError(f"{what} {target}: directory {parent} is not writable")
    if (target.exists() or target.is_symlink()) and not force:
        raise OutputExistsError(f"{what} {target}: file exists (use --force to overwrite)")
    return target


def check_output_directory(path: str | os.PathLike[str], keep: bool, what: str,
                           hint: str = "use --force to overwrite") -> Path:
    """Refuse, before any work is done, a directory of outputs that could not be written: a file in
    the way, a missing parent, or (unless ``keep``) a directory that already holds something."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"{what} {target}: exists and is not a directory")
    if not parent.is_dir():
        raise OutputPathError(f"{what} {target}: directory {parent} does not exist")
    if target.is_dir() and not keep and any(target.iterdir()):
        raise OutputExistsError(f"{what} {target}: directory is not empty ({hint})")
    return target


@contextmanager
def atomic_output(path: str | os.PathLike[str], force: bool = False) -> Iterator[BinaryIO]:
    """Yield a file to write; on success it appears at ``path`` in one rename, on failure nothing
    changes. Without ``force`` an existing ``path`` is refused, even one created meanwhile."""
    target = check_output(path, force)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputPathError(f"{target}: cannot create a file in {directory} ({exc.strerror})") from None
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
