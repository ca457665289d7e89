"""Source of 01_Hardware_Math_Systems/04_Number_Formats.ipynb (build with `python -m llm_algo build p01.number_formats`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.number_formats",
        path="01_Hardware_Math_Systems/04_Number_Formats.ipynb",
        title_en="Number formats: FP32, BF16, FP16, FP8 bit by bit",
        title_zh="数值格式：逐位理解 FP32、BF16、FP16 与 FP8",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=[],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 浮点数 = 符号位 (sign) + 指数位 (exponent, 带偏置 bias $=2^{E-1}-1$) + 尾数位 (mantissa)；规格化数
          $(-1)^s\,2^{e-\text{bias}}(1+m/2^M)$，指数全 0 为次正规数 (subnormal) $2^{1-\text{bias}}\,m/2^M$。
        - 指数位数决定范围 (range)，尾数位数决定精度 (precision)：机器精度 $\varepsilon = 2^{-M}$。
        - BF16 就是 FP32 的高 16 位：范围与 FP32 相同，只有 8 位有效数字；FP16 精度更高但 65504 以上溢出。
        - 舍入到最近、平局取偶 (round-to-nearest-even)：`(u + 0x7FFF + lsb) >> 16`，NaN 必须单独处理。
        - FP8 有两种：E4M3FN（最大 448，没有 inf，只有一个 NaN 编码）和 E5M2（最大 57344，有 inf）。
        - 饱和 (saturation)：生产系统把溢出值截到最大有限值，而不是变成 inf/NaN。
        - 本节所有编码器都与 `torch` 的类型转换逐位比对，但你的代码里不能出现 bf16/fp8 张量。
        {易错点}

        An 8-billion-parameter model is 32 GB of weights in FP32, 16 GB in BF16 and 8 GB in FP8; an NVIDIA H100 SXM
        multiplies FP8 matrices at 1979 dense TFLOP/s, twice its 989 TFLOP/s in BF16 (NVIDIA H100 Tensor Core GPU
        datasheet). DeepSeek-V3 was trained with most of its matrix multiplications in FP8 E4M3 (DeepSeek-V3 Technical
        Report, arXiv:2412.19437, section 3.3). Every one of those savings is paid for in rounding error, lost range,
        and a handful of edge cases (ties, overflow, NaN, subnormals) that decide whether a run trains or diverges.

        **You will implement** the range/precision table of any binary float format from its bit layout, and bit-level
        encoders and decoders for BF16 and for both FP8 formats, with round-to-nearest-even, subnormals, saturation
        and NaN, using only integer operations on the bits. **Graded against** `torch.finfo`, an enumeration of every
        code of small formats, and PyTorch's own dtype casts (`torch.bfloat16`, `torch.float8_e4m3fn`,
        `torch.float8_e5m2`), bit for bit over every 8- and 16-bit pattern and a million random float32 patterns.
    """
    )
    lesson.md(r"""
        ## 1. Where the bits go

        A binary floating-point format with $E$ exponent bits and $M$ mantissa (fraction) bits stores
        $1 + E + M$ bits: a sign $s$, a biased exponent $e \in [0, 2^E - 1]$ and a fraction $m \in [0, 2^M - 1]$.
        With the bias $b = 2^{E-1} - 1$ (127 for FP32 and BF16, 15 for FP16 and E5M2, 7 for E4M3):

        $$
        x = \begin{cases}
        (-1)^s \; 2^{\,e - b} \; \left(1 + m / 2^M\right) & 1 \le e \quad \text{(normal: an implicit leading 1)}\\
        (-1)^s \; 2^{\,1 - b} \; \left(m / 2^M\right) & e = 0 \quad \text{(subnormal, and } \pm 0\text{)}
        \end{cases}
        $$

        What the top exponent $e = 2^E - 1$ means is where the formats differ:

        | convention | top exponent $e = 2^E-1$ | formats |
        | --- | --- | --- |
        | `ieee` | reserved: $m = 0$ is $\pm\infty$, $m \ne 0$ is NaN | FP64, FP32, FP16, BF16, FP8 E5M2 |
        | `fn` ("finite, NaN") | ordinary numbers, except the all-ones fraction, which is NaN; no infinity | FP8 E4M3FN |
        | `none` | ordinary numbers; no infinity, no NaN | OCP MX FP6 (E2M3, E3M2), FP4 (E2M1) |

        From the layout follow the four numbers that describe a format:

        - **largest finite value** $x_{\max}$: the largest exponent and fraction that are not special;
        - **smallest normal** $2^{1-b}$ and **smallest subnormal** $2^{1-b-M}$: below the smallest normal the spacing
          stays fixed at $2^{1-b-M}$ (gradual underflow) instead of jumping to 0;
        - **machine epsilon** $\varepsilon = 2^{-M}$: the gap between 1 and the next value. Round-to-nearest makes a
          relative error of at most $\varepsilon/2$ (the *unit roundoff*), anywhere in the normal range.

        `E = 8, M = 7` is BF16 (Kalamkar et al., 2019, *A Study of BFLOAT16 for Deep Learning Training*,
        arXiv:1905.12322): FP32's exponent, so FP32's range, with 16 fewer fraction bits. `E = 5, M = 10` is IEEE FP16:
        three more fraction bits than BF16, but nothing above 65504, which is why FP16 training needs loss scaling and
        BF16 training does not. The two FP8 formats come from Micikevicius et al., 2022 (*FP8 Formats for Deep
        Learning*, arXiv:2209.05433): E4M3 for weights and activations (more precision), E5M2 for gradients (more
        range).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch

        FP8_FORMATS = {"e4m3fn": (4, 3), "e5m2": (5, 2)}  # name -> (exponent bits, mantissa bits)


        def bit_string(bits: int, exponent_bits: int, mantissa_bits: int) -> str:
            '''An unsigned bit pattern as "s eeeee mm" (for printing while you debug).'''
            text = format(bits & ((1 << (1 + exponent_bits + mantissa_bits)) - 1), f"0{1 + exponent_bits + mantissa_bits}b")
            return f"{text[0]} {text[1:1 + exponent_bits]} {text[1 + exponent_bits:]}"


        print(bit_string(0x3F80, 8, 7), "is 1.0 in bf16;", bit_string(0x7E, 4, 3), "is 448 in e4m3fn")
    """)
    lesson.md(r"""
        ## 2. Exercise `float_format_limits`: the table, from the layout

        Return the four numbers of a format as Python floats, for any `exponent_bits >= 2`, `mantissa_bits >= 1` and
        one of the three conventions above. Refuse anything else with a `ValueError` that says why. Check yourself
        on E4M3FN: the top exponent is ordinary, so $x_{\max} = 2^{15-7} \cdot (1 + 6/8) = 448$ (the fraction 7/8 is
        NaN); under the `ieee` rule the same 8 bits would stop at $2^{14-7} \cdot 1.875 = 240$.
    """)
    lesson.exercise(
        "float_format_limits",
        r'''
        def float_format_limits(exponent_bits: int, mantissa_bits: int, special: str = "ieee") -> dict[str, float]:
            """{"max", "smallest_normal", "smallest_subnormal", "eps"} of a binary float format, as Python floats.

            special: "ieee" (top exponent = inf/NaN), "fn" (top exponent finite, all-ones fraction = NaN),
                     "none" (no inf, no NaN). Raises ValueError for other conventions, exponent_bits < 2,
                     or mantissa_bits < 1.
            """
            # TODO: validate the arguments
            # TODO: bias = 2**(E-1) - 1; the largest exponent and fraction that are not special, for each convention
            # TODO: smallest normal 2**(1 - bias), smallest subnormal 2**(1 - bias - M), eps 2**-M
            ### BEGIN SOLUTION
            if special not in ("ieee", "fn", "none"):
                raise ValueError(f"special must be 'ieee', 'fn' or 'none', not {special!r}")
            if exponent_bits < 2 or mantissa_bits < 1:
                raise ValueError(f"need exponent_bits >= 2 and mantissa_bits >= 1, got {exponent_bits}, {mantissa_bits}")
            bias = 2 ** (exponent_bits - 1) - 1
            top_exponent = 2**exponent_bits - 1 - bias  # unbiased value of the all-ones exponent field
            ulp_of_one = 2.0**-mantissa_bits
            if special == "ieee":  # the all-ones exponent is inf/NaN: one exponent lower, every fraction
                largest = 2.0 ** (top_exponent - 1) * (2 - ulp_of_one)
            elif special == "fn":  # all-ones exponent is finite, but its all-ones fraction is NaN: one fraction lower
                largest = 2.0**top_exponent * (2 - 2 * ulp_of_one)
            else:  # no special values at all
                largest = 2.0**top_exponent * (2 - ulp_of_one)
            return {
                "max": largest,
                "smallest_normal": 2.0 ** (1 - bias),
                "smallest_subnormal": 2.0 ** (1 - bias - mantissa_bits),
                "eps": ulp_of_one,
            }
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The table, generated

        Every number below comes from your function (or from `torch.finfo` while it is not written yet). "Decimal
        digits" is $\log_{10} 2^{M+1}$, the number of significant decimal digits the fraction carries; "dynamic range"
        is $\log_{10}(x_{\max} / x_{\min,\text{subnormal}})$ in decades.
    """)
    lesson.code(r"""
        FORMATS = [  # name, E, M, convention, torch dtype (None: no torch dtype)
            ("fp32", 8, 23, "ieee", torch.float32),
            ("tf32 (tensor cores)", 8, 10, "ieee", None),
            ("fp16", 5, 10, "ieee", torch.float16),
            ("bf16", 8, 7, "ieee", torch.bfloat16),
            ("fp8 e4m3fn", 4, 3, "fn", torch.float8_e4m3fn),
            ("fp8 e5m2", 5, 2, "ieee", torch.float8_e5m2),
            ("fp6 e2m3 (OCP MX)", 2, 3, "none", None),
            ("fp6 e3m2 (OCP MX)", 3, 2, "none", None),
            ("fp4 e2m1 (OCP MX)", 2, 1, "none", None),
        ]


        def limits(E, M, special, dtype):
            try:
                return float_format_limits(E, M, special), "yours"
            except NotImplementedError:
                if dtype is None:
                    return None, "-"
                info = torch.finfo(dtype)
                return {"max": info.max, "smallest_normal": info.smallest_normal,
                        "smallest_subnormal": info.smallest_normal * info.eps, "eps": info.eps}, "torch.finfo"


        print(f"{'format':20} {'bits':>4} {'max':>10} {'min normal':>10} {'min subnorm':>11} {'eps':>9} "
              f"{'digits':>6} {'decades':>7}  source")
        for name, E, M, special, dtype in FORMATS:
            row, source = limits(E, M, special, dtype)
            if row is None:
                print(f"{name:20} {1 + E + M:4}   (write float_format_limits to fill this row)")
                continue
            digits = (M + 1) * math.log10(2)
            decades = math.log10(row["max"] / row["smallest_subnormal"])
            print(f"{name:20} {1 + E + M:4} {row['max']:10.4g} {row['smallest_normal']:10.3g} "
                  f"{row['smallest_subnormal']:11.3g} {row['eps']:9.3g} {digits:6.2f} {decades:7.1f}  {source}")
    """)
    lesson.md(r"""
        Read the table before moving on. BF16 has FP32's normal range (its subnormals stop earlier: 79 decades
        against 83); FP16 covers 12 decades and tops out at 65504: an activation of 300 squared in an FP16 RMSNorm is already `inf`. BF16 carries fewer than 3 decimal
        digits: `256 + 1` rounds back to 256, so a long sum accumulated in BF16 stalls (which is why matmuls accumulate
        in FP32 and optimizers keep FP32 master weights). E4M3FN spends the top exponent on numbers instead of
        infinities and reaches 448 instead of 240; E5M2 keeps IEEE's inf/NaN and reaches 57344. The OCP Microscaling
        (MX) v1.0 specification (2023) lists the same maxima for its FP6 and FP4 element types: 7.5 (E2M3), 28 (E3M2)
        and 6 (E2M1).

        ## 3. BF16: the top half of an FP32

        BF16 has FP32's sign and exponent fields exactly, and the first 7 of FP32's 23 fraction bits. So **decoding is
        a shift**: put the 16 bits in the top half of a 32-bit word and read that word as an FP32.

        **Encoding must round.** Dropping the low 16 bits (truncation) always rounds towards zero: a biased error that
        accumulates over millions of updates. IEEE's default is *round to nearest, ties to even*: pick the nearer of
        the two BF16 neighbours; on an exact tie (the low 16 bits are exactly `0x8000`), pick the one whose last kept
        bit is 0, so ties go up and down equally often. On the 32-bit pattern $u$ this is one integer addition:

        $$
        \text{bf16}(u) = \big(u + \texttt{0x7FFF} + \text{lsb}\big) \gg 16,\qquad \text{lsb} = (u \gg 16)\,\&\,1 .
        $$

        Below a tie the addition never carries into bit 16; above a tie it always does; on a tie it carries exactly
        when the kept part is odd. A carry out of the fraction increments the exponent, which is what rounding
        $1.1111111\ldots_2 \cdot 2^k$ up to $1.0 \cdot 2^{k+1}$ must do, and rounding the largest FP32 numbers up
        lands on the pattern of $\infty$, which is correct too.

        **NaN is the exception.** A NaN has the all-ones exponent and any non-zero fraction. If the non-zero bits are
        all in the low half (`0x7F800001`, a signalling NaN), the addition either drops them (giving `0x7F80`, which is
        $+\infty$) or carries into the sign bit. Test for NaN first and return a NaN pattern: any
        sign and any non-zero 7-bit fraction are valid. PyTorch's scalar code returns `0x7FC0`, its vectorised CPU code
        `0xFFFF` (see the demo below), so the checks only require *a* NaN.

        Your functions work on **bit patterns**: the encoder returns the 16 bits as an `int16` tensor (so that
        `bf16_encode(x).view(torch.bfloat16)` is a real BF16 tensor), and the decoder takes an `int16` tensor. A
        float32 tensor's bits are `x.view(torch.int32)`, and `t.view(torch.float32)` reinterprets an `int32` tensor:
        both are free (no copy, no conversion). Integer shifts in PyTorch are arithmetic (`>>` copies the sign bit),
        which is what you want here: the top 16 bits of an `int32`, shifted down, are exactly the `int16` pattern.

        **Rule of the exercise:** no BF16, FP16 or FP8 tensor may appear while your code runs: no `.to(torch.bfloat16)`,
        no `.view(torch.bfloat16)`, no `.half()`. The checks watch every torch call your functions make.
    """)
    lesson.exercise(
        "bf16_codec",
        r'''
        def bf16_decode(bits: torch.Tensor) -> torch.Tensor:
            """BF16 bit patterns (int16, any shape) -> their float32 values, exactly (same shape)."""
            if not isinstance(bits, torch.Tensor) or bits.dtype != torch.int16:
                raise TypeError(f"bf16_decode expects an int16 tensor of bit patterns, got {getattr(bits, 'dtype', type(bits))}")
            # TODO: move the 16 bits to the top half of a 32-bit word and reinterpret it as float32
            ### BEGIN SOLUTION
            return (bits.to(torch.int32) << 16).view(torch.float32)
            ### END SOLUTION


        def bf16_encode(x: torch.Tensor) -> torch.Tensor:
            """float32 (any shape) -> BF16 bit patterns (int16, same shape), round to nearest, ties to even.

            Overflow rounds to +-inf; every NaN becomes a NaN pattern."""
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
                raise TypeError(f"bf16_encode expects a float32 tensor, got {getattr(x, 'dtype', type(x))}")
            # TODO: the int32 bit pattern of x; add the rounding bias 0x7FFF + (the last kept bit); keep the top 16 bits
            # TODO: NaN inputs (exponent all ones, fraction non-zero) must give a NaN pattern
            ### BEGIN SOLUTION
            bits = x.view(torch.int32)  # (...,) the same 32 bits, as a signed integer
            last_kept_bit = (bits >> 16) & 1
            rounded = (bits + 0x7FFF + last_kept_bit) >> 16  # ties to even; a carry bumps the exponent
            is_nan = (bits & 0x7FFFFFFF) > 0x7F800000  # exponent all ones and a non-zero fraction
            quiet_nan = (bits >> 16) | 0x0040  # keep sign and exponent, force a fraction bit
            return torch.where(is_nan, quiet_nan, rounded).to(torch.int16)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        PyTorch's own conversion, and what it does with NaN on this machine (a demo, not graded):
    """)
    lesson.code(r"""
        samples = torch.tensor([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 256 + 1, 3.4e38, float("nan")])
        torch_bits = samples.to(torch.bfloat16).view(torch.int16)
        for value, theirs in zip(samples.tolist(), torch_bits.tolist()):
            try:
                mine = bit_string(int(bf16_encode(torch.tensor([value]))[0]), 8, 7)
            except NotImplementedError:
                mine = "(not written yet)"
            print(f"{value:>14.8g}  torch {bit_string(theirs, 8, 7)}  yours {mine}")
    """)
    lesson.md(r"""
        $1 + 2^{-8}$ is exactly halfway between 1 and $1 + 2^{-7}$: a tie, and 1 (fraction `0000000`, even) wins.
        $1 + 3 \cdot 2^{-8}$ is halfway between $1 + 2^{-7}$ (odd) and $1 + 2^{-6}$ (even): it rounds *up*. The largest
        float32, $3.4 \times 10^{38}$, rounds to infinity.

        ## 4. FP8: two formats, one algorithm

        | | E4M3FN | E5M2 |
        | --- | --- | --- |
        | bias | 7 | 15 |
        | largest finite | $0\,1111\,110 = 2^8 \cdot 1.75 = 448$ | $0\,11110\,11 = 2^{15} \cdot 1.75 = 57344$ |
        | infinity | none | $0\,11111\,00$ |
        | NaN | $s\,1111\,111$ only (2 codes) | $s\,11111\,\{01,10,11\}$ (6 codes) |
        | smallest normal | $2^{-6}$ | $2^{-14}$ |
        | smallest subnormal | $2^{-9}$ | $2^{-16}$ |

        **Decoding** applies the formula of section 1 to each of the 256 codes. **Encoding** a float32 $x$ to a
        format with bias $b$ and $M$ fraction bits, on the integer fields of $x$ (exponent $e_{32}$, significand
        $S = 2^{23} + \text{fraction}$, so $|x| = S \cdot 2^{e_{32} - 127 - 23}$):

        1. the target's biased exponent is $e = e_{32} - 127 + b$;
        2. a normal result keeps the top $M+1$ bits of $S$: shift right by $k = 23 - M$; a subnormal one ($e \le 0$)
           keeps fewer: $k = 23 - M + (1 - e)$, because its scale is fixed at $2^{1-b}$;
        3. round the shifted-out bits to nearest, ties to even, exactly like BF16: $q = (S + 2^{k-1} - 1 + \text{lsb})
           \gg k$ with $\text{lsb} = (S \gg k)\,\&\,1$;
        4. the code is $(\max(e, 1) - 1) \cdot 2^M + q$: for a normal number that is $e \cdot 2^M + (q - 2^M)$ (the
           implicit 1 removed), for a subnormal just $q$. A carry in $q$ moves into the exponent by itself, also from
           the largest subnormal to the smallest normal;
        5. **overflow**: a code above the largest finite one becomes, with `saturate=True`, the largest finite value
           (with the sign); with `saturate=False` it becomes what an IEEE-style cast gives: $\pm\infty$ for E5M2 and
           NaN for E4M3FN, which has no infinity. $\pm\infty$ inputs follow the same rule;
        6. **NaN** in, NaN out (keep the sign: `0x7F` or `0xFF`), whatever `saturate` says; the sign bit is ORed in
           at the end, so $-0.0$ and tiny negative numbers give `0x80`.

        **Why saturate?** FP8 tensors are always *scaled*: a per-tensor (or per-block) factor maps the tensor's largest
        magnitude onto the format's largest value before the cast. An outlier that exceeds the scale computed from
        an earlier step's statistics (delayed scaling) should become 448, not NaN: one NaN in a matmul's input poisons
        a whole row of its output. NVIDIA's Transformer Engine and PyTorch's torchao float8 training clamp before
        casting, and Hopper's conversion instruction has a `.satfinite` modifier that does the same in hardware.
        Recent PyTorch versions saturate E4M3FN casts of finite overflow and infinity themselves (this machine's
        `torch` does; older ones gave NaN), and never saturate E5M2, which is why the checks compare
        `saturate=True` with `torch.clamp(x, -max, max).to(dtype)` and `saturate=False` with a plain cast (and
        NaN for E4M3FN beyond 464).

        Your encoder returns `uint8` codes (so `fp8_encode(x, "e4m3fn").view(torch.float8_e4m3fn)` is a real FP8
        tensor) and your decoder reads them back. The same rule as before: no BF16, FP16 or FP8 tensor inside.
    """)
    lesson.exercise(
        "fp8_decode",
        r'''
        def fp8_decode(codes: torch.Tensor, fmt: str) -> torch.Tensor:
            """FP8 codes (uint8, any shape) of format fmt ("e4m3fn" or "e5m2") -> float32 values, exactly."""
            if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
                raise TypeError(f"fp8_decode expects a uint8 tensor of codes, got {getattr(codes, 'dtype', type(codes))}")
            if fmt not in FP8_FORMATS:
                raise ValueError(f"unknown fp8 format {fmt!r}; expected one of {sorted(FP8_FORMATS)}")
            exponent_bits, mantissa_bits = FP8_FORMATS[fmt]
            bias = 2 ** (exponent_bits - 1) - 1
            # TODO: split each code into sign, biased exponent e and fraction m (integer ops)
            # TODO: normal 2**(e - bias) * (1 + m / 2**M); subnormal (e == 0) 2**(1 - bias) * m / 2**M
            # TODO: the special codes of each format (e4m3fn: s.1111.111 is NaN; e5m2: exponent 11111 is inf/NaN)
            # TODO: apply the sign last, so that code 0x80 decodes to -0.0
            ### BEGIN SOLUTION
            code = codes.to(torch.int32)
            exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
            fraction = (code & ((1 << mantissa_bits) - 1)).to(torch.float32) / 2**mantissa_bits  # exact in float32
            normal = torch.ldexp(1 + fraction, exponent - bias)
            subnormal = torch.ldexp(fraction, torch.tensor(1 - bias))
            magnitude = torch.where(exponent == 0, subnormal, normal)
            top = exponent == (1 << exponent_bits) - 1
            if fmt == "e4m3fn":  # the top exponent is finite; only its all-ones fraction is NaN
                magnitude = torch.where(top & (fraction == 1 - 2.0**-mantissa_bits), torch.nan, magnitude)
            else:  # IEEE-like: the top exponent is inf (fraction 0) or NaN
                magnitude = torch.where(top, torch.where(fraction == 0, torch.inf, torch.nan), magnitude)
            return torch.where((code & 0x80) != 0, -magnitude, magnitude)
            ### END SOLUTION
    ''',
    )
    lesson.exercise(
        "fp8_encode",
        r'''
        def fp8_encode(x: torch.Tensor, fmt: str, saturate: bool = True) -> torch.Tensor:
            """float32 (any shape) -> FP8 codes (uint8, same shape), round to nearest, ties to even.

            saturate=True: overflow and +-inf become +-max finite; saturate=False: +-inf for e5m2, NaN for e4m3fn.
            NaN stays NaN in both modes."""
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
                raise TypeError(f"fp8_encode expects a float32 tensor, got {getattr(x, 'dtype', type(x))}")
            if fmt not in FP8_FORMATS:
                raise ValueError(f"unknown fp8 format {fmt!r}; expected one of {sorted(FP8_FORMATS)}")
            exponent_bits, mantissa_bits = FP8_FORMATS[fmt]
            bias = 2 ** (exponent_bits - 1) - 1
            # TODO: sign bit (moved to bit 7), |x|'s bits, the target's biased exponent, the 24-bit significand
            # TODO: the right shift k (larger for subnormal results), round to nearest even, assemble the code
            # TODO: overflow (saturate or inf/NaN), then NaN, then OR the sign back in
            ### BEGIN SOLUTION
            bits = x.view(torch.int32)
            sign = (bits >> 24) & 0x80  # the sign bit, moved to bit 7
            magnitude = bits & 0x7FFFFFFF  # |x| as bits
            exponent = (magnitude >> 23) - 127 + bias  # the target's biased exponent (<= 0: subnormal result)
            significand = (magnitude & 0x7FFFFF) | 0x800000  # 1.fraction as a 24-bit integer
            shift = (23 - mantissa_bits + (1 - exponent).clamp(min=0)).clamp(max=30)  # beyond 25 everything is 0
            round_bias = (1 << (shift - 1)) - 1 + ((significand >> shift) & 1)  # ties to even
            kept = (significand + round_bias) >> shift
            code = ((exponent.clamp(min=1) - 1) << mantissa_bits) + kept  # a carry moves into the exponent
            largest = 0x7E if fmt == "e4m3fn" else 0x7B  # 448 and 57344
            overflow = largest if saturate else (0x7F if fmt == "e4m3fn" else 0x7C)  # NaN (no inf) or inf
            code = torch.where(code > largest, overflow, code)
            code = torch.where(magnitude > 0x7F800000, 0x7F, code)  # NaN stays NaN, also when saturating
            return (code | sign).to(torch.uint8)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What FP8 does to a tensor

        Left: the gap from each value to the next (one ulp), relative to the value, for each format: a sawtooth
        between $2^{-M-1}$ and $2^{-M}$ across the normal range, rising steeply through the subnormals on the left, and
        ending at the largest finite value on the right (BF16 runs on beyond the plot, to $3.4 \times 10^{38}$). Right:
        the relative error of rounding normally distributed numbers, scaled so that the largest one maps to the
        format's maximum (per-tensor scaling), through your encoder and decoder.
    """)
    lesson.code(r"""
        def relative_gap(dtype, codes):
            values = codes.view(dtype).float()
            values = values[torch.isfinite(values) & (values > 0)].sort().values
            return values[:-1], values.diff() / values[:-1]


        def encode_decode(x, fmt):
            try:
                return fp8_decode(fp8_encode(x, fmt), fmt), "yours"
            except NotImplementedError:
                dtype = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
                return x.to(dtype).float(), "torch"


        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        all16 = torch.arange(0, 1 << 15, dtype=torch.int32).to(torch.int16)
        all8 = torch.arange(0, 128, dtype=torch.int32).to(torch.uint8)
        for name, dtype, codes in (("bf16", torch.bfloat16, all16), ("fp16", torch.float16, all16),
                                   ("e4m3fn", torch.float8_e4m3fn, all8), ("e5m2", torch.float8_e5m2, all8)):
            value, gap = relative_gap(dtype, codes)
            left.loglog(value, gap, drawstyle="steps-post", label=name)
        left.set_xlim(1e-9, 1e6); left.set_xlabel("value x"); left.set_ylabel("(next value - x) / x")
        left.set_title("Relative spacing of representable numbers"); left.legend(fontsize=8)

        torch.manual_seed(0)
        x = torch.randn(100_000)
        for fmt, largest in (("e4m3fn", 448.0), ("e5m2", 57344.0)):
            scale = largest / x.abs().max()
            roundtrip, who = encode_decode(x * scale, fmt)
            rel = ((roundtrip / scale - x).abs() / x.abs()).clamp(min=1e-6)
            right.hist(rel.log10().numpy(), bins=80, histtype="step", label=f"{fmt} ({who}), median {rel.median():.1e}")
        right.set_xlabel("log10 relative error"); right.set_ylabel("count")
        right.set_title("N(0, 1) scaled to the format's max, rounded"); right.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        With 3 fraction bits, E4M3 rounds a typical value with a relative error around 2-3%; E5M2, with 2, about twice
        that. The long left tails are the small values that landed in the subnormal range, where the relative error
        grows: per-tensor scaling fits the outliers and sacrifices the small numbers. That is why DeepSeek-V3 scales
        FP8 activations per 1×128 tile and weights per 128×128 block instead of per tensor (arXiv:2412.19437, section
        3.3), and why the OCP MX formats attach one shared 8-bit exponent to every block of 32 values.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`float_format_limits`.** Everything follows from the bias and the convention for the top exponent. The only
        subtle line is $x_{\max}$: `ieee` loses the whole top exponent ($2^{e_{\text{top}}-1}(2 - 2^{-M})$), `fn`
        loses one fraction value of it ($2^{e_{\text{top}}}(2 - 2 \cdot 2^{-M})$), `none` loses nothing. The usual
        mistakes: treating E4M3FN as IEEE (240 instead of 448), a bias of $2^{E-1}$ instead of $2^{E-1}-1$,
        reporting the unit roundoff $2^{-M-1}$ as epsilon (`torch.finfo(...).eps` is the gap after 1, $2^{-M}$), and
        an off-by-one in the smallest subnormal.

        **`bf16_codec`.** Decoding is one shift into an `int32` and a free reinterpretation. Encoding is the rounding
        bias trick; its three lines are what PyTorch's `c10::detail::round_to_nearest_even` does, and what
        `__float2bfloat16_rn` does in CUDA. The mistakes: *truncation* (`bits >> 16`; every value rounds towards 0),
        *ties away from zero* (`+ 0x8000`, no `lsb`: half the ties go the wrong way), and *no NaN case* (a NaN whose
        fraction lives in the low 16 bits becomes infinity).

        **`fp8_decode`.** Integer fields, then `torch.ldexp` (exact: a power-of-two scale of a 4-bit integer fraction).
        The mistakes: an implicit 1 on subnormals, a subnormal scale of $2^{-b}$ instead of $2^{1-b}$, and treating
        E4M3FN's top exponent as IEEE's (turning 256..448 into NaN).

        **`fp8_encode`.** Steps 1-6 above, vectorised: no branches, one `torch.where` per special case. The shift is
        clamped at 30 because any shift beyond 25 leaves nothing of a 24-bit significand, and an `int32` shift by 32
        or more is undefined. The mistakes: *truncation* or *ties away from zero*, *flush to zero* (no longer shift for
        subnormal results, so every value below $2^{1-b}$ comes out wrong), *`saturate` ignored*, and *NaN saturated to the largest value* (a silent
        corruption: a NaN must stay visible).

        **Cost and production.** Each encoder is a dozen integer operations per element, memory-bound like any cast:
        GPUs do it in one instruction (`cvt.rn.satfinite.e4m3x2.f32` converts two FP32 values to two E4M3 bytes on
        Hopper), usually fused into the epilogue of the kernel that produced the values, together with the amax
        (largest magnitude) reduction that the next step's scale needs. Libraries on top: Transformer Engine's
        `Float8Tensor` and delayed scaling, torchao's `Float8Linear` (dynamic per-tensor or per-row scales), DeepSeek's
        fine-grained tile/block scaling with FP32 accumulation promoted every 128 elements. BF16 needs none of this:
        it has FP32's range, so it is a drop-in storage format; FP16 needs a loss scale (`p02.mixed_precision`); FP8
        needs a scale per tensor or per block, chosen every step.
    """)
    lesson.mistakes()
    return lesson
