"""Bearer tokens for the server: a token file holds names and SHA-256 hashes, never the tokens.

The file is UTF-8 text, one token a line: ``NAME SHA256HEX`` (the hash of the token's UTF-8 bytes);
blank lines and lines starting with ``#`` are ignored. ``NAME`` is the principal recorded in every
record the token's requests make. ``sealtrace serve-token NAME --token-file FILE`` makes a token,
prints it once and appends its hash.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from sealtrace.digest import HEX_DIGEST
from sealtrace.errors import InputError
from sealtrace.limits import read_regular_file

MAX_TOKEN_FILE = 1 << 20
MAX_TOKEN = 512
TOKEN_PREFIX = "st_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@\-]{0,127}")


class TokenFileError(InputError):
    """A token file that cannot be used (unreadable, malformed line, duplicate name or hash)."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenTable:
    """Principals by token hash. Looking a token up hashes it first: the table holds no secret."""

    def __init__(self, principals: dict[str, str]) -> None:
        self._principals = principals

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenTable:
        data = read_regular_file(path, "token file", TokenFileError, max_bytes=MAX_TOKEN_FILE)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenFileError(f"{path}: not UTF-8 text") from None
        principals: dict[str, str] = {}
        names: set[str] = set()
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or not _NAME.fullmatch(parts[0]) or not HEX_DIGEST.fullmatch(parts[1]):
                raise TokenFileError(f"{path}:{number}: expected 'NAME SHA256HEX' (a name of letters, digits, "
                                     "'_.@-' and the 64 lowercase hex digits of the token's SHA-256)")
            name, digest = parts
            if name in names or digest in principals:
                raise TokenFileError(f"{path}:{number}: {'name ' + repr(name) if name in names else 'hash'} given twice")
            names.add(name)
            principals[digest] = name
        if not principals:
            raise TokenFileError(f"{path}: no tokens (add one with `sealtrace serve-token NAME --token-file {path}`)")
        return cls(principals)

    def principal(self, token: str) -> str | None:
        """The name of ``token``, or None when it is not one of the table's."""
        if not token or len(token) > MAX_TOKEN:
            return None
        return self._principals.get(token_hash(token))

    @property
    def names(self) -> set[str]:
        return set(self._principals.values())

    def __len__(self) -> int:
        return len(self._principals)


def add_token(path: str | os.PathLike[str], name: str) -> str:
    """Make a token for ``name``, append its hash to the token file (created 0600), return the token."""
    if not _NAME.fullmatch(name):
        raise InputError(f"token name {name!r}: use letters, digits, '_', '.', '@' and '-' (at most 128)")
    target = Path(path)
    if target.exists() or target.is_symlink():
        # Appended to only when it is a regular file of tokens: not a device, a directory or a link
        # out, and not a malformed table (TokenTable.load refuses those by name).
        if not target.is_file() or target.is_symlink():
            raise InputError(f"{target}: not a regular file, not a token file")
        if target.stat().st_size and name in TokenTable.load(target).names:
            raise InputError(f"{target}: a token named {name!r} exists already")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(f"{name} {token_hash(token)}\n")
        f.flush()
        os.fsync(f.fileno())
    return token
