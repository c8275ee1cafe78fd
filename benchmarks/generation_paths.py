"""How fast a LoRA policy samples on each generation path: the decode-latency figures behind GRPO steps.

One randomly initialised Qwen3 of the given shape with LoRA (r=16 on q/k/v/o, B moved off zero so
the adapter matters) samples a batch of completions of fixed length (EOS suppressed) on each path:

- `train-unmerged`: what TRL's transformers path does by itself: train mode (LoRA dropout on),
  adapter beside the base;
- `eval-unmerged`: eval mode, adapter beside the base;
- `merged`: eval mode, adapter folded into the base (`mascot.train.merged_sampling`, what the
  trainers do by default);
- `merged-static`: merged, with a static KV cache;
- `compiled`: merged, static cache, compiled forward, prompts padded to a bucket (`--compiled-decode`);
  its first call compiles and is reported apart;
- `continuous-batching`: transformers' `generate_batch`, merged (on a GPU only by default: on a CPU its
  scheduler idles for tens of seconds).

For each: prefill time (one forward over the prompts), decode ms per sequential token, tokens per
second, peak memory (GPU), and whether the base weights came back bit for bit. Needs only torch,
transformers and peft (plus this repository's `src` for the merge), so it runs on a bare GPU machine.

    .venv/bin/python benchmarks/generation_paths.py --tiny                  # CPU self-check, seconds
    .venv/bin/python benchmarks/generation_paths.py                         # CPU: the learning preset's Speaker shape, 2 min
    python3 benchmarks/generation_paths.py --shape qwen3-8b --out $OUT/generation.json   # one GPU

Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_train_profile import SHAPES, random_model  # noqa: E402 - the shapes and the random init the trainer profile uses

PATHS = ("train-unmerged", "eval-unmerged", "merged", "merged-static", "compiled", "continuous-batching")


def build_policy(shape: str, vocab: int, device: str, dtype):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    model = random_model(Qwen3ForCausalLM, shape, vocab, device, dtype)
    peft = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    for name, param in peft.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.02)
    return peft


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def generation_config(args, path: str):
    from transformers import GenerationConfig

    from mascot.llm.local_decoding import compiled

    config = GenerationConfig(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              pad_token_id=0, eos_token_id=1, disable_compile=True)  # fmt: skip
    if path == "merged-static":
        config.cache_implementation = "static"
    if path == "compiled":
        config = compiled(config)
    return config


def sample(model, args, path: str, ids, mask):
    """One generation on `path`; returns (seconds, prefill seconds, generated tokens)."""
    import torch

    from mascot.train.merged_sampling import GenerationStats, merged_adapters

    model.train(path == "train-unmerged")
    folded = merged_adapters(model, GenerationStats()) if path not in ("train-unmerged", "eval-unmerged") else nullcontext()
    with torch.no_grad(), folded:
        sync(args.device)
        started = time.perf_counter()
        model(input_ids=ids, attention_mask=mask, logits_to_keep=1)  # the prefill alone, for its time
        sync(args.device)
        prefill = time.perf_counter() - started
        started = time.perf_counter()
        if path == "continuous-batching":
            prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
            outputs = model.generate_batch(prompts, generation_config=generation_config(args, path), progress_bar=False)
            tokens = sum(len(o.generated_tokens) for o in outputs.values())
        else:
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config(args, path))
            tokens = (out.size(1) - ids.size(1)) * out.size(0)
        sync(args.device)
    return time.perf_counter() - started, prefill, tokens


def prompts(args, vocab: int):
    import torch

    g = torch.Generator().manual_seed(1)
    width = -(-args.prompt_tokens // args.bucket) * args.bucket
    ids = torch.randint(3, vocab, (args.batch, width), generator=g)
    mask = torch.ones_like(ids)
    for row in range(args.batch):  # left padding of a few tokens, as a GRPO batch has
        pad = width - args.prompt_tokens + row % 4
        ids[row, :pad], mask[row, :pad] = 0, 0
    return ids.to(args.device), mask.to(args.device)


def measure(model, args, path: str, ids, mask) -> dict:
    import torch

    on_gpu = args.device == "cuda"
    loaded = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n} if args.check_weights else None
    first = None
    if path == "compiled":  # the compile, reported apart
        first = sample(model, args, path, ids, mask)[0]
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    runs = [sample(model, args, path, ids, mask) for _ in range(args.repeats)]
    seconds = min(r[0] for r in runs)
    prefill = min(r[1] for r in runs)
    tokens = runs[0][2]
    row = {
        "path": path,
        "prefill_s": round(prefill, 4),
        "generate_s": round(seconds, 3),
        "decode_ms_per_token": round(1000 * max(seconds - prefill, 0) / args.new_tokens, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if on_gpu else None,
    }
    if first is not None:
        row["first_call_s"] = round(first, 2)
    if loaded is not None:
        row["base_weights_bit_identical"] = all(loaded[n].equal(p) for n, p in model.named_parameters() if "lora_" not in n)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny shape and sizes: the CPU self-check, seconds")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="default: qwen3-8b on a GPU, smollm2-135m on a CPU")
    parser.add_argument("--batch", type=int, help="completions sampled together (default 64 on a GPU, 8 on a CPU)")
    parser.add_argument("--prompt-tokens", type=int, help="default 400 on a GPU, 300 on a CPU")
    parser.add_argument("--new-tokens", type=int, help="default 256 on a GPU, 40 on a CPU (the learning preset's Speaker)")
    parser.add_argument("--bucket", type=int, default=64, help="prompts padded to a multiple of this (the compiled path's bucket)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per path (the fastest is reported)")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ", ".join(PATHS))
    parser.add_argument(
        "--no-check-weights", dest="check_weights", action="store_false", help="skip the bit-identity check (saves a copy of the weights)"
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    import torch

    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.tiny:
        args.shape, args.batch, args.prompt_tokens, args.new_tokens, args.bucket, args.repeats = "tiny", 8, 40, 16, 16, 1
        torch.set_num_threads(1)
    elif args.device == "cpu" and args.shape not in (None, "smollm2-135m"):
        parser.error("8B and 0.6B shapes need a GPU: pass --tiny (or --shape smollm2-135m) on the CPU")
    on_gpu = args.device == "cuda"
    args.shape = args.shape or ("qwen3-8b" if on_gpu else "smollm2-135m")
    args.batch = args.batch or (64 if on_gpu else 8)
    args.prompt_tokens = args.prompt_tokens or (400 if on_gpu else 300)
    args.new_tokens = args.new_tokens or (256 if on_gpu else 40)
    if not on_gpu and args.paths == ",".join(PATHS):
        args.paths = ",".join(p for p in PATHS if p != "continuous-batching")
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    vocab = 2048 if args.tiny else 49_152 if args.shape == "smollm2-135m" else 151_936
    model = build_policy(args.shape, vocab, args.device, dtype)
    ids, mask = prompts(args, vocab)
    rows = []
    for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
        try:
            rows.append(measure(model, args, path, ids, mask))
        except Exception as exc:  # noqa: BLE001 - a path this transformers cannot run is reported, the others go on
            rows.append({"path": path, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
        print(json.dumps(rows[-1]), flush=True)
    report = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__, "shape": args.shape, "dtype": str(dtype), "batch": args.batch, "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens, "results": rows,
    }  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    broken = [r["path"] for r in rows if r.get("error") or r.get("base_weights_bit_identical") is False]
    if broken:
        print(f"FAILED: {', '.join(broken)}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
