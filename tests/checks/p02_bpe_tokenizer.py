"""Checks for p02.bpe_tokenizer. References: the Hugging Face `tokenizers` library (its ByteLevel pre-tokenizer,
which runs GPT-2's regex in a full Unicode engine, and its BpeTrainer on the same corpus), a slow, obviously-correct
BPE written below (train with either lexicographic tie-break, and encode), hand-derived merges and cut points,
counted dictionary writes, `tracemalloc`, and round trips.

Hugging Face's BpeTrainer breaks ties by the smallest token ids (the 256 byte tokens numbered in the sorted order of
GPT-2's printable byte alphabet, merged tokens taking the next id): the learner's incremental trainer, given those ids
(read from Hugging Face's own trained vocabulary) as its tie-break key, must reproduce Hugging Face's merge list
exactly (`incremental_bpe::reproduces_hugging_face_with_its_ids`).
"""

from __future__ import annotations

import bisect
import gc
import hashlib
import json
import os
import random
import tracemalloc
import unicodedata
from collections import Counter
from functools import cache

from llm_algo.check import Checks, expect, expect_value_error
from llm_algo.paths import repo_root

checks = Checks("p02.bpe_tokenizer")

END_OF_TEXT = "<|endoftext|>"
NUM_MERGES = 300
VOCAB_500 = 243  # merges for a vocabulary of 500: 256 bytes + 243 merges + <|endoftext|>


@cache
def corpus() -> str:
    return (repo_root() / "02_PyTorch_Algorithms" / "data" / "bpe_corpus.txt").read_text(encoding="utf-8")


def short(value, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


# ------------------------------------------------------------------------- the reference: GPT-2's byte alphabet


@cache
def byte_to_char() -> dict[int, str]:
    """GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to chr(256 + k) in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@cache
def char_to_byte() -> dict[str, int]:
    return {c: b for b, c in byte_to_char().items()}


def from_byte_level(piece: str) -> bytes:
    return bytes(char_to_byte()[c] for c in piece)


@cache
def hf_pre_tokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def reference_pretokenize(text: str) -> list[str]:
    """GPT-2's regex as Hugging Face runs it (\\p{L}, \\p{N} in a Unicode engine): the text at each piece's offsets."""
    return [text[start:end] for _, (start, end) in hf_pre_tokenizer().pre_tokenize_str(text)]


# ------------------------------------------------------------------------- the reference: a slow, plain BPE


def spec_merge(tokens: list[bytes], pair: tuple[bytes, bytes]) -> list[bytes]:
    # the plain definition: scan left to right; a merged pair is consumed whole, so matches never overlap
    result, skip = [], False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if i + 1 < len(tokens) and (token, tokens[i + 1]) == pair:
            result.append(token + tokens[i + 1])
            skip = True
        else:
            result.append(token)
    return result


def split_at_specials(text: str, specials) -> list[str]:
    pieces = [text]
    for special in specials:
        pieces = [part for piece in pieces for part in piece.split(special)]
    return pieces


def smallest_pair(pair_counts: Counter):
    """The lesson's rule: the most frequent pair, then the smallest (a, b)."""
    top = max(pair_counts.values())
    return min(pair for pair, count in pair_counts.items() if count == top)


def greatest_pair(pair_counts: Counter):
    """CS336's rule: the most frequent pair, then the lexicographically greatest (a, b)."""
    top = max(pair_counts.values())
    return max(pair for pair, count in pair_counts.items() if count == top)


TIE_RULES = {"lexicographic_smaller": smallest_pair, "lexicographic_greater": greatest_pair}


def reference_chunk_counts(text: str, specials=(END_OF_TEXT,)) -> Counter:
    chunks = Counter()
    for piece in split_at_specials(text, specials):
        for chunk in reference_pretokenize(piece):
            chunks[tuple(bytes([b]) for b in chunk.encode("utf-8"))] += 1
    return chunks


@cache
def corpus_chunk_counts() -> dict:
    return dict(reference_chunk_counts(corpus()))


def pair_counts_of(chunks: dict) -> Counter:
    counts = Counter()
    for chunk, count in chunks.items():
        for i in range(len(chunk) - 1):
            counts[(chunk[i], chunk[i + 1])] += count
    return counts


def spec_merges(chunks: dict, num_merges: int, choose=smallest_pair, touched: list | None = None) -> list:
    """Recount every pair after every merge; `touched` collects, per merge, the total length of the chunks that held
    the merged pair (the work an incremental trainer cannot avoid)."""
    chunks = Counter(chunks)
    merges = []
    for _ in range(num_merges):
        pair_counts = pair_counts_of(chunks)
        if not pair_counts:
            break
        best = choose(pair_counts)
        merges.append(best)
        merged, work = Counter(), 0
        for chunk, count in chunks.items():
            after = tuple(spec_merge(list(chunk), best))
            work += len(chunk) if after != chunk else 0
            merged[after] += count
        chunks = merged
        if touched is not None:
            touched.append(work)
    return merges


def spec_train(text: str, num_merges: int, specials=(END_OF_TEXT,), choose=smallest_pair) -> list[tuple[bytes, bytes]]:
    return spec_merges(reference_chunk_counts(text, specials), num_merges, choose)


# Frozen output of spec_merges on the corpus (scripts/make_bpe_reference_merges.py writes it), so that the checks do
# not spend seconds retraining the slow reference.
REFERENCE_MERGES = repo_root() / "tests" / "checks" / "data" / "p02_bpe_tokenizer_merges.json"


@cache
def reference_merges() -> dict:
    data = json.loads(REFERENCE_MERGES.read_text(encoding="utf-8"))
    if data["corpus_sha256"] != hashlib.sha256(corpus().encode("utf-8")).hexdigest():
        raise RuntimeError(f"{REFERENCE_MERGES} is stale: run python scripts/make_bpe_reference_merges.py")
    for rule in TIE_RULES:
        data[rule] = tuple((bytes.fromhex(a), bytes.fromhex(b)) for a, b in data[rule])
    return data


def corpus_merges() -> tuple:
    """NUM_MERGES merges of the slow reference on the corpus, with the lesson's tie-break."""
    return reference_merges()["lexicographic_smaller"]


def greater_corpus_merges() -> tuple:
    """VOCAB_500 merges of the slow reference on the corpus, with CS336's tie-break."""
    return reference_merges()["lexicographic_greater"]


class ReferenceTokenizer:
    """The plain encoder: every merge applied in training order to every chunk (memoised per chunk), ids by the
    lesson's layout. It offers what encode_iterable may use of a tokenizer: `encode(text)` and `special_ids`."""

    def __init__(self, merges, specials=(END_OF_TEXT,)):
        self.merges, self.specials, self.memo, self.chunk_memo = list(merges), tuple(specials), {}, {}
        self.token_id = {bytes([b]): b for b in range(256)}
        for i, (a, b) in enumerate(self.merges):
            self.token_id.setdefault(a + b, 256 + i)
        self.special_ids = {s: 256 + len(self.merges) + j for j, s in enumerate(self.specials)}
        self.longest_first = sorted(self.specials, key=len, reverse=True)

    def encode_chunk(self, chunk: str) -> list[int]:
        if chunk not in self.chunk_memo:
            tokens = [bytes([b]) for b in chunk.encode("utf-8")]
            for pair in self.merges:
                tokens = spec_merge(tokens, pair)
            self.chunk_memo[chunk] = [self.token_id[t] for t in tokens]
        return self.chunk_memo[chunk]

    def encode(self, text: str) -> list[int]:
        if text in self.memo:  # a text seen before (memory_stays_flat streams its input twice)
            return list(self.memo[text])
        ids: list[int] = []
        at = 0
        while at < len(text):
            # the earliest special token, the longest one where several start at the same place
            hits = [(text.find(s, at), -len(s), s) for s in self.longest_first if text.find(s, at) >= 0]
            cut, _, special = min(hits) if hits else (len(text), 0, None)
            for chunk in reference_pretokenize(text[at:cut]):
                ids.extend(self.encode_chunk(chunk))
            if special is None:
                break
            ids.append(self.special_ids[special])
            at = cut + len(special)
        self.memo[text] = ids
        return list(ids)


def spec_encode(text: str, merges, specials=(END_OF_TEXT,)) -> list[int]:
    return ReferenceTokenizer(merges, specials).encode(text)


@cache
def hugging_face_tokenizer(num_merges: int = NUM_MERGES):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + num_merges + 1,
        min_frequency=0,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus().split(END_OF_TEXT), trainer=trainer)
    return tokenizer


