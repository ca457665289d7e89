"""Source of 02_PyTorch_Algorithms/18_Activation_Checkpointing.ipynb (build with
`python -m llm_algo build p02.activation_checkpointing`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.activation_checkpointing",
        path="02_PyTorch_Algorithms/18_Activation_Checkpointing.ipynb",
        title_en="Activation checkpointing: full and selective recomputation",
        title_zh="激活检查点：完全重计算与选择性重计算",
        difficulty="hard",
        device="cpu",
        minutes=75,
        prerequisites=["p00.memory", "p02.attention_mha_gqa", "p02.llama_block"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 反向传播需要前向时保存的激活值（activations）；对大模型，它们往往比参数、梯度和优化器状态加起来还大。
        - 激活检查点（activation checkpointing，也叫重计算 recomputation）：前向只保存块的输入，在 `no_grad` 下计算；反向时用保存的输入重新前向一次，再对这次重算反向。用约 1/3 的额外计算换取显存。
        - 用 `torch.autograd.Function` 实现：`forward` 保存输入与 RNG 状态，`backward` 恢复 RNG 状态（dropout 掩码必须一致）、在 `enable_grad` 下重算、对重算结果调用 `torch.autograd.backward`，返回输入的梯度；参数梯度在重算的反向中自然累加。
        - 这种“可重入”（reentrant）实现要求至少一个输入需要梯度，否则参数拿不到梯度——PyTorch 推荐的 `use_reentrant=False` 用 `saved_tensors_hooks` 解决了这一点。
        - 选择性重计算（selective recomputation）：只重算注意力核心（$QK^\top$、softmax、dropout、乘 $V$），它的激活是 $O(T^2)$ 的，但 FLOPs 很少；Megatron 论文中 GPT-3 175B 的激活显存因此减少约 70%。
        {易错点}

        Training a 7B Llama on sequences of 4096 tokens with a micro-batch of 1 stores, per layer, roughly
        $sbh(34 + 5as/h)$ bytes of activations in 16-bit training (Korthikanti et al., 2022, *Reducing Activation
        Recomputation in Large Transformer Models*, with $s$ the sequence length, $b$ the micro-batch, $h$ the hidden
        size and $a$ the heads): with $s = 4096$, $h = 4096$, $a = 32$ that is $16.8\text{M} \times 194 \approx 3.3$ GB
        per layer, 104 GB for 32 layers, more than an 80 GB GPU. Of the 194, the $5as/h = 160$ come from the attention
        scores, softmax and dropout masks, which grow with $s^2$. Checkpointing a whole layer keeps only its input
        ($2sbh$ bytes, 34 MB) and recomputes the rest during the backward pass; checkpointing only the attention core
        (Megatron's *selective* recomputation) drops the $s^2$ terms at a few percent of extra compute. For GPT-3 175B
        ($a = 96$, $s = 2048$, $h = 12288$) the same formula gives $5as/h = 80$ of 114, the 70% the paper reports.

        **You will implement** `checkpoint(function, *inputs)`, a reentrant checkpoint as a `torch.autograd.Function`
        (saved inputs only, RNG state restored for dropout, gradients for the inputs and the function's parameters),
        and `checkpointed_stack`, a stack of transformer blocks run with no, full or attention-only checkpointing.
        **Graded against** the same code without checkpointing and `torch.utils.checkpoint.checkpoint(...,
        use_reentrant=False)` (gradients, float64 and float32, with dropout), `torch.autograd.gradcheck`, and the tensors
        autograd saves, counted with `torch.autograd.graph.saved_tensors_hooks`.
    """
    )
    lesson.md(r"""
        ## 1. What backward needs, and what checkpointing keeps

        For $y = f(x; \theta)$ autograd records, during the forward pass, whatever the backward pass of each operation
        needs: the input of a matmul (to form $\partial L/\partial W = x^\top g$), the output of a softmax, the mask of a
        dropout. For a transformer layer with input $(b, s, h)$ these saved tensors are dominated by the
        $(b, a, s, s)$ attention scores and probabilities once $s$ exceeds a few times $h/a$.

        **Checkpointing** a function $f$ (a block of layers) changes the schedule:

        | | forward | backward |
        | --- | --- | --- |
        | normal | run $f$, autograd saves its activations | use them |
        | checkpointed | run $f$ under `no_grad` (nothing saved), keep only its inputs | re-run $f$ with grad on the saved inputs, backward through that re-run |

        Memory: the inputs of every checkpointed block, plus the activations of *one* block at a time during the
        backward. Compute: one extra forward of every checkpointed block, about a third more FLOPs (forward
        $\approx 2N$ and backward $\approx 4N$ FLOPs per token for $N$ parameters, so $2N/6N$). Chen et al. (2016,
        *Training Deep Nets with Sublinear Memory Cost*) checkpoint every $\sqrt{L}$ layers of $L$; LLM trainers usually
        checkpoint every layer, or only the attention core.

        **Dropout.** The re-run must produce the same random masks as the first run, or the gradient is that of a
        different network. The forward saves the RNG state before running $f$; the backward restores it for the
        re-run, inside `torch.random.fork_rng` so that the global RNG after the backward is as if nothing happened.
        Here only the CPU generator matters; `torch.utils.checkpoint` (with its default `preserve_rng_state=True`)
        also saves and restores the RNG state of the GPU that the inputs live on.

        ## 2. A reentrant checkpoint as an `autograd.Function`

        `torch.autograd.Function.forward` runs with gradients disabled, so calling $f$ there saves nothing; the output
        requires grad if any *input* does. In `backward(ctx, grad_output)`: detach the saved inputs (a fresh leaf per
        input, with the same `requires_grad`), re-run $f$ under `torch.enable_grad()`, and call
        `torch.autograd.backward(output, grad_output)`. That backward fills `.grad` of the detached inputs, which is
        what the Function returns, and it also adds into `.grad` of $f$'s parameters directly, the reason this design
        is called *reentrant* (a backward inside a backward).

        Its known limitation: if no input requires grad (the first block gets the output of a frozen embedding, say),
        the output does not require grad, `backward` is never called, and $f$'s parameters silently get no gradient.
        PyTorch's `use_reentrant=True` only warns; your `checkpoint` raises `ValueError` while grad mode is on and
        returns the plain $f(x)$ under `torch.no_grad()`. `use_reentrant=False` avoids the problem with
        `torch.autograd.graph.saved_tensors_hooks`: the forward runs normally, but each tensor autograd wants to save
        is replaced by a small handle, and the first unpack in the backward re-runs the function to produce them.
        You will use those hooks to *count* what autograd saves.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class TinyBlock(nn.Module):
            '''A pre-norm transformer block with a hand-written causal attention core (so its T x T tensors are saved).'''

            def __init__(self, dim, heads, dropout=0.0):
                super().__init__()
                self.heads, self.dropout = heads, dropout
                self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
                self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
                self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

            def attention_core(self, q, k, v):
                '''(B, H, T, D) each -> (B, H, T, D): scores, causal softmax, dropout, weighted sum.'''
                T, D = q.shape[-2], q.shape[-1]
                scores = q @ k.transpose(-2, -1) / math.sqrt(D)                        # (B, H, T, T)
                causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
                probs = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)    # (B, H, T, T)
                probs = F.dropout(probs, self.dropout, self.training)
                return probs @ v                                                      # (B, H, T, D)

            def forward(self, x, attention_core=None):
                core = attention_core or self.attention_core
                B, T, C = x.shape
                q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
                attended = core(q, k, v).transpose(1, 2).reshape(B, T, C)              # (B, T, C)
                x = x + self.proj(attended)
                return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


        def saved_tensor_bytes(fn):
            '''Run fn() and return (its result, the shapes and the total bytes of the tensors autograd saved).'''
            shapes, total = [], 0

            def pack(t):
                nonlocal total
                shapes.append(tuple(t.shape))
                total += t.numel() * t.element_size()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                result = fn()
            return result, shapes, total
    """)
    lesson.md(r"""
        ## 3. Exercise `checkpoint`

        `checkpoint(function, *inputs)`: `inputs` are tensors, `function(*inputs)` returns one tensor. Inside
        `CheckpointFunction.forward` save the inputs with `ctx.save_for_backward`, the function and the CPU RNG state
        (`torch.get_rng_state()`) on `ctx`, and run the function. In `backward` rebuild the inputs as detached leaves,
        re-run under the saved RNG state, backpropagate `grad_output` through the re-run, and return one gradient per
        `forward` argument (`None` for `function` and for inputs that do not require grad).
    """)
    lesson.exercise(
        "checkpoint",
        r'''
        class CheckpointFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, function, *inputs):
                # TODO: keep the function and the RNG state on ctx, save the inputs, run the function (nothing is recorded)
                ### BEGIN SOLUTION
                ctx.function = function
                ctx.rng_state = torch.get_rng_state()                       # dropout must draw the same masks again
                ctx.save_for_backward(*inputs)                              # the only activations kept
                with torch.no_grad():
                    return function(*inputs)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_output):
                # TODO: fresh leaves for the inputs; re-run under the saved RNG state with grad enabled;
                # TODO: backpropagate grad_output through the re-run; return (None, *input grads)
                ### BEGIN SOLUTION
                inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
                with torch.random.fork_rng(devices=[]):                     # leave the global RNG untouched
                    torch.set_rng_state(ctx.rng_state)
                    with torch.enable_grad():
                        output = ctx.function(*inputs)                      # the activations exist again, briefly
                torch.autograd.backward(output, grad_output)                # also fills the function's parameters' .grad
                return (None, *(x.grad if x.requires_grad else None for x in inputs))
                ### END SOLUTION


        def checkpoint(function, *inputs):
            """function(*inputs) -> one tensor, computed without keeping its activations; recomputed in backward."""
            # TODO: under torch.no_grad() just call the function
            # TODO: with grad enabled, refuse (ValueError) when no input requires grad; else use CheckpointFunction
            ### BEGIN SOLUTION
            if not torch.is_grad_enabled():
                return function(*inputs)
            if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
                raise ValueError(
                    "checkpoint: no input requires grad, so backward would never reach the function's parameters "
                    "(the reentrant limitation); pass an input that requires grad"
                )
            return CheckpointFunction.apply(function, *inputs)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `checkpointed_stack`: none, full, or attention only

        Run `x` through `blocks` (a list of `TinyBlock`s) with one of three policies:

        - `"none"`: `block(x)` for each block;
        - `"full"`: each whole block through your `checkpoint` (only each block's input is kept);
        - `"attention"`: each block runs normally, but its attention core goes through your `checkpoint`:
          `block(x, attention_core=...)` with a core that checkpoints `block.attention_core(q, k, v)`.

        Any other policy raises `ValueError`.
    """)
    lesson.exercise(
        "checkpointed_stack",
        r'''
        def checkpointed_stack(blocks, x: torch.Tensor, policy: str = "none") -> torch.Tensor:
            """x (B, T, C) through every block in order, with checkpointing "none", "full" or "attention"."""
            # TODO: validate the policy; apply the blocks in order with the chosen checkpointing
            ### BEGIN SOLUTION
            if policy not in ("none", "full", "attention"):
                raise ValueError(f"policy must be 'none', 'full' or 'attention', got {policy!r}")
            for block in blocks:
                if policy == "full":
                    x = checkpoint(block, x)                                # keeps x only
                elif policy == "attention":
                    core = block.attention_core
                    x = block(x, attention_core=lambda q, k, v, core=core: checkpoint(core, q, k, v))
                else:
                    x = block(x)
            return x
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What each policy saves, and what it costs

        Four blocks of width 64 with 4 heads, a batch of 2, sequence lengths from 32 to 256. Left: the bytes of the
        tensors autograd saves during the forward pass (counted with `saved_tensors_hooks`). Right: the FLOPs of
        forward + backward counted by `torch.utils.flop_counter.FlopCounterMode` (matmuls only), relative to no
        checkpointing. The full policy keeps one $(B, T, C)$ tensor per block and pays exactly one more forward pass
        (4/3 of the FLOPs). The attention policy removes the part of the memory that grows with $T^2$ and pays the
        attention core's FLOPs again, a fraction of about $T/(6C)$ of the matmuls': large here, where $C = 64$ is tiny,
        and under 3% for GPT-3 ($T = 2048$, $C = 12288$).
    """)
    lesson.code(r"""
        from torch.utils.flop_counter import FlopCounterMode

        torch.manual_seed(0)
        blocks = [TinyBlock(64, 4, dropout=0.1).train() for _ in range(4)]
        lengths = [32, 64, 128, 256]
        policies = ["none", "attention", "full"]
        saved = {p: [] for p in policies}
        flops = {p: [] for p in policies}
        try:
            for T in lengths:
                x = torch.randn(2, T, 64, requires_grad=True)
                for policy in policies:
                    with FlopCounterMode(display=False) as counter:
                        out, _, total = saved_tensor_bytes(lambda: checkpointed_stack(blocks, x, policy))
                        out.square().mean().backward()
                    saved[policy].append(total / 2**20)
                    flops[policy].append(counter.get_total_flops())
            fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
            for policy in policies:
                left.plot(lengths, saved[policy], "o-", label=policy)
                right.plot(lengths, [f / n for f, n in zip(flops[policy], flops["none"])], "o-", label=policy)
            left.set_xscale("log", base=2); left.set_yscale("log"); left.set_xticks(lengths, [str(t) for t in lengths])
            left.set_xlabel("sequence length T"); left.set_ylabel("saved for backward (MiB)"); left.legend()
            left.set_title("activation memory, 4 blocks, B = 2, C = 64")
            right.set_xscale("log", base=2); right.set_xticks(lengths, [str(t) for t in lengths])
            right.set_xlabel("sequence length T"); right.set_ylabel("FLOPs / FLOPs without checkpointing")
            right.set_title("forward + backward FLOPs"); right.legend()
            fig.tight_layout(); plt.show()
            for policy in policies:
                print(f"T = {lengths[-1]}, {policy:9}: saved {saved[policy][-1]:6.2f} MiB, "
                      f"{flops[policy][-1] / 1e9:.3f} GFLOP")
        except NotImplementedError:
            print("checkpointed_stack is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`CheckpointFunction.forward`.** Three things go on `ctx`: the function (a Python object, not a tensor), the
        RNG state (a small byte tensor), and the inputs through `save_for_backward`, which lets autograd check that
        nobody modified them in place before the backward. The `no_grad` block is explicit documentation: `forward` of
        a Function already runs without recording.

        **`CheckpointFunction.backward`.** `detach().requires_grad_(...)` makes new leaves that share memory with the
        saved inputs, so the re-run builds a graph that ends at them and not at the outer graph. `fork_rng` saves the
        current RNG state, lets the re-run draw from the restored one, and puts the current one back, so that the
        dropout masks of the re-run equal those of the first run and code after the backward draws the same numbers
        as without checkpointing. `torch.autograd.backward(output, grad_output)` is the chain rule through the
        re-run: using `output.sum().backward()` instead would ignore the incoming gradient. Parameters of `function` are
        leaves of the re-run graph too, so their `.grad` is accumulated right there.

        **`checkpointed_stack`.** `core=core` binds each block's own attention core (a lambda in a loop would otherwise
        see only the last block's). The full policy keeps $L$ tensors of $(B, T, C)$; the attention policy keeps
        everything but the $(B, H, T, T)$ tensors, plus $q$, $k$, $v$ as the checkpoint's inputs.

        **The usual mistakes, and why they are wrong**:
        - *The function run with grad enabled in forward* (everything saved, nothing gained), *the RNG state not
          restored* (different dropout masks, wrong gradients), *the RNG state not restored afterwards* (the rest of
          the training step draws different numbers), *`output.sum()` instead of `grad_output`*, *inputs not detached*,
          *no refusal when no input requires grad* (silently missing parameter gradients).
        - In the stack: *only the first block checkpointed*, *the MLP checkpointed instead of the attention*, *an
          unknown policy treated as "none"*, *every block using the last block's attention core*.

        **Cost.** Full recomputation adds one forward per block, about 33% more FLOPs per step. Selective
        recomputation adds only the attention core's FLOPs ($4bs^2h$ per layer against $24bsh^2$ for the matmuls:
        under 3% at $s = 2048$, $h = 12288$), which is why Megatron-LM makes it the default
        (`--recompute-activations`, i.e. `--recompute-granularity selective`). With FlashAttention the $s^2$ tensors are
        never stored anyway (its backward recomputes the attention probabilities block by block, `p03.flash_attention_bwd`),
        so today's choice is between full recomputation of some layers (`--recompute-granularity full
        --recompute-method uniform --recompute-num-layers N`) and none.

        **What production code does.** `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` is the
        recommended PyTorch API (saved-tensor hooks, keyword arguments, inputs that do not require grad, nested
        checkpoints); `torch.utils.checkpoint.create_selective_checkpoint_contexts` selects per *operation* what to save
        (for example: save matmul outputs, recompute everything else). Hugging Face models turn it on with
        `model.gradient_checkpointing_enable()`, which wraps every decoder layer. FSDP2 and torchtitan apply
        `checkpoint_wrapper` per block, and DeepSpeed can also offload the saved inputs to CPU memory
        (`cpu_checkpointing`).
    """)
    lesson.mistakes()
    return lesson
