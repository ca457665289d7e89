"""Source of 00_Prerequisites/07_Module_Basics.ipynb (build with `python -m llm_algo build p00.module_basics`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.module_basics",
        path="00_Prerequisites/07_Module_Basics.ipynb",
        title_en="nn.Module: parameters, buffers, state_dict and hooks",
        title_zh="nn.Module：参数、缓冲区、state_dict 与钩子",
        difficulty="easy",
        device="cpu",
        minutes=40,
        prerequisites=["p00.autograd", "p00.grad_hygiene"],
    )
    lesson.title(
        intro=r"""
        A checkpoint is a dictionary from names to tensors, and every way of loading one relies on `nn.Module`
        registering the right tensors under the right names. Register a constant as a parameter and the optimizer
        trains it and weight decay shrinks it; keep a running statistic as a plain attribute and it silently
        disappears from the checkpoint; save a derived table that should have been recomputed and old checkpoints
        stop loading when you change it. Hugging Face's Gemma 3 keeps its embedding scale $\sqrt{d}$ as a
        *non-persistent buffer* for exactly these reasons, and Llama keeps RoPE's `inv_freq` the same way.

        **You will implement** an embedding layer with a parameter, a persistent and a non-persistent buffer and a
        plain attribute; a helper that records the activations of chosen layers with forward hooks and always
        removes them; and a GPT-2-style weight initialisation used through `model.apply`. **Graded against**
        PyTorch's own bookkeeping (`named_parameters`, `named_buffers`, `state_dict`, `load_state_dict(strict=...)`,
        `.to()`, the `meta` device), `F.embedding`, activations recomputed layer by layer, and sample statistics of
        the initialised weights.

        **本节要点**
        - 参数 (`nn.Parameter`)：会被训练、出现在 `parameters()` 与 `state_dict` 中。
        - 缓冲区 (buffer, `register_buffer`)：不训练，但随 `.to()`/`.half()` 移动；`persistent=False` 的缓冲区不写入 `state_dict`（如 RoPE 的 `inv_freq`）。
        - 普通属性：既不随 `.to()` 移动，也不保存，只适合超参数（整数、浮点数）。
        - `load_state_dict(strict=True)` 要求键完全一致；`strict=False` 返回 `missing_keys` / `unexpected_keys`，务必检查。
        - `register_forward_hook` 可以不改模型代码就记录中间激活；记得 `.detach()` 并在 `finally` 中 `handle.remove()`。
        - `model.apply(fn)` 对每个子模块（后序遍历）调用 `fn`，常用于初始化：GPT-2 风格为 `N(0, 0.02)`，偏置为 0，归一化层增益为 1。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Three kinds of state

        `nn.Module.__setattr__` looks at what you assign and files it:

        | you write | kind | trained (`parameters()`) | moves with `.to()`, `.half()` | in `state_dict()` | typical use |
        | --- | --- | --- | --- | --- | --- |
        | `self.w = nn.Parameter(t)` | parameter | yes | yes | yes | weights, biases, norm gains |
        | `self.register_buffer("b", t)` | persistent buffer | no | yes | yes | BatchNorm's running statistics, step counters |
        | `self.register_buffer("b", t, persistent=False)` | non-persistent buffer | no | yes | **no** | RoPE `inv_freq`, causal masks, Gemma's `embed_scale` |
        | `self.n = 3` or `self.t = torch.ones(3)` | plain attribute | no | **no** | **no** | hyper-parameters (ints, floats, strings) |
        | `self.sub = nn.Linear(...)` | submodule | its parameters, named `sub.weight` | yes | yes, prefixed | layers |

        Newer code writes `self.b = nn.Buffer(t, persistent=False)`, the same registration spelled as an
        assignment (transformers 5 registers Llama's `inv_freq` that way). A plain tensor attribute is the classic bug: `model.cuda()` moves every parameter and buffer but leaves it
        on the CPU, and the first forward fails with *Expected all tensors to be on the same device* (or worse,
        `model.half()` leaves it in float32 and the layer quietly computes in mixed dtypes).

        **`.to(dtype)` only casts floating-point tensors**: an integer buffer (a counter, token ids) keeps its
        dtype, so `model.half()` never corrupts a step count.

        **`state_dict` and `load_state_dict`.** `state_dict()` is an ordered dict of the parameters and persistent
        buffers, keyed by their dotted paths (`layers.0.mlp.up_proj.weight`). `load_state_dict(sd, strict=True)`
        (the default) raises unless the keys match exactly; with `strict=False` it loads what matches and returns
        `missing_keys` and `unexpected_keys`, which you must read: a typo in a key prefix loads *nothing* and
        trains from random weights. Non-persistent buffers are never expected, so a table you recompute in
        `__init__` (RoPE frequencies) can change without breaking old checkpoints.
    """)
    lesson.setup(r"""
        import functools
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ### See it: the plain-attribute bug

        The `meta` device allocates nothing and computes only shapes; here it stands in for a GPU, so you can watch
        `.to()` move (or not move) every tensor on a machine without one.
    """)
    lesson.code(r"""
        class Leaky(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(4, 4))
                self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 4, 2) / 4), persistent=False)
                self.register_buffer("steps", torch.zeros((), dtype=torch.long))
                self.mask = torch.ones(4, 4).tril()  # plain attribute: the bug

        leaky = Leaky()
        print("state_dict keys:", list(leaky.state_dict()))
        leaky.to("meta").half()
        for name in ("weight", "inv_freq", "steps", "mask"):
            t = getattr(leaky, name)
            print(f"{name:9s} device {t.device.type:5s} dtype {str(t.dtype):14s}")
    """)
    lesson.md(r"""
        ## 2. Exercise `ScaledEmbedding`: every kind of state in one layer

        Gemma multiplies token embeddings by $\sqrt{d_{\text{model}}}$, and Hugging Face keeps that scale as a
        non-persistent buffer so that it is cast with the model (in bf16 the scale $\sqrt{3072} = 55.43$ is
        rounded to $55.5$, as in the original implementation) and never appears in a checkpoint. Build that layer,
        plus a persistent counter of how often each token id was seen in training (the kind of running statistic
        that BatchNorm keeps, and that you want to survive a checkpoint):

        - `weight`: parameter `(vocab_size, d_model)`, initialised $\mathcal{N}(0, 1)$, the row `padding_idx` zero
          (when `padding_idx` is not `None`);
        - `token_counts`: persistent buffer `(vocab_size,)` int64 zeros, increased by the number of occurrences of
          each id in every forward **in training mode only** (`self.training`), never in eval mode;
        - `embed_scale`: non-persistent buffer, a 0-d float32 tensor $\sqrt{d_{\text{model}}}$;
        - `padding_idx`, `vocab_size`, `d_model`: plain attributes.

        `forward(ids)` with `ids: (B, T)` int64 returns `weight[ids] * embed_scale` cast to `weight`'s dtype,
        `(B, T, d_model)`. Refuse ids outside `[0, vocab_size)` with `ValueError` (on a GPU an out-of-range index
        is a device-side assert that kills the process). The state_dict must be exactly `{"weight", "token_counts"}`.
    """)
    lesson.exercise(
        "scaled_embedding",
        r'''
        class ScaledEmbedding(nn.Module):
            """Token embedding scaled by sqrt(d_model), with a token counter. state_dict: weight, token_counts."""

            def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
                super().__init__()
                self.vocab_size, self.d_model, self.padding_idx = vocab_size, d_model, padding_idx
                # TODO: weight: a parameter (vocab_size, d_model) ~ N(0, 1); the padding row (if any) zero
                # TODO: token_counts: a persistent int64 buffer of zeros (vocab_size,)
                # TODO: embed_scale: a non-persistent 0-d float32 buffer sqrt(d_model)
                ### BEGIN SOLUTION
                weight = torch.randn(vocab_size, d_model)
                if padding_idx is not None:
                    weight[padding_idx] = 0.0
                self.weight = nn.Parameter(weight)                                       # trained, saved
                self.register_buffer("token_counts", torch.zeros(vocab_size, dtype=torch.long))  # saved, not trained
                self.register_buffer("embed_scale", torch.tensor(d_model**0.5), persistent=False)  # moves, not saved
                ### END SOLUTION

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                """ids: (B, T) int64 in [0, vocab_size) -> (B, T, d_model) in weight's dtype"""
                # TODO: refuse ids outside [0, vocab_size) with ValueError
                # TODO: in training mode only, add each id's number of occurrences to token_counts
                # TODO: look up the rows and multiply by embed_scale (cast to the weight's dtype)
                ### BEGIN SOLUTION
                if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
                    raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got [{int(ids.min())}, {int(ids.max())}]")
                if self.training:
                    with torch.no_grad():
                        self.token_counts += torch.bincount(ids.flatten(), minlength=self.vocab_size)
                return self.weight[ids] * self.embed_scale.to(self.weight.dtype)         # (B, T, d_model)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Exercise `record_outputs`: look inside a model with forward hooks

        `module.register_forward_hook(hook)` calls `hook(module, args, output)` after every forward of that module
        and returns a handle; `handle.remove()` unregisters it. Hooks are how you inspect a model without editing
        its code: activation statistics for quantisation calibration (GPTQ, AWQ and SmoothQuant all start by
        recording the inputs or outputs of every `nn.Linear` on 128 to 512 calibration samples), finding the
        first layer that produces `inf`, or extracting features.

        Write `record_outputs(model, *args, types=...)`: register a hook on every submodule (from
        `model.named_modules()`, the model itself included, named `""`) that is an instance of one of `types`, run
        `model(*args)`, and return `(output, records)` where `records[name]` is the list of that module's outputs in
        call order (a module used twice, like a shared or tied layer, appears twice), each **detached** (a stored
        tensor that still requires grad keeps the whole autograd graph alive: the memory of every activation). When
        an output is a tuple, record its first element. Remove every hook before returning, **also when the forward
        raises** (`try`/`finally`): a forgotten hook keeps recording, and keeps every tensor it stores alive, for the
        rest of the process.
    """)
    lesson.exercise(
        "record_outputs",
        r'''
        def record_outputs(model: nn.Module, *args, types: tuple[type, ...] = (nn.Linear,)):
            """Run model(*args) and record the (detached) outputs of every submodule that is an instance of types.

            returns (model output, {module name: [output of each call, in order]})
            """
            records: dict[str, list[torch.Tensor]] = {}
            # TODO: a hook per matching module of model.named_modules(); keep the handles
            # TODO: the hook appends output (its first element if a tuple), detached, to records[name]
            # TODO: run the model; remove every handle in a finally block
            ### BEGIN SOLUTION
            def make_hook(name):
                def hook(module, inputs, output):
                    value = output[0] if isinstance(output, tuple) else output
                    records.setdefault(name, []).append(value.detach())
                return hook

            handles = [
                module.register_forward_hook(make_hook(name))
                for name, module in model.named_modules()
                if isinstance(module, types)
            ]
            try:
                output = model(*args)
            finally:
                for handle in handles:
                    handle.remove()
            return output, records
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `init_gpt2_style`: initialisation through `model.apply`

        `model.apply(fn)` calls `fn(m)` on every submodule, children before their parent, and returns the model.
        GPT-2 (Radford et al., 2019) and most LLM codebases since (nanoGPT, OLMo, Megatron's default) initialise:

        - every `nn.Linear` weight $\sim \mathcal{N}(0, \sigma^2)$ with $\sigma = 0.02$, its bias (if any) to 0;
        - every `nn.Embedding` weight $\sim \mathcal{N}(0, \sigma^2)$, and its `padding_idx` row (if any) to 0;
        - every `nn.LayerNorm` and `nn.RMSNorm` gain to 1, and a LayerNorm bias (if any) to 0.

        (GPT-2 also scales the residual output projections by $1/\sqrt{2 n_{\text{layers}}}$; that needs the module's
        *name*, so it is a second pass over `named_parameters()`, not part of this exercise.)

        Write `init_gpt2_style(module, std=0.02)` so that `model.apply(functools.partial(init_gpt2_style, std=0.02))`
        does all of the above and leaves every other module alone. Use the in-place `nn.init` functions
        (`nn.init.normal_`, `zeros_`, `ones_`): they run under `torch.no_grad()`, so the parameters stay leaves that
        an optimizer can update. The likely mistake: passing the *variance* where the standard deviation goes
        (`normal_(w, 0, std**2)` gives weights 50 times too small).
    """)
    lesson.exercise(
        "init_gpt2_style",
        r'''
        def init_gpt2_style(module: nn.Module, std: float = 0.02) -> None:
            """For model.apply: Linear/Embedding weights ~ N(0, std^2), biases and padding rows 0, norm gains 1."""
            # TODO: nn.Linear: normal weight with this std (not variance), zero bias if there is one
            # TODO: nn.Embedding: normal weight, zero padding row if padding_idx is set
            # TODO: nn.LayerNorm / nn.RMSNorm: gain 1 (if elementwise_affine), LayerNorm bias 0 (if any)
            ### BEGIN SOLUTION
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
            elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                if module.weight is not None:
                    nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A picture: what initialisation does to the residual stream

        A stack of pre-norm MLP blocks initialised your way: the plot records, with your `record_outputs`, the
        root-mean-square of the residual stream after each block, for $\sigma = 0.02$ and for PyTorch's default
        `nn.Linear` init (uniform on $\pm 1/\sqrt{d_{in}}$, a standard deviation of $1/\sqrt{3 d_{in}}$: 0.036 for the
        256-wide input of `up`, 0.018 for the 1024-wide input of `down`). Each block adds its
        output to the stream, so the stream grows with depth; GPT-2's extra $1/\sqrt{2 n_{\text{layers}}}$ on the
        output projections exists to keep that growth in check.
    """)
    lesson.code(r"""
        class Block(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.norm, self.up, self.down = nn.RMSNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            def forward(self, x):
                return x + self.down(F.gelu(self.up(self.norm(x))))

        torch.manual_seed(0)
        d, depth = 256, 24
        x = torch.randn(4, 32, d)
        plt.figure(figsize=(6, 3.5))
        for label, init in (("PyTorch default init", None), ("GPT-2 init, std 0.02 (yours)", init_gpt2_style)):
            model = nn.Sequential(*[Block(d) for _ in range(depth)])
            try:
                if init is not None:
                    model.apply(functools.partial(init, std=0.02))
                with torch.no_grad():
                    _, records = record_outputs(model, x, types=(Block,))
            except NotImplementedError:
                continue  # not attempted yet: no curve
            rms = [records[str(i)][0].pow(2).mean().sqrt().item() for i in range(depth)]
            plt.plot(range(1, depth + 1), rms, marker=".", label=label)
        plt.xlabel("block"); plt.ylabel("RMS of the residual stream"); plt.legend()
        plt.title(f"residual stream growth, {depth} pre-norm MLP blocks, d = {d}"); plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`ScaledEmbedding`.** `nn.Parameter(weight)` registers the table as trainable; `register_buffer` twice,
        once persistent (the counter must survive a checkpoint) and once not (the scale is a function of `d_model`,
        recomputed by `__init__`, cast with the model). The counter is updated under `torch.no_grad()` and only when
        `self.training`: `model.eval()` flips that flag on every submodule, and evaluation or generation must not
        change training statistics (the bug BatchNorm users know: running stats updated during validation). The
        lookup `weight[ids]` is what `F.embedding` does; its backward scatters gradients back into the looked-up
        rows (a token seen twice gets the sum). *The usual mistakes*: the scale as a persistent buffer (checkpoints from `nn.Embedding` no
        longer load strictly) or as a plain attribute (it stays behind on `.to()`); the counter as a plain tensor
        (lost at save time) or updated in eval mode; no validation of the ids.

        **`record_outputs`.** One closure per module captures its name (`make_hook(name)`; a lambda in a loop
        would capture the loop variable and file everything under the last name). `.detach()` stores the values
        without the graph. `try`/`finally` removes the hooks even when the forward raises, which is exactly when
        you are debugging. *Mistakes*: hooks left registered, outputs not detached, a dict that keeps only the last
        call of a shared module.

        **`init_gpt2_style`.** `apply` visits every module once, so the function only needs to recognise the types
        it owns. `nn.init.*_` functions work in place under `no_grad`, so the parameters stay leaves. *Mistakes*:
        variance for standard deviation, the padding row left random (its embedding then leaks into every padded
        position), norm gains left at whatever they were (after loading, or after another init).

        **What production code does.** Hugging Face models implement `_init_weights(module)` and call it through
        `post_init()` (which uses `apply`); weights are then usually overwritten by `from_pretrained`, which loads with
        `strict=False` semantics and *reports* missing and unexpected keys in a warning (read it). Large models are
        built on the `meta` device first (`torch.device("meta")`, `accelerate`'s `init_empty_weights`) so that
        creating a 70B-parameter model allocates nothing until the checkpoint is loaded with `assign=True`.
        PyTorch's own hooks API also has `register_forward_pre_hook` (inputs) and `register_full_backward_hook`
        (gradients); FSDP registers such hooks to gather its sharded parameters just before each module's forward and free
        them just after.

        **Where this is used next.** [p02.rmsnorm](../02_PyTorch_Algorithms/02_RMSNorm.ipynb) asks for a module whose
        `state_dict` matches Hugging Face's, [p02.rope](../02_PyTorch_Algorithms/04_RoPE.ipynb) builds the cos/sin
        tables that Hugging Face derives from `inv_freq`, a non-persistent buffer, and [p02.tiny_llama](../02_PyTorch_Algorithms/08_Tiny_Llama.ipynb) loads a
        real state_dict into your model.
    """)
    lesson.mistakes()
    return lesson