def hugging_face_merges(num_merges: int = NUM_MERGES) -> list[tuple[bytes, bytes]]:
    import json

    merges = json.loads(hugging_face_tokenizer(num_merges).to_str())["model"]["merges"]
    return [(from_byte_level(a), from_byte_level(b)) for a, b in merges]


# ------------------------------------------------------------------------- inputs

TRICKY = [
    "Hello world's  end",
    "a   b\t\tc\n\n  d  ",
    "x_y foo__bar __init__ 123abc abc123 3.14159 1,000,000",
    "It's they'll we've I'd you're she'S DON'T",
    "  leading spaces and trailing   ",
    "你好，世界！分词器。 中文 English混合",
    "emoji 🙂🙂 👩‍💻 🇨🇳 ❤️ ok!!! ...?",
    'def f(x):\n    return x ** 2  # square\n\tprint("done")\n',
    "café naïve Ωmega über",
]

CODE_POINT_POOLS = [
    (0x20, 0x7E),  # ASCII
    (0xA0, 0x17F),  # Latin-1 and Latin Extended-A
    (0x4E00, 0x9FFF),  # CJK
    (0x1F300, 0x1F64F),  # emoji
    (0x0300, 0x036F),  # combining marks
]


def random_unicode(rng: random.Random, length: int) -> str:
    chars = []
    for _ in range(length):
        r = rng.random()
        if r < 0.05:
            chars.append(rng.choice(["\n", "\t", "  ", "\u200d", "'s", "_"]))
        else:
            low, high = rng.choice(CODE_POINT_POOLS)
            char = chr(rng.randint(low, high))
            # skip the numbers that are not decimal digits (superscripts, fractions): \p{N} calls them numbers,
            # `re` calls them word characters -- the one documented difference of the lesson's pattern
            chars.append("0" if unicodedata.category(char) in ("No", "Nl") else char)
    return "".join(chars)


# ------------------------------------------------------------------------------------------ pretokenize


@checks("pretokenize")
def hand_checkable_split(ex):
    """'Hello world's  end 42x': words carry their leading space; a run of spaces leaves one for the next word"""
    text = "Hello world's  end 42x"
    want = ["Hello", " world", "'s", " ", " end", " 42", "x"]
    got = ex.pretokenize(text)
    expect(
        got == want,
        "wrong chunks",
        input=repr(text),
        expected=short(want),
        got=short(got),
        hint="alternatives in GPT-2's order; \\s+(?!\\S) before \\s+; letters are [^\\W\\d_] (no digits)",
    )


@checks("pretokenize")
def matches_hugging_face_byte_level_pre_tokenizer(ex):
    """the lesson corpus and tricky strings (spaces, _, digits, contractions, CJK, emoji) split as GPT-2's regex"""
    for text in [*TRICKY, *corpus().split(END_OF_TEXT)[:12]]:
        want = reference_pretokenize(text)
        got = ex.pretokenize(text)
        if got != want:
            first = next(
                (i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want))
            )
            expect(
                False,
                f"chunks differ from GPT-2's pattern at chunk {first}",
                input=short(text, 100),
                expected=short(want[first : first + 4]),
                got=short(got[first : first + 4]),
                hint="underscore is a symbol (not a letter), digits are their own run, contractions come first",
            )


