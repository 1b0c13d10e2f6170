"""``sealtrace ledger verify | prove | consistency | check-proof | show``: a ledger from the outside.

STORE is the path of a SQLite ledger or a ``postgresql://`` DSN; every verb opens it read-only.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from sealtrace.cli import app
from sealtrace.errors import InputError
from sealtrace.strictjson import loads_strict

_trust = click.option(
    "--trust", "trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
    help="A key whose tree heads are believed (repeatable); anything not signed by one of them is refused.",
)
_output = click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="PROOF.json",
                       help="Where to write the proof document.")
_force = click.option("--force", is_flag=True, help="Overwrite an existing output file.")
_json = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@app.group()
def ledger() -> None:
    """Verify a ledger, prove a record's inclusion, and check proofs (docs/ledger.md)."""


def _when(timestamp_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _head_line(head: Any) -> str:
    return (f"tree head of size {head.tree_size}, root {head.root_hash.hex()}, signed by key "
            f"{head.signature.key_id} at {_when(head.timestamp)}")


@ledger.command("verify")
@click.argument("store")
@_trust
@click.option("--known", "known", multiple=True, type=click.Path(dir_okay=False), metavar="PROOF.json",
              help="A proof (or tree head) you were given earlier: the ledger must still hold its tree heads "
                   "and agree with them; this shows a ledger cut back or rewritten since (repeatable).")
@_json
def verify(store: str, trust: tuple[str, ...], known: tuple[str, ...], as_json: bool) -> None:
    """Recompute every leaf, node and root of STORE and check every tree head's signature and its
    consistency with the next. Exit 1 names what is wrong."""
    from sealtrace.ledger import Ledger, LedgerCheckError, held_tree_heads, read_proof

    keys = _keys(trust)
    held = [head for path in known for head in held_tree_heads(read_proof(path), path)]
    with Ledger.open(store, readonly=True) as opened:
        report = opened.verify(keys.values(), held)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    if not report.ok:
        more = [f"and {report.omitted} more problems"] if report.omitted else []
        raise LedgerCheckError([f"{store}: verification failed", *report.problems, *more])
    if as_json:
        return
    click.echo(f"ok: {store}: {report.size} records, {report.tree_heads} tree heads verified")
    if report.latest is not None:
        click.echo(f"latest {_head_line(report.latest)}")
    if report.unsigned:
        click.echo(f"note: {report.unsigned} records after the latest tree head are not signed yet")


@ledger.command("prove")
@click.argument("store")
@click.argument("record_id")
@_output
@click.option("--tree-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Prove against the tree head of N records (default: the latest).")
@_force
def prove(store: str, record_id: str, output: str, tree_size: int | None, force: bool) -> None:
    """Write the inclusion proof of RECORD_ID: the record, its audit path and a signed tree head."""
    _write(output, force, lambda opened: opened.prove(record_id, tree_size), store)


@ledger.command("consistency")
@click.argument("store")
@click.argument("first", type=click.IntRange(min=1))
@click.argument("second", type=click.IntRange(min=1), required=False)
@_output
@_force
def consistency(store: str, first: int, second: int | None, output: str, force: bool) -> None:
    """Write the consistency proof from the tree head of FIRST records to that of SECOND (default: the
    latest): the later tree extends the earlier one, nothing rewritten or dropped."""
    _write(output, force, lambda opened: opened.prove_consistency(first, second), store)


def _write(output: str, force: bool, make: Any, store: str) -> None:
    from sealtrace.ledger import Ledger
    from sealtrace.outputs import atomic_output, check_output

    check_output(output, force, "--output")
    with Ledger.open(store, readonly=True) as opened:
        document = make(opened)
    with atomic_output(output, force) as f:
        f.write(json.dumps(document, indent=2, sort_keys=True).encode("ascii") + b"\n")
    click.echo(f"wrote {output}")


@ledger.command("check-proof")
@click.argument("proof", type=click.Path(dir_okay=False))
@_trust
@_json
def check_proof_command(proof: str, trust: tuple[str, ...], as_json: bool) -> None:
    """Check PROOF (from `ledger prove` or `ledger consistency`) with the trusted keys and nothing else."""
    from sealtrace.ledger import Inclusion, LedgerCheckError, check_proof, read_proof
    from sealtrace.verdict import proof_verdict

    keys = _keys(trust)
    document = read_proof(proof)
    try:
        checked = check_proof(document, keys, proof)
    except LedgerCheckError as exc:
        if as_json:  # the verdict on stdout, the error line on stderr as without --json
            click.echo(json.dumps(proof_verdict(proof, document, exc.problems), indent=2, sort_keys=True))
        raise
    shared = proof_verdict(proof, document, [])
    if isinstance(checked, Inclusion):
        summary = {"record": checked.record, "index": checked.index, "tree_head": checked.tree_head.to_json()}
        line = (f"ok: record {checked.record['id']} is leaf {checked.index} of the {_head_line(checked.tree_head)}")
    else:
        summary = {"first": checked.first.to_json(), "second": checked.second.to_json()}
        line = (f"ok: the tree of {checked.second.tree_size} records extends the tree of {checked.first.tree_size} "
                f"(both signed by trusted keys)")
    click.echo(json.dumps({**summary, **shared}, indent=2, sort_keys=True) if as_json else line)


@ledger.command("show")
@click.argument("store")
@click.option("--recent", type=click.IntRange(min=0, max=1000), default=0, metavar="N", help="Also list the last N records.")
@_json
def show(store: str, recent: int, as_json: bool) -> None:
    """Print STORE's size, latest tree head and row counts (nothing is verified: see `ledger verify`)."""
    from sealtrace.ledger import Ledger

    with Ledger.open(store, readonly=True) as opened:
        head = opened.latest_tree_head()
        counts = opened.store.counts()
        rows = opened.store.recent_records(recent) if recent else []
        summary: dict[str, Any] = {
            "ledger": opened.ledger_id,
            "records": opened.size,
            "counts": counts,
            "latest_tree_head": head.to_json() if head else None,
            "recent": [{"index": index, "id": record_id, "record": _parsed(body)} for index, record_id, body in rows],
        }
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    click.echo(f"ledger {summary['ledger']}: {summary['records']} records, {counts['tree_heads']} tree heads, "
               f"{counts['inputs']} stored inputs, {counts['trails']} stored trails")
    click.echo(f"latest {_head_line(head)}" if head else "no tree head yet")
    for item in summary["recent"]:
        record = item["record"] or {}
        click.echo(f"{item['index']:>8}  {item['id']}  {record.get('time', '?')}  {record.get('kind', '?')}  "
                   f"{(record.get('model') or {}).get('name', '?')}  {(record.get('backend') or {}).get('name', '?')}")


def _parsed(body: bytes) -> Any:
    from sealtrace.ledger.records import MAX_RECORD_BYTES

    if len(body) > MAX_RECORD_BYTES:
        return None
    try:
        return loads_strict(body)
    except (ValueError, RecursionError):
        return None


def _keys(paths: tuple[str, ...]) -> dict[str, Any]:
    from sealtrace.ledger import trusted_keys

    if not paths:
        raise InputError("--trust KEY.pub is required: a ledger is believed only as signed by a key you trust")
    return trusted_keys(paths)
