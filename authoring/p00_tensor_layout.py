"""Source of 00_Prerequisites/04_Tensor_Layout.ipynb (build with `python -m llm_algo build p00.tensor_layout`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.tensor_layout",
        path="00_Prerequisites/04_Tensor_Layout.ipynb",
        title_en="Layout, strides and views",
        title_zh="张量布局、步长与视图",
        difficulty="medium",
        device="cpu",
        minutes=50,
        prerequisites=["p00.tensor_basics"],
    )
    lesson.title(
        intro=r"""
        Every attention layer of a transformer reshapes its activations twice: `(B, T, C)` is split into heads,
        `view(B, T, H, D).transpose(1, 2)`, and merged back after attention. Write the merge as
        `y.transpose(1, 2).view(B, T, C)` and it works while you decode one token at a time, then crashes with
        `view size is not compatible with input tensor's size and stride` the first time you run a prompt. Whether a
        reshape is free or copies the whole activation (64 MiB for one bf16 `(1, 8192, 4096)` hidden state) is
        decided by three integers per dimension that this lesson teaches you to predict: size, stride and the
        storage offset.

        **You will implement** the strides of a contiguous tensor, the rule that decides whether `view` can reshape
        a strided tensor without copying (and the strides it gets), and zero-copy sliding windows over a token
        stream with `as_strided`. **Graded against** `torch.empty(shape).stride()`, PyTorch's own `Tensor.view`
        (which raises exactly when a copy would be needed) and `Tensor.unfold`. The first two exercises are
        predictions: you compute the answer from integers, and the checks ask PyTorch.

        **本节要点**
        - 张量 = 一块一维存储 (storage) + 形状 (shape) + 步长 (stride) + 存储偏移 (storage offset)：元素 `x[i, j, k]` 位于
          `offset + i·s0 + j·s1 + k·s2`。
        - 连续 (contiguous) 张量的步长从最后一维往前累乘：`(B, T, H, D)` 的步长是 `(T·H·D, H·D, D, 1)`。
        - `transpose`/`permute`/切片只改步长和偏移，不拷贝数据；`view` 也不拷贝，但只能在“连续块”内拆分或合并维度。
        - 经典错误：`y.transpose(1, 2).view(B, T, C)` 报错；要么 `.contiguous().view(...)`（显式拷贝），要么
          `reshape`（必要时自动拷贝）。解码时 T = 1 不报错，预填充 (prefill) 时才报错。
        - `as_strided` 可以零拷贝地构造滑动窗口（滑动窗口注意力、长文本切块评估），结果与 `unfold` 相同；写入共享存储会相互影响。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. A tensor is a pointer, a shape and strides

        A `torch.Tensor` does not own a grid of numbers. It owns (a reference to) a flat **storage** (存储) and three
        pieces of metadata: a **shape** $(n_0, \dots, n_{k-1})$, **strides** (步长) $(s_0, \dots, s_{k-1})$ counted
        in elements, and a **storage offset** $o$. The element at index $(i_0, \dots, i_{k-1})$, with
        $0 \le i_d < n_d$, lives at

        $$
        \text{address}(i_0, \dots, i_{k-1}) = o + \sum_{d=0}^{k-1} i_d\, s_d .
        $$

        A freshly allocated tensor is **contiguous** (连续, row-major, "C order"): the last index moves fastest, so
        $s_{k-1} = 1$ and each stride is the number of elements in one step of that index, i.e. the product of the
        sizes after it:

        $$
        s_d = \prod_{e > d} n_e .
        $$

        For a Llama-3-8B query tensor split into heads, `(B, T, H, D) = (2, 5, 32, 128)`, the strides are
        `(5·32·128, 32·128, 128, 1) = (20480, 4096, 128, 1)`. A size-0 dimension counts as 1 in that product
        (PyTorch's convention, so strides stay positive), and a 0-d tensor (a loss) has shape `()` and strides `()`.

        **Operations that only change metadata** (no copy, $O(1)$, the result shares the storage; PyTorch calls these
        *views*):

        | operation | shape | strides | offset |
        | --- | --- | --- | --- |
        | `x.transpose(a, b)`, `x.permute(...)`, `x.T` | sizes swapped/permuted | strides swapped/permuted the same way | same |
        | `x[:, 3:7]` (a slice with step $k$) | that dimension becomes 4 (or $\lceil\cdot/k\rceil$) | that stride times $k$ | $o + 3 s_1$ |
        | `x[:, 2]` (an integer index) | that dimension is gone | that stride is gone | $o + 2 s_1$ |
        | `x.unsqueeze(d)` / `x.expand(...)` | a new size-1 dim / size 1 becomes $n$ | any / **0** (every row reads the same memory) | same |
        | `x.view(new_shape)` | `new_shape` | computed from the old strides, **when possible** | same |
        | `x.as_strided(size, stride, offset)` | anything | anything: you promise it stays inside the storage | anything |

        `x.contiguous()` returns `x` itself when it is already contiguous, and otherwise **copies** into a fresh
        row-major storage. `x.reshape(s)` is `x.view(s)` when that is possible, and `x.contiguous().view(s)` when not:
        same values, but you no longer know whether it copied (`data_ptr()` tells you).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ### See it: the head split of an attention layer

        Run this before the exercises, and before you run it, **predict** each shape and stride (the comments leave
        them out on purpose). `x` is the hidden state of a batch of two 5-token prompts, `C = H · D = 4 · 8`.
    """)
    lesson.code(r"""
        B, T, H, D = 2, 5, 4, 8
        C = H * D
        x = torch.randn(B, T, C)
        q = x.view(B, T, H, D)
        q_heads = q.transpose(1, 2)
        for name, t in (("x", x), ("q", q), ("q_heads", q_heads)):
            print(f"{name:8s} shape {tuple(t.shape)!s:15s} stride {t.stride()!s:18s} contiguous {t.is_contiguous()}",
                  f"same storage as x: {t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()}")

        # After attention the heads are merged back. The attention output (att @ v) is a NEW contiguous
        # tensor in (B, H, T, D) order; the classic mistake is to transpose it and call view:
        y = q_heads.contiguous()  # stands for the attention output, (B, H, T, D)
        try:
            y.transpose(1, 2).view(B, T, C)
        except RuntimeError as error:
            print("\nview after transpose fails:", str(error).split(".")[0])
        merged = y.transpose(1, 2).contiguous().view(B, T, C)  # an explicit copy, then a free view
        print("contiguous().view: copied =", merged.data_ptr() != y.data_ptr(), "| equal to x:", torch.equal(merged, x))
        # While decoding, T = 1 and the same line works, which is why the bug hides until the first prompt:
        one_token = torch.randn(B, H, 1, D)  # the attention output of one decoded token
        print("T = 1:", tuple(one_token.transpose(1, 2).view(B, 1, C).shape), "(no error: size-1 dims never block a view)")
    """)
    lesson.md(r"""
        ## 2. Exercise `contiguous_strides`: predict the strides of a fresh tensor

        Compute, from the shape alone, the strides that `torch.empty(shape).stride()` reports. Walk from the last
        dimension to the first, as in the formula of section 1. Validate the input: a negative size is a bug in the
        caller, refuse it with `ValueError`.

        The likely mistake: multiplying by the *own* size of a dimension instead of the sizes after it (which gives
        `(H·D·T·B, ...)`), or forgetting that a size-0 dimension counts as 1.
    """)
    lesson.exercise(
        "contiguous_strides",
        r'''
        def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
            """Row-major strides, in elements, of a contiguous tensor of this shape.

            shape: a tuple of sizes >= 0; () for a 0-d tensor
            returns a tuple of ints, one per dimension (what torch.empty(shape).stride() gives)
            raises ValueError for a negative size
            """
            # TODO: refuse negative sizes with a ValueError that shows the shape
            # TODO: from the last dimension to the first: the last has stride 1, each earlier stride is the
            #       product of the sizes after it (a size-0 dimension counts as 1)
            ### BEGIN SOLUTION
            if any(size < 0 for size in shape):
                raise ValueError(f"sizes must be >= 0, got shape {tuple(shape)}")
            strides = []
            elements_after = 1  # how many elements one step of the current dimension skips
            for size in reversed(shape):
                strides.append(elements_after)
                elements_after *= max(size, 1)  # PyTorch's convention for empty dimensions
            return tuple(reversed(strides))
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. When can `view` reshape without copying?

        `view` never copies, so it must express every element of the new shape with *one* stride per new
        dimension. Look at the old dimensions from the last to the first and group them into **chunks** (连续块):
        two neighbouring dimensions $d, d+1$ belong to the same chunk when stepping once in $d$ is the same as
        running through all of $d+1$, i.e. $s_d = n_{d+1}\, s_{d+1}$. A chunk behaves exactly like one contiguous
        1-D block of $\prod n_d$ elements with the stride $b$ of its last dimension (its *base stride*). Dimensions of
        size 1 never move the pointer, so they are ignored: they neither join nor break a chunk.

        `view(new_shape)` is possible exactly when the new dimensions, taken from the last to the first, can be
        grouped into consecutive runs whose products are the chunk sizes, in the same order. Inside a run the new
        strides are contiguous, scaled by the chunk's base: the last new dimension of a run gets $b$, the one before
        $b \cdot n'_{\text{last}}$, and so on. A new size-1 dimension can go anywhere (its stride is irrelevant;
        PyTorch fills in a value you need not match).

        Worked examples, with `(B, T, H, D) = (2, 5, 4, 8)`:

        - `q = x.view(B, T, H, D)`: `x` is contiguous, one chunk of 320 elements, base 1. The new dims `(2, 5, 4, 8)`
          form one run: strides `(160, 32, 8, 1)`.
        - `q_heads = q.transpose(1, 2)`: shape `(2, 4, 5, 8)`, strides `(160, 8, 32, 1)`. Chunks from the right:
          `D` is a chunk of 8 elements with base 1. `T` would join it if $s_T = 8 \cdot 1$, but $s_T = 32$: a new
          chunk (5 elements, base 32). `H` would join that one if $s_H = 5 \cdot 32 = 160$, but $s_H = 8$: a new
          chunk. `B` would join `H` if $s_B = 4 \cdot 8 = 32$, but $s_B = 160$: a new chunk. Four chunks of sizes
          `(2, 4, 5, 8)`, so every view must keep `B`, `H`, `T` and `D` apart: `view(B, H, T * D)` fails (it merges
          `T` with `D`), `view(B * H, T, D)` fails (it merges `B` with `H`), while `view(B, H, T, 2, 4)` works (it
          splits inside the `D` chunk: strides `(160, 8, 32, 4, 1)`).
        - `q_heads.transpose(1, 2)` is `q` again (strides `(160, 32, 8, 1)`): contiguous, so `.view(B, T, C)` on it
          is free. The merge after attention fails because the attention output `att @ v` is a *new* contiguous
          tensor in `(B, H, T, D)` order, strides `(160, 40, 8, 1)`; its `transpose(1, 2)` has shape `(2, 5, 4, 8)`,
          strides `(160, 8, 40, 1)` and four chunks, and `view(B, T, C)` would have to merge `H` with `D`.
        - With `T = 1` the size-1 dimension drops out of the chunk test, `(B, H, 1, D)` has the chunks of a contiguous
          tensor, and the buggy merge succeeds: the bug only shows with `T > 1`, in prefill (预填充).

        ## 4. Exercise `view_strides`: predict whether `view` works, and the strides it gives

        Given a tensor's shape and strides and the requested shape (which may hold one `-1`, inferred as in
        `view`), return the strides of the view, or `None` when `view` would raise (a copy is needed). Refuse a
        request whose element count differs with `ValueError` (PyTorch raises `RuntimeError: shape ... is invalid for
        input of size ...`). For a tensor with no elements any shape of the same (zero) count is a valid view:
        return its contiguous strides. Only dimensions of size other than 1 are compared with PyTorch.
    """)
    lesson.exercise(
        "view_strides",
        r'''
        def view_strides(
            shape: tuple[int, ...], strides: tuple[int, ...], new_shape: tuple[int, ...]
        ) -> tuple[int, ...] | None:
            """Strides of tensor.view(new_shape) for a tensor of this shape and strides, or None if view must fail.

            shape, strides: equal lengths, sizes >= 0, strides >= 0 (in elements)
            new_shape:      sizes >= 0, at most one -1 (inferred from the element count)
            raises ValueError when the lengths differ, there are several -1, or the element counts differ
            """
            if len(shape) != len(strides):
                raise ValueError(f"shape {shape} and strides {strides} have different lengths")
            numel = math.prod(shape)
            new_shape = list(new_shape)
            # TODO: resolve a single -1 from numel (refuse two of them, or a -1 that cannot divide evenly)
            # TODO: refuse a new_shape whose element count differs from numel
            # TODO: no elements: any such view is valid, return contiguous strides of new_shape
            # TODO: group the old dims (last to first, skipping size-1 dims) into chunks (numel, base stride)
            # TODO: fill each chunk from the right of new_shape; a chunk that cannot be filled exactly -> None
            ### BEGIN SOLUTION
            if new_shape.count(-1) > 1:
                raise ValueError(f"only one dimension can be -1, got {tuple(new_shape)}")
            if -1 in new_shape:
                known = math.prod(size for size in new_shape if size != -1)
                if known == 0 or numel % known:
                    raise ValueError(f"cannot infer -1 in {tuple(new_shape)} for {numel} elements")
                new_shape[new_shape.index(-1)] = numel // known
            if math.prod(new_shape) != numel:
                raise ValueError(f"shape {tuple(new_shape)} is invalid for a tensor of {numel} elements")
            if numel == 0:
                return contiguous_strides(tuple(new_shape))
            chunks = []  # [elements, base stride], from the last old dimension to the first
            for size, stride in zip(reversed(shape), reversed(strides)):
                if size == 1:
                    continue  # never moves the pointer: neither joins nor breaks a chunk
                if chunks and stride == chunks[-1][0] * chunks[-1][1]:
                    chunks[-1][0] *= size  # one step here = a full run of the chunk after it
                else:
                    chunks.append([size, stride])
            new_strides = [1] * len(new_shape)
            d = len(new_shape) - 1
            for elements, base in chunks:
                filled = 1
                while filled < elements:
                    new_strides[d] = filled * base
                    filled *= new_shape[d]
                    d -= 1
                if filled != elements:
                    return None  # a new dimension straddles two chunks: view would need a copy
            return tuple(new_strides)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `sliding_windows`: overlapping windows without a copy

        Three places in an LLM stack want overlapping windows of a sequence:

        - **Evaluation of long documents.** A model with a 1024-token context scores a long text by sliding a
          1024-token window with a stride of 512 and counting each token's loss once (Hugging Face's *Perplexity of
          fixed-length models* guide); the overlap gives every scored token at least 512 tokens of context.
        - **Training samples from a token stream.** Pre-training data is one long array of token ids;
          nanoGPT draws `(block_size + 1)`-token slices from it. With overlapping windows made by copying, a
          step of half a window doubles the memory; as a view it costs nothing.
        - **Local attention and short convolutions.** Mistral 7B's sliding-window attention (window 4096) lets
          each query see only the last $W$ keys, and Mamba's causal `conv1d` mixes the last 4 positions.

        For the last dimension of `x` with size $T$, a window size $W$ and a step $S$, there are
        $n = \lfloor (T - W)/S \rfloor + 1$ windows; window $j$ holds positions $jS, \dots, jS + W - 1$. All windows
        can be one view: shape `(..., n, W)`, strides `(..., S · s_{-1}, s_{-1})` where $s_{-1}$ is the old last
        stride (the leading dimensions keep theirs), same storage offset. That is what `Tensor.unfold(-1, W, S)`
        returns; here you build it with `torch.as_strided`, which this exercise is about (so `unfold` is forbidden).

        Two mistakes the checks look for: assuming the last stride is 1 (the input may be a transposed or
        strided view), and starting at the wrong place in the storage (the input may be a slice that starts in the
        middle of its storage: `torch.as_strided` keeps `x`'s offset when you leave the argument out, and an offset
        of 0 reads from the storage's beginning). `as_strided` trusts you: wrong strides read other elements, or memory outside the tensor.
    """)
    lesson.exercise(
        "sliding_windows",
        r'''
        def sliding_windows(x: torch.Tensor, window: int, step: int) -> torch.Tensor:
            """Overlapping windows over the last dimension, as a view (no copy): like x.unfold(-1, window, step).

            x:      (..., T) any dtype, any strides (a slice or a transpose is fine)
            window: W >= 1 and W <= T;  step: S >= 1
            returns (..., n, W) with n = (T - W) // S + 1, sharing x's storage
            raises ValueError for W < 1, S < 1, W > T or a 0-d x
            """
            # TODO: validate x.dim() >= 1, 1 <= window <= T, step >= 1 (ValueError, saying which)
            # TODO: shape (..., n, W); strides: the leading strides, then step * last stride, then last stride
            # TODO: torch.as_strided with x's storage offset
            ### BEGIN SOLUTION
            if x.dim() == 0:
                raise ValueError("x must have at least one dimension")
            length = x.shape[-1]
            if not 1 <= window <= length or step < 1:
                raise ValueError(f"need 1 <= window <= {length} and step >= 1, got window={window}, step={step}")
            n_windows = (length - window) // step + 1
            last_stride = x.stride(-1)
            size = (*x.shape[:-1], n_windows, window)  # (..., n, W)
            stride = (*x.stride()[:-1], step * last_stride, last_stride)
            return torch.as_strided(x, size, stride, x.storage_offset())
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Pictures: where each element lives

        Each cell shows the storage address of the element drawn there. A contiguous `(3, 4)` matrix counts up row by
        row; its transpose reads the same storage column by column (strides `(1, 4)`); the sliding windows of a
        10-token stream (window 4, step 2) read addresses that repeat from one row to the next: that overlap is why
        they cost no memory, and why writing into one window writes into its neighbours.
    """)
    lesson.code(r"""
        def addresses(t):
            # storage address of every element: offset + sum(index * stride)
            grids = torch.meshgrid(*[torch.arange(n) for n in t.shape], indexing="ij")
            return t.storage_offset() + sum(g * s for g, s in zip(grids, t.stride()))

        matrix = torch.arange(12.0).view(3, 4)
        stream = torch.arange(10)
        panels = [("x = arange(12).view(3, 4)\nstrides (4, 1)", matrix), ("x.T\nstrides (1, 4)", matrix.T)]
        try:
            windows = sliding_windows(stream, 4, 2)
            panels.append((f"sliding_windows(arange(10), 4, 2)\nstrides {windows.stride()}", windows))
        except NotImplementedError:
            pass  # not attempted yet: two panels
        fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3))
        for ax, (title, t) in zip(axes, panels):
            grid = addresses(t)
            ax.imshow(grid, cmap="viridis", vmin=0, vmax=12)
            for (i, j), value in zip(torch.cartesian_prod(*[torch.arange(n) for n in grid.shape]).tolist(),
                                     grid.flatten().tolist()):
                ax.text(j, i, str(value), ha="center", va="center", color="white", fontsize=9)
            ax.set_title(title, fontsize=9); ax.set_xlabel("column index"); ax.set_ylabel("row index")
        fig.suptitle("storage address of each element (same storage, different strides)", fontsize=10)
        plt.tight_layout(); plt.show()
        if len(panels) == 3:  # the aliasing trap: an in-place op on overlapping windows
            windows.add_(1)
            print("after sliding_windows(stream, 4, 2).add_(1) the stream is", stream.tolist())
            print("(positions 2..7 sit in two windows each and were incremented twice)")
    """)
    lesson.md(r"""
        ### And the cost of the copies you avoid

        `.contiguous()` after a transpose reads and writes the whole tensor. The cell below times it for the hidden
        state of one 8192-token prompt of a 4096-wide model against the head split, which is metadata only.
        (Measured on this machine's CPU; a GPU is faster per byte but the ratio is the same story: $O(1)$ against
        $O(\text{bytes})$.)
    """)
    lesson.code(r"""
        import time

        hidden = torch.randn(1, 8192, 4096)  # float32: 128 MiB
        heads = hidden.view(1, 8192, 32, 128).transpose(1, 2)  # (1, 32, 8192, 128): a view

        def median_seconds(fn, repeats=5):
            times = []
            for _ in range(repeats):
                start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
            return sorted(times)[len(times) // 2]

        split = median_seconds(lambda: hidden.view(1, 8192, 32, 128).transpose(1, 2))
        copy = median_seconds(lambda: heads.contiguous())
        print(f"head split (view + transpose): {split * 1e6:8.1f} us")
        print(f"heads.contiguous() (a copy):   {copy * 1e6:8.1f} us  ({hidden.numel() * 4 * 2 / copy / 1e9:.1f} GB/s moved)")
        hidden = heads = None  # frees the 128 MiB
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`contiguous_strides`.** One pass from the right keeps a running product: the stride of a dimension is the
        number of elements in everything to its right. `max(size, 1)` reproduces PyTorch's convention for empty
        dimensions (a `(3, 0)` tensor has strides `(1, 1)`). Cost: $O(k)$ integer multiplications.
        *The mistakes*: multiplying before appending (every
        stride one dimension too large, and the last stride not 1), returning the strides in reversed order
        (column-major, Fortran order: what NumPy's `order="F"` gives), and dropping the `max(·, 1)`.

        **`view_strides`.** This is PyTorch's own rule (`computeStride` in ATen's `TensorUtils.cpp`), written as two
        passes. The first pass merges dimensions whose strides chain ($s_d = n_{d+1} s_{d+1}$) into chunks, skipping
        size-1 dimensions; the second hands out the new dimensions from the right, contiguous inside each chunk and
        scaled by the chunk's base stride. A new dimension that would need elements from two chunks is the copy
        case: `None`. *The mistakes*: treating "not contiguous" as "cannot view" (slices and transposes with unit
        dimensions can still be viewed); not skipping size-1 dimensions (this is exactly the $T = 1$ decode case);
        chaining the strides without the base stride (a sliced tensor whose base is not 1).

        **`sliding_windows`.** The windows are one `as_strided` view: the new window index steps $S$ positions, so
        its stride is `step * x.stride(-1)`, and the position inside a window keeps the old last stride. Passing
        `x.storage_offset()` (or leaving the argument out, which keeps it) matters because `as_strided` addresses the
        *storage*, not the tensor: on a slice `x[:, 3:]` with offset 0 every window starts three tokens early. The result costs no memory and no
        time, but it aliases: an in-place write into one window changes its neighbours, and an in-place
        op on the whole view applies twice to every element two windows share (`windows.add_(1)` adds 2 there;
        PyTorch does not refuse it, the demo above shows it), and any op that needs contiguous input silently makes the
        $W/S$-times larger copy. *The mistakes*: last stride assumed to be 1, offset 0, $n$ off by one, a copy (`torch.stack` of slices) instead
        of a view.

        **What production code does.** nanoGPT merges heads with `y.transpose(1, 2).contiguous().view(B, T, C)`;
        Hugging Face's Llama uses `attn_output.transpose(1, 2).contiguous()` then `reshape`. Both pay one copy of the
        attention output per layer, which fused kernels (FlashAttention writes its output directly in
        `(B, T, H, D)` order, and PyTorch's SDPA accepts the transposed layout) avoid. `torch.compile` removes many
        such copies by choosing layouts itself. Mamba's `causal_conv1d` CUDA kernel reads its windows from the
        strided input instead of materialising them, and vLLM's paged KV cache is the opposite extreme: a block table
        of indices instead of a single stride, because a stride cannot describe memory that is not evenly spaced.

        **Where this is used next.** Every head split in
        [p02.attention_mha_gqa](../02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb) and
        [p02.rope](../02_PyTorch_Algorithms/04_RoPE.ipynb) (rotate-half slices the last dimension), the
        KV-head `expand` of grouped-query attention (stride 0), and the strides you pass to every Triton kernel
        in Part 03.
    """)
    lesson.mistakes()
    return lesson