@checks("pretokenize")
def chunks_tile_the_text(ex):
    """random Unicode strings (CJK, emoji, combining marks, ZWJ): ''.join(chunks) == text, no empty chunk"""
    rng = random.Random(0)
    for length in (1, 7, 40, 200):
        text = random_unicode(rng, length)
        got = ex.pretokenize(text)
        expect(
            isinstance(got, list) and all(isinstance(c, str) and c for c in got) and "".join(got) == text,
            "the chunks do not reassemble the input",
            input=short(text, 80),
            expected="a list of non-empty str whose concatenation is the input",
            got=short(got, 120),
            hint="use findall with alternatives that together match every character",
        )
        expect(
            got == reference_pretokenize(text),
            "chunks differ from GPT-2's pattern",
            input=short(text, 80),
            expected=short(reference_pretokenize(text)),
            got=short(got),
            hint="compare your classes with \\p{L} (letters), \\p{N} (numbers), [^\\s\\p{L}\\p{N}] (others)",
        )


# ------------------------------------------------------------------------------------------ merge_pair


@checks("merge_pair")
def hand_checkable_merges(ex):
    """(a, a, a) -> (aa, a); (a, b, a, b) -> (ab, ab); no occurrence -> unchanged"""
    a, b, c = b"a", b"b", b"c"
    for tokens, pair, want in (
        ((a, a, a), (a, a), (b"aa", a)),
        ((a, a, a, a), (a, a), (b"aa", b"aa")),
        ((a, b, a, b), (a, b), (b"ab", b"ab")),
        ((c, a, b), (b, a), (c, a, b)),
        ((), (a, b), ()),
        ((a,), (a, a), (a,)),
    ):
        got = ex.merge_pair(tokens, pair)
        expect(
            got == want and isinstance(got, tuple),
            "wrong merge",
            input=f"tokens={tokens}, pair={pair}",
            expected=repr(want),
            got=repr(got),
            hint="left to right; after a merge skip both tokens, so matches never overlap; return a tuple",
        )


@checks("merge_pair")
def random_sequences_match_the_definition(ex):
    """random token sequences over a 2-letter alphabet (many overlapping matches) match a plain scan"""
    rng = random.Random(1)
    for _ in range(200):
        tokens = tuple(rng.choice([b"a", b"b", b"ab"]) for _ in range(rng.randint(0, 12)))
        pair = (rng.choice([b"a", b"b", b"ab"]), rng.choice([b"a", b"b", b"ab"]))
        want = tuple(spec_merge(list(tokens), pair))
        got = ex.merge_pair(tokens, pair)
        expect(
            got == want,
            "wrong merge",
            input=f"tokens={tokens}, pair={pair}",
            expected=repr(want),
            got=repr(got),
            hint="compare whole tokens (bytes objects), not their concatenation; never overlap matches",
        )


@checks("merge_pair")
def tokens_are_compared_whole(ex):
    """(ab, c) is not the pair (a, bc) although the bytes are the same; multi-byte tokens merge into their sum"""
    got = ex.merge_pair((b"ab", b"c", b"a", b"bc"), (b"a", b"bc"))
    want = (b"ab", b"c", b"abc")
    expect(
        got == want,
        "matched the wrong tokens",
        input="tokens=(ab, c, a, bc), pair=(a, bc)",
        expected=repr(want),
        got=repr(got),
        hint="a match is tokens[i] == pair[0] and tokens[i + 1] == pair[1]",
    )


# ------------------------------------------------------------------------------------------ train_bpe


def expect_same_merges(got, want, *, input: str, hint: str) -> None:
    got = list(got) if isinstance(got, (list, tuple)) else got
    if got == want:
        return
    if not isinstance(got, list):
        expect(
            False,
            "train_bpe must return a list of (bytes, bytes)",
            input=input,
            expected="list",
            got=type(got).__name__,
        )
    first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
    expect(
        False,
        f"merges differ from the reference at merge {first} (of {len(want)}; you returned {len(got)})",
        input=input,
        expected=short(want[first : first + 3]),
        got=short(got[first : first + 3]),
        hint=hint,
    )


@checks("train_bpe")
def hand_derived_merges(ex):
    """'aaabdaaabac': (a,a), then a tie of count 2 that the smallest pair (a,b) wins, then (aa,ab), then (a,c)"""
    want = [(b"a", b"a"), (b"a", b"b"), (b"aa", b"ab"), (b"a", b"c")]
    got = ex.train_bpe("aaabdaaabac", 4)
    expect_same_merges(
        got,
        want,
        input="text='aaabdaaabac', num_merges=4",
        hint="weighted pair counts; ties go to the smallest (a, b): b'a' < b'aa'; merges never overlap",
    )


@checks("train_bpe")
def identical_to_the_slow_reference_on_the_corpus(ex):
    """300 merges on the lesson corpus are identical, in order, to the slow reference BPE"""
    got = ex.train_bpe(corpus(), NUM_MERGES)
    expect_same_merges(
        got,
        list(corpus_merges()),
        input=f"the lesson corpus ({len(corpus().encode())} bytes), num_merges={NUM_MERGES}",
        hint="count each distinct chunk with its frequency; split at <|endoftext|> first; pre-tokenize every piece",
    )


@checks("train_bpe")
def special_tokens_are_not_trained_on(ex):
    """a text dominated by special tokens: no merge touches their bytes; merges never cross them or a chunk boundary"""
    specials = ("<|im_start|>", "<|im_end|>")
    text = "".join(f"<|im_start|>ab cd{i % 3}<|im_end|>" for i in range(30)) + "<|im_start|>xy"
    got = ex.train_bpe(text, 20, specials)
    want = spec_train(text, 20, specials)
    expect_same_merges(
        got,
        want,
        input=f"text={short(text, 60)}, special_tokens={specials}, num_merges=20",
        hint="re.split on every special token before pre-tokenizing; stop when no pair is left",
    )


@checks("train_bpe")
def stops_when_nothing_is_left_to_merge(ex):
    """'ab ab abc' asks for 50 merges but only 3 exist: return those 3"""
    got = ex.train_bpe("ab ab abc", 50)
    want = spec_train("ab ab abc", 50)
    expect_same_merges(
        got, want, input="text='ab ab abc', num_merges=50", hint="break out of the loop when no pair is left"
    )


