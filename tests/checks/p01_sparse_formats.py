"""Checks for p01.sparse_formats. References: `torch.sparse_coo_tensor(...).coalesce()`, `Tensor.to_sparse_csr()`
(crow_indices, col_indices, values), dense `torch.matmul` in float64 (oracle) and in the dtype under test (baseline),
`torch.autograd.gradcheck`, a 10^6 x 10^6 CSR matrix that no dense copy could hold, `torch.ao.pruning`'s
`WeightNormSparsifier` with 1x4 blocks and 2 zeros per block, a brute force over the six 2:4 patterns of each group,
and the `nbytes` of real COO and CSR tensors."""

import itertools
import warnings

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    reference_only,
)

checks = Checks("p01.sparse_formats")
SPARSE_BUILTINS = (
    torch.sparse_coo_tensor,
    torch.sparse_csr_tensor,
    torch.sparse_compressed_tensor,
    torch.Tensor.to_sparse,
    torch.Tensor.to_sparse_coo,
    torch.Tensor.to_sparse_csr,
    torch.Tensor.coalesce,
    torch.Tensor.to_dense,
)  # torch.sparse.* needs a sparse tensor, which only these make
checks.restrict(
    "coalesce",
    "dense_to_csr",
    "csr_matmul",
    forbid=SPARSE_BUILTINS,
    instead="build it from sorting, counting and index_add_ (PyTorch's sparse tensors are the checks' reference)",
)
checks.restrict(
    "mask_2_4",
    forbid=("torch.ao.pruning", "torch.sparse"),
    instead="rank |w| inside each group of 4 yourself (torch.ao.pruning's sparsifier is the checks' reference)",
)


def torch_coalesced(indices, values, shape):
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.sparse_coo_tensor(indices, values, shape).coalesce()
    return reference.indices(), reference.values()


def torch_csr(dense):
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = dense.to_sparse_csr()
    return csr.crow_indices(), csr.col_indices(), csr.values()


def expect_equal_tensor(got, want: torch.Tensor, input: str, what: str, hint: str) -> None:
    expect_tensor(got, shape=want.shape, dtype=want.dtype, input=input, what=what)
    same = torch.equal(got, want) if not want.is_floating_point() else torch.allclose(got, want, equal_nan=True)
    expect(
        same,
        f"wrong {what}",
        input=input,
        expected=str(want.tolist())[:200],
        got=str(got.tolist())[:200],
        hint=hint,
    )


