"""`mascot merge-lora`: an adapter merged into its base gives the same model as a plain checkpoint."""

from __future__ import annotations

import asyncio

import pytest
from train_helpers import one_thread_per_module, single_thread, tiny_model  # noqa: F401 - fixtures
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.llm.base import ChatRequest
from mascot.train.artefact import TrainingMetadata, read_metadata, write_metadata

runner = CliRunner()


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A LoRA adapter with non-zero weights (as after training) and its training metadata."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("merge")
    base = tiny_model(root / "base")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    )
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    folder = root / "adapter"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    write_metadata(
        folder,
        TrainingMetadata(role="speaker", trainer="grpo", base_model=str(base), dataset="QMSum", evaluation={"reward": {"first": 0.1, "last": 0.5}}),
    )
    return base, folder, model


def logits(model, tokenizer, text="<|im_start|>user\nhello<|im_end|>\n"):
    import torch

    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits


def test_merged_model_equals_base_plus_adapter_and_serves(adapter, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, folder, peft_model = adapter
    out = tmp_path / "merged"
    result = runner.invoke(app, ["merge-lora", "--adapter", str(folder), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists()
    assert not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    peft_model.eval()
    assert torch.allclose(logits(merged, tokenizer), logits(peft_model, tokenizer), atol=1e-4)
    assert not torch.allclose(logits(merged, tokenizer), logits(AutoModelForCausalLM.from_pretrained(base), tokenizer), atol=1e-3)
    meta = read_metadata(out)
    assert meta.weights == "full" and meta.source_artefacts["adapter"] == str(folder.resolve())
    assert meta.evaluation["reward"]["last"] == 0.5 and meta.role == "speaker"

    from mascot.llm.local import LocalClient

    async def greet():
        client = LocalClient(str(out))
        try:
            return await client.chat(ChatRequest(messages=[{"role": "user", "content": "hello"}], temperature=0.0, max_tokens=5))
        finally:
            await client.aclose()

    assert asyncio.run(greet()).completion_tokens > 0


def test_merge_refuses_an_existing_output_and_a_non_adapter(adapter, tmp_path):
    base, folder, _ = adapter
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = runner.invoke(app, ["merge-lora", "--adapter", str(folder), "--output", str(out)])
    assert isinstance(result.exception, MascotError) and "--overwrite" in str(result.exception)
    assert (out / "keep.txt").read_text() == "mine"
    result = runner.invoke(app, ["merge-lora", "--adapter", str(base), "--output", str(tmp_path / "x")])
    assert isinstance(result.exception, MascotError) and "not a LoRA adapter" in str(result.exception)
    result = runner.invoke(app, ["merge-lora", "--adapter", str(folder), "--output", str(out), "--overwrite", "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert not (out / "keep.txt").exists()
    import json

    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
