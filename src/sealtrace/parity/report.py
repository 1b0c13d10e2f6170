"""Parity reports as JSON (versioned, stable), Markdown, and one self-contained HTML file."""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from sealtrace.errors import InputError
from sealtrace.outputs import atomic_output, check_output
from sealtrace.parity.checker import DriftReport, StepComparison

FORMATS = (".json", ".md", ".html")


def report_json(report: DriftReport) -> str:
    """Sorted keys and a fixed layout: the same run on the same machine gives the same bytes."""
    return json.dumps(report.to_json(), sort_keys=True, indent=2, allow_nan=False) + "\n"


def format_number(x: float | None) -> str:
    """A metric as reports show it: 3 significant digits, "-" when absent."""
    if x is None:
        return "-"
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.3g}"


def _summary_lines(report: DriftReport) -> list[str]:
    origin = report.drift_origin
    born = report.born_here
    tol = report.tolerance.default
    worst = report.worst_step
    loss = report.worst_precision_loss
    return [
        f"- model: `{report.model}` (plan `{report.plan_digest[:16]}`)",
        f"- backends: {report.backends[0]} vs {report.backends[1]}",
    ] + ([f"- largest difference: {_step_label(worst)}: max abs {format_number(worst.worst.max_abs)}"]  # type: ignore[union-attr]
         if worst is not None else []) + ([
        f"- precision: {report.precision}"
        + (f"; largest precision_loss: `{loss[0]}`: max abs {format_number(loss[1].max_abs)}" if loss else "")
    ] if report.precision else []) + [
        f"- tolerance: atol {tol.atol:g}, rtol {tol.rtol:g}"
        + (" (with per-op/per-value overrides)" if report.tolerance.ops or report.tolerance.values else ""),
        f"- steps checked: {sum(1 for s in report.steps if s.status != 'not-compared')}"
        f" (not compared: {sum(1 for s in report.steps if s.status == 'not-compared')})",
        f"- steps exceeding tolerance: {len(report.exceeding)}",
        f"- drift origin: {_step_label(origin) if origin else 'none'}",
        f"- born here: {', '.join(_step_label(s) for s in born[:10]) if born else 'none'}"
        + (f" and {len(born) - 10} more" if len(born) > 10 else ""),
        f"- graph outputs within tolerance: {'yes' if not any(d.exceeds for d in report.graph_outputs) else 'NO'}",
    ] + ([f"- compared: {graph_outputs_only(report)}"] if not report.steps else []) + [
        f"- layout: step {_step_label(s)} matches after permuting axes {list(s.layout or ())}"
        for s in report.steps
        if s.layout is not None
    ]


def graph_outputs_only(report: DriftReport) -> str:
    """Why a report compares graph outputs only (it has no steps): what the backends' settings say."""
    reasons = [str(s["steps"]) for s in report.backend_settings.values() if isinstance(s, dict) and "steps" in s]
    if not reasons and any(isinstance(s, dict) and s.get("mode") == "optimized" for s in report.backend_settings.values()):
        reasons = ["graph outputs only: ONNX Runtime's optimized graph has fused away the per-step values"]
    return "; ".join(reasons) or "graph outputs only"


def _step_label(step: StepComparison) -> str:
    where = "/".join((*step.path, step.name))
    return f"#{step.position} `{where}` ({step.op_type})"


