"""Writes 05_Projects/data/lora_dpo_pairs.json, the synthetic task of p05.lora_dpo_pipeline (no download).

Token ids: 0 = pad, 1 = SEP (unused), 2 = EOS, 4..11 = the eight "digits" a prompt is made of.
A prompt is four digits; an example is the prompt, a one-token answer, EOS. Two answers are plausible: the RULE
(the last digit plus one, the preferred answer) and the COPY (the last digit repeated, the dispreferred one).
The SFT demonstrations follow the rule only 30% of the time (the rest copy), so supervised fine-tuning teaches the
rule only partly. The training preference pairs prefer the rule to a random other answer (the copy among them);
the held-out pairs compare the rule with the copy. Held-out prompts appear in neither training set.

    python 05_Projects/data/make_preferences.py        # deterministic: seed 2026
"""

import json
import random
from pathlib import Path

PAD, SEP, EOS = 0, 1, 2
DIGITS = range(4, 12)
PROMPT_LEN = 4
RULE_SHARE_IN_SFT = 0.3


def rule(prompt: list[int]) -> list[int]:
    return [prompt[-1] + 1]


def copy(prompt: list[int]) -> list[int]:
    return [prompt[-1]]


def wrong(prompt: list[int], rng: random.Random) -> list[int]:
    """A dispreferred answer for training: any token of 4..12 but the rule's (the copy is one of the eight)."""
    return [rng.choice([token for token in range(4, 13) if token != prompt[-1] + 1])]


def make(seed: int = 2026, num_sft: int = 256, num_pairs: int = 128, num_heldout: int = 64) -> dict:
    rng = random.Random(seed)
    prompts: set[tuple[int, ...]] = set()
    while len(prompts) < num_sft + num_pairs + num_heldout:
        prompts.add(tuple(rng.choice(DIGITS) for _ in range(PROMPT_LEN)))
    ordered = sorted(prompts)
    rng.shuffle(ordered)
    sft_prompts = ordered[:num_sft]
    pair_prompts = ordered[num_sft : num_sft + num_pairs]
    heldout_prompts = ordered[num_sft + num_pairs :]
    sft = [[list(p), rule(list(p)) if rng.random() < RULE_SHARE_IN_SFT else copy(list(p))] for p in sft_prompts]
    pairs = [[list(p), rule(list(p)), wrong(list(p), rng)] for p in pair_prompts]
    heldout = [[list(p), rule(list(p)), copy(list(p))] for p in heldout_prompts]
    return {
        "about": f"p05.lora_dpo_pipeline; written by 05_Projects/data/make_preferences.py (seed {seed})",
        "tokens": {"pad": PAD, "sep": SEP, "eos": EOS, "digits": [DIGITS.start, DIGITS.stop - 1]},
        "sft": sft,
        "pairs": pairs,
        "heldout": heldout,
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("lora_dpo_pairs.json")
    out.write_text(json.dumps(make(), separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
