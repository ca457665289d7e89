"""Source of 00_Prerequisites/02_NumPy_Einsum.ipynb (build with `python -m llm_algo build p00.numpy_einsum`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.numpy_einsum",
        path="00_Prerequisites/02_NumPy_Einsum.ipynb",
        title_en="NumPy, broadcasting and einsum",
        title_zh="NumPy、广播与 einsum",
        difficulty="easy",
        device="cpu",
        minutes=40,
        prerequisites=["p00.python_for_llm"],
    )
    lesson.title(
        intro=r"""
        Attention is four lines of array code, and all four depend on two rules. **Broadcasting** lets a padding
        mask of shape `(B, 1, 1, S)` meet attention scores of shape `(B, H, T, S)` without copying it `H·T` times
        (for Llama-3-8B at `T = S = 8192` that copy would be `32 · 8192` times the mask, 2 GiB of booleans per
        sequence). **Einsum** names every axis, so `"bhtd,bhsd->bhts"` *is* the shape documentation of the score
        matmul, and a wrong letter is a wrong model, not a crash. Most shape bugs in model code are one of these two
        rules applied wrongly and silently.

        **You will implement** the broadcasting rule (predict the result shape of any combination, or say why it
        fails), the einsum subscripts of nine operations that appear in LLM code, and masked scaled dot-product
        attention in NumPy. **Graded against** `np.broadcast_shapes`, operations written with `matmul`, `trace`,
        loops and `np.outer`, and PyTorch's `F.scaled_dot_product_attention` in float64.

        **本节要点**
        - 广播 (broadcasting)：从最后一维向前对齐；每一对尺寸要么相等，要么其中一个是 1（或缺失）；否则报错。结果取较大者。
        - 广播不拷贝数据：尺寸为 1 的维度以步长 0 被“拉伸”，所以 `(B, 1, 1, S)` 的掩码可以直接作用于 `(B, H, T, S)`。
        - `einsum` 的下标字符串给每个轴命名：输入中出现、输出中省略的字母被求和（缩并），输出中的字母决定结果的轴顺序。
        - 注意力分数 `"bhtd,bhsd->bhts"`，输出 `"bhts,bhsd->bthd"` 直接得到合并头之前的布局；`nn.Linear` 是 `"...i,oi->...o"`（权重形状 `(d_out, d_in)`）。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Broadcasting: the rule

        NumPy and PyTorch apply an elementwise operation to arrays of different shapes by the same rule
        ([NumPy's broadcasting docs](https://numpy.org/doc/stable/user/basics.broadcasting.html)):

        1. Align the shapes **on the right**; pad the shorter one on the left with 1s.
        2. In each position the sizes must be **equal, or one of them 1**. Otherwise: error.
        3. The result takes the larger size; a size-1 axis is repeated (with stride 0, so no copy is made).

        With several operands (`np.broadcast_shapes(a, b, c)`), the rule applies to all of them at once. A size 0
        is an ordinary size: it matches 0 or 1, and the result is empty.

        | operands | result | where it happens |
        | --- | --- | --- |
        | `(B, H, T, S)`, `(B, 1, 1, S)` | `(B, H, T, S)` | padding mask over the scores |
        | `(T, 1)`, `(1, S)` | `(T, S)` | a causal mask from `arange(T)[:, None] >= arange(S)[None, :]` |
        | `(B, T, C)`, `(C,)` | `(B, T, C)` | adding a bias, scaling by an RMSNorm gain |
        | `(B, T)`, `(T,)` | `(B, T)` | one position bias added to every sequence of the batch |
        | `(B, T)`, `(B,)` | **error** (unless `T == B`!) | per-sequence lengths: you wanted `(B, 1)` |
        | `(T,)`, `(T, 1)` | `(T, T)` | the silent bug: a loss vector minus a column |

        The last two rows are the classic mistakes: a per-sequence value of shape `(B,)` needs `[:, None]` to become
        `(B, 1)`, and when `B == T` by accident (a test with `B = T = 4`) the wrong axis is used without an error.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import numpy as np
        import torch
    """)
    lesson.md(r"""
        ### See it: broadcasting builds the attention mask

        A batch of two sequences of length 6, the second one padded after 4 tokens. The causal mask `(T, S)` comes
        from comparing a column with a row; the padding mask `(B, 1, 1, S)` from comparing the key positions with
        each sequence's length `(B, 1, 1, 1)`. Their `&` broadcasts to `(B, 1, T, S)`, which broadcasts again over the
        heads of the scores. No `repeat`, no loop.
    """)
    lesson.code(r"""
        T = 6
        lengths = np.array([6, 4])                                   # (B,)
        positions = np.arange(T)                                     # (T,)
        causal = positions[:, None] >= positions[None, :]            # (T, 1) vs (1, S) -> (T, S)
        padding = positions[None, None, None, :] < lengths[:, None, None, None]  # (1,1,1,S) vs (B,1,1,1) -> (B,1,1,S)
        mask = causal & padding                                      # (T, S) & (B, 1, 1, S) -> (B, 1, T, S)
        print("causal", causal.shape, "| padding", padding.shape, "| combined", mask.shape)
        print("broadcast against scores (B, H, T, S) = (2, 4, 6, 6):", np.broadcast_shapes(mask.shape, (2, 4, T, T)))
        print("a (B,) length vector against (B, T) token ids without [:, None]:", end=" ")
        try:
            print(np.zeros((2, T)) < lengths)
        except ValueError as error:
            print("ValueError:", str(error).split("\n")[0][:70])

        fig, axes = plt.subplots(1, 3, figsize=(9, 3))
        for ax, (title, m) in zip(axes, [("causal (T, S)", causal), ("sequence 0: length 6", mask[0, 0]),
                                         ("sequence 1: length 4 (padded)", mask[1, 0])]):
            ax.imshow(m, cmap="Greens", vmin=0, vmax=1.3)
            ax.set_title(title, fontsize=9); ax.set_xlabel("key position s"); ax.set_ylabel("query position t")
        fig.suptitle("attention masks built by broadcasting (green = may attend)", fontsize=10)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 2. Exercise `broadcast_shape`: predict the result shape

        Implement the rule of section 1 for any number of shapes, returning a tuple of ints, and raise `ValueError`
        naming the position and the two sizes when they cannot broadcast. `np.broadcast_shapes` is the checks'
        reference and is forbidden here, with its relatives (`np.broadcast`, `np.broadcast_to`,
        `np.broadcast_arrays`, `torch.broadcast_shapes`): the point is to predict the shape, not to ask.
    """)
    lesson.exercise(
        "broadcast_shape",
        r'''
        def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
            """The shape that broadcasting these shapes together gives (no shapes: ())."""
            # TODO: the result has as many dimensions as the longest shape
            # TODO: align on the right; at each position sizes must be equal or 1 (a missing dim counts as 1)
            # TODO: raise ValueError for a mismatch, saying which sizes clash
            ### BEGIN SOLUTION
            ndim = max((len(shape) for shape in shapes), default=0)
            result = []
            for position in range(-ndim, 0):                      # from the left of the aligned shapes
                size = 1
                for shape in shapes:
                    other = shape[position] if len(shape) >= -position else 1  # missing on the left: 1
                    if other == 1:
                        continue
                    if size != 1 and size != other:
                        raise ValueError(f"cannot broadcast {shapes}: sizes {size} and {other} at dim {position}")
                    size = other
                result.append(size)
            return tuple(int(size) for size in result)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Einsum: name the axes, and the code writes itself

        `np.einsum("bhtd,bhsd->bhts", q, k)` reads: *for every* `b, h, t, s`, *sum over* `d` of `q[b,h,t,d] * k[b,h,s,d]`.
        The rules:

        - each input gets one letter per axis; the same letter on two inputs means "the same axis" (sizes must match);
        - letters that appear in the output after `->` are kept, in the output's order (so the output string is a
          free transpose);
        - letters that appear in the inputs but **not** in the output are summed over (contracted);
        - a letter repeated within one input takes a diagonal (`"ii->i"`), and `...` stands for "any leading axes".

        Cost: the product of the sizes of all distinct letters, times 2 FLOPs (multiply and add). For the scores,
        $2 \cdot B H T S D$; for Llama-3-8B ($H = 32, D = 128$) and $T = S = 8192$ that is 550 GFLOP per layer and
        sequence. `torch.einsum` turns a contraction of two operands into a batched matmul (`bmm`); NumPy's
        `optimize=True` reaches BLAS only for contractions without batch letters (measured below). With three or more
        operands the contraction order matters (`opt_einsum` and `optimize=True` pick one).

        ## 4. Exercise `einsum_specs`: nine operations from LLM code

        Return a dict from each name below to the einsum subscripts (with an explicit `->`) that computes it from
        the inputs in the order and shapes given. Pick any letters you like; the checks run your string through
        `np.einsum` (and `torch.einsum`) on random inputs and compare with the operation written another way.

        | name | inputs (shapes) | result |
        | --- | --- | --- |
        | `batched_matmul` | `a (B, M, K)`, `b (B, K, N)` | `(B, M, N)`: `a @ b` |
        | `linear` | `x (B, T, I)`, `w (O, I)` (an `nn.Linear` weight) | `(B, T, O)`: `x @ w.T` |
        | `attention_scores` | `q (B, H, T, D)`, `k (B, H, S, D)` | `(B, H, T, S)`: `q @ k.transpose(-1, -2)` |
        | `attention_output` | `p (B, H, T, S)`, `v (B, H, S, D)` | `(B, T, H, D)`: `(p @ v).transpose(1, 2)`, ready to merge the heads |
        | `gqa_scores` | `q (B, G, R, T, D)`, `k (B, G, S, D)` | `(B, G, R, T, S)`: each of the `R` query heads of group `g` against that group's one key head |
        | `trace` | `a (N, N)` | `()`: $\sum_i a_{ii}$ |
        | `outer` | `a (M,)`, `b (N,)` | `(M, N)`: $a_i b_j$ |
        | `bilinear` | `x (B, M)`, `a (M, N)`, `y (B, N)` | `(B,)`: $x_b^\top A\, y_b$ for each row |
        | `row_dot` | `a (T, D)`, `b (T, D)` | `(T,)`: $\sum_d a_{td} b_{td}$, the diagonal of `a @ b.T` without computing the rest |

        The likely mistakes: the output letters of `attention_output` in `(B, H, T, D)` order (valid, but not the
        layout asked for: einsum never complains about a transpose), `linear` with the weight as `(I, O)`
        (a size mismatch when `I != O`, a silent transpose when they are equal), and `trace` as `"ii->i"` (the
        diagonal: a vector).
    """)
    lesson.exercise(
        "einsum_specs",
        r'''
        def einsum_specs() -> dict[str, str]:
            """Einsum subscripts, with '->', for each operation of the table above."""
            # TODO: one entry per name of the table; check each string on small arrays before you submit
            ### BEGIN SOLUTION
            return {
                "batched_matmul": "bmk,bkn->bmn",
                "linear": "bti,oi->bto",
                "attention_scores": "bhtd,bhsd->bhts",
                "attention_output": "bhts,bhsd->bthd",
                "gqa_scores": "bgrtd,bgsd->bgrts",
                "trace": "ii->",
                "outer": "m,n->mn",
                "bilinear": "bm,mn,bn->b",
                "row_dot": "td,td->t",
            }
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `attention_numpy`: masked attention with broadcasting and einsum

        Put both rules together. With $q$ `(B, H, T, D)`, $k, v$ `(B, H, S, D)` and a boolean `mask` that broadcasts to
        `(B, H, T, S)` (True where a query may attend to a key):

        $$
        \text{scores} = \frac{q k^\top}{\sqrt{D}} \;(B, H, T, S), \qquad
        \text{scores}[\lnot\text{mask}] = -\infty, \qquad
        P = \operatorname{softmax}_s(\text{scores}), \qquad \text{out} = P v \;(B, H, T, D).
        $$

        Subtract each row's maximum before `exp` (float32 overflows past $e^{88}$). Compute in the inputs' dtype
        (float32 or float64) and return that dtype. Refuse with `ValueError`: `q`, `k`, `v` that are not 4-D, `k` or
        `v` whose shape is not exactly `(B, H, S, D)`, and a mask that does not broadcast to the scores. Exactly:
        `np.einsum` broadcasts a size-1 axis under a shared letter, so a single-head `k` `(B, 1, S, D)` passed to
        this multi-head function would run without a word and give every head the same keys. Every
        row is assumed to have at least one key it may attend to (the checks never send an all-False row).
    """)
    lesson.exercise(
        "attention_numpy",
        r'''
        def attention_numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
            """Scaled dot-product attention in NumPy.

            q: (B, H, T, D); k, v: (B, H, S, D), float32 or float64
            mask: bool, broadcastable to (B, H, T, S), True = may attend; None = no mask
            returns (B, H, T, D) in q's dtype
            """
            if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
                raise ValueError(f"q, k, v must be 4-D (B, H, T, D), got {q.shape}, {k.shape}, {v.shape}")
            B, H, T, D = q.shape
            S = k.shape[2]
            # TODO: refuse k, v whose (B, H, S, D) do not fit q, and a mask that does not broadcast to (B, H, T, S)
            # TODO: scores with einsum, scaled by 1 / sqrt(D)
            # TODO: masked positions -> -inf; softmax over the keys with the row max subtracted
            # TODO: weighted sum of v with einsum; return q's dtype
            ### BEGIN SOLUTION
            if k.shape != (B, H, S, D) or v.shape != (B, H, S, D):
                raise ValueError(f"k and v must be (B, H, S, D) = ({B}, {H}, S, {D}), got {k.shape} and {v.shape}")
            if mask is not None and np.broadcast_shapes(mask.shape, (B, H, T, S)) != (B, H, T, S):
                raise ValueError(f"mask {mask.shape} does not broadcast to the scores {(B, H, T, S)}")
            scores = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(D).astype(q.dtype)  # (B, H, T, S)
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)                 # (B, H, T, S), broadcasting the mask
            scores = scores - scores.max(axis=-1, keepdims=True)         # row max 0: exp cannot overflow
            weights = np.exp(scores)
            weights /= weights.sum(axis=-1, keepdims=True)               # (B, H, T, S), rows sum to 1
            return np.einsum("bhts,bhsd->bhtd", weights, v).astype(q.dtype)  # (B, H, T, D)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### How fast is einsum? A measurement

        The same score computation four ways on this machine's CPU, at a small-model size. `np.einsum` runs its
        own C loop over every index combination. `optimize=True` searches a contraction order and hands a pairwise
        contraction to BLAS through `tensordot`, but only when no letter sits on both inputs *and* the output; here
        `b` and `h` do (batch letters), so it keeps the C loop and adds the search. `q @ k.swapaxes(-1, -2)` is a
        batched BLAS matmul, and `torch.einsum` rewrites the string as one (`bmm`). On the machine that built this
        lesson the matmul was about ten times faster than `np.einsum`; rerun it, the bars depend on your CPU and
        its load (best of 7 runs after a warm-up call).
    """)
    lesson.code(r"""
        import time

        rng = np.random.default_rng(0)
        q = rng.standard_normal((1, 8, 256, 64), dtype=np.float32)
        k = rng.standard_normal((1, 8, 256, 64), dtype=np.float32)

        def best_of(fn, repeats=7):
            fn()  # warm-up: first-call costs (path search, thread pools) are not the steady state
            times = []
            for _ in range(repeats):
                start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
            return min(times)

        flops = 2 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
        ways = {
            "np.einsum": lambda: np.einsum("bhtd,bhsd->bhts", q, k),
            "np.einsum(optimize=True)": lambda: np.einsum("bhtd,bhsd->bhts", q, k, optimize=True),
            "q @ k.swapaxes(-1, -2)": lambda: q @ k.swapaxes(-1, -2),
            "torch.einsum": lambda: torch.einsum("bhtd,bhsd->bhts", torch.from_numpy(q), torch.from_numpy(k)),
        }
        seconds = {name: best_of(fn) for name, fn in ways.items()}
        plt.figure(figsize=(6, 2.6))
        plt.barh(list(seconds), [flops / s / 1e9 for s in seconds.values()], color="C0")
        plt.xlabel("GFLOP/s (higher is better)"); plt.title("scores of (1, 8, 256, 64) attention, float32, CPU")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`broadcast_shape`.** Walk the aligned positions; at each, every operand contributes its size or 1 when it
        is too short. Sizes of 1 never constrain; the first size other than 1 sets the result, and any later size
        other than 1 must equal it. Note that 0 is not 1: `(0,)` and `(3,)` clash, while `(0,)` and `(1,)` give `(0,)`.
        *The mistakes*: aligning on the left, taking the maximum of
        the sizes without checking them (so `(2,)` and `(3,)` "broadcast" to `(3,)`), treating 0 like 1, and the
        length of the result from the first shape instead of the longest.

        **`einsum_specs`.** Each string is the shape comment of the operation: `linear` contracts `i` against the
        weight's *second* axis because `nn.Linear` stores `(d_out, d_in)`; `attention_output` writes `bthd` and gets
        the merged-heads layout without a separate `transpose` (einsum may still copy internally); `gqa_scores` keeps
        the group letter `g` on both inputs and the letter `r` only on `q`, so every key head is shared by `R` query
        heads without being repeated (what `repeat_kv` does with a copy in Hugging Face's Llama). `trace` sums the
        diagonal because the output is empty; `bilinear` has three operands and one output letter.

        **`attention_numpy`.** The mask enters through `np.where`, which broadcasts `(B, 1, 1, S)` or `(T, S)` against
        the scores; `-inf` (not a large negative number) makes masked weights exactly 0 after `exp`. The row max is
        subtracted after masking, so it is the max over the *allowed* keys. *The mistakes*: no $1/\sqrt{D}$ (the
        softmax saturates as $D$ grows: at $D = 128$ scores are 11 times too large), the softmax over the query
        axis, multiplying the scores by the mask (a masked score becomes 0, which still gets weight $e^0$), no max
        subtraction, and float64 output for float32 input: under NumPy 2's promotion rules (NEP 50) a Python float keeps an
        array float32, but a NumPy float64 scalar such as `np.sqrt(D)` promotes the whole array to float64, hence the
        `.astype`.

        **What production code does.** PyTorch's `F.scaled_dot_product_attention` takes a boolean or additive
        `attn_mask` that broadcasts exactly like yours and dispatches to FlashAttention or memory-efficient kernels
        that never materialise `(B, H, T, S)`; Hugging Face builds its 4-D masks with the same broadcasting
        comparisons as the demo. `torch.einsum` appears in real model code for MoE dispatch and combine
        (one-hot dispatch einsums of the form `"sec,sm->ecm"`, as in GShard, Lepikhin et al. 2020), and einops' `rearrange` is einsum's naming idea applied to
        reshapes.

        **Where this is used next.** [p00.tensor_layout](04_Tensor_Layout.ipynb) explains what broadcasting does to
        strides (a size-1 axis becomes stride 0), [p02.attention_mha_gqa](../02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb)
        builds GQA and padding masks on these rules, and [p02.moe_router](../02_PyTorch_Algorithms/09_MoE_Router.ipynb)
        dispatches tokens to experts with one-hot einsums.
    """)
    lesson.mistakes()
    return lesson
