"""The in-process local backend on the real embedded SmolLM2-135M-Instruct (converted once from the
packaged GGUF and cached) and on tiny random models built here."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import torch
from train_helpers import one_thread_per_module  # noqa: F401 - fixture

from mascot import hub
from mascot.errors import MascotError
from mascot.llm import models
from mascot.llm.base import ChatRequest, LLMError
from mascot.llm.local import LocalClient
from mascot.llm.local_decoding import PerRowSampling, StreamTrimmer
from mascot.llm.models import embedded_model_dir, resolve_local_model
from mascot.vocab import DEFAULT_LOCAL_MODEL

QUESTIONS = [
    "What is the capital of France?",
    "Say hello in one short sentence.",
    "Give me one tip for sleeping well.",
    "Name a color.",
]


def ask(question: str, **settings) -> ChatRequest:
    settings.setdefault("temperature", 0.0)
    settings.setdefault("max_tokens", 12)
    return ChatRequest([{"role": "user", "content": question}], **settings)


@pytest.fixture(scope="module")
def embedded_dir():
    return embedded_model_dir()


@pytest.fixture
def client(embedded_dir):
    return LocalClient(str(embedded_dir), max_batch_size=8)


@pytest.fixture
def count_generate(monkeypatch):
    """Wraps the shared model's generate to record the batch size of every call."""

    def install(client: LocalClient) -> list[int]:
        net = client.load().net
        original = net.generate
        sizes: list[int] = []

        def counting(*args, **kwargs):
            sizes.append(kwargs["input_ids"].shape[0])
            return original(*args, **kwargs)

        monkeypatch.setattr(net, "generate", counting)
        return sizes

    return install


async def test_batched_greedy_equals_one_by_one(client):
    alone = [await client.chat(ask(q)) for q in QUESTIONS]
    calls_before = client.generate_calls
    together = await asyncio.gather(*(client.chat(ask(q)) for q in QUESTIONS))
    assert client.generate_calls == calls_before + 1
    assert [r.texts for r in together] == [r.texts for r in alone]
    assert all(r.text for r in together)


async def test_a_repetition_penalty_applies_to_its_own_row_only(client):
    import dataclasses

    plain = ask(QUESTIONS[0])
    penalised = dataclasses.replace(plain, repetition_penalty=1.5)
    alone = [await client.chat(request) for request in (plain, penalised)]
    together = await asyncio.gather(client.chat(plain), client.chat(penalised))
    assert [r.texts for r in together] == [r.texts for r in alone]  # one batch, each row its own penalty
    assert alone[0].text != alone[1].text


async def test_concurrent_calls_share_generate_calls(client, count_generate):
    client.max_batch_size = 4
    sizes = count_generate(client)
    responses = await asyncio.gather(*(client.chat(ask(q, max_tokens=4)) for q in QUESTIONS + QUESTIONS[:2]))
    assert len(responses) == 6 and all(r.text for r in responses)
    assert len(sizes) < 6
    assert sizes == [4, 2]


async def test_greedy_and_sampled_requests_go_to_separate_batches(client, count_generate):
    sizes = count_generate(client)
    requests = [ask(QUESTIONS[0], max_tokens=4), ask(QUESTIONS[1], temperature=0.7, max_tokens=4, seed=3)]
    responses = await asyncio.gather(*(client.chat(r) for r in requests))
    assert sizes == [1, 1]
    assert all(r.text for r in responses)


async def test_n_choices(client, count_generate):
    sizes = count_generate(client)
    sampled = await client.chat(ask(QUESTIONS[2], temperature=0.7, n=3, max_tokens=12, seed=7))
    assert len(sampled.texts) == 3 and len(sampled.finish_reasons) == 3
    assert all(sampled.texts)
    assert sizes == [3]  # n sampled choices are n rows of one batch
    greedy = await client.chat(ask(QUESTIONS[2], n=2, max_tokens=6))
    assert len(greedy.texts) == 2 and greedy.texts[0] == greedy.texts[1]
    assert sizes == [3, 1]  # greedy choices are identical: computed once


