"""Source of 01_Hardware_Math_Systems/11_Parallelism_Planner.ipynb (build with `python -m llm_algo build p01.parallelism_planner`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.parallelism_planner",
        path="01_Hardware_Math_Systems/11_Parallelism_Planner.ipynb",
        title_en="Choosing DP, TP, PP and EP",
        title_zh="并行策略规划：DP、TP、PP 与 EP",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p01.training_memory", "p01.collectives_cost", "p01.moe_math"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 一个训练任务的 GPU 数 $N = d_p \times t_p \times p_p$：数据并行 (DP)、张量并行 (TP)、流水线并行 (PP)；
          专家并行 (EP) 从数据并行的 rank 中划出，要求 $e_p \mid d_p$、$e_p \mid E$。
        - 合法性：TP 必须整除注意力头数、KV 头数、MLP 宽度和词表；EP 必须整除专家数；PP 的每段至少一层
          （Llama 3 405B 把 126 层分成 16 段，首尾两段各少一层）。
        - 每卡参数：注意力和 MLP 按 $1/t_p$ 切，专家再按 $1/e_p$ 切，归一化和路由器复制；词嵌入在第一段，输出头在最后一段。
        - 每卡显存 = ZeRO 切分后的模型状态（稠密部分在 $d_p$ 个副本间切，专家部分在 $d_p/e_p$ 个副本间切）
          + 激活值：1F1B 调度下第 $s$ 段同时存 $\min(p_p - s, m)$ 个微批次 (micro-batch) 的激活，序列并行再除以 $t_p$。
        - 每卡通信：TP 每层每个微批次前向 2 次、反向 2 次 all-reduce（重算再加 2 次）；PP 收发 $(b, T, d)$ 激活；
          DP 每步同步梯度 $2\frac{p-1}{p}$ 倍梯度字节，ZeRO-3 为 3 倍；EP 每个 MoE 层每次前/反向 2 次 all-to-all。
        - 规划器 (planner)：枚举所有合法计划，去掉超出显存预算的，取步时 (step time) 最小者；与暴力搜索逐一比对。
        {易错点}

        Llama 3 405B was trained on 16,384 H100 GPUs with 8-way tensor parallelism, 16-way pipeline parallelism and
        128-way data parallelism, at 38–43% of the GPUs' BF16 peak (Dubey et al., 2024, *The Llama 3 Herd of Models*,
        arXiv:2407.21783, Table 4). DeepSeek-V3 used no tensor parallelism at all: 16-way pipeline parallelism, 64-way
        expert parallelism over 8 nodes and ZeRO-1 data parallelism on 2,048 H800s (DeepSeek-AI, arXiv:2412.19437,
        Section 3.2). Why those numbers and not others? 405B parameters in BF16 are 811 GB of weights alone; one
        80 GB GPU holds a tenth of that, and every way of cutting the model trades memory for communication and
        pipeline bubbles. A planner makes that trade explicit: it lists every legal layout, prices memory and
        bytes on the wire for each, and keeps the fastest one that fits.

        **You will implement** the parameters one GPU holds in each pipeline stage under TP × PP × EP (Megatron's
        layout), the memory per GPU (ZeRO stages, activation checkpointing, the 1F1B schedule's micro-batches in
        flight), the bytes each GPU sends per step for each kind of parallelism, and the planner. **Graded against**
        `transformers` models of Llama 3 (70B, 405B), Mixtral-8x7B and random small configs built on the `meta`
        device and sharded tensor by tensor with `torch.chunk`, a ZeRO spec that pads and shards state by state,
        step-by-step ring and all-to-all schedules per collective, the ZeRO paper's 1.5× for stage 3, and a
        brute-force search over every (DP, TP, PP, EP, ZeRO, checkpointing) tuple.
    """
    )
    lesson.md(r"""
        ## 1. Four ways to cut a model

        Take a decoder with $L$ layers, hidden size $d$, $H$ query heads and $K$ key/value heads of size $d_h$, MLP
        width $I$, vocabulary $V$ and, for a mixture of experts, $E$ experts of which each token uses $k$. $N$ GPUs
        are arranged as a grid $N = d_p \cdot t_p \cdot p_p$:

        - **Tensor parallelism** (TP, Megatron-LM: Shoeybi et al., 2019, arXiv:1909.08053) splits every weight
          matrix of a layer over $t_p$ GPUs. `q_proj`, `k_proj`, `v_proj`, `gate_proj`, `up_proj` are split by
          output rows ("column parallel": each GPU owns whole heads), `o_proj` and `down_proj` by input columns
          ("row parallel"), so one layer needs only two all-reduces in the forward pass and two in the backward pass.
          The embedding and the output head are split by vocabulary rows. RMSNorm gains and the MoE router are
          small and replicated. Whole heads per GPU means $t_p \mid H$ *and* $t_p \mid K$: Llama-3-70B has $K = 8$
          key/value heads, so $t_p = 16$ is illegal (Megatron would replicate the KV heads; we refuse it).
        - **Pipeline parallelism** (PP) gives each of $p_p$ GPUs a contiguous run of layers (a *stage*); the first
          stage also holds the embedding, the last one the final norm and the output head. A batch is cut into $m$
          micro-batches that flow through the stages. When $p_p \nmid L$, the stages cannot be equal: Llama 3 405B's
          126 layers go on 16 stages of 8 layers, less one on the first and one on the last stage, because those two
          also hold the embedding and the head (Dubey et al., Section 3.3.2). We use that rule in general: every stage
          gets $\lceil L / p_p \rceil$ layers, and the $p_p \lceil L/p_p \rceil - L$ missing layers are taken from the
          stages $0, p_p - 1, 1, p_p - 2, \dots$ in that order.
        - **Data parallelism** (DP) runs $d_p$ replicas of that $t_p \times p_p$ grid on different sequences and
          synchronises gradients; ZeRO (`p01.training_memory`) shards the model states over the $d_p$ replicas.
        - **Expert parallelism** (EP, GShard: Lepikhin et al., 2020, arXiv:2006.16668) places the $E$ experts of an
          MoE layer on $e_p$ different GPUs, and tokens travel to their experts by all-to-all (`p01.collectives_cost`).
          As in Megatron-LM and DeepSpeed-MoE, the EP group is carved out of the data-parallel ranks ($e_p \mid d_p$),
          so each expert exists on $d_p / e_p$ replicas, and its states are ZeRO-sharded over those.

        For a bias-free Llama or Mixtral decoder, one GPU of stage $s$ (with $\ell_s$ layers) holds

        $$
        \underbrace{\ell_s\Big[\tfrac{2 d (H + K) d_h}{t_p} + 2d + \underbrace{\tfrac{3 d I}{t_p}}_{\text{dense MLP}}
        \ \text{or}\ \underbrace{E d}_{\text{router}}\Big] + [s = 0]\tfrac{V d}{t_p}
        + [s = p_p - 1]\big(\tfrac{V d}{t_p} + d\big)}_{\text{dense: replicated } d_p \text{ times}}
        \quad+\quad \underbrace{\ell_s \tfrac{E}{e_p}\tfrac{3 d I}{t_p}}_{\text{experts: replicated } d_p/e_p \text{ times}} .
        $$

        The checks hold you to a real model: they build it on the `meta` device (shapes only, no memory), cut every
        parameter tensor with `torch.chunk` along the dimension Megatron cuts, and add up what rank 0 of each stage
        keeps.
    """)
    lesson.setup(r"""
        import dataclasses
        import math
        import warnings

        import matplotlib.pyplot as plt
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' tqdm import warns inside a kernel without ipywidgets
            from transformers import LlamaConfig, MixtralConfig

        model_state_bytes, layer_activation_bytes = lesson.use(
            "p01.training_memory", "model_state_bytes", "layer_activation_bytes"
        )


        @dataclasses.dataclass(frozen=True)
        class Plan:
            dp: int                      # data-parallel replicas
            tp: int                      # tensor-parallel GPUs per layer
            pp: int                      # pipeline stages
            ep: int = 1                  # expert-parallel GPUs (taken from the dp ranks)
            zero_stage: int = 1          # ZeRO 0-3 over the data-parallel replicas
            checkpointing: bool = False  # recompute every layer in the backward pass


        @dataclasses.dataclass(frozen=True)
        class Workload:
            micro_batch: int             # sequences per micro-batch
            seq_len: int                 # tokens per sequence
            global_batch: int            # sequences per optimizer step, all replicas together
            layer_activation_bytes: int  # bytes one layer saves for one micro-batch, unsharded, no checkpointing


        def micro_batches(plan, workload):
            # The micro-batches each pipeline runs per step; ValueError for a plan no model can run.
            if min(plan.dp, plan.tp, plan.pp, plan.ep) < 1 or plan.zero_stage not in (0, 1, 2, 3):
                raise ValueError(f"need dp, tp, pp, ep >= 1 and ZeRO 0-3, got {plan}")
            if plan.dp % plan.ep:
                raise ValueError(f"the EP group is carved out of the dp ranks: ep={plan.ep} must divide dp={plan.dp}")
            count, rest = divmod(workload.global_batch, plan.dp * workload.micro_batch)
            if rest or count < 1:
                raise ValueError(f"dp * micro_batch = {plan.dp * workload.micro_batch} must divide the global batch "
                                 f"{workload.global_batch}")
            return count


        def flash_layer_bytes(config, micro_batch, seq_len):
            # p01.training_memory's count for an eager BF16 Llama layer, with FlashAttention's saving instead of the
            # (B, H, T, T) probabilities (a (B, H, T) fp32 log-sum-exp), and k MLPs per token for a Mixtral layer.
            view = LlamaConfig(hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
                               num_attention_heads=config.num_attention_heads, vocab_size=config.vocab_size,
                               num_key_value_heads=config.num_key_value_heads, num_hidden_layers=1)
            eager = layer_activation_bytes(view, micro_batch, seq_len, torch.bfloat16)
            heads, tokens = config.num_attention_heads, micro_batch * seq_len
            flash = eager - (4 + 2) * micro_batch * heads * seq_len**2 + 4 * micro_batch * heads * seq_len
            extra_experts = getattr(config, "num_experts_per_tok", 1) - 1 if config.model_type == "mixtral" else 0
            return flash + extra_experts * 4 * 2 * tokens * config.intermediate_size


        # Published configurations (config.json on the Hugging Face Hub), the fields that matter here.
        LLAMA3_70B = LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                 num_attention_heads=64, num_key_value_heads=8, tie_word_embeddings=False)
        LLAMA3_405B = LlamaConfig(vocab_size=128256, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                                  num_attention_heads=128, num_key_value_heads=8, tie_word_embeddings=False)
        MIXTRAL_8X7B = MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                                     num_experts_per_tok=2, tie_word_embeddings=False)
        GB = 10**9
    """)
    lesson.md(r"""
        ## 2. Exercise `params_per_gpu`

        Return one dict per pipeline stage, `{"layers": ℓ_s, "dense": ..., "expert": ...}`: the layers of the stage
        and the parameters one GPU of that stage holds, split into the part replicated over all $d_p$ replicas and
        the routed experts (replicated over $d_p / e_p$). Cover `model_type` `"llama"` and `"mixtral"` (for Mixtral,
        $E$ is `config.num_local_experts`; a dense model has $E = 1$, so only $e_p = 1$ divides it). The head size is
        `config.head_dim` when set, else $d / H$. Refuse with a `ValueError`: another model type, tied embeddings
        (Megatron keeps a copy on each end of the pipeline; we leave that out), $t_p$, $p_p$ or $e_p$ below 1, $t_p$
        not dividing $H$, $K$, $I$ or $V$, $p_p > L$, and $e_p$ not dividing $E$.
    """)
    lesson.exercise(
        "params_per_gpu",
        r'''
        def params_per_gpu(config, tp: int, pp: int, ep: int) -> list[dict[str, int]]:
            """Per pipeline stage: {"layers", "dense", "expert"} parameters on one GPU (Megatron layout, bias-free)."""
            # TODO: refuse what no GPU grid can hold (ValueError)
            # TODO: layers per stage: ceil(L / pp), the missing ones taken from stages 0, pp-1, 1, pp-2, ...
            # TODO: per layer: attention and MLP split by tp, norms (and the router) replicated, experts split by ep too
            # TODO: the embedding on the first stage, the final norm and the head on the last
            ### BEGIN SOLUTION
            if config.model_type not in ("llama", "mixtral") or config.tie_word_embeddings:
                raise ValueError("only untied Llama and Mixtral configs are covered")
            d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
            heads, kv_heads, width = config.num_attention_heads, config.num_key_value_heads, config.intermediate_size
            head_dim = getattr(config, "head_dim", None) or d // heads
            experts = config.num_local_experts if config.model_type == "mixtral" else 1
            if min(tp, pp, ep) < 1:
                raise ValueError(f"tp, pp and ep must be >= 1, got {tp}, {pp}, {ep}")
            if heads % tp or kv_heads % tp or width % tp or vocab % tp:
                raise ValueError(f"tp={tp} must divide the {heads} heads, {kv_heads} KV heads, width {width}, vocab {vocab}")
            if pp > layers or experts % ep:
                raise ValueError(f"need pp <= {layers} layers and ep dividing {experts} experts, got pp={pp}, ep={ep}")
            per_stage = -(-layers // pp)
            counts = [per_stage] * pp
            for i in range(per_stage * pp - layers):  # Llama 3: the ends, which hold the embedding and head, give up layers
                counts[i // 2 if i % 2 == 0 else pp - 1 - i // 2] -= 1
            attention = 2 * d * (heads + kv_heads) * head_dim // tp  # q and o: H heads, k and v: K heads
            if experts > 1:
                dense_layer, expert_layer = attention + 2 * d + experts * d, experts // ep * 3 * d * width // tp
            else:
                dense_layer, expert_layer = attention + 2 * d + 3 * d * width // tp, 0
            stages = []
            for stage, count in enumerate(counts):
                dense = count * dense_layer
                if stage == 0:
                    dense += vocab * d // tp  # embedding, split by vocabulary rows
                if stage == pp - 1:
                    dense += vocab * d // tp + d  # output head and final norm
                stages.append({"layers": count, "dense": dense, "expert": count * expert_layer})
            return stages
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Llama 3 405B on its published grid

        $t_p = 8$, $p_p = 16$: about 3.2 B parameters per GPU, 6.3 GB of BF16 weights, with the two end stages one
        layer lighter to make room for the embedding and the head.
    """)
    lesson.code(r"""
        try:
            stages = params_per_gpu(LLAMA3_405B, 8, 16, 1)
            print("layers per stage:", [s["layers"] for s in stages])
            for s in (0, 1, 15):
                print(f"stage {s:2}: {stages[s]['dense'] / 1e9:.3f} B parameters per GPU")
            total = sum(s["dense"] for s in stages) * 8 - (8 - 1) * sum(2 * 16384 * s["layers"] for s in stages) - 7 * 16384
            print(f"x 8 TP ranks, replicated norms counted once: {total:,} (the model built on meta: 405,853,388,800)")
        except NotImplementedError:
            print("implement params_per_gpu to see the stages")
    """)
    lesson.md(r"""
        ## 3. Memory per GPU

        **Model states.** Mixed-precision Adam keeps 16 bytes per parameter, sharded by ZeRO over the replicas of that
        parameter (`p01.training_memory`, your `model_state_bytes`): the dense part of a stage over $d_p$ GPUs, its
        experts over $d_p / e_p$. A stage's states are the sum of the two, key by key.

        **Activations.** Let $A$ be the bytes one layer saves for one micro-batch without any parallelism
        (`Workload.layer_activation_bytes`; the setup's `flash_layer_bytes` estimates it from your
        `layer_activation_bytes` with FlashAttention's saving instead of the $(B, H, T, T)$ probabilities). Three
        factors turn it into bytes per GPU:

        - *Sequence parallelism* (Korthikanti et al., 2022, arXiv:2205.05198, Table 2) splits the activations that
          tensor parallelism leaves whole (norms, dropout) along the sequence, so *every* activation is divided by
          $t_p$: $\lceil A / t_p \rceil$.
        - *The 1F1B schedule* (PipeDream-Flush; Narayanan et al., 2021, arXiv:2104.04473, Section 2.2) starts the
          backward pass of micro-batch 1 as soon as it leaves the last stage, so stage $s$ never holds more than
          $p_p - s$ micro-batches in flight, nor more than the $m = \text{global batch} / (d_p \cdot b)$ there are:
          $\min(p_p - s, m)$. The first stage holds the most.
        - *Activation checkpointing* keeps only each layer's input, $\lceil b T d \cdot 2 / t_p \rceil$ bytes in
          BF16, and at the peak one layer recomputed, $\lceil A / t_p \rceil$.

        $$
        \text{act}_s = \begin{cases}
        \min(p_p - s, m)\ \ell_s \lceil A / t_p \rceil & \text{no checkpointing} \\
        \min(p_p - s, m)\ \ell_s \lceil 2 b T d / t_p \rceil + \lceil A / t_p \rceil & \text{checkpointing}
        \end{cases}
        $$

        The last stage holds the output head, the first stage the most activations: which one is fuller depends on the
        plan, so a planner must look at every stage. (Left out: the logits and the loss, temporary communication
        buffers, fragmentation — budget a few GB for them.)
    """)
    lesson.md(r"""
        ## 4. Exercise `memory_per_gpu`

        One dict per pipeline stage, `{"params", "grads", "optimizer", "activations"}` in bytes (ints), for a `Plan`
        and a `Workload`. Validate with the setup's `micro_batches(plan, workload)`, which also returns $m$; your
        `params_per_gpu` refuses the rest. Use `model_state_bytes` (from `p01.training_memory`) for each of the two
        parameter groups that is not empty.
    """)
    lesson.exercise(
        "memory_per_gpu",
        r'''
        def memory_per_gpu(config, plan, workload) -> list[dict[str, int]]:
            """Per pipeline stage: bytes of params, grads, optimizer states and activations on one GPU."""
            # TODO: m micro-batches (validated), the stages' parameters
            # TODO: states: dense part ZeRO-sharded over dp, experts over dp // ep
            # TODO: activations: 1F1B in-flight micro-batches x layers x (per layer / tp), or checkpointed inputs
            ### BEGIN SOLUTION
            m = micro_batches(plan, workload)
            stages = params_per_gpu(config, plan.tp, plan.pp, plan.ep)
            layer = -(-workload.layer_activation_bytes // plan.tp)  # sequence parallelism: all of it split over tp
            layer_input = -(-2 * workload.micro_batch * workload.seq_len * config.hidden_size // plan.tp)
            memory = []
            for stage, held in enumerate(stages):
                states = {"params": 0, "grads": 0, "optimizer": 0}
                for count, replicas in ((held["dense"], plan.dp), (held["expert"], plan.dp // plan.ep)):
                    if count:
                        for key, value in model_state_bytes(count, plan.zero_stage, replicas).items():
                            states[key] += value
                in_flight = min(plan.pp - stage, m)  # 1F1B: stage s holds at most pp - s micro-batches
                if plan.checkpointing:
                    activations = in_flight * held["layers"] * layer_input + layer  # plus one layer recomputed
                else:
                    activations = in_flight * held["layers"] * layer
                memory.append({**states, "activations": activations})
            return memory
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Memory bars: Llama-3-70B on 64 H100s, 8k-token sequences

        The same model and batch (512 sequences of 8,192 tokens, micro-batch 1) under five plans; each bar is the
        fullest stage of the plan.
    """)
    lesson.code(r"""
        workload_70b = Workload(1, 8192, 512, flash_layer_bytes(LLAMA3_70B, 1, 8192))
        plans = {
            "DP64 ZeRO-0": Plan(64, 1, 1, zero_stage=0),
            "DP64 ZeRO-3": Plan(64, 1, 1, zero_stage=3),
            "DP64 ZeRO-3 ckpt": Plan(64, 1, 1, zero_stage=3, checkpointing=True),
            "TP8 DP8 ZeRO-1": Plan(8, 8, 1, zero_stage=1),
            "TP8 PP4 DP2 ZeRO-1": Plan(2, 8, 4, zero_stage=1),
            "TP8 PP4 DP2 ckpt": Plan(2, 8, 4, zero_stage=1, checkpointing=True),
        }
        try:
            fig, ax = plt.subplots(figsize=(9, 3.8))
            for x, (name, plan) in enumerate(plans.items()):
                stages = memory_per_gpu(LLAMA3_70B, plan, workload_70b)
                fullest = max(stages, key=lambda s: sum(s.values()))
                bottom = 0
                for key, color in (("params", "C0"), ("grads", "C1"), ("optimizer", "C2"), ("activations", "C3")):
                    ax.bar(x, fullest[key] / GB, bottom=bottom, color=color, label=key if x == 0 else None)
                    bottom += fullest[key] / GB
                ax.text(x, min(bottom, 390), f"{bottom:.0f}", ha="center", va="bottom", fontsize=8)
            ax.axhline(80, color="k", ls="--", lw=1, label="H100 80 GB")
            ax.set_xticks(range(len(plans)), list(plans), rotation=15, fontsize=8)
            ax.set_ylim(0, 420); ax.set_ylabel("GB on the fullest GPU"); ax.legend(fontsize=8, ncol=5)
            ax.set_title("Llama-3-70B, 64 GPUs, 512 x 8192 tokens per step (bars above 420 GB are cut)")
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("implement params_per_gpu and memory_per_gpu to see the bars")
    """)
    lesson.md(r"""
        Pure data parallelism cannot hold a 70B model on 80 GB (1.1 TB of states without ZeRO), and even ZeRO-3
        drowns in the activations of a whole 80-layer stack at 8k tokens; checkpointing fixes that. Tensor
        parallelism divides states *and* activations by 8. Pipeline stages divide the layers, but the first stage
        keeps $p_p$ micro-batches in flight, so its activations do not shrink with $p_p$ — the reason long-context
        runs add checkpointing or context parallelism.

        ## 5. Communication per GPU

        Bytes one GPU sends per optimizer step, with the ring algorithms of `p01.collectives_cost` (a ring
        all-reduce of $n$ bytes sends $2\frac{p-1}{p} n$ per GPU; reduce-scatter, all-gather and all-to-all
        $\frac{p-1}{p} n$). Let $a = 2 b T d$, the bytes of one $(b, T, d)$ BF16 activation, and $r = 2$ passes
        (forward, backward), $r = 3$ with checkpointing (the forward is run again):

        | parallelism | what moves | bytes per GPU per step (stage $s$) |
        | --- | --- | --- |
        | TP | 2 all-reduces of $a$ per layer per pass (Megatron; with sequence parallelism an all-gather + a reduce-scatter, the same bytes) | $m\,\ell_s \cdot 2r \cdot 2\frac{t_p - 1}{t_p} a$ |
        | PP | each micro-batch's activation forward and its gradient backward, split over the TP ranks | $m \frac{a}{t_p}\big([s > 0] + [s < p_p - 1]\big)$ |
        | DP | gradients of the stage, $2P$ bytes: all-reduce (ZeRO 0–2: reduce-scatter + all-gather, the same) or, for ZeRO-3, reduce-scatter + two all-gathers of the weights (ZeRO paper, Section 7.2: $1.5\times$) | $c\,\frac{p-1}{p}\,2P$, $c = 2$ or $3$, per group ($P_{\text{dense}}$ over $p = d_p$, $P_{\text{expert}}$ over $p = d_p/e_p$) |
        | EP | 2 all-to-alls (dispatch, combine) of the GPU's $bT/t_p$ tokens, each sent to $k$ experts, per MoE layer per pass | $m\,\ell_s \cdot 2r \cdot \frac{e_p - 1}{e_p} \frac{k a}{t_p}$ |

        A dense model has no EP traffic. (Left out: the tied-embedding all-reduce, ZeRO-3 re-gathering weights for
        every micro-batch, uneven routing.)
    """)
    lesson.md(r"""
        ## 6. Exercise `comm_bytes_per_gpu`

        One dict per pipeline stage, `{"tp", "pp", "dp", "ep"}`: the bytes (floats) one GPU of the stage sends per
        step, by the table. Validate with `micro_batches` and `params_per_gpu`; $k$ is `config.num_experts_per_tok`
        for Mixtral.
    """)
    lesson.exercise(
        "comm_bytes_per_gpu",
        r'''
        def comm_bytes_per_gpu(config, plan, workload) -> list[dict[str, float]]:
            """Per pipeline stage: bytes one GPU sends per optimizer step for TP, PP, DP and EP (ring algorithms)."""
            # TODO: m micro-batches, the stages, the bytes of one (b, T, d) activation, the passes (2, or 3 recomputing)
            # TODO: the four rows of the table, per stage
            ### BEGIN SOLUTION
            m = micro_batches(plan, workload)
            stages = params_per_gpu(config, plan.tp, plan.pp, plan.ep)
            activation = 2 * workload.micro_batch * workload.seq_len * config.hidden_size  # (b, T, d) in BF16
            passes = 3 if plan.checkpointing else 2  # forward, backward, and the forward again
            top_k = config.num_experts_per_tok if config.model_type == "mixtral" else 0
            grad_factor = 3 if plan.zero_stage == 3 else 2  # ZeRO-3 all-gathers the weights in forward and backward
            comm = []
            for stage, held in enumerate(stages):
                calls = m * held["layers"] * 2 * passes  # two collectives per layer per pass
                tp = calls * 2 * (plan.tp - 1) / plan.tp * activation
                pp = m * activation / plan.tp * ((stage > 0) + (stage < plan.pp - 1))
                dp = grad_factor * (plan.dp - 1) / plan.dp * 2 * held["dense"]
                expert_replicas = plan.dp // plan.ep
                dp += grad_factor * (expert_replicas - 1) / expert_replicas * 2 * held["expert"]
                ep = calls * (plan.ep - 1) / plan.ep * top_k * activation / plan.tp
                comm.append({"tp": tp, "pp": pp, "dp": dp, "ep": ep})
            return comm
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. The step time, and the planner

        The cell below prices a plan on H100s: compute at 40% of the 989 TFLOP/s BF16 peak (NVIDIA H100
        SXM datasheet; Llama 3 reports 38–43% MFU, Table 4), $6$ FLOPs per active weight per token ($8$ when
        recomputing) plus the attention's $12\,H d_h T$ (PaLM, arXiv:2204.02311, Appendix B), the 1F1B schedule's
        $m + p_p - 1$ micro-batch slots (a bubble of $p_p - 1$), and each group's traffic on NVLink (450 GB/s per
        direction) when its ranks sit in one 8-GPU node, on 400 Gb/s InfiniBand (50 GB/s per GPU) otherwise, none of it
        overlapped. Ranks are numbered as Megatron-LM numbers them: TP fastest, then EP inside DP, PP slowest, so a
        TP group spans $t_p$ consecutive GPUs (it must stay in a node), an EP group $t_p e_p$, a DP group $t_p d_p$. It is a model, pessimistic about overlap: real systems hide DP traffic behind the backward pass and
        interleave virtual stages to shrink the bubble (Narayanan et al., 2021).
    """)
    lesson.code(r"""
        H100 = {"bf16_flops": 989e12, "mfu": 0.40, "nvlink": 450e9, "network": 50e9, "gpus_per_node": 8}


        def step_time(config, plan, workload, gpu=H100):
            # Seconds per optimizer step: 1F1B compute with its bubble, plus communication, not overlapped.
            if plan.tp > gpu["gpus_per_node"]:
                return math.inf  # tensor parallelism needs NVLink: it stays inside one node
            m = micro_batches(plan, workload)
            stages = params_per_gpu(config, plan.tp, plan.pp, plan.ep)
            d, heads, width = config.hidden_size, config.num_attention_heads, config.intermediate_size
            head_dim = getattr(config, "head_dim", None) or d // heads
            mlps = config.num_experts_per_tok if config.model_type == "mixtral" else 1
            active = 2 * d * (heads + config.num_key_value_heads) * head_dim + mlps * 3 * d * width
            per_token = (8 if plan.checkpointing else 6) * active + 12 * heads * head_dim * workload.seq_len
            tokens = workload.micro_batch * workload.seq_len
            slot = max(s["layers"] * per_token * tokens / plan.tp for s in stages)
            slot = max(slot, 6 * config.vocab_size * d * tokens / plan.tp)  # the head on the last stage, at least
            compute = (m + plan.pp - 1) * slot / (gpu["bf16_flops"] * gpu["mfu"])
            # Megatron's rank order (TP fastest, then EP inside DP, PP slowest): a group spanning <= 8 consecutive
            # ranks is inside one node, on NVLink; a wider one crosses the network.
            link = lambda span: gpu["nvlink"] if span <= gpu["gpus_per_node"] else gpu["network"]
            spans = {"tp": plan.tp, "ep": plan.tp * plan.ep, "dp": plan.tp * plan.dp, "pp": plan.tp * plan.dp * plan.pp}
            comm = comm_bytes_per_gpu(config, plan, workload)
            wire = max(sum(c[kind] / link(span) for kind, span in spans.items()) for c in comm)
            return compute + wire
    """)
    lesson.md(r"""
        ## 8. Exercise `best_plan`

        Among all plans on exactly `num_gpus` GPUs ($d_p t_p p_p = N$, every $e_p$ dividing $d_p$, ZeRO 0–3,
        checkpointing off and on), return the one with the smallest `step_time(plan)` whose fullest stage (the largest
        sum of the four entries of `memory_per_gpu`) fits in `memory_budget` bytes (any one of them when several are equally fast), or `None` when none fits. A plan
        that `memory_per_gpu` refuses is not a plan: skip it. `step_time` is a function of the plan alone (the checks
        pass their own). Enumerate divisors, not all integers: a 16,384-GPU search must stay fast.
    """)
    lesson.exercise(
        "best_plan",
        r'''
        def best_plan(config, num_gpus: int, workload, memory_budget: float, step_time):
            """The valid Plan on num_gpus GPUs with the smallest step_time(plan) that fits memory_budget, else None."""
            # TODO: every tp, pp with tp * pp dividing num_gpus; dp the rest; every ep dividing dp; ZeRO; checkpointing
            # TODO: skip plans memory_per_gpu refuses (ValueError) and plans whose fullest stage exceeds the budget
            # TODO: keep the fastest
            ### BEGIN SOLUTION
            divisors = lambda n: [k for k in range(1, n + 1) if n % k == 0]
            best, best_time = None, math.inf
            for tp in divisors(num_gpus):
                for pp in divisors(num_gpus // tp):
                    dp = num_gpus // (tp * pp)
                    for ep in divisors(dp):
                        for zero_stage in range(4):
                            for checkpointing in (False, True):
                                plan = Plan(dp, tp, pp, ep, zero_stage, checkpointing)
                                try:
                                    stages = memory_per_gpu(config, plan, workload)
                                except ValueError:
                                    continue  # no such layout for this model or batch
                                if max(sum(stage.values()) for stage in stages) > memory_budget:
                                    continue
                                time = step_time(plan)
                                if time < best_time:
                                    best, best_time = plan, time
            return best
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the planner picks

        Llama-3-70B on 64 H100s and Mixtral-8x7B on 32, 80 GB each (of which we leave 8 GB for what the model
        leaves out), and the step time of the published Llama 3 405B grid.
    """)
    lesson.code(r"""
        def describe(plan):
            return (f"DP{plan.dp} TP{plan.tp} PP{plan.pp} EP{plan.ep} ZeRO-{plan.zero_stage}"
                    + (" ckpt" if plan.checkpointing else ""))


        try:
            mixtral_workload = Workload(1, 4096, 256, flash_layer_bytes(MIXTRAL_8X7B, 1, 4096))
            for name, config, gpus, workload in (("Llama-3-70B", LLAMA3_70B, 64, workload_70b),
                                                 ("Mixtral-8x7B", MIXTRAL_8X7B, 32, mixtral_workload)):
                timer = lambda plan, config=config, workload=workload: step_time(config, plan, workload)
                plan = best_plan(config, gpus, workload, 72 * GB, timer)
                fullest = max(sum(s.values()) for s in memory_per_gpu(config, plan, workload))
                print(f"{name:13} on {gpus} GPUs: {describe(plan):32} {timer(plan):6.2f} s/step, {fullest / GB:5.1f} GB")
            # Table 4: 16,384 GPUs, 16M tokens per step (2,048 sequences of 8,192). ZeRO-2 is our reading of the paper's
            # FSDP, which shards optimizer states and gradients but keeps the weights after the forward pass.
            workload_405b = Workload(1, 8192, 2048, flash_layer_bytes(LLAMA3_405B, 1, 8192))
            for plan in (Plan(128, 8, 16, zero_stage=2), Plan(128, 8, 16, zero_stage=2, checkpointing=True)):
                fullest = max(sum(s.values()) for s in memory_per_gpu(LLAMA3_405B, plan, workload_405b))
                seconds = step_time(LLAMA3_405B, plan, workload_405b)
                print(f"Llama 3 405B, published grid {describe(plan):30} {seconds:6.1f} s/step, {fullest / GB:5.1f} GB")
        except NotImplementedError:
            print("implement the four exercises to run the planner")
    """)
    lesson.md(r"""
        Read the output against the published runs: for Llama 3 405B the paper's grid needs checkpointing in this
        model (or context parallelism, or fewer micro-batches in flight), and our step time is two to three times the
        real one (about 7 s: $6 \cdot 405\text{B} \cdot 16.8\text{M}$ tokens plus attention, at 400 TFLOP/s on each
        of 16,384 GPUs), because we overlap nothing and pay the full
        $p_p - 1$ bubble that the paper's interleaved schedule shrinks. The planner's ranking, not its seconds, is
        what to trust: TP up to the node, PP until the states fit, DP for the rest.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solutions

        **`params_per_gpu`.** Validation carries half the lesson: every `%` is a reason a real launcher refuses a
        layout (Megatron-LM's `--tensor-model-parallel-size` must divide the heads; vLLM refuses a TP size that does
        not divide the KV heads unless it replicates them). The layer count per stage is a ceiling with the deficit
        taken from the ends, as Llama 3 does. The usual mistakes: *the KV projections counted with $H$
        heads* (GQA's $K$ heads are what TP splits), *the norms split by TP* (they are replicated: each rank needs
        the whole gain), *the experts not divided by EP*, *the head forgotten on the last stage*. Megatron pads the
        vocabulary to a multiple of $128\,t_p$ instead of refusing, and replicates KV heads when $t_p > K$.

        **`memory_per_gpu`.** Two ZeRO calls, because the expert states have fewer replicas to shard over: with
        $e_p = d_p$ every expert lives on one GPU and ZeRO cannot shard it at all. The mistakes: *the experts sharded
        over all $d_p$ replicas*, *every stage holding $p_p$ micro-batches* (or only one: 1F1B holds $p_p - s$),
        *activations not divided by TP* (true without sequence parallelism, for the norms and dropout masks), *the
        recomputed layer forgotten*.

        **`comm_bytes_per_gpu`.** The TP term is the expensive one per byte (it runs inside every layer, on the
        critical path), which is why TP stays on NVLink; PP sends the least; DP's bytes do not depend on the batch and
        hide behind the backward pass in real systems (DDP buckets, FSDP prefetch). The mistakes: *the all-reduce's
        factor 2 dropped*, *ZeRO-3 priced like ZeRO-2* (the ZeRO paper's 1.5×), *checkpointing's extra forward
        forgotten*, *EP traffic over $d_p$ instead of $e_p$ ranks*.

        **`best_plan`.** Enumerate divisors: $t_p$ divides $N$, $p_p$ divides $N/t_p$, $e_p$ divides $d_p$; all
        other rules live in one place (the `ValueError` of `memory_per_gpu`). The mistakes: *$p_p$ taken from the
        divisors of $N$ rather than $N / t_p$* (a plan that uses fewer GPUs than it has), *only the first stage's
        memory compared* (the last stage has the head), *a budget that must be beaten strictly*.

        **Production.** Megatron-LM and NeMo take these sizes as flags and print the memory estimate
        (`--tensor-model-parallel-size`, `--pipeline-model-parallel-size`, `--expert-model-parallel-size`,
        `--sequence-parallel`, `--recompute-granularity`); DeepSpeed's `estimate_zero3_model_states_mem_needs_all_live`
        prices ZeRO; PyTorch's TorchTitan composes FSDP2, TP, PP and context parallelism on a `DeviceMesh`. Automatic
        planners exist (Alpa, Galvatron, Megatron's and NeMo's auto-configurators) and search exactly this space with
        profiled, not modelled, times.
    """)
    lesson.mistakes()
    return lesson