@checks("train_bpe")
def agrees_with_hugging_face_until_the_first_tie(ex):
    """the merges agree with Hugging Face's BpeTrainer on the corpus up to the first tie its rule breaks differently"""
    lesson_rule = list(corpus_merges())
    theirs = hugging_face_merges()
    agree = next((i for i, (a, b) in enumerate(zip(lesson_rule, theirs, strict=False)) if a != b), len(theirs))
    got = ex.train_bpe(corpus(), agree)
    expect_same_merges(
        got,
        theirs[:agree],
        input=f"the lesson corpus, num_merges={agree} (where the two tie-break rules still agree)",
        hint="the most frequent pair by frequency-weighted counts over the pre-tokenized chunks",
    )


# ------------------------------------------------------------------------------------------ BPETokenizer


def expect_ids(got, want, *, input: str, hint: str) -> None:
    if got == want:
        return
    got_list = list(got) if isinstance(got, (list, tuple)) else []
    first = next(
        (i for i, (g, w) in enumerate(zip(got_list, want, strict=False)) if g != w), min(len(got_list), len(want))
    )
    expect(
        False,
        f"token ids differ from the reference at position {first} ({len(got_list)} ids, expected {len(want)})",
        input=input,
        expected=short(want[first : first + 6]),
        got=short(got_list[first : first + 6]) if got_list else short(got),
        hint=hint,
    )


@checks("bpe_tokenizer")
def hand_checkable_encoding(ex):
    """merges [(a,b), (ab,c)]: 'abc ab<|endoftext|>' -> [257, 32, 256, 258]; the vocabulary follows the layout"""
    tokenizer = ex.BPETokenizer([(b"a", b"b"), (b"ab", b"c")])
    got = tokenizer.encode("abc ab<|endoftext|>")
    expect_ids(
        got,
        [257, 32, 256, 258],
        input="merges=[(a, b), (ab, c)], text='abc ab<|endoftext|>'",
        hint="ids: bytes 0..255, merge i is 256 + i, special tokens after the merges",
    )
    vocab = tokenizer.vocab
    expect(
        len(vocab) == 259
        and vocab[97] == b"a"
        and vocab[256] == b"ab"
        and vocab[257] == b"abc"
        and vocab[258] == b"<|endoftext|>",
        "the vocabulary does not follow the layout",
        input="merges=[(a, b), (ab, c)], special_tokens=('<|endoftext|>',)",
        expected="259 entries: {97: b'a', 256: b'ab', 257: b'abc', 258: b'<|endoftext|>'}",
        got=f"{len(vocab)} entries: " + short({k: vocab.get(k) for k in (97, 256, 257, 258)}),
        hint="vocab[256 + i] = a + b for merge i; specials get 256 + len(merges) + j and their UTF-8 bytes",
    )


@checks("bpe_tokenizer")
def encoding_matches_the_slow_reference(ex):
    """the corpus and new text, with the reference's 300 corpus merges, encode to the reference's ids"""
    merges = list(corpus_merges())
    tokenizer = ex.BPETokenizer(merges)
    texts = [corpus(), *TRICKY, "The tokenizer merges tokens.<|endoftext|>分词器学习合并。"]
    for text in texts:
        expect_ids(
            tokenizer.encode(text),
            spec_encode(text, merges),
            input=short(text, 80) + f" with {len(merges)} merges",
            hint="merge the lowest-ranked (earliest learned) pair first, until no learned pair is left",
        )


@checks("bpe_tokenizer")
def round_trip_on_arbitrary_utf8(ex):
    """decode(encode(s)) == s for random Unicode (CJK, emoji, ZWJ, combining marks), the corpus and tricky strings"""
    tokenizer = ex.BPETokenizer(list(corpus_merges()))
    rng = random.Random(2)
    texts = ["", " ", corpus(), *TRICKY, *(random_unicode(rng, n) for n in (1, 5, 50, 300))]
    for text in texts:
        ids = tokenizer.encode(text)
        back = tokenizer.decode(ids)
        expect(
            back == text,
            "the round trip changed the text",
            input=short(text, 80),
            expected=short(text, 80),
            got=short(back, 80),
            hint="decode joins all the tokens' bytes and decodes UTF-8 once: a character can span two tokens",
        )


@checks("bpe_tokenizer")
def special_tokens_are_never_split(ex):
    """specials next to text, back to back, sharing a prefix (longest wins), and a truncated one stays text"""
    specials = ("<|endoftext|>", "<|endoftext|><|endoftext|>", "<|im_start|>")
    merges = list(corpus_merges())
    tokenizer = ex.BPETokenizer(merges, specials)
    base = 256 + len(merges)
    for text in (
        "hello<|endoftext|>world",
        "<|im_start|><|endoftext|>x<|endoftext|><|endoftext|>",
        "<|endoftext|><|endoftext|><|endoftext|>",
        "a <|endoftext the end|> <|im_start|>",
    ):
        want = spec_encode(text, merges, specials)
        expect_ids(
            tokenizer.encode(text),
            want,
            input=f"{text!r}, specials {specials} (ids {base}, {base + 1}, {base + 2})",
            hint="split with a capturing group over the specials sorted longest first; map each to its id",
        )
    ids = tokenizer.encode("x<|im_start|>y")
    expect(
        tokenizer.decode(ids) == "x<|im_start|>y",
        "a special token does not decode back to its text",
        input="'x<|im_start|>y'",
        expected="'x<|im_start|>y'",
        got=short(tokenizer.decode(ids)),
        hint="store the special token's UTF-8 bytes in vocab under its id",
    )


