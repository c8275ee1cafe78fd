"""A rater's submission as the page sends it (conversations "1"/"2") turned into a stored rating
(systems "a"/"b"), with every value checked: the pages and any script hitting the endpoint get the
same one-line errors."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mascot.schema import utc_now
from mascot.study import METRICS
from mascot.study.db import Item, StudyError, opened, rater_id_for, rater_item, save_rating

SHOWN_CHOICES = ("1", "2", "tie")


class RatingError(StudyError):
    """A submission with a missing or out-of-range value."""


def parse_submission(form: Mapping[str, str], item: Item) -> tuple[str, dict[str, dict[str, int]]]:
    """(choice, scores by system) from form fields `choice` and `<metric>_<1|2>`."""
    shown = str(form.get("choice", ""))
    if shown not in SHOWN_CHOICES:
        raise RatingError("choose conversation 1, conversation 2 or a tie")
    choice = "tie" if shown == "tie" else item.side_of(shown)
    scores: dict[str, dict[str, int]] = {"a": {}, "b": {}}
    for position in ("1", "2"):
        for metric in METRICS:
            raw = str(form.get(f"{metric}_{position}", "")).strip()
            if raw not in {"1", "2", "3", "4", "5"}:
                raise RatingError(f"rate {metric.replace('_', ' ')} of conversation {position} from 1 to 5")
            scores[item.side_of(position)][metric] = int(raw)
    return choice, scores


def submit(path: Path, token: str, position: int, form: Mapping[str, str]) -> Item:
    """Checks and stores one rating; returns after the commit (the rating is durable then)."""
    with opened(path) as conn:
        rater = rater_id_for(conn, token)
        item = rater_item(conn, rater, position) if rater is not None else None
        if item is None:
            raise StudyError("no such item for this link")
        choice, scores = parse_submission(form, item)
        save_rating(conn, item.item_id, choice, scores, utc_now())
    return item
