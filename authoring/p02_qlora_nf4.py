"""Source of 02_PyTorch_Algorithms/22_QLoRA_NF4.ipynb (build with `python -m llm_algo build p02.qlora_nf4`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.qlora_nf4",
        path="02_PyTorch_Algorithms/22_QLoRA_NF4.ipynb",
        title_en="4-bit NormalFloat (NF4) and QLoRA's double quantisation",
        title_zh="4 位 NormalFloat（NF4）量化与 QLoRA 双重量化",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p02.lora", "p01.number_formats"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - QLoRA：冻结的主干权重以 4 位 NF4 存储，只训练 16 位的 LoRA 适配器；65B 模型的微调从 >780 GB 显存降到单张 48 GB GPU。
        - NF4 码本（code book）：16 个值取自标准正态分布的分位数（quantile），归一化到 $[-1, 1]$，恰好包含 0；正侧 8 个、负侧 7 个，偏移 $\delta = \tfrac12(\tfrac1{30} + \tfrac1{32})$。
        - 分块 absmax 量化：每 64 个权重一块，除以块内最大绝对值后取**最近的**码本值，存 4 位索引，两个索引打包成一个字节（第一个在高 4 位）。
        - 双重量化（double quantization）：每块的 fp32 absmax 本身再量化——减去均值后，每 256 个一组用 8 位（这里用 fp8 e4m3）存储，外加每组一个 fp32 缩放。
        - 每参数字节数：$0.5 + 4/64 = 0.5625$ B（4.5 位）；双重量化后 $0.5 + 1/64 + 4/(64\cdot256) \approx 0.5159$ B（约 4.127 位）。
        - 对正态分布的权重，NF4 的误差明显小于均匀 int4。
        {易错点}

        Fine-tuning LLaMA-65B in 16-bit takes more than 780 GB of GPU memory; QLoRA fine-tunes it on a single 48 GB
        GPU, with the frozen base model stored in 4 bits and LoRA adapters trained in bf16 on top, and its Guanaco
        models matched 16-bit fine-tuning (Dettmers et al., 2023, *QLoRA: Efficient Finetuning of Quantized LLMs*,
        abstract and §4). Three ideas make it work: the **4-bit NormalFloat** data type (NF4), whose 16 levels sit
        at quantiles of a normal distribution, because pre-trained weights are close to normal; **blockwise absmax**
        scaling over blocks of 64 weights, so that one outlier spoils 64 weights, not a whole matrix; and **double
        quantisation** of those scales, which saves another 0.373 bits per parameter (about 3 GB on a 65B model).
        All of it lives in bitsandbytes (`bnb.nn.Linear4bit`, `bnb.functional.quantize_4bit`), which Hugging Face
        loads with `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`.

        **You will implement** the NF4 code book from the normal quantile function, blockwise NF4 quantisation with
        two codes per byte and its inverse, double quantisation of the scales (block 256, fp8), and the bytes per
        parameter. **Graded against** the published code book (bitsandbytes' `NF4` table, also QLoRA's appendix),
        a float64 spec of the quantiser written with decision thresholds (bitsandbytes' `dQuantizeNF4` compares
        against the midpoints), exact round trips of code book values, error bounds, and the paper's bit counts.
    """
    )
    lesson.md(r"""
        ## 1. The NF4 code book

        A $k$-bit quantile quantiser gives each of its $2^k$ levels the same probability mass under the data's
        distribution. For $w \sim \mathcal N(0, \sigma^2)$, normalised by the block's absmax, the levels are quantiles of
        the standard normal, $\Phi^{-1}(p)$, rescaled to $[-1, 1]$. Two details make NF4 (QLoRA, §3 and appendix E):

        - **An exact zero.** Zero padding and zero weights must round-trip exactly, so NF4 is asymmetric: 8 levels
          from the positive half, 7 from the negative half, and 0.
        - **Finite ends.** $\Phi^{-1}(1) = \infty$, so the outermost quantile is taken at $p_{\max} = 1 - \delta$ with
          $\delta = \tfrac12\big(\tfrac1{30} + \tfrac1{32}\big)$, i.e. $p_{\max} = 0.9677083$.

        $$
        q^{+}_i = \Phi^{-1}\!\Big(p_{\max} + \tfrac{i}{8}(0.5 - p_{\max})\Big),\ i = 0..7;\qquad
        q^{-}_j = -\Phi^{-1}\!\Big(p_{\max} + \tfrac{j}{7}(0.5 - p_{\max})\Big),\ j = 0..6;
        $$

        i.e. `linspace(p_max, 0.5, 9)[:-1]` and `linspace(p_max, 0.5, 8)[:-1]`. The code book is the sorted
        $\{q^+\} \cup \{0\} \cup \{q^-\}$ divided by its largest value $q^+_0 = \Phi^{-1}(p_{\max}) \approx 1.848$: 16 values
        from $-1$ to $1$, index 7 is zero. $\Phi^{-1}$ is `torch.special.ndtri` (or $\sqrt2\,\mathrm{erf}^{-1}(2p-1)$).

        ## 2. Blockwise absmax quantisation, two codes per byte

        Flatten the weight ($n$ values) and cut it into $\lceil n / 64 \rceil$ blocks (the last one may be shorter). For
        block $b$ with $a_b = \max_{i \in b} |w_i|$ (fp32), each weight is stored as the index of the code book value
        nearest to $w_i / a_b$:

        $$
        c_i = \operatorname*{argmin}_{k \in 0..15} \big|\, w_i / a_b - \text{NF4}_k \big|,\qquad
        \hat w_i = \text{NF4}_{c_i} \cdot a_b .
        $$

        (An all-zero block has $a_b = 0$: store index 7 and dequantise to 0, without dividing by zero.) Two 4-bit
        indices go into one byte, the first in the high nibble, as bitsandbytes packs them:
        $\text{byte}_j = 16\,c_{2j} + c_{2j+1}$ (a zero low nibble pads an odd $n$). The largest error is half the widest
        gap between neighbours, the one from $-1$ to $-0.6962$: $\tfrac12(1 - 0.6962)\,a_b = 0.1519\,a_b$.

        ## 3. Double quantisation of the scales

        One fp32 absmax per 64 weights costs $32/64 = 0.5$ bits per parameter. QLoRA quantises the absmax values
        themselves: subtract their mean $\mu$ (they are all positive; centring uses the 8-bit range better), cut them
        into blocks of 256, and store each centred value in 8 bits with one fp32 scale per block. bitsandbytes uses
        its own 8-bit "dynamic" float map for that; here you use `torch.float8_e4m3fn` (3 mantissa bits, largest
        value 448), which behaves the same way, a relative error of at most $2^{-4}$:

        $$
        s_g = \max_{i \in g} |a_i - \mu| \,/\, 448,\qquad d_i = \mathrm{fp8}\big((a_i - \mu)/s_g\big),\qquad \hat a_i = d_i\, s_g + \mu .
        $$

        **Bytes per parameter** with blocks of $B_1$ weights and $B_2$ scales:

        $$
        \underbrace{\tfrac12}_{\text{4-bit codes}} + \underbrace{\tfrac{4}{B_1}}_{\text{fp32 absmax}}
        \quad\text{or, double-quantised,}\quad \tfrac12 + \tfrac{1}{B_1} + \tfrac{4}{B_1 B_2}.
        $$

        For $B_1 = 64$, $B_2 = 256$: 0.5625 B (4.5 bits) against 0.51587 B (4.127 bits): the paper's "from
        $32/64 = 0.5$ bits per parameter to $8/64 + 32/(64 \cdot 256) = 0.127$ bits" for the constants (§3).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch

        # The NF4 table as published in bitsandbytes (functional.py, get_4bit_type("nf4")) and QLoRA's appendix E.
        NF4 = torch.tensor([
            -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
            -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
            0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
            0.7229568362236023, 1.0,
        ])
        FP8 = torch.float8_e4m3fn
        FP8_MAX = torch.finfo(FP8).max  # 448
    """)
    lesson.md(r"""
        ## 4. Exercise `nf4_code_book`

        Derive the table above from $\Phi^{-1}$. The offset is a parameter, so the function is the construction, not
        a copy of the table.
    """)
    lesson.exercise(
        "nf4_code_book",
        r'''
        def nf4_code_book(offset: float = 0.9677083) -> torch.Tensor:
            """The 16 NF4 levels, sorted, float32, in [-1, 1] with exactly one 0: 8 normal quantiles at
            linspace(offset, 0.5, 9)[:-1], 7 negated quantiles at linspace(offset, 0.5, 8)[:-1], and 0, divided by the
            largest. Requires 0.5 < offset < 1, else ValueError."""
            # TODO: validate the offset
            # TODO: the two sets of quantiles (in float64), the zero, sort, normalise by the maximum
            ### BEGIN SOLUTION
            if not 0.5 < offset < 1:
                raise ValueError(f"offset must be in (0.5, 1), got {offset}")
            positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])  # 8 values > 0
            negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])  # 7 values < 0
            levels = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values  # (16,)
            return (levels / levels.max()).to(torch.float32)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercises `quantize_nf4` and `dequantize_nf4`

        Use the `NF4` table of the setup cell (so that these exercises do not depend on the first one).
    """)
    lesson.exercise(
        "quantize_nf4",
        r'''
        def quantize_nf4(weight: torch.Tensor, block_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
            """Blockwise absmax NF4 of a floating tensor of any shape (n > 0 finite values, read flattened).

            Returns (packed, absmax): packed (ceil(n / 2),) uint8 with the first code of each pair in the high nibble;
            absmax (ceil(n / block_size),) float32, one per block (the last block may be shorter). Each code is the index
            of the NF4 value nearest to w / absmax; an all-zero block stores code 7 (zero).
            Raises ValueError for a non-floating or empty weight, non-finite values, block_size < 1."""
            # TODO: validate; flatten to float32; pad to whole blocks; absmax per block (guard zero blocks)
            # TODO: nearest NF4 index per value; drop the padding; pack two codes per byte (high nibble first)
            ### BEGIN SOLUTION
            if not weight.is_floating_point() or weight.numel() == 0:
                raise ValueError(f"need a non-empty floating tensor, got {tuple(weight.shape)} {weight.dtype}")
            if block_size < 1:
                raise ValueError(f"block_size must be >= 1, got {block_size}")
            flat = weight.detach().reshape(-1).to(torch.float32)  # (n,)
            if not bool(torch.isfinite(flat).all()):
                raise ValueError("weight has inf or NaN values")
            n = flat.numel()
            num_blocks = math.ceil(n / block_size)
            padded = torch.zeros(num_blocks * block_size, dtype=torch.float32)
            padded[:n] = flat
            blocks = padded.view(num_blocks, block_size)  # (blocks, block_size); zero padding never raises a max
            absmax = blocks.abs().amax(dim=1)  # (blocks,)
            scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))  # an all-zero block: divide by 1
            normalised = blocks / scale[:, None]  # in [-1, 1]
            codes = (normalised[..., None] - NF4).abs().argmin(dim=-1).reshape(-1)[:n]  # (n,) nearest level
            if n % 2:
                codes = torch.cat([codes, torch.zeros(1, dtype=codes.dtype)])  # pad the last low nibble
            packed = (codes[0::2] << 4 | codes[1::2]).to(torch.uint8)  # (ceil(n/2),)
            return packed, absmax
            ### END SOLUTION
    ''',
    )
    lesson.exercise(
        "dequantize_nf4",
        r'''
        def dequantize_nf4(packed: torch.Tensor, absmax: torch.Tensor, shape, block_size: int = 64) -> torch.Tensor:
            """Inverse of quantize_nf4: NF4[code] * absmax of its block, float32, reshaped to `shape`.
            Raises ValueError when packed is not uint8, or when packed/absmax do not have the sizes `shape` implies."""
            # TODO: validate the sizes; unpack the high and low nibbles in order; look up NF4; scale by each block's absmax
            ### BEGIN SOLUTION
            n = math.prod(shape)
            if packed.dtype != torch.uint8 or packed.numel() != math.ceil(n / 2):
                raise ValueError(f"need {math.ceil(n / 2)} uint8 bytes for shape {tuple(shape)}, got {packed.numel()} {packed.dtype}")
            if block_size < 1 or absmax.numel() != math.ceil(n / block_size):
                raise ValueError(f"need {math.ceil(n / max(block_size, 1))} absmax values, got {absmax.numel()}")
            codes = torch.stack([packed >> 4, packed & 0xF], dim=1).reshape(-1)[:n].long()  # (n,) high nibble first
            block_of = torch.arange(n) // block_size  # (n,) which block each value belongs to
            return (NF4[codes] * absmax.to(torch.float32)[block_of]).reshape(shape)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `double_quant`
    """)
    lesson.exercise(
        "double_quant",
        r'''
        def double_quantize(absmax: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """absmax (m,) floating, m >= 1. Returns (codes (m,) uint8 holding float8_e4m3fn bits, scales (ceil(m /
            block_size),) float32, offset 0-d float32): offset = mean(absmax); per block of block_size centred values,
            scale = max |centred| / 448 (1 for an all-zero block) and codes = fp8(centred / scale).
            Raises ValueError for an empty or non-1-D absmax, or block_size < 1."""
            # TODO: validate; centre; pad to whole blocks; per-block scale; cast to FP8 and view the bytes as uint8
            ### BEGIN SOLUTION
            if absmax.dim() != 1 or absmax.numel() == 0 or block_size < 1:
                raise ValueError(f"need a non-empty (m,) absmax and block_size >= 1, got {tuple(absmax.shape)}, {block_size}")
            values = absmax.to(torch.float32)
            offset = values.mean()  # the absmax values are all >= 0: centring uses both signs of the 8-bit range
            centred = values - offset
            m = centred.numel()
            num_blocks = math.ceil(m / block_size)
            padded = torch.zeros(num_blocks * block_size, dtype=torch.float32)
            padded[:m] = centred
            blocks = padded.view(num_blocks, block_size)
            block_max = blocks.abs().amax(dim=1)  # (blocks,)
            scales = torch.where(block_max > 0, block_max / FP8_MAX, torch.ones_like(block_max))
            codes = (blocks / scales[:, None]).to(FP8).view(torch.uint8).reshape(-1)[:m]  # round to nearest fp8
            return codes, scales, offset
            ### END SOLUTION


        def double_dequantize(codes: torch.Tensor, scales: torch.Tensor, offset: torch.Tensor, block_size: int = 256) -> torch.Tensor:
            """Inverse of double_quantize: (m,) float32 absmax. Raises ValueError for mismatched sizes or non-uint8 codes."""
            # TODO: validate; reinterpret the bytes as FP8; scale per block; add the offset back
            ### BEGIN SOLUTION
            m = codes.numel()
            if codes.dtype != torch.uint8 or codes.dim() != 1 or block_size < 1 or scales.numel() != math.ceil(m / block_size):
                raise ValueError(f"need (m,) uint8 codes and ceil(m / block_size) scales, got {tuple(codes.shape)} {codes.dtype}, {scales.numel()}")
            block_of = torch.arange(m) // block_size
            return codes.view(FP8).to(torch.float32) * scales[block_of] + offset
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `bytes_per_parameter`
    """)
    lesson.exercise(
        "bytes_per_parameter",
        r'''
        def bytes_per_parameter(block_size: int = 64, double_quant: bool = False, dq_block_size: int = 256) -> float:
            """Storage per weight of blockwise NF4 for many weights (ignore partial blocks and the one offset): 4-bit
            codes + one fp32 absmax per block, or, double-quantised, one byte per block + one fp32 scale per dq block.
            Raises ValueError for block sizes < 1."""
            # TODO: validate; the closed form of section 3
            ### BEGIN SOLUTION
            if block_size < 1 or dq_block_size < 1:
                raise ValueError(f"block sizes must be >= 1, got {block_size}, {dq_block_size}")
            codes = 0.5  # 4 bits
            if not double_quant:
                return codes + 4 / block_size
            return codes + 1 / block_size + 4 / (block_size * dq_block_size)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### NF4 against a uniform 4-bit grid

        Weights drawn from $\mathcal N(0, 0.02^2)$ (a typical init scale), quantised in blocks of 64 with NF4 and with
        a symmetric uniform grid of 15 levels (int4 absmax, $[-7, 7] \cdot a_b / 7$). Left: where the 16 levels sit
        against the distribution of $w / a_b$; right: the mean squared error of each, and of NF4 with double-quantised
        scales.
    """)
    lesson.code(r"""
        try:
            torch.manual_seed(0)
            weight = torch.randn(256, 1024) * 0.02
            packed, absmax = quantize_nf4(weight)
            nf4_error = (dequantize_nf4(packed, absmax, weight.shape) - weight).pow(2).mean().item()
            codes, scales, offset = double_quantize(absmax)
            dq_absmax = double_dequantize(codes, scales, offset)
            dq_error = (dequantize_nf4(packed, dq_absmax, weight.shape) - weight).pow(2).mean().item()
            blocks = weight.view(-1, 64)
            block_max = blocks.abs().amax(1, keepdim=True)
            int4 = (torch.round(blocks / block_max * 7).clamp(-7, 7) * block_max / 7).view_as(weight)
            int4_error = (int4 - weight).pow(2).mean().item()

            fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
            left.hist((blocks / block_max).flatten().numpy(), bins=120, density=True, color="tab:gray", alpha=0.6)
            for level in NF4.tolist():
                left.axvline(level, color="tab:green", lw=0.8)
            for level in torch.linspace(-1, 1, 15).tolist():
                left.axvline(level, color="tab:red", lw=0.6, ls=":")
            left.set_xlabel("w / absmax of its block"); left.set_title("NF4 levels (green) vs int4 (red dotted)")
            right.bar(["int4 absmax", "NF4", "NF4 + double quant"], [int4_error, nf4_error, dq_error],
                      color=["tab:red", "tab:green", "tab:olive"])
            right.set_ylabel("mean squared error"); right.set_title("error on N(0, 0.02^2) weights, blocks of 64")
            fig.tight_layout()
            plt.show()
            print(f"MSE int4 {int4_error:.3e}, NF4 {nf4_error:.3e} ({int4_error / nf4_error:.2f}x lower), "
                  f"NF4 + double quant {dq_error:.3e}")
            for dq in (False, True):
                bpp = bytes_per_parameter(64, dq)
                print(f"double_quant={dq}: {bpp:.5f} B/param = {8 * bpp:.3f} bits; a 65B model: {65e9 * bpp / 1e9:.1f} GB")
        except NotImplementedError:
            print("the exercises are not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`nf4_code_book`.** The quantiles are taken in float64 (`ndtri` near $p = 0.97$ is well conditioned) and
        only the result is rounded to float32; the published table agrees to about $10^{-7}$, the float32 rounding
        of scipy's `norm.ppf` in the original script. The asymmetry (8 + 7 + zero) is what keeps 0 exact.

        **`quantize_nf4`.** Padding with zeros to whole blocks keeps the code vectorised and cannot change a block's
        absmax. The nearest level is an `argmin` over the 16 distances, $O(16n)$ work; bitsandbytes' CUDA kernel
        instead walks a 4-level binary tree of midpoint thresholds (`dQuantizeNF4`), the same answer in four
        comparisons. `codes[0::2] << 4 | codes[1::2]` packs the pairs. Zero blocks divide by 1.

        **`dequantize_nf4`.** Unpack with `>> 4` and `& 0xF` in that order, drop the pad nibble, gather the levels,
        scale by each value's block. In QLoRA this runs inside every forward and backward pass of the frozen base
        (`bnb.matmul_4bit` dequantises to bf16 tile by tile), so it is bandwidth-bound and fused in a kernel.

        **`double_quantize`.** Centring matters: the absmax values are all positive, and without the offset half of
        the fp8 codes (the negative ones) would never be used. The fp8 cast rounds to nearest-even; viewing the bytes
        as `uint8` is how the codes are stored.

        **The usual mistakes, and why they are wrong**: a symmetric code book
        without zero, the wrong linspace lengths, normalising by the wrong end; scaling by the absmax of the whole
        tensor, truncation instead of the nearest level, a zero block divided by zero, the nibbles swapped, the last
        partial block dropped; the mean not subtracted, int8 rounding instead of fp8, scales from the whole tensor;
        4 bytes per code, the fp32 absmax counted as 1 byte.

        **What production code does.** `bitsandbytes.functional.quantize_4bit(w, blocksize=64, quant_type="nf4",
        compress_statistics=True)` returns the packed bytes and a `QuantState` holding the absmax (itself quantised by
        `quantize_blockwise` with a 256-block dynamic map, and an `offset`), the code book, the dtype and the shape;
        `bnb.nn.Params4bit` quantises a weight when it is moved to the GPU. The LoRA adapters of QLoRA stay in bf16;
        the optimizer states live in paged memory (another QLoRA contribution) to survive memory spikes. GPTQ, AWQ and
        HQQ are post-training alternatives that choose the rounding to minimise the layer's output error instead of
        rounding each weight to its nearest level; FP4/MXFP4 (microscaling, block 32 with an 8-bit power-of-two
        scale) is the hardware-native successor on Blackwell GPUs.
    """)
    lesson.mistakes()
    return lesson
