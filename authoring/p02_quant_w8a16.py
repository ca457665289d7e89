"""Source of 02_PyTorch_Algorithms/36_Quant_W8A16.ipynb (build with `python -m llm_algo build p02.quant_w8a16`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.quant_w8a16",
        path="02_PyTorch_Algorithms/36_Quant_W8A16.ipynb",
        title_en="Weight-only quantisation: int8, int4, groups and a W8A16 linear",
        title_zh="仅权重量化：int8、int4、分组与 W8A16 线性层",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p01.number_formats", "p01.roofline"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 批大小为 1 的解码 (decode) 受显存带宽限制：每生成一个 token 都要把全部权重读一遍，权重字节数决定速度上限。
        - 对称量化 (symmetric)：$s = \max|w| / q_{\max}$，$q = \mathrm{clamp}(\mathrm{round}(w/s), -q_{\max}, q_{\max})$，
          $q_{\max} = 2^{b-1}-1$；非对称量化 (asymmetric) 再加一个整数零点 (zero point) $z$，用满 $[0, 2^b-1]$。
        - 每个权重的舍入误差 $|w - \hat w| \le s/2$（两种方式都成立，本节给出推导），所以缩放因子越小误差越小。
        - 粒度 (granularity)：逐张量 (per-tensor) → 逐通道 (per-channel) → 逐组 (per-group, 如 128)，
          组越小误差越小，但缩放因子占的字节越多。
        - int4 两个数装进一个字节 (packing)：低 4 位放偶数列，高 4 位放奇数列，解包时要做符号扩展 (sign extension)。
        - W8A16 线性层：权重以 int8 存储，计算前反量化 (dequantize) 成激活的 dtype，再做普通矩阵乘。
        {易错点}

        Generating one token at batch size 1 reads every weight of the model once. Llama-2-7B has 6.74 billion
        parameters (Touvron et al., 2023, arXiv:2307.09288): 13.5 GB in bf16. An H100 SXM reads HBM at 3.35 TB/s
        (NVIDIA H100 datasheet), so no kernel can decode faster than $13.5 / 3350 \approx 4.0$ ms per token, about
        250 tokens/s, and the arithmetic units sit mostly idle. Store the same weights in 8 bits and that bound halves;
        in 4 bits with a scale per 128 weights it drops to about 3.6 GB. That is why weight-only quantisation (W8A16,
        W4A16: 8- or 4-bit weights, 16-bit activations) is the first thing every inference engine offers:
        `bitsandbytes`' LLM.int8(), GPTQ and AWQ checkpoints on the Hugging Face Hub, vLLM's Marlin kernels,
        llama.cpp's `Q4_0`/`Q8_0`, torchao's `int8_weight_only` and `int4_weight_only`.

        **You will implement** symmetric and asymmetric round-to-nearest quantisation of a weight matrix at any bit
        width from 2 to 8, per output channel or per group of input columns, and its inverse; packing two int4 values
        per byte and unpacking them with sign extension; and a `QuantLinear` module that stores int8 (or packed int4)
        weights and computes in the activations' dtype. **Graded against** a float64 specification written in the
        checks, the round-trip error bound $|w - \hat w| \le s/2$ derived below, a bit-by-bit packing spec in plain
        Python integers, `nn.Linear` in float64 and the bytes the module keeps. `torch.ao` and `torch._int_mm` are
        off limits: you write the arithmetic.
    """
    )
    lesson.md(r"""
        ## 1. A uniform quantiser, and its error bound

        A weight matrix $W \in \mathbb{R}^{N \times K}$ (`nn.Linear(K, N).weight`: $N$ output channels, $K$ input
        features) is replaced by small integers $Q$ and a few floating-point scales. Split each row into groups of
        $G$ consecutive columns ($G$ divides $K$; per-channel quantisation is $G = K$, one group per row). For one
        group $g \in \mathbb{R}^{G}$ and $b$ bits:

        **Symmetric** (int8/int4 with a zero that is exactly 0):

        $$
        q_{\max} = 2^{b-1} - 1, \qquad s = \frac{\max_j |g_j|}{q_{\max}}, \qquad
        q_j = \mathrm{clamp}\!\left(\mathrm{round}\!\left(\frac{g_j}{s}\right),\, -q_{\max},\, q_{\max}\right), \qquad
        \hat g_j = s\, q_j .
        $$

        The range is $[-127, 127]$ for int8 and $[-7, 7]$ for int4: the code $-2^{b-1}$ ($-128$, $-8$) is left unused
        so that the grid is symmetric around 0 (a "restricted range", as in LLM.int8() and most GPTQ kernels).

        **Asymmetric** (unsigned codes $[0, 2^b - 1]$ and an integer zero point $z$):

        $$
        \ell = \min(\min_j g_j,\, 0), \quad u = \max(\max_j g_j,\, 0), \quad
        s = \frac{u - \ell}{2^b - 1}, \quad z = \mathrm{round}(-\ell / s), \quad
        q_j = \mathrm{clamp}\!\left(\mathrm{round}(g_j / s) + z,\, 0,\, 2^b - 1\right), \quad
        \hat g_j = s\,(q_j - z).
        $$

        Stretching $[\ell, u]$ to contain 0 makes $w = 0$ exactly representable ($q = z$), which matters for padded
        and pruned weights; GPTQ's reference quantiser does the same. A group that is all zeros has no range: any
        positive scale works, take $s = 1$ (then $q = 0$, or $q = z = 0$).

        **The round-trip bound.** Without clamping, $|g_j - \hat g_j| = s\,|g_j/s - \mathrm{round}(g_j/s)| \le s/2$.
        Symmetric: $|g_j/s| \le q_{\max}$, so the clamp never acts and $|g_j - \hat g_j| \le s/2$ for every weight.
        Asymmetric: suppose the clamp acts at the top, $q_j = 2^b - 1 < \mathrm{round}(g_j/s) + z$. Then
        $q_j - z < \mathrm{round}(g_j/s) \le g_j/s + \tfrac12$, and since $g_j \le u = \ell + (2^b-1)s$ and
        $z \le -\ell/s + \tfrac12$, also $q_j - z \ge (2^b - 1) + \ell/s - \tfrac12 \ge g_j/s - \tfrac12$. So
        $|g_j/s - (q_j - z)| \le \tfrac12$ again; the bottom is the mirror image. **Both quantisers make an error of at
        most half a step, $s/2$, on every weight**; what differs is $s$:

        | | step $s$ for a group in $[\ell, u]$ | $s$ for $N(0, \sigma^2)$ weights, $G = 128$ |
        | --- | --- | --- |
        | symmetric, $b$ bits | $\max(|\ell|, |u|) / (2^{b-1} - 1)$ | $\approx 2.7\sigma / 7 = 0.39\sigma$ (int4) |
        | asymmetric, $b$ bits | $(u - \ell) / (2^b - 1)$ | $\approx 5.2\sigma / 15 = 0.35\sigma$ (int4) |

        (the largest of 128 standard normals is about $2.7$). Asymmetric wins when a group is lopsided (all positive,
        say), symmetric needs no zero point and lets the kernel skip a subtraction. With $s/2$ per weight and the
        rounding errors roughly uniform on $[-s/2, s/2]$, the mean squared error is $s^2/12$: each extra bit halves
        $s$ and divides the MSE by 4 (6 dB per bit).

        **For a layer**, $y_i = \sum_k W_{ik} x_k$, the output error obeys
        $|y_i - \hat y_i| \le \sum_k |x_k|\, s_{i, \lfloor k/G \rfloor} / 2$: smaller groups give a smaller bound,
        and a large activation $x_k$ magnifies the error of its column (that is SmoothQuant's and AWQ's starting
        point, `p02.smoothquant`).

        **Bytes.** $N K b / 8$ bytes of codes, plus one scale (and one zero) per group. With float32 scales (what this
        lesson keeps; production keeps fp16 or bf16 scales) and $G = 128$, int4 costs $0.5 + 4/128 = 0.53$ bytes per
        weight, 3.8 times less than bf16.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `quantize`: round to nearest, per channel or per group

        `quantize_weight(w, bits, group_size, symmetric)` returns `(q, scale, zero)`:

        - `q` `(N, K)`: `torch.int8` in $[-q_{\max}, q_{\max}]$ when symmetric, `torch.uint8` in $[0, 2^b - 1]$ when
          asymmetric;
        - `scale` `(N, K // G)` `torch.float32`;
        - `zero` `(N, K // G)` `torch.uint8` when asymmetric, `None` when symmetric.

        Compute in float32 (`w.float()`), use `torch.round` (round half to even, as every framework does), and let
        `group_size=None` mean per-channel. `dequantize_weight(q, scale, zero, group_size)` returns $\hat W$ in
        float32. Refuse bad input with a `ValueError` that says what is wrong: a `w` that is not a 2-D floating-point
        tensor, `bits` outside 2..8, a group size that does not divide the row (or is not positive), and in
        `dequantize_weight` a `scale` (or `zero`) whose shape is not `(N, K // G)`.

        Hint: view the groups as a `(N, K // G, G)` tensor; every statistic is then a reduction over the last axis
        with `keepdim=True`, and broadcasting does the rest.
    """)
    lesson.exercise(
        "quantize",
        r'''
        def quantize_weight(w: torch.Tensor, bits: int, group_size: int | None = None, symmetric: bool = True):
            """Round-to-nearest quantisation of w (N, K), one scale per group of group_size consecutive columns.

            Returns q (N, K) int8 (symmetric) or uint8 (asymmetric), scale (N, K // G) float32,
            zero (N, K // G) uint8 (asymmetric) or None (symmetric). group_size=None: per output channel (G = K).
            """
            # TODO: validate w (2-D, floating point), bits (2..8) and the group size (positive, divides K)
            # TODO: view the groups as (N, K // G, G) in float32
            # TODO: symmetric: qmax = 2**(bits-1) - 1, scale = absmax / qmax (1 for an all-zero group), round, clamp
            # TODO: asymmetric: range [min(lo, 0), max(hi, 0)], scale = range / (2**bits - 1), integer zero point
            ### BEGIN SOLUTION
            if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
                raise ValueError(f"w must be a 2-D floating-point tensor (N, K), got {getattr(w, 'shape', type(w))}")
            if not 2 <= bits <= 8:
                raise ValueError(f"bits must be between 2 and 8, got {bits}")
            N, K = w.shape
            G = K if group_size is None else group_size
            if G <= 0 or K % G != 0:
                raise ValueError(f"group_size {group_size} does not divide the row length K={K}")
            groups = w.float().reshape(N, K // G, G)  # (N, K/G, G)
            if symmetric:
                qmax = 2 ** (bits - 1) - 1
                absmax = groups.abs().amax(dim=-1, keepdim=True)  # (N, K/G, 1)
                scale = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax))
                q = torch.clamp(torch.round(groups / scale), -qmax, qmax).to(torch.int8)  # (N, K/G, G)
                zero = None
            else:
                qmax = 2**bits - 1
                lo = groups.amin(dim=-1, keepdim=True).clamp(max=0.0)  # 0 stays exactly representable
                hi = groups.amax(dim=-1, keepdim=True).clamp(min=0.0)
                scale = torch.where(hi > lo, (hi - lo) / qmax, torch.ones_like(hi))  # (N, K/G, 1)
                zero_float = torch.clamp(torch.round(-lo / scale), 0, qmax)
                q = torch.clamp(torch.round(groups / scale) + zero_float, 0, qmax).to(torch.uint8)
                zero = zero_float.squeeze(-1).to(torch.uint8)  # (N, K/G)
            return q.reshape(N, K), scale.squeeze(-1), zero
            ### END SOLUTION


        def dequantize_weight(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, group_size: int | None = None):
            """W_hat (N, K) float32 = scale * (q - zero), the scale and zero of each group spread over its G columns."""
            # TODO: validate the group size and the shapes of scale (and zero): (N, K // G)
            # TODO: subtract the zero point (when there is one) and multiply by the scale, group by group
            ### BEGIN SOLUTION
            N, K = q.shape
            G = K if group_size is None else group_size
            if G <= 0 or K % G != 0:
                raise ValueError(f"group_size {group_size} does not divide the row length K={K}")
            if tuple(scale.shape) != (N, K // G):
                raise ValueError(f"scale must have shape {(N, K // G)}, got {tuple(scale.shape)}")
            if zero is not None and tuple(zero.shape) != (N, K // G):
                raise ValueError(f"zero must have shape {(N, K // G)}, got {tuple(zero.shape)}")
            groups = q.reshape(N, K // G, G).float()  # (N, K/G, G)
            if zero is not None:
                groups = groups - zero.float().unsqueeze(-1)
            return (groups * scale.float().unsqueeze(-1)).reshape(N, K)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Error against bits and granularity: a picture

        A synthetic weight matrix with the two features real LLM weights have: heavy tails (Student-t with 4 degrees
        of freedom instead of a Gaussian) and a few input columns an order of magnitude larger than the rest (the
        columns that meet the outlier features of the activations). Per-tensor quantisation (one scale for the whole
        matrix) is shown by quantising the flattened matrix as one row. The dashed line is the $s^2/12$ model for
        per-channel symmetric quantisation.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        N, K = 256, 1024
        w_demo = torch.distributions.StudentT(4.0).sample((N, K)) * 0.02
        w_demo[:, torch.randperm(K)[:8]] *= 10.0  # a few outlier input columns

        def relative_rms_error(w, bits, group_size, symmetric, per_tensor=False):
            flat = w.reshape(1, -1) if per_tensor else w
            q, scale, zero = quantize_weight(flat, bits, group_size, symmetric)
            w_hat = dequantize_weight(q, scale, zero, group_size).reshape(w.shape)
            return ((w - w_hat).norm() / w.norm()).item()

        bit_range = list(range(2, 9))
        settings = [
            ("per-tensor, symmetric", None, True, True),
            ("per-channel, symmetric", None, True, False),
            ("per-channel, asymmetric", None, False, False),
            ("group 128, symmetric", 128, True, False),
            ("group 32, symmetric", 32, True, False),
        ]
        try:
            plt.figure(figsize=(6.5, 3.8))
            for label, group_size, symmetric, per_tensor in settings:
                errors = [relative_rms_error(w_demo, b, group_size, symmetric, per_tensor) for b in bit_range]
                plt.plot(bit_range, errors, marker="o", label=label)
            absmax = w_demo.abs().amax(dim=1)
            model = [((absmax / (2 ** (b - 1) - 1)) ** 2 / 12).mean().sqrt().item() / w_demo.pow(2).mean().sqrt().item()
                     for b in bit_range]
            plt.plot(bit_range, model, "k--", label="s²/12 model, per-channel")
            plt.yscale("log"); plt.xlabel("bits"); plt.ylabel("‖W − Ŵ‖ / ‖W‖")
            plt.title("Round-to-nearest error, heavy-tailed 256×1024 weight")
            plt.legend(fontsize=7); plt.grid(alpha=0.3); plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("quantize_weight is not written yet: the figure appears once it is")
    """)
    lesson.md(r"""
        Read it from right to left: every bit removed multiplies the error by about 2 (a straight line on the log
        axis), and the granularity shifts the whole line. The $s^2/12$ model holds while the step is small against
        the typical weight; at 2-3 bits most weights round to 0, the error saturates near $\|W\|$ and the model
        overshoots. One outlier column ruins per-tensor and per-channel scales
        for every weight that shares them; a group of 32 confines it to 32 weights. That is why 4-bit formats are all
        grouped (GPTQ and AWQ checkpoints: 128; llama.cpp `Q4_0`: 32) while int8 gets away with per-channel.

        ## 3. Exercise `pack_int4`: two weights per byte

        PyTorch has no 4-bit integer dtype that matrix kernels read, so int4 weights travel packed: two codes per
        `uint8`. Our layout, for a `(..., K)` tensor of int4 codes in $[-8, 7]$ (K even): byte $j$ holds column $2j$ in
        its low nibble (bits 0-3) and column $2j + 1$ in its high nibble (bits 4-7), each as its 4-bit two's
        complement ($-1 \to$ `0b1111`, $-8 \to$ `0b1000`). Unpacking must *sign-extend*: a nibble $n \ge 8$ stands
        for $n - 16$.

        Example: codes `[3, -2]` → nibbles `0x3`, `0xE` → byte `0xE3` = 227.

        `pack_int4(q)` takes `torch.int8` codes `(..., K)` and returns `torch.uint8` `(..., K // 2)`; `unpack_int4`
        inverts it. Refuse a dtype other than `int8` (`TypeError`), an odd last dimension or a code outside
        $[-8, 7]$ (`ValueError`); `unpack_int4` refuses anything but `uint8` (`TypeError`).

        Other layouts exist and a checkpoint is unreadable if you guess wrong: AutoGPTQ packs eight int4 into one
        `int32`; llama.cpp's `Q4_0` stores 32 weights as an fp16 scale and 16 bytes whose low nibbles are the first
        16 weights and high nibbles the last 16 (18 bytes per 32 weights, 4.5 bits per weight); Marlin reorders the
        codes to match its tensor-core fragments.
    """)
    lesson.exercise(
        "pack_int4",
        r'''
        def pack_int4(q: torch.Tensor) -> torch.Tensor:
            """int8 codes (..., K) in [-8, 7], K even -> uint8 (..., K // 2): column 2j low nibble, 2j+1 high nibble."""
            # TODO: refuse a dtype other than int8 (TypeError), an odd K or a code outside [-8, 7] (ValueError)
            # TODO: keep the low 4 bits of each code (two's complement), then combine even and odd columns
            ### BEGIN SOLUTION
            if q.dtype != torch.int8:
                raise TypeError(f"pack_int4 expects torch.int8 codes, got {q.dtype}")
            if q.dim() == 0 or q.shape[-1] % 2 != 0:
                raise ValueError(f"the last dimension must be even to pack pairs, got shape {tuple(q.shape)}")
            if q.numel() and (int(q.min()) < -8 or int(q.max()) > 7):
                raise ValueError(f"int4 codes must lie in [-8, 7], got [{int(q.min())}, {int(q.max())}]")
            nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)  # (..., K) in [0, 15]: two's complement nibbles
            low, high = nibbles[..., 0::2], nibbles[..., 1::2]  # (..., K/2) each
            return low | (high << 4)
            ### END SOLUTION


        def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
            """uint8 (..., K // 2) -> int8 codes (..., K) in [-8, 7], the inverse of pack_int4."""
            # TODO: refuse a dtype other than uint8 (TypeError)
            # TODO: split each byte into its low and high nibble, interleave them, sign-extend nibbles >= 8
            ### BEGIN SOLUTION
            if packed.dtype != torch.uint8:
                raise TypeError(f"unpack_int4 expects torch.uint8 bytes, got {packed.dtype}")
            low = (packed & 0xF).to(torch.int8)  # (..., K/2) in [0, 15]
            high = (packed >> 4).to(torch.int8)
            nibbles = torch.stack((low, high), dim=-1).flatten(-2)  # (..., K): low, high, low, high, ...
            return torch.where(nibbles >= 8, nibbles - 16, nibbles)  # sign extension
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `quant_linear`: a W8A16 (and W4A16) linear layer

        `QuantLinear(linear, bits, group_size)` quantises `linear.weight` once, symmetrically, with your
        `quantize_weight`, and keeps only integers and scales:

        - buffer `qweight`: the `int8` codes `(N, K)` when `bits == 8`, the packed `uint8` `(N, K // 2)` when
          `bits == 4`;
        - buffer `scales`: float32 `(N, K // G)`;
        - buffer `bias`: a float32 copy of `linear.bias`, or `None`;
        - attributes `in_features`, `out_features`, `bits`, `group_size`.

        No floating-point copy of the weight may stay in the module: that copy is the memory you set out to save.
        `forward(x)` takes `x` of shape `(..., K)` in any floating dtype, dequantises the weight to `x.dtype` and
        applies the linear map there (a float16/bfloat16 matmul, as the "A16" says), returning `(..., N)` in
        `x.dtype`. Refuse `bits` other than 4 and 8 with a `ValueError` (a group size that does not divide $K$ is
        already refused by `quantize_weight`).

        Production W8A16 kernels never materialise $\hat W$: they load int8 tiles, convert them in registers and feed
        the tensor cores (that is `p03.quant_matmul`). Materialising it is fine for learning and for a CPU; it also
        makes the cost plain: a full bf16 weight is written and read again on every call.
    """)
    lesson.exercise(
        "quant_linear",
        r'''
        class QuantLinear(nn.Module):
            """Weight-only quantised linear: int8 or packed-int4 codes, float32 group scales, compute in x.dtype."""

            def __init__(self, linear: nn.Linear, bits: int = 8, group_size: int | None = None):
                super().__init__()
                # TODO: refuse bits other than 4 and 8 (ValueError)
                # TODO: quantise linear.weight symmetrically with quantize_weight; pack it when bits == 4
                # TODO: register buffers qweight, scales and bias (float32 copy or None); keep no float weight
                ### BEGIN SOLUTION
                if bits not in (4, 8):
                    raise ValueError(f"QuantLinear supports bits=4 or bits=8, got {bits}")
                self.in_features, self.out_features = linear.in_features, linear.out_features
                self.bits, self.group_size = bits, group_size
                q, scale, _ = quantize_weight(linear.weight.detach(), bits, group_size, symmetric=True)
                self.register_buffer("qweight", pack_int4(q) if bits == 4 else q)  # (N, K) or (N, K/2)
                self.register_buffer("scales", scale)  # (N, K/G) float32
                bias = None if linear.bias is None else linear.bias.detach().float().clone()
                self.register_buffer("bias", bias)
                ### END SOLUTION

            def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
                """W_hat (N, K) in dtype."""
                # TODO: unpack when bits == 4, dequantize, cast to dtype
                ### BEGIN SOLUTION
                q = unpack_int4(self.qweight) if self.bits == 4 else self.qweight  # (N, K) int8
                return dequantize_weight(q, self.scales, None, self.group_size).to(dtype)
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                """x (..., K) floating -> (..., N) in x.dtype."""
                # TODO: dequantise to x.dtype and apply the linear map (with the bias, in x.dtype)
                ### BEGIN SOLUTION
                bias = None if self.bias is None else self.bias.to(x.dtype)
                return F.linear(x, self.dequantized_weight(x.dtype), bias)  # (..., N)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Bytes and error of a real-sized layer

        One Llama-2-7B MLP projection has the shape of `nn.Linear(4096, 11008)`. Below: the bytes each format keeps
        for it (measured on your module's state_dict at 512×1024, scaled to the real shape) and the output error on
        random activations relative to the float32 layer, for the heavy-tailed weights of the first figure.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        layer = nn.Linear(1024, 512)
        with torch.no_grad():  # heavy tails and a few outlier input columns, as in w_demo above
            layer.weight.copy_(torch.distributions.StudentT(4.0).sample((512, 1024)) * 0.02)
            layer.weight[:, torch.randperm(1024)[:8]] *= 10.0
        x_demo = torch.randn(16, 1024)
        y_ref = layer(x_demo)
        scale_to_7b = 4096 * 11008 / (1024 * 512)

        def module_bytes(module):
            return sum(t.numel() * t.element_size() for t in module.state_dict().values())

        rows = [("bf16", module_bytes(layer) / 2, (layer.to(torch.bfloat16)(x_demo.bfloat16()).float() - y_ref))]
        layer.float()
        try:
            for bits, group_size in ((8, None), (4, None), (4, 128), (4, 32)):
                q_layer = QuantLinear(layer, bits, group_size)
                rows.append((f"int{bits}, " + ("per-channel" if group_size is None else f"g{group_size}"),
                             module_bytes(q_layer), q_layer(x_demo) - y_ref))
        except NotImplementedError:
            print("QuantLinear is not written yet: only the bf16 row is shown")
        labels = [r[0] for r in rows]
        megabytes = [r[1] * scale_to_7b / 1e6 for r in rows]
        errors = [(r[2].norm() / y_ref.norm()).item() for r in rows]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
        ax1.barh(labels, megabytes); ax1.set_xlabel("MB for a 4096×11008 projection"); ax1.invert_yaxis()
        ax2.barh(labels, errors, color="C3"); ax2.set_xscale("log"); ax2.set_xlabel("‖y − y_fp32‖ / ‖y_fp32‖")
        ax2.invert_yaxis(); fig.tight_layout(); plt.show()
        for label, mb, err in zip(labels, megabytes, errors):
            print(f"{label:18s} {mb:7.1f} MB   relative output error {err:.2e}")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`quantize_weight`.** The reshape to `(N, K // G, G)` is the whole trick: groups are *consecutive input
        columns of one output row*, which is the layout every GPTQ/AWQ checkpoint and kernel uses (the kernel walks
        $K$ in tiles, so one scale covers a contiguous run of the reduction). `amax(dim=-1, keepdim=True)` gives one
        statistic per group, shaped to broadcast against the group. `torch.where(absmax > 0, ...)` keeps an all-zero
        group from dividing by zero. The clamp is a no-op for symmetric quantisation (the bound in section 1), but it
        costs nothing and protects against a scale rounded down by one ulp. For asymmetric quantisation, the zero
        point is rounded *before* it is added, so that $q - z$ is an integer and $w = 0$ maps to exactly $q = z$.

        **`dequantize_weight`.** The mirror image: `unsqueeze(-1)` spreads each group's scale over its $G$ columns.
        Writing it as a flat `(N, K)` operation instead needs `scale.repeat_interleave(G, dim=1)`: `scale.repeat(1, G)`
        lays the scales out as `s0 s1 s2 s0 s1 s2 ...`, the wrong scale for most columns, and only per-channel
        ($K/G = 1$) hides the mistake.

        **`pack_int4`.** `q & 0xF` on the two's complement code keeps the nibble that `unpack_int4` sign-extends back
        ($-2 = \ldots 11110_2 \to 1110_2 = 14 \to 14 - 16 = -2$). The cast to `int16` first avoids relying on bitwise
        operations of negative `int8` values. The shift happens in `uint8`: $15 \ll 4 = 240$ still fits.

        **`QuantLinear`.** The constructor is offline work (done once when the checkpoint is converted); `forward`
        is the hot path. Dequantising to `x.dtype` means bf16 activations meet a bf16 weight, exactly as in the
        unquantised model; the only new error is the rounding of the weights.

        **The usual mistakes, and why they are wrong**:
        - $q_{\max} = 2^b - 1$ for a *signed* code: the scale is half what it should be and everything above half the
          range is clamped: a huge error on the largest weights, the ones that matter most.
        - Truncation instead of rounding (`(w / s).to(torch.int8)`): the error bound becomes $s$, not $s/2$, and the
          error is biased towards 0.
        - An asymmetric range that does not contain 0, or a zero point left as a float: $w = 0$ is no longer exact.
        - Forgetting the zero point in `dequantize_weight`: every weight shifted by $z\,s$.
        - `repeat` instead of `repeat_interleave`, or groups taken down the columns instead of along the rows.
        - Packing without sign handling (negative codes spill into the high nibble), the nibbles in the other order,
          or unpacking without sign extension ($-1$ comes back as 15).
        - Keeping the float weight in the module (no memory saved), dropping the bias, computing in float32 and
          returning float32 to a bf16 model.

        **Cost.** Quantisation is one pass over the weights ($O(NK)$), done once. At decode time the saving is in
        bytes: $NK$ bytes (int8) or $NK/2$ (int4) plus $4NK/G$ for float32 scales, against $2NK$ for bf16. With
        materialised $\hat W$ as here, the forward pass reads the codes, *writes* a bf16 $\hat W$ and reads it again:
        more traffic than bf16 alone. Real kernels fuse the dequantisation into the GEMM's inner loop.

        **In production.** `bitsandbytes`' LLM.int8() (Dettmers et al., 2022, arXiv:2208.07339) is per-row int8 with
        the few outlier *feature* columns kept in fp16 (above about 6.7B parameters, such features appear in most
        layers); torchao's `int8_weight_only` is per-channel symmetric int8 like this lesson; GPTQ and AWQ
        checkpoints are int4 with $G = 128$ and asymmetric zero points, packed into `int32`; vLLM runs them with the
        Marlin kernels; llama.cpp's `Q8_0` and `Q4_0` are symmetric blocks of 32 with an fp16 scale. Round-to-nearest
        is the baseline that GPTQ (`p02.gptq`) improves on by correcting each column's rounding error with the
        columns not yet quantised.
    """)
    lesson.mistakes()
    return lesson
