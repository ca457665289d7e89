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
]
