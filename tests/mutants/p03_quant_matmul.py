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
        mistake_zh="忽略分组：第 n 行的每一列都用 scales[n, 0]（只有逐通道缩放时才对）",
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
        mistake_zh="按 (K // G, N) 的存储方式来索引缩放系数",
    ),
    Mutant(
        "int8_matmul",
        "no_k_mask_on_codes",
        "loads the int8 codes without the K mask: the last K step reads past each row of W",
        [("mask=k_in[:, None], other=0)", ")")],
        mistake_zh="加载 int8 码值时没有 K 掩码：最后一个 K 步读越过 W 的每一行",
    ),
    Mutant(
        "int8_matmul",
        "no_k_mask_on_scales",
        "loads the scales without the K mask: past K the group index points past the last group",
        [("mask=k_in[:, None], other=0.0)", ")")],
        mistake_zh="加载缩放系数时没有 K 掩码：超过 K 后分组下标指向最后一组之外",
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
        mistake_zh="存储整个分块，越过了 y 的边缘",
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
        mistake_zh="码值乘以缩放系数后，结果仍保留为码值的整数类型",
    ),
    Mutant(
        "int8_matmul",
        "group_size_not_checked",
        "accepts a group size that does not divide K (the last group is short and its scale is read past the end)",
        [("if G <= 0 or K % G != 0:", "if G <= 0:")],
        mistake_zh="接受不能整除 K 的分组大小（最后一组不完整，它的缩放系数读越过了末尾）",
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
        mistake_zh="把整个权重反量化后调用 torch.matmul（正是本节要省下的那份内存）",
    ),
    Mutant(
        "int4_matmul",
        "no_sign_extension",
        "uses the nibble as an unsigned code in [0, 15]",
        [("q = u - ((u >> 3) << 4)", "q = u")],
        mistake_zh="把半字节当作 [0, 15] 中的无符号码值",
    ),
    Mutant(
        "int4_matmul",
        "offset_binary",
        "subtracts 8 from every nibble, as if the codes were stored with a zero point of 8",
        [("q = u - ((u >> 3) << 4)", "q = u - 8")],
        mistake_zh="每个半字节都减去 8，仿佛码值是以零点 8 存储的",
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
        mistake_zh="偶数列取自高半字节，奇数列取自低半字节",
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
        mistake_zh="用字节下标 k // 2 而不是列号 k 来索引缩放分组",
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
        mistake_zh="读取第 k 个字节而不是第 k // 2 个：越过了每个打包行的中点",
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
        mistake_zh="接受宽度不等于 K // 2 的打包张量",
    ),
    Mutant(
        "int4_matmul",
        "int8_codes_accepted",
        "accepts int8 as well as uint8 for the packed codes (the same bytes, another meaning)",
        [("if packed.dtype != torch.uint8:", "if packed.dtype not in (torch.uint8, torch.int8):")],
        mistake_zh="打包码值除了 uint8 也接受 int8（字节相同，含义不同）",
    ),
    Mutant(
        "fp8_quantize",
        "amax_without_abs",
        "takes the row's largest value instead of its largest magnitude, so a negative extreme overflows",
        [("amax = t.abs().amax(dim=1, keepdim=True).float()", "amax = t.amax(dim=1, keepdim=True).float()")],
        mistake_zh="取行中的最大值而不是最大绝对值，于是负的极值会溢出",
    ),
    Mutant(
        "fp8_quantize",
        "int8_range",
        "maps the row's max onto 127 (the int8 habit) and wastes most of E4M3's range",
        [("amax / FP8_MAX", "amax / 127.0")],
        mistake_zh="把行最大值映射到 127（int8 的习惯），浪费了 E4M3 的大部分表示范围",
    ),
    Mutant(
        "fp8_quantize",
        "zero_row_scale_zero",
        "divides an all-zero row by a zero scale: NaN codes",
        [("torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))", "amax / FP8_MAX")],
        mistake_zh="全零的行除以为零的缩放系数：码值变成 NaN",
    ),
    Mutant(
        "fp8_quantize",
        "multiplies_by_scale",
        "multiplies by the scale instead of dividing (the dequantisation direction)",
        [("codes = (t.float() / scale)", "codes = (t.float() * scale)")],
        mistake_zh="乘以缩放系数而不是除以它（这是反量化的方向）",
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
        mistake_zh="接受为零、为负或无穷大的缩放系数",
    ),
    Mutant(
        "fp8_matmul",
        "only_scale_a",
        "applies the activation's row scales and forgets the weight's column scales",
        [("acc = acc * sa[:, None] * sb[None, :]", "acc = acc * sa[:, None]")],
        mistake_zh="乘了激活的逐行缩放系数，却忘了权重的逐列缩放系数",
    ),
    Mutant(
        "fp8_matmul",
        "scale_b_by_row",
        "indexes the weight scales with the rows of the output",
        [("sb = tl.load(sb_ptr + cols * stride_sb)", "sb = tl.load(sb_ptr + rows * stride_sb)")],
        mistake_zh="用输出的行来索引权重的缩放系数",
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
        mistake_zh="在 K 循环内把累加器乘以缩放系数（只有 K 放得进一个分块时才对）",
    ),
    Mutant(
        "fp8_matmul",
        "no_k_mask_on_b",
        "loads the weight codes without the K mask",
        [("mask=k_in[:, None], other=0.0)", ")")],
        mistake_zh="加载权重码值时没有 K 掩码",
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
        mistake_zh="存储整个分块，越过了 c 的边缘",
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
    Mutant(
        "int8_matmul",
        "scales_assumed_contiguous",
        "passes the scales' strides as if the (N, K // G) scales were contiguous (row stride K // G, column stride 1)",
        [
            (
                "scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),",
                "scales.shape[1], 1, y.stride(0), y.stride(1),",
            )
        ],
        mistake_zh="按连续内存传递 scales 的步长（行步长 K // G，列步长 1），不管它的实际布局",
    ),
    Mutant(
        "fp8_matmul",
        "scales_assumed_contiguous",
        "passes 1 as the row stride of both (M, 1) and (N, 1) scales, as if each were a contiguous column",
        [("scale_a.stride(0), scale_b.stride(0),", "1, 1,")],
        mistake_zh="把 (M, 1) 和 (N, 1) 两个 scale 的行步长都当作 1，好像它们都是连续的一列",
    ),
]
