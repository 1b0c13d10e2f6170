"""``audit show``: a log's steps as rows a person can read (op, shapes, short digests, stats),
fitted to the width of the terminal."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

DIGEST_CHARS = 12


@dataclass(frozen=True)
class StepRow:
    """One output of one step, ready to print."""

    line: int
    step: str  # 'name' or 'subgraph/path/name'
    op_type: str
    output: str
    dtype: str
    shape: str
    digest: str
    stats: str


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_stats(stats: dict[str, Any] | None) -> str:
    """'min .. max, mean m' plus NaN/Inf counts when there are any."""
    if not stats:
        return "-"
    text = f"{_number(stats['min'])} .. {_number(stats['max'])}, mean {_number(stats['mean'])}"
    extra = [f"{stats[k]} {k.upper() if k == 'nan' else 'Inf'}" for k in ("nan", "inf") if stats.get(k)]
    return text + (" (" + ", ".join(extra) + ")" if extra else "")


def describe_numerics(backend: dict[str, Any]) -> str:
    """What a header's backend record says of the numerics the run used (docs/numerics.md)."""
    numerics = backend.get("numerics")
    if numerics is None:
        if backend.get("name") == "reference":
            return "native (not recorded: a log of sealtrace before portable numerics); bit-identity needs the same host"
        return "those of the backend (not the reference's)"
    if numerics["mode"] == "portable":
        return f"portable, specification {numerics['spec']} (docs/numerics.md): the same bits on any machine"
    return "native: bit-identity needs the same CPU, BLAS and thread count"


def describe_device(device: dict[str, Any]) -> str:
    """One line of a header's ``backend.device`` (the torch backend's): the device, the GPU's facts,
    and the numerics settings the run had in force."""
    text = device["name"]
    gpu = device.get("gpu")
    if gpu is not None:
        gib = gpu["memory_bytes"] / (1 << 30)
        text += (
            f" ({gpu['name']}, compute capability {gpu['compute_capability']}, {gib:.0f} GiB; driver "
            f"{gpu['driver'] or 'unknown'}, CUDA {gpu['cuda_runtime'] or 'unknown'}, cuDNN {gpu['cudnn'] or 'none'})"
        )
    text += f"; torch {device['torch']}"
    if device.get("precision"):
        text += f"; precision {device['precision']}"
    settings = device["settings"]
    flags = [
        f"TF32 matmul {'on' if settings['matmul_tf32'] else 'off'}",
        f"TF32 cuDNN {'on' if settings['cudnn_tf32'] else 'off'}",
        f"deterministic algorithms {'on' if settings['deterministic_algorithms'] else 'off'}",
        f"CUBLAS_WORKSPACE_CONFIG {settings['cublas_workspace_config'] or 'unset'}",
    ]
    if gpu is None:
        flags = flags[2:3]  # TF32 and cuBLAS do not touch a CPU run
    return text + "; " + ", ".join(flags)


def describe_value(entry: dict[str, Any]) -> tuple[str, str, str]:
    """(dtype, shape, short digest) of a value entry of a record."""
    kind = entry.get("kind")
    digest = (entry.get("digest") or "-")[:DIGEST_CHARS]
    if kind == "tensor":
        return entry["dtype"], "[" + ",".join(map(str, entry["shape"])) + "]", digest
    if kind == "sequence":
        return "sequence", f"len {entry['length']}", digest
    if kind == "map":
        return "map", f"size {entry['size']}", digest
    return "none", "-", digest


def step_rows(records: Iterable[dict[str, Any]]) -> list[StepRow]:
    """One row per output of every step record, in log order (line numbers are the log's)."""
    rows = []
    for line, record in enumerate(records, start=1):
        if record.get("type") != "step":
            continue
        where = "/".join((*record["path"], record["name"]))
        for entry in record["outputs"]:
            dtype, shape, digest = describe_value(entry)
            rows.append(
                StepRow(line, where, record["op_type"], entry["name"], dtype, shape, digest, format_stats(entry.get("stats")))
            )
    return rows


COLUMNS = ("line", "step", "op", "output", "dtype", "shape", "digest", "min .. max, mean")


def _cells(row: StepRow) -> tuple[str, ...]:
    return (str(row.line), row.step, row.op_type, row.output, row.dtype, row.shape, row.digest, row.stats)


def table_width(rows: Sequence[StepRow]) -> int:
    """Columns the full table takes when no cell is wrapped (borders and padding included)."""
    widths = [max([len(name), *(len(_cells(row)[i]) for row in rows)]) for i, name in enumerate(COLUMNS)]
    return sum(widths) + 3 * len(widths) + 1


def steps_renderable(rows: Sequence[StepRow], title: str, width: int) -> RenderableType:
    """The step outputs fitted to ``width`` columns: a table when every cell fits whole on one
    line, else a list of two lines per output (names, then dtype, shape, digest and stats) that
    wraps between words. No column is ever squeezed below its content: a name or a digest is
    never broken into a column of letters."""
    if table_width(rows) <= width:
        table = Table(title=title, title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="right" if column == "line" else "left", no_wrap=True)
        for row in rows:
            table.add_row(*(Text(cell) for cell in _cells(row)))  # names are text, never markup
        return table
    listing = Table.grid(padding=(0, 2))
    listing.add_column(justify="right", no_wrap=True)
    listing.add_column(overflow="fold")  # wraps between words; folds only a word wider than the line
    listing.add_row(Text("line", style="bold"), Text("step (op) -> output\ndtype shape  digest  min .. max, mean", style="bold"))
    for row in rows:
        listing.add_row(
            str(row.line),
            Text(f"{row.step} ({row.op_type}) -> {row.output or '-'}\n{row.dtype} {row.shape}  {row.digest}  {row.stats}"),
        )
    return Group(Text(title), listing)