def random_coo(rows: int, cols: int, nnz: int, dtype=torch.float32, repeats: bool = True):
    """Random coordinates, unsorted; with repeats, about a third of them drawn again."""
    indices = torch.stack([torch.randint(0, rows, (nnz,)), torch.randint(0, cols, (nnz,))])
    if repeats and nnz > 2:
        again = torch.randint(0, nnz, (nnz // 3,))
        indices = torch.cat([indices, indices[:, again]], dim=1)
    values = torch.randn(indices.shape[1], dtype=torch.float64).to(dtype)
    perm = torch.randperm(indices.shape[1])
    return indices[:, perm], values[perm]


# ------------------------------------------------------------------------------------------ coalesce

HINT_COALESCE = (
    "key = row * cols + col; sort the keys; equal keys are one entry whose value is the sum (torch.unique with "
    "return_inverse, then index_add_); rows come back as key // cols, columns as key % cols"
)


def run_coalesce(ex, indices, values, shape, label):
    want_indices, baseline = torch_coalesced(indices, values, shape)
    oracle = torch_coalesced(indices, values.double(), shape)[1]  # the sums in float64
    got = ex.coalesce(indices, values, shape)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "not a pair (indices, values)",
        input=label,
        expected="(indices (2, n) int64, values (n,))",
        got=repr(type(got)),
        hint="return a tuple of two tensors",
    )
    expect_equal_tensor(got[0], want_indices, label, "indices", HINT_COALESCE)
    expect_tensor(got[1], shape=baseline.shape, dtype=baseline.dtype, input=label, what="values")
    if baseline.is_floating_point():
        expect_close(got[1], oracle, input=label, baseline=baseline, hint=HINT_COALESCE, what="values")
    else:
        expect_equal_tensor(got[1], baseline, label, "values", HINT_COALESCE)


@checks("coalesce")
def hand_checkable_duplicates(ex):
    """(1,2)=1, (0,3)=2, (1,2)=3, (0,0)=4 in a 2x4 matrix: (0,0)=4, (0,3)=2, (1,2)=4; a sum to zero is kept"""
    indices = torch.tensor([[1, 0, 1, 0], [2, 3, 2, 0]])
    run_coalesce(ex, indices, torch.tensor([1.0, 2.0, 3.0, 4.0]), (2, 4), "indices [[1,0,1,0],[2,3,2,0]], shape 2x4")
    run_coalesce(
        ex,
        torch.tensor([[0, 0, 1], [1, 1, 0]]),
        torch.tensor([1.5, -1.5, 2.0]),
        (2, 2),
        "(0,1)=1.5 and (0,1)=-1.5: the zero sum stays an entry",
    )
    # same row, columns given in decreasing order: a row-only sort would leave them so
    run_coalesce(ex, torch.tensor([[0, 0, 0], [5, 1, 3]]), torch.tensor([1.0, 2.0, 3.0]), (1, 6), "row 0, cols 5, 1, 3")


@checks("coalesce")
def matches_torch_coalesce(ex):
    """random unsorted COO with repeats, several shapes (tall, wide, 1 x n), fp32/fp64/fp16 and int64 values"""
    for rows, cols, nnz in ((7, 5, 20), (1, 33, 40), (40, 3, 25), (300, 200, 500), (3, 3, 1)):
        for dtype in (torch.float32, torch.float64, torch.float16):
            indices, values = random_coo(rows, cols, nnz, dtype)
            run_coalesce(
                ex, indices, values, (rows, cols), describe(indices=indices, values=values) + f", {rows}x{cols}"
            )
    indices, _ = random_coo(9, 11, 30)
    values = torch.randint(-5, 5, (indices.shape[1],))
    run_coalesce(ex, indices, values, (9, 11), "int64 values, " + describe(indices=indices))
    run_coalesce(ex, indices.int(), values.double(), (9, 11), "int32 indices, " + describe(indices=indices.int()))
    empty = torch.zeros(2, 0, dtype=torch.long)
    run_coalesce(ex, empty, torch.zeros(0), (4, 4), "no entries at all")


@checks("coalesce")
def refuses_bad_coo(ex):
    """indices not (2, nnz) integers, values of the wrong length, a bad shape, coordinates outside: ValueError"""
    indices, values = torch.tensor([[0, 1], [1, 2]]), torch.tensor([1.0, 2.0])
    ex.coalesce(indices, values, (2, 3))  # first: it works at all
    bad = [
        ("indices (3, 2)", lambda: ex.coalesce(torch.zeros(3, 2, dtype=torch.long), values, (2, 3))),
        ("indices (4,)", lambda: ex.coalesce(torch.zeros(4, dtype=torch.long), values, (2, 3))),
        ("float indices", lambda: ex.coalesce(indices.float(), values, (2, 3))),
        ("values of length 3", lambda: ex.coalesce(indices, torch.ones(3), (2, 3))),
        ("values (2, 1)", lambda: ex.coalesce(indices, values[:, None], (2, 3))),
        ("shape (2, 3, 4)", lambda: ex.coalesce(indices, values, (2, 3, 4))),
        ("shape (0, 3)", lambda: ex.coalesce(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (0, 3))),
        ("column 3 in a 2x3 matrix", lambda: ex.coalesce(torch.tensor([[0, 1], [3, 0]]), values, (2, 3))),
        ("row 2 in a 2x3 matrix", lambda: ex.coalesce(torch.tensor([[2, 1], [0, 0]]), values, (2, 3))),
        ("a negative row", lambda: ex.coalesce(torch.tensor([[-1, 1], [0, 0]]), values, (2, 3))),
        ("a negative column", lambda: ex.coalesce(torch.tensor([[0, 1], [-1, 0]]), values, (2, 3))),
    ]
    for label, call in bad:
        expect_value_error(call, label, "validate the shapes, the dtype and the coordinates' range first")


# ------------------------------------------------------------------------------------------ dense_to_csr

HINT_CSR = (
    "crow = [0, cumsum(entries per row)] of length M + 1 (bincount with minlength=M for empty rows); col and values "
    "of the non-zero entries in row-major order"
)


def sparse_dense(rows: int, cols: int, density: float, dtype=torch.float32) -> torch.Tensor:
    dense = torch.randn(rows, cols, dtype=torch.float64) * (torch.rand(rows, cols) < density)
    return dense.to(dtype)


def run_csr(ex, dense: torch.Tensor, label: str) -> None:
    want = torch_csr(dense)
    got = ex.dense_to_csr(dense)
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "not a triple (crow, col, values)",
        input=label,
        expected="(crow (M+1,) int64, col (nnz,) int64, values (nnz,))",
        got=repr(type(got)),
        hint="return a tuple of three tensors",
    )
    for name, g, w in zip(("crow", "col", "values"), got, want, strict=True):
        expect_equal_tensor(g, w, label, name, HINT_CSR)


