"""Source of 02_PyTorch_Algorithms/42_ZeRO.ipynb (build with `python -m llm_algo build p02.zero`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.zero",
        path="02_PyTorch_Algorithms/42_ZeRO.ipynb",
        title_en="ZeRO: sharding the optimizer state and the gradients",
        title_zh="ZeRO：切分优化器状态与梯度",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.ddp", "p02.adamw"],
    )
    lesson.title(
        intro=r"""
        Data parallelism (`p02.ddp`) keeps a full copy of everything on every GPU. With AdamW in mixed precision
        that is 16 bytes per parameter: 2 for the bf16 weights, 2 for their gradients, and 12 for the optimizer
        (float32 master weights, $m$ and $v$). A 7.5B-parameter model needs 120 GB per GPU before a single
        activation, more than an 80 GB A100 or H100 holds, even with 64 GPUs sharing the work: every one of the 64
        stores the same 90 GB of optimizer state. ZeRO (Rajbhandari et al., *ZeRO: Memory Optimizations Toward
        Training Trillion Parameter Models*, SC 2020) removes that redundancy: each of the $N_d$ ranks keeps and
        updates only $1/N_d$ of the optimizer state (stage 1), of the gradients (stage 2), and of the weights
        (stage 3, which is FSDP, `p02.fsdp`). Their Figure 1: the same 7.5B model on 64 GPUs needs 31.4 GB per
        GPU with stage 1, 16.6 GB with stage 2, and 1.9 GB with stage 3, for the same communication volume as
        plain data parallelism in stages 1 and 2.

        **You will implement** the memory model of the four stages, then ZeRO-1 for *any* `torch.optim`
        optimizer (the parameters flattened into one padded buffer, each rank stepping the optimizer on its own
        shard, an all-gather of the updated shards), and ZeRO-2 (the gradients reduce-scattered, so that each rank
        only ever receives and keeps its own shard of them). The code runs in several real processes
        (`torch.distributed`, gloo here, NCCL on GPUs). **Graded against** unsharded `torch.optim.AdamW`, `SGD`
        and `Adam` step for step, *bit for bit* in float32 (section 3 says why that is possible),
        `torch.distributed.optim.ZeroRedundancyOptimizer` as a second oracle (forbidden to you), the ZeRO paper's
        numbers, and the per-rank optimizer-state bytes, counted tensor by tensor.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：混合精度 + AdamW 每个参数 16 字节（bf16 权重 2、梯度 2、fp32 主权重与 $m$、$v$ 共 12）；数据并行让每张卡都存一份，7.5B 模型需要 120 GB。
        - **ZeRO 三个阶段**：stage 1 切分优化器状态（每 rank $2\Psi + 2\Psi + 12\Psi/N_d$），stage 2 再切分梯度（$2\Psi + 14\Psi/N_d$），stage 3 连权重也切分（$16\Psi/N_d$，即 FSDP）。
        - **扁平分片**：把所有参数拼成一个扁平向量，补零到 $N_d$ 的整数倍，rank $r$ 拥有 $[rS, (r+1)S)$，$S = \lceil \Psi / N_d \rceil$；分片可以跨越张量边界。
        - **ZeRO-1 的一步**：all-reduce 梯度并除以 $N_d$ → 取自己那一片 → 本地优化器只更新这一片 → all-gather 拼回完整参数。
        - **ZeRO-2**：用 reduce-scatter 代替 all-reduce，每个 rank 只收到自己那一片梯度之和，完整梯度可以立即释放；通信量与 all-reduce 相同（reduce-scatter + all-gather = all-reduce）。
        - **任意优化器**：逐元素的优化器（AdamW、SGD、Adam）对分片更新与整体更新逐位相同；需要整个张量的（LAMB 的信任比、Shampoo、梯度范数裁剪）要额外通信。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Where the memory goes

        With $\Psi$ parameters, mixed-precision training with Adam keeps per parameter $2$ bytes of bf16 (or fp16)
        weights used in forward and backward, $2$ bytes of gradient, and $K = 12$ bytes of optimizer state: a
        float32 master copy of the weight, and Adam's $m$ and $v$ in float32. Data parallelism over $N_d$ ranks
        replicates all of it. ZeRO partitions, stage by stage:

        | stage | sharded | bytes per rank |
        | --- | --- | --- |
        | 0 (DDP) | nothing | $(2 + 2 + K)\,\Psi$ |
        | 1 ($P_{os}$) | optimizer state | $2\Psi + 2\Psi + K\Psi / N_d$ |
        | 2 ($P_{os+g}$) | + gradients | $2\Psi + (2 + K)\,\Psi / N_d$ |
        | 3 ($P_{os+g+p}$) | + parameters | $(2 + 2 + K)\,\Psi / N_d$ |

        For $\Psi = 7.5 \cdot 10^9$ and $N_d = 64$: $120$, $31.4$, $16.6$ and $1.9$ GB, the paper's Figure 1
        (GB here are $10^9$ bytes). Activations, temporary buffers and fragmentation come on top.

        **Communication.** Plain data parallelism all-reduces the gradient: $2\Psi$ elements sent per rank with a
        ring ($2\frac{N_d-1}{N_d}\Psi$ exactly), which is a reduce-scatter ($\Psi$) followed by an all-gather
        ($\Psi$). ZeRO-2 keeps the reduce-scatter for the gradients, updates its shard, and all-gathers the
        *updated parameters* instead of the gradients: the same $2\Psi$, for a $1/N_d$ share of the memory.
        ZeRO-3 also all-gathers the parameters before every forward and backward: $3\Psi$, 1.5 times as much.

        ## 2. Exercise `zero_memory_per_rank`: the table as a function

        Return the bytes per rank of the table above for a stage 0 to 3 (`optimizer_bytes` is $K$: 12 for Adam
        in mixed precision, 4 for SGD with momentum with fp32 master weights, ...). Refuse a stage outside 0..3
        or a world size below 1 with `ValueError`.
    """)
    lesson.setup(r"""
        import functools
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn

        from llm_algo.distributed import expect_ranks_ok, run_ranks  # the demos start real 2-rank worlds

        # torch 2.13 renamed the tensor forms of two collectives; the old names still work (with a warning)
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    """)
    lesson.exercise(
        "zero_memory_per_rank",
        r'''
        def zero_memory_per_rank(num_params: float, world_size: int, stage: int, optimizer_bytes: int = 12) -> float:
            """Bytes per rank for weights (2/param), gradients (2/param) and optimizer state (optimizer_bytes/param)
            when ZeRO `stage` (0 = plain data parallel, 1, 2, 3) shards them over world_size ranks."""
            # TODO: refuse a stage outside 0..3 and a world_size below 1 (ValueError)
            # TODO: stage >= 1 divides the optimizer state by world_size, >= 2 the gradients, 3 the weights
            ### BEGIN SOLUTION
            if stage not in (0, 1, 2, 3):
                raise ValueError(f"ZeRO stages are 0, 1, 2 and 3, not {stage}")
            if world_size < 1:
                raise ValueError(f"world_size must be at least 1, not {world_size}")
            weights, grads, states = 2 * num_params, 2 * num_params, optimizer_bytes * num_params
            if stage >= 1:
                states /= world_size
            if stage >= 2:
                grads /= world_size
            if stage >= 3:
                weights /= world_size
            return weights + grads + states
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        ranks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        try:
            curves = {stage: [zero_memory_per_rank(7.5e9, n, stage) / 1e9 for n in ranks] for stage in range(4)}
        except NotImplementedError:
            curves = {}
        plt.figure(figsize=(6.5, 3.5))
        for stage, values in curves.items():
            plt.plot(ranks, values, marker="o", label=["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"][stage])
        plt.axhline(80, color="k", ls=":", label="80 GB (A100/H100)")
        plt.xscale("log", base=2); plt.yscale("log"); plt.xlabel("data-parallel ranks $N_d$")
        plt.ylabel("GB per rank (no activations)"); plt.title("7.5B parameters, AdamW in mixed precision")
        plt.legend(fontsize=8); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. ZeRO-1 on a flat buffer

        Concatenate the $\Psi$ elements of all parameters into one flat vector, pad it with zeros to
        $N_d \cdot S$ elements with $S = \lceil \Psi / N_d \rceil$, and give rank $r$ the elements
        $[rS, (r+1)S)$. A shard does not respect tensor boundaries, and it does not need to: AdamW, Adam and SGD
        are **elementwise** (every element's update reads only that element's parameter, gradient and state), so
        stepping a shard of the flat vector is exactly stepping the whole tensors. Each rank creates the
        optimizer it is given on one `nn.Parameter` of $S$ elements: its state ($m$, $v$: $2S$ floats) is $1/N_d$
        of the unsharded state. One step:

        1. **reduce**: flatten the local gradients (zeros where `.grad` is `None`) into the padded buffer,
           all-reduce it (sum) and divide by $N_d$: the mean gradient, as in DDP; keep this rank's slice as the
           shard's `.grad`;
        2. **update**: `self.optimizer.step()` on the shard, *except* where no rank has a gradient;
        3. **gather**: `all_gather` the $N_d$ updated shards into a padded flat buffer (every rank gets all of
           them) and copy them back into the parameters, tensor by tensor.

        **Parameters without a gradient.** `torch.optim` skips a parameter whose `.grad` is `None`: a frozen one
        (`requires_grad=False`), or one the forward did not use. No weight decay shrinks it, no momentum moves it.
        On a flat shard the optimizer cannot skip part of its one parameter, and a zero gradient is not the same:
        AdamW still multiplies the weight by $1 - \eta\lambda$, SGD's momentum still carries the weight decay.
        So `step()` remembers those elements (of the shard and of every state tensor shaped like it), steps, and
        puts them back. Which elements: those of parameters that have no gradient on *any* rank (a parameter that
        one rank used is averaged with zeros from the others, as in DDP); the given `_with_gradient()` all-gathers
        one flag per parameter and returns the shard's mask. (The shard has one step count where `torch.optim`
        keeps one per parameter, so a parameter skipped on *some* steps gets Adam's bias correction of the
        shard's count: DeepSpeed's flat partitions have the same property.)

        **Bit for bit.** With 2 ranks, the all-reduced sum $g_0 + g_1$ is one addition per element, whatever order
        gloo or NCCL use, and dividing by 2 is exact; the optimizer does the same elementwise arithmetic on the
        same numbers as the unsharded one. So the checks compare with `torch.equal`, not a tolerance. (With more
        ranks the order of the sum is the library's, and the comparison would be to the reduction order's
        tolerance instead.)

        **The interface.** `ZeRO1(params, optimizer_class, group=None, **optimizer_kwargs)` takes one list of
        parameters of one dtype and device (one param group: section 6 says how real implementations handle
        several), exposes `self.optimizer` (the `optimizer_class` instance over the shard: the checks count its
        state tensors) and `self.shard` (that `nn.Parameter`), and has `reduce_gradients()` (step 1, returning the
        shard's mean gradient), `step()` and `zero_grad()`. The parameters are assumed equal on every rank at
        construction (wrap a model that `broadcast_parameters` from `p02.ddp` has synchronised). Validate before
        communicating: an `optimizer_class` that is not a `torch.optim.Optimizer` subclass is a `TypeError`, a
        param group (a dict) or an empty list a `TypeError`/`ValueError`, parameters of several dtypes or devices
        a `ValueError`. The padded buffer helper `_flat` and the mask `_with_gradient` are given.
    """)
    lesson.exercise(
        "zero1",
        r'''
        class ZeRO1:
            """ZeRO stage 1: every rank keeps optimizer state for its own 1/world_size shard of the flat parameters."""

            def __init__(self, params, optimizer_class, group=None, **optimizer_kwargs):
                # TODO: validate optimizer_class (TypeError) and params (a non-empty list of tensors of one
                #       dtype and device: TypeError / ValueError), before any communication
                # TODO: world size, rank, numel, shard_size = ceil(numel / world_size), this rank's start
                # TODO: self.shard: an nn.Parameter holding a copy of this rank's slice of the flat parameters;
                #       self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)
                ### BEGIN SOLUTION
                if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
                    raise TypeError(f"optimizer_class must be a torch.optim.Optimizer subclass, not {optimizer_class!r}")
                self.params = list(params)
                if not self.params or not all(isinstance(p, torch.Tensor) for p in self.params):
                    raise TypeError("ZeRO1 takes a non-empty list of parameters (one param group)")
                if len({(p.dtype, p.device) for p in self.params}) != 1:
                    raise ValueError("all parameters must share one dtype and device (one flat buffer)")
                self.group = group
                self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
                self.numel = sum(p.numel() for p in self.params)
                self.shard_size = -(-self.numel // self.world_size)  # ceil: the buffer is padded to world_size * S
                self.start = self.rank * self.shard_size
                flat = self._flat([p.detach() for p in self.params])
                self.shard = nn.Parameter(flat[self.start : self.start + self.shard_size].clone())
                self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)  # state for S elements only
                ### END SOLUTION

            def _flat(self, tensors) -> torch.Tensor:
                """Given: the tensors (shaped like self.params) concatenated, zero-padded to world_size * shard_size."""
                flat = self.params[0].new_zeros(self.world_size * self.shard_size)
                flat[: self.numel].copy_(torch.cat([t.reshape(-1) for t in tensors]))
                return flat

            def reduce_gradients(self) -> torch.Tensor:
                """This rank's shard of the mean gradient over the ranks: shard_size elements."""
                # TODO: flatten the gradients (zeros for None), all-reduce, divide by the world size, take the slice
                ### BEGIN SOLUTION
                flat = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
                dist.all_reduce(flat, group=self.group)
                return flat[self.start : self.start + self.shard_size].div_(self.world_size)
                ### END SOLUTION

            def _with_gradient(self) -> torch.Tensor:
                """Given: (shard_size,) bool, True where this rank's shard holds an element of a parameter that has a
                .grad on at least one rank of the group; False for frozen and unused parameters, and the padding."""
                has = self.params[0].new_tensor([float(p.grad is not None) for p in self.params])
                everyone = has.new_empty(self.world_size * len(self.params))
                all_gather(everyone, has, group=self.group)
                anywhere = everyone.view(self.world_size, -1).amax(0)
                flat = self._flat([torch.full(p.shape, float(a)) for p, a in zip(self.params, anywhere)])
                return flat[self.start : self.start + self.shard_size] > 0

            @torch.no_grad()
            def step(self) -> None:
                """Reduce the gradients, step the optimizer on this rank's shard, all-gather the updated parameters.
                A parameter that has no gradient on any rank (frozen, or unused by the forward) is skipped, as
                torch.optim skips a parameter whose .grad is None: its elements of the shard and of the optimizer
                state come out of the step as they went in (no weight decay, no momentum)."""
                # TODO: skip = the elements without a gradient (self._with_gradient(), before the gradients are freed)
                # TODO: the shard's .grad from reduce_gradients(); self.optimizer.step()
                # TODO: put the skipped elements back: the shard's, and those of every state tensor shaped like it
                #       (a state tensor the step has just created starts at zero there)
                # TODO: all_gather the shards into one padded flat buffer; copy it back into every parameter
                ### BEGIN SOLUTION
                skip = ~self._with_gradient()
                self.shard.grad = self.reduce_gradients()
                state = self.optimizer.state[self.shard]  # the dict the step fills in place (empty before the first)
                kept = {k: v[skip].clone() for k, v in state.items() if torch.is_tensor(v) and v.shape == skip.shape}
                kept_values = self.shard[skip].clone()
                self.optimizer.step()
                self.shard[skip] = kept_values  # no weight decay where no rank has a gradient
                for k, v in state.items():
                    if torch.is_tensor(v) and v.shape == skip.shape:
                        v[skip] = kept.get(k, 0)  # no momentum either: a new state tensor starts at zero there
                full = self.shard.new_empty(self.world_size * self.shard_size)
                all_gather(full, self.shard.detach(), group=self.group)  # rank r's shard lands at [rS, (r+1)S)
                offset = 0
                for p in self.params:
                    p.copy_(full[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
                ### END SOLUTION

            def zero_grad(self) -> None:
                for p in self.params:
                    p.grad = None
    ''',
    )
    lesson.md(r"""
        ### What each rank holds

        Three tensors of a tiny model, flattened and cut for 2 ranks: the shard boundary falls inside a tensor,
        and the padding sits at the end of the last shard. Each rank's optimizer state covers only its colour.
    """)
    lesson.code(r"""
        sizes = {"embed (13x8)": 104, "up (16x8)": 128, "up.bias": 16, "down (8x16)": 128, "down.bias": 8, "gain": 7}
        total, world = sum(sizes.values()), 2
        shard = math.ceil(total / world)
        fig, ax = plt.subplots(figsize=(8, 1.9))
        start = 0
        for i, (name, n) in enumerate(sizes.items()):
            ax.barh(1, n, left=start, color=f"C{i}", edgecolor="k")
            if n >= 20:  # the small ones are labelled in the legend of colours below
                ax.text(start + n / 2, 1, name, ha="center", va="center", fontsize=7)
            start += n
        for r in range(world):
            ax.barh(0, shard, left=r * shard, color=["#9ecae1", "#fdae6b"][r], edgecolor="k")
            ax.text(r * shard + shard / 2, 0, f"rank {r}: optimizer state for [{r * shard}, {(r + 1) * shard})",
                    ha="center", va="center", fontsize=8)
        ax.barh(0, world * shard - total, left=total, color="lightgrey", hatch="//", edgecolor="k")
        ax.set_yticks([0, 1], ["shards", "parameters"]); ax.set_xlabel("flat element index")
        ax.set_title(f"{total} elements, 2 ranks: S = ceil({total}/2) = {shard}, padding {world * shard - total} "
                     "(up.bias, down.bias and gain are the narrow bars)", fontsize=9)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `ZeRO2`: reduce-scatter the gradients

        In ZeRO-1 every rank still receives the *whole* summed gradient from the all-reduce, then ignores all but
        $1/N_d$ of it. A **reduce-scatter** delivers to rank $r$ only the sum of block $r$ of everyone's input
        (`reduce_scatter(output, input)`: `input` is the padded flat gradient of $N_d S$ elements, `output` this
        rank's $S$), and the full local gradients can be freed as soon as they have been sent. Override
        `reduce_gradients` so that it reduce-scatters and divides by the world size, and sets every parameter's
        `.grad` to `None` once the flat buffer is built (the memory saving of stage 2). `dist.all_reduce` is
        forbidden in this exercise. The setup cell binds `reduce_scatter` and `all_gather` to torch's tensor
        collectives under their name in your torch version.

        Production ZeRO-2 reduce-scatters bucket by bucket *during* backward, from the same gradient hooks as
        `p02.ddp`, so that a full gradient never exists at once; this lesson does it in one call at step time to
        keep the sharding in view.
    """)
    lesson.exercise(
        "zero2",
        r'''
        class ZeRO2(ZeRO1):
            """ZeRO stage 2: the gradients are reduce-scattered; each rank receives and keeps only its shard."""

            def reduce_gradients(self) -> torch.Tensor:
                """This rank's shard of the mean gradient (shard_size elements); the full .grad tensors are freed."""
                # TODO: the padded flat gradient (zeros for None); free every p.grad
                # TODO: reduce_scatter it into a new shard-sized tensor; divide by the world size
                ### BEGIN SOLUTION
                flat = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
                for p in self.params:
                    p.grad = None  # from here on this rank holds 1/world_size of the gradient
                shard = torch.empty_like(self.shard)
                reduce_scatter(shard, flat, group=self.group)  # rank r receives the sum of block r only
                return shard.div_(self.world_size)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Two ZeROs side by side: flat shards against whole parameters

        `torch.distributed.optim.ZeroRedundancyOptimizer` shards differently: it assigns *whole parameters* to
        ranks (greedily, largest first, to the rank with the fewest elements so far), steps each rank's own
        parameters with the wrapped optimizer, and broadcasts them from their owner. That works for any optimizer,
        even one that needs whole tensors, but balances only as well as the tensor sizes allow: with a large
        embedding the ranks' state can differ several-fold. The demo starts a real 2-rank world and counts the
        optimizer-state bytes each rank holds with your `ZeRO1` and with `ZeroRedundancyOptimizer`, for AdamW on
        the tiny model above.
    """)
    lesson.code(r"""
        def state_bytes_per_rank(zero_class):
            # runs in every rank: the same tiny model, two sharded AdamWs, their state bytes after one step
            torch.manual_seed(0)
            shapes = [(13, 8), (16, 8), (16,), (8, 16), (8,), (7,)]
            result = {}
            for name in ("ZeRO1 (yours)", "ZeroRedundancyOptimizer"):
                params = [nn.Parameter(torch.randn(s)) for s in shapes]
                if name == "ZeroRedundancyOptimizer":
                    optimizer = torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW)
                    local = optimizer.optim
                else:
                    optimizer = zero_class(params, torch.optim.AdamW)
                    local = optimizer.optimizer
                for p in params:
                    p.grad = torch.ones_like(p)
                optimizer.step()
                result[name] = sum(t.numel() * t.element_size() for state in local.state.values()
                                   for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
            return result

        try:
            per_rank = expect_ranks_ok(run_ranks(state_bytes_per_rank, 2, args=(ZeRO1,), deadline=120), input="demo")
        except Exception as error:
            print("no comparison:", str(error).splitlines()[0])
        else:
            unsharded = 2 * 4 * (13 * 8 + 16 * 8 + 16 + 8 * 16 + 8 + 7)  # m and v in float32
            names = list(per_rank[0])
            fig, ax = plt.subplots(figsize=(6.5, 3))
            for r in range(2):
                ax.bar([i + 0.38 * r for i in range(2)], [per_rank[r][n] for n in names], width=0.36, label=f"rank {r}")
            ax.axhline(unsharded / 2, color="k", ls=":", label="unsharded / 2")
            ax.set_xticks([0.19, 1.19], names); ax.set_ylabel("AdamW state bytes (m, v)")
            ax.set_title(f"Per-rank optimizer state; unsharded AdamW: {unsharded} bytes"); ax.legend(fontsize=8)
            plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`zero_memory_per_rank`.** Three terms, divided in order: stage 1 the optimizer state, stage 2 also the
        gradients, stage 3 also the weights. The curves show why stage 1 is nearly free (the $12\Psi$ term is the
        largest) and why stage 3 is needed for models whose *weights* alone exceed a GPU.

        **`ZeRO1`.** `-(-numel // world_size)` is the ceiling in integers; the padding makes every shard the same
        size, which the tensor collectives require (`all_gather_into_tensor` and `reduce_scatter_tensor` take
        one input of $S$ and one output of $N_d S$ elements). The shard is a *copy* (`clone()`) held in an
        `nn.Parameter` of its own, so any `torch.optim` optimizer accepts it and creates state of $S$ elements.
        After the step, the all-gather puts rank $r$'s shard at offset $rS$ of the full buffer on every rank,
        and the copy-back walks the parameters in the order of the flattening, skipping the padding at the end.

        **`ZeRO2`.** The same buffer, `reduce_scatter` instead of `all_reduce`, and the local gradients freed
        right after flattening. Each rank sends $(N_d - 1) S$ elements and receives as many, half of an
        all-reduce; the all-gather of the parameters is the other half.

        **The usual mistakes, and why they are wrong**:
        - *No division by the world size*: the sum of gradients, an effective learning rate $N_d$ times too large
          (AdamW hides part of it, but not its weight decay and epsilon).
        - *Shard size `numel // world_size`* (no padding): with an odd $\Psi$ the last elements belong to no shard
          and never change; *a start offset of `rank * numel // world_size`*: shards overlap or leave gaps.
        - *No all-gather*: each rank's parameters only change where it owns the shard.
        - *The optimizer built on the full parameters* (state not sharded): numerically right, the state-bytes
          check fails.
        - *Weight decay on parameters without a gradient*: stepping the whole shard treats a frozen or unused
          parameter's elements as zero gradients, and AdamW shrinks them every step (`torch.optim` leaves them
          alone); a check trains a frozen and an unused parameter with AdamW and `weight_decay=0.1`.
        - *The rank and size of the world*, or *collectives without `group=`*: right when ZeRO is the whole job,
          wrong as soon as it shards along one dimension of a larger mesh (ZeRO next to tensor or pipeline
          parallelism); a check runs on the group [1, 2] of a world of 3, where rank 0 must receive nothing.
        - In stage 2: *all-reduce instead of reduce-scatter* (forbidden), *the full gradients kept*, *no division*.
        - In the memory model: *stage 2 still dividing only the optimizer state*, *stage 3 forgetting the weights*.

        **Several param groups, mixed precision, clipping.** DeepSpeed's ZeRO (stage 1 and 2 in
        `deepspeed/runtime/zero/stage_1_and_2.py`) flattens *each param group* separately, so group
        hyper-parameters (weight decay on matrices only, `p02.adamw`) stay per element; it keeps float32 master
        shards of bf16 parameters and casts the gathered update back to bf16; gradient-norm clipping needs the
        norm of the whole gradient, so each rank computes the squared norm of its shard and they all-reduce one
        number. Optimizers that are not elementwise (LAMB's per-tensor trust ratio, Shampoo, Muon's
        orthogonalised matrices) need whole tensors per rank, which is what `ZeroRedundancyOptimizer`'s
        parameter-wise partition gives (at the price of balance), or extra communication.

        **In production.** DeepSpeed ZeRO stages 1 to 3 (and ZeRO-Offload to CPU memory, ZeRO++ with quantised
        communication), PyTorch's `ZeroRedundancyOptimizer` (stage 1 by whole parameters) and FSDP/FSDP2
        (`fully_shard`: stage 3, or stage 2 with `reshard_after_forward=False`), Megatron-LM's distributed
        optimizer (optimizer state and float32 master weights sharded, the gradients reduce-scattered from a
        contiguous buffer, overlapped with backward bucket by bucket as in `p02.ddp`, then an all-gather of the
        updated bf16 parameters).
    """)
    lesson.mistakes()
    return lesson