async def test_seeded_sampling_repeats_for_the_same_batching(client):
    request = ask(QUESTIONS[2], temperature=0.7, n=2, max_tokens=10, seed=11)
    first = await client.chat(request)
    second = await client.chat(request)
    assert first.texts == second.texts


async def test_stop_strings_truncate(client):
    full = (await client.chat(ask(QUESTIONS[2], max_tokens=24))).text
    words = full.split()
    assert len(words) >= 4
    stop = f" {words[2]}"
    expected = full[: full.index(stop)].strip()
    shared = await client.chat(ask(QUESTIONS[2], max_tokens=24, stop=(stop,)))  # stops inside generate
    assert shared.text == expected and shared.finish_reasons == ["stop"]
    assert shared.completion_tokens < 24
    # different stops in one batch: truncated after generation, each by its own strings
    mixed = await asyncio.gather(
        client.chat(ask(QUESTIONS[2], max_tokens=24, stop=("no such text", stop))),
        client.chat(ask(QUESTIONS[2], max_tokens=24)),
    )
    assert mixed[0].text == expected and mixed[0].finish_reasons == ["stop"]
    assert mixed[1].text == full


async def test_token_counts(client):
    request = ask(QUESTIONS[1], max_tokens=8)
    response = await client.chat(request)
    assert response.prompt_tokens == len(client.encode(request.messages)) > 0
    assert 0 < response.completion_tokens <= 8
    assert response.latency_s > 0 and response.model == client.model
    if response.finish_reasons == ["length"]:
        assert response.completion_tokens == 8
    doubled = await client.chat(ask(QUESTIONS[1], max_tokens=8, n=2))
    assert doubled.completion_tokens == 2 * response.completion_tokens
    assert doubled.prompt_tokens == response.prompt_tokens


async def test_rows_are_trimmed_to_their_own_max_tokens(client):
    client.ignore_eos = True  # every row runs to its limit
    short, long = await asyncio.gather(client.chat(ask(QUESTIONS[2], max_tokens=3)), client.chat(ask(QUESTIONS[3], max_tokens=9)))
    assert (short.completion_tokens, short.finish_reasons) == (3, ["length"])
    assert (long.completion_tokens, long.finish_reasons) == (9, ["length"])


async def test_stream_pieces_join_to_the_chat_text(client):
    request = ask(QUESTIONS[2], max_tokens=20)
    pieces = [piece async for piece in client.stream(request)]
    assert len(pieces) > 1
    assert "".join(pieces) == (await client.chat(request)).text


async def test_stream_honours_stop_strings(client):
    full = (await client.chat(ask(QUESTIONS[2], max_tokens=20))).text
    stop = f" {full.split()[3]}"
    pieces = [piece async for piece in client.stream(ask(QUESTIONS[2], max_tokens=20, stop=(stop,)))]
    assert "".join(pieces) == full[: full.index(stop)].strip()


async def test_loop_stays_responsive_while_generating(client, monkeypatch):
    """Generation waits until the event loop has run this test's next line: had generating blocked
    the loop, that line could never run and the generation would give up waiting."""
    net = client.load().net
    original = net.generate
    generating, loop_ran = threading.Event(), threading.Event()
    waited: list[bool] = []

    def generate_once_the_loop_ran(*args, **kwargs):
        generating.set()
        waited.append(loop_ran.wait(30))
        return original(*args, **kwargs)

    monkeypatch.setattr(net, "generate", generate_once_the_loop_ran)
    reply = asyncio.create_task(client.chat(ask(QUESTIONS[2], max_tokens=24)))
    assert await asyncio.to_thread(generating.wait, 30)
    loop_ran.set()  # the loop runs this while generate waits in its worker thread
    await reply
    assert waited and all(waited)


async def test_clients_share_one_loaded_model(embedded_dir):
    first, second = LocalClient(str(embedded_dir)), LocalClient(str(embedded_dir) + "/")
    assert first.load() is second.load()


