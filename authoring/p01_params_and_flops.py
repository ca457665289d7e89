"""Source of 01_Hardware_Math_Systems/05_Params_And_Flops.ipynb (build with `python -m llm_algo build p01.params_and_flops`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.params_and_flops",
        path="01_Hardware_Math_Systems/05_Params_And_Flops.ipynb",
        title_en="Parameters and FLOPs of a Transformer",
        title_zh="Transformer 的参数量与计算量",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=[],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 参数量 (parameter count) 可以由配置精确算出：嵌入 $Vd$（不共享时输出头再加 $Vd$）+ 每层注意力
          $2d\,H d_h + 2d\,K d_h$ + 每层 SwiGLU $3dI$ + 归一化增益 $2d$；结果与 `sum(p.numel())` 逐个相等。
        - MoE 的总参数 (total) 与激活参数 (active) 不同：每个 token 只经过 top-$k$ 个专家；Mixtral 46.7B/12.9B，
          DeepSeek-V3 671B/37B。
        - 一次前向的矩阵乘法 FLOPs = $2 \times$ 乘加次数 = $2BT \cdot N_{\text{matmul}} + 4BLHT^2 d_h$；反向是前向的两倍，
          所以训练每个 token 约 $6N + 12LHd_hT$ FLOPs（PaLM 附录 B）。
        - 长上下文时注意力项不可忽略：Llama-3-8B 在 $T \approx 29\text{k}$ 时注意力 FLOPs 与 $6N$ 相当。
        - 模型 FLOPs 利用率 MFU = 实际吞吐 × 每 token FLOPs ÷ 峰值算力；PaLM 540B 为 46.2%。
        - 所有公式都与 `transformers` 在 meta 设备上建出的真实模型和 `FlopCounterMode` 精确比对。
        {易错点}

        "8B", "70B", "46.7B total, 12.9B active", "671B total, 37B activated": model names and announcements quote
        parameter counts, and budgets follow from them. Llama 3 405B took $3.8 \times 10^{25}$ FLOPs to pre-train on 15.6T
        tokens (Dubey et al., 2024, *The Llama 3 Herd of Models*, arXiv:2407.21783), which is $6 \times 405 \times
        10^9 \times 15.6 \times 10^{12}$ to two digits: the "6ND" rule. Where do these numbers come from, how exact
        are they, and what do they leave out?

        **You will implement** the exact parameter count of a dense decoder (Llama 3, Qwen3) and of two mixture-of-experts
        decoders (Mixtral, DeepSeek-V3 with multi-head latent attention), total and active; the exact matmul FLOPs of a
        forward pass; and PaLM's training FLOPs per token and model FLOPs utilisation (MFU). **Graded against**
        `sum(p.numel())` of `transformers` models built from the published configs on the `meta` device (no weights,
        nothing downloaded) and from random small configs, `torch.utils.flop_counter.FlopCounterMode` on real forward
        and backward passes of small models, and the MFU that the PaLM paper reports.
    """
    )
    lesson.md(r"""
        ## 1. Where the parameters are

        A Llama-style decoder (Llama 3, Qwen3, Mistral) with vocabulary $V$, hidden size $d$, $L$ layers, $H$ query
        heads and $K$ key/value heads of size $d_h$ (grouped-query attention: $K$ divides $H$), and a SwiGLU MLP of
        width $I$, holds these weight matrices (PyTorch's `nn.Linear(in, out)` stores `(out, in)`):

        | module | shape | parameters |
        | --- | --- | --- |
        | `embed_tokens` | $(V, d)$ | $Vd$ |
        | per layer: `q_proj`, `o_proj` | $(H d_h, d)$, $(d, H d_h)$ | $2\,d\,H d_h$ |
        | per layer: `k_proj`, `v_proj` | $(K d_h, d)$ each | $2\,d\,K d_h$ |
        | per layer: `gate_proj`, `up_proj`, `down_proj` | $(I, d)$, $(I, d)$, $(d, I)$ | $3\,d I$ |
        | per layer: two RMSNorm gains | $(d,)$ each | $2d$ |
        | final norm | $(d,)$ | $d$ |
        | `lm_head` | $(V, d)$ | $Vd$, or 0 when tied to the embedding |

        Variants a config can switch on: `attention_bias=True` adds a bias to `q_proj`, `k_proj`, `v_proj` *and*
        `o_proj` ($H d_h + 2 K d_h + d$ per layer); `mlp_bias=True` to the three MLP projections ($2I + d$);
        `tie_word_embeddings=True` shares the output head with the embedding. Qwen3 (`model_type == "qwen3"`) adds an
        RMSNorm on each query and key head (QK-norm): two gains of size $d_h$ per layer. $d_h$ is `config.head_dim`
        when the config sets it (Qwen3 uses $d_h = 128$ with $H d_h \ne d$), else $d / H$.

        Llama-3-8B ($V = 128256$, $d = 4096$, $L = 32$, $H = 32$, $K = 8$, $d_h = 128$, $I = 14336$): attention
        $2 \cdot 4096 \cdot 4096 + 2 \cdot 4096 \cdot 1024 = 41.9$M per layer, MLP $3 \cdot 4096 \cdot 14336 = 176.2$M
        per layer, embedding and head $2 \cdot 525.3$M. The MLP holds 70% of the weights; the embedding and head 13%.
    """)
    lesson.setup(r"""
        import math
        import warnings

        import matplotlib.pyplot as plt
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' tqdm import warns inside a kernel without ipywidgets
            from transformers import DeepseekV3Config, LlamaConfig, MixtralConfig, Qwen3Config

        # The published configurations (config.json of each model on the Hugging Face Hub), the fields that matter here.
        PUBLISHED = {
            "Llama-3-8B": LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
            "Llama-3-70B": LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                       num_attention_heads=64, num_key_value_heads=8, tie_word_embeddings=False),
            "Qwen3-8B": Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
            "Mixtral-8x7B": MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                          num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                                          num_experts_per_tok=2, tie_word_embeddings=False),
            "DeepSeek-V3": DeepseekV3Config(vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                                            moe_intermediate_size=2048, num_hidden_layers=61, first_k_dense_replace=3,
                                            num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                                            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                            n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8,
                                            tie_word_embeddings=False),
        }
    """)
    lesson.md(r"""
        ## 2. Exercise `dense_param_count`

        Return the exact number of parameters of a `LlamaForCausalLM` or `Qwen3ForCausalLM` built from `config`,
        that is, `sum(p.numel() for p in model.parameters())`, from the config's fields alone. Refuse a config whose
        `num_key_value_heads` does not divide `num_attention_heads` (`ValueError`): no such model can be built.
    """)
    lesson.exercise(
        "dense_param_count",
        r'''
        def dense_param_count(config) -> int:
            """Parameters of a Llama/Qwen3 decoder built from config (a transformers LlamaConfig or Qwen3Config)."""
            # TODO: refuse num_attention_heads % num_key_value_heads != 0
            # TODO: head_dim = config.head_dim if set, else hidden_size // num_attention_heads
            # TODO: per layer: q, k, v, o (+ biases), Qwen3's q_norm/k_norm, gate/up/down (+ biases), two norms
            # TODO: embedding, lm_head unless tied, final norm
            ### BEGIN SOLUTION
            d, H, K = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
            if H % K:
                raise ValueError(f"num_key_value_heads={K} must divide num_attention_heads={H}")
            head_dim = getattr(config, "head_dim", None) or d // H
            attention = 2 * d * H * head_dim + 2 * d * K * head_dim  # q, o: (H*hd, d); k, v: (K*hd, d)
            if getattr(config, "attention_bias", False):
                attention += H * head_dim + 2 * K * head_dim + d  # q, k, v and o biases
            if config.model_type == "qwen3":
                attention += 2 * head_dim  # QK-norm gains, shared across heads
            mlp = 3 * d * config.intermediate_size  # gate, up: (I, d); down: (d, I)
            if getattr(config, "mlp_bias", False):  # Llama has the option, Qwen3 does not
                mlp += 2 * config.intermediate_size + d
            layer = attention + mlp + 2 * d  # + input and post-attention RMSNorm gains
            embeddings = config.vocab_size * d * (1 if config.tie_word_embeddings else 2)
            return embeddings + config.num_hidden_layers * layer + d  # + final norm
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Mixture of experts: total and active parameters

        A mixture-of-experts (MoE, 混合专家) layer replaces the one MLP with $E$ expert MLPs and a *router*, a linear
        map $(E, d)$ (no bias) whose scores pick the top-$k$ experts for each token. All $E$ experts must sit in memory
        (**total** parameters), but a token's forward pass only multiplies by $k$ of them (**active** parameters): the
        compute per token is that of a model of the active size. Everything outside the routed experts (embeddings,
        attention, router, norms, *shared* experts that every token uses) is active.

        **Mixtral-8x7B** (`model_type == "mixtral"`): attention as in Llama, then in every layer a router $(E, d)$ and
        $E = 8$ SwiGLU experts of width $I = 14336$, $k = 2$. Mistral AI announced "46.7B total parameters but only
        12.9B parameters per token" (*Mixtral of experts*, mistral.ai, December 2023).

        **DeepSeek-V3** (`model_type == "deepseek_v3"`) changes both halves (DeepSeek-AI, 2024, arXiv:2412.19437):

        - *Multi-head latent attention* (MLA, 多头潜在注意力): queries go through a low-rank bottleneck
          `q_a_proj` $(r_q, d)$, an RMSNorm of size $r_q$, `q_b_proj` $(H (d_{nope} + d_{rope}), r_q)$ (when
          `q_lora_rank` is `None`, one `q_proj` $(H (d_{nope} + d_{rope}), d)$ instead); keys and values share one
          compressed latent: `kv_a_proj_with_mqa` $(r_{kv} + d_{rope}, d)$ (the extra $d_{rope}$ columns are one
          rotary key shared by all heads), an RMSNorm of size $r_{kv}$, `kv_b_proj` $(H (d_{nope} + d_v), r_{kv})$;
          then `o_proj` $(d, H d_v)$. No biases.
        - The first `first_k_dense_replace` layers have a dense SwiGLU MLP of width `intermediate_size`; every later
          layer has a router $(E, d)$, $E$ = `n_routed_experts` experts and `n_shared_experts` shared experts, all
          SwiGLU of width `moe_intermediate_size`, $k$ = `num_experts_per_tok`. The router's
          `e_score_correction_bias` (the auxiliary-loss-free balancing bias, `p02.moe_balance`) is a *buffer*, not a
          parameter: it is not counted.
        - The paper reports 671B total parameters, 37B activated per token. (The released checkpoint is 685B: it
          adds a 14B multi-token-prediction module, which `transformers` does not build.)
    """)
    lesson.exercise(
        "moe_param_count",
        r'''
        def moe_param_count(config) -> tuple[int, int]:
            """(total, active per token) parameters of a Mixtral or DeepSeek-V3 model built from config."""
            # TODO: refuse any other config.model_type with a ValueError
            # TODO: attention per layer (Mixtral: like Llama, no biases; DeepSeek-V3: MLA, see above)
            # TODO: per layer, total counts all experts, active only num_experts_per_tok of the routed ones
            # TODO: add embeddings, lm_head (unless tied) and the final norm to both
            ### BEGIN SOLUTION
            d, H, L = config.hidden_size, config.num_attention_heads, config.num_hidden_layers
            norms = 2 * d  # input and post-attention RMSNorm gains of one layer
            if config.model_type == "mixtral":
                K = config.num_key_value_heads
                head_dim = getattr(config, "head_dim", None) or d // H
                attention = 2 * d * H * head_dim + 2 * d * K * head_dim
                experts, top_k = config.num_local_experts, config.num_experts_per_tok
                expert = 3 * d * config.intermediate_size  # one SwiGLU expert
                shared = experts * d + attention + norms  # router + everything every token uses
                total = L * (shared + experts * expert)
                active = L * (shared + top_k * expert)
            elif config.model_type == "deepseek_v3":
                qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
                if config.q_lora_rank is None:
                    query = d * H * qk_head_dim
                else:  # down-projection, its RMSNorm, up-projection
                    query = d * config.q_lora_rank + config.q_lora_rank + config.q_lora_rank * H * qk_head_dim
                latent = config.kv_lora_rank
                key_value = d * (latent + config.qk_rope_head_dim) + latent + latent * H * (config.qk_nope_head_dim + config.v_head_dim)
                attention = query + key_value + H * config.v_head_dim * d  # + o_proj
                dense_layers = config.first_k_dense_replace
                dense = dense_layers * (attention + norms + 3 * d * config.intermediate_size)
                expert = 3 * d * config.moe_intermediate_size
                experts, top_k = config.n_routed_experts, config.num_experts_per_tok
                shared = experts * d + config.n_shared_experts * expert + attention + norms  # router, shared experts
                total = dense + (L - dense_layers) * (shared + experts * expert)
                active = dense + (L - dense_layers) * (shared + top_k * expert)
            else:
                raise ValueError(f"moe_param_count knows mixtral and deepseek_v3, not {config.model_type!r}")
            outside = config.vocab_size * d * (1 if config.tie_word_embeddings else 2) + d  # embeddings, final norm
            return total + outside, active + outside
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The five published models

        Your counts next to the numbers their authors published (the fallback, while your functions are not written,
        is `sum(p.numel())` of the model built on the `meta` device: shapes only, no memory). Sources: the model cards
        of Meta-Llama-3-8B and -70B and Qwen3-8B ("8.2B, non-embedding 6.95B") on the Hugging Face Hub; Mistral AI's
        Mixtral announcement; the DeepSeek-V3 technical report.
    """)
    lesson.code(r"""
        def meta_model(config):
            from transformers import AutoModelForCausalLM
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return AutoModelForCausalLM.from_config(config)


        def counts(name, config):
            moe = config.model_type in ("mixtral", "deepseek_v3")
            try:
                return (moe_param_count(config) if moe else (dense_param_count(config),) * 2), "yours"
            except NotImplementedError:
                model = meta_model(config)
                total = sum(p.numel() for p in model.parameters())
                routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
                experts = getattr(config, "num_local_experts", None) or getattr(config, "n_routed_experts", 1)
                top_k = getattr(config, "num_experts_per_tok", 1)
                return (total, total - routed + routed * top_k // experts), "meta model"


        published = {"Llama-3-8B": "8B", "Llama-3-70B": "70B", "Qwen3-8B": "8.2B", "Mixtral-8x7B": "46.7B / 12.9B",
                     "DeepSeek-V3": "671B / 37B"}
        rows = []
        print(f"{'model':14} {'total':>16} {'active':>16} {'embed+head':>11} {'bf16 weights':>13}  published      source")
        for name, config in PUBLISHED.items():
            (total, active), source = counts(name, config)
            embed = config.vocab_size * config.hidden_size * (1 if config.tie_word_embeddings else 2)
            rows.append((name, total, active, embed))
            print(f"{name:14} {total:16,} {active:16,} {embed / total:11.1%} {2 * total / 1e9:10.1f} GB  "
                  f"{published[name]:14} {source}")
    """)
    lesson.md(r"""
        Read the last columns: "8B" is 8.03B, Qwen3-8B's 1.24B of embeddings and head are the difference between its
        8.19B and its "non-embedding 6.95B", and DeepSeek-V3 needs 1.34 TB just for its BF16 weights while each token
        touches only 5.6% of them. That ratio is why MoE serving is limited by memory capacity and bandwidth, not by
        FLOPs.

        ## 4. FLOPs of a forward pass

        A matrix product $(m, n) \times (n, p)$ costs $mnp$ multiply-adds, counted as $2mnp$ floating-point operations
        (FLOPs). For a batch of $B$ sequences of $T$ tokens, every weight matrix $W$ of a linear layer is applied to
        $BT$ token vectors: $2 \cdot BT \cdot |W|$ FLOPs. The embedding is a table lookup (0 FLOPs), and the norms,
        RoPE, softmax and SiLU are elementwise: $O(BTd)$, negligible next to the matmuls and not counted by
        `FlopCounterMode` either. Attention adds two matmuls per layer that have no weights:
        $S = QK^\top$, $(B, H, T, d_h) \times (B, H, d_h, T) \to (B, H, T, T)$, and $P V$,
        $(B, H, T, T) \times (B, H, T, d_h)$: $2 \cdot 2BHT^2 d_h$ FLOPs per layer (with GQA the $K$ heads are repeated
        to $H$ first, so the count uses $H$). In total, with $N_{\text{mm}}$ the number of weights in matmuls
        (everything but the embedding, norms and biases, *including* the output head):

        $$
        F_{\text{fwd}}(B, T) = 2\,B\,T\,N_{\text{mm}} + 4\,B\,L\,H\,T^2 d_h .
        $$

        This counts the full $T \times T$ score matrix, as eager attention computes it; a causal kernel such as
        FlashAttention skips the masked half, but reports conventionally count it in full (PaLM, Megatron).
    """)
    lesson.exercise(
        "forward_flops",
        r'''
        def forward_flops(config, batch: int, seq_len: int) -> int:
            """Matmul FLOPs (2 per multiply-add) of one forward pass of a Llama/Qwen3 model with eager attention,
            logits for every position."""
            # TODO: refuse batch < 1 or seq_len < 1 with a ValueError
            # TODO: weights in matmuls per token: q, k, v, o, gate, up, down in every layer, plus the lm_head
            # TODO: 2 * tokens * weights + the two attention matmuls per layer
            ### BEGIN SOLUTION
            if batch < 1 or seq_len < 1:
                raise ValueError(f"batch and seq_len must be positive, got {batch}, {seq_len}")
            d, H, K = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
            head_dim = getattr(config, "head_dim", None) or d // H
            per_layer = 2 * d * H * head_dim + 2 * d * K * head_dim + 3 * d * config.intermediate_size
            matmul_weights = config.num_hidden_layers * per_layer + config.vocab_size * d  # + lm_head (tied or not)
            tokens = batch * seq_len
            attention = 4 * batch * H * seq_len * seq_len * head_dim  # QK^T and PV, per layer
            return 2 * tokens * matmul_weights + config.num_hidden_layers * attention
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Training FLOPs, 6ND, and MFU

        The backward pass of $Y = XW$ computes two matmuls of the same size, $\partial X = \partial Y\, W^\top$ and
        $\partial W = X^\top \partial Y$: twice the forward. So training costs 3 forward passes per token (without
        activation recomputation). Per token, with $N$ the matmul weights and the attention term of section 4:

        $$
        C_{\text{token}} = 6N + 12\,L\,H\,d_h\,T \qquad\text{(PaLM, Chowdhery et al., 2022, arXiv:2204.02311, App. B)},
        $$

        and a run over $D$ tokens costs $C \approx 6ND$ when $T \ll N / (2 L H d_h)$: for Llama-3-8B that is
        $T \ll 29\text{k}$ (the figure below).

        **Model FLOPs utilisation** compares the FLOPs the *model* needs (this formula, not counting recomputation,
        which is why it is "model" FLOPs) with what the hardware could do in the same time:

        $$
        \text{MFU} = \frac{C_{\text{token}} \cdot \text{tokens per second}}{\text{number of chips} \cdot
        \text{peak FLOP/s per chip}} .
        $$

        PaLM 540B trained at 238.3k tokens/s on 6144 TPU v4 chips (275 TFLOP/s peak BF16 each) with $L = 118$,
        $H = 48$, $d_h = 256$, $T = 2048$ and $N = 540.35$B: an MFU of 46.2% (Chowdhery et al., 2022, Table 3 and Appendix B). Llama 3
        405B reached 38–43% on 8k–16k H100 GPUs (989 TFLOP/s dense BF16 each, NVIDIA's H100 SXM datasheet;
        arXiv:2407.21783, Table 4).
    """)
    lesson.exercise(
        "training_flops_and_mfu",
        r'''
        def training_flops_per_token(n_params: int, n_layers: int, n_heads: int, head_dim: int, seq_len: int) -> int:
            """PaLM's model FLOPs per trained token: 6N + 12 L H d_h T (forward and backward, no recomputation)."""
            # TODO: refuse any non-positive argument with a ValueError
            ### BEGIN SOLUTION
            if min(n_params, n_layers, n_heads, head_dim, seq_len) < 1:
                raise ValueError("every argument of training_flops_per_token must be positive")
            return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len
            ### END SOLUTION


        def model_flops_utilization(flops_per_token: float, tokens_per_second: float, num_chips: int,
                                    peak_flops_per_chip: float) -> float:
            """Achieved model FLOP/s over the peak FLOP/s of all chips, a fraction in (0, 1] for a real run."""
            # TODO: refuse non-positive arguments with a ValueError
            ### BEGIN SOLUTION
            if min(flops_per_token, tokens_per_second, num_chips, peak_flops_per_chip) <= 0:
                raise ValueError("every argument of model_flops_utilization must be positive")
            return flops_per_token * tokens_per_second / (num_chips * peak_flops_per_chip)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Where the FLOPs go as the context grows

        Per-token training FLOPs of Llama-3-8B, split into the weight term $6N$ and the attention term
        $12 L H d_h T$, against the context length (full $T^2$ count, as in the formula).
    """)
    lesson.code(r"""
        config = PUBLISHED["Llama-3-8B"]
        L, H, hd = config.num_hidden_layers, config.num_attention_heads, config.hidden_size // config.num_attention_heads
        n_matmul = L * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + config.vocab_size * 4096
        lengths = [2**k for k in range(9, 18)]
        try:
            totals = [training_flops_per_token(n_matmul, L, H, hd, T) for T in lengths]
            who = "yours"
        except NotImplementedError:
            totals = [6 * n_matmul + 12 * L * H * hd * T for T in lengths]
            who = "closed form"
        weights = [6 * n_matmul] * len(lengths)
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        ax.stackplot(lengths, [w / 1e9 for w in weights], [(t - w) / 1e9 for t, w in zip(totals, weights)],
                     labels=["6N (weights)", "12 L H d_h T (attention)"], alpha=0.8)
        crossover = n_matmul / (2 * L * H * hd)
        ax.axvline(crossover, color="k", ls=":", label=f"attention = 6N at T = {crossover / 1e3:.0f}k")
        ax.set_xscale("log", base=2); ax.set_xlabel("context length T (tokens)"); ax.set_ylabel("GFLOPs per token")
        ax.set_title(f"Llama-3-8B training FLOPs per token ({who})"); ax.legend(fontsize=8, loc="upper left")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`dense_param_count`.** One line per module of the table in section 1. The usual mistakes:
        *assuming $d_h = d / H$* (Qwen3 sets 128 with $d = 1024$, 16 heads), *K/V projections of full width*
        (forgetting GQA: Llama-3-8B becomes 8.8B), *counting the output head when it is tied* (Qwen3-0.6B), *forgetting the
        output bias* when `attention_bias=True` (`o_proj` has one too in Llama's code), *QK-norm gains per head*
        ($2 H d_h$ instead of $2 d_h$: the gain is shared by all heads), and *forgetting the final norm*.

        **`moe_param_count`.** Write the shared part once and multiply the experts by $E$ for the total and by $k$ for
        the active count. The mistakes: *the router forgotten* ($E \cdot d$ per layer, small but not zero), *shared
        experts counted as routed* (they are active for every token), *every layer an MoE layer* (DeepSeek-V3's first
        three are dense), and in MLA *the shared rotary key forgotten* (`kv_a_proj_with_mqa` outputs $r_{kv} + d_{rope}$).

        **`forward_flops`.** $2 \times$ tokens $\times$ matmul weights, plus attention. The mistakes: *the output head
        left out* (it is the largest single matmul of a small model with a big vocabulary: $d V$ = 525M of Llama-3-8B's
        7.5B matmul weights), *attention with $K$ instead of $H$ heads* (GQA saves KV *memory*, not attention FLOPs),
        and *the causal half* ($2BHT^2d_h$): a fine estimate of a FlashAttention kernel's work, but not what eager
        attention or the published formulas count.

        **`training_flops_and_mfu`.** Two lines of arithmetic; the content is in what goes in. The checks show that
        $6N + 12LHd_hT$ is *exact* for what `FlopCounterMode` counts in a forward and backward pass, when $N$ counts
        the matmul weights (the output head included, the embedding not). The usual mistakes: *$2N$ instead of $6N$*
        (forward only), *dropping the attention term* (fine at 2k tokens, 2× wrong at 32k for an 8B model), and *peak
        FLOP/s with sparsity* (NVIDIA datasheets list 2× "with sparsity" numbers; MFU uses the dense peak).

        **Production.** Megatron-LM's `num_floating_point_operations` and `torchtitan`'s `get_num_flop_per_token` use
        the same formula (torchtitan subtracts the embedding and adds $12 L H d_h T$); both report MFU during
        training. HFU (hardware FLOPs utilisation) adds the recomputed forward of activation checkpointing (8N instead
        of 6N for full recomputation). Inference cost is $2N_{\text{active}}$ per generated token plus attention over
        the KV cache, which is memory-bound (`p01.roofline`, `p01.kv_cache_math`).
    """)
    lesson.mistakes()
    return lesson
