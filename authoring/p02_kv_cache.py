"""Source of 02_PyTorch_Algorithms/29_KV_Cache.ipynb (build with `python -m llm_algo build p02.kv_cache`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.kv_cache",
        path="02_PyTorch_Algorithms/29_KV_Cache.ipynb",
        title_en="A static KV cache: prefill, decode and what each costs",
        title_zh="静态 KV 缓存：预填充、解码及其开销",
        difficulty="medium",
        device="cpu",
        minutes=90,
        prerequisites=["p02.tiny_llama", "p01.kv_cache_math", "p01.roofline"],
    )
    lesson.title(
        intro=r"""
        **本节要点**

        - **问题**：自回归解码每一步只新增一个 token，但注意力需要之前所有 token 的 K、V；不缓存就要每步重算整段序列，
          代价随长度平方增长。KV 缓存（KV cache）把每层的 K、V 存下来，一步只算新 token。
        - **静态缓存**：按 `(B, H_kv, S_max, D)` 预先分配，不再每步 `torch.cat`（那会每步复制整个缓存）；
          每条序列有自己的长度 `lengths[b]`，新 token 写在 `lengths[b]` 处——这是 vLLM、HF `StaticCache`、CUDA Graph 的前提。
        - **掩码**：位置 $j$ 的键对查询可见，当且仅当 $j < \text{length}_b$ 且 $j \le \text{pos}_q$；缓存里没写过的槽位可能是任意值（甚至 NaN），要用选择而不是乘法屏蔽。
        - **预填充 vs 解码**：预填充（prefill）一次处理 $T$ 个 token，是计算密集型；解码（decode）每步读一遍全部权重和整个缓存只为算 $B$ 个 token，
          是访存密集型：算术强度约为 $B$ FLOP/字节量级，远低于 H200 的约 200。
        {易错点}

        Every token a Llama generates needs the keys and values of every earlier token, in every layer. Without a
        cache, step $n$ recomputes all $n$ tokens' projections: generating 1,000 tokens after a 1,000-token prompt
        costs about $\sum_{n=1000}^{2000} 2Nn \approx 3\times10^{6}\,N$ FLOPs instead of $2000 \cdot 2N$ — about
        750 times more for Llama-3-8B's $N = 8\times10^9$. The cache trades that compute for memory: Llama-3-8B keeps
        $2 \cdot 32 \text{ layers} \cdot 8 \text{ KV heads} \cdot 128 \cdot 2 \text{ bytes} = 128$ KiB per token in
        bf16 (lesson `p01.kv_cache_math`), so 16 GB for a batch of 16 sequences of 8k tokens.

        The `KVCache` you wrote in `p02.attention_mha_gqa` already preallocates and keeps one length per sequence,
        but the tiny Llama of `p02.tiny_llama` still runs it as one block of left-padded rows of equal length, and it
        returns a prefix whose width changes at every step. This lesson builds the cache an engine runs: fixed
        full-size buffers that the attention reads with a mask (one shape for every step, what `torch.compile` and
        CUDA graphs need, as in Hugging Face's `StaticCache`), a causal mask per row for chunks on rows of different
        lengths, and rows that are freed and reused (vLLM's paged blocks and TensorRT-LLM's KV pools do the same
        with blocks). Each sequence has its own length and writes its next token at its own slot.

        **You will implement** a static, preallocated cache with per-sequence lengths (`StaticKVCache`), attention of
        new queries over it (`cached_attention`), greedy generation for prompts of different lengths with one prefill
        and one-token decode steps (`generate_static`), and the FLOPs and bytes of a prefill or decode step
        (`step_cost`). **Graded against** a plain list-of-tensors cache under random workloads; SDPA in float64 over
        each sequence's own keys; Hugging Face `LlamaForCausalLM` (tiny, local) decoding each prompt alone by full
        recomputation and by `generate(use_cache=True)`; and `torch.utils.flop_counter.FlopCounterMode` counting a
        Hugging Face prefill and decode step with its own `DynamicCache`.
    """
    )
    lesson.md(r"""
        ## 1. The static cache, with shapes

        One cache per layer holds

        | tensor | shape | meaning |
        | --- | --- | --- |
        | `keys`, `values` | `(B, H_kv, S_max, D)` | allocated once; row $b$'s token at position $p$ lives at column $p$ |
        | `lengths` | `(B,)` int64 | how many positions of row $b$ are written |

        A forward pass brings `k, v: (B, H_kv, T, D)` for $T$ new columns, of which row $b$'s first `num_new[b]` are
        real (prompts of different lengths are **right**-padded for the prefill; a decode step has `num_new = 1`
        everywhere). Row $b$'s real columns are written at `lengths[b] ... lengths[b] + num_new[b] - 1`, and then
        `lengths += num_new`. No memory is allocated and nothing is copied but the new columns.

        **Positions are the cache columns.** Because row $b$'s token at position $p$ sits in column $p$, RoPE uses
        `position_ids[b, t] = lengths[b] + t` (taken *before* the update) and causality is a comparison of columns:
        query at position $p$ may see key column $j$ iff

        $$
        j < \text{lengths}_b \ (\text{after the update}) \quad\text{and}\quad j \le p .
        $$

        For the padding queries of a right-padded prefill the same rule gives some harmless output that nobody
        reads. The columns past `lengths[b]` hold whatever was there — zeros, an older sequence's keys after a slot
        is reused, NaN on uninitialised memory — so they must be *selected* away with `torch.where` or a `-inf`
        score, never multiplied by 0 ($0 \cdot \text{NaN} = \text{NaN}$).

        ## 2. Attention over the cache

        For `q: (B, H_q, T, D)` and the cache's `keys, values: (B, H_kv, S_max, D)` with $G = H_q / H_{kv}$ query heads
        per KV head (GQA), the scores are `(B, H_q, T, S_max)`: $s = q k^\top / \sqrt{D}$, masked by the rule above,
        softmax over the last axis, times `values`. Computing all $S_{\max}$ columns and masking most of them is what
        a simple static-cache implementation does (Hugging Face's `StaticCache` with SDPA); decode kernels such as
        FlashInfer's or vLLM's PagedAttention read only the first `lengths[b]` columns of each row.

        ## 3. What a step costs: prefill vs decode

        Count the matrix multiplies (the rest is a few percent). With $L$ layers, width $d$, $H_q$, $H_{kv}$ heads of
        size $D$, FFN width $F$, vocabulary $V$, a step over $B$ rows of $T$ new tokens with $P$ cached before it
        ($S = P + T$):

        $$
        \text{FLOPs} = \underbrace{2\,B\,T\,\big(L\,W_{\text{layer}} + d\,V\big)}_{\text{every weight, once per token}}
        + \underbrace{L \cdot 2 \cdot 2\,B\,H_q\,T\,S\,D}_{q k^\top \text{ and } p\, v},
        \qquad W_{\text{layer}} = d H_q D + 2 d H_{kv} D + H_q D\, d + 3 d F .
        $$

        The attention term counts all $T \times S$ scores, as an eager implementation computes them (causal masking
        wastes about half of them during a prefill; FlashAttention skips those blocks).

        Bytes that must come from memory at least once: every matmul weight (the embedding table is only gathered,
        $B T$ rows, and is left out), and the K and V of all $S$ positions of every layer:

        $$
        \text{bytes} = \beta\,\big(L\,W_{\text{layer}} + d\,V\big) + \beta \cdot 2\,L\,B\,H_{kv}\,S\,D ,
        $$

        with $\beta$ bytes per element (2 for bf16). The ratio FLOPs/bytes is the **arithmetic intensity**. A decode
        step ($T = 1$) does $\approx 2B$ FLOPs per weight read, so at $B = 1$ it is about 1 FLOP/byte; an H200 needs
        about $989 \cdot 10^{12} / 4.8 \cdot 10^{12} \approx 206$ FLOP/byte (dense bf16 peak over HBM bandwidth, NVIDIA's
        H200 datasheet) before compute, not memory, limits it. A 2,000-token prefill is far past that point. This is
        why engines batch many sequences' decode steps together, and why the KV term — which grows with $B \cdot S$
        and does not shrink per sequence with batching — ends up dominating long-context decoding.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F


        def rope_tables(max_position: int, head_dim: int, theta: float = 10000.0):
            # float32 (max_position, head_dim) cos and sin for rotate-half RoPE (as in p02.rope)
            inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            return angles.cos(), angles.sin()


        def apply_rope(x, cos, sin, position_ids):
            # x (B, H, T, D) rotated at position_ids (B, T), computed in float32
            cos, sin = cos[position_ids][:, None], sin[position_ids][:, None]  # (B, 1, T, D)
            half = x.shape[-1] // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            return (x.float() * cos + rotated.float() * sin).to(x.dtype)


        def llama_layers(model):
            # (embed_tokens, layers, norm, lm_head) of your TinyLlama or of transformers' LlamaForCausalLM
            core = getattr(model, "model", model)
            return core.embed_tokens, core.layers, core.norm, model.lm_head


        def llama_step(model, input_ids, position_ids, caches, num_new, rope_theta=10000.0):
            # One forward pass of a Llama over T new columns per row, through your StaticKVCache (one per layer) and
            # your cached_attention. input_ids, position_ids (B, T) int64; num_new (B,) int64. returns (B, T, V).
            embed_tokens, layers, norm, lm_head = llama_layers(model)
            B, T = input_ids.shape
            h = embed_tokens(input_ids)                                                       # (B, T, d)
            for layer, cache in zip(layers, caches, strict=True):
                attn = layer.self_attn
                D = attn.head_dim
                cos, sin = rope_tables(int(position_ids.max()) + 1, D, rope_theta)
                x = layer.input_layernorm(h)
                q = attn.q_proj(x).view(B, T, -1, D).transpose(1, 2)                          # (B, H_q, T, D)
                k = attn.k_proj(x).view(B, T, -1, D).transpose(1, 2)                          # (B, H_kv, T, D)
                v = attn.v_proj(x).view(B, T, -1, D).transpose(1, 2)
                q, k = apply_rope(q, cos, sin, position_ids), apply_rope(k, cos, sin, position_ids)
                keys, values, key_mask = cache.update(k, v, num_new)                          # (B, H_kv, S_max, D)
                out = cached_attention(q, keys, values, key_mask, position_ids)                # (B, H_q, T, D)
                h = h + attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return lm_head(norm(h))                                                           # (B, T, V)
    """)
    lesson.md(r"""
        The setup gives `llama_step`: one forward pass of a Llama — your `TinyLlama` from `p02.tiny_llama` or
        Hugging Face's `LlamaForCausalLM`, which use the same module names — that stores K and V through **your**
        `StaticKVCache` and attends through **your** `cached_attention`. Only the cache and the attention change
        between a cached and an uncached model; the weights are the same.

        ## 4. Exercise `StaticKVCache`

        Allocate the buffers once in `__init__` (refuse sizes < 1 with a `ValueError`). `update` writes each row's real
        columns at its own length, advances the lengths and returns the buffers themselves (not copies) with the
        key mask `(B, S_max)` bool, `True` on written columns. Refuse, with a `ValueError` that says which row and
        why: `k`/`v` whose batch, heads or head size do not match the cache, `num_new` outside `[0, T]`, and a write
        past `S_max` (before writing anything). `sequence(row)` returns that row's written keys and values
        `(H_kv, length, D)`; `reset(row)` frees the row for a new sequence (continuous batching reuses slots). Both
        refuse a row the cache does not hold.
    """)
    lesson.exercise(
        "StaticKVCache",
        r'''
        class StaticKVCache:
            """A preallocated KV cache of one attention layer with one length per sequence."""

            def __init__(self, batch_size: int, num_kv_heads: int, max_length: int, head_dim: int,
                         dtype: torch.dtype = torch.float32, device="cpu"):
                # TODO: refuse sizes < 1; keys and values (B, H_kv, S_max, D) allocated once; lengths (B,) int64 zeros
                ### BEGIN SOLUTION
                sizes = dict(batch_size=batch_size, num_kv_heads=num_kv_heads, max_length=max_length, head_dim=head_dim)
                for name, value in sizes.items():
                    if not isinstance(value, int) or value < 1:
                        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
                shape = (batch_size, num_kv_heads, max_length, head_dim)
                self.keys = torch.zeros(shape, dtype=dtype, device=device)
                self.values = torch.zeros(shape, dtype=dtype, device=device)
                self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
                ### END SOLUTION

            def update(self, k: torch.Tensor, v: torch.Tensor, num_new: torch.Tensor):
                """k, v: (B, H_kv, T, D), the first num_new[b] columns of row b real; num_new: (B,) int64.
                returns (keys, values, key_mask): the buffers (B, H_kv, S_max, D) and (B, S_max) bool."""
                # TODO: validate shapes, num_new in [0, T], and that no row would pass S_max
                # TODO: write row b's real columns at lengths[b] ..; advance lengths
                # TODO: the key mask of written columns
                ### BEGIN SOLUTION
                B, H, S_max, D = self.keys.shape
                if k.shape != v.shape or k.dim() != 4 or (k.shape[0], k.shape[1], k.shape[3]) != (B, H, D):
                    raise ValueError(f"expected k and v (B={B}, H_kv={H}, T, D={D}), got {tuple(k.shape)} and "
                                     f"{tuple(v.shape)}")
                T = k.shape[2]
                num_new = torch.as_tensor(num_new, device=self.lengths.device).long()
                if num_new.shape != (B,) or bool((num_new < 0).any()) or bool((num_new > T).any()):
                    raise ValueError(f"num_new must be (B={B},) with values in [0, T={T}], got {num_new.tolist()}")
                new_lengths = self.lengths + num_new                                              # (B,)
                if bool((new_lengths > S_max).any()):
                    row = int((new_lengths > S_max).nonzero()[0])
                    raise ValueError(f"row {row} would hold {int(new_lengths[row])} positions, more than the cache's "
                                     f"max_length {S_max}")
                rows, cols = (torch.arange(T, device=k.device)[None, :] < num_new[:, None]).nonzero(as_tuple=True)
                slots = self.lengths[rows] + cols                                                  # (N,) columns
                self.keys[rows, :, slots] = k[rows, :, cols].to(self.keys.dtype)                   # (N, H_kv, D)
                self.values[rows, :, slots] = v[rows, :, cols].to(self.values.dtype)
                self.lengths = new_lengths
                key_mask = torch.arange(S_max, device=k.device)[None, :] < new_lengths[:, None]   # (B, S_max)
                return self.keys, self.values, key_mask
                ### END SOLUTION

            def sequence(self, row: int):
                """(keys, values) of one row, each (H_kv, lengths[row], D)."""
                # TODO: refuse a row outside [0, B); slice the written columns
                ### BEGIN SOLUTION
                if not 0 <= row < self.keys.shape[0]:
                    raise ValueError(f"the cache holds rows 0..{self.keys.shape[0] - 1}, not row {row}")
                length = int(self.lengths[row])
                return self.keys[row, :, :length], self.values[row, :, :length]
                ### END SOLUTION

            def reset(self, row: int) -> None:
                """Free a row for a new sequence (its old columns are simply overwritten later)."""
                # TODO: refuse a row outside [0, B); set its length to 0
                ### BEGIN SOLUTION
                if not 0 <= row < self.keys.shape[0]:
                    raise ValueError(f"the cache holds rows 0..{self.keys.shape[0] - 1}, not row {row}")
                self.lengths[row] = 0
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks run random workloads (prefills of different lengths, decode steps, rows reset and refilled)
        against a plain list of tensors per row, in float32 and bfloat16 with GQA shapes; they check that the buffers
        are never reallocated (the same storage after every update) and that every bad call is refused before it
        writes anything.

        ## 5. Exercise `cached_attention`

        The rule of section 1 with GQA (query head $h$ reads KV head $h // G$). Compute the scores and softmax in
        float32 at least and return `q`'s dtype. A query with no visible key (a padding row of an empty slot) must
        come out as zeros, not NaN. Refuse `H_q` not divisible by `H_kv` with a `ValueError`.
    """)
    lesson.exercise(
        "cached_attention",
        r'''
        def cached_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_mask: torch.Tensor,
                             query_positions: torch.Tensor) -> torch.Tensor:
            """q: (B, H_q, T, D); keys, values: (B, H_kv, S_max, D); key_mask: (B, S_max) bool;
            query_positions: (B, T) int64. returns (B, H_q, T, D) in q's dtype."""
            # TODO: refuse H_q % H_kv != 0; repeat each KV head for its G query heads
            # TODO: scores in >= float32, scaled; visible = key_mask and column <= the query's position
            # TODO: softmax over visible keys only (rows with none -> zeros), times the values
            ### BEGIN SOLUTION
            B, H_q, T, D = q.shape
            H_kv, S_max = keys.shape[1], keys.shape[2]
            if H_q % H_kv != 0:
                raise ValueError(f"{H_q} query heads cannot share {H_kv} KV heads evenly")
            compute = torch.promote_types(q.dtype, torch.float32)
            k = keys.to(compute).repeat_interleave(H_q // H_kv, dim=1)                      # (B, H_q, S_max, D)
            v = values.to(compute).repeat_interleave(H_q // H_kv, dim=1)
            scores = q.to(compute) @ k.transpose(-1, -2) / math.sqrt(D)                      # (B, H_q, T, S_max)
            columns = torch.arange(S_max, device=q.device)
            visible = key_mask[:, None, :] & (columns[None, None, :] <= query_positions[:, :, None])  # (B, T, S_max)
            scores = scores.masked_fill(~visible[:, None], float("-inf"))
            weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)                          # no visible key -> 0
            out = weights @ torch.where(key_mask[:, None, :, None], v, 0.0)                  # (B, H_q, T, D)
            return out.to(q.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with `F.scaled_dot_product_attention` in float64 run on each row's own keys
        (`sequence(row)`-style slices, a causal mask aligned to the row's positions), for ragged prefills and decode
        steps, GQA, MQA and MHA, float32 and bfloat16; they poison the unwritten columns with NaN and huge values,
        and check an empty row.

        ## 6. Exercise `generate_static`

        Greedy decoding of prompts of different lengths in one batch: one cache per layer, sized for the longest
        prompt plus `max_new_tokens`; **one** prefill of the right-padded prompts (`num_new` = their lengths, positions
        `0 .. T-1`), whose next token for row $b$ comes from column `len_b - 1` (not the last column, which is padding
        for the shorter prompts); then `max_new_tokens - 1` decode steps of one token per row at position
        `lengths[b]`. Use `llama_step` for every forward pass. Refuse an empty list, an empty prompt or
        `max_new_tokens < 1` with a `ValueError`.
    """)
    lesson.exercise(
        "generate_static",
        r'''
        @torch.no_grad()
        def generate_static(model, prompts: list, max_new_tokens: int, rope_theta: float = 10000.0) -> torch.Tensor:
            """prompts: list of B 1-D int64 tensors of any lengths >= 1. returns (B, max_new_tokens) int64: the greedy
            continuation of each prompt."""
            # TODO: validate; caches: one StaticKVCache per layer (B, H_kv, max prompt + max_new_tokens, D) in the
            #       model's dtype (H_kv and D from the layer's k_proj and head_dim)
            # TODO: prefill the right-padded prompts; pick each row's token at its last real column
            # TODO: decode one token per row per step at position lengths[b]; collect the tokens
            ### BEGIN SOLUTION
            if not prompts or any(p.dim() != 1 or p.numel() == 0 for p in prompts) or max_new_tokens < 1:
                raise ValueError("need a non-empty list of non-empty 1-D prompts and max_new_tokens >= 1")
            embed_tokens, layers, _, _ = llama_layers(model)
            B, lengths = len(prompts), torch.tensor([len(p) for p in prompts])
            T = int(lengths.max())
            caches = []
            for layer in layers:
                D = layer.self_attn.head_dim
                H_kv = layer.self_attn.k_proj.out_features // D
                caches.append(StaticKVCache(B, H_kv, T + max_new_tokens, D, dtype=embed_tokens.weight.dtype))
            input_ids = torch.zeros(B, T, dtype=torch.long)                                 # right padding with 0
            for b, prompt in enumerate(prompts):
                input_ids[b, : len(prompt)] = prompt
            positions = torch.arange(T).expand(B, T)
            logits = llama_step(model, input_ids, positions, caches, lengths, rope_theta)   # (B, T, V)
            next_token = logits[torch.arange(B), lengths - 1].argmax(dim=-1)                # (B,) at the last real column
            generated = [next_token]
            for _ in range(max_new_tokens - 1):
                positions = caches[0].lengths[:, None].clone()                              # (B, 1): before the update
                logits = llama_step(model, next_token[:, None], positions, caches, torch.ones(B, dtype=torch.long),
                                    rope_theta)                                             # (B, 1, V)
                next_token = logits[:, -1].argmax(dim=-1)
                generated.append(next_token)
            return torch.stack(generated, dim=1)                                            # (B, max_new_tokens)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks run a tiny Hugging Face `LlamaForCausalLM` through your function with prompts of lengths such as
        3, 8 and 5, and compare with each prompt decoded **alone** by full recomputation (no cache at all) and by
        `generate(use_cache=True)`. They also watch the model's embedding: the first call must carry the whole padded
        batch, and every later call exactly one token per row.

        ## 7. Exercise `step_cost`

        Section 3's two formulas, for a config dict with Hugging Face's field names (`hidden_size`,
        `intermediate_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim`,
        `vocab_size`). Return `{"flops": int, "bytes": int}`. Refuse `batch < 1`, `new_tokens < 1`, `past_tokens < 0`
        with a `ValueError`.
    """)
    lesson.exercise(
        "step_cost",
        r'''
        def step_cost(config: dict, batch: int, new_tokens: int, past_tokens: int, bytes_per_element: int = 2) -> dict:
            """FLOPs of the matrix multiplies and the minimum bytes read by one forward step of a Llama over
            `batch` rows of `new_tokens` tokens with `past_tokens` cached. returns {"flops": int, "bytes": int}."""
            # TODO: validate; the matmul weights per layer and the head
            # TODO: FLOPs: 2 per weight per token, plus q k^T and p v over S = past + new positions, every layer
            # TODO: bytes: every matmul weight once, plus K and V of S positions in every layer
            ### BEGIN SOLUTION
            if batch < 1 or new_tokens < 1 or past_tokens < 0:
                raise ValueError(f"need batch >= 1, new_tokens >= 1, past_tokens >= 0; got {batch}, {new_tokens}, "
                                 f"{past_tokens}")
            d, F_, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
            H_q, H_kv, D, V = (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
                               config["vocab_size"])
            layer_weights = d * H_q * D + 2 * d * H_kv * D + H_q * D * d + 3 * d * F_
            matmul_weights = L * layer_weights + d * V                     # the embedding is gathered, not multiplied
            S = past_tokens + new_tokens
            tokens = batch * new_tokens
            flops = 2 * tokens * matmul_weights + L * 2 * 2 * batch * H_q * new_tokens * S * D
            kv_bytes = bytes_per_element * 2 * L * batch * H_kv * S * D
            return {"flops": flops, "bytes": bytes_per_element * matmul_weights + kv_bytes}
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Prefill and decode on the roofline

        Llama-3-8B's shapes in bf16 (Meta's `config.json`: $d = 4096$, $F = 14336$, 32 layers, 32 query and 8 KV heads
        of 128, $V = 128256$): the arithmetic intensity of a decode step against the batch size at two context
        lengths, and of a prefill of 2,048 tokens, next to the H200's ridge point. Decode sits two orders of magnitude
        below the ridge at batch 1; batching raises it until the KV reads, which grow with the batch too, take over
        at long contexts.
    """)
    lesson.code(r"""
        llama3_8b = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256)
        try:
            batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
            plt.figure(figsize=(6.5, 3.6))
            for context in (1024, 32768):
                intensity = []
                for b in batches:
                    cost = step_cost(llama3_8b, b, 1, context - 1)
                    intensity.append(cost["flops"] / cost["bytes"])
                plt.loglog(batches, intensity, "o-", label=f"decode, context {context}")
            prefill = step_cost(llama3_8b, 1, 2048, 0)
            plt.axhline(prefill["flops"] / prefill["bytes"], color="tab:green", ls="--", label="prefill 2,048 tokens, B=1")
            plt.axhline(989e12 / 4.8e12, color="black", ls=":", label="H200 ridge (989 TFLOP/s / 4.8 TB/s)")
            plt.xlabel("batch size (sequences decoded together)"); plt.ylabel("FLOP per byte")
            plt.title("Llama-3-8B, bf16: arithmetic intensity of a step"); plt.legend(fontsize=7); plt.tight_layout()
            plt.show()
            one = step_cost(llama3_8b, 1, 1, 1023)
            print(f"decode, B=1, context 1024: {one['flops'] / 1e9:.1f} GFLOP, {one['bytes'] / 1e9:.2f} GB -> "
                  f"{one['bytes'] / 4.8e12 * 1e3:.2f} ms at 4.8 TB/s, {one['flops'] / 989e12 * 1e3:.3f} ms at 989 TFLOP/s")
        except NotImplementedError:
            print("finish step_cost to draw the roofline")
    """)
    lesson.md(r"""
        ### Your tiny Llama with a static cache

        The cell below takes your `TinyLlama` (the reference where yours does not pass yet), generates 24 tokens for
        three prompts of different lengths with your `generate_static`, checks them against each prompt decoded alone
        by full recomputation, and counts the FLOPs of each decode step both ways with `FlopCounterMode`.
    """)
    lesson.code(r"""
        from types import SimpleNamespace

        from torch.utils.flop_counter import FlopCounterMode

        TinyLlama = lesson.use("p02.tiny_llama", "TinyLlama")
        args = SimpleNamespace(dim=64, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=16, hidden_dim=160,
                               vocab_size=128, norm_eps=1e-6, rope_theta=10000.0, tie_embeddings=False)
        torch.manual_seed(0)
        model = TinyLlama(args).eval()
        prompts = [torch.randint(0, 128, (n,)) for n in (5, 12, 8)]
        steps = 24
        try:
            tokens = generate_static(model, prompts, steps)
            same = True
            with torch.no_grad():
                for b, prompt in enumerate(prompts):
                    sequence = prompt[None]
                    for _ in range(steps):
                        sequence = torch.cat((sequence, model(sequence)[:, -1].argmax(-1, keepdim=True)), dim=1)
                    same &= torch.equal(sequence[0, len(prompt):], tokens[b])
            print("static cache == full recomputation, every prompt:", same)
            lengths, with_cache, without = [], [], []
            with torch.no_grad():
                for context in range(8, 72, 8):
                    ids = torch.randint(0, 128, (1, context))
                    with FlopCounterMode(display=False) as full:
                        model(ids)
                    caches = [StaticKVCache(1, 2, context, 16) for _ in range(4)]
                    llama_step(model, ids[:, :-1], torch.arange(context - 1)[None], caches, torch.tensor([context - 1]))
                    with FlopCounterMode(display=False) as cached:
                        llama_step(model, ids[:, -1:], torch.tensor([[context - 1]]), caches, torch.tensor([1]))
                    lengths.append(context); without.append(full.get_total_flops()); with_cache.append(cached.get_total_flops())
            plt.figure(figsize=(6, 3.2))
            plt.plot(lengths, [f / 1e6 for f in without], "o-", label="recompute the whole sequence")
            plt.plot(lengths, [f / 1e6 for f in with_cache], "o-", label="one token, static KV cache")
            plt.xlabel("sequence length"); plt.ylabel("MFLOP for the next token")
            plt.title("tiny Llama (4 layers): work per generated token"); plt.legend(fontsize=8); plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish StaticKVCache, cached_attention and generate_static to run your model with a static cache")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`StaticKVCache.update`.** `(arange(T) < num_new[:, None]).nonzero(as_tuple=True)` lists every real
        `(row, column)` pair of the new block; `lengths[rows] + cols` is where each goes. One advanced-indexing
        assignment writes them all (`keys[rows, :, slots]` is `(N, H_kv, D)`), with no loop over rows and no new
        allocation: the buffers' storage never changes, which is what lets CUDA graphs replay a captured decode step.
        Validation comes first, so a refused call leaves the cache as it was. Lengths advance once per call — the
        model calls each layer's cache once, and each layer has its own cache.

        **`cached_attention`.** The visibility rule is two comparisons broadcast to `(B, T, S_max)`. Masking with
        `-inf` before the softmax removes unwritten columns from the normaliser, and `torch.where` on the values keeps
        a NaN in an unwritten slot out of `weights @ v` (a `-inf` score gives weight 0, but $0 \cdot \text{NaN}$ is
        still NaN). `nan_to_num` turns the all-masked rows (softmax of all `-inf` is NaN) into zeros.

        **`generate_static`.** The prefill reads each row's logits at `lengths - 1`; the decode positions are the
        cache lengths *before* the update; the first generated token needs no forward pass of its own, so there are
        `max_new_tokens - 1` decode steps.

        **`step_cost`.** Two terms per formula. The FLOP count matches `FlopCounterMode` exactly on Hugging Face's
        eager Llama, because that is what it runs: every linear layer on every new token, and two batched matmuls
        per layer of `(B, H_q, T, D) × (B, H_q, D, S)` after `repeat_kv`.

        **The usual mistakes, and why they are wrong**:
        - *writing every row at the same column* (`lengths.max()` or the first row's length): right for equal
          lengths, scrambled for a ragged batch;
        - *writing the padding columns too* and advancing every row by $T$; *a copy per update* (`torch.cat`, or a
          clone): correct values, but the storage changes, which is what a static cache exists to avoid; *no
          overflow check*, so a long request fails halfway through a write;
        - *a visibility rule that ignores the query's position* (a prefill token sees the future) or *ignores the
          key mask* (an evicted column keeps its weight);
        - *GQA with `repeat` instead of `repeat_interleave`*: query head $h$ reads KV head $h \bmod H_{kv}$ instead
          of $h // G$;
        - *masking by multiplying* the values by the mask: NaN survives;
        - *the prefill's next token from the last column*: the shorter prompts continue from a padding token;
        - *decode positions restarting at 0*, or taken *after* the update (off by one); *a forward pass for the last
          token*, whose logits nobody reads;
        - *the attention term counted once* (only $q k^\top$) or *with $H_{kv}$* instead of $H_q$ heads; *K and V
          bytes counted once*; the embedding table counted as a matmul.

        **Cost.** A decode step reads all weights and all $S$ cached positions to produce $B$ tokens: at batch 1 and
        a 1k context, Llama-3-8B reads about 15 GB of weights and 0.13 GB of cache for 15 GFLOP, about 3.1 ms of HBM
        traffic and 0.015 ms of compute on an H200. Recomputation instead would do about $2 N S$ FLOPs per step.

        **What production code does differently.**
        - *vLLM* stores KV in fixed-size blocks (16 tokens) with a block table per sequence (PagedAttention, Kwon et
          al., 2023), so memory is allocated as sequences grow and shared between forks; its decode kernel reads only
          each sequence's blocks instead of masking `S_max` columns.
        - *Hugging Face's* `StaticCache` preallocates like yours and takes a `cache_position` tensor; it exists so that
          `torch.compile(mode="reduce-overhead")` can capture the decode step in a CUDA graph.
        - *Continuous batching* (Orca, Yu et al., 2022) resets finished rows and refills them with new requests at any
          step — your `reset` — and mixes prefill chunks with decode tokens in one batch (the `num_new` of a row can be
          anything from 0 to $T$).
        - *FlashAttention/FlashInfer* skip the masked blocks entirely, and quantised caches (FP8 KV in vLLM and
          TensorRT-LLM) halve the bytes term.
    """)
    lesson.mistakes()
    return lesson
