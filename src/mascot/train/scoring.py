"""Scoring conversations with a trained scalar reward model.

The text is built exactly as it was in training (the reward model's chat template over prompt +
response messages, fitted to the length limit by `encode_fitted`), so the reward a policy is
optimised against and the held-out accuracy reported for the reward model come from the same
function.

Fitting: a conversation longer than `max_length` tokens loses the middle of its prompt. The start
(system prompt: persona, rules; the query) and the end (the latest turns, the directive) stay, and
so does the whole response, which is what the model scores. Only a response that alone fills the
limit is cut, at its end.
"""

from __future__ import annotations

from collections.abc import Sequence

from mascot.llm.base import Message
from mascot.schema import PreferencePair
from mascot.train.models import load_reward_model


def chat_ids(tokenizer, messages: Sequence[Message]) -> list[int]:
    """Token ids of a conversation as TRL tokenizes a conversational example."""
    return list(tokenizer.apply_chat_template(list(messages), tokenize=True, return_dict=True)["input_ids"])


def fit_ids(ids: list[int], prompt_len: int, max_length: int) -> list[int]:
    """`ids` (prompt then response) cut to `max_length` by dropping the middle of the prompt."""
    if len(ids) <= max_length:
        return ids
    keep = prompt_len - (len(ids) - max_length)  # prompt tokens that still fit beside the response
    if keep < 2:  # the response alone (nearly) fills the limit: keep its start, after the prompt's head
        head = min(prompt_len, max_length // 2)
        return ids[:head] + ids[prompt_len : prompt_len + max_length - head]
    head = keep // 2
    return ids[:head] + ids[prompt_len - (keep - head) :]


def encode_fitted(tokenizer, prompt: Sequence[Message], response: Sequence[Message], max_length: int) -> tuple[list[int], bool]:
    """Token ids of prompt + response fitted to `max_length`, and whether anything was cut."""
    ids = chat_ids(tokenizer, [*prompt, *response])
    if len(ids) <= max_length:
        return ids, False
    prompt_ids = chat_ids(tokenizer, prompt) if prompt else []
    prompt_len = next((i for i, (a, b) in enumerate(zip(ids, prompt_ids)) if a != b), min(len(ids), len(prompt_ids)))
    return fit_ids(ids, prompt_len, max_length), True


class RewardModelScorer:
    """Scores chat conversations with a one-logit sequence classifier, in batches, without grads."""

    def __init__(self, model, tokenizer, *, max_length: int = 1024, batch_size: int = 8) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size

    @classmethod
    def from_path(cls, path: str, *, device=None, max_length: int = 1024, batch_size: int = 8) -> RewardModelScorer:
        model, tokenizer = load_reward_model(path, device=device)
        return cls(model, tokenizer, max_length=max_length, batch_size=batch_size)

    def encode(self, conversation: Sequence[Message]) -> list[int]:
        """Token ids as in training: the last message is the response, the rest its prompt."""
        conversation = list(conversation)
        return encode_fitted(self.tokenizer, conversation[:-1], conversation[-1:], self.max_length)[0]

    def score(self, conversations: Sequence[Sequence[Message]]) -> list[float]:
        import torch

        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        scores: list[float] = []
        try:
            for start in range(0, len(conversations), self.batch_size):
                batch = [self.encode(c) for c in conversations[start : start + self.batch_size]]
                input_ids, attention = self._pad(batch)
                with torch.no_grad():
                    logits = self.model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
                scores.extend(float(v) for v in logits[:, 0].float().cpu())
        finally:
            self.model.train(was_training)
        return scores

    def _pad(self, batch: list[list[int]]):
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):  # right padding, as TRL's preference collator
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention[row, : len(ids)] = 1
        return input_ids, attention


def score_pair_sides(scorer: RewardModelScorer, pairs: Sequence[PreferencePair]) -> tuple[list[float], list[float]]:
    """The chosen and the rejected side of every pair, each distinct conversation scored once: the
    pairs of one prompt share their replies (8 candidates make up to 28 pairs of 8 texts)."""
    import json

    conversations = [c for p in pairs for c in (p.prompt + p.chosen, p.prompt + p.rejected)]
    keys = [json.dumps(c, sort_keys=True, ensure_ascii=False) for c in conversations]
    first = {}  # key -> index of its first conversation, the one scored
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    scored = dict(zip(first, scorer.score([conversations[i] for i in first.values()]), strict=True))
    sides = [scored[key] for key in keys]
    return sides[0::2], sides[1::2]


def pairwise_accuracy(scorer: RewardModelScorer, pairs: Sequence[PreferencePair]) -> dict[str, float | int]:
    """Share of pairs whose chosen response outscores the rejected one, and the mean score gap."""
    return accuracy_of(*score_pair_sides(scorer, pairs)) if pairs else accuracy_of([], [])


def accuracy_of(chosen: Sequence[float], rejected: Sequence[float]) -> dict[str, float | int | None]:
    """Pairwise accuracy and mean gap of scored sides (None for no pair)."""
    if not chosen:
        return {"pairwise_accuracy": None, "mean_score_gap": None, "num_pairs": 0}
    wins = [c > r for c, r in zip(chosen, rejected, strict=True)]
    gaps = [c - r for c, r in zip(chosen, rejected, strict=True)]
    return {
        "pairwise_accuracy": round(sum(wins) / len(wins), 4),
        "mean_score_gap": round(sum(gaps) / len(gaps), 4),
        "num_pairs": len(wins),
    }
