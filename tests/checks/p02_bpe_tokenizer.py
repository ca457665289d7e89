"""Checks for p02.bpe_tokenizer. References: the Hugging Face `tokenizers` library (its ByteLevel pre-tokenizer,
which runs GPT-2's regex in a full Unicode engine, and its BpeTrainer on the same corpus), a slow, obviously-correct
BPE written below (train and encode, both with a pluggable tie-break), hand-derived merges, and round trips.

The spec, run with Hugging Face's tie-break (smallest token ids, where the 256 byte tokens are numbered in the sorted
order of GPT-2's printable byte alphabet and merged tokens take the next id), reproduces Hugging Face's merge list
exactly on the lesson corpus: `hugging_face_merges() == spec_train(..., tie_break=hugging_face_tie_break())`.
"""

from __future__ import annotations

import random
import unicodedata
from collections import Counter
from functools import cache

from llm_algo.check import Checks, expect
from llm_algo.paths import repo_root

checks = Checks("p02.bpe_tokenizer")

END_OF_TEXT = "<|endoftext|>"
NUM_MERGES = 300


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
    """GPT-2's regex as Hugging Face runs it (\\p{L}, \\p{N} in a Unicode engine), mapped back to text."""
    return [from_byte_level(piece).decode("utf-8") for piece, _ in hf_pre_tokenizer().pre_tokenize_str(text)]


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


def lesson_tie_break(pair, count):
    return (-count, pair)  # most frequent, then the smallest pair of byte strings


def hugging_face_tie_break():
    """Most frequent, then the smallest (id(a), id(b)) with Hugging Face's ids; returns (key, on_merge)."""
    ids = {bytes([char_to_byte()[c]]): i for i, c in enumerate(sorted(byte_to_char().values()))}

    def key(pair, count):
        return (-count, ids[pair[0]], ids[pair[1]])

    def on_merge(pair):
        ids.setdefault(pair[0] + pair[1], len(ids))

    return key, on_merge


def spec_train(text: str, num_merges: int, specials=(END_OF_TEXT,), tie_break=None) -> list[tuple[bytes, bytes]]:
    key, on_merge = tie_break or (lesson_tie_break, lambda pair: None)
    chunks = Counter()
    for piece in split_at_specials(text, specials):
        for chunk in reference_pretokenize(piece):
            chunks[tuple(bytes([b]) for b in chunk.encode("utf-8"))] += 1
    merges = []
    for _ in range(num_merges):
        pair_counts = Counter()
        for chunk, count in chunks.items():
            for i in range(len(chunk) - 1):
                pair_counts[(chunk[i], chunk[i + 1])] += count
        if not pair_counts:
            break
        best = sorted(pair_counts, key=lambda pair: key(pair, pair_counts[pair]))[0]
        merges.append(best)
        on_merge(best)
        merged = Counter()
        for chunk, count in chunks.items():
            merged[tuple(spec_merge(list(chunk), best))] += count
        chunks = merged
    return merges


def spec_encode(text: str, merges, specials=(END_OF_TEXT,)) -> list[int]:
    """Apply every merge in training order to every chunk; ids by the lesson's layout."""
    token_id = {bytes([b]): b for b in range(256)}
    for i, (a, b) in enumerate(merges):
        token_id.setdefault(a + b, 256 + i)
    special_id = {s: 256 + len(merges) + j for j, s in enumerate(specials)}
    ordered = sorted(specials, key=len, reverse=True)
    ids: list[int] = []
    rest = text
    while rest:
        # the earliest special token, the longest one where several start at the same place
        hits = [(rest.find(s), -len(s), s) for s in ordered if rest.find(s) >= 0]
        cut, _, special = min(hits) if hits else (len(rest), 0, None)
        for chunk in reference_pretokenize(rest[:cut]):
            tokens = [bytes([b]) for b in chunk.encode("utf-8")]
            for pair in merges:
                tokens = spec_merge(tokens, pair)
            ids.extend(token_id[t] for t in tokens)
        if special is None:
            break
        ids.append(special_id[special])
        rest = rest[cut + len(special) :]
    return ids


@cache
def corpus_merges() -> tuple:
    return tuple(spec_train(corpus(), NUM_MERGES))


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