@checks("dense_to_csr")
def hand_checkable_matrix(ex):
    """[[0,5,0,0],[0,0,0,0],[7,0,0,2]]: crow [0,1,1,3], col [1,0,3], values [5,7,2]"""
    dense = torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [7.0, 0.0, 0.0, 2.0]])
    run_csr(ex, dense, "[[0,5,0,0],[0,0,0,0],[7,0,0,2]]")
    run_csr(ex, torch.zeros(3, 5), "all zeros 3x5")
    run_csr(ex, torch.tensor([[0.0, float("nan")], [float("inf"), 0.0]]), "[[0, nan], [inf, 0]]: NaN is not zero")


@checks("dense_to_csr")
def matches_to_sparse_csr(ex):
    """random matrices (empty rows, 1 x n, n x 1, dense), fp32/fp16/bf16/fp64/int64: equal to Tensor.to_sparse_csr()"""
    for rows, cols, density in ((6, 9, 0.3), (1, 40, 0.5), (40, 1, 0.5), (50, 70, 0.05), (8, 8, 1.0), (33, 17, 0.0)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            dense = sparse_dense(rows, cols, density, dtype)
            run_csr(ex, dense, describe(dense=dense) + f", density {density}")
    integers = torch.randint(-2, 3, (12, 7))
    run_csr(ex, integers, describe(dense=integers) + " with values in -2..2")


@checks("dense_to_csr")
def refuses_non_matrices(ex):
    """1-D, 3-D and 0-D tensors: ValueError"""
    ex.dense_to_csr(torch.eye(3))  # first: it works at all
    for shape in ((5,), (2, 3, 4), ()):
        tensor = torch.randn(shape)
        expect_value_error(
            lambda tensor=tensor: ex.dense_to_csr(tensor),
            describe(dense=tensor),
            "check dense.dim() == 2 first",
        )


# ------------------------------------------------------------------------------------------ csr_matmul

HINT_MATMUL = (
    "row_of = repeat_interleave(arange(M), crow.diff()); products = values[:, None] * rhs[col] in float32 (or "
    "float64); out = zeros(M, N).index_add(0, row_of, products), cast back to values.dtype"
)


def csr_case(rows: int, cols: int, n: int | None, density: float, dtype: torch.dtype):
    dense = sparse_dense(rows, cols, density, torch.float64).to(dtype)
    crow, col, values = torch_csr(dense)
    rhs = torch.randn((cols,) if n is None else (cols, n), dtype=torch.float64).to(dtype)
    return dense, crow, col, values, rhs


@checks("csr_matmul")
def hand_checkable_spmv(ex):
    """[[0,5,0,0],[0,0,0,0],[7,0,0,2]] times [1,2,3,4]: [10, 0, 15]"""
    crow, col, values = torch.tensor([0, 1, 1, 3]), torch.tensor([1, 0, 3]), torch.tensor([5.0, 7.0, 2.0])
    got = ex.csr_matmul(crow, col, values, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    expect_close(
        got,
        torch.tensor([10.0, 0.0, 15.0], dtype=torch.float64),
        input="crow [0,1,1,3], col [1,0,3], values [5,7,2], x [1,2,3,4]",
        hint=HINT_MATMUL,
    )
    got = ex.csr_matmul(torch.tensor([0]), torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.randn(4, 2))
    expect_close(
        got,
        torch.zeros(0, 2, dtype=torch.float64),
        input="a 0 x 4 matrix (crow [0], nothing stored) times a (4, 2) rhs",
        hint="a matrix without rows is legal: crow = [0], and the result is (0, N)",
    )


@checks("csr_matmul")
def matches_dense_matmul(ex):
    """SpMV and SpMM, empty rows, 1 x n, n x 1, long rows (300 entries) in fp32/fp64/fp16/bf16 against dense matmul"""
    cases = [(6, 9, None, 0.4), (6, 9, 5, 0.4), (1, 40, 3, 0.5), (40, 1, 2, 0.5), (30, 20, 7, 0.0), (8, 400, 3, 0.8)]
    cases.append((50, 60, None, 0.1))
    for rows, cols, n, density in cases:
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            dense, crow, col, values, rhs = csr_case(rows, cols, n, density, dtype)
            oracle = dense.double() @ rhs.double()
            baseline = (dense.float() @ rhs.float()).to(dtype)  # a dense GEMM accumulates in fp32
            got = ex.csr_matmul(crow, col, values, rhs)
            expect_tensor(got, shape=oracle.shape, dtype=dtype, input=describe(A=dense, rhs=rhs))
            expect_close(
                got,
                oracle,
                input=describe(A=dense, rhs=rhs) + f", {len(values)} stored",
                baseline=baseline,
                dtype=dtype,
                hint=HINT_MATMUL,
            )


@checks("csr_matmul")
def gradients_and_a_matrix_with_a_trillion_entries(ex):
    """gradcheck (float64) for values and rhs; a 10^6 x 10^6 CSR matrix with 64 entries times (10^6, 2)"""
    _, crow, col, values, rhs = csr_case(4, 3, 2, 0.6, torch.float64)  # small: gradcheck calls it once per input
    expect_gradcheck(
        lambda v, x: ex.csr_matmul(crow, col, v, x),
        (values.clone().requires_grad_(), rhs.clone().requires_grad_()),
        input=describe(values=values, rhs=rhs),
        hint="build the result from differentiable ops (indexing, multiply, index_add) on values and rhs",
    )
    size, entries = 10**6, 64
    rows = torch.randint(0, size, (entries,)).sort().values
    col = torch.randint(0, size, (entries,))
    crow = torch.zeros(size + 1, dtype=torch.long)
    crow[1:] = torch.bincount(rows, minlength=size).cumsum(0)
    values, rhs = torch.randn(entries), torch.randn(size, 2)
    try:
        got = ex.csr_matmul(crow, col, values, rhs)
    except (RuntimeError, MemoryError) as error:
        if isinstance(error, NotImplementedError):
            raise
        expect(
            False,
            "ran out of memory",
            input="10^6 x 10^6 CSR, 64 entries",
            expected="a (10^6, 2) result",
            got=f"{type(error).__name__}: {str(error)[:120]}",
            hint="never build the dense matrix: O(nnz + M) only",
        )
    label = "10^6 x 10^6 CSR, 64 random entries, rhs (10^6, 2) float32"
    expect_tensor(got, shape=(size, 2), dtype=torch.float32, input=label)
    touched = rows.unique()  # compare the rows with entries; every other row must be exactly 0
    want = torch.zeros(size, 2, dtype=torch.float64).index_put_(
        (rows,), values.double()[:, None] * rhs.double()[col], accumulate=True
    )
    expect_close(got[touched], want[touched], input=label + f", the {len(touched)} rows with entries", hint=HINT_MATMUL)
    rest = got.clone()
    rest[touched] = 0
    expect(
        rest.count_nonzero() == 0,
        "rows without entries are not zero",
        input=label,
        expected="0 in every row without a stored entry",
        got=f"{int(rest.count_nonzero())} non-zero elements there",
        hint="start from zeros and add each product into its own row",
    )


@checks("csr_matmul")
def refuses_broken_csr(ex):
    """rhs 3-D or of another dtype, crow not from 0 to nnz or decreasing, col/values lengths, a column too far"""
    crow, col, values = torch.tensor([0, 1, 1, 3]), torch.tensor([1, 0, 3]), torch.tensor([5.0, 7.0, 2.0])
    x = torch.randn(4)
    ex.csr_matmul(crow, col, values, x)  # first: it works at all
    bad = [
        ("rhs (4, 2, 2)", lambda: ex.csr_matmul(crow, col, values, torch.randn(4, 2, 2))),
        ("rhs float64, values float32", lambda: ex.csr_matmul(crow, col, values, x.double())),
        ("crow [1, 1, 1, 3]", lambda: ex.csr_matmul(torch.tensor([1, 1, 1, 3]), col, values, x)),
        ("crow [0, 1, 1, 2] (nnz is 3)", lambda: ex.csr_matmul(torch.tensor([0, 1, 1, 2]), col, values, x)),
        ("crow [0, 2, 1, 3] (decreasing)", lambda: ex.csr_matmul(torch.tensor([0, 2, 1, 3]), col, values, x)),
        ("col of length 2", lambda: ex.csr_matmul(crow, col[:2], values, x)),
        ("crow empty", lambda: ex.csr_matmul(torch.zeros(0, dtype=torch.long), col, values, x)),
        ("column 4 with rhs of 4 rows", lambda: ex.csr_matmul(crow, torch.tensor([1, 0, 4]), values, x)),
        ("a negative column", lambda: ex.csr_matmul(crow, torch.tensor([1, -1, 3]), values, x)),
    ]
    for label, call in bad:
        expect_value_error(call, label, "validate rhs, crow (0 ... nnz, non-decreasing), col and values first")


# ------------------------------------------------------------------------------------------ mask_2_4

HINT_MASK = (
    "groups of 4 along the last (input) dimension; rank |w| inside each group (a stable descending argsort keeps the "
    "lower index first on ties) and keep the first 2"
)


def sparsifier_mask(weight: torch.Tensor) -> torch.Tensor:
    """torch.ao.pruning's WeightNormSparsifier with 1x4 blocks and 2 zeros per block, on an nn.Linear."""
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.pruning import WeightNormSparsifier

        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            linear.weight.copy_(weight.float())
        model = torch.nn.Sequential(linear)
        sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
        sparsifier.prepare(model, [{"tensor_fqn": "0.weight"}])
        sparsifier.step()
        return model[0].parametrizations.weight[0].mask.bool()


def brute_force_mask(weight: torch.Tensor) -> torch.Tensor:
    """For every group, the first of the six 2-of-4 patterns (in lexicographic order) with the largest kept |w|."""
    patterns = list(itertools.combinations(range(4), 2))  # (0,1), (0,2), ... (2,3): lower positions first
    mask = torch.zeros(weight.shape, dtype=torch.bool)
    magnitudes = weight.double().abs().tolist()
    for r, row in enumerate(magnitudes):
        for start in range(0, len(row), 4):
            group = row[start : start + 4]
            best = max(patterns, key=lambda p: (group[p[0]] + group[p[1]], [-i for i in p]))
            for position in best:
                mask[r, start + position] = True
    return mask


def expect_mask(got, want: torch.Tensor, label: str) -> None:
    expect_tensor(got, shape=want.shape, dtype=torch.bool, input=label, what="mask")
    wrong = (got != want).nonzero()
    where = tuple(wrong[0].tolist()) if len(wrong) else None
    expect(
        where is None,
        f"{len(wrong)} positions differ",
        input=label,
        expected=f"mask[{where}] = {bool(want[where]) if where else ''}",
        got=f"mask[{where}] = {bool(got[where]) if where else ''}",
        hint=HINT_MASK,
    )


@checks("mask_2_4")
def hand_checkable_groups(ex):
    """[[3, -4, 1, 0.5, | 0, 0, 0, 0]] and a row of ties: keep 3 and -4; zeros and ties keep the lower positions"""
    weight = torch.tensor([[3.0, -4.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0, 0.1, -2.0, 2.0, 0.3]])
    want = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 0, 1, 1, 0]], dtype=torch.bool)
    expect_mask(ex.mask_2_4(weight), want, "[[3,-4,1,0.5, 0,0,0,0], [1,-1,1,-1, 0.1,-2,2,0.3]]")


