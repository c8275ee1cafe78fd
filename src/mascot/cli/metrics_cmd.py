"""`mascot metrics`: automatic metrics without an LLM (NLI, Self-BLEU, distinct-n, redundancy)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.cli import app
from mascot.cli.dryrun import DryRunOption
from mascot.errors import MascotError


@app.command("metrics", no_args_is_help=True)
def metrics(
    input_file: Annotated[Path, typer.Option("--input-file", help="Episode JSONL.")],
    output_file: Annotated[Optional[Path], typer.Option("--output-file", help="Report path (default: metrics_auto.json next to the input).")] = None,
    nli_model: Annotated[str, typer.Option("--nli-model", help="NLI sequence-classification model (labels read by name from config.id2label).")] = "FacebookAI/roberta-large-mnli",
    pairing_mode: Annotated[str, typer.Option("--pairing-mode", help="adjacent-agent (consecutive responses by two different agents: fits MASCOT episodes) | same-round (responses sharing a round_id) | all-pairs.")] = "adjacent-agent",
    nli_direction: Annotated[str, typer.Option("--nli-direction", help="temporal (earlier turn = premise) | bidirectional.")] = "temporal",
    allow_round_inference: Annotated[bool, typer.Option("--allow-round-inference", help="Files without round_id: infer rounds from turn order (a user turn ends a round).")] = False,
    embedding_model: Annotated[str, typer.Option("--embedding-model", help="sentence-transformers model for semantic redundancy.")] = "all-MiniLM-L6-v2",
    skip_nli: Annotated[bool, typer.Option("--skip-nli", help="Do not run NLI.")] = False,
    skip_embeddings: Annotated[bool, typer.Option("--skip-embeddings", help="Do not compute semantic redundancy.")] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", help="NLI batch size (embeddings use at least 64).")] = 32,
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="Dataset label for legacy files without metadata.")] = None,
    dry_run: DryRunOption = False,
) -> None:
    """Automatic metrics without an LLM: NLI rates, Self-BLEU, distinct-n, redundancy.

    Per episode and overall (mean and std), written with the settings used.
    """
    from mascot.metrics.auto import MetricsSettings, run_metrics_file
    from mascot.metrics.pairing import DIRECTIONS, PAIRING_MODES

    if pairing_mode not in PAIRING_MODES:
        raise MascotError(f"unknown --pairing-mode {pairing_mode!r}: use one of {', '.join(PAIRING_MODES)}")
    if nli_direction not in DIRECTIONS:
        raise MascotError(f"unknown --nli-direction {nli_direction!r}: use one of {', '.join(DIRECTIONS)}")
    if batch_size < 1:
        raise MascotError("--batch-size must be at least 1")
    settings = MetricsSettings(
        pairing_mode=pairing_mode,
        nli_direction=nli_direction,
        allow_round_inference=allow_round_inference,
        nli_model=nli_model,
        embedding_model=embedding_model,
        skip_nli=skip_nli,
        skip_embeddings=skip_embeddings,
        batch_size=batch_size,
    )
    from mascot.store import ensure_writable_file

    output_file = ensure_writable_file(output_file or Path(input_file).parent / "metrics_auto.json", "--output-file")  # before models load
    if dry_run:
        _dry_run(input_file, output_file, settings)
        return
    report = run_metrics_file(input_file, settings, output_file=output_file, dataset=dataset)
    summary = ", ".join(f"{k} {v['mean']}" for k, v in report["overall"].items() if v["mean"] is not None)
    typer.secho(f"{report['num_episodes']} episodes: {summary}", err=True)
    typer.echo(str(output_file))


def _dry_run(input_file: Path, output_file: Path, settings) -> None:
    from dataclasses import asdict

    from mascot.cli.dryrun import check_model, check_path, print_settings

    check_path(input_file, "--input-file", kind="file")
    resolved = {"input_file": input_file, "output_file": output_file}
    if not settings.skip_nli:
        resolved["nli_model"] = f"{settings.nli_model} ({check_model(settings.nli_model, '--nli-model')})"
    print_settings("metrics", {"resolved": resolved, "settings": asdict(settings)})
