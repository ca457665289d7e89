"""Source of 02_PyTorch_Algorithms/07_Llama_Block.ipynb (build with `python -m llm_algo build p02.llama_block`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.llama_block",
        path="02_PyTorch_Algorithms/07_Llama_Block.ipynb",
        title_en="A Llama decoder block",
        title_zh="Llama 解码器层",
        difficulty="medium",
        device="cpu",
        minutes=40,
        prerequisites=["p02.rmsnorm", "p02.swiglu", "p02.rope", "p02.attention_mha_gqa"],
    )
    lesson.title(
        intro=r"""
        A Llama is one block repeated: Llama-2-7B stacks 32 identical decoder layers, Llama-3-70B stacks 80, and
        everything else in the model (the embedding table, a final norm and the output head) is a small share of its
        weights: about 4% for Llama-2-7B and 3% for Llama-3-70B, but 13% for Llama-3-8B with its 128k vocabulary.
        You already wrote every part of the block. This lesson wires them together in the one order that Llama
        checkpoints were trained with, under the parameter names the checkpoints use, so that your block
        computes *exactly* what Hugging Face's `LlamaDecoderLayer` computes with the same weights.

        **You will implement** the attention layer (projections, heads, RoPE, GQA attention with a KV cache, output
        projection) and the pre-norm decoder block, built from **your own** RMSNorm, RoPE, SwiGLU and attention from
        the earlier lessons (the setup cell takes each one where its checks pass, and the reference otherwise).
        **Graded against** Hugging Face `LlamaAttention` and `LlamaDecoderLayer` built locally from a tiny random
        `LlamaConfig` with eager attention: batches of three with left and right padding, GQA, MHA and MQA, fp32 and
        bf16, gradients, and KV-cache decoding against full recomputation.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：Llama 就是同一个 decoder block 重复堆叠（Llama-2-7B 32 层、Llama-3-70B 80 层）；本节用前几节自己写的 RMSNorm、RoPE、SwiGLU 和 attention 拼出与 Hugging Face `LlamaDecoderLayer` 逐数相同的 block。
        - **Attention 层**：`q_proj`/`k_proj`/`v_proj` 输出 `(B, T, H·D)`，先 `view(B, T, H, D)` 再 `transpose` 成 `(B, H, T, D)`；对 Q 和 K 按 `position_ids` 施加 RoPE，GQA attention（causal + padding mask，KV cache），转置回 `(B, T, H·D)` 后经 `o_proj`。
        - **Pre-norm block**：$h = x + \operatorname{Attn}(\operatorname{RMSNorm}_1(x))$，$y = h + \operatorname{MLP}(\operatorname{RMSNorm}_2(h))$；两个 norm 分别是 `input_layernorm` 和 `post_attention_layernorm`。
        - **Pre-norm 带来什么**：残差流上有一条不经过 norm 的恒等梯度通路，不再像 post-norm 那样离不开 warm-up；但深层模型仍要小心初始化缩放（GPT-2 的 $1/\sqrt{N}$）、warm-up、学习率和梯度裁剪，残差流的尺度也随深度增长，所以输出头前还要一个 `model.norm`。
        - **参数名**：与 checkpoint 完全一致，才能加载 Hugging Face 权重。
        - **KV cache**：block 把 cache 传给 attention 层，逐 token 解码应与整段重算一致。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The block, and why the norm comes first

        The original Transformer normalised *after* each residual addition (post-norm):
        $x \leftarrow \operatorname{Norm}(x + F(x))$. Every signal and every gradient then passes through a norm in
        every layer, and deep post-norm stacks need a learning-rate warm-up to train at all (Xiong et al., 2020,
        *On Layer Normalization in the Transformer Architecture*). GPT-2 moved the norm to the input of each branch
        (pre-norm), and every Llama, Mistral, Qwen and DeepSeek does the same:

        $$
        h = x + \operatorname{Attn}\big(\operatorname{RMSNorm}_1(x)\big), \qquad
        y = h + \operatorname{SwiGLU}\big(\operatorname{RMSNorm}_2(h)\big).
        $$

        The **residual stream** $x \to h \to y$ is never normalised inside the block: each branch reads a normalised
        copy and *adds* its result, so $\partial y / \partial x = I + (\text{terms through the two branches})$. A
        gradient reaching the top of an $L$-layer stack reaches every layer through an identity path that no norm
        rescales. That is what pre-norm buys: Xiong et al. show that at initialisation the gradients near the output
        of a post-norm Transformer are large, which is why it needs a learning-rate warm-up, while pre-norm's are well
        behaved, and they train pre-norm models without one.

        It does not make depth free. The stream's scale grows with depth (the figure after exercise `LlamaBlock`), so each
        later branch moves it relatively less, and the model needs one more RMSNorm (`model.norm`) before the output
        head. Deep pre-norm models are still trained with care: GPT-2 scales the initial weights of the residual
        layers by $1/\sqrt{N}$ ($N$ residual layers) so that the sum of $N$ branch outputs does not grow with depth
        (Radford et al., 2019, §2.3); Llama 2 uses a 2000-step warm-up, a peak learning rate that shrinks with size
        (3e-4 for 7B and 13B, 1.5e-4 for 34B and 70B) and gradient clipping at 1.0 (Touvron et al., 2023, §2.2 and
        Table 1); and the loss spikes of large runs led to further fixes such as QK-norm
        ([p02.architecture_tricks](11_Architecture_Tricks.ipynb)).

        ## 2. The attention layer, with shapes

        Hidden size $d$, $H_q$ query heads and $H_{kv}$ key/value heads of size $D$ (Llama-3-8B: $d = 4096$,
        $H_q = 32$, $H_{kv} = 8$, $D = 128$). For `x: (B, T, d)`, already normalised:

        | step | computation | shape |
        | --- | --- | --- |
        | project | $q = x W_q^\top$, $k = x W_k^\top$, $v = x W_v^\top$ | `(B, T, H_q·D)`, `(B, T, H_kv·D)` ×2 |
        | split heads | `view(B, T, H, D).transpose(1, 2)` | `(B, H_q, T, D)`, `(B, H_kv, T, D)` |
        | rotate | RoPE on $q$ and $k$ at `position_ids` (not $v$) | unchanged |
        | cache | append $k, v$ to the layer's KV cache; attend to all of it | `(B, H_kv, S_k, D)` |
        | attend | causal GQA attention with the key padding mask | `(B, H_q, T, D)` |
        | merge heads | `transpose(1, 2).reshape(B, T, H_q·D)` | `(B, T, H_q·D)` |
        | project out | $o = \cdot\, W_o^\top$ | `(B, T, d)` |

        Note that $H_q D$ need not equal $d$: the checks use $d = 48$ with four heads of 16. RoPE is applied
        **before** the cache, so cached keys are stored rotated at their own positions and never rotated again. The
        causal mask is bottom-right aligned: with $S_k$ cached keys and $T$ new queries, query $i$ sits at position
        $S_k - T + i$.

        ## 3. Parameter names are the checkpoint format

        A checkpoint is a dictionary from names to tensors; your module loads it only if its attribute names produce
        the same keys. This lesson uses Hugging Face's names, so a `LlamaDecoderLayer`'s state dict loads into your
        block as it is (the mapping is the identity), and in the next lesson a whole `LlamaForCausalLM` loads after
        dropping a `model.` prefix:

        | weight | Hugging Face (this lesson) | Meta `llama/model.py` | vLLM |
        | --- | --- | --- | --- |
        | first norm | `input_layernorm.weight` | `attention_norm.weight` | same as HF |
        | $W_q, W_k, W_v$ | `self_attn.{q,k,v}_proj.weight` | `attention.{wq,wk,wv}.weight` | one fused `qkv_proj` |
        | $W_o$ | `self_attn.o_proj.weight` | `attention.wo.weight` | `o_proj` |
        | second norm | `post_attention_layernorm.weight` | `ffn_norm.weight` | same as HF |
        | gate, up, down | `mlp.{gate,up,down}_proj.weight` | `feed_forward.{w1,w3,w2}.weight` | fused `gate_up_proj`, `down_proj` |

        vLLM's loader concatenates $W_q, W_k, W_v$ (and gate, up) at load time so that one GEMM replaces three.
        Meta's $W_q$ and $W_k$ also differ from Hugging Face's by a row permutation (the RoPE pairing); the next
        lesson converts a Meta checkpoint.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn

        # Your building blocks from the earlier lessons (the reference where yours does not pass its checks yet)
        RMSNorm = lesson.use("p02.rmsnorm", "RMSNorm")
        rope_cache, apply_rope_rotate_half = lesson.use("p02.rope", "rope_cache", "apply_rope_rotate_half")
        SwiGLU = lesson.use("p02.swiglu", "SwiGLU")
        attention, KVCache = lesson.use("p02.attention_mha_gqa", "attention", "KVCache")
    """)
    lesson.md(r"""
        The lines above say, for each building block, whether your version or the reference was taken. Your
        `attention(q, k, v, *, causal, key_padding_mask)` takes `q: (B, H_q, T, D)`, `k, v: (B, H_kv, S_k, D)` and a
        `(B, S_k)` boolean mask with True at real tokens; `KVCache().update(k, v)` returns all keys and values so
        far; `apply_rope_rotate_half(x, cos, sin, position_ids)` rotates `(B, H, T, D)` with `(max_position, D)`
        tables from `rope_cache`.

        ## 4. Exercise `LlamaAttention`

        Follow the table of section 2. `forward` receives the RoPE tables and the position ids from the caller (the
        model builds the tables once for all layers), the key padding mask over **all** keys the layer will attend to
        (cached ones included), and optionally this layer's `KVCache`.
    """)
    lesson.exercise(
        "LlamaAttention",
        r'''
        class LlamaAttention(nn.Module):
            """Llama self-attention: state_dict() == {q_proj, k_proj, v_proj, o_proj}.weight, no biases."""

            def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int):
                super().__init__()
                self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
                # TODO: q_proj d -> H_q*D, k_proj and v_proj d -> H_kv*D, o_proj H_q*D -> d; nn.Linear without bias
                ### BEGIN SOLUTION
                self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
                self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
                self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
                self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
                ### END SOLUTION

            def forward(self, x, cos, sin, position_ids, key_padding_mask=None, cache=None):
                """x: (B, T, d) normalised hidden states; cos, sin: (max_position, D) tables;
                position_ids: (B, T) int64; key_padding_mask: (B, S_k) bool, True = real token, S_k = cached + T
                (None = no padding); cache: this layer's KVCache or None.  returns (B, T, d) in x's dtype"""
                B, T, _ = x.shape
                # TODO: project and split heads: q (B, H_q, T, D), k and v (B, H_kv, T, D)
                # TODO: RoPE on q and k at position_ids (values are never rotated)
                # TODO: with a cache, append k and v and attend to everything cached
                # TODO: causal attention with the padding mask, merge heads back to (B, T, H_q*D), project out
                ### BEGIN SOLUTION
                q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)     # (B, H_q, T, D)
                k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)
                v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)
                q = apply_rope_rotate_half(q, cos, sin, position_ids)
                k = apply_rope_rotate_half(k, cos, sin, position_ids)  # rotated once, before it is cached
                if cache is not None:
                    k, v = cache.update(k, v)                          # (B, H_kv, S_k, D): past and new
                out = attention(q, k, v, causal=True, key_padding_mask=key_padding_mask)  # (B, H_q, T, D)
                out = out.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)   # (B, T, H_q*D)
                return self.o_proj(out)                                                   # (B, T, d)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks load the weights of a Hugging Face `LlamaAttention` and compare outputs at the **real** tokens of
        a padded batch (what a layer writes at padding positions is unspecified: your attention returns zeros there,
        Hugging Face's a uniform average), for GQA, MHA and MQA, in fp32 and bf16; and they decode token by token with
        your `KVCache` against one full pass.
    """)
    lesson.md(r"""
        ## 5. Exercise `LlamaBlock`

        Two norms, two branches, two residual additions, in the order of section 1. Build the members from the
        building blocks of the setup cell, under the names of section 3: `input_layernorm`, `self_attn`,
        `post_attention_layernorm`, `mlp`. Both norms use the block's `eps` (`rms_norm_eps` in a Hugging Face config).
    """)
    lesson.exercise(
        "LlamaBlock",
        r'''
        class LlamaBlock(nn.Module):
            """Pre-norm Llama decoder layer; its state_dict() has LlamaDecoderLayer's keys."""

            def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                         intermediate_size: int, eps: float = 1e-6):
                super().__init__()
                # TODO: input_layernorm, self_attn, post_attention_layernorm, mlp
                ### BEGIN SOLUTION
                self.input_layernorm = RMSNorm(hidden_size, eps=eps)
                self.self_attn = LlamaAttention(hidden_size, num_heads, num_kv_heads, head_dim)
                self.post_attention_layernorm = RMSNorm(hidden_size, eps=eps)
                self.mlp = SwiGLU(hidden_size, intermediate_size)
                ### END SOLUTION

            def forward(self, x, cos, sin, position_ids, key_padding_mask=None, cache=None):
                """x: (B, T, d) the residual stream; the other arguments as in LlamaAttention.forward.
                returns (B, T, d) in x's dtype"""
                # TODO: h = x + attention of the normalised x;  y = h + SwiGLU of the normalised h
                ### BEGIN SOLUTION
                h = x + self.self_attn(self.input_layernorm(x), cos, sin, position_ids, key_padding_mask, cache)
                return h + self.mlp(self.post_attention_layernorm(h))  # (B, T, d)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The residual stream grows with depth: a picture

        The cell below stacks 24 of your blocks with random weights (the default `nn.Linear` initialisation, norm
        gains at 1), runs a batch through them, and plots the root-mean-square of the residual stream after every
        block. It does the same with the blocks rearranged as post-norm (the norm applied after each addition). In
        the pre-norm stack nothing rescales the stream, so every branch's output piles onto it; in the post-norm
        stack the stream is renormalised twice per block. This is why a pre-norm model ends with one more RMSNorm
        before its output head.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        depth, hidden, num_heads, head_dim, seq_len = 24, 64, 4, 16, 16
        try:
            blocks = [LlamaBlock(hidden, num_heads, 2, head_dim, 160).eval() for _ in range(depth)]
            cos, sin = rope_cache(seq_len, head_dim)
            positions = torch.arange(seq_len).expand(2, seq_len)
            x_pre = x_post = torch.randn(2, seq_len, hidden)
            rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
            pre_norm, post_norm = [rms(x_pre)], [rms(x_post)]
            with torch.no_grad():
                for block in blocks:
                    x_pre = block(x_pre, cos, sin, positions)
                    attn = block.self_attn(x_post, cos, sin, positions)
                    h = block.input_layernorm(x_post + attn)                       # post-norm: add, then normalise
                    x_post = block.post_attention_layernorm(h + block.mlp(h))
                    pre_norm.append(rms(x_pre)); post_norm.append(rms(x_post))
            plt.figure(figsize=(6, 3.2))
            plt.plot(pre_norm, marker=".", label="pre-norm (Llama): x + F(norm(x))")
            plt.plot(post_norm, marker=".", label="post-norm: norm(x + F(x))")
            plt.xlabel("blocks applied"); plt.ylabel("RMS of the residual stream")
            plt.title("scale of the residual stream with depth (random weights)"); plt.legend(fontsize=8)
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("finish LlamaAttention and LlamaBlock to see your stack")
    """)
    lesson.md(r"""
        ### Where a block's weights are

        The cell below builds your block at the sizes of three real models on PyTorch's `meta` device (shapes only,
        no memory) and counts the weights of each part. The FFN dominates, and GQA shrinks $W_k$ and $W_v$ by
        $H_q / H_{kv}$: in Llama-3-8B they are 4% of the block.
    """)
    lesson.code(r"""
        models = {  # hidden, query heads, KV heads, head dim, FFN hidden (from the released configs)
            "Llama-2-7B": (4096, 32, 32, 128, 11008),
            "Llama-3-8B": (4096, 32, 8, 128, 14336),
            "Llama-3-70B": (8192, 64, 8, 128, 28672),
        }

        def part_of(name):  # "self_attn.k_proj.weight" -> "k_proj + v_proj"
            if "layernorm" in name:
                return "norms"
            if name.startswith("mlp."):
                return "mlp (gate, up, down)"
            projection = name.split(".")[1]
            return "k_proj + v_proj" if projection in ("k_proj", "v_proj") else projection

        try:
            fig, ax = plt.subplots(figsize=(7, 3.2))
            left = [0.0] * len(models)
            counts = {part: [0.0] * len(models) for part in ("q_proj", "k_proj + v_proj", "o_proj",
                                                                "mlp (gate, up, down)", "norms")}
            for row, dims in enumerate(models.values()):
                with torch.device("meta"):  # shapes only: no memory, no initialisation
                    block = LlamaBlock(*dims)
                for name, param in block.named_parameters():
                    counts[part_of(name)][row] += param.numel() / 1e6
            for part, values in counts.items():
                ax.barh(list(models), values, left=left, label=part)
                left = [a + b for a, b in zip(left, values)]
            for row, total in enumerate(left):
                ax.text(total, row, f" {total:.0f}M", va="center", fontsize=8)
            ax.set_xlabel("weights per block (millions)"); ax.set_title("one decoder block, by part")
            ax.legend(fontsize=7, loc="lower right"); fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish LlamaBlock to see where its weights are")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`LlamaAttention`.** `view(B, T, H, D)` splits the last dimension into heads (head $h$ owns columns
        $hD \dots hD + D - 1$ of the projection, which is how the weights were trained), and `transpose(1, 2)` moves
        heads before time for the batched matmuls. RoPE goes on $q$ and $k$ only, before the cache. Attention is
        always causal; the padding mask and the cache extend it. Merging heads is the exact inverse:
        `transpose(1, 2)` first, *then* `reshape`.

        **`LlamaBlock`.** Two lines, and every token of them matters: the residual is the *un-normalised* input, the
        second norm reads $h$ (after the attention residual), and each norm has its own weight.

        **The usual mistakes, and why they are wrong**:
        - *`view(B, H, T, D)` instead of `view(B, T, H, D).transpose(1, 2)`*: the shapes are right and the heads are
          made of the wrong numbers, mixing tokens into heads.
        - *Merging heads without the transpose*: `out.reshape(B, T, H·D)` on `(B, H, T, D)`, the same mix-up on the
          way out.
        - *Keys not rotated*: scores lose their relative-position form; only a reference sees it.
        - *Positions taken as `0 .. T-1`*: harmless in a prefill, even a left-padded one (shifting a whole row by a
          constant changes no RoPE score), and wrong at every decoding step, where a one-token step would sit at
          position 0 and see every cached key at the wrong distance.
        - *No causal mask*: every token sees the future; a model trained this way learns to copy.
        - *Post-norm*, or *the residual taken after the norm*: both load the checkpoint and compute something else.
        - *One norm used twice*: `post_attention_layernorm`'s trained gain is ignored. The checks randomise the
          gains (a fresh Hugging Face layer has all-ones gains, which would hide this).

        **Cost.** Per token and layer, the projections cost $2d(2H_qD + 2H_{kv}D)$ FLOPs, the FFN $6dh$, and
        attention $4 H_q D S_k$ (scores and weighted sum over $S_k$ keys): for Llama-3-8B at $S_k = 8192$ that is
        about 0.08 + 0.35 + 0.13 GFLOP. The KV cache per token and layer is $2 H_{kv} D$ numbers, 4 KiB in bf16 for
        Llama-3-8B, 128 KiB over its 32 layers.

        **What production code does differently.**
        - *Fused projections*: vLLM and TensorRT-LLM run one `qkv_proj` GEMM and one `gate_up_proj` GEMM per layer.
        - *Fused residual + norm*: vLLM's `fused_add_rms_norm` adds the branch output to the residual and normalises
          in one kernel, returning both (the residual for the next addition, the normalised copy for the branch).
        - *Paged KV cache*: instead of `torch.cat` into a growing tensor (which copies the whole cache every step),
          vLLM writes each new key into fixed-size blocks of a preallocated pool and passes a block table to the
          attention kernel (PagedAttention); Hugging Face's `StaticCache` preallocates for `torch.compile`.
        - *No padding at all*: serving engines pack the batch's sequences into one flat token dimension with
          per-sequence offsets (`cu_seqlens` in FlashAttention's varlen API), so no FLOP is spent on padding.
        - *Tensor parallelism* (Megatron-LM): $W_q, W_k, W_v$ and gate/up are split by heads and hidden units across
          GPUs (column-parallel), $W_o$ and down by rows (row-parallel), with one all-reduce after each branch.
    """)
    lesson.mistakes()
    return lesson
