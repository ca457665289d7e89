"""Source of 02_PyTorch_Algorithms/11_Architecture_Tricks.ipynb (build: `python -m llm_algo build p02.architecture_tricks`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.architecture_tricks",
        path="02_PyTorch_Algorithms/11_Architecture_Tricks.ipynb",
        title_en="Architecture variants: QK-norm, sliding windows, parallel blocks, tied embeddings, soft-capping",
        title_zh="架构变体：QK 归一化、滑动窗口、并行块、共享词嵌入、Logit 软截断",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p02.rmsnorm", "p02.attention_mha_gqa"],
    )
    lesson.title(
        intro=r"""
        Open the `modeling_*.py` of any recent open model next to Llama's and most of the file is the same: RMSNorm,
        RoPE, grouped-query attention, a SwiGLU MLP. The differences are a handful of small changes, each a few lines,
        each added to fix a concrete problem: training instability, the cost of long contexts, throughput, parameter
        count. They are easy to get subtly wrong when you port or convert a model, because a wrong variant still
        runs and still produces text, only worse.

        **You will implement** four exercises: QK-norm as Qwen3 does it (`qk_norm`); sliding-window attention for
        decoding (`sliding_window`): the bottom-right aligned window mask and Mistral's rolling buffer KV cache, which
        holds `window` slots however long the sequence grows; PaLM's block and head (`parallel_and_tied`): the
        parallel attention/MLP block and tied input/output embeddings; and Gemma-2's logit soft-capping
        (`softcap_attention`), on its own and inside attention. **Graded against** Hugging Face modules built locally
        from tiny random configs: `Qwen3Attention`, a `MistralForCausalLM` with a sliding window decoding through your
        cache, `GPTJBlock`, `LlamaForCausalLM` with tied weights, `Gemma2ForCausalLM` and Gemma-2's eager attention;
        the mask functions of `transformers.masking_utils`; a full KV cache with a window mask over long decodes;
        `F.scaled_dot_product_attention` with explicit masks; and closed forms for the gradients.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：新模型相对 Llama 只差几处小改动（训练稳定性、长上下文成本、吞吐、参数量）；移植时写错的变体照样能跑、能出文本，只是更差。
        - **QK-norm（Qwen3）**：投影 `(B, T, H·D)` 先 view 成 `(B, T, H, D)` 再转置，按每个 head 的 $D$ 维做 RMSNorm，q 和 k 各用自己的 gain；不是对整个 $H\cdot D$ 投影归一化（OLMo-2 的做法）。
        - **Sliding-window mask**：右下对齐，query $i$ 的位置是 $\text{kv\_len}-\text{q\_len}+i$；允许条件 $0 \le \text{pos}_q - j < W$，恰好看到 $W$ 个 key，且必须保持 causal。
        - **Rolling buffer KV cache（Mistral）**：$W$ 个槽位，位置 $p$ 写入槽 $p \bmod W$，显存不随序列增长；先按时间顺序读出旧的 key（位置连续，掩码才能右下对齐），再写入新块；超过窗口的长 prompt 只写最后 $W$ 个位置。
        - **Parallel block（GPT-J、PaLM）**：$y = x + \operatorname{Attn}(h) + \operatorname{MLP}(h)$，$h=\operatorname{norm}(x)$，attention 和 MLP 读同一个归一化输入。
        - **Tied embeddings**：`lm_head.weight` 与 embedding 是同一个 Parameter（不是复制）；Gemma 的 $\sqrt{d}$ 缩放只乘在输入 embedding 上，不乘 logits。
        - **Soft-capping（Gemma-2）**：$\operatorname{cap}\cdot\tanh(x/\operatorname{cap})$；attention 中先乘 scale（默认 $1/\sqrt D$），再 cap，最后加 mask。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Five tricks and where they live

        | trick | problem it solves | used by (from the models' papers and HF code) |
        | --- | --- | --- |
        | QK-norm | attention logits grow during training until the softmax saturates and the loss spikes | ViT-22B, OLMo-2 (over the whole projection), Qwen3 and Gemma 3 (per head) |
        | sliding-window attention, rolling KV cache | attention cost and KV cache grow with the context | Mistral 7B (every layer, $W = 4096$), Gemma 2 (every other layer, $W = 4096$), Gemma 3 (5 of 6 layers, $W = 1024$) |
        | parallel block | two sequential sub-layers per block serialise two big matmuls | GPT-J, GPT-NeoX-20B, PaLM, Falcon, Cohere Command R |
        | tied embeddings | the input and output vocabulary matrices are the largest tensors of a small model | GPT-2, Gemma 1/2/3, Llama 3.2 1B and 3B, Qwen3 up to 4B |
        | logit soft-capping | extreme logits (attention or output) in a long training run | Gemma 2 (attention cap 50, final cap 30), Grok-1 |

        Numbers that show the stakes: Llama 3.2 1B's vocabulary matrix is $128256 \times 2048 = 262.7$ M parameters,
        21% of the model, and tying saves that much again. Mistral 7B with a 4096-token window keeps at most 4096
        keys per layer in its KV cache however long the conversation runs, instead of all of them.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        # Your RMSNorm from p02.rmsnorm (the reference where yours does not pass its checks yet)
        rms_norm = lesson.use("p02.rmsnorm", "rms_norm")
    """)
    lesson.md(r"""
        ## 2. QK-norm

        An attention logit is $s_{mn} = q_m^\top k_n / \sqrt{D}$ with $q = W_q x$, $k = W_k x$. Nothing bounds it: if
        training grows $W_q$ and $W_k$ by a factor $a$, every logit grows by $a^2$. Past a few tens the softmax is
        one-hot, its gradient vanishes for all other keys, and large models show loss spikes from exactly this
        (Dehghani et al., 2023, *Scaling Vision Transformers to 22B Parameters*; Wortsman et al., 2023). QK-norm
        applies an RMSNorm to every query and key vector **after the projection and before RoPE**:

        $$
        \hat q = \operatorname{RMSNorm}_{g_q}(q), \quad \hat k = \operatorname{RMSNorm}_{g_k}(k), \qquad
        |\hat q^\top \hat k| \le \lVert \hat q \rVert\,\lVert \hat k \rVert \le D \cdot \max|g_q| \cdot \max|g_k| .
        $$

        After the norm, each vector has RMS 1 before its gain, so the logit $\hat q^\top \hat k / \sqrt D$ is at
        most $\sqrt D \max|g_q|\max|g_k|$ however large $W_q$ and $W_k$ become; only the learned gains can scale
        it. RoPE comes after the norm, and a rotation keeps norms, so the bound survives RoPE.

        **Per head or over the whole projection?** Qwen3 normalises each head's $D$-vector with a gain of shape
        `(D,)` shared by all heads (Hugging Face's source says: "unlike olmo, only on the head dim"). OLMo-2
        normalises the whole `(H * D,)` projection with a gain of that size, before splitting heads. Both are QK-norm;
        a checkpoint fixes which one you must run, and they are not interchangeable.

        Shapes (Qwen3): the projections arrive as `q: (B, T, H_q * D)`, `k: (B, T, H_kv * D)`. View them as
        `(B, T, H, D)`, RMSNorm over the last axis, transpose to `(B, H, T, D)` for attention. Use your `rms_norm`
        from `p02.rmsnorm` (it computes in float32 and returns the input dtype).
    """)
    lesson.exercise(
        "qk_norm",
        r'''
        def qk_norm(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                    eps: float = 1e-6):
            """Per-head QK-norm (Qwen3): RMSNorm over the head dimension of every query and key head.

            q: (B, T, H_q * D), k: (B, T, H_kv * D)  the q_proj / k_proj outputs, any float dtype
            q_weight, k_weight: (D,)                  one gain per head dimension, shared by all heads
            returns (q_hat (B, H_q, T, D), k_hat (B, H_kv, T, D)) in the input dtype, ready for RoPE
            """
            B, T, _ = q.shape
            D = q_weight.shape[0]
            # TODO: split the last axis into heads: (B, T, H, D)
            # TODO: rms_norm over D with the right gain for q and for k
            # TODO: move the head axis in front of the time axis: (B, H, T, D)
            ### BEGIN SOLUTION
            q_heads = q.view(B, T, -1, D)                                  # (B, T, H_q, D)
            k_heads = k.view(B, T, -1, D)                                  # (B, T, H_kv, D)
            q_hat = rms_norm(q_heads, q_weight, eps).transpose(1, 2)       # (B, H_q, T, D)
            k_hat = rms_norm(k_heads, k_weight, eps).transpose(1, 2)       # (B, H_kv, T, D)
            return q_hat, k_hat
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with the `q_norm` and `k_norm` path of Hugging Face's `Qwen3Attention` and then run the
        whole `Qwen3Attention` forward against your normalised $q$, $k$ followed by RoPE, SDPA and `o_proj`. The cell
        below shows what the norm buys: it scales $W_q$ and $W_k$ up, as a long training run can, and plots the
        largest attention logit with and without QK-norm.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        B, T, hidden, heads, head_dim = 1, 64, 256, 4, 64
        x = torch.randn(B, T, hidden)
        w_q, w_k = torch.randn(heads * head_dim, hidden) / hidden**0.5, torch.randn(heads * head_dim, hidden) / hidden**0.5
        gains = torch.ones(head_dim)
        growth = [1, 2, 4, 8, 16, 32]
        largest = {"plain q, k": [], "QK-norm (yours)": []}
        for a in growth:
            q, k = x @ (a * w_q).T, x @ (a * w_k).T                                    # (B, T, H*D)
            plain = (q.view(B, T, heads, head_dim).transpose(1, 2) @ k.view(B, T, heads, head_dim).permute(0, 2, 3, 1))
            largest["plain q, k"].append(float(plain.abs().max()) / head_dim**0.5)
            try:
                q_hat, k_hat = qk_norm(q, k, gains, gains)
                largest["QK-norm (yours)"].append(float((q_hat @ k_hat.transpose(-1, -2)).abs().max()) / head_dim**0.5)
            except NotImplementedError:
                largest["QK-norm (yours)"].append(float("nan"))
        plt.figure(figsize=(6, 3.5))
        for name, values in largest.items():
            plt.loglog(growth, values, marker="o", label=name)
        plt.axhline(head_dim**0.5, color="grey", ls=":", label="bound √D (unit gains)")
        plt.xlabel("scale a of W_q and W_k"); plt.ylabel("largest |q·k| / √D")
        plt.title("attention logits as the projections grow"); plt.legend(fontsize=8); plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 3. Sliding-window attention: the mask and the rolling buffer cache

        Full causal attention lets query $i$ see every key $j \le i$: cost $O(T^2)$, and a decode step reads the whole
        KV cache. A sliding window of size $W$ keeps only the last $W$ keys, **including the query's own position**:

        $$
        \text{allowed}(i, j) \iff 0 \le p_i - j < W ,
        $$

        where $p_i$ is query $i$'s absolute position. This is Hugging Face's convention
        (`masking_utils.sliding_window_overlay`: `kv_idx > q_idx - sliding_window`, combined with causality) and
        FlashAttention's `window_size=(W - 1, 0)`. Conventions differ by one between code bases ($W$ keys including
        the query, or $W$ past keys plus the query): read the mask function of the checkpoint's reference code before
        you port one. Information still travels further than $W$: after $L$ layers a token can depend on tokens up to
        $L(W-1)$ positions back, like the receptive field of a stack of convolutions.

        **Bottom-right alignment.** With a KV cache the queries are the *last* $S_q$ of the $S_k$ positions: query
        $i$ is at $p_i = S_k - S_q + i$. Aligning the mask at the top-left instead ($p_i = i$) is right only when
        $S_q = S_k$. For a decode step ($S_q = 1$) it lets the new token see only key 0. FlashAttention switched to
        bottom-right alignment for $S_q \ne S_k$ in version 2.1. PyTorch's `F.scaled_dot_product_attention(...,
        is_causal=True)` is top-left aligned (its documentation says so); for the other alignment it provides
        `torch.nn.attention.bias.causal_lower_right`. Passing an explicit boolean mask, as here, avoids the question.

        ### The rolling buffer KV cache

        A decode step at position $p$ reads only keys $p - W + 1, \dots, p$; everything older is dead weight. So
        Mistral 7B keeps a **rolling buffer** of $W$ slots per layer (Jiang et al., 2023, *Mistral 7B*, §2: the keys
        and values of timestep $i$ are stored in position $i \bmod W$ of the cache). Position $p$ is written to slot
        $p \bmod W$, over the position $p - W$ that has just left the window, and the cache never grows. For Mistral
        7B (32 layers, 8 KV heads of 128, fp16) one token's keys and values take $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2$
        bytes = 128 KiB: a 32k-token sequence needs 4 GiB with a full cache and 512 MiB with $W = 4096$, the 8×
        saving the paper reports at that length.

        Three things make it more than `cache[p % W] = k`:

        1. **Order and positions.** Once the buffer has wrapped, slot order is not time order: with $W = 4$ after six
           tokens the slots hold positions $[4, 5, 2, 3]$. The keys were rotated by RoPE at their own positions before
           they were cached, and attention sums over keys, so the order alone changes nothing; but the mask depends
           on each key's position. Read the slots **oldest first** (positions $s - P, \dots, s - 1$ with $s$ the
           number of positions seen and $P = \min(s, W)$; position $q$ lives in slot $q \bmod W$), append the $T$
           new keys, and the $S = P + T$ keys are consecutive positions whose last $T$ are the queries': the mask is
           `sliding_window_mask(T, S, W)`, bottom-right aligned, your function from above.
        2. **Chunks: read, then write.** A prefill or chunked-prefill step brings $T > 1$ tokens. Its first query
           (position $s$) still needs the old keys down to $s - W + 1$, and the chunk's own writes would overwrite
           them. Gather the past first, then write.
        3. **Prompts longer than the window.** A prompt of $T > W$ tokens attends over all of its $T$ keys (each of
           its queries sees its own window inside the prompt), but only its last $W$ positions are written: the
           earlier ones would be overwritten in the same step anyway.

        | object | shape |
        | --- | --- |
        | `cache.keys`, `cache.values` (the ring) | `(B, H_kv, W, D)`, allocated at the first update, never larger |
        | `cache.seen` | positions written so far: the new chunk is positions `seen .. seen + T - 1` |
        | `update(k, v)` arguments | `(B, H_kv, T, D)`, keys already rotated |
        | returned `keys`, `values` | `(B, H_kv, P + T, D)`, the $P = \min(\text{seen}, W)$ cached positions oldest first, then the new ones |
        | returned `mask` | `(T, P + T)` bool, True where a new query may attend |

        The oldest returned key (position $s - W$ once the ring is full) is one step out of every new query's window,
        so the mask hides it; returning only $W - 1$ past keys, as Hugging Face's `DynamicSlidingWindowLayer` does, is
        just as correct. The checks run `F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)` on what you
        return, and compare with attention over a full cache with a window mask.

        Write `sliding_window_mask(q_len, kv_len, window)`, a `(q_len, kv_len)` boolean tensor, True where attention
        is allowed, bottom-right aligned (`window=None` is the plain causal mask), and `RollingKVCache.update`.
    """)
    lesson.exercise(
        "sliding_window",
        r'''
        def sliding_window_mask(q_len: int, kv_len: int, window: int | None = None) -> torch.Tensor:
            """Causal (optionally sliding-window) attention mask, bottom-right aligned.

            returns (q_len, kv_len) bool, True where query i may attend key j: query i sits at absolute position
            kv_len - q_len + i; it sees key j when j <= that position and (window is None or position - j < window)
            """
            if q_len > kv_len:
                raise ValueError(f"the queries are the last q_len of the kv_len positions: q_len={q_len} > kv_len={kv_len}")
            # TODO: the absolute position of every query (bottom-right alignment) and of every key
            # TODO: distance = query position - key position, (q_len, kv_len)
            # TODO: allowed where distance >= 0 (causal) and, with a window, distance < window
            ### BEGIN SOLUTION
            query_pos = torch.arange(kv_len - q_len, kv_len)                   # (q_len,)
            key_pos = torch.arange(kv_len)                                     # (kv_len,)
            distance = query_pos[:, None] - key_pos[None, :]                   # (q_len, kv_len)
            allowed = distance >= 0                                            # causal
            if window is not None:
                allowed = allowed & (distance < window)                        # the last `window` keys, self included
            return allowed
            ### END SOLUTION


        class RollingKVCache:
            """Mistral's rolling buffer KV cache for one layer: the keys and values of the last `window` positions of
            every sequence, position p in slot p % window.

            keys, values: (B, H_kv, window, D), allocated at the first update (None before), never larger
            seen: the number of positions written so far (the position of the next token)
            """

            def __init__(self, window: int):
                if window < 1:
                    raise ValueError(f"window must be at least 1, got {window}")
                self.window = window
                self.keys = self.values = None
                self.seen = 0

            def update(self, k: torch.Tensor, v: torch.Tensor):
                """k, v: (B, H_kv, T, D) keys (already rotated) and values of positions seen .. seen + T - 1.

                returns (keys, values, mask): keys, values (B, H_kv, P + T, D) with the P = min(seen, window) cached
                positions oldest first, then the T new ones; mask (T, P + T) bool, True where a new query may attend
                """
                if k.dim() != 4 or k.shape != v.shape:
                    raise ValueError(f"k and v must both be (B, H_kv, T, D), got {tuple(k.shape)} and {tuple(v.shape)}")
                B, H, T, D = k.shape
                W = self.window
                if self.keys is None:
                    self.keys, self.values = k.new_zeros(B, H, W, D), v.new_zeros(B, H, W, D)
                elif self.keys.shape != (B, H, W, D) or self.keys.dtype != k.dtype:
                    raise ValueError(f"this cache holds (B, H_kv, D) = {tuple(self.keys.shape[:2])} + "
                                     f"({self.keys.shape[-1]},) in {self.keys.dtype}, got k {tuple(k.shape)} {k.dtype}")
                # TODO: the positions still in the ring (at most W, oldest first) and their slots (position % W)
                # TODO: keys/values to attend to = those slots in that order, then the new k/v; the mask for them
                # TODO: write the last min(T, W) new positions into their slots (after reading!), advance seen
                ### BEGIN SOLUTION
                past = torch.arange(max(0, self.seen - W), self.seen)             # (P,) oldest first
                slots = past % W                                                  # where each one lives
                keys = torch.cat((self.keys[:, :, slots], k), dim=2)              # (B, H_kv, P + T, D)
                values = torch.cat((self.values[:, :, slots], v), dim=2)          # (B, H_kv, P + T, D)
                mask = sliding_window_mask(T, keys.shape[2], W)                   # (T, P + T), bottom-right
                kept = torch.arange(self.seen, self.seen + T)[-W:]                # the last min(T, W) new positions
                self.keys[:, :, kept % W] = k[:, :, T - len(kept):]
                self.values[:, :, kept % W] = v[:, :, T - len(kept):]
                self.seen += T
                return keys, values, mask
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare your mask with `transformers.masking_utils` and with a per-query loop. They decode random
        keys through your cache (batches of two and three, GQA, windows of 1 to 6, prompts shorter and longer than
        the window, single tokens and chunks, over several windows' worth of tokens) against attention over a full
        cache with a window mask; check after every step that slot $p \bmod W$ holds position $p$; and run a tiny
        `MistralForCausalLM` (`sliding_window=4`) token by token through one of your caches per layer against its own
        full forward pass.

        The cells below draw your masks, then the ring: the position held by each of $W = 4$ slots after a 3-token
        prompt and every decode step, next to the KV-cache size of Mistral 7B with and without the window.
    """)
    lesson.code(r"""
        cases = [(8, 8, None, "causal, S_q = S_k = 8"), (8, 8, 3, "window 3, S_q = S_k = 8"),
                 (3, 8, 3, "window 3, S_q = 3, S_k = 8 (bottom-right)"), (1, 8, 3, "decode step: S_q = 1, window 3")]
        fig, axes = plt.subplots(1, 4, figsize=(12, 2.8))
        for ax, (q_len, kv_len, window, title) in zip(axes, cases):
            try:
                ax.imshow(sliding_window_mask(q_len, kv_len, window), cmap="Greens", vmin=0, vmax=1.3)
            except NotImplementedError:
                ax.text(0.5, 0.5, "not written yet", ha="center", transform=ax.transAxes)
            ax.set_title(title, fontsize=8); ax.set_xlabel("key j"); ax.set_ylabel("query i")
            ax.set_xticks(range(kv_len)); ax.set_yticks(range(q_len))
        fig.tight_layout()
        plt.show()
    """)
    lesson.code(r"""
        window, prompt, steps = 4, 3, 9
        fig, (ring_ax, memory_ax) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [1.2, 1]})
        try:
            cache, held = RollingKVCache(window), []
            for start, stop in [(0, prompt)] + [(p, p + 1) for p in range(prompt, prompt + steps)]:
                stamp = torch.arange(start, stop, dtype=torch.float32).view(1, 1, -1, 1)  # a key that says its position
                cache.update(stamp, stamp)
                held.append([int(cache.keys[0, 0, slot, 0]) if slot < min(cache.seen, window) else -1
                             for slot in range(window)])
            grid = torch.tensor(held).T.float()                                         # (slots, steps)
            ring_ax.imshow(grid.masked_fill(grid < 0, float("nan")), cmap="viridis", aspect="auto")
            for (slot, step), position in zip(torch.cartesian_prod(torch.arange(window), torch.arange(len(held))),
                                              grid.flatten()):
                if position >= 0:
                    ring_ax.text(step, slot, int(position), ha="center", va="center", color="white", fontsize=8)
            for column in range(1, len(held)):                                          # the slot each step wrote
                slot = (prompt + column - 1) % window
                ring_ax.add_patch(plt.Rectangle((column - 0.5, slot - 0.5), 1, 1, fill=False, ec="red", lw=2))
            ring_ax.set_xticks(range(len(held)), [f"0..{prompt - 1}"] + [str(p) for p in range(prompt, prompt + steps)],
                               fontsize=7)
            ring_ax.set_yticks(range(window))
        except NotImplementedError:
            ring_ax.text(0.5, 0.5, "write RollingKVCache to see the ring", ha="center", transform=ring_ax.transAxes)
        ring_ax.set_xlabel("positions written by the update"); ring_ax.set_ylabel("slot")
        ring_ax.set_title(f"positions held by a ring of W = {window} slots (red: written by that step)", fontsize=9)

        context = torch.linspace(0, 32768, 129)
        per_token = 2 * 32 * 8 * 128 * 2                        # K and V, 32 layers, 8 KV heads of 128, fp16 bytes
        memory_ax.plot(context, context * per_token / 2**30, label="full KV cache")
        memory_ax.plot(context, context.clamp(max=4096) * per_token / 2**30, label="rolling buffer, W = 4096")
        memory_ax.set_xlabel("tokens in the sequence"); memory_ax.set_ylabel("GiB per sequence")
        memory_ax.set_title("Mistral 7B KV cache (fp16)", fontsize=9); memory_ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 4. PaLM's block and head: parallel layers and tied embeddings

        PaLM (Chowdhery et al., 2022, §2) lists its changes to the Transformer: SwiGLU, **parallel layers**, multi-query
        attention, RoPE, **shared input-output embeddings**, no biases, and its vocabulary. SwiGLU, RoPE and bias-free
        layers you have written; multi-query attention is grouped-query attention with one KV head. This section writes
        the other two, in one exercise: both change how the pieces are wired, not what they compute.

        ### The parallel block

        A Llama block is sequential: $h = x + \operatorname{Attn}(\operatorname{Norm}_1(x))$, then
        $y = h + \operatorname{MLP}(\operatorname{Norm}_2(h))$. GPT-J and PaLM compute both branches **from the same
        normalised input** and add them to the residual together:

        $$
        y = x + \operatorname{Attn}(\operatorname{Norm}(x)) + \operatorname{MLP}(\operatorname{Norm}(x)) .
        $$

        The attention's $W_q, W_k, W_v$ and the MLP's input matrices now multiply the same tensor, so they can be
        concatenated into one wide matmul, and the two output projections into another. PaLM reports about 15%
        faster training at large scale with this, and a small quality cost at 8B that vanished at 62B (Chowdhery et
        al., 2022). GPT-J and PaLM use **one** norm for both branches; GPT-NeoX's `use_parallel_residual` keeps two
        separate norms (`input_layernorm`, `post_attention_layernorm`), both applied to $x$.

        `parallel_block(x, norm, attention, mlp)` takes the three sub-layers as callables `(B, T, H) -> (B, T, H)`
        and calls the norm once.

        ### Tied embeddings

        The input embedding $E \in \mathbb{R}^{V \times H}$ maps a token id to a vector ($x_t = E_{\text{id}_t}$, a row
        gather), and the output head maps the final hidden state to logits over the vocabulary
        ($z = h W_{\text{out}}^\top$, $W_{\text{out}} \in \mathbb{R}^{V \times H}$). **Tying** sets
        $W_{\text{out}} = E$: one tensor, used twice. In PyTorch that is one `nn.Parameter` object held by two
        modules, `self.lm_head.weight = self.embed_tokens.weight`; a copy is not a tie, since the two copies drift apart
        at the first optimizer step.

        **What it does to the gradient.** The loss depends on $E$ through both uses, so autograd adds the two
        contributions into the one `.grad`:

        $$
        \frac{\partial L}{\partial E} = \underbrace{\Big(\frac{\partial L}{\partial z}\Big)^{\!\top} h}_{\text{output head: dense, every row}}
        \; + \; \underbrace{\sum_t \mathbf{e}_{\text{id}_t}\, \Big(\frac{\partial L}{\partial x_t}\Big)^{\!\top}}_{\text{input embedding: only the rows of tokens that occur}} .
        $$

        Every row of $E$ receives gradient from the output head on every step (every token's logit enters the
        softmax); only the rows of the tokens present get the embedding part. Tying therefore also trains the
        input vectors of rare tokens.

        **Gemma's scale.** Gemma multiplies the input embeddings by $\sqrt{H}$ (rounded to the model dtype) and not the
        logits, as the original Transformer did with its tied embeddings ("we multiply those weights by
        $\sqrt{d_{\text{model}}}$"). The scale is a constant, so it only scales the embedding part of the gradient.

        `TiedEmbeddings(vocab_size, hidden_size, embed_scale)` has `embed(ids) -> (B, T, H)` (times `embed_scale`),
        `logits(h) -> (B, T, V)`, and exactly one parameter. Write both.
    """)
    lesson.exercise(
        "parallel_and_tied",
        r'''
        def parallel_block(x: torch.Tensor, norm, attention, mlp) -> torch.Tensor:
            """GPT-J / PaLM parallel residual block: both branches read the same normalised input.

            x: (B, T, H); norm, attention, mlp: callables (B, T, H) -> (B, T, H)
            returns (B, T, H)
            """
            # TODO: normalise once; feed the same tensor to attention and to the MLP; add both to the residual
            ### BEGIN SOLUTION
            h = norm(x)                                # (B, T, H), computed once, read by both branches
            return x + attention(h) + mlp(h)           # (B, T, H)
            ### END SOLUTION


        class TiedEmbeddings(nn.Module):
            """Input embedding and output head sharing one (vocab_size, hidden_size) weight.

            embed(input_ids (B, T) int64) -> (B, T, H): weight rows times embed_scale (Gemma: sqrt(H); Llama: 1)
            logits(hidden (B, T, H)) -> (B, T, V):     hidden @ weight.T, no bias, no scale
            parameters(): exactly one tensor, (V, H)
            """

            def __init__(self, vocab_size: int, hidden_size: int, embed_scale: float = 1.0):
                super().__init__()
                # TODO: an nn.Embedding and a bias-free nn.Linear whose weight IS the embedding's weight
                ### BEGIN SOLUTION
                self.embed_tokens = nn.Embedding(vocab_size, hidden_size)                # weight (V, H)
                self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
                self.lm_head.weight = self.embed_tokens.weight                           # the same Parameter object
                self.embed_scale = embed_scale
                ### END SOLUTION

            def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
                # TODO: gather the rows, scale them
                ### BEGIN SOLUTION
                return self.embed_tokens(input_ids) * self.embed_scale                   # (B, T, H)
                ### END SOLUTION

            def logits(self, hidden: torch.Tensor) -> torch.Tensor:
                # TODO: project onto the vocabulary with the shared weight
                ### BEGIN SOLUTION
                return self.lm_head(hidden)                                              # (B, T, V)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Logit soft-capping

        Gemma 2 bounds two kinds of logits smoothly: $\operatorname{cap}_c(x) = c \tanh(x / c)$. Near zero it is the
        identity ($\tanh u \approx u$, so $\operatorname{cap}_c(x) \approx x$ for $|x| \ll c$); for large $|x|$ it
        saturates at $\pm c$. Its derivative $1 - \tanh^2(x/c)$ is 1 at zero and decays smoothly, so unlike
        `clamp`, a capped logit still gets a (small) gradient. Gemma 2 uses $c = 50$ on the attention logits (after
        the $1/\sqrt D$ scale) and $c = 30$ on the final vocabulary logits.

        **Order inside attention.** Scale, cap, *then* mask, then softmax. If the mask is added first, $-\infty$ goes
        into the tanh and comes out as $-c$: masked keys get the weight $e^{-c}$ relative to a logit of 0, which is
        not zero (at $c = 5$ it is 0.7%), so future tokens leak into the past.

        **The cost.** A cap is elementwise, but it sits between $QK^\top$ and the softmax, inside the fused attention
        kernel. `F.scaled_dot_product_attention` has no soft-cap argument, so Gemma 2 needs a kernel that supports it:
        FlashAttention added `softcap` for it (2.6), FlexAttention expresses it as a `score_mod`, and Hugging Face
        falls back to eager attention or those kernels. Gemma 3 replaced soft-capping by QK-norm, which keeps the
        standard kernels.

        Write `soft_cap(x, cap)` (computed in at least float32, returned in x's dtype), then `softcap_attention`
        with it.
    """)
    lesson.exercise(
        "softcap_attention",
        r'''
        def soft_cap(x: torch.Tensor, cap: float) -> torch.Tensor:
            """Gemma-2 soft-capping cap * tanh(x / cap): about x for |x| << cap, smoothly bounded by +-cap.

            x: any shape, any float dtype; returns the same shape and dtype (computed in at least float32)
            """
            # TODO: upcast, divide by the cap, tanh, multiply by the cap, cast back
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            return (cap * torch.tanh(x.to(compute_dtype) / cap)).to(x.dtype)
            ### END SOLUTION


        def softcap_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softcap: float | None = None,
                              mask: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
            """Attention with Gemma-2 logit soft-capping: softmax(mask(cap(q k^T * scale))) v.

            q: (B, H, S_q, D); k, v: (B, H, S_k, D); mask: bool broadcastable to (B, H, S_q, S_k), True = attend
            softcap None: no capping; scale None: 1 / sqrt(D)
            returns (B, H, S_q, D) in q's dtype; scores and softmax in at least float32
            """
            # TODO: scores in at least float32, times the scale
            # TODO: soft-cap them (if softcap is given), THEN mask with -inf, then softmax over the keys
            # TODO: weights @ v, cast to q's dtype
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(q.dtype, torch.float32)
            scale = q.shape[-1] ** -0.5 if scale is None else scale
            scores = (q.to(compute_dtype) @ k.to(compute_dtype).transpose(-2, -1)) * scale   # (B, H, S_q, S_k)
            if softcap is not None:
                scores = soft_cap(scores, softcap)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(dim=-1)                                                 # (B, H, S_q, S_k)
            return (weights @ v.to(compute_dtype)).to(q.dtype)                               # (B, H, S_q, D)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        x = torch.linspace(-120, 120, 961)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.3))
        left.plot(x, x, color="grey", ls=":", label="no cap")
        left.plot(x, x.clamp(-30, 30), color="grey", ls="--", label="clamp at 30")
        try:
            for cap in (30.0, 50.0):
                xg = x.clone().requires_grad_()
                capped = soft_cap(xg, cap)
                capped.sum().backward()
                left.plot(x, capped.detach(), label=f"soft_cap, c = {cap:g}")
                right.plot(x, xg.grad, label=f"d/dx, c = {cap:g}")
        except NotImplementedError:
            pass  # not attempted yet: only the reference lines
        right.plot(x, ((x > -30) & (x < 30)).float(), color="grey", ls="--", label="d/dx clamp")
        left.set_xlabel("logit x"); left.set_ylabel("capped logit"); left.legend(fontsize=8)
        right.set_xlabel("logit x"); right.set_ylabel("gradient"); right.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`qk_norm`.** `view(B, T, -1, D)` splits the last axis into heads *before* the norm, so each head's
        $D$-vector is normalised on its own; then `transpose(1, 2)` gives the attention layout. The gain has shape
        `(D,)` and broadcasts over heads. Cost: one RMSNorm per head vector, $O(BTHD)$, nothing next to the
        projections; it is memory-bound, so serving engines fuse it with RoPE into one pass over $q$ and $k$ where
        they can.

        **`sliding_window_mask`.** Absolute positions make the alignment explicit: queries are
        `arange(kv_len - q_len, kv_len)`. One integer comparison per (query, key). Production kernels never build
        the mask: FlashAttention skips the key blocks outside the band (so cost is $O(T W)$), and the KV cache of
        a sliding layer keeps only the last $W$ positions (your rolling buffer; vLLM's KV cache manager frees the
        blocks that fall out of the window).

        **`RollingKVCache.update`.** `past % W` turns the positions still in the ring into slots, oldest first, so the
        gathered keys are consecutive positions and the bottom-right aligned mask needs no other position bookkeeping.
        The read comes before the write because a chunk's first queries still need keys that the chunk's own writes
        replace; `[-W:]` writes only the new positions that survive the step. For a single decode token the order
        does not matter (the key it overwrites, position $p - W$, is just outside the window), which is why decode
        kernels can write the new key first and then attend to every valid slot of the ring. Memory: $2 W H_{kv} D$
        numbers per layer and sequence, whatever the length; a decode step writes one slot. The gather and `torch.cat`
        copy the window at every step (Hugging Face's dynamic cache does the same); a serving kernel reads the ring in
        place: with the keys already rotated, the softmax does not care about their order, so it needs only the
        number of valid slots and, for chunks, each slot's position.

        **`parallel_block`.** One norm, two branches, one sum. The speed gain comes from fusing the branches'
        input matmuls, which a framework can only do because both read `h`.

        **`TiedEmbeddings`.** Assigning the `Parameter` object shares storage and gradient. `parameters()` yields it
        once (PyTorch deduplicates), and `state_dict()` lists it under both names. Safetensors refuses to save
        shared tensors twice, which is why Hugging Face drops `lm_head.weight` at save time and re-ties from
        `tie_word_embeddings` at load time.

        **`soft_cap` and `softcap_attention`.** Upcast, divide, tanh, multiply, cast back; in attention the cap sits
        between the scale and the mask.

        **The usual mistakes, and why they are wrong**:
        - *QK-norm over the whole projection* (OLMo-2's variant) where a per-head checkpoint (Qwen3) is loaded.
        - *`view(B, -1, T, D)` instead of `view(B, T, -1, D)` then transpose*: the right shape with the heads
          scrambled across time steps.
        - *$q$'s gain used for $k$*: a copy-paste slip.
        - *Top-left alignment*: correct for prefill, wrong for every decode step.
        - *Window off by one* (`<=` window): $W + 1$ keys.
        - *Window without causality* (`|i - j| < W`): the future leaks in.
        - *The ring read in storage order* (slots $0 \dots P-1$): right until the buffer wraps, then the mask hides the
          wrong key.
        - *Write before read*: a chunk's first queries lose keys that are still in their window.
        - *The first $W$ positions of a long prompt kept* instead of the last: every later step attends to stale keys.
        - *`seen += 1` after a chunk*: the cache's idea of the positions drifts from the model's.
        - *The cache's mask without the window*: a long prompt's queries see further back than $W$.
        - *Sequential wiring* (the MLP reads $x + \operatorname{Attn}$), the MLP on the un-normalised $x$, or no
          residual.
        - *A copied weight* instead of a shared one: equal at initialisation, two parameters, gradients not summed.
        - *The embedding scale applied to the logits* as well, or not at all.
        - *`cap * tanh(x)`* (no division): saturates at $|x| \approx 2$. *`clamp`*: same range, zero gradient past
          the cap. *`tanh(x / cap)`*: squashed into $(-1, 1)$.
        - *Mask before the cap*: $-\infty$ becomes $-c$, and masked keys get weight.
        - *Scale after the cap*: Gemma 2 caps the scaled logits, so the cap would act on values $\sqrt D$ times larger.
        - *A default scale of $1/D$* instead of $1/\sqrt D$: every attention distribution too flat.

        **What production systems do.** Hugging Face `Qwen3Attention` and `Gemma3Attention` apply `q_norm`/`k_norm` in
        exactly your order (projection, view, norm, transpose, RoPE). Mistral, Gemma 2 and Gemma 3 pass
        `sliding_window` to FlashAttention as `window_size` and build per-layer masks with `masking_utils` for the
        other backends; Gemma alternates sliding and global layers (`layer_types`). Mistral's reference implementation
        (`mistral-inference`, `RotatingBufferCache`) is your ring for all layers at once, `(layers, batch, W, H_kv, D)`,
        written at `position % sliding_window`, with a length per sequence so that a batch may mix lengths; the paper
        prefills long prompts in window-sized chunks, so that a chunk never needs more than the ring plus itself.
        Hugging Face's `DynamicSlidingWindowLayer` keeps the last $W - 1$ keys by concatenating and slicing; its
        `StaticSlidingWindowLayer` (for `torch.compile`) keeps $W$ slots but rolls the whole buffer left by one at each
        decode step instead of writing slot $p \bmod W$. mlx-lm's `RotatingKVCache` keeps the first `keep` tokens for
        ever next to its ring (the attention sinks of StreamingLLM, Xiao et al., 2023). `GPTJBlock` is your
        `parallel_block` with LayerNorm. `PreTrainedModel.tie_weights` implements `tie_word_embeddings`.
        `Gemma2ForCausalLM` caps the final logits right after `lm_head`; vLLM and FlashAttention take `softcap` as a
        kernel argument.
    """)
    lesson.mistakes()
    return lesson
