"""`mascot eval --systems ...`: systems against their baselines, per split."""

from __future__ import annotations

import typer

from mascot.eval.settings import EvalSettings

NO_NLI_FLAG = "--no-nli"  # eval's own way out; `mascot metrics`, which it runs, calls it --skip-nli


def run_eval_command(settings: EvalSettings) -> None:
    from mascot.eval.run import prepare, run_eval
    from mascot.metrics.nli import NLIUnavailable, require_reachable

    try:
        if settings.nli and not settings.report_only:
            prepare(settings)  # the settings' own errors come first
            require_reachable(settings.nli_model, NO_NLI_FLAG)  # then the NLI model, before any system is generated
        typer.echo(str(run_eval(settings)))
    except NLIUnavailable as exc:  # raised inside the metrics step: name this command's flag
        raise exc.with_flag(NO_NLI_FLAG) from None


def dry_run_eval(command: str, settings: EvalSettings) -> None:
    from dataclasses import asdict

    from mascot.commands.dryrun import print_settings
    from mascot.eval.run import prepare

    dataset, _, cells = prepare(settings)
    resolved = {"dataset": dataset, "runs": [c.label for c in cells]}
    if settings.data_file:  # each split's contexts are there (and the split is not empty)
        from mascot.data import load_contexts

        resolved["contexts"] = {s: len(load_contexts(dataset, split=s, data_file=settings.data_file, limit=settings.limit)) for s in settings.split_names}
    print_settings("eval", {"resolved": resolved, "settings": asdict(settings)})
