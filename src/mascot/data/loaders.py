"""One entry point for every dataset: `load_contexts` (a list) and `iter_contexts` (streaming).

Without a data file the split comes from the Hugging Face hub (`datasets`, imported only then);
with one, from the file in its hub export format, or from the split's file inside a folder
(`--data-file ../shared/data/esconv --split valid` reads `valid.jsonl`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from mascot.data import qmsum  # a submodule: no package import cycle
from mascot.data.registry import DatasetError
from mascot.data.registry import dataset as registered
from mascot.data.sources import SPLIT_ALIASES, resolve_split_file
from mascot.data.subsets import filter_contexts, loader_hooks, parse_split
from mascot.schema import Context


def split_name(dataset: str, split: str) -> str:
    """The split as the dataset names it in files and ids (ESConv `valid`, QMSum `val`); an
    evaluation subset (`negative`, `product`) names its base split."""
    entry = registered(dataset)
    return entry.split_name(parse_split(entry.name, split)[0])


def iter_contexts(
    dataset: str,
    *,
    split: str = "test",
    data_file: Path | str | None = None,
    transcript_window: int = qmsum.DEFAULT_TRANSCRIPT_WINDOW,
) -> Iterator[Context]:
    """Contexts in file order, read as they are needed (a QMSum meeting at a time). `split` may be
    an evaluation subset (`mascot.data.subsets`): its base split, filtered."""
    entry = registered(dataset)
    reader = entry.loader()
    base, subset = parse_split(entry.name, split)
    name = entry.split_name(base)
    if transcript_window < 1:
        raise DatasetError(f"token budget must be positive (got {transcript_window})")
    hooks = loader_hooks(entry, subset)
    if data_file is None:
        return filter_contexts(reader.iter_hub(name, transcript_window=transcript_window, **hooks), entry, split, subset)
    given = Path(data_file).expanduser()
    path = resolve_split_file(given, reader.file_candidates(name))
    if not given.is_dir():
        check_split_matches_file(path, base)
    return filter_contexts(reader.iter_file(path, name, transcript_window=transcript_window, **hooks), entry, split, subset)


def split_named_by(path: Path) -> str | None:
    """The split a file's name states (`valid.jsonl`, `esconv_test.jsonl`, `val.jsonl`), if any."""
    words = [w for w in re.split(r"[^a-z]+", Path(path).stem.lower()) if w]
    named = {SPLIT_ALIASES[w] for w in words if w in SPLIT_ALIASES}
    return named.pop() if len(named) == 1 else None


def split_for(split: str | None, data_file: Path | str | None) -> str:
    """The split to read: as given; without one, the split a data file's name states
    (`valid.jsonl`); else test."""
    if split:
        return split
    if data_file is not None and not Path(data_file).expanduser().is_dir():
        return split_named_by(Path(data_file)) or "test"
    return "test"


def check_split_matches_file(path: Path, split: str) -> None:
    """Context ids embed the split (`esconv-test-1`): reading `valid.jsonl` as the test split would
    give ids that collide with the real test records, so a file named for another split is refused."""
    named = split_named_by(path)
    if named is not None and named != split:
        raise DatasetError(f"{path} is named for the {named} split but --split is {split}: pass --split {named}")


def load_contexts(
    dataset: str,
    *,
    split: str = "test",
    data_file: Path | str | None = None,
    limit: int | None = None,
    seed: int = 0,
    transcript_window: int = qmsum.DEFAULT_TRANSCRIPT_WINDOW,
    shuffle: bool = False,
) -> list[Context]:
    """Contexts of one split. In file order, stopping after `limit`; with `shuffle`, the whole split
    is shuffled with `seed` first, so that the same seed picks the same contexts."""
    if limit is not None and limit < 1:
        raise DatasetError(f"--limit must be at least 1 (got {limit})")
    contexts = iter_contexts(dataset, split=split, data_file=data_file, transcript_window=transcript_window)
    if shuffle:
        picked = list(contexts)
        random.Random(seed).shuffle(picked)
        return picked[:limit]
    return list(islice(contexts, limit))
