"""`mascot eval`: systems against each other (`mascot eval --systems ...`) and head to head (`mascot eval compare A B`).

The run is the group's callback (`invoke_without_command`), so `mascot eval --systems ...` runs an
evaluation while subcommands (`mascot eval compare`) stay available.
"""

from __future__ import annotations

import typer

from mascot.cli.app import app
from mascot.cli.help import MascotGroup
from mascot.cli.settings_cli import settings_command
from mascot.eval.settings import EvalSettings


NO_NLI_FLAG = "--no-nli"  # eval's own way out; `mascot metrics`, which it runs, calls it --skip-nli


def _run(settings: EvalSettings) -> None:
    from mascot.eval.run import prepare, run_eval
    from mascot.metrics.nli import NLIUnavailable, require_reachable

    try:
        if settings.nli and not settings.report_only:
            prepare(settings)  # the settings' own errors come first
            require_reachable(settings.nli_model, NO_NLI_FLAG)  # then the NLI model, before any system is generated
        typer.echo(str(run_eval(settings)))
    except NLIUnavailable as exc:  # raised inside the metrics step: name this command's flag
        raise exc.with_flag(NO_NLI_FLAG) from None


def _dry_run(command: str, settings: EvalSettings) -> None:
    from dataclasses import asdict

    from mascot.cli.dryrun import print_settings
    from mascot.eval.run import prepare

    dataset, _, cells = prepare(settings)
    resolved = {"dataset": dataset, "runs": [c.label for c in cells]}
    if settings.data_file:  # each split's contexts are there (and the split is not empty)
        from mascot.data import load_contexts

        resolved["contexts"] = {s: len(load_contexts(dataset, split=s, data_file=settings.data_file, limit=settings.limit)) for s in settings.split_names}
    print_settings("eval", {"resolved": resolved, "settings": asdict(settings)})


_command = settings_command(EvalSettings, _run, dry_run=_dry_run)


def _callback(ctx: typer.Context, **values) -> None:
    if ctx.invoked_subcommand is not None:  # `mascot eval compare ...`: the subcommand runs alone
        return
    _command(ctx, **values)


_callback.__signature__ = _command.__signature__  # type: ignore[attr-defined]
_callback.__doc__ = _command.__doc__

eval_app = typer.Typer(
    help="Evaluate systems against their baselines, per split; compare two systems head to head.",
    invoke_without_command=True,
    cls=MascotGroup,  # its own options in panels, names never cut
)
eval_app.callback(invoke_without_command=True)(_callback)
app.add_typer(eval_app, name="eval")
