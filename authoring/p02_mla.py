"""Source of 02_PyTorch_Algorithms/06_MLA.ipynb (build with `python -m llm_algo build p02.mla`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.mla",
        path="02_PyTorch_Algorithms/06_MLA.ipynb",
        title_en="Multi-head latent attention (DeepSeek MLA)",
        title_zh="多头潜在注意力 MLA",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p02.rope", "p02.attention_mha_gqa"],
    )
    lesson.title(
        intro=r"""
        DeepSeek-V3 has 61 layers and 128 attention heads, each with 192-dimensional keys and 128-dimensional values.
        As plain multi-head attention its KV cache would hold $61 \times 128 \times (192 + 128) = 2{,}498{,}560$
        numbers per token, 4.8 MiB in bf16: a single 32k-token conversation would need 152 GiB. DeepSeek-V3 actually
        caches $61 \times 576 = 35{,}136$ numbers per token (69 KiB), **71 times less**. That is not free in
        principle: every head's values, and its keys apart from the 64 shared RoPE dimensions, are linear images of one
        512-dimensional latent, so MLA is a
        constrained form of multi-head attention, not an equally expressive one. In practice DeepSeek-V2 (§2.1 and
        its appendix comparing MLA with MHA) reports that MLA matched or beat MHA in their ablations, at both of the
        model sizes they compared, while caching far less. The trick is **multi-head latent attention** (MLA, 多头潜在注意力,
        DeepSeek-V2, 2024): cache one low-rank latent vector per token and rebuild every head's keys and values from
        it, or better, never rebuild them at all.

        **You will implement** the cache-size formula for MHA, GQA, MQA and MLA, an MLA layer (low-rank query and
        key/value compression, a decoupled RoPE key shared by all heads, a cache that holds only the latent and the
        RoPE key), and the **absorbed** form used for decoding, where the key up-projection is folded into the query
        and the value up-projection into the output, so attention runs directly on the cached latents. **Graded
        against** Hugging Face `DeepseekV3Attention` built locally from a tiny random `DeepseekV3Config` (float64
        oracle, float32 baseline; nothing is downloaded), its `DynamicCache` for the measured cache size, and a slow
        float64 loop over heads that spells out section 2's derivation.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：DeepSeek-V3 若用普通 MHA，KV cache 每 token 约 250 万个元素；MLA 每层只缓存一个低秩 latent $c_{kv}$（$d_c = 512$）加一个共享的 RoPE key（64 维），共 576 个，少 71 倍。
        - **缓存公式**：MHA/GQA 每 token $2 L H_{kv} D$ 个元素，MLA 为 $L(d_c + d_\text{rope})$，latent 同时代替 K 和 V，只算一次。
        - **前向**：query 经低秩压缩后每个头分成 `[q_nope | q_rope]`；$c_{kv}$ 先过 `kv_a_layernorm`，再经 `kv_b_proj` 为每个头得到 `[k_nope | v]`；RoPE key 按 `position_ids` 旋转后再缓存，所有头共享。
        - **吸收（absorbed）形式**：$q^\top k = (W_{uk}^\top q_\text{nope})^\top c_{kv} + q_\text{rope}^\top k_\text{rope}$，把 $W_{uk}$ 并入 query、$W_{uv}$ 并入输出，attention 直接在缓存的 latent 上计算，解码时无需逐步上投影。
        - **缩放**：吸收后 softmax scale 仍为 $1/\sqrt{d_\text{nope} + d_\text{rope}}$（原始 query/key 头维度），不是 latent 维度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: the KV cache is the decoding bottleneck

        The previous lesson derived the KV cache size per token and layer: $2 H_{kv} D$ elements for keys and values
        of $H_{kv}$ heads of size $D$. MQA and GQA shrink it by sharing KV heads between query heads, and pay for it
        in quality: every query head in a group sees the *same* keys. MLA keeps a distinct key and value for every
        head, yet caches as little as GQA with 2.25 KV heads (DeepSeek-V2, Table 1: $d_c + d_{rope} = 4.5\,d_h$):

        | attention | cached elements per token and layer | DeepSeek-V3 sizes ($H = 128$) |
        | --- | --- | --- |
        | MHA | $2 H D$ (with DeepSeek's heads: $H (d_{nope} + d_{rope} + d_v)$) | $128 \cdot 320 = 40{,}960$ |
        | GQA, $H_{kv}$ groups | $2 H_{kv} D$ | 8 groups of $D = 128$: $2{,}048$ |
        | MQA | $2 D$ | $256$ |
        | MLA | $d_c + d_{rope}$ | $512 + 64 = 576$ |

        Decoding reads the whole cache once per generated token and does little arithmetic per byte, so a 71x
        smaller cache is a much larger batch, a much longer context, or a much faster step, on the same GPU.

        ## 2. The math, with shapes

        Notation (DeepSeek-V3's values in brackets): hidden size $d$ [7168], heads $H$ [128], query latent rank
        $d_c'$ [1536, `q_lora_rank`], key/value latent rank $d_c$ [512, `kv_lora_rank`], per-head key/query size
        without position $d_{nope}$ [128], RoPE part $d_{rope}$ [64], value head size $d_v$ [128]. For a token with
        hidden state $x \in \mathbb{R}^{d}$ at position $m$:

        **Queries** go through their own low-rank bottleneck (this saves activation memory in training, not cache):

        $$
        c^Q = \operatorname{RMSNorm}(W^{DQ} x) \in \mathbb{R}^{d_c'}, \qquad
        [\,q^{h}_{nope} ;\ q^{h}_{pe}\,] = (W^{UQ} c^Q)_h \in \mathbb{R}^{d_{nope} + d_{rope}}, \qquad
        q^h_{rope} = \operatorname{RoPE}_m(q^h_{pe}).
        $$

        **Keys and values** come from one shared latent, plus one small rotary key shared by all heads:

        $$
        [\,c^{KV}_{raw} ;\ k_{pe}\,] = W^{DKV} x \in \mathbb{R}^{d_c + d_{rope}}, \qquad
        c^{KV} = \operatorname{RMSNorm}(c^{KV}_{raw}) \in \mathbb{R}^{d_c}, \qquad
        k_{rope} = \operatorname{RoPE}_m(k_{pe}) \in \mathbb{R}^{d_{rope}},
        $$
        $$
        k^h_{nope} = W^{UK}_h\, c^{KV} \in \mathbb{R}^{d_{nope}}, \qquad
        v^h = W^{UV}_h\, c^{KV} \in \mathbb{R}^{d_v}, \qquad
        k^h = [\,k^h_{nope} ;\ k_{rope}\,],\quad q^h = [\,q^h_{nope} ;\ q^h_{rope}\,].
        $$

        Then ordinary causal attention per head, with the scale of the full query/key size:

        $$
        s^h_{mt} = \frac{q^{h\top}_m k^h_t}{\sqrt{d_{nope} + d_{rope}}}
        = \frac{q^{h\top}_{nope,m} W^{UK}_h c^{KV}_t + q^{h\top}_{rope,m}\, k_{rope,t}}{\sqrt{d_{nope} + d_{rope}}},
        \qquad
        o^h_m = \sum_{t \le m} \operatorname{softmax}_t(s^h_{m\cdot})\, v^h_t, \qquad
        y_m = W^{O} [\,o^1_m ; \dots ; o^H_m\,].
        $$

        Shapes in code (batch $B$, $S$ new tokens, $T$ cached + new): `x (B, S, d)`; `q_nope (B, H, S, d_nope)`,
        `q_rope (B, H, S, d_rope)`; `c_kv (B, 1, S, d_c)` and `k_rope (B, 1, S, d_rope)`, viewed as one "head" so that
        the KV cache of the previous lesson stores them unchanged; `kv_b_proj.weight (H (d_nope + d_v), d_c)`, which
        is $W^{UK}$ and $W^{UV}$ stacked head by head: `view(H, d_nope + d_v, d_c)`, the first $d_{nope}$ rows of head
        $h$ are $W^{UK}_h$, the last $d_v$ are $W^{UV}_h$.

        **The cache holds $c^{KV}_t$ and $k_{rope,t}$ only**: $d_c + d_{rope}$ numbers per token and layer, shared by
        all heads. Everything else can be recomputed from them.

        **Why a separate RoPE key?** We would like to rotate $k^h = W^{UK}_h c^{KV}$ like any key. But then the score
        is $q^\top R_m^\top R_t W^{UK}_h c_t = q^\top R_{t-m} W^{UK}_h c_t$: a position-dependent rotation sits
        between $q$ and $W^{UK}_h$, so $W^{UK}_h$ can no longer be merged into the query (section 4) and every
        cached latent would have to be up-projected at every step. MLA keeps the rotation out of the latent path: the
        compressed part carries no position at all, and a small $d_{rope}$-dimensional key, one for all heads,
        carries it.

        **Absorption.** Matrix products reassociate:

        $$
        q^{h\top}_{nope} \big(W^{UK}_h c_t\big) = \big(W^{UK\top}_h q^h_{nope}\big)^\top c_t = \tilde q^{h\top} c_t,
        \qquad
        \sum_t p_t\, W^{UV}_h c_t = W^{UV}_h \sum_t p_t\, c_t .
        $$

        So a decoding step maps each head's query into the latent space once ($\tilde q^h \in \mathbb{R}^{d_c}$),
        attends over the cached latents directly, and maps the weighted latent back with $W^{UV}_h$. In this form MLA
        **is multi-query attention** with one shared KV head: keys $[c_t ; k_{rope,t}]$ of size $d_c + d_{rope}$ (576),
        values $c_t$ of size $d_c$ (512), $H$ query heads of size $d_c + d_{rope}$, and softmax scale
        $1/\sqrt{d_{nope} + d_{rope}}$, **not** $1/\sqrt{d_c + d_{rope}}$. That is exactly the interface of DeepSeek's
        FlashMLA kernel (head size 576, value size 512, an explicit `softmax_scale`).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        from torch import nn

        rope_cache, apply_rope_rotate_half = lesson.use("p02.rope", "rope_cache", "apply_rope_rotate_half")
        attention, KVCache = lesson.use("p02.attention_mha_gqa", "attention", "KVCache")
    """)
    lesson.md(r"""
        ## 3. Exercise `kv_cache_elements_per_token`: the formula

        Write the number of cached elements per token over all layers. With `kv_lora_rank` given it is MLA (the
        latent and the shared RoPE key); otherwise keys and values of `num_kv_heads` heads of size `head_dim` (MHA,
        GQA and MQA differ only in `num_kv_heads`). The checks also *measure* a Hugging Face `DynamicCache` filled by
        `LlamaAttention` and by `DeepseekV3Attention` and compare your formula with what is really stored.
    """)
    lesson.exercise(
        "kv_cache_elements_per_token",
        r'''
        def kv_cache_elements_per_token(num_layers: int, *, num_kv_heads: int | None = None, head_dim: int | None = None,
                                        kv_lora_rank: int | None = None, qk_rope_head_dim: int | None = None) -> int:
            """Cached numbers per token, summed over layers (multiply by bytes per element for the memory).

            MLA:           kv_lora_rank and qk_rope_head_dim given: the latent and the one shared RoPE key per layer
            MHA, GQA, MQA: num_kv_heads and head_dim given: a key and a value per KV head per layer
            """
            # TODO: MLA when kv_lora_rank is not None; otherwise keys and values of the KV heads
            ### BEGIN SOLUTION
            if kv_lora_rank is not None:
                return num_layers * (kv_lora_rank + qk_rope_head_dim)  # c_kv and k_rope, shared by all heads
            return num_layers * 2 * num_kv_heads * head_dim  # keys and values
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        models = {  # layers and attention sizes from each model's config.json
            "Llama-3-8B (GQA 8)": dict(num_layers=32, num_kv_heads=8, head_dim=128),
            "Llama-3-70B (GQA 8)": dict(num_layers=80, num_kv_heads=8, head_dim=128),
            "DeepSeek-V3 as MHA (K 192 + V 128)": dict(num_layers=61, num_kv_heads=128, head_dim=160),
            "DeepSeek-V3 (MLA)": dict(num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64),
        }
        try:
            kib = {name: kv_cache_elements_per_token(**dims) * 2 / 1024 for name, dims in models.items()}  # bf16
        except NotImplementedError:
            kib = {}
            print("kv_cache_elements_per_token not attempted yet: nothing to plot")
        if kib:
            fig, ax = plt.subplots(figsize=(6.5, 2.8))
            ax.barh(list(kib), list(kib.values()), color=["C0", "C0", "C3", "C2"])
            ax.set_xscale("log"); ax.set_xlabel("KV cache per token, KiB (bf16, all layers)")
            for y, value in enumerate(kib.values()):
                ax.text(value, y, f" {value:,.0f}", va="center", fontsize=8)
            fig.tight_layout()
            plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `MultiHeadLatentAttention`: the layer, straight from the equations

        The module's parameters carry Hugging Face's names, so a `DeepseekV3Attention` state dict loads into it
        (that is how the checks give it weights). `__init__` is written for you; write `project` and `forward`.

        - `project(x, position_ids)`: everything that depends only on the new tokens: the low-rank query
          (`q_a_proj`, `q_a_layernorm`, `q_b_proj`, split per head into the no-position part and the RoPE part, which is
          rotated), and the compressed key/value (`kv_a_proj_with_mqa`, split into the latent, normalised with
          `kv_a_layernorm`, and the RoPE key, rotated). Each head's query is $[q_{nope}; q_{pe}]$ in that order, and
          the compression output is $[c^{KV}_{raw}; k_{pe}]$.
        - `forward(x, position_ids, cache=None)`: with a cache, `cache.update(c_kv, k_rope)` appends the new latents
          and RoPE keys and returns all of them (your `KVCache` from the previous lesson does exactly this with
          `(B, 1, T, ·)` tensors). Then up-project **all** $T$ latents with `kv_b_proj`, build per-head keys and values,
          call your causal `attention` (bottom-right, so a decoding step sees every cached token), and apply `o_proj`.

        RoPE uses your `apply_rope_rotate_half` from the RoPE lesson with the module's `cos`/`sin` tables (Hugging
        Face's `rope_interleave=False`; DeepSeek's released checkpoints use the interleaved pairing, which
        `DeepseekV3Config` selects by default, the same rotation on a permuted head dimension).
    """)
    lesson.exercise(
        "MultiHeadLatentAttention",
        r'''
        class MultiHeadLatentAttention(nn.Module):
            """DeepSeek-V2/V3 attention. x (B, S, hidden_size) -> (B, S, hidden_size); causal; weights named like
            Hugging Face's DeepseekV3Attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
            kv_a_layernorm, kv_b_proj, o_proj)."""

            def __init__(self, hidden_size: int, num_heads: int, q_lora_rank: int, kv_lora_rank: int,
                         qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
                         max_position: int = 4096, rope_base: float = 10000.0, eps: float = 1e-6):
                super().__init__()
                self.num_heads, self.kv_lora_rank = num_heads, kv_lora_rank
                self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
                self.q_a_proj = nn.Linear(hidden_size, q_lora_rank, bias=False)                      # W^DQ
                self.q_a_layernorm = nn.RMSNorm(q_lora_rank, eps=eps)
                self.q_b_proj = nn.Linear(q_lora_rank, num_heads * (qk_nope_head_dim + qk_rope_head_dim), bias=False)
                self.kv_a_proj_with_mqa = nn.Linear(hidden_size, kv_lora_rank + qk_rope_head_dim, bias=False)  # W^DKV
                self.kv_a_layernorm = nn.RMSNorm(kv_lora_rank, eps=eps)
                self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
                self.o_proj = nn.Linear(num_heads * v_head_dim, hidden_size, bias=False)
                cos, sin = rope_cache(max_position, qk_rope_head_dim, rope_base)  # (max_position, d_rope)
                self.register_buffer("cos", cos, persistent=False)
                self.register_buffer("sin", sin, persistent=False)

            def project(self, x: torch.Tensor, position_ids: torch.Tensor):
                """x (B, S, hidden), position_ids (B, S) ->
                q_nope (B, H, S, d_nope), q_rope (B, H, S, d_rope) rotated,
                c_kv (B, 1, S, d_c) normalised latent, k_rope (B, 1, S, d_rope) rotated, shared by all heads."""
                B, S, _ = x.shape
                # TODO: queries: q_a_proj -> q_a_layernorm -> q_b_proj, per head [nope | rope], rotate the rope part
                # TODO: keys/values: kv_a_proj_with_mqa -> [latent | rope key]; normalise the latent; rotate the rope key
                ### BEGIN SOLUTION
                H, d_nope, d_rope = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim
                q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))  # (B, S, H (d_nope + d_rope))
                q = q.view(B, S, H, d_nope + d_rope).transpose(1, 2)  # (B, H, S, d_nope + d_rope)
                q_nope, q_pe = q.split([d_nope, d_rope], dim=-1)
                q_rope = apply_rope_rotate_half(q_pe, self.cos, self.sin, position_ids)  # (B, H, S, d_rope)
                compressed = self.kv_a_proj_with_mqa(x)  # (B, S, d_c + d_rope)
                c_kv, k_pe = compressed.split([self.kv_lora_rank, d_rope], dim=-1)
                c_kv = self.kv_a_layernorm(c_kv)[:, None]  # (B, 1, S, d_c)
                k_rope = apply_rope_rotate_half(k_pe[:, None], self.cos, self.sin, position_ids)  # (B, 1, S, d_rope)
                return q_nope, q_rope, c_kv, k_rope
                ### END SOLUTION

            def forward(self, x: torch.Tensor, position_ids: torch.Tensor, cache=None) -> torch.Tensor:
                """x (B, S, hidden), position_ids (B, S); cache: an object with update(c_kv, k_rope) -> all so far.
                Returns (B, S, hidden). Causal: new token i sits at position T - S + i of the T cached + new tokens."""
                B, S, _ = x.shape
                # TODO: project; append the latent and the RoPE key to the cache (if any): T positions
                # TODO: up-project all T latents with kv_b_proj into per-head [k_nope | v]; keys = [k_nope | k_rope]
                # TODO: causal attention over (B, H, ·, ·) heads, then o_proj over the concatenated heads
                ### BEGIN SOLUTION
                H, d_nope, d_v = self.num_heads, self.qk_nope_head_dim, self.v_head_dim
                q_nope, q_rope, c_kv, k_rope = self.project(x, position_ids)
                if cache is not None:
                    c_kv, k_rope = cache.update(c_kv, k_rope)  # (B, 1, T, d_c), (B, 1, T, d_rope)
                T = c_kv.shape[2]
                kv = self.kv_b_proj(c_kv[:, 0])  # (B, T, H (d_nope + d_v)): every cached latent, up-projected
                kv = kv.view(B, T, H, d_nope + d_v).transpose(1, 2)  # (B, H, T, d_nope + d_v)
                k_nope, v = kv.split([d_nope, d_v], dim=-1)
                k = torch.cat((k_nope, k_rope.expand(B, H, T, self.qk_rope_head_dim)), dim=-1)  # (B, H, T, d_qk)
                q = torch.cat((q_nope, q_rope), dim=-1)  # (B, H, S, d_qk): attention scales by 1/sqrt(d_qk)
                out = attention(q, k, v, causal=True)  # (B, H, S, d_v)
                return self.o_proj(out.transpose(1, 2).reshape(B, S, H * d_v))  # (B, S, hidden)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks load a tiny `DeepseekV3Attention`'s weights into your module and compare outputs (prefill, and a
        decode schedule through a cache of single tokens and a chunk). They hand your `forward` a cache that records
        what it is given, so they can see that only $(B, 1, T, d_c)$ latents and $(B, 1, T, d_{rope})$ RoPE keys are
        stored, equal to what Hugging Face's `DynamicCache` stores.
    """)
    lesson.md(r"""
        ## 5. Exercise `mla_absorbed`: attention on the latents

        The layer above re-reads the cache *and* up-projects all $T$ latents into $H$ keys and values at every
        decoding step: $2 T d_c H (d_{nope} + d_v)$ FLOPs per step, and a $(B, H, T, d_{nope} + d_{rope})$ key tensor that
        is as big as the MHA cache MLA was meant to avoid. The absorbed form avoids both. With
        `W = kv_b_proj.weight.view(H, d_nope + d_v, d_c)`, `W_uk = W[:, :d_nope]` $(H, d_{nope}, d_c)$ and
        `W_uv = W[:, d_nope:]` $(H, d_v, d_c)$:

        1. `project` as before, then the cache update: `c_kv (B, 1, T, d_c)`, `k_rope (B, 1, T, d_rope)`.
        2. $\tilde q^h = W^{UK\top}_h q^h_{nope}$: `einsum("bhsd,hdc->bhsc")` gives `(B, H, S, d_c)`.
        3. Multi-query attention with one KV head: queries $[\tilde q ; q_{rope}]$ `(B, H, S, d_c + d_rope)`, keys
           $[c ; k_{rope}]$ `(B, 1, T, d_c + d_rope)`, values $c$ `(B, 1, T, d_c)`, causal, scale
           $1/\sqrt{d_{nope} + d_{rope}}$. Your `attention` divides by $\sqrt{\text{query size}}$, here
           $\sqrt{d_c + d_{rope}}$, so multiply the query by $\sqrt{(d_c + d_{rope}) / (d_{nope} + d_{rope})}$ first.
           Result: the weighted latent `(B, H, S, d_c)`.
        4. $o^h = W^{UV}_h (\cdot)$: `einsum("bhsc,hvc->bshv")` gives `(B, S, H, d_v)`; flatten the heads and apply
           `o_proj`.
    """)
    lesson.exercise(
        "mla_absorbed",
        r'''
        def mla_absorbed(mla: "MultiHeadLatentAttention", x: torch.Tensor, position_ids: torch.Tensor,
                         cache=None) -> torch.Tensor:
            """The same output as mla(x, position_ids, cache), computed on the latents: W^UK folded into the query,
            W^UV into the output; no per-head key or value is ever formed. x (B, S, hidden) -> (B, S, hidden)."""
            B, S, _ = x.shape
            H, d_nope, d_rope, d_v = mla.num_heads, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
            # TODO: project, update the cache (if any)
            # TODO: split kv_b_proj's weight into W_uk (H, d_nope, d_c) and W_uv (H, d_v, d_c)
            # TODO: absorbed query [W_uk^T q_nope | q_rope]; one shared KV head [c_kv | k_rope], values c_kv
            # TODO: causal attention with the softmax scale 1 / sqrt(d_nope + d_rope), then W_uv and o_proj
            ### BEGIN SOLUTION
            q_nope, q_rope, c_kv, k_rope = mla.project(x, position_ids)
            if cache is not None:
                c_kv, k_rope = cache.update(c_kv, k_rope)  # (B, 1, T, d_c), (B, 1, T, d_rope)
            weight = mla.kv_b_proj.weight.view(H, d_nope + d_v, mla.kv_lora_rank)
            w_uk, w_uv = weight[:, :d_nope], weight[:, d_nope:]  # (H, d_nope, d_c), (H, d_v, d_c)
            q_latent = torch.einsum("bhsd,hdc->bhsc", q_nope, w_uk)  # (B, H, S, d_c): W_uk^T q_nope
            query = torch.cat((q_latent, q_rope), dim=-1)  # (B, H, S, d_c + d_rope)
            key = torch.cat((c_kv, k_rope), dim=-1)  # (B, 1, T, d_c + d_rope): one KV head for all H
            query = query * math.sqrt(query.shape[-1] / (d_nope + d_rope))  # attention divides by sqrt(d_c + d_rope)
            latent_out = attention(query, key, c_kv, causal=True)  # (B, H, S, d_c)
            out = torch.einsum("bhsc,hvc->bshv", latent_out, w_uv)  # (B, S, H, d_v): W_uv applied once per head
            return mla.o_proj(out.reshape(B, S, H * d_v))  # (B, S, hidden)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with Hugging Face's non-absorbed `DeepseekV3Attention` and with the float64 loop spec,
        including decoding through a cache that must hold only latents, and they watch every operation that reads
        `kv_b_proj.weight` during a decoding step: it may meet the new token's query and output, never the $T$ cached
        latents (so calling `mla(...)` or `kv_b_proj(c_kv)` here gives the right numbers and still fails).

        ### Which form is cheaper, and when

        The cell below counts FLOPs per layer and token for DeepSeek-V3's sizes, for a decoding step over $T$ cached
        tokens. Non-absorbed decoding pays for up-projecting every cached latent at every step; absorbed decoding pays
        a larger per-token attention size ($d_c + d_{rope} = 576$ instead of 192 for scores, $d_c = 512$ instead of
        128 for the weighted sum) but nothing proportional to $T \cdot H \cdot d_c \cdot (d_{nope} + d_v)$.
    """)
    lesson.code(r"""
        H, d_c, d_nope, d_rope, d_v = 128, 512, 128, 64, 128
        contexts = torch.logspace(2, 5, 30)
        plain = 2 * contexts * d_c * H * (d_nope + d_v) + 2 * H * contexts * (d_nope + d_rope + d_v)
        absorbed = 2 * H * d_nope * d_c + 2 * H * contexts * (d_c + d_rope + d_c) + 2 * H * d_c * d_v
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.loglog(contexts, plain / 1e9, label="non-absorbed: up-project all T latents")
        ax.loglog(contexts, absorbed / 1e9, label="absorbed: attend on latents")
        ax.set_xlabel("cached tokens T"); ax.set_ylabel("GFLOP per layer per decoded token")
        ax.set_title("DeepSeek-V3 sizes, one decoding step"); ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
        T = 4096
        ratio = (2 * T * d_c * H * (d_nope + d_v) + 2 * H * T * (d_nope + d_rope + d_v)) / (
            2 * H * d_nope * d_c + 2 * H * T * (d_c + d_rope + d_c) + 2 * H * d_c * d_v)
        print(f"T = {T}: the non-absorbed step costs {ratio:.0f}x the FLOPs of the absorbed one")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`kv_cache_elements_per_token`.** MLA's latent serves as the source of both keys and values, so it is counted
        once, and the RoPE key is shared by all heads, so it is counted once per layer, not per head: $L (d_c + d_{rope})$.
        GQA counts keys and values separately: $2 L H_{kv} D$. For DeepSeek-V3 that is $61 \cdot 576 = 35{,}136$ elements
        (68.6 KiB in bf16) per token; DeepSeek-V2's paper puts it as "equal to GQA with 2.25 groups" ($d_c = 4 d_h$,
        $d_{rope} = d_h/2$).

        **`project`.** The query first goes through a rank-$d_c'$ bottleneck with an RMSNorm in the middle, like the
        key/value path; then each head's $d_{nope} + d_{rope}$ outputs are split with the no-position part first.
        `kv_a_proj_with_mqa` computes the latent and the RoPE key in one matmul ("with MQA" because the RoPE key is a
        single head shared by all query heads, as in multi-query attention). Only the latent is normalised. Both
        RoPE parts are rotated at `position_ids`, the absolute positions, so a decoding step rotates its one new key
        at position $T - 1$ before it goes into the cache.

        **`forward`.** The cache stores `(B, 1, T, d_c)` and `(B, 1, T, d_rope)`; `kv_b_proj` then turns every cached
        latent into $H$ keys and values. `expand` makes the shared RoPE key look like $H$ heads without a copy, and
        `cat` builds $[k_{nope}; k_{rope}]$, matching the query layout. Your `attention` scales by
        $1/\sqrt{d_{nope} + d_{rope}}$ because that is the query's size, the same as `DeepseekV3Attention.scaling`
        (with YaRN scaling DeepSeek-V3 multiplies it by an `mscale` factor, which we leave out).

        **`mla_absorbed`.** Two einsums replace the up-projection of the cache: one on the $S$ new queries
        ($H d_{nope} d_c$ per token) and one on the $S$ outputs ($H d_c d_v$). The attention in between is
        multi-query: `(B, 1, T, ·)` keys and values broadcast over the $H$ query heads, which your `attention`
        handles by `repeat_kv` (a production kernel reads the shared latent once per block of heads). The rescaling
        line is the easiest thing to forget: the softmax scale of MLA is fixed by the *original* score
        $q^{h\top} k^h$, whose size is $d_{nope} + d_{rope}$, while the absorbed query has size $d_c + d_{rope}$.

        **The usual mistakes, and why they are wrong**:
        - *Counting the latent twice* (as if keys and values were cached separately) or *a RoPE key per head*.
        - *No RMSNorm on the latent*, or *the RoPE part taken from the wrong end* of each query head.
        - *RoPE at positions $0 \dots S-1$* instead of `position_ids`: prefill is right, every decoding step is wrong.
        - *$k_{nope}$ and $v$ swapped* in `kv_b_proj`'s output.
        - *The latent-size scale* $1/\sqrt{d_c + d_{rope}}$ in the absorbed form.
        - *$W^{UK}$ and $W^{UV}$ swapped*, and *heads flattened in the wrong order* after the value up-projection.
        - *Falling back to the plain layer* inside `mla_absorbed`: the same output, and every cached latent is still
          up-projected at every step, which is the cost the absorbed form exists to remove.

        **Cost.** Per decoding step and layer, absorbed attention reads $T (d_c + d_{rope})$ cached numbers once for
        all $H$ heads, and does $2 H T (2 d_c + d_{rope})$ FLOPs. At 128 heads that is about 240 FLOPs per cached byte in
        bf16, near an H100's ridge point: MLA decoding is compute-bound where GQA decoding is bandwidth-bound, which
        is why DeepSeek wrote a dedicated kernel for it.

        **What production code does.**
        - *DeepSeek's own inference code* (`DeepSeek-V3/inference/model.py`) has both paths: `attn_impl="naive"`
          caches full keys and values, `"absorb"` caches the latent and the RoPE key and runs the einsums above.
        - *FlashMLA* (DeepSeek, 2025) is the decoding kernel for the absorbed form on Hopper: MQA with head size 576 and
          value size 512 over a paged latent cache with 64-token blocks.
        - *vLLM* and *SGLang* use the non-absorbed path for prefill (many queries: up-projecting once per token is
          cheap, and FlashAttention can run on ordinary 192/128 heads) and the absorbed path for decoding, and store the
          latent cache in pages, optionally in FP8.
        - *Hugging Face* `DeepseekV3Attention` caches the latent and RoPE key (the same `(B, 1, T, ·)` trick as this
          lesson) and always up-projects, i.e. the non-absorbed form.
        - *Precomputed absorption* (merging $W^{UK}_h$ into $W^{UQ}$ once at load time) is possible in exact
          arithmetic, but the merged matrix is $H d_c \times d_c'$, larger than the two factors, so kernels keep the
          einsum at run time.
    """)
    lesson.mistakes()
    return lesson
