"""The rubric LLM judge: prompts, strict parsing, on-disk cache, several judges and their agreement.

Import from the submodules (`mascot.judge.rubric_judge`, `.panel`, `.run`, ...); this package
imports nothing heavy.
"""
