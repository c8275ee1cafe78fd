"""How often the embedded Director keeps the v2 example's placeholder mark, and what the parser makes
of its answers.

Samples the Director's first decision on a few contexts with the in-process model (the prompt as
`mascot.dialogue.prompts.director_messages` writes it, the answer opened with the directive block
and `agent:` as the in-process client's name slot opens it), then counts the answers that name a
companion, those that carry the mark, and those `parse_directive` still counts as copies.

    python benchmarks/director_example_mark.py --data-file ../shared/data/esconv/valid.jsonl
    python benchmarks/director_example_mark.py      # the validation contexts shipped for the learning preset

CPU, about a minute.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-file", default=None, help="an ESConv file in its hub export format (default: mascot/samples/learn)")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--contexts", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6, help="answers per context")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from mascot.data.loaders import load_contexts
    from mascot.dialogue.director import DIRECTIVE_OPENING, parse_directive
    from mascot.dialogue.examples import EXAMPLE_MARK
    from mascot.dialogue.prompts import director_messages
    from mascot.llm.models import embedded_model_dir
    from mascot.rosters import roster_for_dataset
    from mascot.train.models import load_tokenizer

    if args.data_file is None:
        from mascot.pipeline.steps import shipped_data

        args.data_file = str(shipped_data("learn"))
    torch.manual_seed(args.seed)
    tokenizer = load_tokenizer(str(embedded_model_dir()))
    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir()).eval()
    roster = roster_for_dataset("ESConv")
    counts = dict(answers=0, naming_a_companion=0, carrying_the_mark=0, copies=0)
    for context in load_contexts("ESConv", split=args.split, data_file=args.data_file, limit=args.contexts):
        prompt = tokenizer.apply_chat_template(director_messages(roster, context, []), tokenize=False, add_generation_prompt=True)
        ids = tokenizer(prompt + DIRECTIVE_OPENING, return_tensors="pt")
        out = model.generate(**ids, do_sample=True, temperature=args.temperature, max_new_tokens=60, num_return_sequences=args.samples,
                             pad_token_id=tokenizer.eos_token_id)  # fmt: skip
        for row in out:
            answer = DIRECTIVE_OPENING + tokenizer.decode(row[ids.input_ids.shape[1] :], skip_special_tokens=True)
            parsed = parse_directive(answer, roster)
            counts["answers"] += 1
            if parsed.directive or parsed.copied:
                counts["naming_a_companion"] += 1
                counts["carrying_the_mark"] += EXAMPLE_MARK in answer.lower()
                counts["copies"] += parsed.copied is not None
    print(", ".join(f"{name.replace('_', ' ')} {value}" for name, value in counts.items()))


if __name__ == "__main__":
    main()
