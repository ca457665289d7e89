"""Write 05_Projects/data/tiny_stories.txt, the training corpus of the Part 05 projects.

Short synthetic children's stories in simple English (the register of TinyStories, Eldan and Li 2023, written here by
a small grammar instead of a language model), separated by the special token `<|endoftext|>`. Deterministic: a
seeded `random.Random`, no downloads. About 240 KB: a pure-Python BPE learns its merges from it in about a second,
and a model of 100k parameters learns much of its structure in a few hundred CPU steps, because a story repeats its
characters' names and objects (something attention can copy) inside a small vocabulary.

    python 05_Projects/data/make_corpus.py      # rewrites the file; the committed copy must not change
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 5
TARGET_BYTES = 240_000
SEPARATOR = "<|endoftext|>"
OUT = Path(__file__).resolve().parent / "tiny_stories.txt"

NAMES = {
    "she": ["Lily", "Mia", "Sara", "Anna", "Lucy", "Emma", "Zoe", "Nina", "Rosa", "Ella"],
    "he": ["Tom", "Ben", "Max", "Leo", "Sam", "Jack", "Tim", "Finn", "Omar", "Dan"],
}
ANIMALS = ["cat", "dog", "bunny", "bird", "fox", "bear", "duck", "frog", "mouse", "owl"]
PLACES = ["a small house", "a big farm", "a quiet town", "a green forest", "a little village", "an old castle"]
LANDMARKS = ["the river", "the old tree", "the pond", "the park", "the school", "the big rock"]
OBJECTS = ["ball", "kite", "box", "hat", "book", "shell", "cake", "drum", "boat", "key"]
ADJECTIVES = ["red", "blue", "shiny", "tiny", "big", "soft", "yellow", "old", "new", "funny"]
FEELINGS_BAD = ["sad", "scared", "angry", "tired", "lonely"]
FEELINGS_GOOD = ["happy", "proud", "glad", "excited", "calm"]
VERBS = ["play with", "share", "show", "keep", "fix", "paint"]
WEATHER = ["It was a sunny day.", "The sky was grey and it began to rain.", "The wind was cold.", "The sun was warm."]
LESSONS = [
    "sharing is better than keeping things to yourself",
    "friends help each other",
    "it is good to say sorry",
    "being kind makes everyone happy",
    "you should always tell the truth",
    "trying again is how you learn",
]


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def story(rng: random.Random) -> str:
    pronoun = rng.choice(["she", "he"])
    hero = rng.choice(NAMES[pronoun])
    friend_pronoun = rng.choice(["she", "he"])
    friend = rng.choice([n for n in NAMES[friend_pronoun] if n != hero])
    animal, place, landmark = rng.choice(ANIMALS), rng.choice(PLACES), rng.choice(LANDMARKS)
    obj, adjective, verb = rng.choice(OBJECTS), rng.choice(ADJECTIVES), rng.choice(VERBS)
    bad, good = rng.choice(FEELINGS_BAD), rng.choice(FEELINGS_GOOD)
    His = "Her" if pronoun == "she" else "His"
    his = His.lower()
    Pronoun = pronoun.capitalize()
    friend_his = "her" if friend_pronoun == "she" else "his"
    opening = rng.choice(
        [
            f"Once upon a time, there was a little {animal} named {hero}.",
            f"Once upon a time, in {place}, there lived a little {animal} named {hero}.",
            f"One day, a little {animal} named {hero} went to {landmark}.",
        ]
    )
    middle = [
        rng.choice(WEATHER),
        f"{hero} found {article(adjective)} {adjective} {obj} near {landmark}.",
        rng.choice(
            [
                f"{Pronoun} wanted to {verb} the {obj} with {friend}.",
                f'{Pronoun} ran to {friend} and said, "Look at my {adjective} {obj}!"',
                f"{hero} loved the {obj} very much.",
            ]
        ),
        rng.choice(
            [
                f"But {friend} was {bad} because {friend_pronoun} had lost {friend_his} {rng.choice(OBJECTS)}.",
                f"But {hero} lost the {obj} near {landmark} and was {bad}.",
                f"{friend} wanted the {obj} too, and {hero} did not want to share.",
            ]
        ),
    ]
    if rng.random() < 0.5:
        middle.append(f'"Can you help me?" asked {hero}. "Yes, I can help you," said {friend}.')
    middle.append(
        rng.choice(
            [
                f"{hero} and {friend} looked for a long time, and at last they found it.",
                f"{hero} gave the {obj} to {friend}, and {friend} smiled.",
                f"Together they played with the {adjective} {obj} all day.",
            ]
        )
    )
    ending = rng.choice(
        [
            f"{hero} felt {good}. {Pronoun} learned that {rng.choice(LESSONS)}.",
            f"From that day on, {hero} and {friend} were best friends.",
            f"{hero} went home and told {his} mom about the {obj}. {Pronoun} was very {good}.",
        ]
    )
    return " ".join([opening, *middle, ending])


def make(target_bytes: int = TARGET_BYTES, seed: int = SEED) -> str:
    rng = random.Random(seed)
    stories, size = [], 0
    while size < target_bytes:
        stories.append(story(rng))
        size += len(stories[-1]) + len(SEPARATOR)
    return SEPARATOR.join(stories)


if __name__ == "__main__":
    text = make()
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.encode('utf-8'))} bytes, {text.count(SEPARATOR) + 1} stories)")
