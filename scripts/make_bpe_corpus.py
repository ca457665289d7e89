"""Write 02_PyTorch_Algorithms/data/bpe_corpus.txt, the small mixed corpus of the p02.bpe_tokenizer lesson.

Deterministic (a seeded `random.Random`, no downloads): English prose, Chinese prose, Python code, numbers and
emoji, in short documents separated by the special token `<|endoftext|>`. About 16 KB, so that a pure-Python
BPE trainer learns a few hundred merges from it in about a second.

    python scripts/make_bpe_corpus.py          # rewrites the file; the committed copy must not change
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 2024
TARGET_BYTES = 16_000
SEPARATOR = "<|endoftext|>"
OUT = Path(__file__).resolve().parents[1] / "02_PyTorch_Algorithms" / "data" / "bpe_corpus.txt"

ENGLISH = [
    "The tokenizer turns text into a list of integers before the model sees anything.",
    "A byte-level tokenizer can encode every string, because every string is a sequence of bytes.",
    "The most frequent pair of adjacent tokens is merged into a new token, again and again.",
    "We train the merges once on a corpus and then apply them to every new text in the same order.",
    "It's the merges, not the vocabulary, that decide how a word is split.",
    "They'll say the model can't count letters; the tokenizer is often the reason.",
    "Numbers such as 2048, 4096 and 131072 are split into chunks of digits.",
    "The quick brown fox jumps over the lazy dog, and the lazy dog does not mind.",
    "Attention is computed over tokens, so a shorter sequence means a cheaper forward pass.",
    "We've seen that rare words fall apart into many small pieces.",
    "Special tokens such as the end of text marker are never split and never merged.",
    "Training on more text gives longer tokens for the words that the text repeats.",
    "I'd rather read the merges list than guess what the tokenizer does.",
    "Whitespace matters: the space before a word usually belongs to the word.",
    "A larger vocabulary makes the embedding table bigger and the sequences shorter.",
]

CHINESE = [
    "分词器把文本变成整数序列，模型只看到这些整数。",
    "字节级的分词器可以编码任何字符串，因为任何字符串都是字节序列。",
    "每一步把出现次数最多的相邻词元对合并成一个新的词元。",
    "一个汉字在 UTF-8 中占三个字节，所以合并首先学会的是常见汉字。",
    "大语言模型的训练数据里有中文、英文和代码。",
    "词表越大，序列越短，但嵌入矩阵越大。",
    "特殊词元不会被拆开，也不会参与合并。",
    "今天的天气很好，我们去公园散步吧。",
    "注意力的计算量和序列长度的平方成正比。",
    "学习分词器最好的办法是自己动手实现一个。",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "import torch\nx = torch.randn(4, 8)\ny = x.softmax(dim=-1)\n",
    "class Tokenizer:\n    def __init__(self, merges):\n        self.merges = merges\n",
    'if __name__ == "__main__":\n    main()\n',
    "counts = {}\nfor pair in zip(ids, ids[1:]):\n    counts[pair] = counts.get(pair, 0) + 1\n",
    'with open("data.txt", encoding="utf-8") as f:\n    text = f.read()\n',
    "x_hat = (x - mean) / torch.sqrt(var + eps)\n",
]

EMOJI = ["🙂", "🚀", "🔥", "👍", "🎉", "🤖", "❤️", "👩‍💻", "🇨🇳", "🌍", "✨", "😂"]


def english_line(rng: random.Random) -> str:
    words = rng.sample(ENGLISH, k=rng.randint(1, 3))
    if rng.random() < 0.3:
        words.append(rng.choice(EMOJI))
    return " ".join(words)


def chinese_line(rng: random.Random) -> str:
    line = "".join(rng.sample(CHINESE, k=rng.randint(1, 3)))
    if rng.random() < 0.3:
        line += rng.choice(EMOJI) * rng.randint(1, 2)
    return line


def numbers_line(rng: random.Random) -> str:
    values = [str(rng.randint(0, 10 ** rng.randint(1, 7))) for _ in range(rng.randint(3, 6))]
    return "Values: " + ", ".join(values) + "."


def document(rng: random.Random) -> str:
    makers = [english_line, english_line, chinese_line, numbers_line]
    lines = [rng.choice(makers)(rng) for _ in range(rng.randint(2, 5))]
    if rng.random() < 0.4:
        lines.append(rng.choice(CODE).rstrip("\n"))
    return "\n".join(lines)


def make_corpus(seed: int = SEED, target_bytes: int = TARGET_BYTES) -> str:
    rng = random.Random(seed)
    documents: list[str] = []
    size = 0
    while size < target_bytes:
        documents.append(document(rng))
        size += len(documents[-1].encode("utf-8"))
    return SEPARATOR.join(documents) + "\n"


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    text = make_corpus()
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.encode('utf-8'))} bytes, {text.count(SEPARATOR) + 1} documents)")


if __name__ == "__main__":
    main()
