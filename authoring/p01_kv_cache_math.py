"""Source of 01_Hardware_Math_Systems/07_KV_Cache_Math.ipynb (build with `python -m llm_algo build p01.kv_cache_math`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.kv_cache_math",
        path="01_Hardware_Math_Systems/07_KV_Cache_Math.ipynb",
        title_en="KV cache memory",
        title_zh="KV 缓存的内存账",
        difficulty="easy",
        device="cpu",
        minutes=50,
        prerequisites=["p01.params_and_flops"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 自回归解码 (decoding) 时每个 token 的 K、V 都要缓存：MHA/GQA 每 token 字节数 $= 2 \cdot L \cdot K \cdot d_h
          \cdot$ 每元素字节数，$K$ 是 KV 头数。
        - Llama-3-8B（bf16）每 token 128 KiB，8k 上下文一条序列就是 1 GiB；70B 每 token 320 KiB。
        - GQA 把 KV 头从 $H$ 减到 $K$，缓存缩小 $H/K$ 倍；MLA（DeepSeek-V2/V3）只缓存一个压缩潜向量
          $r_{kv}$ 加共享的 RoPE 键 $d_{rope}$：每层每 token $r_{kv}+d_{rope}$ 个元素，与头数无关。
        - 显存预算 (memory budget)：权重之外的显存全部给 KV 缓存；按块 (block, vLLM 默认 16 token) 分配时要向上取整。
        - 解码每一步都要把权重和所有序列的 KV 缓存从 HBM 读一遍：吞吐上限 = 带宽 ÷ 每步字节数 × 批大小。
        - 这些数字都与 `transformers` 的 `DynamicCache` 实际分配的张量逐字节比对。
        {易错点}

        Serving an LLM is mostly a memory problem. Every generated token attends to the keys and values of every
        earlier token, so an inference server keeps them, the KV cache (KV 缓存), in GPU memory for as long as a
        request lives. For Llama-3-8B in BF16 that is 128 KiB per token: a single 128k-token conversation holds 16 GiB,
        as much as the model's weights. How many requests fit on a GPU, and how fast each decoding step can possibly be,
        both follow from this one number.

        **You will implement** the KV-cache bytes per token for multi-head, grouped-query and multi-head latent
        attention, the number of sequences that fit in a memory budget with block (paged) allocation, and the
        memory-bandwidth bound of a decoding step. **Graded against** the bytes of the `DynamicCache` that
        `transformers` actually allocates for small Llama, Qwen3, Mixtral and DeepSeek-V3 models (fp32, fp16, bf16),
        a brute-force allocator that adds sequences block by block, and a loop over the sequences of a batch.
    """
    )
    lesson.md(r"""
        ## 1. What is cached, with shapes

        In layer $\ell$, attention projects each token's hidden state $x_t \in \mathbb{R}^{d}$ to a query, a key and a
        value. Decoding token $t$ needs the keys and values of tokens $0..t-1$; recomputing them every step would
        cost a full forward pass over the prefix, so they are stored. Per layer, for a batch of $B$ sequences of $T$
        tokens, Hugging Face's `DynamicCache` holds

        $$
        K_\ell, V_\ell : (B, K, T, d_h) \qquad \Rightarrow \qquad
        \text{bytes per token} = 2 \cdot L \cdot K \cdot d_h \cdot s ,
        $$

        with $K$ the number of key/value heads, $d_h$ the head size, $L$ the number of layers and $s$ the bytes per
        element (2 for BF16/FP16, 1 for an FP8 cache).

        - **MHA** (multi-head attention): $K = H$. Llama-2-7B: $2 \cdot 32 \cdot 32 \cdot 128 \cdot 2 = 512$ KiB/token.
        - **GQA** (grouped-query attention, Ainslie et al., 2023): $H/K$ query heads share one key/value head. Llama-3-8B
          has $H = 32$, $K = 8$: $2 \cdot 32 \cdot 8 \cdot 128 \cdot 2 = 131072$ B = 128 KiB/token, 4× less at
          the same width. Llama-3-70B: $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 320$ KiB/token. Mixtral-8x7B has
          Llama's attention ($L = 32$, $K = 8$): 128 KiB/token; its experts do not touch the cache.
        - **MLA** (multi-head latent attention, DeepSeek-V2, arXiv:2405.04434): every head's key and value are
          reconstructed from one compressed latent $c_t \in \mathbb{R}^{r_{kv}}$ (`kv_lora_rank`) and one rotary key
          $k^{R}_t \in \mathbb{R}^{d_{rope}}$ (`qk_rope_head_dim`) shared by all heads. Serving engines (vLLM,
          SGLang, and `transformers` itself) cache only those: $L \cdot (r_{kv} + d_{rope}) \cdot s$ bytes per token,
          whatever the number of heads. DeepSeek-V3 ($L = 61$, $r_{kv} = 512$, $d_{rope} = 64$):
          $61 \cdot 576 \cdot 2 = 70272$ B, about 69 KiB/token, for a model 80 times larger than Llama-3-8B. The
          DeepSeek-V2 paper (Table 1) puts it as the cache of GQA with 2.25 groups.
    """)
    lesson.setup(r"""
        import math
        import warnings

        import matplotlib.pyplot as plt
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' tqdm import warns inside a kernel without ipywidgets
            from transformers import DeepseekV3Config, LlamaConfig, MixtralConfig, Qwen3Config

        # Published configurations (config.json on the Hugging Face Hub), the fields the cache depends on.
        PUBLISHED = {
            "Llama-2-7B (MHA)": LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                            num_key_value_heads=32),
            "Llama-3-8B": LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                      num_key_value_heads=8),
            "Llama-3-70B": LlamaConfig(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                                       num_key_value_heads=8),
            "Qwen3-8B": Qwen3Config(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                                    num_key_value_heads=8, head_dim=128),
            "Mixtral-8x7B": MixtralConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                          num_key_value_heads=8),
            "DeepSeek-V3 (MLA)": DeepseekV3Config(hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
                                                  kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                                  v_head_dim=128, q_lora_rank=1536),
        }
        GiB = 2**30
    """)
    lesson.md(r"""
        ## 2. Exercise `kv_bytes_per_token`

        Bytes of KV cache one token occupies across all layers, for the element type `dtype` (a `torch.dtype`; its
        size is `torch.empty((), dtype=dtype).element_size()` or `torch.finfo(dtype).bits // 8`). Configs of
        `model_type` `"llama"`, `"qwen3"` and `"mixtral"` cache keys and values per KV head; `"deepseek_v3"` caches the
        MLA latent and the shared rotary key. Refuse any other model type with a `ValueError`.
    """)
    lesson.exercise(
        "kv_bytes_per_token",
        r'''
        def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
            """KV-cache bytes per token (all layers) of a Llama/Qwen3/Mixtral (GQA) or DeepSeek-V3 (MLA) config."""
            # TODO: bytes per element of dtype
            # TODO: GQA/MHA: keys and values, num_key_value_heads heads of head_dim (config.head_dim or d // H)
            # TODO: MLA: kv_lora_rank + qk_rope_head_dim elements per layer
            ### BEGIN SOLUTION
            element = torch.empty((), dtype=dtype).element_size()
            if config.model_type in ("llama", "qwen3", "mixtral"):
                head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
                per_layer = 2 * config.num_key_value_heads * head_dim  # a key and a value per KV head
            elif config.model_type == "deepseek_v3":
                per_layer = config.kv_lora_rank + config.qk_rope_head_dim  # latent c_t and the shared rotary key
            else:
                raise ValueError(f"no KV-cache layout known for model_type {config.model_type!r}")
            return config.num_hidden_layers * per_layer * element
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The published models, side by side

        KiB per token in BF16, and GiB for one sequence of 8k and of 128k tokens.
    """)
    lesson.code(r"""
        def per_token(config):
            try:
                return kv_bytes_per_token(config, torch.bfloat16), "yours"
            except NotImplementedError:
                if config.model_type == "deepseek_v3":
                    return config.num_hidden_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * 2, "formula"
                head_dim = config.hidden_size // config.num_attention_heads
                return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2, "formula"


        names, sizes = [], []
        print(f"{'model':20} {'KiB/token':>10} {'8k seq (GiB)':>13} {'128k seq (GiB)':>15}")
        for name, config in PUBLISHED.items():
            size, who = per_token(config)
            names.append(name); sizes.append(size)
            print(f"{name:20} {size / 1024:10.1f} {8192 * size / GiB:13.2f} {131072 * size / GiB:15.2f}   {who}")

        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.barh(names[::-1], [s / 1024 for s in sizes[::-1]], color="C0")
        ax.set_xlabel("KV cache per token, BF16 (KiB)"); ax.set_title("KV cache per token")
        for y, s in enumerate(sizes[::-1]):
            ax.text(s / 1024, y, f" {s / 1024:.0f}", va="center", fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. How many sequences fit: a memory budget, in blocks

        A server gets a memory budget (vLLM's default `gpu_memory_utilization=0.9`: 72 GB of an 80 GB H100), loads the
        weights (16.06 GB for Llama-3-8B in BF16), sets some aside for activations, and gives the rest to the KV
        cache. Early servers reserved a contiguous slab of `max_seq_len` tokens per request; the PagedAttention paper
        (Kwon et al., SOSP 2023, arXiv:2309.06180) measured that only 20–38% of the KV memory those systems reserved
        held actual tokens. vLLM instead cuts the cache into **blocks** of `block_size` tokens (16 by default) and gives
        each sequence whole blocks as it grows, like pages of virtual memory: the waste is less than one block per
        sequence.

        A sequence of $T$ tokens then occupies $\lceil T / b \rceil$ blocks of $b \cdot (\text{bytes per token})$ bytes,
        and the number of such sequences that fit is

        $$
        n = \left\lfloor \frac{\text{budget} - \text{weights}}{\lceil T / b \rceil \cdot b \cdot
        \text{bytes per token}} \right\rfloor \quad (0 \text{ when the weights alone exceed the budget}).
        $$
    """)
    lesson.exercise(
        "max_concurrent_sequences",
        r'''
        def max_concurrent_sequences(budget_bytes: int, weight_bytes: int, bytes_per_token: int, seq_len: int,
                                     block_size: int = 16) -> int:
            """How many sequences of seq_len tokens fit in budget_bytes next to the weights, with the KV cache
            allocated in whole blocks of block_size tokens. 0 when nothing fits."""
            # TODO: refuse seq_len < 1, block_size < 1, bytes_per_token < 1 or negative byte counts (ValueError)
            # TODO: blocks per sequence (round up), bytes per sequence, how many fit in what the weights leave
            ### BEGIN SOLUTION
            if seq_len < 1 or block_size < 1 or bytes_per_token < 1 or budget_bytes < 0 or weight_bytes < 0:
                raise ValueError("seq_len, block_size and bytes_per_token must be positive, byte counts non-negative")
            free = budget_bytes - weight_bytes
            if free <= 0:
                return 0
            blocks = -(-seq_len // block_size)  # ceil: a partly filled last block is still allocated
            return free // (blocks * block_size * bytes_per_token)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Why decoding is memory-bound

        Each decoding step produces one token per sequence, and to do so it reads every weight once (shared by the
        whole batch) and the entire KV cache of every sequence (each sequence its own). With weights $W$ bytes, $c$
        bytes per token and contexts $T_1, \dots, T_B$, one step moves at least

        $$
        \text{bytes}_{\text{step}} = W + c \sum_{i=1}^{B} T_i
        $$

        from HBM, so at a bandwidth of $\beta$ bytes/s the batch generates at most
        $B \cdot \beta / \text{bytes}_{\text{step}}$ tokens per second. An H100 SXM reads 3.35 TB/s (NVIDIA
        datasheet): Llama-3-8B in BF16, one sequence at 8k tokens, moves $16.06 + 1.07 = 17.1$ GB per step, at most
        196 tokens/s. Batching amortises the weights but not the cache: at 32 sequences of 8k tokens the caches add
        34.4 GB to every step and the bound per sequence drops to 66 tokens/s, however many FLOPs the GPU has spare.
        That is the case for GQA, MLA, FP8 KV caches and for the FlashDecoding-style kernels of `p04`.
    """)
    lesson.exercise(
        "decode_step_bound",
        r'''
        def decode_step_bound(weight_bytes: int, bytes_per_token: int, context_lens: list[int],
                              bandwidth_bytes_per_s: float) -> tuple[int, float]:
            """(bytes read from memory by one decoding step of this batch, the batch's upper bound in tokens/s).

            context_lens: the number of cached tokens of each sequence of the batch (at least one sequence).
            weight_bytes >= 1 (a model has weights); bytes_per_token >= 0 (0: a model without a KV cache)."""
            # TODO: refuse an empty batch, negative lengths, weight_bytes < 1, negative bytes_per_token, and a
            # TODO: non-positive bandwidth (ValueError)
            # TODO: weights once for the batch, every sequence's cache once
            ### BEGIN SOLUTION
            if not context_lens or min(context_lens) < 0 or weight_bytes < 1 or bytes_per_token < 0:
                raise ValueError("need at least one sequence, non-negative lengths and bytes_per_token, weights")
            if bandwidth_bytes_per_s <= 0:
                raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s}")
            step_bytes = weight_bytes + bytes_per_token * sum(context_lens)  # weights shared, caches not
            return step_bytes, len(context_lens) * bandwidth_bytes_per_s / step_bytes
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Tokens per second against batch size, on one H100

        Llama-3-8B in BF16, every sequence at the same context length: the bound per sequence (left) and for the
        whole batch (right), at 1k, 8k and 32k tokens of context, up to the batch that fits in 72 GB.
    """)
    lesson.code(r"""
        weights, per_tok, bandwidth = 16_060_000_000, 131_072, 3.35e12
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
        for context in (1024, 8192, 32768):
            try:
                fits = max_concurrent_sequences(72_000_000_000, weights, per_tok, context)
                bound = lambda batch: decode_step_bound(weights, per_tok, [context] * batch, bandwidth)[1]
                who = "yours"
            except NotImplementedError:
                fits = (72_000_000_000 - weights) // (-(-context // 16) * 16 * per_tok)
                bound = lambda batch: batch * bandwidth / (weights + per_tok * context * batch)
                who = "formula"
            batches = list(range(1, fits + 1))
            totals = [bound(b) for b in batches]
            left.plot(batches, [t / b for t, b in zip(totals, batches)], label=f"context {context} (fits {fits})")
            right.plot(batches, totals, label=f"context {context}")
        left.set_xscale("log"); left.set_xlabel("batch (sequences)"); left.set_ylabel("tokens/s per sequence (bound)")
        right.set_xscale("log"); right.set_xlabel("batch (sequences)"); right.set_ylabel("tokens/s, whole batch (bound)")
        left.set_title(f"Llama-3-8B BF16 on H100 (3.35 TB/s), {who}"); left.legend(fontsize=8); right.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        The whole-batch curves rise towards $\beta / (c\,T)$, the bandwidth divided by the cache bytes of one
        sequence (3 100 tokens/s at 8k context, 25 000 at 1k), and can never pass it: once the caches outweigh the
        weights, adding sequences adds bytes to every step as fast as it adds tokens. Longer contexts fit fewer
        sequences *and* make each step slower.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`kv_bytes_per_token`.** The element size comes from the dtype, never a hard-coded 2. The usual mistakes: *the query heads instead of the KV heads* (GQA's point lost: 4× too much for Llama 3), *keys only*
        (forgetting the factor 2 for values), *`head_dim = d / H` when the config sets it* (Qwen3), *MLA cached as
        decompressed per-head keys and values* (what a naive implementation stores: $H (d_{nope} + d_{rope} + d_v)$
        per layer, 40 960 elements for DeepSeek-V3 instead of 576), and *the rotary key forgotten* in MLA.

        **`max_concurrent_sequences`.** Integer arithmetic throughout (byte counts are exact). The mistakes: *no
        rounding up to whole blocks* (a sequence of 8193 tokens takes 513 blocks of 16, not 512.06), *dividing the
        whole budget* (the weights are not free), and *a negative count* when the weights do not fit.

        **`decode_step_bound`.** The mistakes: *weights read once per sequence* (that is batch 1, repeated: batching
        would then never help) and *the cache of only one sequence*.

        **Production.** vLLM sizes its cache exactly this way at start-up: it profiles a forward pass at the maximum
        batch to measure activation memory, subtracts it and the weights from `gpu_memory_utilization × total`, and
        divides the rest into blocks (`num_gpu_blocks` in its log). Caches shrink with FP8 KV (`kv_cache_dtype="fp8"`:
        half of BF16, `p01.number_formats`), with MLA, with sliding-window layers (Mistral, Gemma: only the window is
        kept), and by sharing blocks between requests with a common prefix (prefix caching, copy-on-write blocks).
        Tensor parallelism splits the KV heads across GPUs, so each GPU holds $K / \text{TP}$ heads of every token (a
        reason $K = 8$ is common: it divides evenly over 8 GPUs).
    """)
    lesson.mistakes()
    return lesson