async def test_closed_client_refuses_calls(client):
    await client.aclose()
    with pytest.raises(LLMError):
        await client.chat(ask(QUESTIONS[0]))


async def test_missing_model_folder_is_a_one_line_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(MascotError, match="no-such-model") as info:
        await LocalClient(str(missing)).chat(ask(QUESTIONS[0]))
    assert "\n" not in str(info.value)


def test_hub_id_offline_is_a_one_line_error_without_asking_the_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_probe():
        raise AssertionError("offline: the hub must not be probed")

    monkeypatch.setattr(hub, "_probe_hub", no_probe)
    monkeypatch.setattr(hub, "_hub_reachable", None)
    with pytest.raises(MascotError, match="someone/not-a-cached-model") as info:
        resolve_local_model("someone/not-a-cached-model")
    assert "\n" not in str(info.value)


def test_hub_probe_fails_fast_without_network(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setattr(hub, "_hub_reachable", None)
    assert hub.hub_online() is False
    assert hub._hub_reachable is False  # probed once, remembered


def test_default_model_offline_resolves_to_the_embedded_checkpoint(monkeypatch, embedded_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "in_hf_cache", lambda model_id: False)
    assert resolve_local_model(DEFAULT_LOCAL_MODEL) == embedded_dir
    assert (embedded_dir / "model.safetensors").is_file()


def test_per_row_sampling_applies_each_rows_settings():
    scores = torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.0, 0.0]])
    out = PerRowSampling([0.5, 1.0], [1.0, 0.5], torch.device("cpu"))(None, scores)
    assert torch.allclose(out[0], scores[0] / 0.5)  # temperature only
    assert out[1, 0] == 2.0 and torch.isinf(out[1, 1:]).all()  # top-p keeps the head of the mass


def test_per_row_repetition_penalty_lowers_the_tokens_a_row_has_seen():
    from mascot.llm.local_decoding import PerRowRepetitionPenalty

    scores = torch.tensor([[2.0, -1.0, 0.5], [2.0, -1.0, 0.5]])
    seen = torch.tensor([[0, 1], [0, 1]])
    out = PerRowRepetitionPenalty([2.0, 1.0], torch.device("cpu"))(seen, scores.clone())
    assert torch.allclose(out[0], torch.tensor([1.0, -2.0, 0.5]))  # positive divided, negative multiplied, unseen kept
    assert torch.allclose(out[1], scores[1])  # a row at 1.0 is unchanged


def test_stream_trimmer_strips_and_stops():
    trimmer = StreamTrimmer(("END",))
    emitted = [trimmer.feed(p) for p in ["  Hello", " wor", "ld E", "N", "D more"]]
    assert "".join(emitted) + trimmer.finish() == "Hello world"
    assert trimmer.stopped
    plain = StreamTrimmer(None)
    assert "".join([plain.feed("\n Hi "), plain.feed(" there  ")]) + plain.finish() == "Hi  there"


