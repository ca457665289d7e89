"""Source of 02_PyTorch_Algorithms/44_Tensor_Parallel.ipynb (build with `python -m llm_algo build p02.tensor_parallel`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.tensor_parallel",
        path="02_PyTorch_Algorithms/44_Tensor_Parallel.ipynb",
        title_en="Tensor parallelism: Megatron's f and g, parallel MLP, attention and vocabulary",
        title_zh="张量并行：Megatron 的 f/g 算子、并行 MLP、注意力与词表并行交叉熵",
        difficulty="hard",
        device="cpu",
        minutes=150,
        prerequisites=["p01.collectives_cost", "p02.swiglu", "p02.attention_mha_gqa", "p02.cross_entropy"],
    )
    lesson.title(
        intro=r"""
        A Llama-3-70B layer holds about 856 M parameters: 1.7 GB in bf16, times 80 layers, plus twice that again in
        gradients and four times in fp32 Adam moments. No single GPU holds it, and data parallelism (every GPU keeps
        the whole model) does not help. **Tensor parallelism** (张量并行, TP) splits every weight matrix of a layer
        over $p$ GPUs, so each keeps $1/p$ of the layer and does $1/p$ of its FLOPs, and the GPUs exchange
        activations twice per layer. Megatron-LM (Shoeybi et al., 2019) showed that two collectives per layer are
        enough, with two tiny autograd operators it calls $f$ and $g$; every large training stack (Megatron-Core,
        NeMo, DeepSpeed, PyTorch's `torch.distributed.tensor.parallel`) and every multi-GPU inference server (vLLM,
        SGLang, TensorRT-LLM) shards a transformer that way.

        **You will implement**, in code that runs inside real `torch.distributed` processes (gloo on this CPU, NCCL on
        GPUs, the same code): the $f$ and $g$ operators as `torch.autograd.Function`s; column- and row-parallel linear
        layers; Llama's SwiGLU MLP split over the ranks (one all-reduce forward, one backward); causal GQA attention
        with the query and key/value heads split over the ranks; and the vocabulary-parallel cross-entropy, which
        never gathers the logits. **Graded against** the unsplit modules with the same weights (`nn.Linear` layers; Llama's SwiGLU MLP
        and causal GQA attention with RoPE in Hugging Face's `LlamaMLP`/`LlamaAttention` layout, on one process with
        `F.scaled_dot_product_attention`; `F.cross_entropy`): outputs, input gradients and every parameter gradient
        (through one SGD step), in float64, float32 and bfloat16, in a world of 2 processes and, for one check of each
        exercise, on a group of 2 ranks inside a world of 3 whose third rank must receive nothing (with a frozen
        parameter and one the forward never uses where there is a training step); the number of all-reduces in the
        forward and the backward is counted.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：70B 模型的一层就有约 8.6 亿参数；张量并行（TP）把每个权重矩阵切到 $p$ 张 GPU 上，每张卡只存 $1/p$、只算 $1/p$。
        - **列并行 / 行并行**：$Y = XW^\top$，列并行按输出维切 $W$ 的行，每个 rank 得到输出的一段；行并行按输入维切，每个 rank 得到部分和，需要 all-reduce 求和。
        - **f 与 g 算子**：$f$ 前向恒等、反向 all-reduce；$g$ 前向 all-reduce、反向恒等。MLP 与注意力都是“列并行 → 局部计算 → 行并行”，每层前向一次、反向一次 all-reduce。
        - **SwiGLU**：gate 与 up 融合成一个列并行线性层（每个 rank 的权重是 [gate 的一段; up 的一段]），$f$ 只调用一次。
        - **注意力**：按头切分，GQA 的 KV 头也要切；$p$ 不能整除 query 头数或 KV 头数时直接拒绝。
        - **词表并行交叉熵**：logits 按词表切分，不做 all-gather；对每个 token 的最大值（MAX）、$\sum e^{z}$（SUM）和目标 logit（只由拥有该词的 rank 提供）做 all-reduce，反向 softmax − one-hot 完全本地。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: one layer does not fit, and its matmuls are what we split

        A decoder layer is two blocks, each of the form *linear layers in, something local, linear layer out*:

        - the **MLP** (SwiGLU): $Y = \big(\mathrm{silu}(X W_g^\top) \odot X W_u^\top\big) W_d^\top$ with
          $X \in \mathbb{R}^{N \times H}$ ($N = B \cdot T$ tokens), $W_g, W_u \in \mathbb{R}^{F \times H}$,
          $W_d \in \mathbb{R}^{H \times F}$. Llama-3-70B: $H = 8192$, $F = 28672$, so the MLP is
          $3 \cdot 8192 \cdot 28672 = 705$ M parameters per layer;
        - **attention**: $Q = X W_q^\top$, $K = X W_k^\top$, $V = X W_v^\top$, attention per head, then $W_o$. Llama-3-70B has
          64 query heads and 8 key/value heads of dimension 128: $W_q, W_o$ are $8192 \times 8192$ and $W_k, W_v$
          are $1024 \times 8192$, 151 M parameters per layer.

        With $p$ GPUs of one node (NVLink, typically $p = 8$), tensor parallelism gives each GPU $1/p$ of every one
        of these matrices. The question is where to cut so that the GPUs rarely have to talk.

        ## 2. Two ways to split a linear layer

        Take $Y = X W^\top$, $X$ of shape $(N, K)$, $W$ of shape $(M, K)$ as `nn.Linear` stores it.

        **Column-parallel** (split the *output* features; in `nn.Linear` storage, the *rows* of $W$): rank $r$ keeps
        $W_r = W[rM/p : (r+1)M/p,\ :]$ of shape $(M/p, K)$, needs the whole $X$, and computes
        $Y_r = X W_r^\top$ of shape $(N, M/p)$: its own block of the output's columns, with no communication.
        (Megatron's name refers to the columns of $A = W^\top$ in $Y = XA$.)

        **Row-parallel** (split the *input* features, the columns of $W$): rank $r$ keeps
        $W_{:,r} = W[:,\ rK/p : (r+1)K/p]$ of shape $(M, K/p)$, receives only the matching slice $X_r$ of shape
        $(N, K/p)$, and computes a **partial sum** $P_r = X_r W_{:,r}^\top$ of shape $(N, M)$. The output is
        $Y = \sum_r P_r$: one all-reduce. A bias is added **once**, after the sum.

        Chain them: a column-parallel layer leaves each rank holding a column block $Y_r$, which is exactly the slice
        of the input that a row-parallel layer wants. Anything elementwise in between (silu, the product of gate and
        up) or independent per block (attention heads) runs locally. So a whole MLP or attention block costs **one
        all-reduce** of an $(N, H)$ tensor forward.

        ## 3. The backward: Megatron's $f$ and $g$

        Autograd sees only the local operations of each rank. Two identities must be added by hand:

        - At the entry, every rank uses the same $X$ (replicated). The loss depends on $X$ through all ranks'
          branches, so $\partial L / \partial X = \sum_r \partial L_r / \partial X$: the backward must **all-reduce**
          the input gradient. The operator **$f$** is the identity forward and an all-reduce backward.
        - At the exit, $Y = \sum_r P_r$ is replicated, and every rank holds the same $\partial L / \partial Y$; since
          $\partial Y / \partial P_r = I$, each rank's $\partial L / \partial P_r$ is that gradient as it is. The operator
          **$g$** is an all-reduce forward and the identity backward.

        $f$ and $g$ are conjugate: each is the other's transpose. A transformer layer under TP is
        $f \to$ column-parallel $\to$ local $\to$ row-parallel $\to g$, twice (attention, MLP): **two all-reduces
        forward and two backward per layer**, each of $N \cdot H$ elements.

        | block | forward communication | backward communication |
        | --- | --- | --- |
        | $f$ (entry) | none | all-reduce $(N, H)$ |
        | column-parallel, local op, row-parallel | none | none |
        | $g$ (exit) | all-reduce $(N, H)$ | none |

        In the exercises the ranks are real processes: each runs your code with `dist.get_rank()` and
        `dist.get_world_size()` (of the optional `group`), and the checks start them with `llm_algo.distributed.run_ranks`.
        Write everything for any $p$ and any device: take sizes from the group and devices from the tensors.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F

        from llm_algo.distributed import run_ranks


        def rotate_half(x):
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((-x2, x1), dim=-1)


        def apply_rotary(x, cos, sin):
            '''RoPE in Hugging Face's rotate-half layout: x (B, heads, T, D), cos and sin (B, T, D).'''
            return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)
    """)
    lesson.md(r"""
        ## 4. Exercise `f_and_g`: the two conjugate operators

        Fill in the forward and backward of both `autograd.Function`s (the wrappers that validate the input are
        given). `dist.all_reduce` works **in place** on the tensor it is given: reduce a copy, never the caller's
        tensor or autograd's gradient buffer. The backward returns one gradient per forward input (`None` for `group`).
    """)
    lesson.exercise(
        "f_and_g",
        r'''
        class CopyToTensorParallel(torch.autograd.Function):
            """Megatron's f: identity forward; the backward sums the gradient over the group's ranks."""

            @staticmethod
            def forward(ctx, x, group):
                ctx.group = group
                # TODO: the identity (return a view of x, so that autograd records this node)
                ### BEGIN SOLUTION
                return x.view_as(x)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_output):
                # TODO: all-reduce (sum) a copy of the gradient over ctx.group; return it and None for group
                ### BEGIN SOLUTION
                grad = grad_output.clone()  # all_reduce is in place: never touch autograd's buffer
                dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
                return grad, None
                ### END SOLUTION


        class ReduceFromTensorParallel(torch.autograd.Function):
            """Megatron's g: the forward sums the ranks' partial results; identity backward."""

            @staticmethod
            def forward(ctx, x, group):
                # TODO: all-reduce (sum) a copy of x over group and return it (x itself stays as it was)
                ### BEGIN SOLUTION
                total = x.clone()  # the caller's partial sum stays intact
                dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
                return total
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_output):
                # TODO: every rank already holds the gradient of the replicated output: pass it through
                ### BEGIN SOLUTION
                return grad_output, None
                ### END SOLUTION


        def _floating_tensor(x, what):
            if not isinstance(x, torch.Tensor) or not x.is_floating_point():
                raise TypeError(f"{what} expects a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")


        def copy_to_tensor_parallel(x, group=None):
            """f: x (...) replicated on every rank -> the same x; its gradient is summed over the group."""
            _floating_tensor(x, "copy_to_tensor_parallel")
            return CopyToTensorParallel.apply(x, group)


        def reduce_from_tensor_parallel(x, group=None):
            """g: x (...) this rank's partial result -> the sum over the group's ranks, on every rank."""
            _floating_tensor(x, "reduce_from_tensor_parallel")
            return ReduceFromTensorParallel.apply(x, group)
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `parallel_linear`: column- and row-parallel layers

        Both classes are built from the **full** weight (and bias), identical on every rank, as when a checkpoint is
        loaded and each rank keeps its slice; they store only the slice, as `nn.Parameter`s (contiguous copies, so
        the full matrix can be freed). Rank $r$ of $p$ keeps the $r$-th of $p$ equal contiguous blocks.

        - `ColumnParallelLinear(weight (M, K), bias (M,) | None)`: keeps rows $[rM/p, (r+1)M/p)$ of the weight and
          the same slice of the bias; `forward(x (..., K))` applies $f$ and returns $(..., M/p)$.
        - `RowParallelLinear(weight (M, K), bias (M,) | None)`: keeps columns $[rK/p, (r+1)K/p)$ and the **full**
          bias; `forward(x (..., K/p))` computes the partial product, applies $g$, then adds the bias: $(..., M)$ on
          every rank.

        A size that $p$ does not divide is refused (`ValueError`) before anything is communicated (the given lines do
        it): every rank raises, and none waits for a collective that the others never join.
    """)
    lesson.exercise(
        "parallel_linear",
        r'''
        def _weight_and_bias(weight, bias, what):
            _floating_tensor(weight, what)
            if weight.dim() != 2:
                raise ValueError(f"{what}: weight must be (out_features, in_features), got shape {tuple(weight.shape)}")
            if bias is not None and tuple(bias.shape) != (weight.shape[0],):
                raise ValueError(f"{what}: bias must be ({weight.shape[0]},), got {tuple(bias.shape)}")


        class ColumnParallelLinear(nn.Module):
            """y_r = x W_r^T + b_r: rank r keeps rows [r M/p, (r+1) M/p) of W (M, K) and of b."""

            def __init__(self, weight, bias=None, group=None):
                super().__init__()
                _weight_and_bias(weight, bias, "ColumnParallelLinear")
                self.group = group
                world, rank = dist.get_world_size(group), dist.get_rank(group)
                out_features, in_features = weight.shape
                if out_features % world:
                    raise ValueError(f"ColumnParallelLinear: {out_features} output features do not split over {world} ranks")
                # TODO: keep this rank's rows of weight, and of bias when there is one, as nn.Parameters
                ### BEGIN SOLUTION
                rows = out_features // world
                start = rank * rows
                self.weight = nn.Parameter(weight[start : start + rows].detach().clone())  # (M/p, K)
                self.bias = None if bias is None else nn.Parameter(bias[start : start + rows].detach().clone())
                ### END SOLUTION

            def forward(self, x):
                """x (..., K) replicated -> (..., M/p), this rank's columns of the output."""
                if x.shape[-1] != self.weight.shape[1]:
                    raise ValueError(f"ColumnParallelLinear: input has {x.shape[-1]} features, weight expects {self.weight.shape[1]}")
                # TODO: f on the input, then the local linear layer
                ### BEGIN SOLUTION
                x = copy_to_tensor_parallel(x, self.group)  # backward: the input gradient summed over the ranks
                return F.linear(x, self.weight, self.bias)  # (..., M/p)
                ### END SOLUTION


        class RowParallelLinear(nn.Module):
            """y = sum_r x_r W_{:,r}^T + b: rank r keeps columns [r K/p, (r+1) K/p) of W (M, K) and the full b."""

            def __init__(self, weight, bias=None, group=None):
                super().__init__()
                _weight_and_bias(weight, bias, "RowParallelLinear")
                self.group = group
                world, rank = dist.get_world_size(group), dist.get_rank(group)
                out_features, in_features = weight.shape
                if in_features % world:
                    raise ValueError(f"RowParallelLinear: {in_features} input features do not split over {world} ranks")
                # TODO: keep this rank's columns of weight as an nn.Parameter, and the whole bias
                ### BEGIN SOLUTION
                cols = in_features // world
                start = rank * cols
                self.weight = nn.Parameter(weight[:, start : start + cols].detach().clone())  # (M, K/p)
                self.bias = None if bias is None else nn.Parameter(bias.detach().clone())  # (M,), added once
                ### END SOLUTION

            def forward(self, x):
                """x (..., K/p), this rank's slice of the input features -> (..., M), the full output on every rank."""
                if x.shape[-1] != self.weight.shape[1]:
                    raise ValueError(f"RowParallelLinear: input has {x.shape[-1]} features, this rank's slice has {self.weight.shape[1]}")
                # TODO: the local partial product, g (sum over the ranks), then the bias
                ### BEGIN SOLUTION
                partial = F.linear(x, self.weight)  # (..., M): this rank's share of the sum over K
                out = reduce_from_tensor_parallel(partial, self.group)  # (..., M), the same on every rank
                return out if self.bias is None else out + self.bias  # after the sum: the bias counts once
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The layout, in a picture

        Four ranks, one MLP: the column-parallel matrix is cut along its output rows, the row-parallel one along its
        input columns, and the activation between them never leaves its rank.
    """)
    lesson.code(r"""
        fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
        colors = ["C0", "C1", "C2", "C3"]
        p, M, K = 4, 8, 4
        for r in range(p):
            axes[0].add_patch(plt.Rectangle((0, M - (r + 1) * M / p), K, M / p, color=colors[r], alpha=0.7))
            axes[1].add_patch(plt.Rectangle((r * 2, 0), 2, 1, color=colors[r], alpha=0.7))
            axes[2].add_patch(plt.Rectangle((r * M / p, 0), M / p, K, color=colors[r], alpha=0.7))
            axes[1].text(r * 2 + 1, 0.5, f"Y_{r}", ha="center", va="center")
        axes[0].set(xlim=(0, K), ylim=(0, M), title="column-parallel W1 (M, K):\nrank r keeps rows", xlabel="K (in)", ylabel="M (out)")
        axes[1].set(xlim=(0, 8), ylim=(0, 1), title="activation (N, M):\neach rank its column block", xticks=[], yticks=[])
        axes[2].set(xlim=(0, M), ylim=(0, K), title="row-parallel W2 (K, M):\nrank r keeps columns", xlabel="M (in)", ylabel="K (out)")
        for ax in axes:
            ax.set_aspect("auto")
        plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 6. Exercise `parallel_mlp`: Llama's SwiGLU over the ranks

        `ParallelSwiGLU(w_gate (F, H), w_up (F, H), w_down (H, F))` computes
        $\mathrm{down}\big(\mathrm{silu}(\mathrm{gate}(x)) \odot \mathrm{up}(x)\big)$ with the intermediate dimension $F$
        split over the ranks. `gate` and `up` are both column-parallel and read the same $x$. Two separate
        `ColumnParallelLinear`s would call $f$ twice and all-reduce **two** $(N, H)$ gradients in the backward. Fuse
        them: one column-parallel layer whose rank-$r$ block is $[W_g \text{ rows of } r;\ W_u \text{ rows of } r]$
        (that is Megatron-Core's `linear_fc1` with a gated linear unit), so that after the local matmul each rank can
        split its output into its own gate and up halves. Then `down` is row-parallel. One all-reduce forward, one
        backward: the check counts them.

        Build the fused full weight so that `ColumnParallelLinear`'s contiguous blocks are the pairs: think about what
        `torch.cat([w_gate, w_up])` would give rank 0.
    """)
    lesson.exercise(
        "parallel_mlp",
        r'''
        class ParallelSwiGLU(nn.Module):
            """Llama's MLP, down(silu(gate(x)) * up(x)), with the intermediate dimension F split over the ranks."""

            def __init__(self, w_gate, w_up, w_down, group=None):
                super().__init__()
                for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
                    _floating_tensor(w, f"ParallelSwiGLU {name}")
                ffn, hidden = w_gate.shape
                if tuple(w_up.shape) != (ffn, hidden) or tuple(w_down.shape) != (hidden, ffn):
                    raise ValueError(
                        f"ParallelSwiGLU: expected w_gate and w_up (F, H) and w_down (H, F), got "
                        f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}"
                    )
                world = dist.get_world_size(group)
                if ffn % world:
                    raise ValueError(f"ParallelSwiGLU: the intermediate size {ffn} does not split over {world} ranks")
                # TODO: self.gate_up, ONE ColumnParallelLinear whose rank-r rows are [gate rows of r; up rows of r]
                # TODO: self.down, a RowParallelLinear of w_down
                ### BEGIN SOLUTION
                pairs = [torch.cat((g, u)) for g, u in zip(w_gate.chunk(world), w_up.chunk(world))]  # p x (2F/p, H)
                self.gate_up = ColumnParallelLinear(torch.cat(pairs), group=group)  # rank r: (2F/p, H)
                self.down = RowParallelLinear(w_down, group=group)  # rank r: (H, F/p)
                ### END SOLUTION

            def forward(self, x):
                """x (..., H) replicated -> (..., H) replicated: one all-reduce forward (g), one backward (f)."""
                # TODO: the fused column-parallel matmul, split into gate and up, silu(gate) * up, then down
                ### BEGIN SOLUTION
                gate, up = self.gate_up(x).chunk(2, dim=-1)  # (..., F/p) each: this rank's pair
                return self.down(F.silu(gate) * up)  # (..., H), summed over the ranks by g
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `parallel_attention`: heads split over the ranks

        Attention is independent per head, so splitting the heads is a column split of $W_q, W_k, W_v$ (each head is
        $D$ contiguous rows) and a row split of $W_o$ (each head is $D$ contiguous columns). With GQA, query head
        $i$ reads key/value head $\lfloor i / (H_q / H_{kv}) \rfloor$. Splitting both head counts into $p$ contiguous
        blocks keeps every query head on the rank of its key/value head: rank $r$ holds query heads
        $[rH_q/p, (r+1)H_q/p)$ and key/value heads $[rH_{kv}/p, (r+1)H_{kv}/p)$, and their local grouping is the global
        one. So $p$ must divide both $H_q$ and $H_{kv}$; refuse otherwise (`ValueError`). (Megatron and vLLM
        *replicate* the key/value heads when $p > H_{kv}$, e.g. Llama-3-70B's 8 KV heads on 16 GPUs; we do not.)

        As in the MLP, fuse $Q, K, V$ into one column-parallel layer whose rank-$r$ block is
        $[W_q \text{ rows of } r;\ W_k \text{ rows of } r;\ W_v \text{ rows of } r]$, so $f$ runs once. In the
        forward: split the local output into $q$ $(B, h, T, D)$, $k, v$ $(B, g, T, D)$ with $h = H_q/p$, $g = H_{kv}/p$;
        apply RoPE to $q$ and $k$ with `apply_rotary` (given); causal attention (`F.scaled_dot_product_attention` with
        `is_causal=True, enable_gqa=True` is allowed: the lesson is the split, not the softmax); heads back to
        $(B, T, hD)$; row-parallel $W_o$.
    """)
    lesson.exercise(
        "parallel_attention",
        r'''
        class ParallelAttention(nn.Module):
            """Causal GQA self-attention (no bias) with the query and key/value heads split over the ranks."""

            def __init__(self, w_q, w_k, w_v, w_o, num_heads, num_kv_heads, group=None):
                super().__init__()
                for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
                    _floating_tensor(w, f"ParallelAttention {name}")
                world = dist.get_world_size(group)
                if num_heads % num_kv_heads or w_q.shape[0] % num_heads:
                    raise ValueError(f"ParallelAttention: {num_heads} query heads, {num_kv_heads} KV heads, w_q {tuple(w_q.shape)}")
                head_dim = w_q.shape[0] // num_heads
                if w_k.shape[0] != num_kv_heads * head_dim or w_v.shape != w_k.shape or w_o.shape[1] != w_q.shape[0]:
                    raise ValueError("ParallelAttention: w_k, w_v must be (num_kv_heads * D, H) and w_o (H, num_heads * D)")
                if num_heads % world or num_kv_heads % world:
                    raise ValueError(
                        f"ParallelAttention: {num_heads} query heads and {num_kv_heads} KV heads must both split over "
                        f"{world} ranks"
                    )
                self.local_heads, self.local_kv_heads, self.head_dim = num_heads // world, num_kv_heads // world, head_dim
                # TODO: self.qkv, ONE ColumnParallelLinear whose rank-r rows are [q rows of r; k rows of r; v rows of r]
                # TODO: self.o, a RowParallelLinear of w_o
                ### BEGIN SOLUTION
                blocks = zip(w_q.chunk(world), w_k.chunk(world), w_v.chunk(world))  # whole heads per rank
                self.qkv = ColumnParallelLinear(torch.cat([torch.cat(b) for b in blocks]), group=group)
                self.o = RowParallelLinear(w_o, group=group)  # rank r: (H, h D)
                ### END SOLUTION

            def forward(self, x, cos, sin):
                """x (B, T, H) replicated, cos and sin (B, T, D) -> (B, T, H) replicated."""
                B, T, _ = x.shape
                h, g, D = self.local_heads, self.local_kv_heads, self.head_dim
                # TODO: fused q/k/v, heads to (B, heads, T, D), RoPE on q and k, causal GQA attention,
                # TODO: heads back to (B, T, h * D), then the row-parallel output projection
                ### BEGIN SOLUTION
                q, k, v = self.qkv(x).split([h * D, g * D, g * D], dim=-1)  # (B, T, hD), (B, T, gD), (B, T, gD)
                q = q.view(B, T, h, D).transpose(1, 2)  # (B, h, T, D)
                k = k.view(B, T, g, D).transpose(1, 2)  # (B, g, T, D)
                v = v.view(B, T, g, D).transpose(1, 2)  # (B, g, T, D)
                q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, h, T, D)
                return self.o(out.transpose(1, 2).reshape(B, T, h * D))  # (B, T, H)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 8. Exercise `vocab_parallel_cross_entropy`: the loss without the full logits

        The output head is column-parallel too: rank $r$ holds vocabulary rows $[rV/p, (r+1)V/p)$ and produces the
        logits $z_r$ of shape $(N, V/p)$. Gathering them would be expensive: Llama 3's $V = 128{,}256$ at
        $N = 8192$ tokens is $8192 \cdot 128256 \cdot 4$ bytes $= 4.2$ GB of float32 logits per GPU, against 0.53 GB
        for one shard of 8. The loss $\ell_n = \log \sum_j e^{z_{nj}} - z_{n, t_n}$ only needs three numbers per
        token from the other ranks:

        1. the row maximum $m_n = \max_r \max_j z_{r,nj}$: all-reduce with `MAX` (for stability, as in every softmax);
        2. $S_n = \sum_r \sum_j e^{z_{r,nj} - m_n}$: all-reduce with `SUM`;
        3. the target logit $z_{n,t_n} - m_n$: only the rank whose slice contains $t_n$ has it; the others contribute
           0 to an all-reduce `SUM`.

        Then $\ell_n = \log S_n - (z_{n,t_n} - m_n)$ on every rank, and the gradient is local:
        $\partial \ell_n / \partial z_{r,nj} = \mathrm{softmax}_{nj} - [\,j + rV/p = t_n\,]$, with the softmax from the
        saved $e^{z - m} / S$. That is an `autograd.Function` with a hand-written backward (Megatron's
        `_VocabParallelCrossEntropy`): three all-reduces of $N$ numbers forward, **none** backward, no all-gather
        (forbidden here). The max is a shift: it needs no gradient. Compute in float32 at least (float64 stays
        float64), return the loss in that dtype (as Megatron does: bf16 logits, float32 loss) and the gradient in
        the logits' dtype. `F.cross_entropy` is the checks' reference and
        forbidden in your code.
    """)
    lesson.exercise(
        "vocab_parallel_cross_entropy",
        r'''
        class VocabParallelCrossEntropy(torch.autograd.Function):
            """Per-token cross-entropy of logits split over the vocabulary; the backward is local."""

            @staticmethod
            def forward(ctx, logits, target, group):
                """logits (N, V/p), this rank's vocabulary block; target (N,) int64 global ids -> loss (N,)."""
                rank = dist.get_rank(group)
                vocab_local = logits.shape[-1]
                start = rank * vocab_local  # this rank owns ids [start, start + vocab_local)
                # TODO: work in at least float32; the global row max (all-reduce MAX); shift the logits by it
                # TODO: the global sum of exp (all-reduce SUM)
                # TODO: the shifted target logit from the rank that owns the target, 0 elsewhere (all-reduce SUM)
                # TODO: loss = log(sum) - target logit; save what the backward needs (softmax, target, ownership)
                ### BEGIN SOLUTION
                work = logits.to(torch.promote_types(logits.dtype, torch.float32))
                row_max = work.max(dim=-1).values  # (N,)
                dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
                shifted = work - row_max.unsqueeze(-1)  # (N, V/p), <= 0 everywhere
                exp = shifted.exp()
                sum_exp = exp.sum(dim=-1)  # (N,) this rank's share
                dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)
                owned = (target >= start) & (target < start + vocab_local)  # (N,) bool
                local_target = (target - start).clamp(0, vocab_local - 1)  # a valid index even where not owned
                picked = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1)  # (N,)
                target_logit = torch.where(owned, picked, torch.zeros_like(picked))
                dist.all_reduce(target_logit, op=dist.ReduceOp.SUM, group=group)
                ctx.save_for_backward(exp / sum_exp.unsqueeze(-1), local_target, owned)
                ctx.logits_dtype = logits.dtype
                return sum_exp.log() - target_logit  # (N,)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_loss):
                # TODO: (softmax - one-hot of the target on the rank that owns it) * grad_loss, in the logits' dtype;
                # TODO: no communication; None for target and group
                ### BEGIN SOLUTION
                softmax, local_target, owned = ctx.saved_tensors
                grad = softmax.clone()  # (N, V/p)
                rows = torch.arange(grad.shape[0], device=grad.device)
                grad[rows, local_target] -= owned.to(grad.dtype)  # the one-hot, only where this rank owns the id
                return (grad * grad_loss.unsqueeze(-1)).to(ctx.logits_dtype), None, None
                ### END SOLUTION


        def vocab_parallel_cross_entropy(logits, target, group=None):
            """logits (N, V/p) this rank's block of the vocabulary; target (N,) int64 in [0, V) -> loss (N,)."""
            _floating_tensor(logits, "vocab_parallel_cross_entropy")
            if logits.dim() != 2:
                raise ValueError(f"logits must be (N, V/p), got shape {tuple(logits.shape)}")
            if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
                raise TypeError(f"target must be an int64 tensor of token ids, got {getattr(target, 'dtype', type(target).__name__)}")
            if tuple(target.shape) != (logits.shape[0],):
                raise ValueError(f"target must be ({logits.shape[0]},), got {tuple(target.shape)}")
            vocab = logits.shape[-1] * dist.get_world_size(group)
            if target.numel() and (int(target.min()) < 0 or int(target.max()) >= vocab):
                raise ValueError(f"target ids must lie in [0, {vocab}), got [{int(target.min())}, {int(target.max())}]")
            return VocabParallelCrossEntropy.apply(logits, target, group)
    ''',
    )
    lesson.md(r"""
        ## 9. Your parallel MLP, live

        The cell below starts a world of two real processes (a few seconds), builds the same random SwiGLU in each,
        runs your `ParallelSwiGLU` and compares with the unsplit computation. It also counts the all-reduces. It
        needs `f_and_g`, `parallel_linear` and `parallel_mlp`.
    """)
    lesson.code(r"""
        def mlp_demo(hidden, ffn, tokens):
            torch.manual_seed(0)  # the same weights and input in every rank
            w_gate, w_up = torch.randn(ffn, hidden) / hidden**0.5, torch.randn(ffn, hidden) / hidden**0.5
            w_down, x = torch.randn(hidden, ffn) / ffn**0.5, torch.randn(tokens, hidden)
            calls, all_reduce = [], dist.all_reduce

            def counting(tensor, *args, **kwargs):
                calls.append(tensor.numel())
                return all_reduce(tensor, *args, **kwargs)

            dist.all_reduce = counting
            try:
                mlp = ParallelSwiGLU(w_gate, w_up, w_down)
                x = x.requires_grad_()
                y = mlp(x)
                forward_calls = list(calls)
                y.square().sum().backward()
            finally:
                dist.all_reduce = all_reduce
            x_ref = x.detach().clone().requires_grad_()
            y_ref = (F.silu(x_ref @ w_gate.T) * (x_ref @ w_up.T)) @ w_down.T
            y_ref.square().sum().backward()
            local = sum(p.numel() for p in mlp.parameters())
            return dict(rank=dist.get_rank(), params=local, forward=forward_calls, backward=calls[len(forward_calls):],
                        out_err=(y - y_ref).abs().max().item(), grad_err=(x.grad - x_ref.grad).abs().max().item())

        results = run_ranks(mlp_demo, 2, args=(64, 160, 12), deadline=20)
        for result in results:
            if result.ok:
                v = result.value
                print(f"rank {v['rank']}: {v['params']} parameters of {3 * 64 * 160}; all-reduces forward {v['forward']} "
                      f"backward {v['backward']} (elements); max |y - y_ref| = {v['out_err']:.1e}, "
                      f"max |dx - dx_ref| = {v['grad_err']:.1e}")
            elif result.error_type == "NotImplementedError":
                print(f"rank {result.rank}: not attempted yet (f_and_g, parallel_linear and parallel_mlp are needed)")
            else:
                print(result.describe(), result.traceback[-600:], sep="\n")
    """)
    lesson.md(r"""
        ## 10. Reading the numbers: what two all-reduces per block cost

        With the α-β model of `p01.collectives_cost`, a ring all-reduce of $n$ bytes over $p$ GPUs takes
        $2(p-1)\alpha + 2\frac{p-1}{p}\frac{n}{\beta}$. Per layer TP all-reduces $4 \times N H$ activations (two
        forward, two backward; the backward also recomputes nothing here), while the matmuls shrink by $1/p$:
        per layer $6 N P_\text{layer} / p$ FLOPs for forward and backward ($P_\text{layer}$ parameters). The ratio of
        communication to compute time therefore **grows** with $p$, which is why TP stays inside one NVLink node
        and the next factor of scale comes from pipeline and data parallelism (`p02.pipeline_parallel`,
        `p02.ddp`).

        The figure computes both for a Llama-3-70B layer ($H = 8192$, $P_\text{layer} \approx 856$ M, bf16
        activations) at $N = 4096$ tokens per GPU, with assumed round numbers: 400 GB/s of all-reduce bus bandwidth
        inside a node (NVLink 4 is 450 GB/s per direction per H100, NVIDIA's H100 datasheet), 25 GB/s across nodes
        (a 200 Gb/s NIC), $\alpha = 10\,\mu$s, and 400 TFLOP/s of achieved bf16 matmul throughput. These are model
        inputs, not measurements; measured NCCL numbers on real GPUs are pending (issue 20). Megatron-LM sustained
        15.1 PetaFLOP/s over 512 V100 GPUs, 76% scaling efficiency against a single-GPU baseline of 39 TeraFLOP/s,
        with 8-way tensor parallelism inside each 8-GPU server (Shoeybi et al., 2019, *Megatron-LM*, abstract).
    """)
    lesson.code(r"""
        def allreduce_seconds(n_bytes, p, bandwidth, alpha=10e-6):
            return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n_bytes / bandwidth

        hidden, tokens, layer_params, flops = 8192, 4096, 856e6, 400e12
        degrees = [2, 4, 8, 16, 32]
        compute = [6 * tokens * layer_params / p / flops for p in degrees]
        nvlink = [4 * allreduce_seconds(2 * tokens * hidden, p, 400e9) for p in degrees]
        network = [4 * allreduce_seconds(2 * tokens * hidden, p, 25e9) for p in degrees]
        plt.figure(figsize=(6.5, 3.5))
        plt.plot(degrees, [c * 1e3 for c in compute], "o-", label="matmuls (forward + backward)")
        plt.plot(degrees, [c * 1e3 for c in nvlink], "s-", label="4 all-reduces, NVLink 400 GB/s")
        plt.plot(degrees, [c * 1e3 for c in network], "^-", label="4 all-reduces, network 25 GB/s")
        plt.xscale("log", base=2); plt.yscale("log")
        plt.xlabel("tensor-parallel degree p"); plt.ylabel("ms per layer (α-β model)")
        plt.title("Llama-3-70B layer, 4096 tokens: TP communication vs compute")
        plt.legend(fontsize=8); plt.grid(alpha=0.3); plt.show()
        for p, c, n in zip(degrees, compute, nvlink):
            print(f"p={p:2d}: compute {c * 1e3:5.2f} ms, NVLink all-reduces {n * 1e3:5.2f} ms ({n / c:4.0%} of compute)")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 11. Reading the solutions

        **`f_and_g`.** $f$'s forward returns `x.view_as(x)`: a new tensor object, so autograd records the node and
        calls its backward. Its backward clones before `all_reduce`, which writes in place: the incoming gradient may
        be a buffer that autograd still uses elsewhere. $g$'s forward clones for the same reason: the caller's partial
        sum is not its to overwrite (the check looks). $g$'s backward returns the gradient untouched: all ranks
        already hold the same gradient of the replicated output. One all-reduce each, in opposite directions.

        **`parallel_linear`.** Slices are taken with the *group's* rank and size, then `.clone()`d so that each rank
        stores $1/p$ of the matrix (a view would pin the full tensor in memory). The row-parallel bias is kept whole
        and added after $g$; its gradient is the same on every rank, so nothing needs reducing.

        **`parallel_mlp` and `parallel_attention`.** The fused weights are built by interleaving blocks: for each rank,
        its gate rows then its up rows (or its q, k, v rows), and only then the concatenation over ranks. Each rank
        splits its local output back with `chunk`/`split`. Because everything between the two linear layers is
        per-column or per-head, no rank ever needs another rank's activation.

        **`vocab_parallel_cross_entropy`.** Three all-reduces of $N$ numbers. The target index is clamped so that
        `gather` is always legal, and `torch.where` zeroes it on the ranks that do not own the id. The backward reuses
        the saved softmax, subtracts the one-hot only on the owner, and scales by the incoming gradient (the mean over
        tokens gives $1/N$). Megatron-Core fuses the max and the two sums into fewer calls and casts in place to save
        the $N \times V/p$ float32 buffers; with label smoothing it also all-reduces the mean log-probability.

        **The usual mistakes, and why they are wrong**:
        - $f$'s backward without the all-reduce: the input gradient is one rank's share (the input gradient of the
          column-parallel layer no longer matches the unsplit layer's); $g$'s backward with an extra all-reduce: gradients $p$ times too large.
        - $g$ all-reducing the caller's tensor in place: the right sum, a corrupted input.
        - every rank slicing block 0 (a missing `rank *`), or rows where the columns were meant.
        - the row-parallel bias added before the sum: counted $p$ times.
        - `torch.cat([w_gate, w_up])` as the fused weight: rank 0 gets only gate rows, rank 1 only up rows. Two
          separate column-parallel layers for gate and up: the numbers are right, but the backward all-reduces twice.
        - key/value heads sliced with the query heads' offsets, or not sliced at all.
        - the target logit added by every rank (no ownership mask): $p$ times; the max all-reduced with `SUM`; the
          one-hot subtracted on every rank.
        - the group ignored (an all-reduce without `group=`, a layer built without it): right in a world of its own,
          but on a sub-group the collective waits for a rank outside it, which the checks' bystander shows.

        **What production systems do.** Megatron-Core's `ColumnParallelLinear`/`RowParallelLinear` add sequence
        parallelism (Korthikanti et al., 2022): the activations outside the TP region (norms, dropout) are split over
        the sequence, and each all-reduce becomes a reduce-scatter plus an all-gather of the same total volume, which
        also splits the norms' memory by $p$; they also overlap these collectives with the matmuls. PyTorch's
        `torch.distributed.tensor.parallel` expresses the same plan declaratively with DTensor
        (`ColwiseParallel`, `RowwiseParallel`, `parallelize_module`). vLLM's `QKVParallelLinear` and
        `MergedColumnParallelLinear` are exactly the fused layers you built, and its `VocabParallelEmbedding` pads
        the vocabulary to a multiple of $p$; at inference the all-reduce after each block is the main cost of TP,
        which is why vLLM ships custom all-reduce kernels for small messages.
    """)
    lesson.mistakes()
    return lesson
