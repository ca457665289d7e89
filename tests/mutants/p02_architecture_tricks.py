"""Realistic wrong versions of the p02.architecture_tricks solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # qk_norm
    Mutant(
        "qk_norm",
        "norm_over_whole_projection",
        "normalises the whole (H * D) projection at once (OLMo-2's variant) where per-head QK-norm is required",
        [
            (
                "rms_norm(q_heads, q_weight, eps)",
                "rms_norm(q, q_weight.repeat(q.shape[-1] // D), eps).view(B, T, -1, D)",
            ),
            (
                "rms_norm(k_heads, k_weight, eps)",
                "rms_norm(k, k_weight.repeat(k.shape[-1] // D), eps).view(B, T, -1, D)",
            ),
        ],
        mistake_zh="对整个 (H * D) 投影一起归一化（OLMo-2 的变体），而题目要求逐头的 QK-norm",
    ),
    Mutant(
        "qk_norm",
        "heads_viewed_before_time",
        "views the projection as (B, H, T, D) directly: right shape, heads scrambled across time steps",
        [
            ("q_heads = q.view(B, T, -1, D)", "q_heads = q.view(B, -1, T, D).transpose(1, 2)"),
            ("k_heads = k.view(B, T, -1, D)", "k_heads = k.view(B, -1, T, D).transpose(1, 2)"),
        ],
        mistake_zh="直接把投影 view 成 (B, H, T, D)：形状对，但头和时间步错位了",
    ),
    Mutant(
        "qk_norm",
        "q_gain_for_k",
        "normalises k with q's gain (a copy-paste slip)",
        [("rms_norm(k_heads, k_weight, eps)", "rms_norm(k_heads, q_weight, eps)")],
        mistake_zh="用 q 的增益归一化 k（复制粘贴失误）",
    ),
    # sliding_window: the mask
    Mutant(
        "sliding_window",
        "top_left_alignment",
        "puts query i at position i (top-left), wrong whenever q_len < kv_len",
        [("torch.arange(kv_len - q_len, kv_len)", "torch.arange(q_len)")],
        mistake_zh="把 query i 放在位置 i（左上对齐），q_len < kv_len 时就错",
    ),
    Mutant(
        "sliding_window",
        "window_off_by_one",
        "distance <= window: every query sees window + 1 keys",
        [("& (distance < window)", "& (distance <= window)")],
        mistake_zh="用 distance <= window：每个 query 看到 window + 1 个 key",
    ),
    Mutant(
        "sliding_window",
        "window_without_causality",
        "a symmetric band |i - j| < window: future keys inside the window leak in",
        [
            ("allowed = distance >= 0", "allowed = distance.abs() >= 0"),
            ("allowed & (distance < window)", "allowed & (distance.abs() < window)"),
        ],
        mistake_zh="用对称的带 |i - j| < window：窗口内未来的 key 漏了进来",
    ),
    # sliding_window: the rolling buffer cache
    Mutant(
        "sliding_window",
        "ring_read_in_storage_order",
        "reads slots 0 .. P-1 as they are stored: right until the ring wraps, then the mask hides the wrong key",
        [("slots = past % W", "slots = torch.arange(past.numel())")],
        mistake_zh="按存储顺序读取槽位 0 .. P-1：环形缓存回绕之前都对，之后掩码遮住的是错的 key",
    ),
    Mutant(
        "sliding_window",
        "write_before_read",
        "writes the new chunk into the ring before gathering the past: a chunk's first queries lose keys in their window",
        [
            (
                "past = torch.arange(max(0, self.seen - W), self.seen)",
                "kept = torch.arange(self.seen, self.seen + T)[-W:]\n"
                "        self.keys[:, :, kept % W] = k[:, :, T - len(kept):]\n"
                "        self.values[:, :, kept % W] = v[:, :, T - len(kept):]\n"
                "        past = torch.arange(max(0, self.seen - W), self.seen)",
            ),
            (
                "kept = torch.arange(self.seen, self.seen + T)[-W:]                # the last min(T, W) new positions\n"
                "        self.keys[:, :, kept % W] = k[:, :, T - len(kept):]\n"
                "        self.values[:, :, kept % W] = v[:, :, T - len(kept):]\n"
                "        self.seen += T",
                "self.seen += T",
            ),
        ],
        mistake_zh="先把新块写进环形缓存再收集过去的 key：块内靠前的 query 丢了窗口里的 key",
    ),
    Mutant(
        "sliding_window",
        "keeps_first_positions_of_long_chunk",
        "writes the first W positions of a chunk longer than the window instead of the last W",
        [
            ("torch.arange(self.seen, self.seen + T)[-W:]", "torch.arange(self.seen, self.seen + T)[:W]"),
            ("self.keys[:, :, kept % W] = k[:, :, T - len(kept):]", "self.keys[:, :, kept % W] = k[:, :, :len(kept)]"),
            (
                "self.values[:, :, kept % W] = v[:, :, T - len(kept):]",
                "self.values[:, :, kept % W] = v[:, :, :len(kept)]",
            ),
        ],
        mistake_zh="块比窗口长时写入前 W 个位置，而不是最后 W 个",
    ),
    Mutant(
        "sliding_window",
        "seen_advances_by_one",
        "counts one position per update, whatever the chunk length",
        [("self.seen += T", "self.seen += 1")],
        mistake_zh="不管块多长，每次更新只计一个位置",
    ),
    Mutant(
        "sliding_window",
        "cache_mask_without_window",
        "masks the gathered keys causally only: a long prompt's queries see further back than the window",
        [("mask = sliding_window_mask(T, keys.shape[2], W)", "mask = sliding_window_mask(T, keys.shape[2])")],
        mistake_zh="收集来的 key 只做因果屏蔽：长提示的 query 看得比窗口更远",
    ),
    # parallel_and_tied: the parallel block
    Mutant(
        "parallel_and_tied",
        "sequential_block",
        "the Llama wiring: the MLP reads norm(x + attention(norm(x)))",
        [("return x + attention(h) + mlp(h)", "r = x + attention(h); return r + mlp(norm(r))")],
        mistake_zh="按 Llama 的方式串行连接：MLP 读取 norm(x + attention(norm(x)))",
    ),
    Mutant(
        "parallel_and_tied",
        "mlp_reads_raw_x",
        "feeds the un-normalised x to the MLP",
        [("return x + attention(h) + mlp(h)", "return x + attention(h) + mlp(x)")],
        mistake_zh="把未归一化的 x 喂给 MLP",
    ),
    Mutant(
        "parallel_and_tied",
        "no_residual",
        "returns attention(h) + mlp(h) without the residual x",
        [("return x + attention(h) + mlp(h)", "return attention(h) + mlp(h)")],
        mistake_zh="返回 attention(h) + mlp(h)，没有残差 x",
    ),
    # parallel_and_tied: tied embeddings
    Mutant(
        "parallel_and_tied",
        "copied_not_tied",
        "copies the embedding weight into the head: equal at initialisation, two parameters afterwards",
        [
            (
                "self.lm_head.weight = self.embed_tokens.weight",
                "self.lm_head.weight = nn.Parameter(self.embed_tokens.weight.detach().clone())",
            )
        ],
        mistake_zh="把嵌入权重复制到输出头：初始化时相等，之后成了两个参数",
    ),
    Mutant(
        "parallel_and_tied",
        "scale_on_logits_too",
        "multiplies the logits by embed_scale as well",
        [("return self.lm_head(hidden)", "return self.lm_head(hidden) * self.embed_scale")],
        mistake_zh="logits 也乘了 embed_scale",
    ),
    Mutant(
        "parallel_and_tied",
        "scale_ignored",
        "forgets Gemma's embedding scale",
        [("self.embed_tokens(input_ids) * self.embed_scale", "self.embed_tokens(input_ids)")],
        mistake_zh="忘了 Gemma 的嵌入缩放",
    ),
    # softcap_attention: soft_cap
    Mutant(
        "softcap_attention",
        "tanh_without_division",
        "cap * tanh(x): saturates at |x| of about 2 whatever the cap",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "cap * torch.tanh(x.to(compute_dtype))")],
        mistake_zh="cap * tanh(x)：不管 cap 多大，|x| 约为 2 时就饱和",
    ),
    Mutant(
        "softcap_attention",
        "hard_clamp",
        "clamps to [-cap, cap]: the same range, but identity inside and zero gradient outside",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "x.to(compute_dtype).clamp(-cap, cap)")],
        mistake_zh="截断到 [-cap, cap]：范围相同，但区间内是恒等、区间外梯度为零",
    ),
    Mutant(
        "softcap_attention",
        "forgets_to_multiply",
        "tanh(x / cap): squashes every logit into (-1, 1)",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "torch.tanh(x.to(compute_dtype) / cap)")],
        mistake_zh="tanh(x / cap)：把每个 logit 都压进 (-1, 1)",
    ),
    # softcap_attention: the attention
    Mutant(
        "softcap_attention",
        "mask_before_cap",
        "masks with -inf before the cap: masked keys come out at -cap and get weight",
        [
            (
                'if softcap is not None:\n        scores = soft_cap(scores, softcap)\n    if mask is not None:\n        scores = scores.masked_fill(~mask, float("-inf"))',
                'if mask is not None:\n        scores = scores.masked_fill(~mask, float("-inf"))\n    if softcap is not None:\n        scores = soft_cap(scores, softcap)',
            )
        ],
        mistake_zh="先用 -inf 屏蔽再 cap：被屏蔽的 key 变成 -cap 而得到权重",
    ),
    Mutant(
        "softcap_attention",
        "scale_after_cap",
        "caps the unscaled q k^T and scales afterwards",
        [
            ("@ k.to(compute_dtype).transpose(-2, -1)) * scale", "@ k.to(compute_dtype).transpose(-2, -1))"),
            ("scores = soft_cap(scores, softcap)", "scores = soft_cap(scores, softcap) * scale"),
        ],
        mistake_zh="对未缩放的 q k^T 做 cap，之后才缩放",
    ),
    Mutant(
        "softcap_attention",
        "default_scale_one_over_d",
        "defaults the scale to 1 / D instead of 1 / sqrt(D)",
        [("q.shape[-1] ** -0.5", "q.shape[-1] ** -1.0")],
        mistake_zh="缩放默认取 1 / D 而不是 1 / √D",
    ),
    Mutant(
        "softcap_attention",
        "calls_the_builtin",
        "plain attention through F.scaled_dot_product_attention when there is no cap",
        [
            (
                "scale = q.shape[-1] ** -0.5 if scale is None else scale",
                "if softcap is None:\n"
                "        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)\n"
                "    scale = q.shape[-1] ** -0.5 if scale is None else scale",
            )
        ],
        mistake_zh="没有 cap 时直接用 F.scaled_dot_product_attention 做普通注意力",
    ),
]
