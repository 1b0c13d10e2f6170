"""``sealtrace compile``, ``bind`` and ``check-binding``: derived artifacts tied to their container."""

from __future__ import annotations

import json

import click

from sealtrace.binding import bind as bind_artifact
from sealtrace.binding import check_binding, sidecar_path
from sealtrace.cli import app
from sealtrace.container import IntegrityError
from sealtrace.container.signatures import describe_signers
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.inputs import parse_assignments
from sealtrace.verdict import binding_failure, binding_verdict, verdict


@app.command(name="compile")
@click.argument("container", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(["onnxruntime", "tvm"]), default="onnxruntime", show_default=True)
@click.option("--level", type=click.Choice(["basic", "extended", "all"]), default=None,
              help="ONNX Runtime graph optimization level (default all; onnxruntime only).")
@click.option("--target", default=None, metavar="TARGET",
              help="TVM target (default llvm: this machine's CPU family; tvm only).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=SIZE",
              help="Fix a dynamic input dimension (by name or INPUT:AXIS) for TVM; the others stay dynamic.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The artifact to write.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem", help="Sign the binding.")
@click.option("--force", is_flag=True, help="Overwrite an existing artifact and its .binding.json.")
def compile_command(
    container: str,
    backend: str,
    level: str | None,
    target: str | None,
    dims: tuple[str, ...],
    output: str,
    sign_key: str | None,
    force: bool,
) -> None:
    """Verify CONTAINER, write an optimized/compiled artifact, and bind it to the container.

    With --backend tvm the artifact is a shared library that also carries the container and Plan
    digests itself (docs/tvm.md).
    """
    if backend == "tvm":
        if level is not None:
            raise InputError("--level is ONNX Runtime's; a TVM engine takes --target and --dim")
        from sealtrace.engines.tvm import compile_tvm

        record = compile_tvm(container, output, target=target or "llvm", dims=_dim_sizes(dims), sign_with=sign_key,
                             overwrite=force)  # fmt: skip
    else:
        if target is not None or dims:
            raise InputError("--target and --dim are TVM's (--backend tvm); ONNX Runtime takes --level")
        from sealtrace.engines.onnxruntime import compile_onnxruntime

        record = compile_onnxruntime(container, output, level=level or "all", sign_with=sign_key, overwrite=force)
    click.echo(f"wrote {output} and {sidecar_path(output).name}: bound to container {record.container_digest[:16]}...")


def _dim_sizes(dims: tuple[str, ...]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, value in parse_assignments(dims, "--dim").items():
        try:
            sizes[name] = int(value)
        except ValueError:
            raise InputError(f"--dim {name}={value}: size must be an integer") from None
    return sizes


@app.command()
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--to", "container", required=True, type=click.Path(dir_okay=False), help="The source container.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem", help="Sign the binding.")
@click.option("--transformation", default="external", show_default=True, help="What made the artifact.")
@click.option("--backend", "backend_name", default="unknown", show_default=True, help="Tool that made it.")
@click.option("--backend-version", default="unknown", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite an existing sidecar.")
def bind(
    artifact: str,
    container: str,
    sign_key: str | None,
    transformation: str,
    backend_name: str,
    backend_version: str,
    force: bool,
) -> None:
    """Bind ARTIFACT (any file) to the container it was derived from: writes ARTIFACT.binding.json."""
    record = bind_artifact(
        artifact, container, transformation=transformation, backend=backend_name,
        backend_version=backend_version, sign_with=sign_key, embed=False, overwrite=force,
    )
    click.echo(f"wrote {sidecar_path(artifact).name}: {artifact} bound to container {record.container_digest[:16]}...")


@app.command(name="check-binding")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--container", required=True, type=click.Path(dir_okay=False), help="The container it must come from.")
@click.option("--trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
              help="Trusted signer; repeat for several. The binding must be validly signed by one of them.")
@click.option("--require-signature", is_flag=True,
              help="Fail unless a trusted key signed the binding (needs --trust; implied by --trust).")
@click.option("--strict", is_flag=True, help="A different backend version fails instead of warning.")
@click.option("--json", "as_json", is_flag=True)
def check_binding_command(
    artifact: str, container: str, trust: tuple[str, ...], require_signature: bool, strict: bool, as_json: bool
) -> None:
    """Exit 0 when ARTIFACT is unmodified and bound to CONTAINER, 1 when not (saying which check failed)."""
    if require_signature and not trust:
        raise InputError("--require-signature needs at least one --trust KEY.pub")
    try:
        result = check_binding(
            artifact, container, trust=trust, require_signature=require_signature, strict=strict,
            raise_on_failure=False,
        )
    except IntegrityError as exc:  # the container fails its own check: so does the binding
        if as_json:
            failed = binding_failure(f"container fails its check: {exc}")
            click.echo(json.dumps(verdict("binding", artifact, [failed]), indent=2, sort_keys=True))
        raise
    if as_json:
        shared = binding_verdict(
            artifact, result.failures, result.record.digest, result.record.container_digest,
            [s.key_id for s in result.record.signatures], result.trusted_by if trust else None,
        )
        click.echo(json.dumps({"artifact": artifact, "warnings": result.warnings, "binding": result.record.to_json(),
                               **shared}, indent=2, sort_keys=True))
    else:
        for warning in result.warnings:
            click.echo(f"warning: {warning}", err=True)
        if result.ok:
            signed = describe_signers(result.trusted_by if trust else result.signed_by, bool(trust))
            click.echo(f"ok: {artifact} is unmodified and bound to {container}; binding {signed}")
    if not result.ok:
        if not as_json:
            for failure in result.failures:
                click.echo(f"FAILED: {failure}", err=True)
        # The detail lines above; the last line is the error line every verb ends a failure with.
        raise CheckFailedError(f"{artifact}: binding check failed ({len(result.failures)} check(s) failed)")
