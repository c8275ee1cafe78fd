"""Settings of `mascot eval compare` (light: `mascot --help` reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot import vocab
from mascot.settings import require, setting
from mascot.settings_groups import check_provider

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
    judges_file: Optional[str] = setting(None, vocab.JUDGES_FILE_HELP)
    provider: str = setting("openai-compatible", vocab.PROVIDER_HELP)
    judge_server_url: Optional[list[str]] = setting(None, "Endpoint of the judge (no URL: local model); repeat or comma-separate to spread the load.")
    rubric_version: str = setting(vocab.DEFAULT_RUBRIC_VERSION, "Rubric version whose collective criteria are compared (plus overall).")
    orders: str = setting("all", "Presentation orders: all (every permutation: 2 for two systems, 6 for three) | rotations (3 for three systems).")
    order_rule: str = setting(
        "consistent",
        "How the orders of one context count: consistent (a judge's verdict counts only if every order names the same winner, a tie otherwise; MT-Bench's rule) | majority (every order's verdict pooled).",
    )
    ranking_resamples: int = setting(1000, "Bootstrap resamples of the contexts for the Bradley-Terry ranking's intervals (0: none).")
    limit: Optional[int] = setting(None, "Compare only the first N shared contexts.")
    output_dir: Optional[str] = setting(None, f"Report folder (default: {DEFAULT_COMPARE_ROOT}/<A>_vs_<B>[_vs_<C>]).")
    cache_dir: Optional[str] = setting(None, "Judgment cache folder (default $MASCOT_JUDGE_CACHE_DIR, $MASCOT_CACHE_DIR or ~/.cache/mascot).")
    no_cache: bool = setting(False, "Judge everything again instead of reusing cached verdicts.")
    judge_max_tokens: int = setting(vocab.JUDGE_MAX_TOKENS, "Longest judge reply in tokens.")
    max_in_flight: int = setting(vocab.MAX_IN_FLIGHT, "Requests in flight per endpoint.")
    request_timeout: float = setting(vocab.REQUEST_TIMEOUT_S, "Seconds a server may take to answer one request.")

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
