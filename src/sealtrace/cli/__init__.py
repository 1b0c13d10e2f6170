"""The ``sealtrace`` command line: thin shells over the Python API.

Exit codes (docs/cli.md): 0 success; 1 a check ran and failed; 2 bad usage or bad input
(unreadable model, unsupported op, wrong feeds, invalid container); 3 an internal error.
Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from sealtrace import __version__
from sealtrace.errors import SealtraceError
from sealtrace.limits import ENV_VAR as BUDGET_ENV_VAR
from sealtrace.limits import parse_size, set_memory_budget

EXIT_INTERNAL = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sealtrace")
def app() -> None:
    """sealtrace: seal ONNX models, run them on a fixed plan, and record what ran."""


# Verbs whose module alone is imported, so that they start fast (`sealtrace verify` in a CI step
# imports what verifying needs, not the Plan builder, the backends or the server).
_FAST_VERBS = {"verify": "container"}


def _load_commands(argv: list[str] | None = None) -> None:
    # Each module in this package adds its verbs to ``app``; a new verb group needs no edit here.
    fast = _FAST_VERBS.get(argv[0]) if argv else None
    if fast is not None:
        importlib.import_module(f"{__name__}.{fast}")
    else:
        for module in pkgutil.iter_modules(__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{__name__}.{module.name}")
    _add_budget_option(app)


def _set_budget(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        set_memory_budget(parse_size(value, "--memory-budget"))


def _add_budget_option(group: click.Group) -> None:
    """Every verb reads outside files, so every verb takes --memory-budget (sealtrace.limits)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _add_budget_option(command)
        elif not any(p.name == "memory_budget" for p in command.params):
            command.params.append(
                click.Option(
                    ["--memory-budget"], metavar="SIZE", expose_value=False, is_eager=True, callback=_set_budget,
                    help=f"Most memory a size declared in an input file may claim (default 1GiB; or ${BUDGET_ENV_VAR}).",
                )
            )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    _load_commands(sys.argv[1:] if argv is None else argv)
    set_memory_budget(None)  # a budget given to an earlier call in this process does not carry over
    try:
        status = app.main(args=argv, prog_name="sealtrace", standalone_mode=False)
        # click returns a ctx.exit(N) code instead of raising when not in standalone mode.
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    except click.exceptions.Abort:
        click.echo("sealtrace: interrupted", err=True)
        return 130
    except click.UsageError as exc:
        # Unknown option, missing argument, a directory where a file belongs: one line, like every
        # other error, naming the verb and where its help is (click's own screen is four lines).
        verb = exc.ctx.command_path if exc.ctx is not None else "sealtrace"
        click.echo(f"sealtrace: error: {verb}: {_one_line(exc.format_message())} (see '{verb} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"sealtrace: error: {_one_line(exc.format_message())}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except SealtraceError as exc:
        click.echo(f"sealtrace: error: {_one_line(str(exc))}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("sealtrace: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the CLI promises one line, never a traceback
        click.echo(f"sealtrace: internal error: {type(exc).__name__}: {_one_line(str(exc))}", err=True)
        return EXIT_INTERNAL
    finally:
        set_memory_budget(None)  # --memory-budget is for this call, also when main() is called in-process
    return 0


def _one_line(message: str) -> str:
    return " ".join(message.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
