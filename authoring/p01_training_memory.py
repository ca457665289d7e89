"""Source of 01_Hardware_Math_Systems/09_Training_Memory.ipynb (build with `python -m llm_algo build p01.training_memory`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.training_memory",
        path="01_Hardware_Math_Systems/09_Training_Memory.ipynb",
        title_en="VRAM for training and ZeRO",
        title_zh="训练显存与 ZeRO",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.params_and_flops", "p01.number_formats"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 混合精度 (mixed precision) Adam 每个参数占 16 字节：16 位权重 2 + 16 位梯度 2 + fp32 主权重、一阶矩、二阶矩
          共 12（优化器状态 optimizer states）。8B 模型仅模型状态就要 128 GB，一张 80 GB 的卡放不下。
        - ZeRO 把这些状态切分 (shard) 到 $N_d$ 个数据并行 GPU 上：ZeRO-1 切优化器状态，ZeRO-2 再切梯度，ZeRO-3 再切权重；
          每卡分到 $\lceil \Psi / N_d \rceil$ 个元素（扁平缓冲区补齐到 $N_d$ 的倍数）。
        - 激活值 (activations) 是反向传播要用、前向时保存下来的张量，按 `saved_tensors_hooks` 逐个数出来：
          每层 $\propto B\,T\,(d, d_{ff})$，外加注意力概率的 $B\,H\,T^2$ 项——长序列时它占大头。
        - Hugging Face 的 Llama 在 RMSNorm 和 softmax 里升到 fp32，所以 bf16 训练保存的字节并不是“元素数 × 2”。
        - 激活检查点 (activation checkpointing)：前向只留每层输入 $B T d$，反向时重算一层；峰值 = $L$ 个输入 + 一层激活。
        {易错点}

        Training Llama-3-8B (8.03 B parameters) with Adam in mixed precision keeps 16 bytes per parameter of *model
        states* alone: 128 GB, more than the 80 GB of an H100, before a single activation is stored. The ZeRO paper
        (Rajbhandari et al., 2019, arXiv:1910.02054, Figure 1) shows what sharding those states over 64 data-parallel GPUs
        does for a 7.5 B model: 120 GB per GPU without it, 31.4 GB with the optimizer states sharded (ZeRO-1), 16.6 GB
        with the gradients too (ZeRO-2), 1.9 GB with everything (ZeRO-3). Then come the activations, which grow with the
        batch and the sequence length and, at 4k tokens, outweigh everything else.

        **You will implement** the model-state bytes per GPU for ZeRO stages 0–3, the bytes that one Llama decoder layer
        saves for the backward pass, and the activation memory of a whole stack with and without checkpointing.
        **Graded against** the state that `torch.optim.AdamW` actually allocates on a shard of a real bf16 model, the
        ZeRO paper's numbers, and the tensors that autograd saves in a forward pass of `transformers`' `LlamaDecoderLayer`
        (fp32, bf16, fp16, MHA and GQA), counted with `torch.autograd.graph.saved_tensors_hooks`, with and without
        `torch.utils.checkpoint`.
    """
    )
    lesson.md(r"""
        ## 1. Model states: 16 bytes per parameter

        Mixed-precision training (Micikevicius et al., 2018, arXiv:1710.03740) runs the forward and backward passes in
        16 bits (bf16 or fp16) but updates an fp32 copy of the weights, since a bf16 weight cannot absorb an update
        smaller than $2^{-8}$ of itself (`p01.number_formats`). With $\Psi$ parameters, each GPU of plain data
        parallelism holds

        | state | dtype | bytes |
        | --- | --- | --- |
        | weights used by forward/backward | bf16 | $2\Psi$ |
        | gradients | bf16 | $2\Psi$ |
        | master weights | fp32 | $4\Psi$ |
        | Adam first moment $m$ | fp32 | $4\Psi$ |
        | Adam second moment $v$ | fp32 | $4\Psi$ |

        $2 + 2 + K$ bytes with $K = 12$ optimizer bytes: $16\Psi$ (the ZeRO paper's accounting, Section 3.1).

        **ZeRO** (Zero Redundancy Optimizer) notices that all $N_d$ data-parallel GPUs hold identical copies of all of
        it. Each GPU only needs to *update* $1/N_d$ of the parameters:

        - **ZeRO-1** shards the optimizer states: $2\Psi + 2\Psi + 12\Psi/N_d$. After the all-reduce of the gradients,
          GPU $r$ updates its slice and the slices are all-gathered back into the bf16 weights.
        - **ZeRO-2** also shards the gradients: a reduce-scatter leaves each GPU only the gradient slice it updates:
          $2\Psi + 14\Psi/N_d$.
        - **ZeRO-3** also shards the weights and all-gathers each layer's weights just before its forward and backward:
          $16\Psi/N_d$.

        In practice the parameters are flattened into one buffer padded to a multiple of $N_d$ (DeepSpeed's
        partitions, PyTorch FSDP's `FlatParameter`), so every GPU holds $\lceil \Psi / N_d \rceil$ elements of each
        sharded state. PyTorch FSDP's `FULL_SHARD` is ZeRO-3 and `SHARD_GRAD_OP` is ZeRO-2; Megatron-LM's distributed
        optimizer is ZeRO-1.
    """)
    lesson.setup(r"""
        import warnings

        import matplotlib.pyplot as plt
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' tqdm import warns inside a kernel without ipywidgets
            from transformers import LlamaConfig

        # Llama-3-8B (config.json on the Hugging Face Hub): 8 030 261 248 parameters (see p01.params_and_flops).
        LLAMA3_8B = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                num_key_value_heads=8, vocab_size=128256)
        LLAMA3_8B_PARAMS = 8_030_261_248
        GB = 10**9
    """)
    lesson.md(r"""
        ## 2. Exercise `model_state_bytes`

        Return the bytes of each model state on one GPU as a dict with the keys `"params"`, `"grads"` and
        `"optimizer"` (all Python ints), for mixed-precision Adam as in the table above. A sharded state holds
        $\lceil \Psi / N_d \rceil$ elements. Refuse `num_params < 1`, `dp_size < 1` or a stage outside 0–3 with a
        `ValueError`.
    """)
    lesson.exercise(
        "model_state_bytes",
        r'''
        def model_state_bytes(num_params: int, zero_stage: int, dp_size: int) -> dict[str, int]:
            """Bytes of bf16 weights, bf16 gradients and fp32 Adam states (master, m, v) on one of dp_size GPUs."""
            # TODO: refuse impossible arguments (ValueError)
            # TODO: the elements one GPU holds of a sharded state (round up)
            # TODO: which states each stage shards, and their bytes per element
            ### BEGIN SOLUTION
            if num_params < 1 or dp_size < 1 or zero_stage not in (0, 1, 2, 3):
                raise ValueError(f"need num_params >= 1, dp_size >= 1 and a ZeRO stage 0-3, got "
                                 f"{num_params}, {dp_size}, {zero_stage}")
            shard = -(-num_params // dp_size)  # the flat buffer is padded to a multiple of dp_size
            return {
                "params": 2 * (shard if zero_stage >= 3 else num_params),
                "grads": 2 * (shard if zero_stage >= 2 else num_params),
                "optimizer": (4 + 4 + 4) * (shard if zero_stage >= 1 else num_params),  # master, m, v in fp32
            }
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Activations: what autograd keeps

        The backward pass of $y = xW$ needs $x$ (for $\partial L/\partial W = x^\top \, \partial L/\partial y$); the
        backward of softmax needs its output; the backward of SiLU needs its input. Autograd keeps every such tensor
        from the forward until the backward has used it. `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls
        `pack` on each one as it is saved, so we can count them. Several saved tensors share one storage (a view, or the
        same output saved by two ops), so we count distinct storages, and we leave out the parameters (already counted
        as model states) and the rotary tables (shared by all layers).

        For `transformers`' `LlamaDecoderLayer` with the eager attention, in training mode with `attention_dropout=0`
        (Llama's default), inputs $(B, T, d)$, $H$ heads of size $d_h$, MLP width $d_{ff}$ and element size $s$ bytes
        (4 for fp32, 2 for bf16/fp16), one layer saves:

        | where | tensor saved | shape | bytes per element |
        | --- | --- | --- | --- |
        | each of the 2 RMSNorms | the input upcast to fp32 (`hidden.to(torch.float32)`) | $(B, T, d)$ | 4 |
        | | $1/\sqrt{\overline{x^2} + \epsilon}$ | $(B, T, 1)$ | 4 |
        | | the normalized value cast back, before `weight *` | $(B, T, d)$ | $s$ |
        | | the output (input of the next projections) | $(B, T, d)$ | $s$ |
        | attention | $q$ and $k$ after RoPE, $v$ | $(B, H, T, d_h)$ each | $s$ |
        | | attention probabilities, `softmax(..., dtype=torch.float32)` | $(B, H, T, T)$ | 4 |
        | | the same, cast to the model dtype (not a new tensor in fp32) | $(B, H, T, T)$ | $s$ |
        | | the heads concatenated, input of `o_proj` | $(B, T, H d_h)$ | $s$ |
        | MLP | gate (input of SiLU), SiLU output, up, input of `down_proj` | $(B, T, d_{ff})$ each | $s$ |

        Two things surprise people. The keys and values are saved with $H$ heads, not the $K$ of grouped-query
        attention: eager attention's `repeat_kv` materialises the copies before the matmul (one exception, left out of
        this lesson: with a single KV head and a batch of one, the copies stay a stride-0 view). And in fp32 the RMSNorm's
        "upcast" is the input itself, so its three $(B, T, d)$ tensors are 12 bytes per element; in bf16 they are
        $4 + 2 + 2 = 8$. Summing (with $s' = 0$ in fp32 and $s' = s$ otherwise):

        $$
        \text{bytes}_{\text{layer}} = 2\big[BTd\,(4 + 2s) + 4BT\big] + 4s\,BTHd_h + (4 + s')\,BHT^2 + 4s\,BTd_{ff}.
        $$

        Compare Korthikanti et al. (2022, arXiv:2205.05198, Section 4.1): $sbh(34 + 5as/h)$ bytes per GPT layer in
        fp16 with dropout, in their notation ($s$ the sequence, $b$ the batch, $h$ the width, $a$ the heads). The same
        structure: a term linear in the tokens and a term in $T^2$ from the attention matrix. The exact constants
        belong to the implementation, which is why we count a real one.
    """)
    lesson.md(r"""
        ## 4. Exercise `layer_activation_bytes`

        The bytes one decoder layer of a Llama config saves for the backward pass, by the table above. The head size is
        `config.head_dim` (`transformers` sets it to $d / H$ unless the config names another). Refuse a config whose `model_type` is not `"llama"`, an
        `attention_dropout` other than 0 (the dropout masks would add to the count), a batch or sequence length below 1,
        and a dtype that is not floating point, with a `ValueError`.
    """)
    lesson.exercise(
        "layer_activation_bytes",
        r'''
        def layer_activation_bytes(config, batch: int, seq_len: int, dtype: torch.dtype) -> int:
            """Bytes autograd saves in one LlamaDecoderLayer (eager attention, training, no dropout) for a batch of
            (batch, seq_len) tokens in dtype; parameters and rotary tables not included."""
            # TODO: refuse what the table does not cover (ValueError)
            # TODO: the two RMSNorms, the attention (linear in T and the T**2 probabilities), the MLP
            ### BEGIN SOLUTION
            if config.model_type != "llama" or config.attention_dropout != 0:
                raise ValueError("only Llama layers without attention dropout are covered")
            if batch < 1 or seq_len < 1 or not dtype.is_floating_point:
                raise ValueError(f"need batch, seq_len >= 1 and a floating-point dtype, got {batch}, {seq_len}, {dtype}")
            size = torch.empty((), dtype=dtype).element_size()
            heads = config.num_attention_heads
            head_dim = config.head_dim  # transformers sets d // H unless the config names another size
            tokens = batch * seq_len
            norm = tokens * config.hidden_size * (4 + 2 * size) + 4 * tokens  # fp32 input, normalized, output; rsqrt
            q_and_o = 2 * size * tokens * heads * head_dim
            k_and_v = 2 * size * tokens * heads * head_dim  # repeat_kv materialises all H heads
            probs_bytes = 4 + (0 if dtype == torch.float32 else size)  # fp32 softmax, and its cast to dtype
            probs = probs_bytes * batch * heads * seq_len * seq_len
            mlp = 4 * size * tokens * config.intermediate_size
            return 2 * norm + q_and_o + k_and_v + probs + mlp
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Where the bytes go, Llama-3-8B in bf16, one sequence

        The linear terms grow with $T$, the attention probabilities with $T^2$: at 4k tokens they are most of the layer.
    """)
    lesson.code(r"""
        def layer_bytes(config, T):
            try:
                return layer_activation_bytes(config, 1, T, torch.bfloat16), "yours"
            except NotImplementedError:
                d, H, f = config.hidden_size, config.num_attention_heads, config.intermediate_size
                return 2 * (T * d * 8 + 4 * T) + 8 * T * d + 6 * H * T * T + 8 * T * f, "formula"


        lengths = [512, 1024, 2048, 4096, 8192]
        H = LLAMA3_8B.num_attention_heads
        totals, squares, who = [], [], ""
        for T in lengths:
            total, who = layer_bytes(LLAMA3_8B, T)
            totals.append(total / GB); squares.append(6 * H * T * T / GB)
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.bar([str(T) for T in lengths], [t - q for t, q in zip(totals, squares)], label="linear in T (norms, q/k/v/o, MLP)")
        ax.bar([str(T) for T in lengths], squares, bottom=[t - q for t, q in zip(totals, squares)],
               label="attention probabilities (T²)")
        ax.set_xlabel("sequence length T (batch 1)"); ax.set_ylabel("GB per layer")
        ax.set_title(f"Activations saved by one Llama-3-8B layer, bf16 ({who})"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
        print(f"T=4096: {totals[3]:.2f} GB per layer, {32 * totals[3]:.0f} GB for 32 layers")
    """)
    lesson.md(r"""
        ## 5. Checkpointing: keep the inputs, recompute the rest

        Activation checkpointing (Chen et al., 2016, *Training Deep Nets with Sublinear Memory Cost*,
        arXiv:1604.06174; `torch.utils.checkpoint`; `p02.activation_checkpointing`) runs each layer's forward without
        saving anything but the layer's input $(B, T, d)$. In the backward pass, the last layer is recomputed first,
        with saving on, and then differentiated. At that moment memory holds all $L$ layer inputs and the full
        activations of one layer, and that is the peak:

        $$
        \text{no checkpointing: } L \cdot \text{bytes}_{\text{layer}}, \qquad
        \text{checkpointing every layer: } L \cdot B T d\, s + \text{bytes}_{\text{layer}}.
        $$

        The price is one more forward pass, about a third more compute ($2$ of the $6ND$ FLOPs, `p01.params_and_flops`).
        Megatron's *selective* recomputation only recomputes the attention core to drop the $T^2$ term, and
        FlashAttention never stores the $(B, H, T, T)$ probabilities at all (it keeps a $(B, H, T)$ log-sum-exp and
        recomputes the tiles in the backward pass, `p03.flash_attention_bwd`).
    """)
    lesson.md(r"""
        ## 6. Exercise `activation_memory`

        The peak bytes of saved activations of all `config.num_hidden_layers` layers, without checkpointing or with
        every layer checkpointed. Use your `layer_activation_bytes` (it also validates the arguments).
    """)
    lesson.exercise(
        "activation_memory",
        r'''
        def activation_memory(config, batch: int, seq_len: int, dtype: torch.dtype, checkpointing: bool) -> int:
            """Peak bytes of saved activations of the decoder stack (layers only), with or without checkpointing."""
            # TODO: one layer's activations; the stack without checkpointing
            # TODO: with checkpointing: every layer's input, plus one layer recomputed in the backward pass
            ### BEGIN SOLUTION
            per_layer = layer_activation_bytes(config, batch, seq_len, dtype)
            if not checkpointing:
                return config.num_hidden_layers * per_layer
            size = torch.empty((), dtype=dtype).element_size()
            inputs = config.num_hidden_layers * batch * seq_len * config.hidden_size * size
            return inputs + per_layer  # the last layer is recomputed while all inputs are still held
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The whole bill: Llama-3-8B on 8 GPUs, one 4k sequence per GPU

        Model states per GPU for each ZeRO stage, with the activations stacked on top, without and with checkpointing,
        against the 80 GB of an H100 (and the 141 GB of an H200).
    """)
    lesson.code(r"""
        def states(stage):
            try:
                return model_state_bytes(LLAMA3_8B_PARAMS, stage, 8), "yours"
            except NotImplementedError:
                shard = -(-LLAMA3_8B_PARAMS // 8)
                n = lambda k: shard if stage >= k else LLAMA3_8B_PARAMS
                return {"params": 2 * n(3), "grads": 2 * n(2), "optimizer": 12 * n(1)}, "formula"


        def activations(checkpointing):
            try:
                return activation_memory(LLAMA3_8B, 1, 4096, torch.bfloat16, checkpointing), "yours"
            except NotImplementedError:
                layer = layer_bytes(LLAMA3_8B, 4096)[0]
                return (32 * 4096 * 4096 * 2 + layer) if checkpointing else 32 * layer, "formula"


        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
        for ax, checkpointing in zip(axes, (False, True)):
            act, who_a = activations(checkpointing)
            for stage in range(4):
                s, who_s = states(stage)
                bottom = 0
                for key, color in (("params", "C0"), ("grads", "C1"), ("optimizer", "C2")):
                    ax.bar(f"ZeRO-{stage}", s[key] / GB, bottom=bottom, color=color, label=key if stage == 0 else None)
                    bottom += s[key] / GB
                ax.bar(f"ZeRO-{stage}", act / GB, bottom=bottom, color="C3", label="activations" if stage == 0 else None)
            ax.axhline(80, color="k", ls="--", lw=1, label="H100 80 GB"); ax.axhline(141, color="gray", ls=":", lw=1, label="H200 141 GB")
            ax.set_title(("with" if checkpointing else "without") + f" checkpointing ({who_s}, {who_a})")
            ax.set_ylabel("GB per GPU"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        Without checkpointing the activations of one 4k sequence (131 GB with eager attention) sink every stage: ZeRO
        shards the model states, never the activations of each GPU's own micro-batch. With checkpointing they fall to
        about 5 GB, and ZeRO-1 already fits the 8B model on 80 GB cards; ZeRO-3 leaves room for a larger micro-batch.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`model_state_bytes`.** The shard is a ceiling division: a buffer of 10 elements over 4 GPUs pads to 12, 3 per
        GPU, never 2. Each stage adds one state to the sharded set, so the conditions are `>= 1`, `>= 2`, `>= 3`. The
        usual mistakes: *no fp32 master weights* (8 optimizer bytes: right for pure-bf16 training, not for
        mixed precision), *floor division* (a GPU would hold fewer elements than its slice), *a stage off by one*
        (gradients sharded by ZeRO-1, weights by ZeRO-2). What the table leaves out: temporary buffers (DeepSpeed's
        all-gather and reduce buckets, a few hundred MB), memory fragmentation, and ZeRO-3's prefetched layers.
        Optimizer choice moves $K$: 8-bit Adam (bitsandbytes) keeps $m$ and $v$ in one byte each, Adafactor factors $v$.

        **`layer_activation_bytes`.** The count follows the implementation, tensor by tensor. The mistakes: *the
        $K$ key/value heads* (GQA saves cache memory at inference, not activation memory in eager training), *no fp32
        softmax* (the probabilities then cost $s$ bytes instead of $4 + s$), *no fp32 upcast in RMSNorm*, and *the
        $T^2$ term left out*, which is harmless at $T = 128$ and most of the memory at $T = 4096$. With PyTorch's SDPA or
        FlashAttention (`attn_implementation="sdpa"` or `"flash_attention_2"`) the probabilities are not saved, and
        the count changes: measure it the same way.

        **`activation_memory`.** Checkpointing keeps $L$ inputs of $BTd$ elements in the model dtype, and the peak adds
        the one layer being recomputed. The mistakes: *forgetting the recomputed layer* (underestimates the peak by the
        very term that dominates at long context) and *keeping the inputs in fp32*.

        **Production.** DeepSpeed prints this estimate (`estimate_zero2_model_states_mem_needs_all_live`,
        `estimate_zero3_model_states_mem_needs_all_live`); PyTorch's `torch.cuda.memory._record_memory_history` and
        its snapshot viewer show the real timeline. Megatron-LM combines tensor and sequence parallelism (which
        divide the activations by the TP size) with selective recomputation; FSDP2 (`fully_shard`) implements ZeRO-3 per
        module, and CPU offload (ZeRO-Offload, ZeRO-Infinity) moves the optimizer states out of HBM entirely.
    """)
    lesson.mistakes()
    return lesson