@checks("bpe_tokenizer")
def decodes_partial_characters_without_error(ex):
    """decode of a cut UTF-8 character gives U+FFFD instead of raising; a Chinese character in two tokens decodes"""
    tokenizer = ex.BPETokenizer([(b"\xe4", b"\xb8")])
    got = tokenizer.decode([0xE4])
    expect(
        got == "\ufffd",
        "a lone UTF-8 lead byte did not decode to the replacement character",
        input="decode([0xE4])",
        expected="'\\ufffd'",
        got=short(got),
        hint='bytes.decode("utf-8", errors="replace")',
    )
    ids = tokenizer.encode("中")
    expect(
        ids == [256, 0xAD] and tokenizer.decode(ids) == "中",
        "'中' (e4 b8 ad) with the merge (e4, b8) does not encode to [256, 173] and back",
        input="merges=[(e4, b8)], text='中'",
        expected="[256, 173] -> '中'",
        got=f"{ids} -> {tokenizer.decode(ids)!r}",
        hint="join the bytes of all tokens, then decode once",
    )


@checks("bpe_tokenizer")
def token_count_close_to_hugging_face(ex):
    """with 300 corpus merges, the corpus costs within 2% of the tokens of Hugging Face's BpeTrainer tokenizer"""
    tokenizer = ex.BPETokenizer(list(corpus_merges()))
    mine = len(tokenizer.encode(corpus()))
    theirs = len(hugging_face_tokenizer().encode(corpus()).ids)
    expect(
        abs(mine - theirs) <= 0.02 * theirs,
        "the token count is far from Hugging Face's on the same corpus",
        input=f"the lesson corpus, {NUM_MERGES} merges",
        expected=f"about {theirs} tokens (±2%: the merge lists differ only by tie-breaks)",
        got=f"{mine} tokens",
        hint="every learned merge must be applied; specials are one token each",
    )


# ------------------------------------------------------------------------------------------ parallel_pretokenize


