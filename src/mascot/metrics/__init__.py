"""Automatic metrics without an LLM (`mascot metrics`): NLI between agent responses, Self-BLEU,
distinct-n and semantic redundancy. torch, transformers and sentence-transformers load lazily."""
