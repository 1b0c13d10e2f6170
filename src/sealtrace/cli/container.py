"""``sealtrace seal | sign | verify | inspect | unseal | keygen | manifest create|verify``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import click

from sealtrace.cli import app
from sealtrace.container import (
    IntegrityError,
    Mismatch,
    add_signatures,
    describe_container,
    seal_model,
    unseal,
    verify_container,
)
from sealtrace.container import manifest as manifests
from sealtrace.container.signatures import describe_signers, signers
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.outputs import check_output
from sealtrace.signing import KEY_ALGORITHMS, generate_keypair
from sealtrace.verdict import container_verdict

_trust = click.option(
    "--trust", "trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
    help="A trusted Ed25519 public key (PEM); repeat for several. Refuses (exit 1) a container not validly "
    "signed by one of them.",
)  # fmt: skip
_require = click.option(
    "--require-signature", is_flag=True,
    help="Fail unless a trusted key signed it (needs --trust; implied by --trust, kept for scripts).",
)  # fmt: skip
_force = click.option("--force", is_flag=True, help="Replace the output file if it exists.")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _list_and_fail(where: str, mismatches: list[Mismatch], as_json: bool) -> None:
    """After a check: nothing when it passed; else one MISMATCH line each (when there are several
    and no JSON report) and exit 1."""
    if not mismatches:
        return
    if not as_json and len(mismatches) > 1:
        for m in mismatches:
            click.echo(f"MISMATCH {m.describe()}", err=True)
    _fail(where, mismatches, as_json)


def _fail(where: str, mismatches: list[Mismatch], as_json: bool) -> NoReturn:
    """Exit 1 after a failed check: one MISMATCH line each was printed (or the JSON report),
    and the error line sums up."""
    if as_json or len(mismatches) == 1:
        raise IntegrityError(where, mismatches)
    raise CheckFailedError(f"{where}: integrity check failed, {len(mismatches)} mismatches (listed above)")


@app.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(), help="The .seal file to write.")
@click.option("--sign", "sign", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pem", help="Sign with this private key; repeat for several.")
@_force
def seal(model: str, output: str, sign: tuple[str, ...], force: bool) -> None:
    """Seal MODEL (an ONNX file, external data included) into one verifiable container."""
    check_output(output, force, "-o")  # before MODEL is read and hashed
    info = seal_model(model, output, sign_with=list(sign) or None, force=force)
    click.echo(
        f"sealed {model} -> {info.path}: {info.tensors} tensor(s), {_size(info.tensor_bytes)} of tensor data; "
        f"container digest {info.digest}"
    )
    click.echo(f"{info.path}: {'signed by key ' + ', '.join(info.signed_by) if info.signed_by else 'unsigned'}")


@app.command(name="sign")
@click.argument("container", type=click.Path(dir_okay=False))
@click.option("--key", "keys", multiple=True, required=True, type=click.Path(dir_okay=False), metavar="KEY.pem", help="Private key to sign with; repeat for several.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Write here instead of replacing CONTAINER.")
def sign_command(container: str, keys: tuple[str, ...], output: str | None) -> None:
    """Verify CONTAINER and add signatures (its digest, and so its content, is unchanged)."""
    signed_by = add_signatures(container, output or container, list(keys), force=output is None)
    click.echo(f"{output or container}: signed by {', '.join(signed_by)}")


@app.command()
@click.argument("container", type=click.Path(dir_okay=False))
@_trust
@_require
@click.option("--expect-digest", metavar="HEX", help="Also require this container digest.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify(container: str, trust: tuple[str, ...], require_signature: bool, expect_digest: str | None, as_json: bool) -> None:
    """Check every tensor and section of CONTAINER; exit 1 naming each part that changed."""
    report = verify_container(
        container, trust=trust, require_signature=require_signature, expect_digest=expect_digest, raise_on_failure=False
    )
    if as_json:
        document = report.to_json()
        click.echo(json.dumps({**document, **container_verdict(container, document)}, indent=2, sort_keys=True))
    elif report.ok:
        click.echo(
            f"{container}: OK, {report.tensors} tensor(s), {_size(report.tensor_bytes)} of tensor data "
            f"({_size(report.bytes_hashed)} hashed with the graph) in {report.seconds:.3f} s; "
            f"container digest {report.digest}; {describe_signers(signers(report.signatures, bool(trust)), bool(trust))}"
        )
    _list_and_fail(container, report.mismatches, as_json)


@app.command()
@click.argument("container", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the header as JSON.")
@click.option(
    "--cyclonedx", is_flag=True,
    help="Verify CONTAINER and print a CycloneDX 1.6 ML-BOM of it (docs/supply-chain.md).",
)  # fmt: skip
@click.option(
    "--artifact", "artifacts", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
    help="With --cyclonedx: a bound artifact (its binding record names CONTAINER) to list as a dependent; repeat for several.",
)  # fmt: skip
@_trust
def inspect(container: str, as_json: bool, cyclonedx: bool, artifacts: tuple[str, ...], trust: tuple[str, ...]) -> None:
    """Show what CONTAINER says about itself (nothing is hashed: run verify to trust it; --cyclonedx verifies)."""
    from rich.console import Console
    from rich.table import Table

    if (artifacts or trust) and not cyclonedx:
        raise InputError("--artifact and --trust go with --cyclonedx (plain inspect hashes and checks nothing)")
    if cyclonedx:
        from sealtrace.provenance.cyclonedx import container_bom

        click.echo(json.dumps(container_bom(container, artifacts=artifacts, trust=trust), indent=2))
        return
    info = describe_container(container)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    model = info["model"]
    opsets = ", ".join(f"{o['domain'] or 'ai.onnx'} {o['version']}" for o in model["opset_imports"])
    click.echo(f"{info['path']}: sealtrace container v{info['format_version']}, {_size(info['size'])}")
    click.echo(f"  container digest {info['container_digest']}")
    click.echo(f"  plan digest      {info['plan_digest']}")
    click.echo(f"  source           {info['source']['file_name'] or '-'} sha256 {info['source']['sha256']}")
    producer = " ".join(p for p in (model["producer_name"], model["producer_version"]) if p) or "-"
    click.echo(f"  producer         {producer}")
    click.echo(f"  opsets           {opsets or '-'}")
    click.echo(f"  signatures       {', '.join(s['key_id'] for s in info['signatures']) or 'none'}")
    table = Table(title=f"{len(info['tensors'])} tensor(s), {_size(info['tensor_bytes'])}", title_justify="left")
    for column in ("tensor", "dtype", "shape", "bytes", "offset"):
        table.add_column(column, justify="right" if column in ("bytes", "offset") else "left")
    for t in info["tensors"]:
        table.add_row(t["name"], t["dtype"], str(t["shape"]), str(t["length"]), str(t["offset"]))
    Console(markup=False).print(table)  # tensor names come from the file: never markup


@app.command(name="unseal")
@click.argument("container", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(), help="The ONNX file to write.")
@_trust
@_require
@_force
def unseal_command(container: str, output: str, trust: tuple[str, ...], require_signature: bool, force: bool) -> None:
    """Verify CONTAINER and write its model back as one ONNX file (weights bit-exact)."""
    check_output(output, force, "-o")  # before CONTAINER is verified
    result = unseal(container, output, trust=trust, require_signature=require_signature, force=force)
    same = " (identical to the sealed source file)" if result.same_as_source else ""
    click.echo(f"wrote {result.path}: {_size(result.size)}, sha256 {result.sha256}{same}")
    click.echo(f"{container}: verified; {describe_signers(result.signed_by, result.trusted)}")


@app.command()
@click.option("-o", "--output", "output", required=True, type=click.Path(), metavar="KEY.pem", help="Private key file; the public key goes to KEY.pub.")
@click.option(
    "--algorithm", type=click.Choice(KEY_ALGORITHMS), default="ed25519", show_default=True,
    help="Ed25519 signs sealtrace's own formats; ECDSA signs model-signing bundles and attestations.",
)  # fmt: skip
@_force
def keygen(output: str, algorithm: str, force: bool) -> None:
    """Write a new key pair: KEY.pem (private, mode 0600) and KEY.pub."""
    if Path(output).suffix == ".pub":
        raise InputError(f"{output}: name the private key file; the public key is written beside it as .pub")
    check_output(output, force, "-o")
    check_output(Path(output).with_suffix(".pub"), force, "-o (its public key)")
    private, public = generate_keypair(output, overwrite=force, algorithm=algorithm)
    click.echo(f"wrote {private} (private) and {public} (public)")


@app.group()
def manifest() -> None:
    """Per-file and per-tensor digests of a checkpoint directory."""


@manifest.command("create")
@click.argument("directory", type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(), help="The manifest JSON to write.")
@click.option("--sign", "sign", multiple=True, type=click.Path(), metavar="KEY.pem", help="Sign with this private key; repeat for several.")
@click.option("--follow-symlinks", is_flag=True, help="Follow symbolic links that stay inside DIRECTORY.")
@_force
def manifest_create(directory: str, output: str, sign: tuple[str, ...], follow_symlinks: bool, force: bool) -> None:
    """Record every file of DIRECTORY (and every tensor of known formats) in a manifest."""
    check_output(output, force, "-o")  # before DIRECTORY is hashed
    written = manifests.create_manifest(directory, output, sign_with=list(sign), follow_symlinks=follow_symlinks, force=force)
    click.echo(
        f"wrote {output}: {written.files} file(s), {written.tensors} tensor(s), {written.arrays} checkpoint array(s); "
        f"manifest digest {written.digest}"
    )


_cache = click.option(
    "--cache", type=click.Path(), metavar="FILE",
    help="A hash cache of yours (made on first use): files whose inode, size, mtime and ctime it holds are not re-read.",
)  # fmt: skip


@manifest.command("sign")
@click.argument("directory", type=click.Path())
@click.option("--key", "key", required=True, type=click.Path(), metavar="KEY.pem", help="An ECDSA private key (P-256, P-384 or P-521).")
@click.option("-o", "--output", "output", required=True, type=click.Path(), help="The Sigstore bundle to write (model.sig).")
@click.option("--shard-size", type=int, metavar="BYTES", help="Hash each file in shards of this size, as model-signing's shard serialization.")
@click.option("--follow-symlinks", is_flag=True, help="Follow symbolic links that stay inside DIRECTORY.")
@_cache
@_force
def manifest_sign(
    directory: str, key: str, output: str, shard_size: int | None, follow_symlinks: bool, cache: str | None, force: bool
) -> None:
    """Sign DIRECTORY as OpenSSF model-signing does (a Sigstore bundle; no Sigstore instance is reached)."""
    from sealtrace.provenance.modelsig import sign_directory

    signed = sign_directory(directory, key, output, shard_size=shard_size, follow_symlinks=follow_symlinks, force=force,
                            cache_path=cache)  # fmt: skip
    cached = f", {signed.reused} from the hash cache" if signed.reused is not None else ""
    click.echo(
        f"wrote {signed.path}: {signed.files} file(s){cached} as {signed.resources} resource(s), {signed.tensors} tensor(s); "
        f"root digest {signed.root_digest}"
    )


@manifest.command("verify")
@click.argument("directory", type=click.Path())
@click.argument("manifest_file", type=click.Path(), metavar="MANIFEST")
@click.option(
    "--trust", "trust", multiple=True, type=click.Path(), metavar="KEY.pub",
    help="A trusted public key (PEM): Ed25519 for a sealtrace manifest, ECDSA for a model-signing bundle; "
    "repeat for several.",
)  # fmt: skip  (unchecked by click: a directory or device is refused by the key reader, in one line)
@_require
@click.option("--follow-symlinks", is_flag=True, help="Follow symbolic links that stay inside DIRECTORY.")
@click.option(
    "--exact-files", is_flag=True,
    help="Fail on any changed file, even a checkpoint re-laid out with every array's values unchanged.",
)  # fmt: skip
@click.option(
    "--only", "only", multiple=True, metavar="PATTERN",
    help="Model-signing bundles: check only the signed files this glob matches (repeat for several); a partial check.",
)  # fmt: skip
@click.option(
    "--ignore-unsigned-files", "--ignore_unsigned_files", "ignore_unsigned_files", is_flag=True,
    help="Model-signing bundles: leave out files the bundle does not list, as model-signing's option does.",
)  # fmt: skip
@_cache
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def manifest_verify(
    directory: str, manifest_file: str, trust: tuple[str, ...], require_signature: bool, follow_symlinks: bool,
    exact_files: bool, only: tuple[str, ...], ignore_unsigned_files: bool, cache: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Check DIRECTORY against MANIFEST (or a model-signing bundle): changed arrays, changed, missing and
    extra files, changed tensors."""
    from sealtrace.provenance.modelsig import looks_like_bundle

    if looks_like_bundle(manifest_file):
        if exact_files or follow_symlinks:
            raise InputError(f"{manifest_file}: a model-signing bundle; --exact-files and --follow-symlinks apply to "
                             "sealtrace manifests only (the bundle says whether links are followed)")  # fmt: skip
        _verify_model_signature(directory, manifest_file, trust, only, ignore_unsigned_files, cache, as_json)
        return
    if only or ignore_unsigned_files or cache:
        raise InputError(f"{manifest_file}: a sealtrace manifest; --only, --ignore-unsigned-files and --cache apply to "
                         "model-signing bundles only")  # fmt: skip
    report = manifests.verify_manifest(
        directory, manifest_file, trust=trust, require_signature=require_signature, follow_symlinks=follow_symlinks,
        raise_on_failure=False, exact_files=exact_files,
    )  # fmt: skip
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    elif report.ok and report.relaid_out:
        changed = sorted({m.name for m in report.relaid_out if m.kind == "file"})
        click.echo(
            f"{directory}: OK, files re-laid out, every array's values unchanged: {len(changed)} file(s) changed, "
            f"all {report.arrays} array(s) match {manifest_file}; manifest digest {report.digest}"
        )
        for name in changed:
            click.echo(f"  re-laid out: {name}")
    elif report.ok:
        arrays = f", {report.arrays} array(s)" if report.arrays else ""
        click.echo(f"{directory}: OK, {report.files} file(s){arrays} match {manifest_file}; manifest digest {report.digest}")
    _list_and_fail(directory, report.mismatches, as_json)


def _verify_model_signature(
    directory: str, bundle: str, trust: tuple[str, ...], only: tuple[str, ...], ignore_unsigned_files: bool,
    cache: str | None, as_json: bool,
) -> None:  # fmt: skip
    from sealtrace.provenance.modelsig import verify_directory

    report = verify_directory(directory, bundle, trust, raise_on_failure=False, only=only,
                              ignore_unsigned_files=ignore_unsigned_files, cache_path=cache)  # fmt: skip
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    elif report.ok:
        total = report.files + len(report.unchecked)
        verdict = f"PARTIAL OK, {report.files} of {total} signed file(s)" if report.partial else f"OK, {report.files} file(s)"
        cached = f" ({report.reused} from the hash cache)" if report.reused is not None else ""
        click.echo(
            f"{directory}: {verdict}{cached} match {bundle}, signed by key {report.signatures[0].key_id}; "
            f"root digest {report.digest}"
        )
    if not as_json:
        for name in report.unchecked:
            click.echo(f"  not checked: {name}")
        for name in report.ignored:
            click.echo(f"  ignored, not signed: {name}")
    _list_and_fail(directory, report.mismatches, as_json)
