"""The ``/ledger`` page: recent records, the latest tree head, what the audit mode does, and (deferred
audit) the records waiting for a replay and the divergences.

One self-contained HTML document (inline CSS, no script, no external assets), refreshed by the
browser every 10 seconds.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2330;background:#f7f8fa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.sub{color:#5b6475;margin:0 0 16px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#5b6475;font-size:12px}
.bad b{color:#b3261e}.ok b{color:#1e7b34}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e8}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eceff3;font-size:13px;vertical-align:top}
th{background:#eef1f5;font-weight:600}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.verdict-diverged,.verdict-failed{color:#b3261e;font-weight:600}
.verdict-identical,.verdict-within-tolerance{color:#1e7b34}
"""


def _when(timestamp_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _card(value: Any, label: str, tone: str = "") -> str:
    return f'<div class="card {tone}"><b>{escape(str(value))}</b><span>{escape(label)}</span></div>'


AUDIT_MODES = {
    "full": "Audit full: every request runs on the reference backend, and its per-op audit trail is recorded "
            "with its record, on the critical path; nothing is replayed.",
    "deferred": "Audit deferred: a fast backend answers; every request is replayed afterwards on the reference "
                "backend with the per-op audit, and a replay record linked to it gives the verdict.",
    "io": "Audit io: inputs and outputs are digested and recorded; requests are not replayed.",
}


def _replays_html(summary: Mapping[str, Any], divergences: Sequence[Any]) -> str:
    """The deferred audit's state: the records waiting for a replay, worker restarts, divergences."""
    waiting = summary.get("replay_waiting") or {}
    line = (f"{summary.get('replay_backlog', 0)} record(s) waiting for a replay: {waiting.get('queued', 0)} queued, "
            f"{waiting.get('running', 0)} running, {waiting.get('left', 0)} left in the ledger for the next start")
    restarts = summary.get("replay_restarts", 0)
    if restarts:
        line += f"; replay workers restarted {restarts} time(s) after a worker died"
    if divergences:
        div_rows = "".join(
            f"<tr><td>{escape(d.time)}</td><td>{escape(d.model)}</td><td><code>{escape(d.record_id)}</code></td>"
            f"<td><code>{escape(d.replay_id)}</code></td><td>{escape(d.detail)}</td></tr>"
            for d in divergences
        )
        div_html = ("<table><tr><th>time</th><th>model</th><th>record</th><th>replay</th><th>detail</th></tr>"
                    + div_rows + "</table>")
    else:
        div_html = '<p class="sub">No divergence: every replay so far agrees with what was served.</p>'
    return f'<h2>Replays</h2><p class="sub">{escape(line)}.</p><h2>Divergences</h2>{div_html}'


def ledger_page(
    summary: Mapping[str, Any],
    recent: Sequence[tuple[int, Mapping[str, Any]]],
    divergences: Sequence[Any],
    models: Sequence[str],
) -> str:
    """The page's HTML for the service's ``summary``, its ``recent`` (index, record) pairs, newest
    first, and the latest ``divergences``."""
    head = summary.get("latest_tree_head")
    audit = summary.get("audit", "?")
    cards = [
        _card(summary.get("records", 0), "records"),
        _card(head["tree_size"] if head else "none", "signed tree size"),
        _card(audit, "audit mode"),
    ]
    if audit == "deferred":
        backlog, diverged = summary.get("replay_backlog", 0), summary.get("divergences", 0)
        cards += [
            _card(backlog, "replay backlog", "" if backlog == 0 else "bad" if backlog > 1000 else ""),
            _card(diverged, "divergences", "bad" if diverged else "ok"),
        ]
    if head:
        head_html = (
            "<table><tr><th>tree size</th><td>" + escape(str(head["tree_size"])) + "</td></tr>"
            "<tr><th>root hash</th><td><code>" + escape(head["root_hash"]) + "</code></td></tr>"
            "<tr><th>signed</th><td>" + escape(_when(head["timestamp"])) + " by key <code>"
            + escape(head["signature"]["key_id"]) + "</code></td></tr>"
            "<tr><th>ledger</th><td><code>" + escape(head["ledger"]) + "</code></td></tr></table>"
        )
    else:
        head_html = '<p class="sub">No signed tree head yet (serve with --sign KEY.pem to sign them).</p>'
    rows = []
    for index, record in recent:
        links = record.get("links") or []
        verdict = links[0].get("verdict", "") if links else ""
        linked = f' of <code>{escape(links[0]["record"][:12])}</code>' if links else ""
        rows.append(
            f"<tr><td>{index}</td><td><code>{escape(record['id'])}</code></td><td>{escape(record['time'])}</td>"
            f"<td>{escape(record['kind'])}{linked}</td><td>{escape(record['model']['name'])}</td>"
            f"<td>{escape(record['backend']['name'])}</td><td>{escape(record['audit'])}</td>"
            f"<td>{escape(str(record.get('principal') or ''))}</td>"
            f'<td class="verdict-{escape(verdict)}">{escape(verdict)}</td></tr>'
        )
    records_html = (
        "<table><tr><th>#</th><th>record</th><th>time</th><th>kind</th><th>model</th><th>backend</th>"
        "<th>audit</th><th>principal</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
        if rows else '<p class="sub">No records yet.</p>'
    )
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"refresh\" content=\"10\"><title>sealtrace ledger</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>sealtrace ledger</h1><p class=\"sub\">ledger <code>{escape(str(summary.get('ledger', '')))}</code>"
        f" &middot; serving {escape(', '.join(models))}</p>"
        f"<div class=\"cards\">{''.join(cards)}</div>"
        f"<h2>Latest signed tree head</h2>{head_html}"
        f"<h2>Audit</h2><p class=\"sub\">{escape(AUDIT_MODES.get(audit, f'Audit {audit}.'))}</p>"
        f"{_replays_html(summary, divergences) if audit == 'deferred' else ''}"
        f"<h2>Recent records</h2>{records_html}"
        "</body></html>"
    )