@checks("mask_2_4")
def matches_weight_norm_sparsifier(ex):
    """random weights (1 x 4 up to 64 x 256), fp32/fp16/bf16: equal to torch.ao.pruning's 1x4, 2-zeros sparsifier"""
    for shape in ((1, 4), (3, 8), (16, 36), (64, 256), (5, 12)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            weight = torch.randn(shape, dtype=torch.float64).to(dtype)
            with reference_only():
                want = brute_force_mask(weight)  # 16-bit data can tie: the brute force keeps the lower positions
            if dtype == torch.float32:
                sparsifier = sparsifier_mask(weight)
                expect(
                    torch.equal(sparsifier, want),
                    "the two references disagree",
                    input=describe(weight=weight),
                    hint="(a tie in fp32 random data: report this)",
                )
            expect_mask(ex.mask_2_4(weight), want, describe(weight=weight))


@checks("mask_2_4")
def keeps_the_most_magnitude_and_refuses(ex):
    """two kept per group of 4 along the input dim, the kept |w| is the best of the 6 patterns; bad weights refused"""
    weight = torch.randn(6, 20) * torch.randn(1, 20).exp()  # columns of very different scales
    got = ex.mask_2_4(weight)
    expect_tensor(got, shape=weight.shape, dtype=torch.bool, input=describe(weight=weight), what="mask")
    per_group = got.reshape(6, 5, 4).sum(-1)
    expect(
        bool((per_group == 2).all()),
        "a group of 4 along the input dimension does not keep exactly 2",
        input=describe(weight=weight),
        expected="2 in every group",
        got=f"kept per group (row 0): {per_group[0].tolist()}",
        hint="group along the last dimension (the input dimension of an nn.Linear weight)",
    )
    kept = (weight.abs() * got).sum()
    with reference_only():
        best = (weight.abs() * brute_force_mask(weight)).sum()
    expect(
        torch.isclose(kept, best),
        "the mask does not keep the largest magnitudes",
        input=describe(weight=weight),
        expected=f"kept |w| = {best:.4f}",
        got=f"{kept:.4f}",
        hint="compare |w|, not w, and keep the two largest",
    )
    for bad in (torch.randn(8), torch.randn(2, 4, 4), torch.randn(4, 6), torch.randint(0, 9, (4, 8))):
        expect_value_error(
            lambda bad=bad: ex.mask_2_4(bad),
            describe(weight=bad),
            "check a 2-D floating weight with in % 4 == 0 first",
        )


# ------------------------------------------------------------------------------------------ storage_bytes

HINT_BYTES = "dense M*K*s; COO nnz*(2b + s); CSR (M+1)*b + nnz*(b + s); 2:4 nnz*s + nnz*2/8 (2 bits per kept value)"


def expect_bytes(got, want: float, label: str) -> None:
    expect(
        isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - want) <= 1e-9 * max(1, want),
        "wrong number of bytes",
        input=label,
        expected=f"{want:,}",
        got=f"{got!r}"[:80],
        hint=HINT_BYTES,
    )


