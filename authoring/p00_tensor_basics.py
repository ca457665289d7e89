"""Source of 00_Prerequisites/03_Tensor_Basics.ipynb (build with `python -m llm_algo build p00.tensor_basics`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.tensor_basics",
        path="00_Prerequisites/03_Tensor_Basics.ipynb",
        title_en="Tensor fundamentals: dtypes, devices, reductions, masks",
        title_zh="张量基础：数据类型、设备、归约与掩码",
        difficulty="easy",
        device="cpu",
        minutes=40,
        prerequisites=["p00.python_for_llm"],
    )
    lesson.title(
        intro=r"""
        Most of the code around a transformer is not matrix multiplication: it moves a batch to the GPU in the
        right dtype, builds the causal and padding masks, and reduces over the right axis to get a loss or an
        accuracy. Each step has a classic silent bug. Cast a whole batch to bfloat16 and token id 128001 (a
        Llama-3 special token) becomes 128000, because bfloat16 keeps 8 significant bits. Build the mask with
        `-inf` and a fully padded row turns the attention output into NaN. Average over all positions instead of
        the real ones and the loss depends on how much padding the batch had.

        **You will implement** `move_batch` (floating tensors to a device and dtype, ids and masks only to the
        device), `causal_mask` with a KV-cache offset and the additive `attention_bias` built from it, and
        `masked_mean` and `token_accuracy` (reductions with `keepdim`, `argmax`, masks). **Graded against**
        `torch.tril`, `F.scaled_dot_product_attention` with a boolean mask, `torch.finfo`, float64 loop specs and
        `Tensor.to` on the `meta` device (a device without memory, available on every machine).

        **本节要点**
        - 张量 = 数据 + `dtype` + `device` + 形状；`x.to(device, dtype)` 返回新张量（不是原地修改），忘记赋值是常见错误。
        - 只转换浮点张量：token id 必须保持 `int64`，bf16 只有 8 位有效位，id 128001 会被舍入成 128000。
        - 因果掩码 (causal mask)：查询 t 可以看键 s 当且仅当 `s <= t + (S - T)`；有 KV 缓存时查询是最后 T 个位置。用 `arange` 加广播比较即可构造。
        - 加性掩码用 `torch.finfo(dtype).min` 而不是 `-inf`：整行都被屏蔽时 `-inf` 会让 softmax 得到 NaN。
        - 归约 (reduction) 时 `keepdim=True` 保留被归约的维度（大小为 1），便于与原张量广播；掩码平均要除以真实元素个数，而不是总长度。
        - `argmax(dim=-1)` 沿词表维取预测；准确率只在未被 `ignore_index` 屏蔽的位置上计算。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. A tensor is data, a dtype, a device and a shape

        | dtype | bytes | significant bits | largest finite | exact integers up to | used for |
        | --- | --- | --- | --- | --- | --- |
        | `float32` | 4 | 24 | 3.4e38 | $2^{24}$ = 16,777,216 | master weights, optimizer states, reductions |
        | `bfloat16` | 2 | 8 | 3.4e38 | $2^8$ = 256 | weights and activations in training and inference |
        | `float16` | 2 | 11 | 65504 | $2^{11}$ = 2048 | inference, older GPUs |
        | `int64` | 8 | — | 9.2e18 | all | token ids, positions, indices |
        | `bool` | 1 | — | — | — | masks |

        (`torch.finfo(torch.bfloat16)` and `torch.iinfo(torch.int64)` print these numbers.) `x.to(device, dtype)`
        returns a *new* tensor (or `x` itself when nothing changes); `x.to(torch.bfloat16)` on its own line does
        nothing to `x`. Creation functions take `dtype=` and `device=` directly (`torch.zeros(T, S,
        device=x.device)`), which avoids building on the CPU and copying. Every tensor in one operation must live
        on the same device; the dtypes are promoted (`int64 + float32 → float32`, `bf16 * float32 → float32`).

        A batch from a data loader is a dict: `input_ids (B, T) int64`, `attention_mask (B, T)`, perhaps
        `pixel_values (B, 3, H, W) float32`. Moving it means: every tensor to the device, only the **floating**
        ones to the model's dtype. Hugging Face's `BatchFeature.to(device, dtype)` (the batch of its image and audio
        processors) does exactly this: it casts floating tensors only.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `move_batch`

        `move_batch(batch, device, dtype)` returns a **new** dict: floating tensors moved to `device` and cast to
        `dtype`, other tensors (ids, masks) moved to `device` with their dtype unchanged, other values (an int, a
        list of strings) as they are. The input dict is not modified. Refuse a non-floating `dtype` with
        `ValueError`. The checks use the `meta` device, which every PyTorch build has. The likely mistake:
        `value.to(device, dtype)` for every tensor, which turns the ids into bfloat16.
    """)
    lesson.exercise(
        "move_batch",
        r'''
        def move_batch(batch: dict, device: torch.device | str, dtype: torch.dtype) -> dict:
            """Floating tensors -> (device, dtype); other tensors -> device only; other values unchanged."""
            # TODO: refuse a dtype that is not floating (torch.dtype has an attribute that says so)
            # TODO: build a new dict; decide per value with isinstance and .is_floating_point()
            ### BEGIN SOLUTION
            if not dtype.is_floating_point:
                raise ValueError(f"dtype must be a floating dtype, got {dtype}")
            moved = {}
            for name, value in batch.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    moved[name] = value.to(device=device, dtype=dtype)
                elif isinstance(value, torch.Tensor):
                    moved[name] = value.to(device=device)       # ids and masks keep their dtype
                else:
                    moved[name] = value
            return moved
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # Why ids must stay integers: bfloat16 keeps 8 significant bits, so above 256 it rounds ids to a grid.
        ids = torch.arange(0, 130_000, 97)
        as_bf16 = ids.to(torch.bfloat16).to(torch.int64)
        as_fp16 = ids.to(torch.float16).to(torch.int64)  # above 65504 float16 overflows to inf
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.plot(ids, (as_bf16 - ids).abs(), lw=0.8, label="bfloat16")
        finite = ids < 65504
        ax.plot(ids[finite], (as_fp16[finite] - ids[finite]).abs(), lw=0.8, label="float16 (inf above 65504)")
        ax.axvline(128_000, color="grey", ls=":", label="Llama-3 special tokens (128000+)")
        ax.set_xlabel("token id"); ax.set_ylabel("|id after round trip − id|"); ax.legend(fontsize=8)
        ax.set_title("token ids cast to a 16-bit float and back")
        plt.tight_layout(); plt.show()
        print("128001 ->", int(torch.tensor(128001).to(torch.bfloat16)))
    """)
    lesson.md(r"""
        ## 3. Masks from `arange` and broadcasting

        Attention scores are `(B, H, T, S)`: `T` queries against `S` keys. A decoder lets query $t$ see key $s$ only
        when $s$ is not in its future. Without a cache $T = S$ and the rule is $s \le t$. With a KV cache the $T$
        new queries are the **last** $T$ of $S$ positions (during decoding $T = 1$: the one new token sees every
        key), so the rule is

        $$
        \text{allowed}[t, s] = \big(s \le t + (S - T)\big), \qquad t \in [0, T),\ s \in [0, S),\ S \ge T .
        $$

        Build it without a loop: `torch.arange(T)[:, None]` is `(T, 1)`, `torch.arange(S)[None, :]` is `(1, S)`, and
        comparing them broadcasts to `(T, S)`.

        Kernels that take an **additive** mask (Hugging Face's eager attention, many custom kernels) add a bias to
        the scores before softmax: 0 where allowed, a huge negative number elsewhere. Hugging Face uses
        `torch.finfo(dtype).min`, not `-inf`: a row with every key masked (a left-padded position) would compute
        `softmax` of all `-inf`, which is `0/0 = NaN`, and NaN then spreads through every later layer. With the finite
        minimum the row is uniform garbage that the padding mask hides downstream. The bias must have the scores'
        dtype: `finfo(float32).min` overflows to `-inf` in float16.
    """)
    lesson.md(r"""
        ## 4. Exercise `masks`

        `causal_mask(num_queries, num_keys=None, device=None)` returns the `(T, S)` boolean mask above (`num_keys`
        defaults to `num_queries`; refuse `num_keys < num_queries` or `num_queries < 1` with `ValueError`).
        `attention_bias(allowed, dtype)` turns any boolean mask into an additive bias of `dtype` and the same shape
        (refuse a non-boolean mask or a non-floating dtype with `ValueError`). `torch.tril`, `torch.triu` (and their
        `Tensor` methods) are the checks' reference and are forbidden. The likely mistakes: forgetting the offset
        $S - T$ (the new token of a decode step sees only key 0), and `-inf` or `finfo(float32).min` for every dtype.
    """)
    lesson.exercise(
        "masks",
        r'''
        def causal_mask(num_queries: int, num_keys: int | None = None, device=None) -> torch.Tensor:
            """(T, S) bool: True where query t may attend key s, i.e. s <= t + (S - T)."""
            # TODO: default num_keys; refuse num_queries < 1 and num_keys < num_queries
            # TODO: compare a (T, 1) column of query positions with a (1, S) row of key positions
            ### BEGIN SOLUTION
            num_keys = num_queries if num_keys is None else num_keys
            if num_queries < 1 or num_keys < num_queries:
                raise ValueError(f"need 1 <= num_queries <= num_keys, got {num_queries} and {num_keys}")
            offset = num_keys - num_queries                               # the cached positions before the queries
            queries = torch.arange(num_queries, device=device)[:, None]   # (T, 1)
            keys = torch.arange(num_keys, device=device)[None, :]         # (1, S)
            return keys <= queries + offset                               # (T, S)
            ### END SOLUTION


        def attention_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            """Bool mask (any shape) -> additive bias of dtype: 0 where allowed, finfo(dtype).min elsewhere."""
            # TODO: refuse a non-bool mask and a non-floating dtype
            # TODO: a zero tensor of dtype, filled with the dtype's most negative finite value where not allowed
            ### BEGIN SOLUTION
            if allowed.dtype != torch.bool:
                raise ValueError(f"allowed must be a bool tensor, got {allowed.dtype}")
            if not dtype.is_floating_point:
                raise ValueError(f"dtype must be floating, got {dtype}")
            bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
            return bias.masked_fill(~allowed, torch.finfo(dtype).min)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        try:
            masks = {"prefill T = S = 6": causal_mask(6), "chunk T = 3 of S = 6": causal_mask(3, 6),
                     "decode T = 1 of S = 6": causal_mask(1, 6)}
        except NotImplementedError:
            masks = {"prefill T = S = 6": torch.ones(6, 6, dtype=torch.bool).tril(),
                     "chunk T = 3 of S = 6": torch.ones(3, 6, dtype=torch.bool).tril(3),
                     "decode T = 1 of S = 6": torch.ones(1, 6, dtype=torch.bool)}
        fig, axes = plt.subplots(1, 3, figsize=(10, 2.8))
        for ax, (title, mask) in zip(axes, masks.items()):
            ax.imshow(mask, cmap="Greens", vmin=0, vmax=1.3)
            ax.set_title(title, fontsize=9); ax.set_xlabel("key s"); ax.set_ylabel("query t")
            ax.set_xticks(range(mask.shape[1])); ax.set_yticks(range(mask.shape[0]))
        plt.tight_layout(); plt.show()

        # -inf versus finfo.min on a fully masked row
        scores = torch.randn(2, 4)
        row_masked = torch.tensor([[True, True, False, False], [False, False, False, False]])
        print("with -inf     :", torch.softmax(scores.masked_fill(~row_masked, float("-inf")), -1)[1])
        print("with finfo.min:", torch.softmax(scores.masked_fill(~row_masked, torch.finfo(torch.float32).min), -1)[1])
    """)
    lesson.md(r"""
        ## 5. Reductions, `keepdim` and masked averages

        A reduction (`sum`, `mean`, `amax`, `argmax`) removes the axis it reduces; `keepdim=True` keeps it with size
        1, so the result still broadcasts against the input: `x - x.amax(-1, keepdim=True)` is `(B, T, V) - (B, T, 1)`;
        without `keepdim` it is `(B, T, V) - (B, T)`, which fails, or, when `T == V`, silently subtracts the wrong
        numbers.

        **Masked mean** (mean pooling of token states into a sentence embedding, the average loss over real
        tokens): for `x` and a mask broadcastable to it,

        $$
        \operatorname{masked\_mean}(x, m)_{\dots} = \frac{\sum_i m_i x_i}{\max\big(1, \sum_i m_i\big)}
        $$

        along `dim`, so that a row with no real entry gives 0 instead of NaN (sentence-transformers' mean pooling
        clamps the count the same way). Dividing by the length instead of the count is the padding bug again.

        **Token accuracy**: for `logits (B, T, V)` and `targets (B, T)`, the prediction is `argmax` over the vocabulary
        axis, and the accuracy is the fraction of positions whose target is not `ignore_index` where prediction ==
        target. `argmax(dim=1)` would take the argmax over time, `(B, V)`, and compare it with `(B, T)` by
        broadcasting or fail.
    """)
    lesson.md(r"""
        ## 6. Exercise `masked_reductions`

        `masked_mean(x, mask, dim, keepdim=False)`: `mask` is boolean (or 0/1) and broadcastable to `x`; compute in
        at least float32, return `x`'s dtype; a row without a real entry gives 0. Refuse a mask that does not
        broadcast to `x` with `ValueError`. `token_accuracy(logits, targets, ignore_index=-100)` returns a 0-d
        float32 tensor (NaN when every target is ignored, like `F.cross_entropy`); refuse `targets` whose shape is
        not `logits.shape[:-1]` with `ValueError`.
    """)
    lesson.exercise(
        "masked_reductions",
        r'''
        def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
            """Mean of x over dim at the places where mask is true (0 where there are none); x's dtype."""
            # TODO: refuse a mask that does not broadcast to x (torch.broadcast_shapes helps)
            # TODO: in >= float32: sum of x * mask over dim, divided by the count of true entries (at least 1)
            ### BEGIN SOLUTION
            try:
                shape = torch.broadcast_shapes(x.shape, mask.shape)
            except RuntimeError as error:
                raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to x {tuple(x.shape)}") from error
            if shape != x.shape:
                raise ValueError(f"mask {tuple(mask.shape)} would enlarge x {tuple(x.shape)} to {tuple(shape)}")
            compute = torch.promote_types(x.dtype, torch.float32)
            weights = mask.to(compute).expand(x.shape)                     # x's shape, 0.0 / 1.0
            total = (x.to(compute) * weights).sum(dim=dim, keepdim=keepdim)
            count = weights.sum(dim=dim, keepdim=keepdim).clamp(min=1)
            return (total / count).to(x.dtype)
            ### END SOLUTION


        def token_accuracy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
            """logits (..., V), targets (...) int64 -> 0-d float32: share of kept positions where argmax == target."""
            # TODO: refuse targets whose shape is not logits.shape[:-1]
            # TODO: predictions over the vocabulary axis; compare only where targets != ignore_index
            ### BEGIN SOLUTION
            if targets.shape != logits.shape[:-1]:
                raise ValueError(f"targets {tuple(targets.shape)} must have logits' leading shape {tuple(logits.shape[:-1])}")
            predictions = logits.argmax(dim=-1)                           # (...)
            keep = targets != ignore_index                                # (...)
            correct = (predictions == targets) & keep
            return correct.sum().to(torch.float32) / keep.sum().to(torch.float32)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`move_batch`.** `dtype.is_floating_point` and `tensor.is_floating_point()` make the decision; `.to(device=,
        dtype=)` does both moves in one copy. *Mistakes*: casting
        every tensor (ids become bfloat16 and round), forgetting the device for the integer tensors (the embedding
        lookup then fails with "Expected all tensors to be on the same device"), modifying the caller's dict.
        Production: Hugging Face's `BatchEncoding.to(device)` only moves tensors, `BatchFeature.to` also casts the
        floating ones, and `Trainer._prepare_input` casts only floating tensors when DeepSpeed runs in half precision; `pin_memory=True` plus `.to(device,
        non_blocking=True)` overlaps the copy with compute on a GPU.

        **`causal_mask` and `attention_bias`.** One comparison of two broadcast `arange`s builds the mask in one
        kernel, on the right device, with no `(T, S)` float intermediate. The offset $S - T$ is what makes the same
        function serve prefill ($T = S$), chunked prefill and decoding ($T = 1$). `torch.finfo(dtype).min` is
        −3.4e38 in float32 and bfloat16 but −65504 in float16, so the bias is built in the scores' dtype.
        *Mistakes*: no offset, `<` instead of `<=` (a token that cannot see itself), `-inf`, a float32 minimum cast
        to float16 (−inf). Production: PyTorch's `F.scaled_dot_product_attention(is_causal=True)` and
        FlashAttention never build the mask: they skip the blocks above the diagonal and compute the rest, which
        halves the work of a long prefill; FlashAttention aligns the causal diagonal to the bottom right exactly
        as the offset here does.

        **`masked_mean` and `token_accuracy`.** The count is clamped to 1 so an empty row divides 0 by 1. The
        compute dtype is at least float32, as in PyTorch's own reductions over half-precision tensors: the sum and
        the division are rounded once, at the end, to `x`'s dtype. `argmax(dim=-1)` reduces the vocabulary axis. *Mistakes*: dividing by the length,
        `argmax` over the wrong axis, counting ignored positions in the denominator. Next:
        [p00.tensor_layout](04_Tensor_Layout.ipynb) looks under the shape at strides and views.
    """)
    lesson.mistakes()
    return lesson
