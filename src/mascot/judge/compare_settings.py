"""Settings of `mascot eval compare` (light: `mascot --help` reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot import vocab
from mascot.settings import default_for, require, setting
from mascot.settings_groups import (
    ClientLimits,
    DataSettings,
    JudgePanelSettings,
    JudgeServerSettings,
    JudgingSettings,
    OutputSettings,
    RubricSettings,
    check_provider,
)

DEFAULT_COMPARE_ROOT = "outputs/mascot_eval/compare"


@dataclass
class CompareSettings:
    """Head to head: the judge compares two (or three) systems' conversations on the same contexts,
    blinded and in every order; win/tie/loss rates, a binomial test, order and judge agreement,
    each judge's position and length bias, and a Bradley-Terry ranking."""

    systems: list[str] = setting(
        None, "Two or three episode files (or run folders holding episodes.jsonl), one per system.", argument=True, required=True
    )
    labels: Optional[str] = setting(None, "Comma-separated system names, in the order of the files (default: each file's metadata.system).")
    judge: Optional[list[str]] = setting(
        None,
        "Judge model id; repeat for several judges (all on --judge-server-url, or the local model)." + vocab.PLUGIN_JUDGE_HELP,
        flags=("--judge-model", "--judge"),
    )
    judges_file: Optional[str] = default_for(JudgePanelSettings, "judges_file", None, help=vocab.JUDGES_FILE_HELP)
    provider: str = default_for(JudgePanelSettings, "provider", "openai-compatible", help=vocab.PROVIDER_HELP)
    judge_server_url: Optional[list[str]] = default_for(
        JudgeServerSettings,
        "judge_server_url",
        None,
        help="Endpoint of the judge (no URL: local model); repeat or comma-separate to spread the load.",
    )
    rubric_version: str = default_for(
        RubricSettings, "rubric_version", vocab.DEFAULT_RUBRIC_VERSION, help="Rubric version whose collective criteria are compared (plus overall)."
    )
    orders: str = setting("all", "Presentation orders: all (every permutation: 2 for two systems, 6 for three) | rotations (3 for three systems).")
    order_rule: str = setting(
        "consistent",
        "How the orders of one context count: consistent (a judge's verdict counts only if every order names the same winner, a tie otherwise; MT-Bench's rule) | majority (every order's verdict pooled).",
    )
    ranking_resamples: int = setting(1000, "Bootstrap resamples of the contexts for the Bradley-Terry ranking's intervals (0: none).")
    limit: Optional[int] = default_for(DataSettings, "limit", None, help="Compare only the first N shared contexts.")
    output_dir: Optional[str] = default_for(
        OutputSettings, "output_dir", None, help=f"Report folder (default: {DEFAULT_COMPARE_ROOT}/<A>_vs_<B>[_vs_<C>])."
    )
    cache_dir: Optional[str] = default_for(JudgingSettings, "cache_dir", None)
    no_cache: bool = default_for(JudgingSettings, "no_cache", False, help="Judge everything again instead of reusing cached verdicts.")
    judge_max_tokens: int = default_for(JudgingSettings, "judge_max_tokens", vocab.JUDGE_MAX_TOKENS)
    max_in_flight: int = default_for(ClientLimits, "max_in_flight", vocab.MAX_IN_FLIGHT)
    request_timeout: float = default_for(
        ClientLimits, "request_timeout", vocab.REQUEST_TIMEOUT_S, help="Seconds a server may take to answer one request."
    )

    def __post_init__(self) -> None:
        require(self.systems is not None and 2 <= len(self.systems) <= 3, "mascot eval compare takes two or three episode files (A B [C])")
        require(self.orders in ("all", "rotations"), f"unknown --orders {self.orders!r}: use all or rotations")
        require(self.order_rule in ("consistent", "majority"), f"unknown --order-rule {self.order_rule!r}: use consistent or majority")
        require(self.ranking_resamples >= 0, "--ranking-resamples must be at least 0")
        require(self.limit is None or self.limit >= 1, "--limit must be at least 1")
        require(self.judge_max_tokens >= 16, "--judge-max-tokens must be at least 16")
        require(self.max_in_flight >= 1 and self.request_timeout > 0, "--max-in-flight must be at least 1 and --request-timeout positive")
        require(not (self.judge and self.judges_file), "use either --judge or --judges-file, not both")
        check_provider(self.provider)
        if self.labels is not None:
            require(len(self.label_list) == len(self.systems), f"--labels names {len(self.label_list)} systems for {len(self.systems)} files")

    @property
    def label_list(self) -> list[str] | None:
        return [s.strip() for s in self.labels.split(",") if s.strip()] if self.labels else None
