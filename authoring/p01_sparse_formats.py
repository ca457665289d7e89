"""Source of 01_Hardware_Math_Systems/14_Sparse_Formats.ipynb (build with `python -m llm_algo build p01.sparse_formats`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.sparse_formats",
        path="01_Hardware_Math_Systems/14_Sparse_Formats.ipynb",
        title_en="Sparse computation: COO, CSR and 2:4",
        title_zh="稀疏计算：COO、CSR 与 2:4 结构化稀疏",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.roofline", "p01.number_formats"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - COO（坐标格式）存 $(行, 列, 值)$ 三元组；合并 (coalesce) = 按 (行, 列) 排序并把重复坐标的值相加，与
          `torch.sparse_coo_tensor(...).coalesce()` 一致（和为 0 的项保留）。
        - CSR（压缩稀疏行）把行下标压缩成长度 $M+1$ 的行指针 `crow`：第 $i$ 行的非零元在 `col[crow[i]:crow[i+1]]`。
        - SpMV/SpMM：$y_i = \sum_{p=\text{crow}_i}^{\text{crow}_{i+1}-1} v_p\, x_{\text{col}_p}$，计算量 $2\,\text{nnz}\,N$，
          与 $M \times K$ 无关；低精度时用 fp32 累加。
        - 存储：稠密 $MKs$；CSR $(M+1)b + \text{nnz}(b + s)$；fp16 值 + int32 下标时密度低于约 1/3 才省内存，
          50% 非结构化稀疏反而更大。
        - 2:4 结构化稀疏：每 4 个连续输入元素保留 $|w|$ 最大的 2 个；值减半 + 每个保留值 2 位索引，
          fp16 下为稠密的 56%；NVIDIA 稀疏张量核 (Sparse Tensor Core) 的峰值算力翻倍。
        {易错点}

        Half of the weights of a 175B-parameter GPT can be set to zero after training with almost no loss in
        perplexity (SparseGPT: Frantar and Alistarh, 2023, arXiv:2301.00774, at 50% unstructured sparsity on
        OPT-175B). Does that halve the memory, or the time? Stored as a sparse matrix in CSR with FP16 values and
        int32 column indices, a 50%-sparse matrix takes $0.5 \times (2 + 4) = 3$ bytes per entry: *more* than the
        2 bytes of the dense matrix, and the irregular reads make it slower too. What does help is structure: in
        NVIDIA's 2:4 pattern every group of four weights keeps two, the format costs 1.125 bytes per entry in FP16,
        and the sparse tensor cores of Ampere and Hopper run it at twice the dense math rate (NVIDIA A100 Tensor
        Core GPU Architecture whitepaper, 2020; the H100 SXM datasheet lists 1,979 TFLOP/s FP16 "with sparsity"
        against 989 dense; Mishra et al., 2021, arXiv:2104.08378).

        **You will implement** COO coalescing (sort, sum duplicates), CSR from a dense matrix, SpMV and SpMM from
        CSR, the 2:4 mask, and the storage arithmetic of the four formats. **Graded against**
        `torch.sparse_coo_tensor(...).coalesce()`, `Tensor.to_sparse_csr()` (its `crow_indices`, `col_indices`,
        `values`), dense `torch.matmul` in float64 (and `gradcheck`), a CSR matrix with $10^{12}$ entries that no
        dense copy could hold, `torch.ao.pruning.WeightNormSparsifier` and a brute force over the six 2:4 patterns of
        each group, and the `nbytes` of real sparse tensors.
    """
    )
    lesson.md(r"""
        ## 1. COO: a list of coordinates

        A matrix $A \in \mathbb{R}^{M \times K}$ with $\text{nnz}$ non-zero entries, in COOrdinate format, is
        `indices` of shape $(2, \text{nnz})$ (row of each entry, column of each entry) and `values` of shape
        $(\text{nnz},)$. Anything can produce it (gradients of an embedding table, the token-to-expert assignment of
        an MoE router, edges of a graph), and what it produces is usually unsorted and may repeat a coordinate: the
        same token id twice in a batch gives two gradient rows for one embedding row. Before anyone can use it, it is
        **coalesced**: sorted by row, then by column inside a row (row-major order), and the values of repeated
        coordinates added together. PyTorch's `torch.sparse_coo_tensor(indices, values, shape).coalesce()` does
        exactly that, and keeps an entry whose duplicates sum to zero (it never looks at the values).

        A coordinate $(r, c)$ of an $M \times K$ matrix has the row-major position $rK + c$, a single integer, so
        sorting coordinates is sorting integers, and repeated coordinates become runs of equal integers.
    """)
    lesson.setup(r"""
        import time

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 2. Exercise `coalesce`

        Return `(indices, values)` coalesced: `indices` int64 of shape $(2, n)$ in row-major order without
        repeats, `values` of shape $(n,)$ and the input's dtype, each the sum of the values given for its
        coordinate. Refuse with a `ValueError`: `indices` that is not $(2, \text{nnz})$ of an integer dtype,
        `values` that is not 1-D of length $\text{nnz}$, a `shape` that is not two positive ints, and coordinates
        outside the shape.
    """)
    lesson.exercise(
        "coalesce",
        r'''
        def coalesce(indices: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
            """COO (2, nnz) indices and (nnz,) values, maybe unsorted and repeated -> sorted row-major, repeats summed."""
            # TODO: validate (ValueError)
            # TODO: one integer key per coordinate, sorted; runs of equal keys are one entry, their values summed
            ### BEGIN SOLUTION
            if len(shape) != 2 or min(shape) < 1:
                raise ValueError(f"shape must be two positive sizes, got {shape}")
            if indices.dim() != 2 or indices.shape[0] != 2 or indices.dtype.is_floating_point or indices.dtype == torch.bool:
                raise ValueError(f"indices must be (2, nnz) integers, got {tuple(indices.shape)} {indices.dtype}")
            if values.dim() != 1 or values.shape[0] != indices.shape[1]:
                raise ValueError(f"values must be ({indices.shape[1]},), got {tuple(values.shape)}")
            rows, cols = indices.long()
            if indices.numel() and (rows.min() < 0 or cols.min() < 0 or rows.max() >= shape[0] or cols.max() >= shape[1]):
                raise ValueError(f"a coordinate lies outside the shape {shape}")
            keys = rows * shape[1] + cols  # row-major position: sorting keys sorts by row, then column
            unique_keys, run = torch.unique(keys, sorted=True, return_inverse=True)
            summed = torch.zeros(unique_keys.shape[0], dtype=values.dtype).index_add_(0, run, values)
            return torch.stack([unique_keys // shape[1], unique_keys % shape[1]]), summed
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. CSR: compress the rows

        After coalescing, the row indices are sorted, so they repeat in runs: $0, 0, 0, 1, 3, 3, \dots$. Compressed
        Sparse Row (CSR) stores, instead of one row index per entry, one *pointer* per row: `crow` of length $M + 1$
        with `crow[0] = 0` and `crow[i + 1] - crow[i]` the number of entries in row $i$ (a cumulative sum of the row
        counts). Row $i$'s entries are `col[crow[i]:crow[i+1]]` and `values[crow[i]:crow[i+1]]`.

        $$
        A = \begin{pmatrix} 0 & 5 & 0 & 0 \\ 0 & 0 & 0 & 0 \\ 7 & 0 & 0 & 2 \end{pmatrix}
        \quad\Rightarrow\quad \texttt{crow} = [0, 1, 1, 3],\ \texttt{col} = [1, 0, 3],\ \texttt{values} = [5, 7, 2].
        $$

        It is what cuSPARSE, MKL, SciPy (`csr_matrix`) and PyTorch (`to_sparse_csr`) compute with: a row's entries are
        contiguous, so one thread (or one warp) per row reads them in a stream.
    """)
    lesson.md(r"""
        ## 4. Exercise `dense_to_csr`

        Return `(crow, col, values)` of a 2-D dense tensor: `crow` int64 $(M + 1,)$, `col` int64 $(\text{nnz},)$,
        `values` $(\text{nnz},)$ in the tensor's dtype, entries in row-major order, exactly the non-zero entries (a
        NaN is not zero). Refuse a tensor that is not 2-D with a `ValueError`.
    """)
    lesson.exercise(
        "dense_to_csr",
        r'''
        def dense_to_csr(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """(M, K) dense -> crow (M+1,) int64, col (nnz,) int64, values (nnz,) in row-major order."""
            # TODO: validate (ValueError)
            # TODO: the coordinates of the non-zero entries, row-major; crow = [0, cumulative row counts]
            ### BEGIN SOLUTION
            if dense.dim() != 2:
                raise ValueError(f"a CSR matrix is 2-D, got shape {tuple(dense.shape)}")
            rows, cols = (dense != 0).nonzero(as_tuple=True)  # nonzero() walks row-major
            counts = torch.bincount(rows, minlength=dense.shape[0])  # (M,) entries per row
            crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (M + 1,)
            return crow, cols, dense[rows, cols]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. SpMV and SpMM from CSR

        $y = A x$ with $A$ in CSR and $x$ dense, $(K,)$ or $(K, N)$:

        $$
        y_{i,:} = \sum_{p = \texttt{crow}_i}^{\texttt{crow}_{i+1} - 1} \texttt{values}_p \; x_{\texttt{col}_p,\,:}
        $$

        $2\,\text{nnz}\,N$ FLOPs, whatever $M \times K$ is. In PyTorch without a loop over rows: give every stored
        entry its row (`torch.repeat_interleave(torch.arange(M), crow.diff())`, shape $(\text{nnz},)$), multiply each
        value by the row of $x$ it meets (`x[col]`, $(\text{nnz}, N)$) and add the products into their rows with
        `index_add_` (a *segment sum*). Accumulate in float32 when the inputs are 16-bit, as a GPU kernel does in its
        registers: a row with 500 entries summed in bfloat16 loses digits at every addition.

        Never build the dense matrix: the checks multiply a $10^6 \times 10^6$ CSR matrix with 64 entries, whose
        dense copy would take 4 TB.
    """)
    lesson.md(r"""
        ## 6. Exercise `csr_matmul`

        $y = A x$ for $A$ given as `(crow, col, values)` and `rhs` of shape $(K,)$ or $(K, N)$; the result has shape
        $(M,)$ or $(M, N)$ and the dtype of `values`, and must be differentiable with respect to `values` and `rhs`.
        Refuse with a `ValueError`: `rhs` that is not 1-D or 2-D, a dtype different from `values`', `crow` that is
        not 1-D, does not start at 0, decreases or does not end at $\text{nnz}$, `col` and `values` of different
        lengths, and a column outside `rhs`.
    """)
    lesson.exercise(
        "csr_matmul",
        r'''
        def csr_matmul(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
            """(M, K) CSR matrix times rhs (K,) or (K, N) -> (M,) or (M, N) in values.dtype, fp32 accumulation."""
            # TODO: validate (ValueError)
            # TODO: the row of every stored entry; every product values[p] * rhs[col[p]]; a segment sum per row
            ### BEGIN SOLUTION
            if rhs.dim() not in (1, 2) or rhs.dtype != values.dtype:
                raise ValueError(f"rhs must be 1-D or 2-D of dtype {values.dtype}, got {tuple(rhs.shape)} {rhs.dtype}")
            nnz = values.shape[0]
            if values.dim() != 1 or col.shape != (nnz,) or crow.dim() != 1 or crow.numel() < 1:
                raise ValueError("crow must be 1-D, col and values 1-D of the same length")
            counts = crow.diff()
            if crow[0] != 0 or crow[-1] != nnz or (counts < 0).any():
                raise ValueError(f"crow must rise from 0 to nnz={nnz}, got {crow.tolist()[:10]}")
            if nnz and (col.min() < 0 or col.max() >= rhs.shape[0]):
                raise ValueError(f"a column index lies outside rhs's {rhs.shape[0]} rows")
            rows = crow.numel() - 1
            row_of = torch.repeat_interleave(torch.arange(rows), counts)  # (nnz,) the row of each entry
            x = rhs if rhs.dim() == 2 else rhs[:, None]  # (K, N)
            accumulate = torch.promote_types(values.dtype, torch.float32)
            products = values.to(accumulate)[:, None] * x[col].to(accumulate)  # (nnz, N)
            out = torch.zeros(rows, x.shape[1], dtype=accumulate).index_add(0, row_of, products)  # (M, N)
            out = out.to(values.dtype)
            return out if rhs.dim() == 2 else out[:, 0]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### When does CSR pay off on a CPU? Measured here

        `torch.sparse.mm` on a CSR matrix against a dense `@`, $1024 \times 1024$ times $1024 \times 64$ in float32, on
        one thread (the best of 9 runs, so that a busy machine does not blur the curves), across densities. The FLOP
        count shrinks with the density; the time shrinks less, because every stored value costs an index read and a
        gather of a row of $x$ that may not be in cache.
    """)
    lesson.code(r"""
        def best_seconds(fn, repeats=9):
            times = []
            for _ in range(repeats):
                start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
            return min(times)


        torch.manual_seed(0)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        x = torch.randn(1024, 64)
        densities = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]
        dense_s, sparse_s = [], []
        for density in densities:
            a = torch.randn(1024, 1024) * (torch.rand(1024, 1024) < density)
            csr = a.to_sparse_csr()
            dense_s.append(best_seconds(lambda: a @ x)); sparse_s.append(best_seconds(lambda: torch.sparse.mm(csr, x)))
        torch.set_num_threads(threads)
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.loglog(densities, [t * 1e3 for t in dense_s], "o-", label="dense @ (all 1024 x 1024)")
        ax.loglog(densities, [t * 1e3 for t in sparse_s], "s-", label="torch.sparse.mm, CSR")
        ax.set_xlabel("density (nnz / M K)"); ax.set_ylabel("ms, best of 9"); ax.legend()
        ax.set_title("SpMM vs dense on this CPU, one thread")
        plt.tight_layout(); plt.show()
        for density, d, s in zip(densities, dense_s, sparse_s):
            print(f"density {density:6.3f}: dense {d * 1e3:7.3f} ms, CSR {s * 1e3:7.3f} ms, speed-up {d / s:6.1f}x")
    """)
    lesson.md(r"""
        Read your own numbers. On the machine this lesson was written on, CSR was about 18× faster at 1% density,
        still ahead at 10% (by 1.3× to 2.6× from run to run), and slower at 30%: the break-even sits far below the 50%
        of a pruned LLM. GPU libraries tell the same story: cuSPARSE's SpMM beats cuBLAS
        only at high sparsity, which is why LLM pruning targets a *structured* pattern the hardware knows.

        ## 7. 2:4 structured sparsity

        In each group of 4 consecutive weights along the **input** dimension (the dimension a matrix multiply sums
        over: the last dimension of an `nn.Linear` weight of shape $(\text{out}, \text{in})$), keep the two with the
        largest magnitude $|w|$ and zero the other two. Each output is then a sum over $\text{in}/2$ products whose
        positions the hardware reads from a 2-bit index per kept value, so the tensor core skips half the
        multiply-adds. On a tie, keep the lower position (what a stable sort does). The usual recipe (Mishra et al.,
        2021; NVIDIA's ASP, `apex.contrib.sparsity`) is: train dense, take this mask, fine-tune with the mask fixed;
        one-shot methods (SparseGPT, Wanda) choose the mask with a better score than $|w|$ and adjust the rest.
    """)
    lesson.md(r"""
        ## 8. Exercise `mask_2_4`

        Return a bool tensor of the weight's shape, `True` where the weight is kept. Refuse with a `ValueError` a
        weight that is not 2-D, not floating point, or whose last dimension is not a multiple of 4.
    """)
    lesson.exercise(
        "mask_2_4",
        r'''
        def mask_2_4(weight: torch.Tensor) -> torch.Tensor:
            """(out, in) weight -> (out, in) bool mask keeping the 2 largest |w| of each 4 along in (ties: lower index)."""
            # TODO: validate (ValueError)
            # TODO: view as (out, in/4, 4) groups, rank by |w| (stable), keep the top 2 of each group
            ### BEGIN SOLUTION
            if weight.dim() != 2 or not weight.is_floating_point() or weight.shape[1] % 4:
                raise ValueError(f"need a 2-D floating weight with in % 4 == 0, got {tuple(weight.shape)} {weight.dtype}")
            rows, cols = weight.shape
            groups = weight.abs().reshape(rows, cols // 4, 4)  # (out, in/4, 4)
            order = torch.argsort(groups, dim=-1, descending=True, stable=True)  # ties keep the lower index first
            keep = torch.zeros(groups.shape, dtype=torch.bool).scatter_(-1, order[..., :2], True)
            return keep.reshape(rows, cols)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 9. The storage arithmetic

        With $s$ bytes per value and $b$ bytes per index, an $M \times K$ matrix with $\text{nnz}$ stored entries takes

        | format | bytes |
        | --- | --- |
        | dense | $M K s$ |
        | COO | $\text{nnz}\,(2b + s)$ |
        | CSR | $(M + 1)\,b + \text{nnz}\,(b + s)$ |
        | 2:4 | $\frac{MK}{2}\, s + \frac{MK}{2} \cdot \frac{2}{8}$ (half the values, a 2-bit position per kept value) |

        CSR beats dense when $\text{nnz}(b + s) + (M+1) b < MKs$: for large matrices, at densities below
        $s / (b + s)$: 1/3 for FP16 values with int32 indices, 1/5 with int64, 1/2 for FP32 with int32. The 2:4
        format needs no index per value, only 2 bits: $\frac{s}{2} + \frac{1}{8}$ bytes per entry, 56% of dense in FP16
        and 62.5% in FP8 ($s = 1$). (cuSPARSELt's exact metadata layout interleaves those bits in blocks, the same 2
        bits per kept value.)
    """)
    lesson.md(r"""
        ## 10. Exercise `storage_bytes`

        The bytes of an $M \times K$ matrix stored as `fmt` in `("dense", "coo", "csr", "2:4")`, by the table.
        Refuse with a `ValueError`: another format, sizes below 1, `nnz` outside $[0, MK]$, and for `"2:4"` a $K$ that is not a
        multiple of 4 or an `nnz` other than $MK/2$.
    """)
    lesson.exercise(
        "storage_bytes",
        r'''
        def storage_bytes(fmt: str, rows: int, cols: int, nnz: int, value_bytes: int, index_bytes: int) -> float:
            """Bytes of a rows x cols matrix with nnz stored values in fmt ("dense", "coo", "csr", "2:4")."""
            # TODO: validate (ValueError)
            # TODO: the four rows of the table
            ### BEGIN SOLUTION
            if fmt not in ("dense", "coo", "csr", "2:4"):
                raise ValueError(f"unknown format {fmt!r}")
            if min(rows, cols, value_bytes, index_bytes) < 1 or not 0 <= nnz <= rows * cols:
                raise ValueError(f"need positive sizes and 0 <= nnz <= {rows * cols}, got nnz={nnz}")
            if fmt == "2:4" and (cols % 4 or 2 * nnz != rows * cols):
                raise ValueError("2:4 needs cols % 4 == 0 and exactly half the entries stored")
            if fmt == "dense":
                return rows * cols * value_bytes
            if fmt == "coo":
                return nnz * (2 * index_bytes + value_bytes)  # a row and a column index per value
            if fmt == "csr":
                return (rows + 1) * index_bytes + nnz * (index_bytes + value_bytes)
            return nnz * value_bytes + nnz * 2 / 8  # 2 bits of position per kept value
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Bytes per entry against density, FP16 values and int32 indices
    """)
    lesson.code(r"""
        rows, cols = 4096, 4096
        densities = [i / 100 for i in range(1, 101)]
        try:
            curves = {fmt: [storage_bytes(fmt, rows, cols, round(d * rows * cols), 2, 4) / (rows * cols) for d in densities]
                      for fmt in ("dense", "coo", "csr")}
            two_four = storage_bytes("2:4", rows, cols, rows * cols // 2, 2, 4) / (rows * cols)
            who = "yours"
        except NotImplementedError:
            curves = {"dense": [2.0] * len(densities), "coo": [d * 10 for d in densities],
                      "csr": [d * 6 + 4 * (rows + 1) / (rows * cols) for d in densities]}
            two_four, who = 1.125, "formula"
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        for fmt, curve in curves.items():
            ax.plot(densities, curve, label=fmt)
        ax.plot([0.5], [two_four], "r*", markersize=12, label=f"2:4 ({two_four:.3f} B)")
        ax.axvline(1 / 3, color="gray", ls=":", lw=1)
        ax.text(1 / 3, 4.5, " CSR = dense at 1/3", fontsize=8)
        ax.set_xlabel("density"); ax.set_ylabel("bytes per matrix entry"); ax.set_ylim(0, 6)
        ax.set_title(f"4096 x 4096, FP16 values, int32 indices ({who})"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 11. Reading the solutions

        **`coalesce`.** One integer key per coordinate, $rK + c$, turns a two-level sort into one sort, and
        `torch.unique(..., return_inverse=True)` hands back, for every input entry, the position of its run: the
        target of an `index_add_`. PyTorch's CPU `coalesce` does the same (it builds the same linear index). The
        usual mistakes: *sorting by row only* (columns inside a row stay in input order), *keeping the
        first duplicate* instead of the sum, *column-major keys* $cM + r$. Keys overflow int64 only past $2^{63}$
        entries; a 32-bit key overflows for a $65536 \times 65536$ matrix, which is why PyTorch's indices are int64.

        **`dense_to_csr`.** `nonzero` walks row-major, `bincount` counts entries per row (including empty rows, with
        `minlength`), and the cumulative sum with a 0 in front is `crow`. The mistakes: *`crow` without its leading 0*
        ($M$ entries, off by one row), *counts instead of their cumulative sum*, *a transposed walk* (column-major).

        **`csr_matmul`.** `repeat_interleave(arange(M), crow.diff())` expands the row pointers back into row
        indices, the only step where CSR differs from COO; the rest is a gather (`x[col]`), a multiply and a
        scatter-add. Work and memory are $O(\text{nnz}\,N + M)$, never $O(MK)$. The mistakes: *no float32
        accumulation* for 16-bit inputs, *row and column swapped* (that computes $A^\top x$ for a square $A$),
        *densifying* (the $10^{12}$-entry check). GPU kernels assign a warp per row (CSR-vector) or balance the work
        across rows (merge-based SpMV: Merrill and Garland, 2016), because rows of very different lengths leave
        threads idle.

        **`mask_2_4`.** A stable descending `argsort` of $|w|$ within groups of 4, and the first two positions
        scattered into a mask. The mistakes: *groups along the output dimension* (the hardware compresses along the
        reduction dimension $K$), *comparing signed values* (keeps large positive weights, drops large negative
        ones), *keeping the two smallest*. Production: `torch.sparse.to_sparse_semi_structured(weight * mask)` turns a
        2:4-masked CUDA tensor into the compressed values + metadata that cuSPARSELt and CUTLASS multiply;
        `torch.ao.pruning.WeightNormSparsifier(sparse_block_shape=(1, 4), zeros_per_block=2)` computes this mask
        during training.

        **`storage_bytes`.** The mistakes: *$M$ row pointers instead of $M + 1$*, *COO with a single index per
        value*, *2:4 without its metadata*. The break-even density $s/(b+s)$ says that unstructured sparsity saves
        memory only well below 50%, and speed even later; 2:4 trades flexibility (exactly half, in fixed groups) for
        a format with almost no index overhead and hardware that doubles the math rate; the end-to-end gain is smaller
        than 2×, since the memory traffic of the dense activations does not halve.
    """)
    lesson.mistakes()
    return lesson
