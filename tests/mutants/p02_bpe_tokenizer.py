"""Realistic wrong versions of the p02.bpe_tokenizer solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""

MUTANTS = [
    Mutant(
        "pretokenize",
        "word_class_for_letters",
        r"uses \w+ for letters, so digits and underscores stick to words",
        [(PATTERN, r"""'(?:[sdmt]|ll|ve|re)| ?\w+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")],
        mistake_zh="字母用 \\w+ 匹配，数字和下划线粘到了单词上",
    ),
    Mutant(
        "pretokenize",
        "no_trailing_space_lookahead",
        r"drops \s+(?!\S), so a run of spaces swallows the space that should start the next word",
        [(PATTERN, r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+""")],
        mistake_zh="漏掉 \\s+(?!\\S)，一串空格吞掉了本该作为下一个单词开头的空格",
    ),
    Mutant(
        "pretokenize",
        "contractions_last",
        "puts the contractions after the symbol class, so 's becomes ' and s",
        [(PATTERN, r"""| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|'(?:[sdmt]|ll|ve|re)|\s+(?!\S)|\s+"""[1:])],
        mistake_zh="把缩写放在符号类之后，'s 变成了 ' 和 s",
    ),
    Mutant(
        "merge_pair",
        "overlapping_matches",
        "advances by one after a merge, so (a, a, a) becomes (aa, aa)",
        [
            (
                "merged.append(pair[0] + pair[1])\n            i += 2",
                "merged.append(pair[0] + pair[1])\n            i += 1",
            )
        ],
        mistake_zh="合并后只前进一步，(a, a, a) 变成 (aa, aa)",
    ),
    Mutant(
        "merge_pair",
        "matches_the_concatenation",
        "compares the concatenated bytes instead of the two tokens",
        [
            (
                "tokens[i] == pair[0] and tokens[i + 1] == pair[1]",
                "tokens[i] + tokens[i + 1] == pair[0] + pair[1]",
            )
        ],
        mistake_zh="比较拼接后的字节，而不是两个 token",
    ),
    Mutant(
        "train_bpe",
        "largest_pair_on_ties",
        "breaks ties by the largest pair instead of the smallest",
        [
            (
                "best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))",
                "best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))",
            )
        ],
        mistake_zh="平局时选最大的词对而不是最小的",
    ),
    Mutant(
        "train_bpe",
        "counts_without_frequency",
        "counts each distinct chunk once, ignoring how often it occurs",
        [("pair_counts[pair] += count", "pair_counts[pair] += 1")],
        mistake_zh="每个不同的块只计一次，忽略它出现的次数",
    ),
    Mutant(
        "train_bpe",
        "trains_through_special_tokens",
        "does not cut the text at the special tokens",
        [
            (
                'pieces = re.split("|".join(map(re.escape, special_tokens)), text) if special_tokens else [text]',
                "pieces = [text]",
            )
        ],
        mistake_zh="不在 special token 处切开文本",
    ),
    Mutant(
        "train_bpe",
        "no_pretokenization",
        "trains on whole documents, so merges cross word boundaries",
        [("for piece in pieces for chunk in pretokenize(piece)", "for piece in pieces for chunk in [piece] if chunk")],
        mistake_zh="在整篇文档上训练，合并跨越了单词边界",
    ),
    Mutant(
        "bpe_tokenizer",
        "decodes_token_by_token",
        "decodes every token on its own, which breaks characters split across tokens",
        [
            (
                'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")',
                'return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)',
            )
        ],
        mistake_zh="逐个 token 解码，被拆在多个 token 里的字符就坏了",
    ),
    Mutant(
        "bpe_tokenizer",
        "shortest_special_first",
        "tries the special tokens in the given order, so a shorter one can win over a longer one",
        [("longest_first = sorted(special_tokens, key=len, reverse=True)", "longest_first = list(special_tokens)")],
        mistake_zh="按给定顺序尝试 special token，较短的可能抢在较长的前面",
    ),
    Mutant(
        "bpe_tokenizer",
        "specials_not_split_out",
        "pre-tokenizes the special tokens like any other text",
        [("pieces = self.special_split.split(text) if self.special_split else [text]", "pieces = [text]")],
        mistake_zh="把 special token 当作普通文本做预分词",
    ),
    Mutant(
        "bpe_tokenizer",
        "latest_merge_first",
        "merges the highest-ranked (latest learned) pair first",
        [
            (
                'pair = min(zip(tokens, tokens[1:]), key=lambda p: self.ranks.get(p, float("inf")))',
                'pair = max(zip(tokens, tokens[1:]), key=lambda p: self.ranks.get(p, float("-inf")))',
            )
        ],
        mistake_zh="先合并排名最高（最晚学到）的词对",
    ),
    Mutant(
        "train_bpe",
        "first_seen_on_ties",
        "takes Counter.most_common(1): ties go to the pair counted first, not to the smallest pair",
        [
            (
                "best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))",
                "best = pair_counts.most_common(1)[0][0]",
            )
        ],
        mistake_zh="用 Counter.most_common(1)：平局给了最先计数的词对，而不是最小的词对",
    ),
    Mutant(
        "train_bpe",
        "ties_by_concatenated_bytes",
        "breaks ties by the merged bytes a + b instead of the pair (a, b)",
        [
            (
                "key=lambda pair: (-pair_counts[pair], pair))",
                "key=lambda pair: (-pair_counts[pair], pair[0] + pair[1]))",
            )
        ],
        mistake_zh="平局按合并后的字节 a + b 而不是词对 (a, b) 比较",
    ),
    Mutant(
        "parallel_pretokenize",
        "cuts_at_the_even_guesses",
        "cuts at i * len(text) // num_chunks without moving to a special token, so a cut can split a word",
        [
            (
                "start = text.find(split_token, i * len(text) // num_chunks)",
                "start = i * len(text) // num_chunks",
            )
        ],
        mistake_zh="在 i * len(text) // num_chunks 处切开而不移到 special token，切点可能劈开一个单词",
    ),
    Mutant(
        "parallel_pretokenize",
        "keeps_a_cut_twice",
        "keeps a cut that two guesses share, so the boundaries are not strictly increasing (an empty slice)",
        [("if start > cuts[-1]:", "if start >= cuts[-1]:")],
        mistake_zh="两个猜测共享的切点保留了两次，边界不是严格递增的（出现空切片）",
    ),
    Mutant(
        "parallel_pretokenize",
        "dict_update_overwrites_counts",
        "merges the per-slice counters with dict.update, which overwrites a chunk's count instead of adding",
        [("total.update(part)  # Counter.update adds; dict.update would overwrite", "dict.update(total, part)")],
        mistake_zh="用 dict.update 合并各切片的计数器，块的计数被覆盖而不是相加",
    ),
    Mutant(
        "parallel_pretokenize",
        "specials_not_removed_per_slice",
        "counts each slice without cutting it at the special tokens, so <|endoftext|> is pre-tokenized as text",
        [
            (
                "parts = pool.starmap(count_pretokens, slices)",
                "parts = pool.starmap(count_pretokens, [(s, ()) for s, _ in slices])",
            )
        ],
        mistake_zh="统计每个切片时不在 special token 处切开，<|endoftext|> 被当作文本预分词",
    ),
    Mutant(
        "incremental_bpe",
        "trusts_stale_heap_entries",
        "merges the popped pair without checking that its stored count is still current",
        [("if current != -negative_count:  # stale", "if current == 0:  # stale")],
        mistake_zh="合并弹出的词对，却不检查它存的计数是否仍是最新的",
    ),
    Mutant(
        "incremental_bpe",
        "old_pairs_not_subtracted",
        "adds the new pairs of a touched chunk but never subtracts its old ones",
        [
            (
                """            for old in zip(word, word[1:]):
                pair_counts[old] -= count
                if pair_counts[old] == 0:
                    del pair_counts[old]
""",
                "",
            )
        ],
        mistake_zh="给被改动的块加上新词对，却从不减去它的旧词对",
    ),
    Mutant(
        "incremental_bpe",
        "new_pairs_not_pushed",
        "counts the new pairs but never pushes them on the heap, so no merged token is merged again",
        [("heapq.heappush(heap, (-pair_counts[new], key(new), new))", "pass")],
        mistake_zh="统计了新词对却从不压入堆，合并出的 token 再也不会被合并",
    ),
    Mutant(
        "incremental_bpe",
        "greater_by_concatenation",
        "the greater rule compares the concatenated bytes a + b instead of the pair (a, b)",
        [("return self.pair > other.pair", "return self.pair[0] + self.pair[1] > other.pair[0] + other.pair[1]")],
        mistake_zh="“较大”规则比较拼接后的字节 a + b，而不是词对 (a, b)",
    ),
    Mutant(
        "incremental_bpe",
        "greater_rule_ignored",
        "treats 'lexicographic_greater' like the smaller rule",
        [("key = Descending", "key = lambda pair: pair  # noqa: E731")],
        mistake_zh="把 'lexicographic_greater' 当作“较小”规则处理",
    ),
    Mutant(
        "incremental_bpe",
        "every_chunk_every_merge",
        "no pair -> chunks index: every chunk is recounted for every merge (right merges, slow trainer's cost)",
        [("for index in where.pop(pair):", "for index in range(len(words)):")],
        mistake_zh="没有“词对 → 块”的索引：每次合并都重新统计所有块（合并结果对，但和慢速训练器一样慢）",
    ),
    Mutant(
        "incremental_bpe",
        "ignores_chunk_frequency",
        "counts each distinct chunk once when building the pair counts",
        [
            (
                "pair_counts[pair] = pair_counts.get(pair, 0) + counts[index]",
                "pair_counts[pair] = pair_counts.get(pair, 0) + 1",
            )
        ],
        mistake_zh="构建词对计数时每个不同的块只计一次",
    ),
    Mutant(
        "encode_iterable",
        "each_piece_on_its_own",
        "encodes every piece as it comes, so a newline and the next line's indentation become two chunks",
        [("cut = safe_cut(buffer)", "cut = len(buffer)")],
        mistake_zh="每来一段就编码一段，换行符和下一行的缩进成了两个块",
    ),
    Mutant(
        "encode_iterable",
        "joins_everything_first",
        "holds the whole input and encodes it at the end: right ids, no streaming",
        [("cut = safe_cut(buffer)", "cut = 0")],
        mistake_zh="攒下全部输入最后才编码：id 对，但不是流式的",
    ),
    Mutant(
        "encode_iterable",
        "keeps_back_one_chunk",
        "keeps back only the last pre-token chunk, so ' is emitted before the e of We've arrives and makes 've",
        [("return hold - len(chunks[-1]) - len(chunks[-2])", "return hold - len(chunks[-1])")],
        mistake_zh="只扣留最后一个预分词块，于是 We've 的 e 到达之前 ' 就被输出，拼成了 've",
    ),
    Mutant(
        "encode_iterable",
        "special_prefix_not_held",
        "does not keep back a tail that may still become a special token (<|endof + text|>)",
        [("if buffer[p] in first_characters and any(", "if False and any(")],
        mistake_zh="不扣留可能变成 special token 的尾部（<|endof + text|>）",
    ),
    Mutant(
        "encode_iterable",
        "cuts_through_a_special_token",
        "cuts where a longer special token could still start, inside a special token already matched",
        [("hold = match.start()", "pass")],
        mistake_zh="在更长的 special token 仍可能开始的地方切开，切进了已经匹配的 special token",
    ),
]
