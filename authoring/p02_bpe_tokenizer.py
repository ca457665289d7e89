"""Source of 02_PyTorch_Algorithms/01_BPE_Tokenizer.ipynb (build with `python -m llm_algo build p02.bpe_tokenizer`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.bpe_tokenizer",
        path="02_PyTorch_Algorithms/01_BPE_Tokenizer.ipynb",
        title_en="Byte-level BPE tokenizer",
        title_zh="字节级 BPE 分词器",
        difficulty="medium",
        device="cpu",
        minutes=90,
        prerequisites=[],
    )
    lesson.title(
        intro=r"""
        A language model never sees text. It sees integers, one per **token** (词元), and everything it costs is
        counted in them: a 128k-token context window, a price per million tokens, the $O(T^2)$ of attention. The
        tokenizer decides how many tokens a text becomes: one trained mostly on English text cuts Chinese text into
        many more tokens per word than English, so the same context window holds less Chinese, and a tokenizer that cannot represent a character at all (an emoji, a rare CJK character) has to map it to `<unk>`
        and lose it. GPT-2, Llama 3, Qwen and DeepSeek all solve the last problem the same way: **byte-level
        byte-pair encoding** (字节级字节对编码, BPE). Every string is a sequence of UTF-8 bytes, so 256 base tokens
        can spell anything, and *merges* learned from a corpus glue frequent byte sequences into longer tokens.

        **You will implement** the GPT-2 pre-tokenizer (a regular expression), the pair merge, BPE training with a
        stated tie-break rule, and a tokenizer that encodes and decodes with special tokens that are never split.
        **Graded against** the Hugging Face `tokenizers` library (its byte-level pre-tokenizer, and its BPE trainer
        on the same corpus: token counts and the merges that do not depend on tie-breaks), a slow, obviously-correct
        BPE written in the checks file, hand-derived merges, and round trips on arbitrary UTF-8 (emoji, Chinese,
        code).
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：模型只看到整数 token；只用 UTF-8 字节作 256 个基础 token 的字节级 BPE（GPT-2、Llama 3、Qwen、DeepSeek）能表示任意字符串，不再需要 `<unk>`。
        - **预分词（pre-tokenizer）**：GPT-2 正则先把文本切成块（缩写 `'s`、字母、数字、符号、空白），merge 永远不跨块边界。
        - **训练**：统计所有块内相邻 pair 的出现次数（按块出现频率加权），反复合并最频繁的 pair；平局取最小的 pair $(a, b)$（按 pair 比较，不是按拼接后的字节）。
        - **编码**：每块内按 merge 的学习顺序（rank 最小者先）合并；special token 先从文本中切出、永不拆分，多个匹配时最长者优先。
        - **解码**：先把所有 token 的字节拼接起来再整体做 UTF-8 解码，因为一个汉字或 emoji 可能跨多个 token。
        - **易错点**：`\w+` 让数字和下划线粘到单词上、漏掉 `\s+(?!\S)`、合并后只前进一步（$(a,a,a)$ 变成 $(aa,aa)$）、平局规则错、忽略块频率、训练时不在 special token 处切开、逐 token 解码。
    """)
    lesson.md(r"""
        ## 1. Why bytes, and why merges

        Three designs have been tried.

        - **Words** (a vocabulary of whole words): short sequences, but every unseen word, typo or name becomes
          `<unk>`, and the table explodes for languages without spaces.
        - **Characters** (Unicode code points): nothing is unknown only if all ~150,000 code points are in the table,
          and sequences get long (a token per letter).
        - **Subwords by BPE** (Sennrich et al., 2016, after Gage's 1994 compression algorithm): start from small units
          and repeatedly add the most frequent adjacent pair as a new unit. Frequent words become one token, rare
          words fall apart into pieces, nothing is unknown.

        GPT-2 (Radford et al., 2019) made the base units the 256 **bytes** of UTF-8 instead of characters: the base
        vocabulary is exactly 256 entries and covers every string, in every language, emoji included. A Chinese
        character is 3 bytes in UTF-8 (`"中".encode() == b"\xe4\xb8\xad"`), an emoji 4, and an emoji sequence joined by
        zero-width joiners (`"👩‍💻"`, woman + ZWJ + laptop) 11; merges learn to glue the frequent ones back together. GPT-2 has 50,257 tokens
        (256 bytes + 50,000 merges + `<|endoftext|>`), Llama 3 128,256, Qwen 2 151,646.

        ## 2. The algorithm, with shapes

        **Training** takes a corpus and a number of merges $M$:

        1. Cut the corpus at **special tokens** (`<|endoftext|>` between documents): no merge may cross one, and the
           special tokens themselves are not trained on.
        2. **Pre-tokenize** each piece into chunks with a regular expression (section 3): merges never cross a chunk
           boundary, so " the" can become a token but "e t" cannot. Count each distinct chunk once with its
           frequency: a dictionary `{chunk as a tuple of bytes objects: count}` — a corpus of millions of words has
           only thousands of distinct chunks, which is what makes training affordable.
        3. Repeat $M$ times: count every adjacent pair $(a, b)$ over all chunks, weighted by the chunk's frequency;
           take the most frequent pair; replace it, left to right and without overlap, by the new token $a \mathbin\Vert
           b$ (the concatenated bytes) in every chunk; record the merge.

        **The tie-break rule of this lesson.** When several pairs have the same count, take the **smallest pair**,
        comparing pairs as tuples of byte strings: first by $a$, then by $b$, in byte order (Python's `<` on `bytes`:
        `b" t" < b"a" < b"ab" < b"b"`). Any fixed rule works; without one, two correct trainers disagree and
        neither is reproducible. Stanford CS336's assignment takes the *largest* pair; Hugging Face `tokenizers` takes the
        pair with the smallest token ids (section 7).

        **The vocabulary** that training defines: ids `0..255` are the single bytes (`id == byte value`), id
        `256 + i` is merge `i` (the bytes $a \mathbin\Vert b$), and the special tokens come last, `256 + M + j`. So
        $|V| = 256 + M + S$.

        **Encoding** a text: cut at special tokens (each becomes its id), pre-tokenize the rest, and turn each chunk
        into bytes; then, while some adjacent pair of the chunk is a learned merge, merge the pair with the **lowest
        rank** (the earliest learned) everywhere in the chunk. This gives exactly the result of applying the merges in
        training order, and it is what `tiktoken` and Hugging Face do. **Decoding** concatenates the tokens' bytes
        and decodes UTF-8 once: a Chinese character may be split across two tokens, so tokens must never be decoded
        one by one.

        Cost: training is $O(M \cdot C)$ for $C$ symbols over the distinct chunks (production trainers update only the
        pairs touched by a merge and keep a heap, which makes it near-linear); encoding is $O(n^2)$ per chunk of $n$
        bytes with this simple loop, and chunks are short.
    """)
    lesson.setup(r"""
        import re
        import time
        from collections import Counter

        import matplotlib.pyplot as plt

        from llm_algo.paths import repo_root

        # Written by scripts/make_bpe_corpus.py (deterministic: English, Chinese, Python code, numbers, emoji).
        CORPUS = (repo_root() / "02_PyTorch_Algorithms" / "data" / "bpe_corpus.txt").read_text(encoding="utf-8")
        END_OF_TEXT = "<|endoftext|>"
        print(f"corpus: {len(CORPUS)} characters, {len(CORPUS.encode('utf-8'))} bytes, "
              f"{CORPUS.count(END_OF_TEXT) + 1} documents")
    """)
    lesson.md(r"""
        ## 3. Exercise `pretokenize`: GPT-2's split, with `re`

        GPT-2 splits text with this pattern (written for the third-party `regex` module, whose `\p{L}` means "any
        letter" and `\p{N}` "any number"):

        ```
        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        ```

        Read it as alternatives, tried left to right at each position: an English contraction; an optional space then
        a run of letters; an optional space then a run of digits; an optional space then a run of anything that is
        neither space, letter nor digit (punctuation, emoji); trailing whitespace that is **not** followed by a
        non-space (`\s+(?!\S)`: in `"a   b"` the run of spaces gives `"  "` and leaves the last space to start
        `" b"`); any other whitespace. So a word carries its leading space (`" world"`), which is why the models see
        `" the"` and `"the"` as different tokens.

        Python's built-in `re` has no `\p{...}` classes, and this lesson adds no dependency, so rewrite the classes
        with what `re` has: `\w` is letters, digits and `_`; `\d` is decimal digits; `\s` whitespace. A letter is
        "a word character that is neither a digit nor `_`": `[^\W\d_]`. "Neither space, letter nor digit" is
        `[^\s\w]` **plus** `_` (which `\w` contains but `\p{L}`/`\p{N}` do not). The two agree on everything in this
        lesson; they differ on rare characters such as `²` (a number to `\p{N}`, a word character to `re`), which
        is why production code (`tiktoken`, Hugging Face) uses a full Unicode regex engine.

        Return the list of chunks: their concatenation must be the input, character for character.
    """)
    lesson.exercise(
        "pretokenize",
        r'''
        def pretokenize(text: str) -> list[str]:
            """GPT-2's pre-tokenizer with the standard `re` module: the chunks, in order; "".join(chunks) == text."""
            # TODO: the GPT-2 alternatives in order: contractions, ' ?letters', ' ?digits', ' ?other symbols',
            #       whitespace not followed by a non-space, any whitespace (letters: [^\W\d_]; "other" includes _)
            ### BEGIN SOLUTION
            pattern = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")
            return pattern.findall(text)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        try:
            print(pretokenize("Hello world's  end 2048 tokens: 你好🙂 x_y\n\n"))
        except NotImplementedError:
            print("Implement pretokenize first.")
    """)
    lesson.md(r"""
        ## 4. Exercise `merge_pair`: one merge in one chunk

        A chunk is a tuple of tokens, each a `bytes` object. Replace every occurrence of the adjacent pair
        `(a, b)` by `a + b`, scanning **left to right without overlap**: `(a, a, a)` with the pair `(a, a)` becomes
        `(aa, a)`, not `(aa, aa)`. Both training and encoding use this.
    """)
    lesson.exercise(
        "merge_pair",
        r'''
        def merge_pair(tokens: tuple[bytes, ...], pair: tuple[bytes, bytes]) -> tuple[bytes, ...]:
            """Every non-overlapping occurrence of `pair`, left to right, replaced by pair[0] + pair[1]."""
            # TODO: walk the tokens; where tokens[i], tokens[i + 1] equals the pair, emit the merged token and skip both
            ### BEGIN SOLUTION
            merged, i = [], 0
            while i < len(tokens):
                if i + 1 < len(tokens) and tokens[i] == pair[0] and tokens[i + 1] == pair[1]:
                    merged.append(pair[0] + pair[1])
                    i += 2
                else:
                    merged.append(tokens[i])
                    i += 1
            return tuple(merged)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `train_bpe`: learn the merges

        Follow section 2: split at the special tokens (`re.split` on the escaped tokens), pre-tokenize each piece with
        your `pretokenize`, count the distinct chunks as tuples of single bytes (`bytes([b])` for each byte of the
        UTF-8 encoding), then run the merge loop with the tie-break rule: among the pairs with the highest count, the
        smallest `(a, b)`. Stop early if no pair is left. Return the merges in the order they were learned, as
        `(a, b)` tuples of `bytes`.
    """)
    lesson.exercise(
        "train_bpe",
        r'''
        def train_bpe(text: str, num_merges: int, special_tokens: tuple[str, ...] = (END_OF_TEXT,)) -> list[tuple[bytes, bytes]]:
            """Byte-level BPE training; returns up to num_merges merges (a, b), in the order learned."""
            # TODO: cut the text at the special tokens (they are not trained on); pre-tokenize every piece
            # TODO: chunk frequencies {tuple of single bytes: count}
            # TODO: num_merges times: count pairs weighted by frequency, take the most frequent pair
            #       (ties: the smallest (a, b)), record it, merge it in every chunk
            ### BEGIN SOLUTION
            pieces = re.split("|".join(map(re.escape, special_tokens)), text) if special_tokens else [text]
            chunk_counts = Counter(
                tuple(bytes([b]) for b in chunk.encode("utf-8")) for piece in pieces for chunk in pretokenize(piece)
            )
            merges = []
            for _ in range(num_merges):
                pair_counts = Counter()
                for chunk, count in chunk_counts.items():
                    for pair in zip(chunk, chunk[1:]):
                        pair_counts[pair] += count
                if not pair_counts:
                    break
                best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))  # most frequent, then smallest
                merges.append(best)
                merged_counts = Counter()
                for chunk, count in chunk_counts.items():
                    merged_counts[merge_pair(chunk, best)] += count
                chunk_counts = merged_counts
            return merges
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        try:
            start = time.perf_counter()
            merges = train_bpe(CORPUS, 300)
            print(f"300 merges in {time.perf_counter() - start:.2f} s; the first 12:")
            print([(a + b).decode("utf-8", errors="replace") for a, b in merges[:12]])
            print("the last 8:", [(a + b).decode("utf-8", errors="replace") for a, b in merges[-8:]])
        except NotImplementedError:
            print("Implement train_bpe first.")
    """)
    lesson.md(r"""
        Expect the first merges to be a space joined to a frequent first letter (`" t"`), then common English
        bigrams, and, early on, the first two bytes of the frequent Chinese characters (`b"\xe4\xb8"` shows as `�`
        when decoded alone: it is not a whole character yet).

        ## 6. Exercise `BPETokenizer`: encode and decode

        Build the vocabulary of section 2 (`vocab: dict[int, bytes]`, specials after the merges, their bytes their
        UTF-8) and its inverse for the non-special tokens. `encode`:

        1. cut the text at the special tokens with a **capturing** split, so the special tokens stay in the list, and
           try the **longest special token first** (with `<|endoftext|>` and `<|endoftext|><|endoftext|>` both
           special, the second must win where it occurs);
        2. a special token becomes its id; any other piece is pre-tokenized, and each chunk is merged by lowest rank
           until no learned pair is left, then looked up.

        `decode` joins the bytes of all tokens and decodes UTF-8 once with `errors="replace"` (a token sequence cut
        in the middle of a character must still decode, to `�`).
    """)
    lesson.exercise(
        "bpe_tokenizer",
        r'''
        class BPETokenizer:
            """Byte-level BPE: ids 0..255 bytes, 256 + i merge i, then the special tokens."""

            def __init__(self, merges: list[tuple[bytes, bytes]], special_tokens: tuple[str, ...] = (END_OF_TEXT,)):
                # TODO: self.vocab {id: bytes}; self.special_ids {special token: id}; merge ranks {pair: i};
                #       the inverse vocabulary {bytes: id} for ordinary tokens
                ### BEGIN SOLUTION
                self.vocab = {i: bytes([i]) for i in range(256)}
                self.ranks = {}
                for i, (a, b) in enumerate(merges):
                    self.vocab[256 + i] = a + b
                    self.ranks[(a, b)] = i
                self.token_ids = {}
                for token_id, token in self.vocab.items():
                    self.token_ids.setdefault(token, token_id)  # the first id, should two merges spell the same bytes
                self.special_ids = {}
                for j, special in enumerate(special_tokens):
                    self.special_ids[special] = 256 + len(merges) + j
                    self.vocab[256 + len(merges) + j] = special.encode("utf-8")
                longest_first = sorted(special_tokens, key=len, reverse=True)
                self.special_split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if special_tokens else None
                ### END SOLUTION

            def encode_chunk(self, chunk: str) -> list[int]:
                """One pre-tokenized chunk (no special tokens) to ids."""
                # TODO: single bytes; merge the lowest-ranked learned pair while there is one; ids of the tokens
                ### BEGIN SOLUTION
                tokens = tuple(bytes([b]) for b in chunk.encode("utf-8"))
                while len(tokens) > 1:
                    pair = min(zip(tokens, tokens[1:]), key=lambda p: self.ranks.get(p, float("inf")))
                    if pair not in self.ranks:
                        break
                    tokens = merge_pair(tokens, pair)
                return [self.token_ids[token] for token in tokens]
                ### END SOLUTION

            def encode(self, text: str) -> list[int]:
                # TODO: capturing split at the special tokens (longest first); specials to their ids; other pieces
                #       pre-tokenized, each chunk through encode_chunk
                ### BEGIN SOLUTION
                pieces = self.special_split.split(text) if self.special_split else [text]
                ids = []
                for piece in pieces:
                    if piece in self.special_ids:
                        ids.append(self.special_ids[piece])
                    else:
                        for chunk in pretokenize(piece):
                            ids.extend(self.encode_chunk(chunk))
                return ids
                ### END SOLUTION

            def decode(self, ids: list[int]) -> str:
                # TODO: concatenate the bytes of every token, then decode UTF-8 once (invalid bytes become U+FFFD)
                ### BEGIN SOLUTION
                return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Compression, and what Hugging Face's trainer does differently

        The cell below trains with growing numbers of merges and plots the **compression** (UTF-8 bytes per token) of
        the corpus, for your tokenizer and for the Hugging Face `tokenizers` BPE trainer on the same corpus, with the
        same pre-tokenizer regex, the full 256-byte alphabet, and `<|endoftext|>` as a special token. The two curves
        lie on top of each other; the merge lists, though, are not identical, for two reasons:

        - **Its tie-break.** Among pairs of equal count it takes the pair with the smallest *token ids*, and its ids
          are not bytes: the 256 byte tokens are renamed to printable characters (GPT-2's `bytes_to_unicode`, where
          the space byte becomes `Ġ` and sorts after every letter) and numbered in the sorted order of those
          characters; merged tokens get the next id. A small corpus of repeated sentences is full of ties, so after
          the first few merges the orders drift apart, and so do the later merges that build on them.
        - **Its alphabet.** By default the initial alphabet holds only the characters seen in the corpus (then an
          unseen byte cannot be encoded at all); the plot passes `initial_alphabet=ByteLevel.alphabet()` to get all
          256, as in your tokenizer. Its `vocab_size` counts the alphabet and the special tokens, so $M$ merges are
          `vocab_size = 256 + M + 1`.

        What is comparable therefore is the merges up to the first tie, and the token counts. The checks compare both;
        the checks file also shows that its slow BPE, run with Hugging Face's tie-break, reproduces Hugging Face's
        merge list exactly on this corpus.
    """)
    lesson.code(r"""
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        def hugging_face_token_count(num_merges):
            tokenizer = Tokenizer(models.BPE())
            tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            trainer = trainers.BpeTrainer(
                vocab_size=256 + num_merges + 1, min_frequency=0, special_tokens=[END_OF_TEXT],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
            )
            tokenizer.train_from_iterator(CORPUS.split(END_OF_TEXT), trainer=trainer)
            return len(tokenizer.encode(CORPUS).ids)

        corpus_bytes = len(CORPUS.encode("utf-8"))
        steps = [0, 25, 50, 100, 200, 300, 400]
        try:
            all_merges = train_bpe(CORPUS, max(steps))
            mine = [corpus_bytes / len(BPETokenizer(all_merges[:m]).encode(CORPUS)) for m in steps]
        except NotImplementedError:
            mine = None
            print("Implement train_bpe and BPETokenizer to see your curve.")
        theirs = [corpus_bytes / hugging_face_token_count(m) for m in steps]
        plt.figure(figsize=(6, 3.5))
        if mine:
            plt.plot(steps, mine, marker="o", label="your BPE")
        plt.plot(steps, theirs, marker="x", ls="--", label="Hugging Face tokenizers BpeTrainer")
        plt.xlabel("number of merges M"); plt.ylabel("UTF-8 bytes per token")
        plt.title("Compression of the lesson corpus"); plt.legend(); plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`pretokenize`.** One compiled pattern and `findall`. The alternatives are tried in order at each position,
        so the contractions must come before ` ?[^\W\d_]+` (otherwise `'s` would be taken by the symbol class as `'`
        and then `s` as a word), and `\s+(?!\S)` before `\s+`: the lookahead gives back the last space of a run so
        that it can start the next word. Because every alternative consumes at least one character and every
        character matches some alternative, the chunks tile the text: `"".join(chunks) == text`.

        **`merge_pair`.** An index that jumps by two after a merge: that is what "without overlap" means. Incrementing
        by one would merge `(a, a, a)` into `(aa, aa)`, inventing a byte.

        **`train_bpe`.** The dictionary of distinct chunks with counts is the whole trick: the corpus has 16,000 bytes
        but only a few hundred distinct chunks, and GPT-2's 40 GB of WebText has far fewer distinct chunks than bytes.
        `min(..., key=(-count, pair))` is the tie-break in one expression. The split at special tokens comes first,
        so `<|endoftext|>`'s bytes never enter the statistics.

        **`BPETokenizer`.** The capturing group in `re.split` keeps the separators; sorting the specials longest first
        makes the alternation prefer the longer one where two share a prefix. Encoding merges the lowest-ranked pair
        first: a merge learned at step $i$ could only be learned after the merges that created its parts, so rank
        order is training order. `decode` joins bytes before decoding because a token may end in the middle of a
        UTF-8 character.

        **The mistakes the checks catch** (mutants in `tests/mutants/p02_bpe_tokenizer.py`): `\w+` for letters (digits
        and `_` glued into words); no `\s+(?!\S)` (a run of spaces swallows the space of the next word); a merge that
        overlaps; the largest pair on ties; counting distinct chunks without their frequency; training through the
        special tokens; no pre-tokenization (merges across word boundaries); specials not split out when encoding,
        or matched shortest first; merges applied in the wrong order; decoding token by token (Chinese and emoji
        turn into `�`).

        **Production.** `tiktoken` (OpenAI, Rust) encodes with the same lowest-rank loop over byte pieces, with a
        compiled Unicode regex; Llama 3 uses `tiktoken`'s pattern with a different split of digits (runs of at most
        three, `\p{N}{1,3}`), which makes arithmetic easier to learn. Hugging Face `tokenizers` trains with a
        max-heap of pair counts updated incrementally (only the chunks that contain the merged pair are touched),
        which is what makes training on gigabytes practical. SentencePiece runs BPE (Llama 1 and 2, with byte fallback
        for characters it has not seen) or a unigram model (T5) on Unicode characters instead of bytes, and treats the
        space as the character `▁`. Special tokens are matched before pre-tokenization everywhere, which raises a question for every serving
        stack: is `<|endoftext|>` typed by a user the special token or plain text? `tiktoken` refuses it unless it is
        listed in `allowed_special`; Hugging Face tokenizers have `split_special_tokens` to encode it as text.
    """)
    return lesson
