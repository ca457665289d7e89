"""Realistic wrong versions of the p02.attention_mha_gqa solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # repeat_kv
    Mutant(
        "repeat_kv",
        "tiles_heads",
        "puts the group axis before the head axis: head h uses KV head h % H_kv (x.repeat order)",
        [
            (
                "x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)",
                "x[:, None, :, :, :].expand(B, n_rep, H_kv, S, D)",
            )
        ],
    ),
    Mutant(
        "repeat_kv",
        "repeats_positions",
        "inserts the copies after the sequence axis, then reshapes: positions get mixed into heads",
        [
            (
                "x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)",
                "x[:, :, :, None, :].expand(B, H_kv, S, n_rep, D)",
            )
        ],
    ),
    # attention
    Mutant(
        "attention",
        "top_left_causal",
        "uses SDPA's top-left causal triangle (tril without the S_k - S_q offset)",
        [("allowed.tril(diagonal=S_k - S_q)", "allowed.tril()")],
    ),
    Mutant(
        "attention",
        "causal_off_by_one",
        "a strict causal mask: a token cannot see itself",
        [("allowed.tril(diagonal=S_k - S_q)", "allowed.tril(diagonal=S_k - S_q - 1)")],
    ),
    Mutant(
        "attention",
        "scale_one_over_d",
        "scales the scores by 1/D instead of 1/sqrt(D)",
        [("/ math.sqrt(D)", "/ D")],
    ),
    Mutant(
        "attention",
        "tiled_grouping",
        "repeats the KV heads by tiling (torch .repeat): query head h uses KV head h % H_kv",
        [
            ("k = repeat_kv(k, H_q // H_kv)", "k = k.repeat(1, H_q // H_kv, 1, 1)"),
            ("v = repeat_kv(v, H_q // H_kv)", "v = v.repeat(1, H_q // H_kv, 1, 1)"),
        ],
    ),
    Mutant(
        "attention",
        "padding_on_queries",
        "broadcasts the padding mask over the query axis instead of the key axis",
        [("key_padding_mask[:, None, None, :]", "key_padding_mask[:, None, :, None]")],
    ),
    Mutant(
        "attention",
        "plain_softmax_nan_rows",
        "masked_fill(-inf) followed by torch.softmax: rows with no visible key become NaN",
        [
            (
                "probs = weights / denominator",
                "probs = torch.softmax(scores, dim=-1)",
            )
        ],
    ),
    Mutant(
        "attention",
        "finite_mask_value",
        "masks with finfo.min instead of -inf: an all-masked row averages the padding uniformly",
        [
            (
                'scores.masked_fill(~allowed, float("-inf"))',
                "scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)",
            )
        ],
    ),
    Mutant(
        "attention",
        "softmax_in_input_dtype",
        "computes scores and softmax in fp16/bf16 instead of float32",
        [("compute_dtype = torch.promote_types(q.dtype, torch.float32)", "compute_dtype = q.dtype")],
    ),
    # KVCache
    Mutant(
        "KVCache",
        "returns_only_new",
        "stores the new chunk but returns only the new keys and values",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return k, v",
            )
        ],
    ),
    Mutant(
        "KVCache",
        "counts_calls",
        "length counts updates instead of positions",
        [("self.length = int(new_lengths.max())", "self.length += 1")],
    ),
    Mutant(
        "KVCache",
        "overwrites",
        "writes every chunk at position 0 instead of after the cached positions",
        [("start, count = int(self.lengths[row]), int(num_new[row])", "start, count = 0, int(num_new[row])")],
    ),
    Mutant(
        "KVCache",
        "writes_at_common_length",
        "writes every row at the batch's longest length instead of its own lengths[b]",
        [("start, count = int(self.lengths[row]), int(num_new[row])", "start, count = self.length, int(num_new[row])")],
    ),
    Mutant(
        "KVCache",
        "counts_padding",
        "advances every row by S_new, the padding columns included, instead of num_new[b]",
        [("new_lengths = self.lengths + num_new", "new_lengths = self.lengths + S_new")],
    ),
    Mutant(
        "KVCache",
        "returns_copies",
        "makes the prefix contiguous for attention: a full copy of the cache at every step",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return self.keys[:, :, : self.length].contiguous(), self.values[:, :, : self.length].contiguous()",
            )
        ],
    ),
    Mutant(
        "KVCache",
        "returns_whole_buffer",
        "returns the whole max_len buffer instead of the valid prefix",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return self.keys, self.values",
            )
        ],
    ),
    Mutant(
        "KVCache",
        "bound_checked_while_writing",
        "checks max_len row by row inside the write loop: the rows before the full one are already written",
        [
            ("if bool((new_lengths > self.max_len).any()):", "if False:"),
            (
                "start, count = int(self.lengths[row]), int(num_new[row])",
                "start, count = int(self.lengths[row]), int(num_new[row])\n"
                "            if start + count > self.max_len:\n"
                '                raise ValueError(f"row {row} is full")',
            ),
        ],
    ),
    Mutant(
        "KVCache",
        "bound_off_by_one",
        "refuses a write that fills a row exactly (>= max_len instead of > max_len)",
        [("(new_lengths > self.max_len).any()", "(new_lengths >= self.max_len).any()")],
    ),
    Mutant(
        "KVCache",
        "key_mask_inclusive",
        "marks column lengths[b] as written too (<= instead of <)",
        [("columns[None, :] < self.lengths[:, None]", "columns[None, :] <= self.lengths[:, None]")],
    ),
    Mutant(
        "attention",
        "calls_the_builtin",
        "F.scaled_dot_product_attention with the mask, then zeros for empty rows",
        [
            (
                'scores = scores.masked_fill(~allowed, float("-inf"))',
                "out = F.scaled_dot_product_attention(q.to(compute_dtype), k, v, attn_mask=allowed)\n"
                "    return torch.where(allowed.any(dim=-1, keepdim=True), out, 0.0).to(q.dtype)",
            )
        ],
    ),
    Mutant(
        "repeat_kv",
        "calls_the_builtin",
        "torch.repeat_interleave, the reference",
        [("B, H_kv, S, D = x.shape", "return x.repeat_interleave(n_rep, dim=1)")],
    ),
]