# -- adapters on a tiny random model -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lora(tmp_path_factory, embedded_dir):
    """A tiny random Llama with the SmolLM2 tokenizer (which has a chat template) and a LoRA r=2
    adapter whose weights are non-zero, so that applying it changes the logits."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    base_dir, adapter_dir = root / "base", root / "adapter"
    LlamaForCausalLM(config).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(LlamaForCausalLM.from_pretrained(base_dir), lora).save_pretrained(adapter_dir)
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    return base_dir, adapter_dir


def _logits(client: LocalClient) -> torch.Tensor:
    loaded = client.load()
    with torch.inference_mode():
        return loaded.net(torch.tensor([[1, 2, 3, 4, 5]])).logits


async def test_lora_adapter_loads_as_folder_and_as_argument(tiny_lora):
    base_dir, adapter_dir = tiny_lora
    base = LocalClient(str(base_dir))
    base_logits = _logits(base)
    as_folder = LocalClient(str(adapter_dir))
    as_argument = LocalClient(str(base_dir), adapter=str(adapter_dir))
    assert torch.allclose(_logits(as_folder), _logits(as_argument), atol=1e-5)
    assert not torch.allclose(_logits(as_folder), base_logits, atol=1e-4)
    assert torch.equal(_logits(base), base_logits)  # the shared base copy is never merged into
    for adapted in (as_folder, as_argument):
        response = await adapted.chat(ask(QUESTIONS[0], max_tokens=4))
        assert response.completion_tokens > 0 and len(response.texts) == 1


async def test_missing_adapter_is_a_one_line_error(tiny_lora, tmp_path):
    base_dir, _ = tiny_lora
    with pytest.raises(MascotError, match="adapter"):
        LocalClient(str(base_dir), adapter=str(tmp_path / "nothing-here")).load()


def test_adapter_trained_on_another_embedded_copy_uses_this_one(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/elsewhere/SmolLM2-135M-Instruct"}))
    assert models.adapter_base_name(tmp_path) == DEFAULT_LOCAL_MODEL


# -- first conversion (about 40 s) --------------------------------------------------------------


@pytest.mark.slow
def test_embedded_conversion_runs_once_across_concurrent_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_CACHE_DIR", str(tmp_path))
    conversions: list[int] = []
    convert = models.convert_embedded_gguf

    def counting(target):
        conversions.append(1)
        convert(target)

    monkeypatch.setattr(models, "convert_embedded_gguf", counting)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(embedded_model_dir())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [tmp_path / "models" / "SmolLM2-135M-Instruct"] * 2
    assert conversions == [1]
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".SmolLM2-135M-Instruct-")]
    assert models.is_complete_checkpoint(results[0])


def test_local_batch_size_reaches_the_in_process_client_and_is_checked():
    from mascot.llm.providers import RoleEndpoint, build_client
    from mascot.settings_groups import ClientLimits

    client = build_client(RoleEndpoint(role="speaker", model="some-local-model"), ClientLimits(local_batch_size=5))
    assert isinstance(client, LocalClient) and client.max_batch_size == 5
    assert build_client(RoleEndpoint(role="speaker", model="m"), ClientLimits()).max_batch_size == 32
    with pytest.raises(MascotError, match="--local-batch-size must be at least 1"):
        ClientLimits(local_batch_size=0)


def test_a_run_saved_with_another_local_batch_size_still_resumes(tmp_path):
    """Rows decoded together change speed, not what a run is: runs saved with 8 resume under 32."""
    from mascot.runs.store import check_resume_settings

    (tmp_path / "run_config.json").write_text(json.dumps({"settings": {"local_batch_size": 8, "seed": 7}}))
    check_resume_settings(tmp_path, {"local_batch_size": 32, "seed": 7})
    with pytest.raises(MascotError, match="seed: saved 7, now 8"):
        check_resume_settings(tmp_path, {"local_batch_size": 32, "seed": 8})


async def test_a_batch_nobody_waits_for_stops_at_its_next_token(client, monkeypatch):
    """Ctrl-C cancels the calls: the thread generating their batch stops instead of running to
    max_tokens, so that the process need not wait for it to exit."""
    from mascot.llm import local

    lengths: list[int] = []
    original = local.generate

    def measured(*args, **kwargs):
        tokens = original(*args, **kwargs)
        lengths.append(tokens.shape[1])
        return tokens

    monkeypatch.setattr(local, "generate", measured)
    client.ignore_eos = True  # without the stop, every row would generate all of max_tokens
    client.load()
    calls = [asyncio.ensure_future(client.chat(ask(q, max_tokens=2000))) for q in QUESTIONS[:2]]
    while client.generate_calls == 0:
        await asyncio.sleep(0.01)
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    while not lengths:  # the runner's thread returns once it sees nobody waits
        await asyncio.sleep(0.05)
    assert lengths[0] < 2000 and all(call.cancelled() for call in calls)
