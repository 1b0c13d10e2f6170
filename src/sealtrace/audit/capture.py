"""Capture: every intermediate tensor of a run, written as .npy files for later comparison.

A capture directory holds one ``.npy`` file per value and an ``index.json`` that maps each value's
key to its file. A key is the value name, prefixed by the subgraph path for values produced inside
subgraphs ('loop_1/body/3/acc'), because a loop produces the same name once per iteration. File
names are the keys made safe (letters, digits, '.', '_', '-'; bounded length; never hidden) with a
short hash of the key added whenever the safe name differs from the key or would collide.

Tensors are written by a worker thread and released as soon as they are on disk; the pipe to it
is bounded, so memory stays bounded whatever the size of the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.audit.errors import AuditLogExistsError, AuditWriteError
from sealtrace.audit.pipeline import (
    DEFAULT_PENDING_BYTES,
    DEFAULT_PENDING_ITEMS,
    BackgroundObserver,
    nbytes_of,
)
from sealtrace.audit.records import value_digest
from sealtrace.backends.base import Backend, StepEvent
from sealtrace.digest import canonical_dtype
from sealtrace.errors import InputError
from sealtrace.plan.model import Plan

CAPTURE_FORMAT = "sealtrace.capture.v1"
INDEX_FILE = "index.json"
_MAX_STEM = 96
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_file_stem(key: str, taken: set[str]) -> str:
    """A file name stem for ``key`` that is safe on every common filesystem and unique in ``taken``
    (compared case-insensitively, for case-insensitive filesystems); adds it to ``taken``."""
    stem = _UNSAFE.sub("_", key)[:_MAX_STEM]
    if stem.startswith(".") or not stem:
        stem = "_" + stem
    if stem != key or stem.lower() in taken or stem.lower() == Path(INDEX_FILE).stem:
        stem = f"{stem}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}"
        counter = 1
        base = stem
        while stem.lower() in taken:
            stem = f"{base}-{counter}"
            counter += 1
    taken.add(stem.lower())
    return stem


class CaptureStore(BackgroundObserver):
    """A StepObserver that writes every value a run produces (and its inputs) into ``directory``.

    The directory is created; an existing non-empty one is refused unless ``overwrite``.
    """

    what = "capture"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        max_pending_bytes: int = DEFAULT_PENDING_BYTES,
        max_pending_steps: int = DEFAULT_PENDING_ITEMS,
    ) -> None:
        super().__init__(max_pending_bytes, max_pending_steps)
        self.directory = Path(directory)
        if self.directory.exists():
            if not self.directory.is_dir():
                raise InputError(f"{self.directory}: exists and is not a directory")
            if any(self.directory.iterdir()) and not overwrite:
                raise AuditLogExistsError(f"{self.directory}: capture directory is not empty (use --force)")
        self._overwrite = overwrite
        self.entries: list[dict[str, Any]] = []
        self._taken: set[str] = set()
        self._keys: dict[str, int] = {}

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AuditWriteError(f"{self.directory}: cannot create capture directory ({exc.strerror})") from None
        if self._overwrite:
            for old in self.directory.glob("*.npy"):
                old.unlink()
            (self.directory / INDEX_FILE).unlink(missing_ok=True)
        self._start()
        values = {info.name: feeds.get(info.name) for info in plan.inputs}
        self._submit(("input", (), "", "", values), nbytes_of(values.values()))

    def on_step(self, event: StepEvent) -> None:
        values = {name: value for name, value in zip(event.step.outputs, event.outputs, strict=True) if name}
        self._submit(("step", event.path, event.step.name, event.step.op_type, values), nbytes_of(values.values()))

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        self._finish()

    def _handle(self, item: tuple[Any, ...]) -> None:
        source, path, step_name, op_type, values = item
        for name, value in values.items():
            key = "/".join((*path, name))
            count = self._keys.get(key, 0)
            self._keys[key] = count + 1
            if count:  # the same key again (a subgraph run twice in one call): keep both
                key = f"{key}#{count}"
            self._write(key, name, source, step_name, op_type, value)

    def _write(self, key: str, name: str, source: str, step: str, op_type: str, value: Any) -> None:
        entry: dict[str, Any] = {"key": key, "name": name, "source": source, "step": step, "op_type": op_type}
        if value is None:
            entry.update(kind="none", files=[])
        elif isinstance(value, list):
            files = [self._save(f"{key}[{i}]", element) for i, element in enumerate(value)]
            entry.update(kind="sequence", files=files, digest=value_digest(value))
        elif isinstance(value, Mapping):
            entry.update(kind="map", files=[self._save(key, value)], digest=value_digest(value))
        else:
            array = np.asarray(value)
            entry.update(
                kind="tensor",
                files=[self._save(key, array)],
                dtype=canonical_dtype(array.dtype),
                shape=list(array.shape),
                digest=value_digest(array),
            )
        self.entries.append(entry)

    def _save(self, key: str, value: Any) -> str:
        if isinstance(value, Mapping):  # a map (a map input, ZipMap's elements): its keys and values, no pickle
            name = safe_file_stem(key, self._taken) + ".npz"
            keys = np.asarray(list(value.keys()))
            with (self.directory / name).open("xb") as f:
                np.savez(f, keys=keys.astype(str) if keys.dtype.kind == "O" else keys,
                         values=np.asarray(list(value.values())), allow_pickle=False)
            return name
        array = np.asarray(value)
        if array.dtype.kind == "O":
            # .npy without pickles holds no object arrays; string tensors become unicode arrays.
            array = array.astype(str)
        name = safe_file_stem(key, self._taken) + ".npy"
        with (self.directory / name).open("xb") as f:
            np.save(f, array, allow_pickle=False)
        return name

    def _close(self, finished: bool) -> None:
        index = {"format": CAPTURE_FORMAT, "complete": finished, "values": self.entries}
        tmp = self.directory / f".{INDEX_FILE}.tmp"
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.directory / INDEX_FILE)

    def _describe(self) -> str:
        return f"capture {self.directory}"


@dataclass(frozen=True)
class CapturedRun:
    """A capture directory read back: ``load(key)`` returns a captured value."""

    directory: Path
    entries: dict[str, dict[str, Any]]
    complete: bool

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> CapturedRun:
        path = Path(directory) / INDEX_FILE
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file (not a capture directory)") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: unreadable capture index ({exc})") from None
        if not isinstance(index, dict) or index.get("format") != CAPTURE_FORMAT:
            raise InputError(f"{path}: not a {CAPTURE_FORMAT} capture index")
        return cls(Path(directory), {e["key"]: e for e in index["values"]}, bool(index.get("complete")))

    def keys(self) -> list[str]:
        """Keys of the captured values, in the order the run produced them."""
        return list(self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def load(self, key: str) -> Any:
        """The captured value of ``key``: an array, a map, a list of arrays or maps (a sequence), or None."""
        entry = self.entries.get(key)
        if entry is None:
            raise InputError(f"{self.directory}: no captured value {key!r}")
        values = [self._load_file(f) for f in entry["files"]]
        if entry["kind"] in ("tensor", "map"):
            return values[0]
        return values if entry["kind"] == "sequence" else None

    def _load_file(self, name: Any) -> Any:
        # The index is data, not instructions: a file it names must be a plain file name inside the
        # capture directory (no separators, no "..", as the writer makes them), so a crafted index
        # cannot read files elsewhere.
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise InputError(f"{self.directory}: capture index names an invalid file {name!r}")
        if not name.endswith(".npz"):
            return np.load(self.directory / name, allow_pickle=False)
        with np.load(self.directory / name, allow_pickle=False) as archive:  # a map
            return dict(zip(archive["keys"].tolist(), archive["values"].tolist(), strict=True))
