"""Realistic wrong versions of the p02.bpe_tokenizer solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""

MUTANTS = [
    Mutant(
        "pretokenize",
        "word_class_for_letters",
        r"uses \w+ for letters, so digits and underscores stick to words",
        [(PATTERN, r"""'(?:[sdmt]|ll|ve|re)| ?\w+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")],
    ),
    Mutant(
        "pretokenize",
        "no_trailing_space_lookahead",
        r"drops \s+(?!\S), so a run of spaces swallows the space that should start the next word",
        [(PATTERN, r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+""")],
    ),
    Mutant(
        "pretokenize",
        "contractions_last",
        "puts the contractions after the symbol class, so 's becomes ' and s",
        [(PATTERN, r"""| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|'(?:[sdmt]|ll|ve|re)|\s+(?!\S)|\s+"""[1:])],
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
    ),
    Mutant(
        "train_bpe",
        "counts_without_frequency",
        "counts each distinct chunk once, ignoring how often it occurs",
        [("pair_counts[pair] += count", "pair_counts[pair] += 1")],
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
    ),
    Mutant(
        "train_bpe",
        "no_pretokenization",
        "trains on whole documents, so merges cross word boundaries",
        [("for piece in pieces for chunk in pretokenize(piece)", "for piece in pieces for chunk in [piece] if chunk")],
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
    ),
    Mutant(
        "bpe_tokenizer",
        "shortest_special_first",
        "tries the special tokens in the given order, so a shorter one can win over a longer one",
        [("longest_first = sorted(special_tokens, key=len, reverse=True)", "longest_first = list(special_tokens)")],
    ),
    Mutant(
        "bpe_tokenizer",
        "specials_not_split_out",
        "pre-tokenizes the special tokens like any other text",
        [("pieces = self.special_split.split(text) if self.special_split else [text]", "pieces = [text]")],
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
    ),
    Mutant(
        "parallel_pretokenize",
        "keeps_a_cut_twice",
        "keeps a cut that two guesses share, so the boundaries are not strictly increasing (an empty slice)",
        [("if start > cuts[-1]:", "if start >= cuts[-1]:")],
    ),
    Mutant(
        "parallel_pretokenize",
        "dict_update_overwrites_counts",
        "merges the per-slice counters with dict.update, which overwrites a chunk's count instead of adding",
        [("total.update(part)  # Counter.update adds; dict.update would overwrite", "dict.update(total, part)")],
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
    ),
    Mutant(
        "incremental_bpe",
        "trusts_stale_heap_entries",
        "merges the popped pair without checking that its stored count is still current",
        [("if current != -negative_count:  # stale", "if current == 0:  # stale")],
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
    ),
    Mutant(
        "incremental_bpe",
        "new_pairs_not_pushed",
        "counts the new pairs but never pushes them on the heap, so no merged token is merged again",
        [("heapq.heappush(heap, (-pair_counts[new], key(new), new))", "pass")],
    ),
    Mutant(
        "incremental_bpe",
        "greater_by_concatenation",
        "the greater rule compares the concatenated bytes a + b instead of the pair (a, b)",
        [("return self.pair > other.pair", "return self.pair[0] + self.pair[1] > other.pair[0] + other.pair[1]")],
    ),
    Mutant(
        "incremental_bpe",
        "greater_rule_ignored",
        "treats 'lexicographic_greater' like the smaller rule",
        [("key = Descending", "key = lambda pair: pair  # noqa: E731")],
    ),
    Mutant(
        "incremental_bpe",
        "every_chunk_every_merge",
        "no pair -> chunks index: every chunk is recounted for every merge (right merges, slow trainer's cost)",
        [("for index in where.pop(pair):", "for index in range(len(words)):")],
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
    ),
    Mutant(
        "encode_iterable",
        "each_piece_on_its_own",
        "encodes every piece as it comes, so a newline and the next line's indentation become two chunks",
        [("cut = safe_cut(buffer)", "cut = len(buffer)")],
    ),
    Mutant(
        "encode_iterable",
        "joins_everything_first",
        "holds the whole input and encodes it at the end: right ids, no streaming",
        [("cut = safe_cut(buffer)", "cut = 0")],
    ),
    Mutant(
        "encode_iterable",
        "keeps_back_one_chunk",
        "keeps back only the last pre-token chunk, so ' is emitted before the e of We've arrives and makes 've",
        [("return hold - len(chunks[-1]) - len(chunks[-2])", "return hold - len(chunks[-1])")],
    ),
    Mutant(
        "encode_iterable",
        "special_prefix_not_held",
        "does not keep back a tail that may still become a special token (<|endof + text|>)",
        [("if buffer[p] in first_characters and any(", "if False and any(")],
    ),
    Mutant(
        "encode_iterable",
        "cuts_through_a_special_token",
        "cuts where a longer special token could still start, inside a special token already matched",
        [("hold = match.start()", "pass")],
    ),
]
