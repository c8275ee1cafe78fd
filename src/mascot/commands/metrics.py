"""`mascot metrics`: automatic metrics without an LLM (NLI, Self-BLEU, distinct-n, redundancy) and
the conversation checks (mascot.metrics.conversation)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import typer

from mascot.commands.judge import JudgeSettings
from mascot.errors import MascotError
from mascot.metrics.settings import MetricsSettings
from mascot.settings import default_for, part, setting
from mascot.settings_groups import DataSettings


@dataclass
class MetricsCommandSettings(MetricsSettings):
    """Automatic metrics without an LLM: NLI rates, Self-BLEU, distinct-n, redundancy, conversation checks.

    Per episode and overall (mean and std), written with the settings used.
    """

    input_file: Path = default_for(JudgeSettings, "input_file", None, help="Episode JSONL.", required=True)
    output_file: Optional[Path] = setting(None, "Report path (default: metrics_auto.json next to the input).")
    dataset: Optional[str] = default_for(
        DataSettings, "dataset", None, help="Dataset of legacy files without metadata (their roster for the conversation checks)."
    )

    def writable_output(self) -> Path:
        """The report path, checked writable before any model loads."""
        from mascot.files import ensure_writable_file

        return ensure_writable_file(self.output_file or Path(self.input_file).parent / "metrics_auto.json", "--output-file")


class CountingNLI:
    """An NLI scorer whose `predict` shows its progress: the pairs in length order (as the scorer
    sorts them) in chunks of whole batches, so that every batch is the one the scorer would make."""

    def __init__(self, nli) -> None:
        self.nli = nli

    def __getattr__(self, name: str):
        return getattr(self.nli, name)

    def predict(self, pairs: list[tuple[str, str]]) -> list[str]:
        from mascot.progress import ProgressLine

        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        chunk = max(1, self.nli.batch_size) * 4
        out = [""] * len(pairs)
        with ProgressLine("NLI pairs", len(pairs), unit="pairs") as progress:
            for start in range(0, len(order), chunk):
                picked = order[start : start + chunk]
                for i, label in zip(picked, self.nli.predict([pairs[i] for i in picked])):
                    out[i] = label
                progress.advance(len(picked))
        return out


def run_metrics(s: MetricsCommandSettings) -> None:
    from mascot.metrics.auto import run_metrics_file
    from mascot.progress import plural

    output_file = s.writable_output()
    if not Path(s.input_file).is_file():  # before the NLI model loads
        raise MascotError(f"--input-file {s.input_file} does not exist")
    nli = None
    if not s.skip_nli:
        from mascot.metrics.nli import NLIScorer

        nli = CountingNLI(NLIScorer.load(s.nli_model, batch_size=s.batch_size))
    report = run_metrics_file(s.input_file, part(s, MetricsSettings), output_file=output_file, dataset=s.dataset, nli=nli)
    if not report["num_episodes"]:
        from mascot.runs.store import mark_failed

        mark_failed(output_file, f"{s.input_file} has no episode")
        raise MascotError(f"{s.input_file} has no episode: no metric computed (the report at {output_file} says failed)")
    summary = ", ".join(f"{k} {v['mean']}" for k, v in report["overall"].items() if v["mean"] is not None)
    skipped = (
        f"; skipped {plural(report['num_skipped_lines'], 'malformed line')} of {Path(s.input_file).name}" if report.get("num_skipped_lines") else ""
    )
    typer.secho(f"{plural(report['num_episodes'], 'episode')}: {summary or 'no metric defined'}; wrote {output_file}{skipped}", err=True)
    from mascot.metrics.conversation import summary_line

    typer.secho(f"conversation checks: {summary_line(report['conversation'])}", err=True)
    typer.echo(str(output_file))


def dry_run_metrics(_command: str, s: MetricsCommandSettings) -> None:
    from mascot.commands.dryrun import check_model, check_path, print_settings

    output_file = s.writable_output()
    check_path(s.input_file, "--input-file", kind="file")
    resolved = {"input_file": s.input_file, "output_file": output_file}
    if not s.skip_nli:
        resolved["nli_model"] = f"{s.nli_model} ({check_model(s.nli_model, '--nli-model')})"
    print_settings("metrics", {"resolved": resolved, "settings": asdict(part(s, MetricsSettings))})
