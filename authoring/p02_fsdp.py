"""Source of 02_PyTorch_Algorithms/43_FSDP.ipynb (build with `python -m llm_algo build p02.fsdp`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.fsdp",
        path="02_PyTorch_Algorithms/43_FSDP.ipynb",
        title_en="Fully sharded data parallel (FSDP)",
        title_zh="全分片数据并行 (FSDP)",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p01.training_memory", "p01.collectives_cost", "p02.adamw", "p02.mixed_precision"],
    )
    lesson.title(
        intro=r"""
        Training Llama-3-8B with mixed-precision AdamW needs 16 bytes per parameter before a single activation: bf16
        weights and gradients (2 + 2 bytes) and an fp32 master copy with AdamW's two moments (4 + 4 + 4). That is
        128 GB for 8.03 billion parameters, and an H100 has 80 GB. Plain data parallelism keeps all of it on every
        GPU. **Fully sharded data parallelism** (FSDP; ZeRO stage 3 in DeepSpeed) keeps only $1/p$ of every byte on
        each of the $p$ GPUs and borrows the rest for a moment: just before a layer runs, its parameters are
        all-gathered from the other ranks; just after, they are freed; in backward they are gathered again, and the
        gradients are reduce-scattered so that each rank receives only the slice it owns. With 8 GPUs the 128 GB
        become 16 GB per GPU plus one layer at a time.

        **You will implement** the whole mechanism in real processes: a unit's parameters flattened into one padded
        buffer and cut into equal shards, an autograd function whose forward is an all-gather and whose backward is a
        reduce-scatter (fp32, averaged), an `FSDPUnit` module that keeps an fp32 master shard, computes in bf16 or
        fp16, frees the gathered parameters after forward and gathers them again for backward, and the full state
        dict gathered on rank 0. **Graded against** single-process training of the same model on the full batch:
        the gradients of every shard and three training steps, equal to the rounding of the reduction order in fp32,
        and within 4x the error that single-process mixed precision makes (against float64) when computing in bf16 or
        fp16; torch's own `fully_shard` (FSDP2) on the same gloo world; and a count of every collective and of the
        gathered bytes alive in each rank, at every collective.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：混合精度 AdamW 每个参数 16 字节（bf16 权重与梯度 2+2，fp32 主权重与两个动量 4+4+4）；8B 模型 128 GB，放不进一张 80 GB 的 GPU。DDP 在每张卡上都存一份。
        - **全分片 (fully sharded)**：每个单元 (unit) 的参数按 `named_parameters()` 顺序展平成一维、在末尾补零到 $p$ 的倍数，rank $r$ 只保留第 $r$ 段 $[rS,(r+1)S)$，$S=\lceil N/p\rceil$；分片必须有自己的存储，不能是整个缓冲区的视图。
        - **前向**：all-gather 分片（先转成计算精度 bf16/fp16，通信量减半）→ 视图 (view) 还原各参数 → 计算 → 立即释放；**反向**：再次 all-gather（本实现通过 saved-tensor hooks 保存参数的几何信息而非数据）→ 计算梯度 → 释放 → reduce-scatter。
        - **all-gather 的反向就是 reduce-scatter**：梯度先升到 fp32 再求和，除以 $p$ 取平均，只落到本 rank 的分片上；优化器只在 fp32 主分片 (master shard) 上逐元素更新，结果与单进程一致。
        - **显存**：每个 rank 常驻 $16\Psi/p$ 字节，同一时刻只有一个单元的参数是完整的（检查会逐个统计 all-gather 缓冲区）。
        - **通信量**：每步两次 all-gather + 一次 reduce-scatter，同一精度下是 DDP all-reduce 的 1.5 倍；all-gather 用 bf16、reduce-scatter 用 fp32 时与 fp32 DDP 相同。
        - **完整 state dict**：逐单元 gather fp32 主分片，去掉填充，clone 到 CPU，只在 rank 0 返回，键名与未包装的模型相同。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: where the 16 bytes per parameter go

        Let $\Psi$ be the number of parameters and $p$ the number of data-parallel ranks. Mixed-precision AdamW
        (`p02.mixed_precision`, `p02.adamw`) keeps per parameter: a low-precision copy for compute (2 bytes), its
        gradient (2 bytes), and in fp32 the master weight, $m$ and $v$ (12 bytes): $16\Psi$ bytes, the accounting of
        the ZeRO paper (Rajbhandari et al., 2020, §3.1). `p01.training_memory` derived what each ZeRO stage keeps per
        rank:

        | scheme | bytes per rank | Llama-3-8B, $p=8$ |
        | --- | --- | --- |
        | DDP (everything replicated) | $16\Psi$ | 128 GB |
        | ZeRO-1 (optimizer state sharded) | $4\Psi + 12\Psi/p$ | 44 GB |
        | ZeRO-2 (+ gradients sharded, `p02.zero`) | $2\Psi + 14\Psi/p$ | 30 GB |
        | ZeRO-3 / FSDP (+ parameters sharded, this lesson) | $16\Psi/p$ + one unit gathered | 16 GB + 0.4 GB |

        The "one unit" is the price of sharding the parameters: a layer cannot multiply with $1/p$ of its weight
        matrix (that is tensor parallelism, `p02.tensor_parallel`, a different trade). So FSDP gathers one *unit* (a
        decoder layer, typically) just before it runs and frees it right after. A Llama-3-8B decoder layer has
        $2 \cdot 4096^2 + 2 \cdot 4096 \cdot 1024 + 3 \cdot 4096 \cdot 14336 + 2 \cdot 4096 = 218$ M parameters:
        0.44 GB in bf16, the peak of gathered parameters if units are freed as soon as they are used. Keep all 32
        layers gathered and you are back to 14 GB of replicated bf16 weights.

        **Communication.** With the α-β model of `p01.collectives_cost` (a message of $n$ bytes costs
        $\alpha + n\beta$), a ring all-gather or reduce-scatter of a buffer of $B$ bytes costs
        $(p-1)\alpha + \frac{p-1}{p}B\beta$, and an all-reduce twice that. Per step and per unit of $N$ parameters:

        | | collectives | bytes through each rank's link |
        | --- | --- | --- |
        | DDP | one all-reduce of the gradients, $b_g$ bytes each | $2\frac{p-1}{p}N b_g$ |
        | FSDP | all-gather (forward) + all-gather (backward) in $b_c$ + reduce-scatter in $b_r$ | $\frac{p-1}{p}N(2b_c + b_r)$ |

        With one dtype everywhere ($b_c = b_r = b_g$) FSDP moves 1.5 times DDP's bytes, the ZeRO paper's figure for
        stage 3 (§7.2.2). With bf16 all-gathers and an fp32 reduce-scatter ($2 + 2 + 4 = 8$ bytes) it moves exactly
        what an fp32 DDP all-reduce moves ($2 \cdot 4$), and it is spread over three collectives per unit that can run
        while other units compute (section 6). How long these take on a real NVLink or InfiniBand fabric is measured in
        a later issue on multi-GPU machines (NCCL numbers are pending); the byte counts above are exact.

        The figure below draws the table for an 8B model as $p$ grows: the replicated terms never shrink, ZeRO-3's all
        do.
    """)
    lesson.setup(r"""
        import math
        import weakref

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F

        from llm_algo.distributed import expect_ranks_ok, run_ranks

        # torch 2.13 renamed the one-buffer collectives (all_gather_into_tensor -> all_gather_single, reduce_scatter_tensor
        # -> reduce_scatter_single, pytorch/pytorch#186123) and warns on the old names; torch 2.11 and 2.12 have only those.
        all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    """)
    lesson.code(r"""
        psi = 8.03e9  # Llama-3-8B parameters
        ranks = [1, 2, 4, 8, 16, 32, 64]
        schemes = {
            "DDP": lambda p: 16 * psi,
            "ZeRO-1": lambda p: 4 * psi + 12 * psi / p,
            "ZeRO-2": lambda p: 2 * psi + 14 * psi / p,
            "ZeRO-3 / FSDP": lambda p: 16 * psi / p + 2 * 218e6,  # + one gathered bf16 decoder layer
        }
        plt.figure(figsize=(6.5, 3.5))
        for name, bytes_per_rank in schemes.items():
            plt.plot(ranks, [bytes_per_rank(p) / 1e9 for p in ranks], marker="o", label=name)
        plt.axhline(80, color="k", ls=":", label="H100 memory (80 GB)")
        plt.xscale("log", base=2); plt.yscale("log")
        plt.xlabel("data-parallel ranks p"); plt.ylabel("GB per rank (no activations)")
        plt.title("Model state of Llama-3-8B with mixed-precision AdamW (16 bytes/parameter)")
        plt.legend(fontsize=8); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 2. The flat shard: one buffer per unit, padded, cut in $p$ equal pieces

        A unit has parameters $w_1, \dots, w_k$ of shapes $s_1, \dots, s_k$ (in `module.named_parameters()` order),
        $N = \sum_i |s_i|$ elements in all. FSDP flattens them into one vector and pads it with zeros to a multiple
        of $p$, so that every rank holds the same number of elements (collectives need equal pieces):

        $$
        \text{flat} = [\,\mathrm{vec}(w_1), \dots, \mathrm{vec}(w_k), \underbrace{0, \dots, 0}_{pS - N}\,] \in \mathbb R^{pS},
        \qquad S = \lceil N / p \rceil, \qquad \text{shard}_r = \text{flat}[rS : (r+1)S] \in \mathbb R^{S}.
        $$

        A shard may start in the middle of one parameter and end in the middle of another; no rank needs to know
        where. The padding is at most $p - 1$ elements and stays zero through training: its gradient is zero, and an
        elementwise optimizer (SGD, Adam, AdamW) keeps a zero parameter with zero gradient at zero.

        Going back is free: the first $N$ elements of a gathered flat buffer, split at the sizes $|s_i|$ and viewed
        with the shapes $s_i$, *are* the parameters. `flat[:N].split(sizes)` and `.view(shape)` make views, which
        share the buffer's storage: no copy, and autograd sends the gradient of every view back into one gradient of
        the flat buffer.

        Two details decide the memory. The shard must **own its storage**: `padded[rS:(r+1)S]` is a view that keeps
        the whole $pS$-element buffer alive, and every rank would hold the full unit again; `.clone()` it. And the
        shard is a fresh tensor detached from autograd, so that it can become the unit's `nn.Parameter`.
    """)
    lesson.exercise(
        "flat_shard",
        r'''
        def flatten_shard(tensors: list[torch.Tensor], rank: int, world_size: int) -> torch.Tensor:
            """This rank's shard of the flattened, zero-padded tensors.

            tensors: k tensors of one dtype, any shapes (N elements in all). Returns a 1-D tensor of
            S = ceil(N / world_size) elements, detached, with its own storage: elements [rank*S, (rank+1)*S) of
            cat(t.flatten() for t in tensors) padded with zeros to world_size*S. Same dtype and device as the inputs.
            Raises ValueError for an empty list or a rank outside [0, world_size), TypeError for mixed dtypes.
            """
            # TODO: validate (ValueError / TypeError, as the docstring says)
            # TODO: N, S = ceil(N / world_size); the flat buffer padded with zeros to world_size * S
            # TODO: return this rank's slice as a tensor that owns its storage
            ### BEGIN SOLUTION
            tensors = list(tensors)
            if world_size < 1 or not 0 <= rank < world_size:
                raise ValueError(f"rank {rank} is not in a world of {world_size} ranks")
            if not tensors:
                raise ValueError("nothing to shard: the list of tensors is empty")
            if len({t.dtype for t in tensors}) > 1:
                raise TypeError(f"one flat buffer needs one dtype, got {sorted({str(t.dtype) for t in tensors})}")
            numel = sum(t.numel() for t in tensors)
            shard_size = -(-numel // world_size)  # S = ceil(N / p)
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])  # (N,)
            padded = torch.cat([flat, flat.new_zeros(world_size * shard_size - numel)])  # (p*S,), zeros at the end
            return padded[rank * shard_size : (rank + 1) * shard_size].clone()  # (S,), its own S elements
            ### END SOLUTION


        def unflatten(flat: torch.Tensor, shapes: list[torch.Size]) -> list[torch.Tensor]:
            """Views of the first sum(prod(shape)) elements of the 1-D `flat`, one per shape, in order (the padding
            after them is ignored). Raises ValueError when flat is not 1-D or is too short."""
            # TODO: sizes of the shapes; refuse a flat buffer that is not 1-D or too short
            # TODO: split the first N elements at those sizes and view each piece with its shape (views, no copies)
            ### BEGIN SOLUTION
            sizes = [math.prod(shape) for shape in shapes]  # prod(()) = 1: a 0-d parameter is one element
            if flat.dim() != 1 or flat.numel() < sum(sizes):
                raise ValueError(f"a flat buffer of shape {tuple(flat.shape)} cannot hold {sum(sizes)} elements")
            pieces = flat[: sum(sizes)].split(sizes)  # views into flat
            return [piece.view(shape) for piece, shape in zip(pieces, shapes)]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The picture for one residual MLP block of the tests (LayerNorm of 16, a 16 → 32 and a 32 → 16 linear: 1104
        parameters) over 2 and 3 ranks, and for the 5 → 85-parameter head, whose 85 elements need one zero of padding
        on 2 ranks. The dashed lines are the shard boundaries: they fall anywhere inside a parameter.
    """)
    lesson.code(r"""
        def draw_layout(ax, named_sizes, world_size, title):
            numel = sum(size for _, size in named_sizes)
            shard = -(-numel // world_size)
            start = 0
            for i, (name, size) in enumerate(named_sizes):
                ax.barh(0, size, left=start, color=f"C{i}", edgecolor="k", label=name)
                start += size
            ax.barh(0, world_size * shard - numel, left=numel, color="w", edgecolor="k", hatch="//", label="padding")
            for r in range(world_size):
                ax.axvline(r * shard, color="k", ls="--")
                ax.text((r + 0.5) * shard, 0.5, f"rank {r}: [{r * shard}, {(r + 1) * shard})", ha="center", fontsize=8)
            ax.set_ylim(-0.5, 0.8); ax.set_yticks([]); ax.set_title(title, fontsize=9)

        block = [("norm.weight", 16), ("norm.bias", 16), ("fc1.weight", 512), ("fc1.bias", 32),
                 ("fc2.weight", 512), ("fc2.bias", 16)]
        fig, axes = plt.subplots(3, 1, figsize=(8, 4.8))
        draw_layout(axes[0], block, 2, "block unit, N = 1104, p = 2: S = 552")
        draw_layout(axes[1], block, 3, "block unit, N = 1104, p = 3: S = 368")
        draw_layout(axes[2], [("weight", 80), ("bias", 5)], 2, "head unit, N = 85, p = 2: S = 43, 1 zero of padding")
        axes[0].legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, 1.6))
        axes[-1].set_xlabel("element of the flat buffer"); plt.tight_layout(); plt.show()

        try:  # your flatten_shard draws the same boundaries
            head = [torch.arange(80.0).view(5, 16), torch.arange(80.0, 85.0)]
            print("head shards on 2 ranks:", [flatten_shard(head, r, 2)[-3:].tolist() for r in range(2)], "(last 3)")
        except NotImplementedError:
            pass
    """)
    lesson.md(r"""
        ## 3. All-gather forward, reduce-scatter backward

        Every rank runs the same unit on its own micro-batch: the loss is $L = \frac1p \sum_{j} L_j$, the mean of the
        ranks' losses, exactly the mean over the full batch when the micro-batches have equal sizes. Write the
        all-gather as a function of all the shards, $\text{flat} = \mathrm{AG}(\text{shard}_0, \dots,
        \text{shard}_{p-1})$, which every rank computes. Rank $j$'s loss depends on shard $r$ through $\text{flat}$,
        so

        $$
        \frac{\partial L}{\partial\,\text{shard}_r}
        = \frac1p \sum_{j=0}^{p-1} \Bigl(\frac{\partial L_j}{\partial\,\text{flat}}\Bigr)[rS : (r+1)S]
        = \frac1p\,\mathrm{RS}\bigl(g_0, \dots, g_{p-1}\bigr)_r ,
        \qquad g_j = \frac{\partial L_j}{\partial\,\text{flat}} \in \mathbb R^{pS}.
        $$

        Summing the $p$ gradients and handing each rank the slice it owns is exactly a **reduce-scatter**: the backward
        of an all-gather is a reduce-scatter (and the backward of a reduce-scatter is an all-gather). An
        `autograd.Function` says this in a dozen lines, and autograd then accumulates the result into the shard's
        `.grad`. It never builds the full gradient of the unit on any rank for longer than the collective needs.

        **Mixed precision.** FSDP's `MixedPrecisionPolicy(param_dtype, reduce_dtype)` names the two dtypes. The shard
        is cast to the compute dtype *before* the all-gather, so a bf16 gather moves half the bytes of an fp32 one and
        the gathered buffer is half the size. The gradient comes back in the compute dtype; cast it to fp32 *before*
        the reduce-scatter, so that the sum over ranks is not rounded to bf16's 8 bits at each addition (torchtitan
        trains Llama with `param_dtype=bfloat16, reduce_dtype=float32`), divide by $p$, and return it in the shard's
        dtype (fp32): the optimizer then steps the fp32 master shard.

        Rules for the exercises of this lesson (they run in real processes, and later on GPUs with NCCL):
        - get the rank and world size from the `group` (`dist.get_rank(group)`, `dist.get_world_size(group)`);
        - allocate on the input's device (`torch.empty(..., device=shard.device)`), never on a hard-coded one;
        - all-gather into one flat buffer with `all_gather_single(out, inp, group=group)` and reduce-scatter with
          `reduce_scatter_single(out, inp, group=group)` (the setup cell picks the name your torch has); the checks
          count these collectives, and forbid `dist.all_reduce` and the list versions `dist.all_gather` and
          `dist.reduce_scatter`;
        - validate the inputs *before* the first collective: a rank that raises after another one entered a
          collective leaves that one waiting forever.
    """)
    lesson.exercise(
        "all_gather_shard",
        r'''
        class AllGatherShard(torch.autograd.Function):
            """forward: every rank's shard, gathered into one flat buffer in compute_dtype.
            backward: the gradient of that buffer, summed over ranks in float32, divided by the world size, and
            scattered: each rank receives the slice of its own shard, in the shard's dtype."""

            @staticmethod
            def forward(ctx, shard: torch.Tensor, compute_dtype: torch.dtype, group=None) -> torch.Tensor:
                """shard: (S,) floating point, the same S on every rank. Returns (world_size * S,) in compute_dtype.
                Raises ValueError for a shard that is not 1-D, TypeError for a non-floating shard or compute_dtype."""
                # TODO: validate before communicating
                # TODO: remember what backward needs on ctx (the group, the shard's dtype)
                # TODO: cast the shard to compute_dtype, then all-gather it into one new (world_size * S,) buffer
                ### BEGIN SOLUTION
                if shard.dim() != 1:
                    raise ValueError(f"a shard is 1-D, got shape {tuple(shard.shape)}")
                if not shard.is_floating_point() or not compute_dtype.is_floating_point:
                    raise TypeError(f"shard ({shard.dtype}) and compute dtype ({compute_dtype}) must be floating point")
                ctx.group, ctx.shard_dtype = group, shard.dtype
                world_size = dist.get_world_size(group)
                full = torch.empty(world_size * shard.numel(), dtype=compute_dtype, device=shard.device)  # (p*S,)
                all_gather_single(full, shard.detach().to(compute_dtype).contiguous(), group=group)  # bf16 on the wire
                return full
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_full: torch.Tensor):
                """grad_full: (world_size * S,) in compute_dtype. Returns (grad of the shard, None, None)."""
                # TODO: upcast to float32, reduce-scatter (sum over ranks), divide by the world size
                # TODO: return the shard's gradient in the shard's dtype, and None for compute_dtype and group
                ### BEGIN SOLUTION
                world_size = dist.get_world_size(ctx.group)
                grad_full = grad_full.to(torch.float32).contiguous()  # reduce in fp32, not in bf16
                grad_shard = torch.empty(grad_full.numel() // world_size, dtype=torch.float32, device=grad_full.device)
                reduce_scatter_single(grad_shard, grad_full, group=ctx.group)  # sum over ranks of my slice
                return (grad_shard / world_size).to(ctx.shard_dtype), None, None  # the mean: L = mean of the ranks' losses
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. The unit: gather, compute, free; gather again for backward

        An `FSDPUnit` wraps one module (a decoder layer). At construction it flattens the module's parameters, keeps
        its own shard as an fp32 `nn.Parameter` (the master: the optimizer sees only it), and **frees the full
        parameters** by setting them to `None` on their modules (`setattr(owner, "weight", None)` unregisters the
        tensor; `torch.func.functional_call` will supply it at call time). Its forward:

        1. casts floating-point inputs to the compute dtype (FSDP's `cast_forward_inputs`);
        2. `flat = AllGatherShard.apply(self.shard, compute_dtype, group)`: the whole unit, in bf16;
        3. `params = dict(zip(names, unflatten(flat, shapes)))` and
           `torch.func.functional_call(self.module, params, args)`: the module runs with the gathered views;
        4. returns, and `flat` goes out of scope: **the gathered parameters are freed.**

        Step 4 has a catch. Autograd saves what backward needs: $\partial L/\partial x = g\,W$ needs $W$, so the
        linear layer's graph node holds a reference to $W$ (a view of `flat`), and that reference keeps the whole
        gathered buffer alive until backward. Every unit would stay gathered, and the peak would be the full model
        again: FSDP with `reshard_after_forward=False`, which is a legitimate choice for the last unit but not for all.

        The tool is `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`: inside it, every tensor autograd saves
        goes through `pack`, and what `pack` returns is stored instead; `unpack` turns it back into a tensor when
        backward needs it. Activation offloading and non-reentrant activation checkpointing are built on it. For FSDP:

        - `pack(t)`: if `t` lives in the gathered buffer (`t.untyped_storage().data_ptr()` is the buffer's), store
          only its geometry, `SavedParameter(t.shape, t.stride(), t.storage_offset())`: a few integers. Anything
          else (activations) is stored as is. Compare storage pointers, and capture the pointer (an `int`), not
          `flat`: a closure that holds `flat` keeps it alive.
        - `unpack(saved)`: for a `SavedParameter`, all-gather the shard again (once per backward of the unit: keep
          it in `self` until the unit's backward is done) and return `regathered.as_strided(shape, stride, offset)`.
        - Free the re-gathered buffer when the unit's backward is done: the gradient of `flat` is complete only once
          every view's gradient is in, so a hook on `flat` (`flat.register_hook`, only when `flat.requires_grad`:
          there is no graph under `torch.no_grad()`) runs right before `AllGatherShard.backward` reduce-scatters.
          Forget it, and the next step's backward uses this step's weights.

        A unit's backward needs its weights only if it computes an input gradient or a norm with them: the first
        unit (whose input is data) may never re-gather. Production FSDP does the same with storage tricks instead of
        hooks (section 6).

        **Only trainable parameters go into the shard.** A frozen one (`requires_grad=False`: a LoRA base weight, a
        fixed scale) stays on the module, whole on every rank, and is cast to the compute dtype at call time
        (`params[name] = p.to(compute_dtype)`): inside the trainable shard it would receive a gradient and the
        optimizer would move it. A parameter the forward never uses is the limit of one flat shard per unit: its slice
        of the shard's gradient is zero, not `None`. `torch.optim` skips a parameter whose `.grad` is `None` but steps
        the whole shard, so AdamW's weight decay shrinks that slice every step, which single-process training never
        does (SGD without weight decay does not notice). A flat parameter stepped as one tensor (FSDP1's
        `FlatParameter`) behaves the same; FSDP2 shards each parameter as a tensor of its own, whose `.grad` stays
        `None`. With this lesson's units: leave parameters that are never used out of the units.
    """)
    lesson.exercise(
        "fsdp_unit",
        r'''
        class SavedParameter:
            """What the graph keeps of a tensor that lives in the gathered buffer: its geometry, not its bytes."""

            def __init__(self, shape: torch.Size, stride: tuple[int, ...], offset: int):
                self.shape, self.stride, self.offset = shape, stride, offset


        class FSDPUnit(nn.Module):
            """One fully sharded unit: `module`'s parameters live as this rank's fp32 shard only.

            After construction: self.shard is an nn.Parameter, float32, shape (ceil(N / world_size),), the only
            trainable parameter of the unit (the module's trainable parameters are set to None); the layout is
            flatten_shard's over the trainable ones (requires_grad) of module.named_parameters(). Frozen parameters
            (requires_grad=False) are not sharded: they stay on the module, whole, and never get a gradient.
            forward(*args) casts floating-point inputs (and the frozen parameters) to compute_dtype, runs the module
            with its parameters all-gathered in compute_dtype, and frees them; backward gathers them again if needed,
            frees them, and leaves the averaged fp32 gradient of the shard in self.shard.grad.
            Raises TypeError for a non-floating compute_dtype or parameters that are not float32, ValueError for a
            module without trainable parameters or one that already contains an FSDPUnit.
            """

            def __init__(self, module: nn.Module, *, compute_dtype: torch.dtype = torch.float32, group=None):
                super().__init__()
                # TODO: validate (see the docstring), before any communication
                # TODO: remember names and shapes of the trainable parameters (module.named_parameters() order, skip
                #       requires_grad=False), compute_dtype and group
                # TODO: self.shard = nn.Parameter(this rank's flatten_shard of those parameters)
                # TODO: free them: set each one to None on the module that owns it; keep the module (and its frozen
                #       parameters)
                # TODO: self._regathered = None: where _unpack will keep the buffer it gathers for backward
                ### BEGIN SOLUTION
                if not isinstance(compute_dtype, torch.dtype) or not compute_dtype.is_floating_point:
                    raise TypeError(f"the compute dtype must be a floating-point dtype, got {compute_dtype}")
                if any(isinstance(m, FSDPUnit) for m in module.modules()):
                    raise ValueError("this module already contains an FSDPUnit: wrap the units bottom-up, not nested")
                if any(p.dtype != torch.float32 for p in module.parameters()):
                    raise TypeError("the master parameters must be float32: call module.float() first")
                named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]  # frozen: not sharded
                if not named:
                    raise ValueError("a module without trainable parameters has nothing to shard")
                self.compute_dtype, self.group = compute_dtype, group
                self.names = [name for name, _ in named]
                self.shapes = [p.shape for _, p in named]
                rank, world_size = dist.get_rank(group), dist.get_world_size(group)
                self.shard = nn.Parameter(flatten_shard([p for _, p in named], rank, world_size))  # (S,) fp32 master
                for name in self.names:  # the full fp32 parameters are freed: only the shard stays on this rank
                    owner, _, leaf = name.rpartition(".")
                    setattr(module.get_submodule(owner), leaf, None)
                self.module = module
                self._regathered = None  # the unit's parameters, gathered again during its backward
                ### END SOLUTION

            def forward(self, *args):
                # TODO: cast floating-point tensor arguments to the compute dtype
                # TODO: all-gather with AllGatherShard; parameter views with unflatten, and the frozen parameters cast
                #       to the compute dtype; a hook on the buffer's gradient that frees what unpack gathered
                # TODO: run the module with torch.func.functional_call inside saved_tensors_hooks(pack, unpack)
                ### BEGIN SOLUTION
                args = tuple(a.to(self.compute_dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
                flat = AllGatherShard.apply(self.shard, self.compute_dtype, self.group)  # (p*S,) compute dtype
                if flat.requires_grad:  # runs once the unit's backward is done, just before the reduce-scatter
                    flat.register_hook(self._free_regathered)
                params = dict(zip(self.names, unflatten(flat, self.shapes)))
                # the frozen parameters stay on the module, whole and without gradient: only cast them
                params.update((name, p.to(self.compute_dtype)) for name, p in self.module.named_parameters())
                gathered = flat.untyped_storage().data_ptr()  # an int: the closure must not keep flat alive

                def pack(t):
                    if t.untyped_storage().data_ptr() == gathered:  # a parameter (or a view of one): keep its geometry
                        return SavedParameter(t.shape, t.stride(), t.storage_offset())
                    return t

                with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):
                    return torch.func.functional_call(self.module, params, args)  # flat is freed on return
                ### END SOLUTION

            def _unpack(self, saved):
                # TODO: a SavedParameter: all-gather again (once per backward) and return the view it describes
                ### BEGIN SOLUTION
                if not isinstance(saved, SavedParameter):
                    return saved
                if self._regathered is None:  # the first saved parameter this backward needs
                    with torch.no_grad():
                        self._regathered = AllGatherShard.apply(self.shard, self.compute_dtype, self.group)
                return self._regathered.as_strided(saved.shape, saved.stride, saved.offset)
                ### END SOLUTION

            def _free_regathered(self, grad):
                # TODO: drop the buffer that _unpack gathered
                ### BEGIN SOLUTION
                self._regathered = None
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Training with your units, and what each rank holds

        The demo below runs 2 real processes. Each wraps the four children of the same small model (a 12 → 16
        linear, two residual MLP blocks, a 16 → 5 head) in `FSDPUnit`s, trains five AdamW steps on its half of the
        batch, and records, at every collective, the bytes of gathered buffers still alive (a `TorchDispatchMode`
        sees every `c10d` operation; `weakref` tells when a buffer is freed). The single-process run on the full batch
        is the reference for the losses. The right panel is one step of rank 0: the sawtooth of one unit at a time,
        against the fp32 replica that DDP keeps all the time.
    """)
    lesson.code(r"""
        from torch.utils._python_dispatch import TorchDispatchMode


        class GatheredBytes(TorchDispatchMode):
            # at each collective: the bytes of all-gather outputs still alive in this process
            def __init__(self):
                super().__init__()
                self.live, self.timeline = [], []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func.namespace == "c10d":
                    if "allgather" in func.__name__:
                        self.live.append((weakref.ref(args[0]), args[0].numel() * args[0].element_size()))
                    self.live = [(ref, size) for ref, size in self.live if ref() is not None]
                    self.timeline.append((func.__name__.split(".")[0], sum(size for _, size in self.live)))
                return out


        class Block(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.norm, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

            def forward(self, x):
                return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


        def tiny_model():
            torch.manual_seed(0)
            return nn.Sequential(nn.Linear(12, 16), Block(16), Block(16), nn.Linear(16, 5))


        def train_sharded(x, y, compute_dtype, steps):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            model = nn.Sequential(*[FSDPUnit(child, compute_dtype=compute_dtype) for child in tiny_model()])
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # the shards: fp32 masters only
            rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
            losses, timeline = [], None
            for step in range(steps):
                with GatheredBytes() as ledger:
                    loss = F.mse_loss(model(x[rows]).float(), y[rows])
                    loss.backward()
                optimizer.step(); optimizer.zero_grad()
                mean_loss = loss.detach().clone(); dist.all_reduce(mean_loss); losses.append(mean_loss.item() / world_size)
                timeline = timeline or ledger.timeline
            return losses, timeline, sum(p.numel() for p in model.parameters())


        torch.manual_seed(1)
        x, y = torch.randn(8, 12), torch.randn(8, 5)
        reference_model = tiny_model()
        optimizer = torch.optim.AdamW(reference_model.parameters(), lr=1e-2)
        reference = []
        for step in range(5):
            loss = F.mse_loss(reference_model(x), y); loss.backward(); optimizer.step(); optimizer.zero_grad()
            reference.append(loss.item())
        total = sum(p.numel() for p in reference_model.parameters())
        runs = {}
        for dtype in (torch.float32, torch.bfloat16):
            results = run_ranks(train_sharded, 2, args=(x, y, dtype, 5))
            if any(r.error_type == "NotImplementedError" for r in results):
                break  # your FSDPUnit is not written yet: no curves
            runs[dtype] = expect_ranks_ok(results, input=f"demo, compute {dtype}")
        if len(runs) == 2:
            fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
            left.plot(reference, "k-o", label="single process, full batch")
            for (dtype, per_rank), style in zip(runs.items(), ("C0--s", "C3:^")):
                left.plot(per_rank[0][0], style, label=f"2 ranks, FSDPUnit, compute {str(dtype)[6:]}")
            left.set_xlabel("step"); left.set_ylabel("loss"); left.legend(fontsize=8); left.set_title("the same training")
            names, alive = zip(*runs[torch.bfloat16][0][1])
            right.step(range(len(alive)), [a / 1e3 for a in alive], where="post", label="gathered bf16 bytes alive")
            right.axhline(4 * total / 1e3, color="k", ls=":", label=f"DDP: full fp32 replica ({4 * total} B)")
            right.set_xticks(range(len(names)), [n.replace("_base_", "").replace("_", "") for n in names],
                             rotation=90, fontsize=6)
            right.axvline(3.5, color="grey", ls="--")  # 4 units: 4 forward all-gathers, then backward
            right.text(1.5, 6, "forward", ha="center"); right.text(7.5, 6, "backward", ha="center")
            right.set_ylabel("kB"); right.legend(fontsize=8); right.set_title("one step of rank 0 (compute bf16)")
            plt.tight_layout(); plt.show()
            print(f"parameters per rank: {runs[torch.float32][0][2]} (shards) instead of {total}")
    """)
    lesson.md(r"""
        ## 5. The full state dict, on rank 0

        A checkpoint for evaluation or for Hugging Face needs the ordinary state dict: full tensors, the module's own
        names, fp32. FSDP's `StateDictType.FULL_STATE_DICT` with `rank0_only=True, offload_to_cpu=True` (FSDP1), or
        `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))` (FSDP2), does it
        unit by unit: gather the **fp32 master** shards (not the bf16 compute copy), cut the padding, copy each
        parameter to the CPU, free the gathered buffer, next unit. Only rank 0 keeps the result; the others return an
        empty dict, so that no rank but one ever holds the whole model, and none holds it on the GPU.

        Keys are what the *unwrapped* model would have: a unit at path `1` wrapping a block whose parameter is
        `fc1.weight` gives `1.fc1.weight`, not `1.module.fc1.weight` (FSDP strips its own wrapper names the same way),
        so the dict loads with `load_state_dict(strict=True)` into a plain model. The tensors must own their storage:
        a view into the gathered buffer would drag the padded buffer of its whole unit into the checkpoint.

        Implement `full_state_dict(model)` for a model whose units are `FSDPUnit`s (anywhere inside it, each with
        its own group). Gathering with `all_gather_single` is simplest; `dist.gather` to rank 0 halves the traffic.
        Either way, one unit at a time. Buffers (a BatchNorm's running statistics) are not sharded and are left out
        here.
    """)
    lesson.exercise(
        "full_state_dict",
        r'''
        def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
            """On rank 0: {name as in the unwrapped model: full fp32 parameter on the CPU, owning its storage}, for
            every FSDPUnit in `model`; on the other ranks: {}. Every rank must call it (it communicates).
            Raises ValueError when `model` contains no FSDPUnit."""
            # TODO: find the units (model.named_modules()); refuse a model without any
            # TODO: for each unit: gather its fp32 master shards into one buffer, with the unit's group
            # TODO: on rank 0, cut it into the unit's parameters (unflatten) and copy each to the CPU under its full name
            ### BEGIN SOLUTION
            units = [(prefix, m) for prefix, m in model.named_modules() if isinstance(m, FSDPUnit)]
            if not units:
                raise ValueError("no FSDPUnit in this model: nothing is sharded")
            state = {}
            for prefix, unit in units:  # one unit at a time: rebinding `full` frees the previous unit's buffer
                world_size = dist.get_world_size(unit.group)
                master = unit.shard.detach()  # fp32, not the compute dtype
                full = torch.empty(world_size * master.numel(), dtype=master.dtype, device=master.device)  # (p*S,)
                all_gather_single(full, master, group=unit.group)
                if dist.get_rank(unit.group) == 0:  # a comprehension: no loop variable keeps a view of `full` alive
                    state.update(
                        {
                            f"{prefix}.{name}" if prefix else name: view.to("cpu", copy=True)  # owns its bytes
                            for name, view in zip(unit.names, unflatten(full, unit.shapes))
                        }
                    )
            return state
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        With the state dict, a sharded run ends where single-process code takes over:
        `plain_model.load_state_dict(full_state_dict(sharded_model))` on rank 0, then `save_pretrained` or an
        evaluation loop. The checks do exactly that with a fresh unwrapped model.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`flatten_shard`, `unflatten`.** `-(-N // p)` is $\lceil N/p \rceil$ in integers. The zeros go at the
        *end*, so rank $r$'s shard starts at $rS$ for every unit and the gathered buffer's first $N$ elements are the
        parameters in order. `.clone()` makes the shard own $S$ elements; without it, each rank keeps the whole
        padded buffer alive through the view. `unflatten` only splits and views: no copy, and one gradient for the
        whole buffer.

        **`AllGatherShard`.** Forward casts *then* gathers (bf16 on the wire, a bf16 buffer). Backward upcasts *then*
        reduce-scatters, and divides by $p$ because every rank's loss is a mean over its own micro-batch: the global
        loss is the mean of the $p$ losses. FSDP2 does the same divide, either before the sum (`predivide`, against
        overflow in fp16 reductions), after it, or with NCCL's `ReduceOp.AVG` / `PREMUL_SUM`; all agree to rounding.

        **`FSDPUnit`.** The shard is the only parameter, so `optimizer = AdamW(model.parameters())` creates $m$ and
        $v$ of $S$ elements per unit: the optimizer state is sharded for free. The step is elementwise, so stepping
        each shard equals stepping the full tensors and cutting them: this is why FSDP with SGD, Adam or AdamW is
        exact. (Global-norm gradient clipping is not elementwise: each rank computes the sum of squares of its
        shards and an all-reduce adds them, which is what `clip_grad_norm_` does on FSDP's DTensors.) The pack hook
        compares storages, so it catches every view of the buffer that autograd saves, including `weight.t()` inside
        `F.linear`. The free hook runs on the gradient of `flat`: by then every view's backward has run.

        **`full_state_dict`.** The gather uses the fp32 master, not `AllGatherShard` in the compute dtype: a
        checkpoint of a bf16 run must hold the fp32 weights that the optimizer updates, or resuming loses precision
        (a bf16 copy keeps 8 bits of mantissa of what AdamW adds to 24). Rebinding `full` frees the previous unit's
        buffer, but only if nothing else refers to it: a `for name, view in ...` loop leaves its last `view` alive
        after the loop, and that view keeps the whole buffer alive while the next unit is gathered. The comprehension
        has its own scope, so its variables are gone when it ends.

        **The usual mistakes, and why they are wrong**:
        - *Shard offset $\lfloor rN/p \rfloor$* instead of $rS$, or *no padding* (unequal shards): wrong layout, and an
          all-gather of unequal pieces fails.
        - *The shard as a view* of the padded buffer: correct numbers, the full unit still on every rank.
        - *Gradients summed, not averaged* (the learning rate is $p$ times too large for SGD; Adam hides it, which is
          why the checks compare gradients, not only trained weights); *the reduction in bf16*; *the gather in
          fp32, cast after* (twice the bytes on the wire and in memory).
        - *All-reducing the gradient and slicing*: the right numbers for twice the traffic (an all-reduce is a
          reduce-scatter plus an all-gather).
        - *Collectives on the whole world* (no `group=`), or *the rank and size of the world* instead of the group's:
          right in a plain data-parallel job, wrong as soon as FSDP runs along one dimension of a 2-D mesh (HSDP, or
          FSDP next to tensor parallelism). A check puts each rank in a group of its own.
        - *Frozen parameters flattened into the trainable shard*: they get a gradient, and the optimizer trains them.
        - *No saved-tensor hooks* (every unit stays gathered until backward: `reshard_after_forward=False`
          everywhere), *the gathered buffer kept on `self`*, *re-gathering at every unpack* (one all-gather per
          saved tensor), *the re-gathered buffer never freed* (stale weights in the next step), *the full parameters
          left on the module*, *inputs not cast to the compute dtype*.
        - In the state dict: *every rank returns it*, *the bf16 compute copy instead of the fp32 master*, *views
          instead of copies*, *the wrapper's name in the keys*, *a loop variable that keeps the last unit's buffer
          alive*.

        **Why the bf16 checks train with SGD.** Compare three AdamW steps computed in bf16 with the same steps in
        float64 and the two disagree by up to a whole learning rate on some weights, in one process as much as in two:
        for a weight whose gradient is near zero, $m/\sqrt{v}$ turns a rounding difference into a step of $\pm\eta$.
        That is a property of AdamW, not of sharding, and it would blur the comparison; SGD with momentum passes the
        rounding through linearly. (The fp32 checks use AdamW: there, rounding is too small to flip anything.)

        **What production FSDP does differently.**
        - *FSDP1* (`FullyShardedDataParallel`, from FairScale into PyTorch 1.11 in 2022; Zhao et al., *PyTorch FSDP*,
          VLDB 2023) is this lesson's design: a
          `FlatParameter` per unit, padded to a multiple of $p$, original parameters as views into it. Freeing is
          done by resizing the flat buffer's storage to 0 after forward and back before backward, so that
          autograd's saved references stay valid without hooks (they point to the same storage).
        - *FSDP2* (`torch.distributed.fsdp.fully_shard`) shards each parameter on dim 0 as a `DTensor` (rows
          $\lceil d_0/p \rceil$, padded), so each parameter keeps its identity, dtype and `requires_grad`; for the
          collectives it still copies a unit's shards into one flat buffer and all-gathers that once. It also frees by
          storage resizing, and the root module is not resharded after forward (backward needs it at once:
          `reshard_after_forward=None` picks that). It is the second oracle of this lesson's checks: on gloo and
          the CPU its trained weights equal yours.
        - *Overlap.* The all-gather of unit $i+1$ is issued while unit $i$ computes (forward and backward
          prefetching, on a separate CUDA stream), and the reduce-scatter of unit $i$ runs during the backward of unit
          $i-1$: with large enough units the communication above is hidden behind compute, which is where FSDP's
          speed comes from. This lesson runs everything in order.
        - *Hybrid sharding* (HSDP, a 2-D mesh): shard within a node over NVLink, replicate across nodes and all-reduce
          the gradient shards over the slower network. Llama 3 405B used FSDP as the data-parallel dimension of its 4-D
          parallelism (Dubey et al., *The Llama 3 Herd of Models*, 2024, §3.3.2), and the paper reports that it does
          not reshard the parameters after forward, to save the backward all-gather.
        - *DeepSpeed ZeRO-3* shards the same way (per-parameter partitions, prefetch buckets, optional CPU/NVMe
          offload of the shards and of the optimizer); Megatron-LM uses tensor and pipeline parallelism for the
          parameters and shards only the optimizer state and gradients across data-parallel ranks (its distributed
          optimizer, ZeRO-1/2).
    """)
    lesson.mistakes()
    return lesson
