"""Realistic wrong versions of the p03.quant_matmul solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "int8_matmul",
        "one_scale_per_row",
        "ignores the groups: every column of row n uses scales[n, 0] (right only for per-channel scales)",
        [
            (
                "s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // GROUP_SIZE) * stride_sg,",
                "s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] * 0) * stride_sg,",
            )
        ],
        mistake_zh="忽略分组：第 n 行的每一列都用 scales[n, 0]（只对逐通道的 scale 成立）",
    ),
    Mutant(
        "int8_matmul",
        "scale_strides_swapped",
        "indexes the scales as if they were stored (K // G, N)",
        [
            (
                "s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // GROUP_SIZE) * stride_sg,",
                "s = tl.load(s_ptr + cols[None, :] * stride_sg + (k[:, None] // GROUP_SIZE) * stride_sn,",
            )
        ],
        mistake_zh="按 (K // G, N) 的存储方式索引 scale",
    ),
    Mutant(
        "int8_matmul",
        "no_k_mask_on_codes",
        "loads the int8 codes without the K mask: the last K step reads past each row of W",
        [("mask=k_in[:, None], other=0)", ")")],
        mistake_zh="加载 int8 码时没有 K 掩码：最后一个 K 步读到 W 每一行之外",
    ),
    Mutant(
        "int8_matmul",
        "no_k_mask_on_scales",
        "loads the scales without the K mask: past K the group index points past the last group",
        [("mask=k_in[:, None], other=0.0)", ")")],
        mistake_zh="加载 scale 时没有 K 掩码：超过 K 后组下标指到最后一组之外",
    ),
    Mutant(
        "int8_matmul",
        "no_store_mask",
        "stores the whole tile, past the edges of y",
        [
            (
                "tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
                "tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个分块，越过了 y 的边界",
    ),
    Mutant(
        "int8_matmul",
        "dequant_rounded_to_int8",
        "multiplies codes and scales but keeps the result in the codes' integer type",
        [
            (
                "w = (q.to(tl.float32) * s.to(tl.float32)).to(x_ptr.dtype.element_ty)",
                "w = (q.to(tl.float32) * s.to(tl.float32)).to(tl.int8).to(x_ptr.dtype.element_ty)",
            )
        ],
        mistake_zh="码乘以 scale 后结果仍保持码的整数类型",
    ),
    Mutant(
        "int8_matmul",
        "group_size_not_checked",
        "accepts a group size that does not divide K (the last group is short and its scale is read past the end)",
        [("if G <= 0 or K % G != 0:", "if G <= 0:")],
        mistake_zh="接受不能整除 K 的组大小（最后一组较短，它的 scale 读到末尾之外）",
    ),
    Mutant(
        "int8_matmul",
        "calls_the_builtin",
        "dequantises the whole weight and calls torch.matmul (the memory the lesson sets out to save)",
        [
            (
                "y = torch.empty((M, N), dtype=x.dtype, device=x.device)",
                "return x @ (qweight.to(x.dtype) * scales.to(x.dtype).repeat_interleave(G, dim=1)).T",
            )
        ],
        mistake_zh="把整个权重反量化后调用 torch.matmul（正是本课要省下的显存）",
    ),
    Mutant(
        "int4_matmul",
        "no_sign_extension",
        "uses the nibble as an unsigned code in [0, 15]",
        [("q = u - ((u >> 3) << 4)", "q = u")],
        mistake_zh="把 4 位当作 [0, 15] 的无符号码",
    ),
    Mutant(
        "int4_matmul",
        "offset_binary",
        "subtracts 8 from every nibble, as if the codes were stored with a zero point of 8",
        [("q = u - ((u >> 3) << 4)", "q = u - 8")],
        mistake_zh="每个 4 位都减 8，好像码是以零点 8 存储的",
    ),
    Mutant(
        "int4_matmul",
        "nibbles_swapped",
        "takes the even column from the high nibble and the odd one from the low nibble",
        [
            (
                "u = (byte.to(tl.int32) >> ((k[:, None] % 2) * 4)) & 0xF",
                "u = (byte.to(tl.int32) >> ((1 - k[:, None] % 2) * 4)) & 0xF",
            )
        ],
        mistake_zh="偶数列取自高 4 位，奇数列取自低 4 位",
    ),
    Mutant(
        "int4_matmul",
        "scale_group_from_byte_index",
        "indexes the scale group with the byte index k // 2 instead of the column k",
        [
            (
                "s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // GROUP_SIZE) * stride_sg,",
                "s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // 2 // GROUP_SIZE) * stride_sg,",
            )
        ],
        mistake_zh="用字节下标 k // 2 而不是列 k 索引 scale 组",
    ),
    Mutant(
        "int4_matmul",
        "byte_index_not_halved",
        "reads byte k instead of byte k // 2: past the middle of each packed row",
        [
            (
                "byte = tl.load(p_ptr + cols[None, :] * stride_pn + (k[:, None] // 2) * stride_pk,",
                "byte = tl.load(p_ptr + cols[None, :] * stride_pn + k[:, None] * stride_pk,",
            )
        ],
        mistake_zh="读第 k 个字节而不是第 k // 2 个：越过了每个打包行的中点",
    ),
    Mutant(
        "int4_matmul",
        "packed_shape_not_checked",
        "accepts a packed tensor whose width is not K // 2",
        [
            (
                'if packed.shape[1] != K // 2:\n        raise ValueError(f"x has K = {K}, so packed must be (N, {K // 2}); '
                'got {tuple(packed.shape)}")\n',
                "",
            )
        ],
        mistake_zh="接受宽度不是 K // 2 的打包张量",
    ),
    Mutant(
        "int4_matmul",
        "int8_codes_accepted",
        "accepts int8 as well as uint8 for the packed codes (the same bytes, another meaning)",
        [("if packed.dtype != torch.uint8:", "if packed.dtype not in (torch.uint8, torch.int8):")],
        mistake_zh="打包码除了 uint8 也接受 int8（字节相同，含义不同）",
    ),
    Mutant(
        "fp8_quantize",
        "amax_without_abs",
        "takes the row's largest value instead of its largest magnitude, so a negative extreme overflows",
        [("amax = t.abs().amax(dim=1, keepdim=True).float()", "amax = t.amax(dim=1, keepdim=True).float()")],
        mistake_zh="取一行中最大的值而不是最大的绝对值，负的极值会溢出",
    ),
    Mutant(
        "fp8_quantize",
        "int8_range",
        "maps the row's max onto 127 (the int8 habit) and wastes most of E4M3's range",
        [("amax / FP8_MAX", "amax / 127.0")],
        mistake_zh="把行最大值映射到 127（int8 的习惯），浪费了 E4M3 的大部分范围",
    ),
    Mutant(
        "fp8_quantize",
        "zero_row_scale_zero",
        "divides an all-zero row by a zero scale: NaN codes",
        [("torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))", "amax / FP8_MAX")],
        mistake_zh="全零的行除以为零的 scale：码为 NaN",
    ),
    Mutant(
        "fp8_quantize",
        "multiplies_by_scale",
        "multiplies by the scale instead of dividing (the dequantisation direction)",
        [("codes = (t.float() / scale)", "codes = (t.float() * scale)")],
        mistake_zh="乘以 scale 而不是除以（那是反量化的方向）",
    ),
    Mutant(
        "fp8_quantize",
        "given_scale_not_checked",
        "accepts a zero, negative or infinite scale",
        [
            (
                "if not bool(torch.isfinite(scale).all()) or bool((scale <= 0).any()):",
                "if False:",
            )
        ],
        mistake_zh="接受为零、为负或无穷大的 scale",
    ),
    Mutant(
        "fp8_matmul",
        "only_scale_a",
        "applies the activation's row scales and forgets the weight's column scales",
        [("acc = acc * sa[:, None] * sb[None, :]", "acc = acc * sa[:, None]")],
        mistake_zh="施加了激活的行 scale，忘了权重的列 scale",
    ),
    Mutant(
        "fp8_matmul",
        "scale_b_by_row",
        "indexes the weight scales with the rows of the output",
        [("sb = tl.load(sb_ptr + cols * stride_sb)", "sb = tl.load(sb_ptr + rows * stride_sb)")],
        mistake_zh="用输出的行索引权重的 scale",
    ),
    Mutant(
        "fp8_matmul",
        "scales_applied_every_k_step",
        "multiplies the running accumulator by the scales inside the K loop (right only when K fits one tile)",
        [
            (
                "acc = tl.dot(a, b, acc)",
                "acc = tl.dot(a, b, acc) * tl.load(sa_ptr + rows * stride_sa)[:, None] * "
                "tl.load(sb_ptr + cols * stride_sb)[None, :]",
            ),
            ("acc = acc * sa[:, None] * sb[None, :]", "acc = acc"),
        ],
        mistake_zh="在 K 循环里把运行中的累加器乘以 scale（只有 K 装得进一个分块时才对）",
    ),
    Mutant(
        "fp8_matmul",
        "no_k_mask_on_b",
        "loads the weight codes without the K mask",
        [("mask=k_in[:, None], other=0.0)", ")")],
        mistake_zh="加载权重码时没有 K 掩码",
    ),
    Mutant(
        "fp8_matmul",
        "no_store_mask",
        "stores the whole tile, past the edges of c",
        [
            (
                "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
                "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个分块，越过了 c 的边界",
    ),
    Mutant(
        "fp8_matmul",
        "out_dtype_ignored",
        "ignores out_dtype and always returns float32",
        [
            (
                "c = torch.empty((M, N), dtype=out_dtype, device=a.device)",
                "c = torch.empty((M, N), dtype=torch.float32, device=a.device)",
            )
        ],
        mistake_zh="忽略 out_dtype，总是返回 float32",
    ),
]
