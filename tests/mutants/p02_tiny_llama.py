"""Realistic wrong versions of the p02.tiny_llama solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "TinyLlama",
        "no_final_norm",
        "feeds the last block's output straight to the head",
        [("return self.lm_head(self.norm(h))", "return self.lm_head(h)")],
        mistake_zh="最后一个块的输出直接送进输出头",
    ),
    Mutant(
        "TinyLlama",
        "embeddings_scaled_by_sqrt_d",
        "multiplies the embeddings by sqrt(d), Gemma's convention",
        [("h = self.embed_tokens(input_ids)", "h = self.embed_tokens(input_ids) * self.args.dim**0.5")],
        mistake_zh="嵌入乘以 √d（Gemma 的约定）",
    ),
    Mutant(
        "TinyLlama",
        "tied_by_copy",
        "ties the head with a copy of the embedding instead of the same Parameter",
        [
            (
                "self.lm_head.weight = self.embed_tokens.weight  # one Parameter, two uses",
                "self.lm_head.weight = nn.Parameter(self.embed_tokens.weight.detach().clone())",
            )
        ],
        mistake_zh="用嵌入的副本而不是同一个 Parameter 绑定输出头",
    ),
    Mutant(
        "TinyLlama",
        "positions_restart_every_call",
        "default positions 0 .. T-1 on every call: right for the prefill, wrong for every decoding step",
        [
            (
                "position_ids = (key_padding_mask.long().cumsum(-1) - 1).clamp_min(0)[:, -T:]",
                "position_ids = torch.arange(T).expand(B, T)",
            )
        ],
        mistake_zh="每次调用默认位置都是 0 .. T-1：预填充对，每个解码步都错",
    ),
    Mutant(
        "TinyLlama",
        "padding_mask_not_passed",
        "runs the blocks without the padding mask, so real tokens attend to padding",
        [("h = layer(h, cos, sin, position_ids, key_padding_mask,", "h = layer(h, cos, sin, position_ids, None,")],
        mistake_zh="运行各块时没有传 padding 掩码，真实 token 关注到了 padding",
    ),
    Mutant(
        "TinyLlama",
        "one_cache_for_all_layers",
        "hands the first layer's cache to every layer",
        [("None if caches is None else caches[i])", "None if caches is None else caches[0])")],
        mistake_zh="把第一层的缓存交给了每一层",
    ),
    Mutant(
        "TinyLlama",
        "positions_of_the_first_columns",
        "takes the first T columns of the cumulative sum: every decoding step sits at the prompt's first position",
        [
            (
                "(key_padding_mask.long().cumsum(-1) - 1).clamp_min(0)[:, -T:]",
                "(key_padding_mask.long().cumsum(-1) - 1).clamp_min(0)[:, :T]",
            )
        ],
        mistake_zh="取累计和的前 T 列：每个解码步都落在提示的第一个位置",
    ),
    Mutant(
        "convert_meta_checkpoint",
        "no_qk_permutation",
        "copies wq and wk as they are, in Meta's interleaved layout",
        [
            (
                "return weight.view(n_heads, rows // n_heads // 2, 2, d_in).transpose(1, 2).reshape(rows, d_in)",
                "return weight",
            )
        ],
        mistake_zh="wq 和 wk 原样复制，仍是 Meta 的交错布局",
    ),
    Mutant(
        "convert_meta_checkpoint",
        "inverse_permutation",
        "applies the Hugging Face -> Meta permutation (the same only when head_dim = 4)",
        [
            (
                "weight.view(n_heads, rows // n_heads // 2, 2, d_in)",
                "weight.view(n_heads, 2, rows // n_heads // 2, d_in)",
            )
        ],
        mistake_zh="用了 Hugging Face -> Meta 的置换（只有 head_dim = 4 时才相同）",
    ),
    Mutant(
        "convert_meta_checkpoint",
        "wk_permuted_with_query_heads",
        "permutes wk as if it had n_heads heads (GQA has n_kv_heads)",
        [
            (
                'to_rotate_half(state_dict[meta + "attention.wk.weight"], args.n_kv_heads)',
                'to_rotate_half(state_dict[meta + "attention.wk.weight"], args.n_heads)',
            )
        ],
        mistake_zh="按 n_heads 个头置换 wk（GQA 只有 n_kv_heads 个）",
    ),
    Mutant(
        "convert_meta_checkpoint",
        "w1_w3_swapped",
        "maps w1 to up_proj and w3 to gate_proj",
        [
            ('state_dict[meta + "feed_forward.w1.weight"]', 'state_dict[meta + "feed_forward.w3.weight"]'),
            (
                'out[ours + "mlp.up_proj.weight"] = state_dict[meta + "feed_forward.w3.weight"]',
                'out[ours + "mlp.up_proj.weight"] = state_dict[meta + "feed_forward.w1.weight"]',
            ),
        ],
        mistake_zh="把 w1 映射到 up_proj，w3 映射到 gate_proj",
    ),
    Mutant(
        "generate_greedy",
        "recomputes_without_cache",
        "runs the whole sequence through the model at every step (same tokens, O(S^2) work)",
        [
            (
                "logits = model(next_token, attention_mask=mask, caches=caches)",
                "logits = model(tokens, attention_mask=mask)",
            )
        ],
        mistake_zh="每一步都把整个序列送进模型（token 相同，工作量 O(S²)）",
    ),
    Mutant(
        "generate_greedy",
        "first_column_logits",
        "picks the next token from the first column's logits",
        [
            (
                "next_token = logits[:, -1].argmax(dim=-1, keepdim=True)",
                "next_token = logits[:, 0].argmax(dim=-1, keepdim=True)",
            )
        ],
        mistake_zh="从第一列的 logits 选下一个 token",
    ),
    Mutant(
        "generate_greedy",
        "prefill_without_mask",
        "prefills without the attention mask, so padding is attended to and shifts positions",
        [
            (
                "logits = model(input_ids, attention_mask=mask, caches=caches)",
                "logits = model(input_ids, caches=caches)",
            )
        ],
        mistake_zh="预填充时不带注意力掩码，padding 被关注并且让位置错位",
    ),
    Mutant(
        "generate_greedy",
        "decode_steps_without_mask",
        "passes the mask at the prefill only: decoding steps see the cached padding and take positions past it",
        [
            (
                "logits = model(next_token, attention_mask=mask, caches=caches)",
                "logits = model(next_token, caches=caches)",
            )
        ],
        mistake_zh="只在预填充时传掩码：解码步看到了缓存里的 padding，位置也越过了它",
    ),
]
