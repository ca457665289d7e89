"""Source of 03_Triton_Kernels/12_Debugging.ipynb (build with `python -m llm_algo build p03.debugging`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.debugging",
        path="03_Triton_Kernels/12_Debugging.ipynb",
        title_en="Debugging Triton kernels and the memory model",
        title_zh="Triton 内核调试与内存模型",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p03.vector_add", "p03.softmax"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A wrong PyTorch program usually raises. A wrong kernel usually does not: it writes a few bytes past its output
        into another tensor, loses a few increments to a race, or reads an out-of-range token id from whatever memory
        follows the embedding table, and the model's loss is a little worse, or NaN three thousand steps later. This
        lesson is about finding those bugs on purpose, before they find you.

        **You will fix** three kernels that each contain real, common bugs (shown and run in the notebook, so you can
        see the damage): a row-wise max with a bad mask and a bad identity, a histogram with a race, and an embedding
        gather that trusts its token ids and its strides. Each exercise is a corrected kernel plus its launcher.
        **Graded against** `torch.amax`, `torch.bincount` and `torch.index_select` with **exact** equality (a max, a
        count and a copy have no rounding), on inputs that are windows of larger buffers filled with guard values, so
        any read or write outside a tensor shows up in the result or in the guard.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：错误的 PyTorch 程序通常会报错，错误的 kernel 通常不会：越界写入相邻张量、race 丢失计数、用越界的 token id 读取其他内存，结果只是 loss 略差，或几千步后变成 NaN。
        - **方法**：输入取自更大 buffer 的窗口（view），周围填充 guard 值；任何越界读写都会体现在结果或 guard 中。max、计数和拷贝没有舍入，因此与 `torch.amax`、`torch.bincount`、`torch.index_select` 做**精确**比较。
        - **row max**：tail mask 用 `cols < N`（不是 `<=`），masked 通道填 $-\infty$、累加器从 $-\infty$ 开始（全负行不能得到 0），按列 stride 寻址，并处理行尾不满一个块的部分。
        - **histogram**：多个 program 写同一个 bin 时必须用 `tl.atomic_add`，普通 load + store 会丢失计数；值既要检查范围又要检查 tail mask，读取也要带 mask。
        - **embedding gather**：检查 token id 是否在 $[0, V)$；表的行 stride 不一定等于 $D$（更宽权重的 view 或转置）；load 和 store 都要带列 mask。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why kernel bugs are silent

        **Memory is flat.** A tensor is a base address, a shape and strides. `tl.load(ptr + offsets)` reads whatever
        is at those addresses; nothing knows where one tensor ends. On a GPU, PyTorch's caching allocator carves
        small tensors (under 1 MiB) out of shared 2 MiB segments and rounds each size up to a multiple of 512 bytes,
        so the bytes right after your output usually belong to *another live tensor*. Writing past the end there
        raises nothing: the hardware only faults on addresses outside any mapped allocation. When it does fault
        (`CUDA error: an illegal memory access was encountered`) the error is *sticky*: the CUDA context is dead and
        every later call fails, often far from the kernel that caused it.

        **Programs run in no particular order.** A grid of programs is spread over the GPU's streaming multiprocessors
        and runs concurrently. Triton gives no ordering between programs and no barrier across them. Two programs
        that read-modify-write the same address with plain `tl.load` / `tl.store` lose updates. Inside one program a
        `tl.store` of a block whose addresses repeat is a race too: one lane wins and the others are lost.
        **Atomics** (`tl.atomic_add`, `tl.atomic_max`, `tl.atomic_cas`, ...) make each read-modify-write indivisible.
        By default they are `sem="acq_rel"`, `scope="gpu"`: ordered with respect to this program's other memory
        operations and visible to every program on the device.

        **The interpreter is a different machine.** `TRITON_INTERPRET=1` (what this notebook uses on a CPU) runs each
        kernel as NumPy code, one program after another. That makes it the best debugger you have (you can `print`
        inside the kernel, or set a breakpoint), and it also hides some bugs:

        | | interpreter (CPU) | compiled (GPU) |
        | --- | --- | --- |
        | program order | sequential: races *between* programs never show | concurrent: lost updates, different on every run |
        | repeated addresses in one `tl.store` | last lane wins (visible) | one lane wins (visible) |
        | out-of-bounds access | reads/writes host memory next to the tensor (or segfaults) | silent inside an allocation, sticky fault outside |
        | `tl.device_print` | prints the whole block, masked lanes included | one line per element, from every program |
        | `tl.device_assert` | ignored (Triton 3.9's interpreter has no debug mode) | compiled in only with `TRITON_DEBUG=1` |
        | `tl.static_print`, `tl.static_assert` | run in every program of every launch (no compile step) | run once, at compile time |
        | bfloat16, `tl.dot` precision | no bf16; `tl.dot` in exact fp32 | bf16; fp32 `tl.dot` uses TF32 unless `input_precision="ieee"` |
        | `tl.dot` shapes | any size (an `8 × 8 × 8` product runs) | K ≥ 16 for 16-bit inputs (Triton 3.9; older releases: M, N, K ≥ 16), or a compile error |
        | a global read in a kernel | any Python global works | only `tl.constexpr` globals; a plain global is a compile error |

        So: debug the logic in the interpreter, then test on the GPU under **compute-sanitizer**
        (`compute-sanitizer --tool memcheck python script.py` reports every out-of-bounds access of a compiled Triton
        kernel with the offending address; `--tool racecheck` finds shared-memory races), and always grade with
        **guard buffers**: give the kernel a window of a larger buffer filled with values it must never see or
        change, and check them afterwards.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl

        from llm_algo.references.kernels import guarded
    """)
    lesson.md(r"""
        ## 2. The toolbox in one cell

        `tl.static_print` and `tl.static_assert` run when the kernel is traced: they see `tl.constexpr` values and
        types (block sizes, dtypes), never data. `tl.device_print` runs with the data, in every program. The cell
        launches a tiny kernel on two programs (in the interpreter the static print appears once per program, on a GPU once per compilation). On a GPU, set `TRITON_DEBUG=1` before the first launch to make
        `tl.device_assert` active (it costs registers and time, so it is off by default).
    """)
    lesson.code(r"""
        @triton.jit
        def inspect_kernel(x_ptr, n, BLOCK: tl.constexpr):
            tl.static_assert(BLOCK >= 4, "BLOCK must hold at least 4 elements")
            tl.static_print("tracing inspect_kernel with BLOCK =", BLOCK)
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offsets, mask=offsets < n, other=-1.0)
            tl.device_print("x", x)
            tl.device_assert(x < 100.0, "x must stay below 100")

        inspect_kernel[(2,)](torch.arange(6.0, device=DEVICE), 6, BLOCK=4)
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # device_print output arrives when the kernel finishes
    """)
    lesson.md(r"""
        Read the output: the second program's block covers elements 4..7, of which 6 and 7 are masked, and
        `device_print` shows them as the `other=-1.0` fill. Masked lanes still *exist*; the mask only decides which
        loads and stores touch memory. That is why `other` matters.

        ## 3. Exercise `row_max`: bounds and identities

        The kernel below computes the maximum of every row of an `(M, N)` matrix, one program per row, looping over
        the row in blocks of `BLOCK_N`. It has three bugs that all come from the last, partly-filled block. The cell
        runs it on a matrix whose rows are followed by guard columns holding `+inf` (a value no real row contains),
        on rows that are all negative.
    """)
    lesson.code(r"""
        @triton.jit
        def row_max_kernel_buggy(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK_N: tl.constexpr):
            row = tl.program_id(0)
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)                       # bug 1: 0 is not the identity of max
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                x = tl.load(x_ptr + row * stride_xm + cols * stride_xn,
                            mask=cols <= N, other=0.0)                         # bugs 2 and 3: <= N, and other=0
                acc = tl.maximum(acc, x.to(tl.float32))
            tl.store(out_ptr + row, tl.max(acc, axis=0))

        M, N = 3, 10
        storage = torch.full((M, N + 6), float("inf"), device=DEVICE)        # 6 guard columns of +inf per row
        x = storage[:, :N]                                                    # the (3, 10) window, stride (16, 1)
        x.copy_(-1.0 - torch.rand(M, N, device=DEVICE))                      # every value in [-2, -1)
        out = torch.empty(M, device=DEVICE)
        row_max_kernel_buggy[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK_N=8)
        print("buggy kernel:", out.tolist())
        print("torch.amax:  ", x.amax(dim=1).tolist())
    """)
    lesson.md(r"""
        The buggy kernel returns `inf`: `cols <= N` lets column $N$ through, the first guard column. Fix only that
        and it returns 0, because the accumulator starts at 0 and masked lanes are filled with 0, and both beat every
        negative number. The rule: **a mask is `offsets < size`, and `other=` (and every accumulator's start) is the
        identity of the reduction that follows**: $-\infty$ for a max, $0$ for a sum, $1$ for a product.

        Write the corrected kernel and its launcher. The launcher takes any 2-D tensor (pass both strides, never
        assume contiguity) of float32 or float16, returns `(M,)` in the input's dtype, and refuses a block size that is
        not a power of two with a `ValueError` (`tl.arange` needs one; check it on the host, where the message is
        readable).
    """)
    lesson.exercise(
        "row_max",
        r'''
        @triton.jit
        def row_max_kernel(
            # Pointers
            x_ptr, out_ptr,
            # Shapes
            N,
            # Strides
            stride_xm, stride_xn,
            # Meta-parameters
            BLOCK_N: tl.constexpr,
        ):
            """out[row] = max_j x[row, j], one program per row, looping over the row in blocks of BLOCK_N."""
            # TODO: an accumulator that starts at the identity of max
            # TODO: loop over column blocks; mask the tail with the right comparison and fill it with the identity
            # TODO: reduce the accumulator and store one value per row
            ### BEGIN SOLUTION
            row = tl.program_id(0)
            acc = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)  # the identity of max
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"))
                acc = tl.maximum(acc, x.to(tl.float32))  # exact: every fp16 value is a float32 value
            tl.store(out_ptr + row, tl.max(acc, axis=0))  # the store casts to out's dtype (exact again)
            ### END SOLUTION


        def row_max(x: torch.Tensor, block_n: int = 64) -> torch.Tensor:
            """Row-wise max of a 2-D float32/float16 tensor with any strides -> (M,) in x's dtype."""
            # TODO 1: check constraints: 2-D, a power-of-two block_n (ValueError with a message)
            # TODO 2: allocate the output
            # TODO 3: launch one program per row, passing both strides
            ### BEGIN SOLUTION
            if x.dim() != 2:
                raise ValueError(f"row_max needs a 2-D tensor, got shape {tuple(x.shape)}")
            if block_n <= 0 or block_n & (block_n - 1):
                raise ValueError(f"block_n must be a power of two (tl.arange needs one), got {block_n}")
            M, N = x.shape
            out = torch.empty(M, dtype=x.dtype, device=x.device)
            row_max_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK_N=block_n)
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `histogram`: a race, and an address computed from data

        A histogram (counting token ids, expert assignments in a mixture-of-experts router, bucket sizes for a sort)
        is the simplest kernel whose writes collide: many elements fall into the same bin. The version below counts
        with a load, an add and a store. Run it: in a block of 128 elements over 4 bins, every bin appears about 32
        times, but each bin is incremented once per block, because all 32 lanes read the same old count and store
        the same new one. On a GPU programs also overwrite each other's increments; in the interpreter they run one
        after another, so only the collisions inside a block are lost. It has two more bugs: masked-off lanes (whose
        value is the `other=0` fill) take part in the update, so bin 0 is over-counted, and an element outside
        `[0, num_bins)` makes it write outside the histogram.
    """)
    lesson.code(r"""
        @triton.jit
        def histogram_kernel_buggy(x_ptr, hist_ptr, n, num_bins, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            bins = tl.load(x_ptr + offsets, mask=offsets < n, other=0)
            counts = tl.load(hist_ptr + bins)                 # bug 1: read-modify-write is not atomic
            tl.store(hist_ptr + bins, counts + 1)             # bugs 2 and 3: no mask, no range check

        values = torch.randint(0, 4, (300,), dtype=torch.int32, device=DEVICE)
        hist = torch.zeros(4, dtype=torch.int32, device=DEVICE)
        histogram_kernel_buggy[(triton.cdiv(300, 128),)](values, hist, 300, 4, BLOCK=128)
        print("buggy kernel:  ", hist.tolist())
        print("torch.bincount:", torch.bincount(values, minlength=4).tolist())
    """)
    lesson.md(r"""
        Write the corrected kernel and launcher. Values outside `[0, num_bins)` are **ignored** (as `torch.histc`
        ignores values outside its range), so the kernel must mask them out of the update, not just the tail lanes.
        `tl.atomic_add(ptr, value, mask=...)` adds `value` at every unmasked address, and lanes that share an address
        all get counted. The launcher takes a 1-D contiguous int32 or int64 tensor and returns `(num_bins,)` int32
        counts. The counts accumulate into the output, so it must start at zero: `torch.empty` would add to whatever
        the allocator left there.
    """)
    lesson.exercise(
        "histogram",
        r'''
        @triton.jit
        def histogram_kernel(
            # Pointers
            x_ptr, hist_ptr,
            # Shapes
            n, num_bins,
            # Meta-parameters
            BLOCK: tl.constexpr,
        ):
            """hist[b] += number of elements of this program's block equal to b, for 0 <= b < num_bins."""
            # TODO: offsets and the tail mask of my block; load the values
            # TODO: a mask that also drops values outside [0, num_bins)
            # TODO: add 1 to each selected bin atomically
            ### BEGIN SOLUTION
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            in_bounds = offsets < n
            bins = tl.load(x_ptr + offsets, mask=in_bounds, other=0)
            counted = in_bounds & (bins >= 0) & (bins < num_bins)  # the address depends on data: check it
            tl.atomic_add(hist_ptr + bins, 1, mask=counted)  # colliding lanes all count
            ### END SOLUTION


        def histogram(x: torch.Tensor, num_bins: int, block: int = 128) -> torch.Tensor:
            """Counts of each value 0 .. num_bins-1 in a 1-D contiguous int32/int64 tensor (others ignored) -> int32."""
            # TODO 1: check constraints (1-D, contiguous, an integer dtype, num_bins >= 1)
            # TODO 2: allocate a zeroed int32 histogram
            # TODO 3: launch enough programs to cover every element
            ### BEGIN SOLUTION
            if x.dim() != 1 or not x.is_contiguous() or x.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"histogram needs a 1-D contiguous int32/int64 tensor, got {tuple(x.shape)} {x.dtype}")
            if num_bins < 1:
                raise ValueError(f"num_bins must be at least 1, got {num_bins}")
            hist = torch.zeros(num_bins, dtype=torch.int32, device=x.device)  # atomics accumulate into it
            n = x.numel()
            histogram_kernel[(triton.cdiv(n, block),)](x, hist, n, num_bins, BLOCK=block)
            return hist
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `embedding`: trusting the data and the strides

        An embedding lookup copies row `ids[i]` of a `(V, D)` table for every token. Two things can put it outside its
        table. A token id $\ge V$ (a tokenizer with added special tokens and a model whose table was never resized
        is the classic) reads someone else's memory; on a GPU that is either garbage or a sticky illegal-address fault.
        And a table that is a **view** (the first `D` columns of a fused weight, or a slice of a padded vocabulary)
        has a row stride that is not `D`. The version below trusts both, and it also forgets the mask on the last
        column block when it stores.
    """)
    lesson.code(r"""
        @triton.jit
        def embedding_kernel_buggy(ids_ptr, table_ptr, out_ptr, V, D, stride_tv, stride_td, stride_om,
                                   BLOCK_D: tl.constexpr):
            token = tl.program_id(0)
            cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
            row = tl.load(ids_ptr + token)                                   # bug 1: never checked against V
            values = tl.load(table_ptr + row * D + cols * stride_td,         # bug 2: row stride assumed to be D
                             mask=cols < D)
            tl.store(out_ptr + token * stride_om + cols, values)            # bug 3: no mask on the store

        V, D = 5, 6
        storage = torch.full((V + 1, D + 2), float("nan"), device=DEVICE)    # a view: row stride 8, not 6
        table = storage[:V, :D]
        table.copy_(torch.arange(V * D, dtype=torch.float32, device=DEVICE).view(V, D))
        ids = torch.tensor([4, 0, 2], device=DEVICE)
        out_storage, out = guarded((3, D), (1, 4), device=DEVICE)           # NaN guard around the output
        embedding_kernel_buggy[(3, 2)](ids, table, out, V, D, table.stride(0), table.stride(1), out.stride(0),
                                       BLOCK_D=4)
        print("buggy rows:\n", out)
        print("expected:\n", table[ids])
        print("guard elements overwritten:", int((~out_storage.isnan()).sum() - out.numel()))

        # Draw it: which element of the output buffer holds what (0 guard kept, 1 right, 2 wrong, 3 guard overwritten)
        status = torch.zeros(out_storage.shape)
        inside = torch.zeros(out_storage.shape, dtype=torch.bool)
        inside[:3, :D] = True
        right = torch.zeros_like(inside)
        right[:3, :D] = (out == table[ids]).cpu()
        status[inside] = 2.0
        status[right] = 1.0
        status[~inside & ~out_storage.isnan().cpu()] = 3.0
        fig, ax = plt.subplots(figsize=(5, 2.2))
        ax.imshow(status, cmap=plt.matplotlib.colors.ListedColormap(["lightgrey", "tab:blue", "tab:orange", "tab:red"]),
                  vmin=-0.5, vmax=3.5)
        ax.set_xticks(range(out_storage.shape[1])); ax.set_yticks(range(out_storage.shape[0]))
        ax.set_xlabel("column of the output buffer (D = 6, then 4 guard columns)"); ax.set_ylabel("row")
        ax.set_title("blue: right, orange: wrong value, red: guard overwritten, grey: guard kept", fontsize=8)
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        In the picture, rows 0 and 2 hold the wrong numbers (orange): with a row stride of 8, `row * D` lands in the
        middle of another row. Row 1 is right only because its id is 0. Columns 6 and 7 of every row (red) were
        overwritten by the unmasked store of the second column block. That is another tensor's memory in a real program.

        Write the corrected kernel and launcher: one program per (token, block of `BLOCK_D` columns); every table
        address from `stride_tv` and `stride_td`; masked loads *and* stores. The launcher refuses ids outside
        `[0, V)` on the host with an `IndexError` (that costs one device-to-host sync; PyTorch's `F.embedding` makes
        the same check inside its kernel and raises a device-side assert), and the kernel also states the
        precondition with `tl.device_assert`, which `TRITON_DEBUG=1` turns into a real check on a GPU. `ids` is 1-D
        int32 or int64; the output is `(n, D)`, contiguous, in the table's dtype.
    """)
    lesson.exercise(
        "embedding",
        r'''
        @triton.jit
        def embedding_kernel(
            # Pointers
            ids_ptr, table_ptr, out_ptr,
            # Shapes
            V, D,
            # Strides
            stride_tv, stride_td, stride_om,
            # Meta-parameters
            BLOCK_D: tl.constexpr,
        ):
            """out[token, cols] = table[ids[token], cols] for this program's block of columns."""
            # TODO: my token and my block of columns
            # TODO: load the token's id; state 0 <= id < V with tl.device_assert
            # TODO: masked load of the table row through both strides, masked store into out
            ### BEGIN SOLUTION
            token = tl.program_id(0)
            cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
            mask = cols < D
            row = tl.load(ids_ptr + token).to(tl.int64)  # int64: row * stride_tv can exceed 2**31 for big tables
            tl.device_assert((row >= 0) & (row < V), "token id out of range")
            values = tl.load(table_ptr + row * stride_tv + cols * stride_td, mask=mask, other=0.0)
            tl.store(out_ptr + token * stride_om + cols, values, mask=mask)
            ### END SOLUTION


        def embedding(ids: torch.Tensor, table: torch.Tensor, block_d: int = 64) -> torch.Tensor:
            """table[ids] for 1-D int32/int64 ids and a 2-D table with any strides -> (n, D) contiguous."""
            # TODO 1: check constraints: shapes, an integer dtype, every id in [0, V) (IndexError)
            # TODO 2: ids contiguous (the kernel reads ids_ptr + token); allocate a contiguous output
            # TODO 3: a 2-D grid (tokens, column blocks); pass the table's two strides and the output's row stride
            ### BEGIN SOLUTION
            if ids.dim() != 1 or table.dim() != 2 or ids.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"embedding needs 1-D int ids and a 2-D table, got {tuple(ids.shape)} {ids.dtype}, "
                                 f"{tuple(table.shape)}")
            V, D = table.shape
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
                raise IndexError(f"token ids must be in [0, {V}), got min {int(ids.min())}, max {int(ids.max())}")
            ids = ids.contiguous()  # the kernel reads ids_ptr + token (unit stride)
            out = torch.empty((ids.numel(), D), dtype=table.dtype, device=table.device)
            grid = (ids.numel(), triton.cdiv(D, block_d))
            embedding_kernel[grid](ids, table, out, V, D, table.stride(0), table.stride(1), out.stride(0),
                                   BLOCK_D=block_d)
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. The cost of getting it right (GPU only)

        Correctness here costs almost nothing in speed, except in one place. The masks and the $-\infty$ fill are
        free (a comparison and a select per element, in a memory-bound kernel). The host-side id check reads `ids`
        once more and synchronises; in a training step that is noise, in a decoding loop of one token per step it is
        a visible stall, which is why serving engines validate ids once, in the tokenizer, and compile the kernels
        without it. Atomics are the real cost: every increment of the same bin is serialised in the L2 cache, so a
        histogram over few bins runs far below the memory bandwidth. Production kernels first count in a private
        per-program histogram (`tl.histogram` in registers, or shared memory) and then issue one atomic per bin per
        program.

        The cell below times your three kernels against PyTorch (`torch.amax`, `torch.bincount`, `F.embedding`) with
        `triton.testing.do_bench` and plots the achieved bandwidth (bytes the kernel must read and write, divided by
        the median time). `python -m llm_algo bench p03.debugging` prints the same table with a device-to-device copy
        and `torch.compile` next to it.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            x = torch.randn(16384, 8192, device=DEVICE, dtype=torch.float16)
            values = torch.randint(0, 256, (2**26,), device=DEVICE, dtype=torch.int32)
            table = torch.randn(128256, 4096, device=DEVICE, dtype=torch.float16)
            ids = torch.randint(0, 128256, (16384,), device=DEVICE)
            cases = {  # name: (yours, PyTorch's, bytes moved)
                "row_max 16384x8192 fp16": (lambda: row_max(x, 1024), lambda: x.amax(dim=1), x.numel() * 2),
                "histogram 2^26 ids, 256 bins": (lambda: histogram(values, 256, 1024),
                                                 lambda: torch.bincount(values, minlength=256), values.numel() * 4),
                "embedding 16384 tokens x 4096": (lambda: embedding(ids, table, 1024),
                                                  lambda: torch.nn.functional.embedding(ids, table),
                                                  2 * 16384 * 4096 * 2),
            }
            results = {}
            try:
                for name, (mine, theirs, moved) in cases.items():
                    results[name] = [moved * 1e-9 / (triton.testing.do_bench(fn, return_mode="median") * 1e-3)
                                     for fn in (mine, theirs)]
            except NotImplementedError:
                print("Implement the three exercises first: this benchmark times your kernels.")
            if results:
                fig, ax = plt.subplots(figsize=(7, 3))
                positions = torch.arange(len(results))
                ax.bar(positions - 0.2, [r[0] for r in results.values()], 0.4, label="yours (Triton)")
                ax.bar(positions + 0.2, [r[1] for r in results.values()], 0.4, label="PyTorch")
                ax.set_xticks(positions.tolist(), list(results), fontsize=8)
                ax.set_ylabel("GB/s"); ax.legend(); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of `python -m llm_algo bench p03.debugging` with the reference solutions on an
        NVIDIA H200, Triton 3.6, torch 2.11; your GPU will differ). In GB/s, next to a device-to-device copy at
        4145 GB/s in the same run:

        | | yours | PyTorch eager | `torch.compile` |
        | --- | --- | --- | --- |
        | `row_max` 16384 × 8192 fp16 | 3699 (89% of copy) | `torch.amax` 1766 | 3733 |
        | `histogram` $2^{26}$ int32, 256 bins | 15.5 (17.3 ms) | `torch.bincount` 467 (0.57 ms) | — |
        | `embedding` 16384 ids × 4096 fp16 | 1857 (45%) | `F.embedding` 3709 | 3763 |

        `row_max` is a pure streaming read: one program per row and `BLOCK_N = 1024` give 8 loop iterations per
        program and 16384 programs, enough to hide memory latency, and it sits near the copy, level with
        `torch.compile` and twice eager `torch.amax`. The histogram is where correctness costs speed: $2^{26}$ atomic
        increments onto 256 hot addresses serialise in L2 (about 3.9 billion per second here), and the corrected
        kernel is 30× slower than `torch.bincount`. A production histogram counts each program's block privately first
        (`tl.histogram(bins, num_bins)` in registers, or shared memory) and then merges once, one `tl.atomic_add` of a
        `(num_bins,)` vector per program; that version is not measured here. The embedding gather is a stream too and
        `F.embedding` runs it near the copy, but the fixed kernel reaches only half of PyTorch's speed, about 0.07 ms
        more per call. One difference is certain: your timed call includes the launcher's host check (`ids.min()` and
        `ids.max()`, two small kernels and two device-to-host syncs), which `F.embedding` does inside its kernel; how
        much of the gap that is, and how much is the kernel itself, is unexplored.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`row_max_kernel`.** The accumulator starts at $-\infty$ and masked lanes are filled with $-\infty$, so
        neither can win the max. `cols < N` is the tail mask; `<=` admits column $N$, which is the first column of the
        next row in a contiguous matrix (so the bug even gives plausible numbers) and a guard column here. Loading
        through `stride_xn` makes `x.t()` work with no copy. Upcasting to float32 and storing back is exact for a max.
        The launcher checks the power of two on the host: the same mistake inside the kernel is a compile error
        from deep inside Triton.

        **`histogram_kernel`.** `tl.atomic_add` turns each lane's increment into one indivisible read-modify-write in
        L2, so 32 lanes hitting bin 3 add 32. The mask carries two conditions: the tail (`offsets < n`) and the
        range of the *value*, because the address `hist_ptr + bins` comes from data. Every address a kernel
        computes from data (ids, indices, bins, expert numbers) needs a range check or a documented precondition.

        **`embedding_kernel`.** The id is widened to int64 before it is multiplied by the row stride: once $V \cdot D$
        passes $2^{31}$ (a 256k vocabulary and a 16384-wide table), so can `row * stride_tv`, and an int32 product
        wraps to a negative address. `tl.device_assert` documents the precondition and checks it under `TRITON_DEBUG=1`; the host check
        in the launcher is what protects memory in normal runs. The store is masked like the load.

        **The usual mistakes, and why they are wrong**:
        - `row_max`: `cols <= N` (reads the guard), `other=0` or an accumulator starting at 0 (all-negative rows give
          0), ignoring the column stride (wrong on transposed inputs), a loop over whole blocks only (the tail of every
          row is never read).
        - `histogram`: load + store instead of an atomic (lost counts whenever a block repeats a bin), the atomic
          without the tail mask (bin 0 over-counted by the fill value), no range check on the value (writes into the
          guard before or after the histogram).
        - `embedding`: row stride assumed to be `D` (wrong on views), no mask on the store (writes into the guard
          after each output row), no host check of the ids (reads outside the table), strided ids (a column of a
          bigger tensor) handed to a kernel that reads them with unit stride.

        **How production code does it.** PyTorch's `F.embedding` checks ids inside its CUDA kernel with
        `CUDA_KERNEL_ASSERT`, which is why a bad id appears as "device-side assert triggered" (rerun with
        `CUDA_LAUNCH_BLOCKING=1` to see which kernel). vLLM's and Megatron's vocabulary-parallel embeddings mask ids
        outside the local shard to zero instead of refusing them (each GPU holds a slice of the vocabulary, so
        out-of-shard ids are expected) and all-reduce the result. `torch.bincount` and `torch.histc` on CUDA build
        per-block histograms in shared memory and merge them with atomics. The MoE routers of Megatron and vLLM count
        tokens per expert the same way before they permute tokens. For a kernel that gives wrong numbers, the order that
        works: `TRITON_INTERPRET=1` with prints or a breakpoint to fix the logic, guard buffers to prove the bounds,
        then `compute-sanitizer` on the GPU for what only the compiled kernel does.
    """)
    lesson.mistakes()
    return lesson