@checks("storage_bytes")
def matches_real_tensors(ex):
    """the nbytes of dense, torch COO (int64 indices) and CSR (int64 and int32 indices) tensors of random matrices"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's CSR is "in beta"
        for rows, cols, density, dtype in (
            (17, 33, 0.2, torch.float16),
            (64, 8, 0.5, torch.float32),
            (5, 5, 0.0, torch.bfloat16),
            (4, 4, 1.0, torch.float32),
        ):
            dense = sparse_dense(rows, cols, density, dtype)
            size = dense.element_size()
            with reference_only():
                coo = dense.to_sparse().coalesce()
                csr = dense.to_sparse_csr()
                csr32 = torch.sparse_csr_tensor(
                    csr.crow_indices().int(), csr.col_indices().int(), csr.values(), csr.shape
                )
            nnz = coo.values().numel()
            label = f"{describe(dense=dense)}, nnz={nnz}"
            expect_bytes(ex.storage_bytes("dense", rows, cols, nnz, size, 8), dense.nbytes, label + ", dense")
            want = coo.indices().nbytes + coo.values().nbytes
            expect_bytes(ex.storage_bytes("coo", rows, cols, nnz, size, 8), want, label + ", torch COO (int64)")
            for tensor, index_bytes in ((csr, 8), (csr32, 4)):
                want = tensor.crow_indices().nbytes + tensor.col_indices().nbytes + tensor.values().nbytes
                expect_bytes(
                    ex.storage_bytes("csr", rows, cols, nnz, size, index_bytes),
                    want,
                    label + f", CSR int{8 * index_bytes}",
                )


@checks("storage_bytes")
def two_four_and_break_even(ex):
    """2:4 in FP16/FP8: 1.125 and 0.625 bytes per entry; CSR's break-even density in FP16 + int32 is about 1/3"""
    for value_bytes, per_entry in ((2, 1.125), (1, 0.625), (4, 2.125)):
        got = ex.storage_bytes("2:4", 4096, 4096, 4096 * 4096 // 2, value_bytes, 4)
        expect_bytes(got, per_entry * 4096 * 4096, f"2:4, 4096 x 4096, {value_bytes}-byte values")
    rows = cols = 1000
    dense = ex.storage_bytes("dense", rows, cols, 0, 2, 4)
    low, high = 0, rows * cols  # bisect for the fewest entries at which CSR is no smaller than dense
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if ex.storage_bytes("csr", rows, cols, middle, 2, 4) >= dense else (middle + 1, high)
    smallest_loss = low
    want = next(n for n in range(rows * cols + 1) if (rows + 1) * 4 + n * 6 >= rows * cols * 2)
    expect(
        smallest_loss == want,
        "CSR stops saving memory at the wrong density",
        input="1000 x 1000, FP16 values, int32 indices",
        expected=f"nnz = {want:,} (density {want / 1e6:.4f}, about 1/3)",
        got=f"nnz = {smallest_loss:,}",
        hint=HINT_BYTES,
    )
    coo = ex.storage_bytes("coo", 10, 10, 7, 2, 4)
    expect_bytes(coo, 7 * (2 * 4 + 2), "COO, 10 x 10, 7 entries, FP16 values, int32 indices")


@checks("storage_bytes")
def refuses_impossible_layouts(ex):
    """unknown format, sizes below 1, nnz outside [0, M K], 2:4 with K % 4 or nnz != M K / 2: ValueError"""
    ex.storage_bytes("csr", 4, 4, 3, 2, 4)  # first: it works at all
    bad = [
        ("bsr", 4, 4, 3, 2, 4),
        ("csr", 0, 4, 0, 2, 4),
        ("csr", 4, 4, 17, 2, 4),
        ("coo", 4, 4, -1, 2, 4),
        ("dense", 4, 4, 3, 0, 4),
        ("csr", 4, 4, 3, 2, 0),
        ("2:4", 4, 6, 12, 2, 4),
        ("2:4", 4, 8, 12, 2, 4),
    ]
    for args in bad:
        expect_value_error(
            lambda args=args: ex.storage_bytes(*args),
            "storage_bytes({!r}, rows={}, cols={}, nnz={}, value_bytes={}, index_bytes={})".format(*args),
            "validate the format, the sizes, nnz and the 2:4 structure first",
        )
