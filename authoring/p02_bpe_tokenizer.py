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
        minutes=210,
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
        stated tie-break rule, and a tokenizer that encodes and decodes with special tokens that are never split;
        then the three things that make it work on real corpora: pre-tokenization in parallel processes, an
        incremental trainer (pair counts updated only where a merge touched, a heap with lazy invalidation, the
        tie-break rule a parameter) and a streaming encoder that holds one chunk of text in memory.
        **Graded against** the Hugging Face `tokenizers` library (its byte-level pre-tokenizer, and its BPE trainer
        on the same corpus: token counts, the merges up to the first tie, and its whole merge list when your
        incremental trainer breaks ties with its ids), a slow, obviously-correct BPE written in the checks file,
        hand-derived merges, counted dictionary writes, `tracemalloc`, and round trips on arbitrary UTF-8 (emoji,
        Chinese, code).
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：模型只看到整数 token；只用 UTF-8 字节作 256 个基础 token 的字节级 BPE（GPT-2、Llama 3、Qwen、DeepSeek）能表示任意字符串，不再需要 `<unk>`。
        - **预分词（pre-tokenizer）**：GPT-2 正则先把文本切成块（缩写 `'s`、字母、数字、符号、空白），merge 永远不跨块边界。
        - **训练**：统计所有块内相邻 pair 的出现次数（按块出现频率加权），反复合并最频繁的 pair；平局取最小的 pair $(a, b)$（按 pair 比较，不是按拼接后的字节）。
        - **编码**：每块内按 merge 的学习顺序（rank 最小者先）合并；special token 先从文本中切出、永不拆分，多个匹配时最长者优先。
        - **解码**：先把所有 token 的字节拼接起来再整体做 UTF-8 解码，因为一个汉字或 emoji 可能跨多个 token。
        - **并行预分词**：只在 special token（文档边界）处切分语料，各进程分别统计块频率，再用 `Counter.update` 相加（`dict.update` 会覆盖而不是相加）。
        - **增量训练**：维护 pair 计数、pair → 所在块的索引和一个懒删除（lazy invalidation）的堆；每次合并只更新含该 pair 的块，结果与慢速训练逐条相同。平局规则是参数：本课取最小 pair，CS336 取字典序更大的 pair，Hugging Face 取其 id 最小的 pair。
        - **流式编码**：按块读入文本，扣留可能变成 special token 的结尾和最后两个预分词块，其余立即编码输出；按行各自编码是错的（`"\n"` 和下一行的缩进本属于同一块）。
        {易错点}
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
        neither is reproducible. Others in use: Stanford CS336's assignment 1 takes the lexicographically *greater*
        pair; Hugging Face `tokenizers` takes the pair with the smallest token *ids* in its own numbering (section 7);
        Karpathy's `minbpe` takes `max(stats, key=stats.get)`, which is whichever tied pair was counted first. The
        incremental trainer of section 9 takes the rule as a parameter, and both lexicographic rules are graded.

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
        pairs touched by a merge and keep a heap, which you build in section 9); encoding is $O(n^2)$ per chunk of $n$
        bytes with this simple loop, and chunks are short.
    """)
    lesson.setup(r"""
        import heapq
        import multiprocessing
        import re
        import time
        from collections import Counter
        from collections.abc import Callable, Iterable, Iterator

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

        What is comparable under the lesson's rule is therefore the merges up to the first tie, and the token counts;
        the checks compare both. Under Hugging Face's own rule the merge lists are identical: your incremental trainer
        of section 9, given Hugging Face's ids as its tie-break key, reproduces all 300 of its merges on this corpus,
        and a check asserts it.
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
    lesson.md(r"""
        ## 8. Exercise `parallel_pretokenize`: counting chunks in several processes

        Everything so far ran on 16 KB. A real tokenizer is trained on gigabytes (GPT-2's WebText was 40 GB), and the
        first pass, pre-tokenizing and counting the chunks, is pure Python regex work: about 2.5 MB per second of CPU
        time on the machine this lesson was written on (about 0.4 s for the 1 MB corpus generated below, measured by
        `python scripts/time_bpe_trainers.py`), so 40 GB would take four and a half hours on one core. The pass is
        embarrassingly parallel: give each process a slice of the corpus, let it count its chunks, and add the
        counters. The one rule is **where to cut**: a cut in the middle of a document can fall inside a word
        (`"tokeni" | "zer"` would be counted as two chunks that the serial pass never sees), while a cut just before a
        special token changes nothing, because the serial pass splits there anyway. So:

        - `count_pretokens(text, special_tokens)` is the serial pass (the first lines of your `train_bpe`): split at
          the special tokens, pre-tokenize each piece, count `{tuple of single bytes: count}`.
        - `chunk_boundaries(text, num_chunks, split_token)` returns the cut points $0 = b_0 < b_1 < \dots < b_k =
          \mathrm{len}(text)$ with $k \le$ `num_chunks`: for $i = 1, \dots,$ `num_chunks` $- 1$, guess the even
          position $g_i = \lfloor i \cdot \mathrm{len}(text) / \text{num\_chunks} \rfloor$ and move it forward to the
          first occurrence of `split_token` at or after it (`text.find(split_token, g_i)`). No occurrence left: stop.
          Two guesses that land on the same occurrence give one cut (the list is strictly increasing), and an empty
          text has the single boundary `[0]`. Every inner cut is where a `split_token` starts, so every slice but
          the first begins with one.
        - `count_pretokens_parallel(text, num_processes, special_tokens)` cuts at the first special token (the
          document separator), counts each slice in a pool of worker processes, and adds the counters. With no
          special token there is nowhere safe to cut, so it counts serially. The result must equal
          `count_pretokens(text, special_tokens)` exactly.

        Two practical points. Adding the per-slice counters must **add**: `Counter.update` (or `+=`) adds counts,
        while `dict.update` overwrites them, so a chunk seen in two slices would keep only the last slice's count.
        And the pool must be able to find your worker function: with the `fork` start method
        (`multiprocessing.get_context("fork")`, Linux and Colab) a worker is a copy of this process, so a function
        defined in a notebook cell works; with `spawn` (the default on macOS and Windows) a worker is a fresh Python
        that imports the function by name from a module, which a notebook cell is not; there you move
        `count_pretokens` into a `.py` file. (Python 3.12 and later also warn when a process that runs threads, as a
        Jupyter kernel does, forks: a lock that another thread holds at that moment stays locked in the child. This
        worker only runs a regular expression and fills a `Counter`, and production pipelines run as scripts.) On a file too large for memory, CS336's `find_chunk_boundaries` does the
        same search on bytes: seek to each guess, read a small window, look for the special token's bytes, and give
        each worker `(path, start, end)` to read for itself.
    """)
    lesson.exercise(
        "parallel_pretokenize",
        r'''
        def count_pretokens(text: str, special_tokens: tuple[str, ...] = (END_OF_TEXT,)) -> Counter:
            """The serial pass: {chunk as a tuple of single bytes: count} over the text cut at the special tokens."""
            # TODO: split at the special tokens, pre-tokenize every piece, count the chunks as tuples of single bytes
            ### BEGIN SOLUTION
            pieces = re.split("|".join(map(re.escape, special_tokens)), text) if special_tokens else [text]
            return Counter(
                tuple(bytes([b]) for b in chunk.encode("utf-8")) for piece in pieces for chunk in pretokenize(piece)
            )
            ### END SOLUTION


        def chunk_boundaries(text: str, num_chunks: int, split_token: str = END_OF_TEXT) -> list[int]:
            """Cut points 0 = b_0 < ... < b_k = len(text), k <= num_chunks ([0] for ""): inner cut i is the first
            occurrence of split_token at or after i * len(text) // num_chunks. ValueError: num_chunks < 1, empty split_token."""
            # TODO: refuse bad arguments; for i in 1 .. num_chunks - 1: find split_token from the even guess;
            #       stop when there is none; skip a cut equal to the previous one; end with len(text)
            ### BEGIN SOLUTION
            if num_chunks < 1 or not split_token:
                raise ValueError(f"need num_chunks >= 1 and a non-empty split_token, got {num_chunks}, {split_token!r}")
            cuts = [0]
            for i in range(1, num_chunks):
                start = text.find(split_token, i * len(text) // num_chunks)
                if start == -1:
                    break
                if start > cuts[-1]:
                    cuts.append(start)
            if len(text) > cuts[-1]:
                cuts.append(len(text))
            return cuts
            ### END SOLUTION


        def count_pretokens_parallel(text: str, num_processes: int, special_tokens: tuple[str, ...] = (END_OF_TEXT,)) -> Counter:
            """count_pretokens(text, special_tokens), counted by a pool of forked workers, one slice each; the slices are
            cut by chunk_boundaries(text, num_processes, special_tokens[0]). ValueError: num_processes < 1."""
            # TODO: refuse num_processes < 1; no special token: count serially; otherwise cut, count every slice
            #       in a multiprocessing.get_context("fork") pool, and add the counters
            ### BEGIN SOLUTION
            if num_processes < 1:
                raise ValueError(f"num_processes must be >= 1, got {num_processes}")
            if not special_tokens:
                return count_pretokens(text, special_tokens)
            cuts = chunk_boundaries(text, num_processes, special_tokens[0])
            slices = [(text[start:end], special_tokens) for start, end in zip(cuts, cuts[1:])]
            with multiprocessing.get_context("fork").Pool(max(1, len(slices))) as pool:
                parts = pool.starmap(count_pretokens, slices)
            total = Counter()
            for part in parts:
                total.update(part)  # Counter.update adds; dict.update would overwrite
            return total
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # A larger corpus from the same generator as the lesson's (scripts/make_bpe_corpus.py), about 1 MB.
        import runpy

        make_corpus = runpy.run_path(str(repo_root() / "scripts" / "make_bpe_corpus.py"))["make_corpus"]
        BIG_CORPUS = make_corpus(seed=7, target_bytes=1_000_000)
        print(f"generated corpus: {len(BIG_CORPUS.encode('utf-8')):,} bytes, {BIG_CORPUS.count(END_OF_TEXT) + 1} documents")
        try:
            start = time.perf_counter()
            serial = count_pretokens(BIG_CORPUS)
            serial_s = time.perf_counter() - start
            start = time.perf_counter()
            parallel = count_pretokens_parallel(BIG_CORPUS, 2)
            parallel_s = time.perf_counter() - start
            print(f"serial pass: {serial_s:.2f} s ({len(BIG_CORPUS.encode('utf-8')) / serial_s / 1e6:.1f} MB/s), "
                  f"{len(serial):,} distinct chunks; 2 processes: {parallel_s:.2f} s; equal: {parallel == serial}")
            print("cuts for 4 slices:", chunk_boundaries(BIG_CORPUS, 4))
        except NotImplementedError:
            print("Implement parallel_pretokenize first.")
    """)
    lesson.md(r"""
        On the machine this lesson was written on (two cores shared with other jobs) the two processes were no faster
        than one: starting the pool, sending each slice to its worker and pickling every counter back cost as much as
        the work saved on 1 MB. The pass scales where the corpus is large and the cores are free: each worker then
        spends minutes counting and sends back a counter that is far smaller than its slice, because a corpus has far
        fewer distinct chunks than chunks (5,735 distinct in the 1 MB corpus).

        ## 9. Exercise `incremental_bpe`: a trainer that only touches what a merge changed

        Your `train_bpe` recounts every pair of every distinct chunk for each merge: $O(M \cdot C)$. That is fine for
        243 merges on the 16 KB corpus (a vocabulary of 500 = 256 bytes + 243 merges + 1 special token) and hopeless
        for GPT-2's 50,000 merges over millions of distinct chunks. The observation that fixes it: merging $(a, b)$
        changes only the chunks that contain $a$ followed by $b$; every other chunk, and every pair count that comes
        only from other chunks, stays as it was. Keep four structures:

        | structure | holds | after merging $(a, b)$ |
        | --- | --- | --- |
        | `words`, `counts` | each distinct chunk as a tuple of tokens, and its frequency | rewrite the chunks that contained the pair |
        | `pair_counts` | pair $\to$ frequency-weighted count over all chunks, no zero entries | subtract each touched chunk's old pairs, add its new ones |
        | `where` | pair $\to$ the set of chunk indices that contain it (may keep stale indices) | add the touched chunks under their new pairs |
        | `heap` | entries `(-count, key(pair), pair)`; heapq pops the smallest | push every new pair with its final count |

        **Lazy invalidation.** The heap is never searched or repaired. Pop the top entry; if its stored count differs
        from `pair_counts` now, it is stale: push it back with the current count (if that is still positive) and pop
        again. This is correct because of one fact: the only counts that ever go *up* after a merge are those of
        pairs that contain the new token $ab$, and those are pushed fresh. Every other count can only go down, so a
        stored count is never below the true one, and the first entry whose stored count is still current has the
        largest count, with the tie-break decided by `key` among equal counts.

        **The tie-break rules**, as the parameter `tie_break`:

        - `"lexicographic_smaller"` (this lesson's rule, section 2): among the pairs with the largest count, the
          smallest pair $(a, b)$, comparing $a$ first, then $b$, as byte strings. `key(pair) = pair`.
        - `"lexicographic_greater"` (Stanford CS336's rule): the greatest pair in that same order. `heapq` is a
          min-heap and a byte string cannot be negated, so the key is a small wrapper class whose `__lt__` is the
          reversed comparison, `a.pair > b.pair`.
        - a function `key(pair)`: the tied pair with the smallest key wins. Hugging Face's rule is
          `key = lambda pair: (hf_id[pair[0]], hf_id[pair[1]])` with its vocabulary's ids; the demo shows it, and a
          check asserts that it reproduces Hugging Face's 300 merges on the corpus exactly.

        Anything else is refused with a `ValueError`, as are a negative `num_merges` and a `pair_counts` that is not
        empty. The trainer takes the chunk counts (from `count_pretokens`), so that pre-tokenization and merging stay
        separate jobs, as in Hugging Face's trainer, and does not modify them. It keeps its pair counts in
        `pair_counts`, an empty dictionary that the caller may pass in (by default a new one): write it with
        `pair_counts[pair] = ...` and `del pair_counts[pair]`, and when training ends it must hold exactly the pair
        counts of the merged chunks. A check passes a dictionary that counts your writes: for 243 merges on the corpus,
        recounting every chunk after each merge costs about 880,000 writes, updating the touched chunks about 24,000.

        An alternative to the heap is a bucketed max: a dictionary `count -> set of pairs` and the largest count kept
        up to date; the winner is then `min` (or `max`) of the top bucket. Hugging Face's trainer keeps a max-heap with
        the same lazy check (`tokenizers/src/models/bpe/trainer.rs`: a popped `Merge` whose count changed is pushed
        again with the current count).
    """)
    lesson.exercise(
        "incremental_bpe",
        r'''
        def train_bpe_incremental(
            chunk_counts: dict[tuple[bytes, ...], int],
            num_merges: int,
            tie_break: str | Callable = "lexicographic_smaller",
            pair_counts: dict | None = None,
        ) -> list[tuple[bytes, bytes]]:
            """The merges train_bpe would learn from these chunk counts, found by incremental pair counting.

            tie_break: "lexicographic_smaller", "lexicographic_greater", or key(pair) (the smallest key wins).
            pair_counts: an empty dict to keep the pair counts in (a new one if None); it ends holding the counts of
            the merged chunks, without zero entries. ValueError: unknown tie_break, num_merges < 0, pair_counts not empty.
            """
            # TODO: refuse bad arguments; choose key(pair) from tie_break (the greater rule needs reversed comparison)
            # TODO: words and counts from chunk_counts (copies); pair_counts and where (pair -> chunk indices);
            #       a heap of (-count, key(pair), pair)
            # TODO: until num_merges merges or an empty heap: pop; a stale entry goes back with its current count;
            #       otherwise record the merge, and in every chunk that where[pair] names: subtract its old pairs,
            #       merge, add its new pairs (and index them); then push the new pairs with their counts
            ### BEGIN SOLUTION
            class Descending:  # reverses the order of pairs, so that the min-heap pops the greatest pair first
                __slots__ = ("pair",)

                def __init__(self, pair):
                    self.pair = pair

                def __lt__(self, other):
                    return self.pair > other.pair

                def __eq__(self, other):
                    return self.pair == other.pair

            if num_merges < 0:
                raise ValueError(f"num_merges must be >= 0, got {num_merges}")
            if tie_break == "lexicographic_smaller":
                key = lambda pair: pair  # noqa: E731
            elif tie_break == "lexicographic_greater":
                key = Descending
            elif callable(tie_break):
                key = tie_break
            else:
                raise ValueError(f"tie_break must be 'lexicographic_smaller', 'lexicographic_greater' or a function, got {tie_break!r}")
            pair_counts = {} if pair_counts is None else pair_counts
            if pair_counts:
                raise ValueError("pair_counts must start empty")
            words = list(chunk_counts)  # tuples of tokens; chunk_counts itself is not modified
            counts = list(chunk_counts.values())
            where = {}
            for index, word in enumerate(words):
                for pair in zip(word, word[1:]):
                    pair_counts[pair] = pair_counts.get(pair, 0) + counts[index]
                    where.setdefault(pair, set()).add(index)
            heap = [(-count, key(pair), pair) for pair, count in pair_counts.items()]
            heapq.heapify(heap)
            merges = []
            while len(merges) < num_merges and heap:
                negative_count, _, pair = heapq.heappop(heap)
                current = pair_counts.get(pair, 0)
                if current != -negative_count:  # stale: the count went down since this entry was pushed
                    if current > 0:
                        heapq.heappush(heap, (-current, key(pair), pair))
                    continue
                merges.append(pair)
                new_pairs = set()
                for index in where.pop(pair):
                    word, count = words[index], counts[index]
                    for old in zip(word, word[1:]):
                        pair_counts[old] -= count
                        if pair_counts[old] == 0:
                            del pair_counts[old]
                    word = words[index] = merge_pair(word, pair)
                    for new in zip(word, word[1:]):
                        pair_counts[new] = pair_counts.get(new, 0) + count
                        where.setdefault(new, set()).add(index)
                        new_pairs.add(new)
                for new in new_pairs:
                    if new in pair_counts:
                        heapq.heappush(heap, (-pair_counts[new], key(new), new))
            return merges
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        def time_trainers(text, num_merges, slow=True):
            start = time.perf_counter()
            chunks = count_pretokens(text)
            counted = time.perf_counter()
            fast = train_bpe_incremental(chunks, num_merges)
            done = time.perf_counter()
            row = {"pretokenize_s": counted - start, "incremental_s": done - counted}
            if slow:
                row["slow_s"] = time.perf_counter()
                row["same"] = train_bpe(text, num_merges) == fast
                row["slow_s"] = time.perf_counter() - row["slow_s"]
            return row

        try:
            sizes = [16_000, 64_000, 256_000, 1_000_000]
            texts = [CORPUS, *(make_corpus(seed=7, target_bytes=n) for n in sizes[1:-1]), BIG_CORPUS]
            rows = [time_trainers(text, 243, slow=n <= 256_000) for n, text in zip(sizes, texts)]  # slow: ~10 s at 1 MB
            for n, row in zip(sizes, rows):
                slow = f"slow {row['slow_s']:5.2f} s (same merges: {row['same']}), " if "slow_s" in row else ""
                print(f"{n:>9,} bytes, 243 merges: {slow}incremental {row['incremental_s']:.3f} s "
                      f"(+ pre-tokenization {row['pretokenize_s']:.2f} s)")
            plt.figure(figsize=(6, 3.5))
            plt.loglog(sizes[:3], [r["slow_s"] for r in rows[:3]], marker="o", label="train_bpe (recount every merge)")
            plt.loglog(sizes, [r["incremental_s"] for r in rows], marker="x", label="train_bpe_incremental")
            plt.loglog(sizes, [r["pretokenize_s"] for r in rows], ls=":", marker=".", label="count_pretokens (both need it)")
            plt.xlabel("corpus size (bytes)"); plt.ylabel("seconds for 243 merges")
            plt.title("BPE training time (vocabulary 500)"); plt.legend(fontsize=8); plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("Implement parallel_pretokenize, train_bpe and incremental_bpe first.")
    """)
    lesson.md(r"""
        **Reading the numbers.** Measured with `time python scripts/time_bpe_trainers.py` (it runs this notebook's
        reference solutions and prints CPU seconds, `time.process_time`, which other jobs on a busy machine do not
        inflate; the ranges are over several runs on a shared two-core machine), a vocabulary of 500 on the shipped
        16 KB corpus takes 0.28-0.34 s with `train_bpe` and 0.015-0.026 s with `train_bpe_incremental`;
        `time python scripts/time_bpe_trainers.py --mb 0`, the whole command with Python's start-up,
        pre-tokenization and both trainers, used 0.36-0.43 s of CPU (`user`), inside the 0.5 s target. On the 1 MB
        generated corpus (5,735 distinct chunks), `train_bpe` takes 4.0-5.7 s and `train_bpe_incremental`
        0.066-0.082 s, about 60 times less, while `count_pretokens` takes about 0.4 s: once merging is incremental,
        pre-tokenization is the bottleneck, which is why section 8 parallelizes it. The slow trainer's time grows with the number of distinct
        chunks times the number of merges; the incremental one's with the size of the chunks each merge touches,
        which shrinks as the merges get rarer. The wall-clock times that the cell above prints depend on how busy the
        machine is.
    """)
    lesson.code(r"""
        # Hugging Face's rule: the tied pair with the smallest ids in its own vocabulary (GPT-2's byte alphabet sorted,
        # then merged tokens in the order they were made). Its trained vocabulary gives those ids.
        import json

        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.train_from_iterator(CORPUS.split(END_OF_TEXT), trainer=trainers.BpeTrainer(
            vocab_size=256 + 300 + 1, min_frequency=0, special_tokens=[END_OF_TEXT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
        byte_char = {b: chr(b) for b in printable}
        byte_char.update({b: chr(256 + k) for k, b in enumerate(b for b in range(256) if b not in byte_char)})
        char_byte = {c: b for b, c in byte_char.items()}
        hf_id = {bytes(char_byte[c] for c in token): i for token, i in hf.get_vocab().items() if token != END_OF_TEXT}
        hf_merges = [tuple(bytes(char_byte[c] for c in part) for part in merge)
                     for merge in json.loads(hf.to_str())["model"]["merges"]]
        try:
            chunks = count_pretokens(CORPUS)
            mine = train_bpe_incremental(chunks, 300, tie_break=lambda pair: (hf_id[pair[0]], hf_id[pair[1]]))
            ours = train_bpe_incremental(chunks, 300)
            print("with Hugging Face's ids as the key: identical to its 300 merges:", mine == hf_merges)
            print("with the lesson's rule: first difference at merge",
                  next(i for i, (a, b) in enumerate(zip(ours, hf_merges)) if a != b))
        except NotImplementedError:
            print("Implement incremental_bpe first.")
    """)
    lesson.md(r"""
        ## 10. Exercise `encode_iterable`: encoding a stream

        `tokenizer.encode(open(path).read())` holds the whole file, then a Python list of its ids (a pointer per id
        and an int object per id above 256: about 36 bytes each). Tokenizing a 10 GB training set for a data loader
        must stream: read a line, yield its ids, forget it. The catch is that the encoding of text depends on text
        that has not arrived yet, so you cannot simply encode each line on its own:

        - GPT-2's pattern makes a newline and the next line's indentation one chunk: `pretokenize("a\n  b")` is
          `["a", "\n ", " b"]`, but the lines `"a\n"` and `"  b"` give `["a", "\n"]` and `[" ", " b"]`. In code, where a
          newline followed by indentation is frequent and gets merged, line-by-line encoding produces different (and
          more) tokens; the demo below counts them.
        - A pre-token chunk at the end of what you have may grow (`"wor"` then `"ld"`), and the chunk before it may
          change too: `"We'v"` splits as `["We", "'", "v"]`, but once the next `"e"` arrives, `"'ve"` is one
          contraction.
        - A special token can arrive in two pieces (`"<|endof"` then `"text|>"`), and a complete one can turn out to
          be the start of a longer one (`"<|endoftext|>"` followed by a second `"<|endoftext|>"` when
          `"<|endoftext|><|endoftext|>"` is special too).

        So `encode_iterable(tokenizer, lines)` keeps a buffer. After appending each piece it computes a **safe cut**,
        yields `tokenizer.encode(buffer[:cut])`, and keeps `buffer[cut:]`; at the end it encodes what is left. The
        cut, using only `tokenizer.special_ids` (its keys are the special tokens), `tokenizer.encode` and your
        `pretokenize`:

        1. **hold** = the smallest position $p$ where `buffer[p:]` is a proper prefix of a special token (the tail
           could still become one; `len(buffer)` if there is none). Find the special tokens in the buffer as encode
           does (leftmost, longest first); if one that starts before *hold* ends after it, move *hold* back to its
           start.
        2. In the text between the end of the last special token before *hold* and *hold*, pre-tokenize and **keep
           back the last two chunks**: cut where the second-to-last chunk starts (or where that text starts, if it
           has fewer than three chunks).

        Two chunks are enough for GPT-2's pattern: an alternative decides its match from at most three characters
        from where the chunk starts (the contractions `'ll`, `'ve`, `'re`) or from the characters of its run and the
        one after it, and two complete chunks after a chunk put all of those characters in the buffer. Everything
        before a special token is final, because `encode` cuts there first. What the buffer holds is one piece of
        input plus two chunks, so memory stays flat however long the stream is (one line of a gigabyte without a
        newline would still be held whole: streaming works at the granularity of the pieces you feed it). A check
        measures your peak with `tracemalloc` against the size of the input.
    """)
    lesson.exercise(
        "encode_iterable",
        r'''
        def encode_iterable(tokenizer, lines: Iterable[str]) -> Iterator[int]:
            """Yield the ids of tokenizer.encode("".join(lines)), holding only one piece of input and two chunks.

            Uses tokenizer.encode(text) and tokenizer.special_ids (its keys are the special tokens), and pretokenize.
            """
            # TODO: a buffer; after each piece: the safe cut (hold back a possible special-token prefix, never cut
            #       inside a special token, keep back the last two pre-token chunks); yield the ids before the cut
            # TODO: at the end, yield the ids of what is left
            ### BEGIN SOLUTION
            specials = sorted(tokenizer.special_ids, key=len, reverse=True)
            special_pattern = re.compile("|".join(map(re.escape, specials))) if specials else None
            longest = max(map(len, specials), default=0)
            first_characters = {special[0] for special in specials}

            def safe_cut(buffer: str) -> int:
                hold = len(buffer)
                for p in range(max(0, len(buffer) - longest + 1), len(buffer)):
                    if buffer[p] in first_characters and any(
                        len(special) > len(buffer) - p and special.startswith(buffer[p:]) for special in specials
                    ):
                        hold = p
                        break
                text_start = 0
                if special_pattern is not None:
                    for match in special_pattern.finditer(buffer):
                        if match.start() >= hold:
                            break
                        if match.end() > hold:  # a special token that the hold would cut in two
                            hold = match.start()
                            break
                        text_start = match.end()
                chunks = pretokenize(buffer[text_start:hold])
                if len(chunks) < 3:
                    return text_start
                return hold - len(chunks[-1]) - len(chunks[-2])

            buffer = ""
            for piece in lines:
                buffer += piece
                cut = safe_cut(buffer)
                if cut:
                    yield from tokenizer.encode(buffer[:cut])
                    buffer = buffer[cut:]
            if buffer:
                yield from tokenizer.encode(buffer)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        import gc
        import tracemalloc

        def peak_bytes(run):
            # A first run fills CPython's free lists (it keeps freed tuples, lists and frames for reuse, and tracemalloc
            # counts them as held); with the garbage collector off, the second run measures what the code itself holds.
            gc.disable()
            try:
                run()
                tracemalloc.start()
                run()
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
                gc.enable()

        try:
            tokenizer = BPETokenizer(train_bpe_incremental(count_pretokens(CORPUS), 300))
            sizes, whole, streamed = [], [], []
            for target in (12_000, 25_000, 50_000, 100_000):
                lines = make_corpus(seed=11, target_bytes=target).splitlines(keepends=True)
                sizes.append(sum(len(line.encode("utf-8")) for line in lines))
                whole.append(peak_bytes(lambda: len(tokenizer.encode("".join(lines)))))
                streamed.append(peak_bytes(lambda: sum(1 for _ in encode_iterable(tokenizer, iter(lines)))))
                print(f"input {sizes[-1]:>7,} bytes in {len(lines):>3} lines: peak traced memory "
                      f"encode(whole text) {whole[-1]:>9,} bytes, encode_iterable {streamed[-1]:>7,} bytes")
            print("same ids:", list(encode_iterable(tokenizer, iter(lines))) == tokenizer.encode("".join(lines)))
            by_line = sum(len(tokenizer.encode(line)) for line in lines)
            print(f"encoding each line on its own instead: {by_line:,} ids instead of {len(tokenizer.encode(''.join(lines))):,}")
            plt.figure(figsize=(6, 3.5))
            plt.loglog(sizes, whole, marker="o", label="tokenizer.encode(whole text)")
            plt.loglog(sizes, streamed, marker="x", label="encode_iterable(tokenizer, lines)")
            plt.xlabel("input size (bytes of UTF-8)"); plt.ylabel("peak traced memory (bytes)")
            plt.title("Encoding memory: whole text vs stream"); plt.legend(); plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("Implement incremental_bpe, bpe_tokenizer and encode_iterable first.")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 11. Reading the solutions

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

        **`parallel_pretokenize`.** `text.find(split_token, guess)` moves each even guess forward to a document start;
        the `start > cuts[-1]` test drops the cut that two guesses share (when one document is longer than the gap
        between two guesses, both find the separator at its end). `pool.starmap` pickles the function by name and each slice by value; a
        forked worker finds the function in its copy of the parent's modules. `total.update(part)` on a `Counter`
        adds. Cost: one pass over the text in total, divided among the workers, plus pickling a counter per slice.

        **`train_bpe_incremental`.** Building `pair_counts` and `where` is one pass over the distinct chunks. Each
        merge then touches only `where[pair]`: for those chunks it subtracts all old pairs and adds all new ones, the
        simplest update that is obviously right; pairs far from the merge are subtracted and added back, which costs
        a few writes but never a wrong count (Hugging Face's `Word::merge` reports only the changed neighbours, which
        saves those writes). `where` may keep indices of chunks that no longer contain a pair: such a chunk has its
        pairs subtracted and added back unchanged, a few wasted writes. A merged pair's count is always 0 afterwards (a left-to-right merge leaves no occurrence behind, even for $(a, a)$ in $a a a$), so its
        stale heap entries are dropped when they surface. The heap entry `(-count, key(pair), pair)` puts the count
        first, the tie-break second, and the pair last, so that two entries whose keys tie (a `key` function may map
        two pairs to the same value) are still ordered. Cost per merge: $O(\text{size of the touched chunks} \cdot
        \log H)$ for a heap of $H$ entries, instead of $O(C)$ for the whole corpus; on the 1 MB corpus that is the difference between
        seconds and a tenth of a second, and pre-tokenization becomes the bottleneck, which is why section 8 exists.

        **`encode_iterable`.** The proper-prefix scan looks only at the last `longest - 1` characters, because a longer
        tail cannot be a proper prefix, and skips positions whose character starts no special token. The special tokens are found with the same longest-first alternation that
        `encode` splits with, so the stream sees the same matches as the whole text. `yield from` makes the function a
        generator: nothing runs until the caller asks for the first id, and each piece of input is read only when
        the ids before it have been consumed.

        **The usual mistakes, and why they are wrong**: `\w+` for letters (digits
        and `_` glued into words); no `\s+(?!\S)` (a run of spaces swallows the space of the next word); a merge that
        overlaps; the largest pair on ties; counting distinct chunks without their frequency; training through the
        special tokens; no pre-tokenization (merges across word boundaries); specials not split out when encoding,
        or matched shortest first; merges applied in the wrong order; decoding token by token (Chinese and emoji
        turn into `�`); cutting slices at the even guesses (inside words), keeping a cut twice, merging the counters
        with `dict.update`; trusting a stale heap entry, forgetting to subtract the old pairs of a touched chunk or
        to push the new pairs, a greater rule that compares the concatenated bytes, updating every chunk for every
        merge (right merges, but the write count of the slow trainer); encoding each line on its own, joining the
        whole input first, keeping back one chunk instead of two, and cutting through a special token.

        **Production.** `tiktoken` (OpenAI, Rust) encodes with the same lowest-rank loop over byte pieces, with a
        compiled Unicode regex. GPT-4's `cl100k_base` pattern changed GPT-2's in two ways that matter here: the
        contractions match in any case (`(?i:'s|'t|...)`), and numbers are split into runs of at most three digits
        (`\p{N}{1,3}`, so `"2048576"` becomes `"204"`, `"857"`, `"6"`), which gives a model a small, regular set of
        number tokens; Llama 3 reuses the `cl100k_base` pattern. Hugging Face `tokenizers` trains with a
        max-heap of pair counts updated incrementally (only the chunks that contain the merged pair are touched),
        which is what makes training on gigabytes practical. SentencePiece runs BPE (Llama 1 and 2, with byte fallback
        for characters it has not seen) or a unigram model (T5) on Unicode characters instead of bytes, and treats the
        space as the character `▁`. Special tokens are matched before pre-tokenization everywhere, which raises a question for every serving
        stack: is `<|endoftext|>` typed by a user the special token or plain text? `tiktoken` refuses it unless it is
        listed in `allowed_special`; Hugging Face tokenizers have `split_special_tokens` to encode it as text.
    """)
    lesson.mistakes()
    return lesson
