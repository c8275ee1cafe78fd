"""Scoring conversations with a trained scalar reward model.

The text is built exactly as TRL's RewardTrainer built it in training (the reward model's chat
template over prompt + response messages), so the reward a policy is optimised against and the
held-out accuracy reported for the reward model come from the same function.
"""

from __future__ import annotations

from collections.abc import Sequence

from mascot.llm.base import Message
from mascot.schema import PreferencePair


class RewardModelScorer:
    """Scores chat conversations with a one-logit sequence classifier, in batches, without grads."""

    def __init__(self, model, tokenizer, *, max_length: int = 1024, batch_size: int = 8) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size

    @classmethod
    def from_path(cls, path: str, *, device=None, max_length: int = 1024, batch_size: int = 8) -> RewardModelScorer:
        from mascot.train.models import load_reward_model

        model, tokenizer = load_reward_model(path, device=device)
        return cls(model, tokenizer, max_length=max_length, batch_size=batch_size)

    def encode(self, conversation: Sequence[Message]) -> list[int]:
        """Token ids as TRL tokenizes a conversational example; an over-long one keeps its end."""
        ids = self.tokenizer.apply_chat_template(list(conversation), tokenize=True, return_dict=True)["input_ids"]
        return list(ids[-self.max_length :])

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


def pairwise_accuracy(scorer: RewardModelScorer, pairs: Sequence[PreferencePair]) -> dict[str, float | int]:
    """Share of pairs whose chosen response outscores the rejected one, and the mean score gap."""
    if not pairs:
        return {"pairwise_accuracy": None, "mean_score_gap": None, "num_pairs": 0}
    chosen = scorer.score([p.prompt + p.chosen for p in pairs])
    rejected = scorer.score([p.prompt + p.rejected for p in pairs])
    wins = [c > r for c, r in zip(chosen, rejected)]
    gaps = [c - r for c, r in zip(chosen, rejected)]
    return {
        "pairwise_accuracy": round(sum(wins) / len(wins), 4),
        "mean_score_gap": round(sum(gaps) / len(gaps), 4),
        "num_pairs": len(pairs),
    }