def reference_boundaries(text: str, num_chunks: int, split_token: str) -> list[int]:
    """The rule, written as a search over the sorted list of every occurrence of split_token."""
    starts, at = [], text.find(split_token)
    while at != -1:
        starts.append(at)
        at = text.find(split_token, at + 1)
    cuts = {0, len(text)}
    for i in range(1, num_chunks):
        k = bisect.bisect_left(starts, i * len(text) // num_chunks)
        if k == len(starts):
            break
        cuts.add(starts[k])
    return sorted(cuts)


def documents_text(rng: random.Random, num_documents: int, separator: str = END_OF_TEXT) -> str:
    """Documents of random lengths from the corpus's words, some empty, joined by the separator."""
    words = corpus().replace(END_OF_TEXT, " ").split(" ")
    docs = [" ".join(rng.choice(words) for _ in range(rng.choice([0, 1, 3, 10, 40]))) for _ in range(num_documents)]
    return (separator if rng.random() < 0.5 else "") + separator.join(docs)


def expect_counts(got, want: Counter, *, input: str, hint: str) -> None:
    if isinstance(got, dict) and Counter(got) == want and all(v > 0 for v in got.values()):
        return
    if not isinstance(got, dict):
        expect(False, "must return a Counter", input=input, expected="Counter", got=type(got).__name__, hint=hint)
    diff = [(k, want.get(k, 0), got.get(k, 0)) for k in {*want, *got} if want.get(k, 0) != got.get(k, 0)]
    diff.sort(key=lambda d: -abs(d[1] - d[2]))
    chunk, w, g = diff[0]
    expect(
        False,
        f"{len(diff)} chunk counts differ from the serial reference (total {sum(got.values())}, "
        f"expected {sum(want.values())})",
        input=input,
        expected=f"{b''.join(chunk)!r}: {w}",
        got=f"{b''.join(chunk)!r}: {g}",
        hint=hint,
    )


@checks("parallel_pretokenize")
def boundaries_by_hand(ex):
    """'one<|endoftext|>two three<|endoftext|>four': the cuts for 1, 2, 3, 4 and 20 slices, no token, empty text"""
    text = "one<|endoftext|>two three<|endoftext|>four"  # tokens start at 3 and 25, len 42
    for num_chunks, want in ((1, [0, 42]), (2, [0, 25, 42]), (3, [0, 25, 42]), (4, [0, 25, 42]), (20, [0, 3, 25, 42])):
        got = ex.chunk_boundaries(text, num_chunks)
        expect(
            got == want,
            "wrong cut points",
            input=f"{text!r} (tokens at 3 and 25, length 42), num_chunks={num_chunks}",
            expected=repr(want),
            got=short(got),
            hint="guess i * len(text) // num_chunks, move it to text.find(split_token, guess), stop at -1, "
            "skip a cut equal to the previous one, end with len(text)",
        )
    for text, num_chunks, want in (
        ("no separator here", 3, [0, 17]),
        ("", 3, [0]),
        ("<|endoftext|>a<|endoftext|>b", 40, [0, 14, 28]),
    ):
        got = ex.chunk_boundaries(text, num_chunks)
        expect(
            got == want,
            "wrong cut points",
            input=f"{text!r}, num_chunks={num_chunks}",
            expected=repr(want),
            got=short(got),
            hint="without an occurrence there is one slice; an empty text has the boundaries [0]; a token found at 0 "
            "is no new cut, but the search goes on",
        )


@checks("parallel_pretokenize")
def boundaries_follow_the_rule_on_random_texts(ex):
    """random documents (empty ones, back-to-back tokens, another split token), 1-9 slices: the stated cut points"""
    rng = random.Random(3)
    for trial in range(60):
        split_token = END_OF_TEXT if trial % 3 else "<|im_end|>"
        text = documents_text(rng, rng.randint(1, 12), split_token)
        num_chunks = rng.randint(1, 9)
        got = ex.chunk_boundaries(text, num_chunks, split_token)
        want = reference_boundaries(text, num_chunks, split_token)
        expect(
            got == want,
            "wrong cut points",
            input=f"text of {len(text)} characters with {text.count(split_token)} x {split_token!r}, "
            f"num_chunks={num_chunks}",
            expected=short(want),
            got=short(got),
            hint="every inner cut is where split_token starts; strictly increasing; at most num_chunks slices",
        )


@checks("parallel_pretokenize")
def serial_counts_match_the_reference(ex):
    """count_pretokens on the corpus, tricky strings, two special tokens and none: the reference's chunk counts"""
    cases = [
        (corpus(), (END_OF_TEXT,)),
        (" ".join(TRICKY), (END_OF_TEXT,)),
        ("a<|im_start|>b c<|im_end|>b c<|endoftext|>d", ("<|im_start|>", "<|im_end|>")),
        ("tokens <|endoftext|> stay text", ()),
    ]
    for text, specials in cases:
        expect_counts(
            ex.count_pretokens(text, specials),
            reference_chunk_counts(text, specials),
            input=f"{short(text, 60)}, special_tokens={specials}",
            hint="split at every special token, pre-tokenize every piece, count tuples of single bytes",
        )


class CountingForks:
    """Counts os.fork() calls (a fork-context pool starts each worker with one) while it is active."""

    def __enter__(self):
        self.forks, self.real_fork = 0, os.fork

        def counting_fork():
            self.forks += 1
            return self.real_fork()

        os.fork = counting_fork
        return self

    def __exit__(self, *exc):
        os.fork = self.real_fork


@checks("parallel_pretokenize")
def parallel_equals_serial(ex):
    """1, 2 and 3 worker processes on part of the corpus, an empty text, no special token: the serial pass's counts"""
    text = corpus()[:6000]
    for processes in (1, 2, 3):
        with CountingForks() as forks:
            got = ex.count_pretokens_parallel(text, processes)
        expect_counts(
            got,
            reference_chunk_counts(text),
            input=f"the first 6000 characters of the corpus, num_processes={processes}",
            hint="cut only where <|endoftext|> starts, and add the counters (Counter.update adds, dict.update overwrites)",
        )
        expect(
            forks.forks >= min(processes, 2),
            "the slices were not counted in separate processes",
            input=f"the first 6000 characters of the corpus, num_processes={processes}",
            expected=f"a pool of {processes} forked worker(s)",
            got=f"{forks.forks} call(s) of os.fork",
            hint='count the slices in a multiprocessing.get_context("fork").Pool with one worker per slice',
        )
    expect_counts(
        ex.count_pretokens_parallel("", 2),
        Counter(),
        input="'' (an empty text), num_processes=2",
        hint="an empty text has no slice: an empty Counter (a Pool needs at least one process)",
    )
    text = "the same words, the same words<|endoftext|>"
    expect_counts(
        ex.count_pretokens_parallel(text, 2, ()),
        reference_chunk_counts(text, ()),
        input=f"{text!r}, num_processes=2, special_tokens=()",
        hint="with no special token there is nowhere safe to cut: count the whole text",
    )


@checks("parallel_pretokenize")
def cutting_refuses_bad_arguments(ex):
    """num_chunks=0, an empty split token and num_processes=0 raise ValueError"""
    expect_value_error(
        lambda: ex.chunk_boundaries("a<|endoftext|>b", 0), "chunk_boundaries(text, 0)", "num_chunks must be >= 1"
    )
    expect_value_error(
        lambda: ex.chunk_boundaries("a<|endoftext|>b", 2, ""), "chunk_boundaries(text, 2, '')", "an empty token"
    )
    for specials in ((END_OF_TEXT,), ()):
        expect_value_error(
            lambda specials=specials: ex.count_pretokens_parallel("a<|endoftext|>b", 0, specials),
            f"count_pretokens_parallel(text, 0, special_tokens={specials})",
            "num_processes must be >= 1, also when there is no special token to cut at",
        )


# ------------------------------------------------------------------------------------------ incremental_bpe


class CountingDict(dict):
    """A dict that counts every write (set, delete, and the methods that write several)."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def __setitem__(self, key, value):
        self.writes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.writes += 1
        super().__delitem__(key)

    def update(self, *args, **kwargs):
        other = dict(*args, **kwargs)
        self.writes += len(other)
        super().update(other)

    def setdefault(self, key, default=None):
        self.writes += key not in self
        return super().setdefault(key, default)

    def pop(self, *args):
        self.writes += 1
        return super().pop(*args)

    def popitem(self):
        self.writes += 1
        return super().popitem()

    def clear(self):
        self.writes += len(self)
        super().clear()

    def __ior__(self, other):
        self.update(other)
        return self


def random_chunk_counts(rng: random.Random) -> Counter:
    """Few, short chunks over a tiny alphabet with repeats (aaaa): many ties, overlapping pairs."""
    alphabet = rng.choice([[b"a"], [b"a", b"b"], [b"a", b"b", b"c"], [b"a", b"ab", b"\xe4", b"b"]])
    chunks = Counter()
    for _ in range(rng.randint(1, 8)):
        chunks[tuple(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))] += rng.randint(1, 4)
    return chunks


@checks("incremental_bpe")
def hand_derived_merges_for_both_rules(ex):
    """'aaabdaaabac': smaller rule (a,a),(a,b),(aa,ab),(a,c); greater rule (a,a),(aa,a),(aaa,b),(d,aaab)"""
    chunk = tuple(bytes([b]) for b in b"aaabdaaabac")
    cases = {
        "lexicographic_smaller": [(b"a", b"a"), (b"a", b"b"), (b"aa", b"ab"), (b"a", b"c")],
        "lexicographic_greater": [(b"a", b"a"), (b"aa", b"a"), (b"aaa", b"b"), (b"d", b"aaab")],
    }
    for rule, want in cases.items():
        chunk_counts = {chunk: 1}
        got = ex.train_bpe_incremental(chunk_counts, 4, rule)
        expect_same_merges(
            got,
            want,
            input=f"chunk_counts={{'aaabdaaabac' as single bytes: 1}}, num_merges=4, tie_break={rule!r}",
            hint="after (a,a) the pairs (a,b) and (aa,a) tie at 2: the smaller rule takes (a,b), the greater (aa,a)",
        )
        expect(
            chunk_counts == {chunk: 1},
            "the trainer modified its chunk_counts argument",
            input=f"tie_break={rule!r}",
            expected="chunk_counts unchanged",
            got=short(chunk_counts),
            hint="copy the chunks into your own list before merging",
        )


@checks("incremental_bpe")
def same_merges_as_the_slow_reference_on_the_corpus(ex):
    """vocabulary 500 (243 merges) on the corpus, both rules: the slow reference's merges, in order"""
    chunks = corpus_chunk_counts()
    for rule, want in (
        ("lexicographic_smaller", list(corpus_merges())[:VOCAB_500]),
        ("lexicographic_greater", list(greater_corpus_merges())),
    ):
        expect_same_merges(
            ex.train_bpe_incremental(dict(chunks), VOCAB_500, rule),
            want,
            input=f"chunk counts of the lesson corpus, num_merges={VOCAB_500}, tie_break={rule!r}",
            hint="a popped heap entry whose count is no longer current must go back with its current count; "
            "subtract the old pairs of every touched chunk, add and push its new ones",
        )


@checks("incremental_bpe")
def same_merges_as_the_slow_reference_on_random_corpora(ex):
    """150 random small corpora (repeats like aaaa, many ties), both rules, 0 to 15 merges (more than exist too)"""
    rng = random.Random(4)
    for _ in range(150):
        chunks = random_chunk_counts(rng)
        num_merges = rng.randint(0, 15)
        for rule, choose in TIE_RULES.items():
            expect_same_merges(
                ex.train_bpe_incremental(dict(chunks), num_merges, rule),
                spec_merges(chunks, num_merges, choose),
                input=f"chunk_counts={short(dict(chunks), 200)}, num_merges={num_merges}, tie_break={rule!r}",
                hint="weight pairs by chunk counts; (a, a, a) holds the pair (a, a) twice; stop when no pair is left",
            )


@checks("incremental_bpe")
def reproduces_hugging_face_with_its_ids(ex):
    """with Hugging Face's token ids as the tie-break key: its BpeTrainer's 300 merges on the corpus, exactly"""
    vocab = hugging_face_tokenizer().get_vocab()
    hf_id = {from_byte_level(token): i for token, i in vocab.items() if token != END_OF_TEXT}
    unknown = len(vocab) + 1

    def hugging_face_key(pair):
        return (hf_id.get(pair[0], unknown), hf_id.get(pair[1], unknown))

    expect_same_merges(
        ex.train_bpe_incremental(dict(corpus_chunk_counts()), NUM_MERGES, hugging_face_key),
        hugging_face_merges(),
        input=f"chunk counts of the lesson corpus, num_merges={NUM_MERGES}, tie_break=key(pair) = Hugging Face's ids",
        hint="a function tie_break is a key: among the most frequent pairs, the one with the smallest key(pair)",
    )


@checks("incremental_bpe")
def pair_counts_are_updated_where_a_merge_touched(ex):
    """the pair_counts dict ends exact, and its writes stay near the size of the touched chunks (not a recount)"""
    chunks = corpus_chunk_counts()
    merges, touched = corpus_merges(), reference_merges()["touched_per_merge"]
    counting = CountingDict()
    got = ex.train_bpe_incremental(dict(chunks), VOCAB_500, "lexicographic_smaller", counting)
    expect_same_merges(
        got, list(merges[:VOCAB_500]), input=f"the corpus, num_merges={VOCAB_500}", hint="see the corpus check"
    )
    merged = Counter()
    for chunk, count in chunks.items():
        tokens = list(chunk)
        for pair in merges[:VOCAB_500]:
            tokens = spec_merge(tokens, pair)
        merged[tuple(tokens)] += count
    want = dict(pair_counts_of(merged))
    if dict(counting) != want:
        wrong = [p for p in {*want, *counting} if want.get(p) != counting.get(p)]
        expect(
            False,
            f"after training, pair_counts is wrong for {len(wrong)} pairs",
            input=f"the corpus, num_merges={VOCAB_500}, pair_counts=an empty dict",
            expected=f"{len(want)} pairs, e.g. {wrong[0]!r}: {want.get(wrong[0])}",
            got=f"{len(counting)} pairs, e.g. {wrong[0]!r}: {counting.get(wrong[0])}",
            hint="keep your counts in the dict you are given; delete pairs whose count reaches 0",
        )
    initial = sum(len(chunk) - 1 for chunk in chunks)
    budget = initial + 3 * sum(touched[:VOCAB_500])
    expect(
        counting.writes <= budget,
        f"{counting.writes:,} writes to pair_counts: more than an incremental trainer needs",
        input=f"the corpus ({len(chunks)} distinct chunks), num_merges={VOCAB_500}",
        expected=f"at most {budget:,} (the {initial:,} pairs counted once, then 3 writes per token of each touched chunk)",
        got=f"{counting.writes:,}",
        hint="update only the chunks listed under the merged pair (where[pair]), not every chunk",
    )


@checks("incremental_bpe")
def trainer_refuses_bad_arguments(ex):
    """an unknown tie_break, num_merges=-1 and a non-empty pair_counts raise ValueError"""
    chunks = {(b"a", b"b"): 2}
    expect_value_error(
        lambda: ex.train_bpe_incremental(chunks, 2, "alphabetical"),
        "tie_break='alphabetical'",
        "accept 'lexicographic_smaller', 'lexicographic_greater' or a function",
    )
    expect_value_error(lambda: ex.train_bpe_incremental(chunks, -1), "num_merges=-1", "refuse num_merges < 0")
    expect_value_error(
        lambda: ex.train_bpe_incremental(chunks, 2, "lexicographic_smaller", {(b"x", b"y"): 1}),
        "pair_counts={(x, y): 1}",
        "pair_counts must start empty",
    )


# ------------------------------------------------------------------------------------------ encode_iterable

STREAM_SPECIALS = ("<|endoftext|>", "<|endoftext|><|endoftext|>", "<|im_start|>")

STREAM_TEXTS = [
    "a\n  b",
    "def f(x):\n    return x\n\n\n    pass\n",
    "they'll we've I'd it's x'l 'll",
    "hello<|endoftext|>world<|endoftext|><|endoftext|><|endoftext|>x<|im_start|>",
    "a <|endoftext the end|> <|im_start <|endoftext|",
    "你好🙂 👩‍💻 end   \t\n  ",
    *TRICKY[:4],
]


@cache
def stream_tokenizer() -> ReferenceTokenizer:
    return ReferenceTokenizer(corpus_merges(), STREAM_SPECIALS)


def expect_stream(ex, tokenizer, pieces: list[str], *, hint: str) -> None:
    text = "".join(pieces)
    got = ex.encode_iterable(tokenizer, iter(pieces))
    got = list(got) if hasattr(got, "__iter__") else got
    expect_ids(got, tokenizer.encode(text), input=f"pieces {short(pieces, 120)}", hint=hint)


@checks("encode_iterable")
def pieces_that_change_each_other(ex):
    """a newline and the next line's indent, a contraction, a special token split across pieces: as one text"""
    tokenizer = stream_tokenizer()
    cases = [
        (["a\n", "  b"], "a newline and the next line's indentation are one chunk: never cut at a line end"),
        (["def f(x):\n", "    return x\n"], "a newline and the next line's indentation are one chunk"),
        (["We'v", "e seen"], "keep back the last two chunks: ' and v become the contraction 've (a learned token)"),
        (["x <|endof", "text|> y"], "keep back a tail that may still become a special token"),
        (["<|endoftext|>", "<|endoftext|>", "!"], "a complete special token may be the start of a longer one"),
        (["<|endoftext|><|endoftext|>", "<|endoftext|>x"], "never cut inside a special token already matched"),
    ]
    for pieces, hint in cases:
        expect_stream(ex, tokenizer, pieces, hint=hint)
    # a special token that contains another one well after its start (added-token sets may): the tail that may still
    # become the long one is held from its start, even though the short one inside it is complete
    nested = ReferenceTokenizer(corpus_merges(), ("<|end|>", "<|sys|>x y z<|end|>!"))
    expect_stream(
        ex,
        nested,
        ["hello <|sys|>x y z<|end|>", "!"],
        hint="with specials ('<|end|>', '<|sys|>x y z<|end|>!'): hold from the earliest possible start of a special "
        "token; a complete special token found after that point does not move the hold",
    )


@checks("encode_iterable")
def every_cut_of_tricky_texts(ex):
    """every way to cut tricky texts in two, some in three, and one character at a time: the ids of the whole"""
    tokenizer = stream_tokenizer()
    rng = random.Random(5)
    for text in STREAM_TEXTS:
        for cut in range(len(text) + 1):
            expect_stream(ex, tokenizer, [text[:cut], text[cut:]], hint="cut only where no later text can change")
        for _ in range(10):
            a, b = sorted(rng.randint(0, len(text)) for _ in range(2))
            expect_stream(ex, tokenizer, [text[:a], text[a:b], "", text[b:]], hint="empty pieces change nothing")
        expect_stream(ex, tokenizer, list(text), hint="one character at a time")


@checks("encode_iterable")
def is_lazy(ex):
    """the first ids come after reading one line of 200 (a generator, not a join of the whole input)"""
    tokenizer = stream_tokenizer()
    lines = corpus().splitlines(keepends=True)[:200]
    consumed = 0

    def reading():
        nonlocal consumed
        for line in lines:
            consumed += 1
            yield line

    stream = ex.encode_iterable(tokenizer, reading())
    first = next(iter(stream), None)
    expect(
        first is not None and consumed <= 2,
        "the first id came only after reading most of the input",
        input=f"{len(lines)} lines of the corpus, fed one at a time",
        expected="the first id after 1 or 2 lines",
        got=f"after {consumed} lines" if first is not None else "no id at all",
        hint="yield the ids of the safe part after each piece (a generator); never join all the lines first",
    )


@checks("encode_iterable")
def memory_stays_flat(ex):
    """tracemalloc: streaming 10 copies of the corpus (165 KB) peaks below a tenth of the input, with the right ids"""
    tokenizer = ReferenceTokenizer(corpus_merges(), STREAM_SPECIALS)
    lines = [*corpus().splitlines(keepends=True), END_OF_TEXT] * 10
    input_bytes = sum(len(line.encode("utf-8")) for line in lines)
    # a special token is a hard boundary, so the whole text encodes as 10 copies of one copy's ids
    want = [*tokenizer.encode(corpus()), tokenizer.special_ids[END_OF_TEXT]] * 10
    # A first, unmeasured pass fills the reference's memo with the texts this encoder asks for, so that the measured
    # pass allocates only what the learner's code holds (plus a copy of the ids of each text it encodes). It also
    # fills CPython's free lists (tuples, lists, frames are kept for reuse, and tracemalloc counts them as held); the
    # garbage collector stays off until the end so that a collection cannot empty them in between.
    gc_was_on = gc.isenabled()
    gc.disable()
    mismatch, count = None, 0
    try:
        for _ in ex.encode_iterable(tokenizer, iter(lines)):
            pass
        tracemalloc.start()
        for got in ex.encode_iterable(tokenizer, iter(lines)):
            if mismatch is None and (count >= len(want) or got != want[count]):
                mismatch = count
            count += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        if gc_was_on:
            gc.enable()
    expect(
        mismatch is None and count == len(want),
        f"the streamed ids differ from encode of the whole text at position {mismatch if mismatch is not None else count}",
        input=f"{len(lines)} lines ({input_bytes:,} bytes)",
        expected=f"{len(want)} ids",
        got=f"{count} ids",
        hint="cut only where no later text can change the encoding",
    )
    expect(
        peak <= input_bytes // 10,
        "the streaming encoder holds too much memory",
        input=f"{len(lines)} lines ({input_bytes:,} bytes of UTF-8), read one at a time",
        expected=f"a tracemalloc peak of at most {input_bytes // 10:,} bytes (a tenth of the input)",
        got=f"{peak:,} bytes",
        hint="keep only the text after the safe cut; do not join the lines or collect the ids",
    )