def report_markdown(report: DriftReport) -> str:
    lines = ["# Parity report", "", *_summary_lines(report), "",
             "| # | step | op | status | max abs | max rel | max ulp | cosine | local max abs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in report.steps:
        w = s.worst
        local = max((d.max_abs for d in s.local), default=None) if s.local else None
        lines.append(
            f"| {s.position} | `{'/'.join((*s.path, s.name))}` | {s.op_type} | {s.status} | "
            f"{format_number(w.max_abs if w else None)} | {format_number(w.max_rel if w else None)} | "
            f"{w.max_ulp if w and w.max_ulp is not None else '-'} | {format_number(w.cosine if w else None)} | {format_number(local)} |"
        )
    return "\n".join(lines) + "\n"


def _plot_svg(report: DriftReport, width: int = 900, height: int = 260) -> str:
    """Per-step max abs error on a log scale, with the tolerance line and the drift origin marked."""
    steps = [s for s in report.steps if s.worst is not None]
    pad_l, pad_r, pad_t, pad_b = 60, 20, 20, 40
    floor = 1e-12
    errors = [max(s.worst.max_abs, floor) if s.worst and math.isfinite(s.worst.max_abs) else 1e6 for s in steps]
    atol = max(report.tolerance.default.atol, floor)
    lo = math.floor(math.log10(min([*errors, atol])))
    hi = math.ceil(math.log10(max([*errors, atol * 10])))
    hi = max(hi, lo + 1)

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * (i / max(1, len(steps) - 1))

    def y(v: float) -> float:
        frac = (math.log10(max(v, floor)) - lo) / (hi - lo)
        return height - pad_b - frac * (height - pad_t - pad_b)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="per-step error">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
    ]
    for k in range(lo, hi + 1):
        yy = y(10.0**k)
        parts.append(f'<line x1="{pad_l}" y1="{yy:.1f}" x2="{width - pad_r}" y2="{yy:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{pad_l - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">1e{k}</text>')
    points = " ".join(f"{x(i):.1f},{y(e):.1f}" for i, e in enumerate(errors))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#3366cc" stroke-width="1.5"/>')
    for i, (s, e) in enumerate(zip(steps, errors, strict=True)):
        color = "#cc3333" if s.exceeds else "#3366cc"
        title = html.escape(f"#{s.position} {s.name} ({s.op_type}): max abs {format_number(s.worst.max_abs if s.worst else None)}")
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(e):.1f}" r="2.5" fill="{color}"><title>{title}</title></circle>')
    ty = y(atol)
    parts.append(
        f'<line x1="{pad_l}" y1="{ty:.1f}" x2="{width - pad_r}" y2="{ty:.1f}" stroke="#e69500" stroke-dasharray="6 4"/>'
    )
    parts.append(f'<text x="{width - pad_r}" y="{ty - 4:.1f}" font-size="11" text-anchor="end">atol {atol:g}</text>')
    origin = report.drift_origin
    if origin is not None and origin in steps:
        ox = x(steps.index(origin))
        parts.append(f'<line x1="{ox:.1f}" y1="{pad_t}" x2="{ox:.1f}" y2="{height - pad_b}" stroke="#cc3333"/>')
        parts.append(
            f'<text x="{ox + 4:.1f}" y="{pad_t + 12}" font-size="11" fill="#cc3333">drift origin: '
            f"{html.escape(origin.name)}</text>"
        )
    parts.append(
        f'<text x="{(width + pad_l) / 2:.0f}" y="{height - 8}" font-size="12" text-anchor="middle">'
        "step (Plan order)</text>"
    )
    parts.append(
        f'<text x="14" y="{height / 2:.0f}" font-size="12" transform="rotate(-90 14 {height / 2:.0f})" '
        'text-anchor="middle">max abs error</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
td:nth-child(2),td:nth-child(3),td:nth-child(4){text-align:left}tr.exceeds{background:#fdecea}
tr.origin{background:#f8c9c4;font-weight:bold}code{font-size:12px}
"""


def report_html(report: DriftReport) -> str:
    """One file, no scripts or external resources: opens offline anywhere."""
    summary = "".join(
        f"<li>{html.escape(line[2:]).replace('`', '')}</li>" for line in _summary_lines(report)
    )
    origin = report.drift_origin
    rows = []
    for s in report.steps:
        w = s.worst
        local = max((d.max_abs for d in s.local), default=None) if s.local else None
        css = "origin" if s is origin else ("exceeds" if s.exceeds else "")
        rows.append(
            f'<tr class="{css}"><td>{s.position}</td><td><code>{html.escape("/".join((*s.path, s.name)))}</code></td>'
            f"<td>{html.escape(s.op_type)}</td><td>{s.status}</td><td>{format_number(w.max_abs if w else None)}</td>"
            f"<td>{format_number(w.max_rel if w else None)}</td>"
            f"<td>{w.max_ulp if w and w.max_ulp is not None else '-'}</td><td>{format_number(w.cosine if w else None)}</td>"
            f"<td>{format_number(local)}</td><td>{'' if s.layout is None else html.escape(str(list(s.layout)))}</td></tr>"
        )
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>sealtrace parity report</title>"
        f"<style>{_STYLE}</style></head><body><h1>Parity report</h1><ul>{summary}</ul>"
        f"<figure>{_plot_svg(report)}<figcaption>Per-step max abs error (log scale); dashed: tolerance; "
        "red: drift origin.</figcaption></figure>"
        "<table><thead><tr><th>#</th><th>step</th><th>op</th><th>status</th><th>max abs</th><th>max rel</th>"
        "<th>max ulp</th><th>cosine</th><th>local max abs</th><th>layout</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></body></html>\n"
    )


_WRITERS: dict[str, Callable[[DriftReport], str]] = {
    ".json": report_json, ".md": report_markdown, ".html": report_html,
}  # fmt: skip


def check_report_paths(
    paths: Sequence[str | os.PathLike[str]], overwrite: bool = False, what: str = "--report"
) -> list[Path]:
    """Refuse, before any work, a report that could not be written at the end: an unknown format,
    a path given twice, a missing directory, an existing file without ``overwrite``."""
    targets: list[Path] = []
    seen: set[str] = set()
    for path in paths:
        target = Path(path)
        if target.suffix not in _WRITERS:
            raise InputError(f"{what} {target}: the file name must end in {', '.join(FORMATS)}")
        same = os.path.realpath(target)
        if same in seen:
            raise InputError(f"{what} {target}: given twice")
        seen.add(same)
        targets.append(check_output(target, overwrite, what))
    return targets


def write_reports(
    reports: Sequence[tuple[DriftReport, str | os.PathLike[str]]], overwrite: bool = False
) -> list[Path]:
    """Write each report in the format its suffix names (.json, .md, .html): all of them or none.

    Every path is checked and every report rendered before the first file appears; each file is
    written whole and renamed into place only once all of them are written.
    """
    targets = check_report_paths([path for _, path in reports], overwrite, "report")
    texts = [_WRITERS[target.suffix](report) for (report, _), target in zip(reports, targets, strict=True)]
    with ExitStack() as stack:
        files = [stack.enter_context(atomic_output(target, overwrite)) for target in targets]
        for f, text in zip(files, texts, strict=True):
            f.write(text.encode("utf-8"))
    return targets


def write_report(report: DriftReport, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Write the report in the format its suffix names (.json, .md, .html), atomically."""
    return write_reports([(report, path)], overwrite)[0]
