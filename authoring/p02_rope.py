"""Source of 02_PyTorch_Algorithms/04_RoPE.ipynb (build with `python -m llm_algo build p02.rope`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.rope",
        path="02_PyTorch_Algorithms/04_RoPE.ipynb",
        title_en="Rotary position embedding",
        title_zh="旋转位置编码 RoPE",
        difficulty="medium",
        device="cpu",
        minutes=100,
        prerequisites=["p00.tensor_layout"],
    )
    lesson.title(
        intro=r"""
        Attention on its own cannot tell "dog bites man" from "man bites dog": a score is a dot product between two
        tokens' vectors, so shuffling the tokens only shuffles the scores. Llama, Mistral, Qwen, Gemma and DeepSeek all
        add word order the same way, with **rotary position embedding** (RoPE, 旋转位置编码): just before the scores are
        computed, every query and key vector is rotated by an angle proportional to its token's position. In
        Llama-3-8B that happens in all 32 layers to 32 query heads and 8 key heads of 128 dimensions, so
        $32 \times (32 + 8) \times 128 = 163{,}840$ numbers per token. At 3 FLOPs each that is about 0.5 MFLOP, tiny
        next to the ~16 GFLOP of the token's matrix multiplies. The cost is negligible. The danger is that two
        incompatible conventions are in use, and mixing them up raises no error.

        **You will implement** the cos/sin tables (`rope_cache`), the rotation in the Hugging Face / GPT-NeoX
        "rotate-half" layout with explicit position ids (for KV-cache decoding and left padding), the original
        Meta Llama / GPT-J "interleaved" layout, and the long-context frequency scalings of Llama 3.1 and YaRN.
        **Graded against** Hugging Face `LlamaRotaryEmbedding` and `apply_rotary_pos_emb`, built locally from a tiny
        `LlamaConfig`, Meta's complex-number formulation (`torch.polar`, `torch.view_as_complex`) in float64, the
        closed form of the relative-position identity, and `transformers`' own `rope_type="llama3"` and `"yarn"`
        initialisers (`ROPE_INIT_FUNCTIONS`).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：attention 分数是点积，本身不含位置信息；RoPE 在计算分数前把 query 和 key 按位置 $m$ 旋转，使 $q_m^\top k_n$ 只依赖相对位置 $m-n$。
        - **公式**：$\theta_i = \text{base}^{-2i/D}$，$i = 0,\dots,D/2-1$；每对坐标旋转角度 $m\theta_i$。cos/sin 表形状 `(T, D)`，布局为 `[angles, angles]`，角度在 float32（或 float64）中计算。
        - **两种约定**：Hugging Face / GPT-NeoX 的 rotate-half 把 $(i, i+D/2)$ 配对，$x\cos + \operatorname{rotate\_half}(x)\sin$，其中 $\operatorname{rotate\_half}(x) = [-x_2, x_1]$；Meta Llama / GPT-J 的 interleaved 把 $(2i, 2i+1)$ 配对（等价于复数乘以 $e^{\mathrm{i}m\theta}$）。两者混用不会报错，只会得到错误结果。
        - **position ids**：按显式的 `position_ids` 取表行，KV cache 解码和 left padding 都依赖它。
        - **精度**：bf16/fp16 中计算 $m\theta$ 会丢失大位置的精度；结果要 cast 回 $x$ 的 dtype。
        - **长上下文缩放**：只改 $\theta_i$，不改旋转。Llama 3.1（`rope_type="llama3"`）按波长 $\lambda_i = 2\pi/\theta_i$ 分段：短波保持，长波除以 factor $s$，中间用 $\gamma = \operatorname{clamp}((L/\lambda - \ell)/(h - \ell), 0, 1)$ 平滑混合；YaRN 按维度下标做线性 ramp（由 $\beta_\text{fast}=32$、$\beta_\text{slow}=1$ 决定边界），并把 cos/sin 乘以注意力因子 $0.1\ln s + 1$。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Where position information has to come from

        A causal attention layer computes $s_{mn} = q_m^\top k_n / \sqrt{D}$ for a query at position $m$ and a key at
        position $n$. Nothing in $q_m$ or $k_n$ says where the token sits, so a model needs position information from
        somewhere else. Over the years it has come from three places.

        **Absolute learned embeddings** (GPT-2, BERT). A table `wpe` with one learned row per position is added to the
        token embeddings. GPT-2 small's table is $1024 \times 768 = 786{,}432$ parameters, and there is no row 1025, so
        the model cannot read a longer text at all. It also has to learn from data that rows 500 and 501 are
        neighbours.

        **Absolute sinusoids** (the original Transformer). A fixed formula gives every position a vector, so there is a
        row for any position, but models trained this way still get worse quickly past their training length (Press et
        al., 2022, *Train Short, Test Long*).

        **Rotary embedding** (Su et al., 2021, *RoFormer*). RoPE adds nothing to the input. It rotates $q$ and $k$ inside
        every attention layer, and the rotation is chosen so that the score $q_m^\top k_n$ depends on $m - n$ only
        (section 2 derives this). It has no parameters, leaves $v$ alone, and works the same at every layer. Keys go
        into the KV cache already rotated, so a decoding step only rotates the *new* token's $q$ and $k$, at that
        token's absolute position. That is why the functions below take explicit `position_ids`.

        RoPE on its own extrapolates only a little past its training length (the same paper measures it). What it
        offers is a clean way to extend the context: change the rotation frequencies. Code Llama raised the *base*
        from 10,000 to 1,000,000 to train on 16k tokens. Llama 3 trains with base 500,000, and Llama 3.1 reaches 128k
        tokens with a `rope_scaling` of type `"llama3"` (factor 8), which slows down only the slowest-rotating pairs.
        NTK-aware scaling and YaRN (Peng et al., 2023) are other recipes. All of them change the *table* of angles and
        leave the *rotation* alone, so the functions you write here work unchanged under every one of them.
    """)
    lesson.md(r"""
        ## 2. The math, with shapes

        Take one head's query or key, $x \in \mathbb{R}^{D}$ with $D$ even, at position $m$. Split it into $D/2$ pairs.
        Pair $i$ gets its own angular frequency, a geometric sequence from 1 radian per token down to almost $1/b$:

        $$
        \theta_i = b^{-2i/D}, \qquad i = 0, 1, \dots, D/2 - 1,
        \qquad b = \texttt{base} = 10^4 \text{ (Llama 2)},\ 5\cdot 10^5 \text{ (Llama 3)} .
        $$

        At position $m$, pair $i$ is rotated by the angle $m\theta_i$ with the 2-D rotation matrix

        $$
        R(\alpha) = \begin{pmatrix} \cos\alpha & -\sin\alpha \\ \sin\alpha & \cos\alpha \end{pmatrix}, \qquad
        \begin{pmatrix} y_a \\ y_b \end{pmatrix} = R(m\theta_i) \begin{pmatrix} x_a \\ x_b \end{pmatrix}
        = \begin{pmatrix} x_a \cos m\theta_i - x_b \sin m\theta_i \\ x_a \sin m\theta_i + x_b \cos m\theta_i \end{pmatrix}.
        $$

        All of $x$ is rotated by a block-diagonal $R_m = \operatorname{diag}\big(R(m\theta_0), \dots, R(m\theta_{D/2-1})\big)$,
        which acts on pairs of coordinates. *Which* coordinates form pair $i$ is a convention, and two are in use:

        | pairing | pair $i$ is $(x_a, x_b) =$ | used by |
        | --- | --- | --- |
        | rotate-half (GPT-NeoX) | $(x_i,\ x_{i + D/2})$ | Hugging Face `transformers`, vLLM (`is_neox_style=True`), GPT-NeoX |
        | interleaved (GPT-J) | $(x_{2i},\ x_{2i+1})$ | Meta's original `llama/model.py`, GPT-J, llama.cpp's GGUF Llama files |

        **The relative-position property, derived.** Rotations compose by adding angles and $R(\alpha)^\top = R(-\alpha)$,
        so $R(\alpha)^\top R(\beta) = R(\beta - \alpha)$, one block at a time. For a query at $m$ and a key at $n$:

        $$
        \langle R_m q,\ R_n k \rangle = q^\top R_m^\top R_n\, k = q^\top R_{n-m}\, k .
        $$

        The score depends on $n - m$ and not on $m$ or $n$ separately, so shifting *both* positions by the same offset
        leaves every score unchanged. The checks test this, and one more property of any rotation: it preserves
        lengths, pair by pair ($\lVert R(\alpha) (x_a, x_b) \rVert = \lVert (x_a, x_b) \rVert$).

        **The same thing in complex numbers.** Read pair $i$ as $z_i = x_a + \mathrm{i}\,x_b$. Then the rotation is a
        multiplication, $z_i \mapsto z_i\, e^{\mathrm{i} m\theta_i}$. With $\tilde q_i$ and $\tilde k_i$ the complex numbers
        of $q$'s and $k$'s pair $i$, and using $\langle a, b \rangle = \operatorname{Re}(a \bar b)$ for 2-D vectors,
        $\langle R_m q, R_n k\rangle = \operatorname{Re} \sum_i \tilde q_i\, \overline{\tilde k_i}\, e^{\mathrm{i}(m-n)\theta_i}$.
        Meta's code uses exactly this form: `torch.polar` builds $e^{\mathrm{i}m\theta_i}$ and `torch.view_as_complex`
        reads adjacent coordinates as $(\text{real}, \text{imag})$, which is why its pairs are $(2i, 2i+1)$.

        **The loop spec.** If in doubt, this is the definition (rotate-half pairing). `x` is `(T, D)` for one head,
        and `theta` is `(D/2,)`:

        ```python
        for m in range(T):                      # position (with a KV cache: position_ids[b, t], not t)
            for i in range(D // 2):             # pair i rotates at frequency theta[i]
                a, b = x[m, i], x[m, i + D // 2]
                y[m, i]          = a * cos(m * theta[i]) - b * sin(m * theta[i])
                y[m, i + D // 2] = a * sin(m * theta[i]) + b * cos(m * theta[i])
        ```

        **Vectorised, rotate-half.** Build the tables $\cos$ and $\sin$ of shape `(T_max, D)` with columns
        $[\theta_0, \dots, \theta_{D/2-1}, \theta_0, \dots, \theta_{D/2-1}]$ (each angle twice) and define
        $\operatorname{rotate\_half}(x) = [-x_{D/2:},\ x_{:D/2}]$. Then

        $$
        y = x \odot \cos_m + \operatorname{rotate\_half}(x) \odot \sin_m ,
        $$

        which for $i < D/2$ gives $y_i = x_i \cos m\theta_i - x_{i+D/2} \sin m\theta_i$ and
        $y_{i+D/2} = x_{i+D/2}\cos m\theta_i + x_i \sin m\theta_i$, the loop above. Shapes: `x: (B, H, T, D)`,
        `position_ids: (B, T)`, `cos[position_ids]: (B, T, D)`, unsqueezed to `(B, 1, T, D)` so that it broadcasts
        over the heads, and `y: (B, H, T, D)` in `x`'s dtype.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 3. Exercise `rope_cache`: the angle tables, and why they are computed in float32

        The tables depend only on the position, so a model builds them once and every layer and head shares them.
        Whatever dtype the model runs in, the **angles** $m\theta_i$ must be computed in float32, because the numbers
        get large. A 16-bit float cannot even store the position:

        - **bf16** keeps 8 significant bits, so integers are exact only up to 256. Position 1001 is stored as 1000,
          and between 1024 and 2048 only every 8th integer exists. Pair 0 has $\theta_0 = 1$, so its angle at position
          1029 is rounded to 1032, three radians away: its cos and sin are noise.
        - **fp16** keeps 11 bits: integers are exact up to 2048, the spacing is 4 between 4096 and 8192, and positions
          from 65520 on round to `inf`.
        - **float32** keeps 24 bits: the angle 1000 rad is stored to within $3\times10^{-5}$ rad, and even 100,000 rad
          (position 100k, pair 0) to within 0.004 rad.

        So compute $\theta$, the positions and their product in float32 (float64 stays float64), take cos and sin, and
        only then cast to the requested `dtype`. Hugging Face's `LlamaRotaryEmbedding` does the same: it multiplies
        positions and frequencies after `.float()` and casts cos and sin to the model's dtype at the end. The cell
        below measures the rounding claims.
    """)
    lesson.code(r"""
        positions = torch.tensor([255.0, 256.0, 257.0, 1001.0, 1029.0, 2049.0, 4099.0, 65519.0, 65520.0])
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            stored = positions.to(dtype).float().tolist()
            print(f"{str(dtype):15}", "  ".join(f"{p:g}->{s:g}" for p, s in zip(positions.tolist(), stored)))
    """)
    lesson.md(r"""
        Write `rope_cache(seq_len, head_dim, base, dtype)`. It returns `cos, sin`, each of shape `(seq_len, head_dim)`,
        whose row $m$ is $[\cos m\theta_0, \dots, \cos m\theta_{D/2-1}, \cos m\theta_0, \dots, \cos m\theta_{D/2-1}]$
        (the rotate-half layout, each angle twice).
    """)
    lesson.exercise(
        "rope_cache",
        r'''
        def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32):
            """cos and sin tables for positions 0 .. seq_len - 1, rotate-half layout.

            returns (cos, sin), each (seq_len, head_dim) in `dtype`; row m, column j holds cos/sin(m * theta_{j mod D/2})
            with theta_i = base ** (-2i / head_dim). Angles are computed in float32 (float64 if dtype is float64).
            """
            if head_dim % 2:
                raise ValueError(f"head_dim must be even: RoPE rotates pairs of dimensions, got {head_dim}")
            # TODO: choose the compute dtype: at least float32 (torch.promote_types keeps float64)
            # TODO: the D/2 frequencies theta_i = base ** (-2i / head_dim), i = 0 .. head_dim/2 - 1
            # TODO: the angle table m * theta_i for every position m: (seq_len, head_dim/2)
            # TODO: repeat the angles for the rotate-half layout [angles, angles]; take cos and sin; cast to dtype
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(dtype, torch.float32)  # bf16/fp16 -> fp32, fp64 stays fp64
            inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=compute_dtype) / head_dim)  # (D/2,) theta_i
            positions = torch.arange(seq_len, dtype=compute_dtype)  # (T,), exact integers in fp32 up to 2**24
            angles = torch.outer(positions, inv_freq)               # (T, D/2): m * theta_i
            angles = torch.cat((angles, angles), dim=-1)            # (T, D): [theta_0 .. theta_{D/2-1}] twice
            return angles.cos().to(dtype), angles.sin().to(dtype)   # one rounding to dtype, at the end
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The check compares with a float64 closed form and with `LlamaRotaryEmbedding`'s own output in each dtype. At
        8192 positions even float32 angles are off by up to $6\times10^{-4}$ rad (for base 500,000 and $D = 64$ the
        worst is $5.8\times10^{-4}$). So your float32 table may differ from the float64 oracle by that much, and by no
        more than a small multiple of what Hugging Face's float32 table makes (the package's one tolerance policy).
        In bf16 and fp16 the final rounding to 8 or 11 bits is by far the largest error.
    """)
    lesson.md(r"""
        ### What the float32 angles buy: a picture

        Run the cell below once your `rope_cache` passes. It builds a bf16 table for 8192 positions twice, once with
        your function and once with every step in bf16, and plots each row's worst error against the float64 table.
        The all-bf16 version is already wrong by $10^{-1}$ after a few hundred positions and reaches errors near 2,
        the largest possible gap between two cosines.
    """)
    lesson.code(r"""
        def rope_cache_all_bf16(seq_len, head_dim, base=10000.0):  # the mistake, kept for the picture
            inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.bfloat16) / head_dim)
            angles = torch.outer(torch.arange(seq_len, dtype=torch.bfloat16), inv_freq)
            return torch.cat((angles, angles), dim=-1).cos()

        seq_len, head_dim = 8192, 128
        theta64 = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles64 = torch.outer(torch.arange(seq_len, dtype=torch.float64), theta64)
        exact_cos = torch.cat((angles64, angles64), dim=-1).cos()
        tables = {"angles in bf16": rope_cache_all_bf16(seq_len, head_dim)}
        try:
            tables["yours: float32 angles, cast to bf16"] = rope_cache(seq_len, head_dim, dtype=torch.bfloat16)[0]
        except NotImplementedError:
            pass  # not attempted yet: only the naive curve
        plt.figure(figsize=(6.5, 3.5))
        for name, table in tables.items():
            row_error = (table.double() - exact_cos).abs().amax(dim=-1)
            plt.semilogy(range(1, seq_len), row_error[1:], lw=0.6, label=name)
        plt.axvline(256, color="grey", ls=":", label="m = 256: bf16 integers stop being exact")
        plt.xlabel("position m"); plt.ylabel("max |cos error| in row m")
        plt.title("bf16 cos table vs float64"); plt.legend(fontsize=8); plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `apply_rope_rotate_half`: the Hugging Face layout, with position ids

        Now rotate. Three situations decide why the function takes `position_ids: (B, T)` rather than assuming
        positions $0, \dots, T-1$:

        - **Prefill** (预填充): the whole prompt at once, `position_ids = [[0, 1, ..., T-1]]`.
        - **Decoding with a KV cache** (KV 缓存): one new token per step, `T = 1`, at position `past_len`. Earlier keys
          are already in the cache, rotated at their own positions, and are not rotated again. Different sequences
          in a batch can be at different lengths, so each row has its own offset.
        - **Left padding** (左填充): a batch of prompts of unequal length is padded on the left. Hugging Face's
          `generate` sets `position_ids = attention_mask.cumsum(-1) - 1` so that each row's first real token is at
          position 0. RoPE scores depend only on $m - n$, so numbering a row from its padding shifts all its real
          tokens by the same amount and changes no score, as long as the prefill and every decoding step use the same
          numbering. Mixing the two breaks it: a prefill numbered with `arange` followed by decoding steps placed at
          the row's real length puts each new token at the wrong distance. The cumsum convention makes a padded row
          identical, position by position, to the same prompt run alone.

        Gather the rows of the tables at `position_ids`, broadcast them over the heads, and apply
        $y = x \odot \cos + \operatorname{rotate\_half}(x) \odot \sin$. Compute in float32 (float64 stays float64) and
        return `x`'s dtype. Hugging Face does this arithmetic in the model's dtype. The tolerance policy accepts
        either, as long as you are no worse than it.
    """)
    lesson.exercise(
        "apply_rope_rotate_half",
        r'''
        def apply_rope_rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                   position_ids: torch.Tensor) -> torch.Tensor:
            """Rotary embedding with the rotate-half pairing (i, i + D/2): Hugging Face Llama, GPT-NeoX.

            x:            (B, H, T, D) queries or keys, float32 / float16 / bfloat16 / float64
            cos, sin:     (max_position, D) tables in the rotate-half layout (from rope_cache)
            position_ids: (B, T) int64, the absolute position of every token
            returns       (B, H, T, D), same dtype as x; x itself is left unchanged
            """
            B, H, T, D = x.shape
            # TODO: compute dtype: at least float32
            # TODO: the table rows at position_ids, broadcastable over heads: (B, 1, T, D)
            # TODO: rotate_half(x) = [-second half, first half] along the last dimension
            # TODO: x * cos + rotate_half(x) * sin, cast back to x's dtype
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            cos_t = cos[position_ids].unsqueeze(1).to(compute_dtype)  # (B, T, D) -> (B, 1, T, D)
            sin_t = sin[position_ids].unsqueeze(1).to(compute_dtype)  # (B, 1, T, D)
            xc = x.to(compute_dtype)                                   # (B, H, T, D)
            x1, x2 = xc[..., : D // 2], xc[..., D // 2 :]              # (B, H, T, D/2) each: pair i is (x1[i], x2[i])
            rotated = torch.cat((-x2, x1), dim=-1)                     # (B, H, T, D): rotate_half(x)
            return (xc * cos_t + rotated * sin_t).to(x.dtype)          # (B, H, T, D) in x's dtype
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks use tables from `LlamaRotaryEmbedding` and compare with `apply_rotary_pos_emb` on the same positions:
        prefill with per-row offsets, a `T = 1` decoding step at position 4095, a left-padded batch, $D \in \{2, 16,
        64, 128\}$, and fp16/bf16 inputs. They also test, in float64, the relative-position property and the length
        preservation from section 2.
    """)
    lesson.md(r"""
        ### What the frequencies do: a picture

        Pair $i$ completes a full turn every $2\pi/\theta_i$ tokens. The left panel shows that wavelength for every
        pair ($D = 128$). Pair 0 turns every $2\pi \approx 6.3$ tokens and tells neighbours apart. The last pairs turn
        so slowly that they never complete a turn inside an 8k context: pairs 50 to 63 at base 10,000 (the slowest
        takes about 54,000 tokens), and pairs 35 to 63 at base 500,000. Context-extension recipes (NTK, YaRN, Llama
        3.1) leave the fast pairs alone and rescale exactly these slow ones.

        The right panel uses your `apply_rope_rotate_half`. It takes $q = k = (1, \dots, 1)$, puts the key at position
        0 and the query at position $\Delta$, and plots the score. Each pair contributes $2\cos(\Delta\theta_i)$, and
        as $\Delta$ grows these terms stop lining up, so the score tends to shrink with distance (RoFormer's "long-term
        decay"). A larger base stretches the curve.
    """)
    lesson.code(r"""
        head_dim, context = 128, 8192
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
        for base in (1e4, 5e5):
            theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
            left.semilogy(2 * math.pi / theta, marker=".", ms=3, label=f"base = {base:g}")
            distances = torch.arange(context)
            try:
                cos, sin = rope_cache(context, head_dim, base=base, dtype=torch.float64)
                ones = torch.ones(context, 1, 1, head_dim, dtype=torch.float64)  # one query per distance
                q_rot = apply_rope_rotate_half(ones, cos, sin, distances[:, None])      # query at position Δ
                k_rot = apply_rope_rotate_half(ones[:1], cos, sin, torch.zeros(1, 1, dtype=torch.long))  # key at 0
                score = (q_rot * k_rot).sum(-1).flatten() / head_dim
            except NotImplementedError:
                score = torch.full((context,), float("nan"))  # not attempted yet: no curve
            right.semilogx(distances[1:], score[1:], lw=0.8, label=f"base = {base:g}")
        left.axhline(context, color="grey", ls=":", label=f"context {context}")
        left.set_xlabel("pair index i"); left.set_ylabel("wavelength 2π/θ_i (tokens)")
        left.set_title("how fast each pair rotates"); left.legend(fontsize=8)
        right.set_xlabel("relative distance Δ = m − n (tokens)"); right.set_ylabel("<RoPE(q, Δ), RoPE(k, 0)> / D")
        right.set_title("score of q = k = ones vs distance"); right.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 5. Exercise `apply_rope_interleaved`: Meta's original pairing

        Meta's reference Llama code pairs *adjacent* coordinates $(x_{2i}, x_{2i+1})$ and multiplies by
        $e^{\mathrm{i}m\theta_i}$ in complex arithmetic. Hugging Face pairs $(x_i, x_{i+D/2})$. Both are the same
        rotation, $\theta_i$ for pair $i$, applied to a **permuted head dimension**. Let $P$ be the permutation that
        lists the even coordinates first and then the odd ones, $Px = [x_0, x_2, \dots, x_{D-2}, x_1, x_3, \dots, x_{D-1}]$.
        It moves pair $(2i, 2i+1)$ to $(i, i + D/2)$, so

        $$
        \operatorname{RoPE}_{\text{half}}(Px,\ m) = P\,\operatorname{RoPE}_{\text{interleaved}}(x,\ m).
        $$

        **Why checkpoints need permuted weights.** A checkpoint trained with one pairing has learned $W_q$ and $W_k$
        whose output coordinates are paired that way. To run Meta's weights with Hugging Face's rotate-half code, the
        conversion script (`convert_llama_weights_to_hf.py`, its `permute` function) reorders the **rows of $W_q$ and
        $W_k$ within every head** by $P$. Then $q_{\text{HF}} = P q$ and $k_{\text{HF}} = P k$, the rotated vectors are
        $P$ times Meta's, and since $P$ is orthogonal every score is unchanged:
        $\langle P a, P b \rangle = \langle a, b \rangle$. $W_v$ and $W_o$ are not permuted because values are never
        rotated. llama.cpp's converter permutes back the other way for its interleaved Llama kernels.

        **Why mixing them breaks a model silently.** Run a rotate-half checkpoint through interleaved RoPE (or forget
        the permutation) and every shape still matches, nothing raises, and the output is still a norm-preserving
        rotation. But the coordinates the model learned as partners are now rotated with different frequencies, so
        the relative positions its attention sees are not the ones it was trained on. Its output degrades, and
        nothing reports an error.

        Use the **same tables** as before: pair $i$ needs $\cos m\theta_i$, which is column $i$ of the rotate-half
        table for $i < D/2$. The picture below shows both pairings for $D = 8$, with each pair in its own colour. Its
        third row applies $P$ to the interleaved layout and gets the rotate-half colouring back.
    """)
    lesson.code(r"""
        head_dim, half = 8, 4
        rows = {  # (which coordinate sits in each slot, which pair it belongs to)
            "rotate-half\n(HF, NeoX)": (list(range(head_dim)), [i % half for i in range(head_dim)]),
            "interleaved\n(Meta, GPT-J)": (list(range(head_dim)), [i // 2 for i in range(head_dim)]),
            "interleaved,\nreordered by P": ([*range(0, head_dim, 2), *range(1, head_dim, 2)],
                                              [i % half for i in range(head_dim)]),
        }
        fig, ax = plt.subplots(figsize=(6.5, 2.4))
        ax.imshow([pairs for _, pairs in rows.values()], cmap="tab10", vmin=0, vmax=9, aspect="auto")
        for row, (coords, pairs) in enumerate(rows.values()):
            for slot, (coord, pair) in enumerate(zip(coords, pairs)):
                ax.text(slot, row, f"x{coord}\nθ{pair}", ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(rows)), list(rows))
        ax.set_xticks(range(head_dim)); ax.set_xlabel("slot in the head dimension")
        ax.set_title("same colour = same pair = same frequency θ_i (D = 8)")
        fig.tight_layout()
        plt.show()
    """)
    lesson.exercise(
        "apply_rope_interleaved",
        r'''
        def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                   position_ids: torch.Tensor) -> torch.Tensor:
            """Rotary embedding with the interleaved pairing (2i, 2i + 1): Meta's original Llama, GPT-J.

            x:            (B, H, T, D) queries or keys, float32 / float16 / bfloat16 / float64
            cos, sin:     (max_position, D) the same rotate-half tables; pair i uses column i (angle m * theta_i)
            position_ids: (B, T) int64
            returns       (B, H, T, D), same dtype as x; equals (x_2i + i x_2i+1) * exp(i m theta_i) pair by pair
            """
            B, H, T, D = x.shape
            half = D // 2
            # TODO: compute dtype: at least float32
            # TODO: one cos and one sin per pair at each token's position, broadcastable over heads: (B, 1, T, D/2)
            # TODO: the pairs' two coordinates: the even and the odd dimensions of x
            # TODO: rotate every pair by its angle, then put the two coordinates back side by side: (B, H, T, D)
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            cos_t = cos[position_ids][..., :half].unsqueeze(1).to(compute_dtype)  # (B, 1, T, D/2): cos(m theta_i)
            sin_t = sin[position_ids][..., :half].unsqueeze(1).to(compute_dtype)  # (B, 1, T, D/2)
            xc = x.to(compute_dtype)                                               # (B, H, T, D)
            x_even, x_odd = xc[..., 0::2], xc[..., 1::2]              # (B, H, T, D/2) each: pair i is (x_2i, x_2i+1)
            out_even = x_even * cos_t - x_odd * sin_t                  # real part of (x_even + i x_odd) e^{i m theta}
            out_odd = x_even * sin_t + x_odd * cos_t                   # imaginary part
            return torch.stack((out_even, out_odd), dim=-1).flatten(-2).to(x.dtype)  # (B, H, T, D/2, 2) -> (B, H, T, D)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with Meta's formulation in float64 (`torch.view_as_complex` on adjacent pairs times
        `torch.polar(1, m θ)`). They also confirm the permutation identity above against Hugging Face's
        `apply_rotary_pos_emb` on $Px$, and test the relative-position property with this pairing.
    """)
    lesson.md(r"""
        ## 6. Exercise `scaled_inv_freq`: longer contexts than the model was trained on

        Llama 3 was pre-trained on sequences of 8,192 tokens; Llama 3.1 serves 131,072 with the same weights and the
        same $\theta_i$ up to a rescaling done in `rope_cache` alone. Why a rescaling is needed: pair $i$ turns with
        wavelength $\lambda_i = 2\pi / \theta_i$ tokens. With Llama 3's base 500,000 and $D = 128$, $\lambda_0 = 6.3$
        tokens but $\lambda_{63} \approx 2.6$ million: over an 8k-token training context the fast pairs went round
        thousands of times (every angle was seen), while the slow pairs only ever saw angles below
        $2\pi \cdot 8192 / \lambda_i$, a small arc. At position 100,000 those slow pairs produce angles the model
        never saw, and perplexity explodes. Three fixes, all a change of $\theta_i$ only (the rotation code is
        untouched), chosen by `rope_type` in the config's `rope_parameters` (`rope_scaling` in older configs):

        - **Position interpolation** (Chen et al., 2023; `"linear"`): $\theta_i' = \theta_i / s$ for every pair, which
          squeezes $s$ times more positions into the trained range. It also divides the fast pairs' resolution by $s$:
          neighbouring tokens become hard to tell apart, and the model needs fine-tuning to recover.
        - **Llama 3.1** (`"llama3"`; Meta's `apply_scaling` in `llama-models`): sort pairs by wavelength against the
          original context $L$ (`original_max_position_embeddings`) with `low_freq_factor` $\ell$ and
          `high_freq_factor` $h$. Short waves ($\lambda_i < L/h$) are kept, long waves ($\lambda_i > L/\ell$) are
          divided by the factor $s$, and in between the two are blended:

          $$
          \gamma_i = \operatorname{clamp}\!\Big(\frac{L/\lambda_i - \ell}{h - \ell},\ 0,\ 1\Big), \qquad
          \theta_i' = (1 - \gamma_i)\,\frac{\theta_i}{s} + \gamma_i\,\theta_i .
          $$

          Llama 3.1's config: $s = 8$, $\ell = 1$, $h = 4$, $L = 8192$, base 500,000, so pairs with $\lambda < 2048$
          are untouched and pairs with $\lambda > 8192$ are interpolated 8 times.
        - **YaRN** (Peng et al., 2023, *YaRN: Efficient Context Window Extension of Large Language Models*;
          `"yarn"`, used by Qwen2.5's long-context configs, DeepSeek-V3 and gpt-oss): the same blend, by the number of
          turns $L / \lambda_i$ instead of the wavelength, with a linear ramp over the pair **index**. Pair $i$ turns
          $L/\lambda_i = \beta$ times over the original context when
          $i = d(\beta) = \dfrac{D \ln\!\big(L / (2\pi\beta)\big)}{2 \ln \text{base}}$. With $\beta_{\text{fast}} = 32$
          and $\beta_{\text{slow}} = 1$ (the defaults): $a = \lfloor d(\beta_{\text{fast}}) \rfloor$,
          $b = \lceil d(\beta_{\text{slow}}) \rceil$ (no rounding when `truncate` is false, as gpt-oss sets), clipped
          to $[0, D - 1]$ (if $a = b$, $b$ gets $+0.001$), and

          $$
          r_i = \operatorname{clamp}\!\Big(\frac{i - a}{b - a},\ 0,\ 1\Big), \qquad
          \theta_i' = r_i\,\frac{\theta_i}{s} + (1 - r_i)\,\theta_i ,\qquad i = 0, \dots, D/2 - 1 .
          $$

          YaRN also sharpens attention, whose softmax gets flatter over longer contexts: cos and sin are multiplied by
          the **attention factor** $\sqrt{t} = 0.1 \ln s + 1$ (for $s > 1$), which scales every $q \cdot k$ by
          $t$. A config may give `attention_factor` directly; DeepSeek's gives `mscale` $m$ and `mscale_all_dim`
          $m_a$ instead, and the factor is $(0.1\, m \ln s + 1) / (0.1\, m_a \ln s + 1)$ (1 for DeepSeek-V3, whose
          attention then multiplies its softmax scale by $(0.1 \ln s + 1)^2$ itself).

        **Write** `scaled_inv_freq(head_dim, rope_parameters)`, which returns the $D/2$ frequencies (float32, as
        Hugging Face computes them) and the attention factor (a Python float) for `rope_type` `"default"` (plain
        $\theta_i$, factor 1.0), `"llama3"` and `"yarn"`, reading Hugging Face's keys: `rope_theta`, `factor`,
        `original_max_position_embeddings`, `low_freq_factor`, `high_freq_factor` (defaults 1 and 4), `beta_fast`,
        `beta_slow` (defaults 32 and 1), `truncate` (default true), `attention_factor`, `mscale`, `mscale_all_dim`.
        Refuse, with a `ValueError`, an odd `head_dim`, another `rope_type`, a `factor` below 1, and
        `high_freq_factor <= low_freq_factor`. Then `scaled_rope_cache(seq_len, head_dim, rope_parameters, dtype)`
        builds the rotate-half tables from those frequencies, with cos and sin multiplied by the attention factor,
        exactly what Hugging Face's `LlamaRotaryEmbedding` returns for such a config.
    """)
    lesson.exercise(
        "scaled_inv_freq",
        r'''
        def scaled_inv_freq(head_dim: int, rope_parameters: dict) -> tuple[torch.Tensor, float]:
            """RoPE frequencies for a long-context config. rope_parameters: Hugging Face's dict, rope_type in
            "default", "llama3", "yarn". returns (inv_freq (head_dim/2,) float32, attention_factor: float)."""
            # TODO: refuse an odd head_dim, another rope_type, factor < 1, and high_freq_factor <= low_freq_factor
            # TODO: theta_i = rope_theta ** (-2i / head_dim) in float32; "default" returns them with factor 1.0
            # TODO: "llama3": blend theta/s and theta by gamma = clamp((L / wavelength - low) / (high - low), 0, 1)
            # TODO: "yarn": correction range [a, b] from beta_fast, beta_slow (floor/ceil when truncate), clip to
            #       [0, head_dim - 1]; ramp r = clamp((i - a) / (b - a), 0, 1); theta' = r theta/s + (1 - r) theta;
            #       attention factor: given, or mscale(s, mscale) / mscale(s, mscale_all_dim), or 0.1 ln s + 1
            ### BEGIN SOLUTION
            if head_dim % 2:
                raise ValueError(f"head_dim must be even: RoPE rotates pairs of dimensions, got {head_dim}")
            rope_type = rope_parameters.get("rope_type", "default")
            if rope_type not in ("default", "llama3", "yarn"):
                raise ValueError(f"rope_type must be 'default', 'llama3' or 'yarn', got {rope_type!r}")
            base = rope_parameters["rope_theta"]
            inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (D/2,)
            if rope_type == "default":
                return inv_freq, 1.0
            factor, original = float(rope_parameters["factor"]), rope_parameters["original_max_position_embeddings"]
            if factor < 1:
                raise ValueError(f"factor must be >= 1 (a longer context than the original), got {factor}")
            if rope_type == "llama3":
                low, high = rope_parameters.get("low_freq_factor", 1.0), rope_parameters.get("high_freq_factor", 4.0)
                if high <= low:
                    raise ValueError(f"high_freq_factor ({high}) must be larger than low_freq_factor ({low})")
                wavelength = 2 * math.pi / inv_freq  # (D/2,) tokens per turn
                keep = ((original / wavelength - low) / (high - low)).clamp(0, 1)  # 1: short waves, 0: long waves
                return (1 - keep) * inv_freq / factor + keep * inv_freq, 1.0
            beta_fast = rope_parameters.get("beta_fast") or 32.0
            beta_slow = rope_parameters.get("beta_slow") or 1.0

            def pair_turning(turns):  # the (fractional) pair index that turns `turns` times over the original context
                return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

            a, b = pair_turning(beta_fast), pair_turning(beta_slow)
            if rope_parameters.get("truncate", True):
                a, b = math.floor(a), math.ceil(b)
            a, b = max(a, 0), min(b, head_dim - 1)
            if a == b:
                b += 0.001
            ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - a) / (b - a)).clamp(0, 1)  # 1: interpolate
            inv_freq = ramp * inv_freq / factor + (1 - ramp) * inv_freq

            attention_factor = rope_parameters.get("attention_factor")
            if attention_factor is None:

                def temperature(m):  # YaRN's sqrt(t) = 0.1 m ln s + 1
                    return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

                m, m_all = rope_parameters.get("mscale"), rope_parameters.get("mscale_all_dim")
                attention_factor = temperature(m) / temperature(m_all) if m and m_all else temperature(1.0)
            return inv_freq, float(attention_factor)
            ### END SOLUTION


        def scaled_rope_cache(seq_len: int, head_dim: int, rope_parameters: dict, dtype: torch.dtype = torch.float32):
            """Rotate-half tables (cos, sin), each (seq_len, head_dim) in dtype, from scaled_inv_freq's frequencies, both
            multiplied by its attention factor (what LlamaRotaryEmbedding returns)."""
            # TODO: the frequencies and the factor; angles in >= float32; [angles, angles]; cos and sin times the factor
            ### BEGIN SOLUTION
            inv_freq, attention_factor = scaled_inv_freq(head_dim, rope_parameters)
            compute_dtype = torch.promote_types(dtype, torch.float32)
            angles = torch.outer(torch.arange(seq_len, dtype=compute_dtype), inv_freq.to(compute_dtype))  # (T, D/2)
            angles = torch.cat((angles, angles), dim=-1)  # (T, D)
            return (angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare both rules with `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"]` and
        `["yarn"]` on tiny `LlamaConfig`s carrying the `rope_parameters` of Llama 3.1, Llama 3.2, Qwen2.5 (YaRN
        $\times 4$), gpt-oss (`truncate` false), DeepSeek-V3 (`mscale`) and small made-up ones whose pairs fall in all
        three bands, against a float64 loop written from the formulas above as the oracle; compare your tables with
        `LlamaRotaryEmbedding`'s at positions up to four times the original context; check the bands by hand; and
        feed bad parameters.
    """)
    lesson.md(r"""
        ### Which pairs each rule rescales

        The cell below draws $\theta_i' / \theta_i$ against the wavelength $\lambda_i$ for Llama 3's 64 pairs, with
        $s = 8$ and $L = 8192$: position interpolation divides everything by 8; Llama 3.1 and YaRN keep the fast
        pairs and interpolate the slow ones, but YaRN starts blending at pairs that turn 32 times over the context
        ($\lambda \approx L/32$), Llama 3.1 only at $\lambda = L/4$.
    """)
    lesson.code(r"""
        head_dim, theta = 128, 500000.0
        llama31 = dict(rope_type="llama3", rope_theta=theta, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=8192)
        yarn = dict(rope_type="yarn", rope_theta=theta, factor=8.0, original_max_position_embeddings=8192)
        plain = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        wavelength = 2 * math.pi / plain
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        ax.plot(wavelength, torch.full_like(wavelength, 1 / 8), label="position interpolation (linear)")
        try:
            for name, params in (("Llama 3.1 (llama3)", llama31), ("YaRN", yarn)):
                inv_freq, attention_factor = scaled_inv_freq(head_dim, params)
                ax.plot(wavelength, inv_freq.double() / plain, marker=".", label=f"{name}, attention x{attention_factor:.3f}")
        except NotImplementedError:
            print("scaled_inv_freq not attempted yet: only position interpolation is drawn")
        for x, text in ((8192 / 4, "L / 4"), (8192, "L")):
            ax.axvline(x, color="grey", lw=0.6, ls="--"); ax.text(x, 1.02, text, ha="center", fontsize=8)
        ax.set_xscale("log"); ax.set_xlabel("wavelength 2π/θ_i (tokens)"); ax.set_ylabel("θ_i' / θ_i")
        ax.set_title("base 500,000, D = 128, s = 8, L = 8192"); ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`rope_cache`.** `torch.promote_types(dtype, torch.float32)` picks float32 for bf16 and fp16 tables and keeps
        float64 for float64. The comparable `x.float()` habit would quietly *downcast* a float64 request. The
        frequencies use `arange(0, D, 2) / D`, which is $2i/D$ for $i < D/2$. Writing `arange(D // 2) / D` has the
        right shape and the wrong exponent: every frequency but the first is too high, and no shape check notices.
        `torch.outer` makes the `(T, D/2)` angle table. `torch.cat((angles, angles))` gives the rotate-half layout. An
        interleaved library would use `repeat_interleave(2)` instead, and using that with rotate-half code is
        another of the silent mix-ups. Cos and sin are taken in the compute dtype and rounded once.

        **`apply_rope_rotate_half`.** `cos[position_ids]` is an advanced-indexing gather, `(max_position, D)` indexed
        by `(B, T)`, giving `(B, T, D)`. `unsqueeze(1)` inserts the head axis so one table row serves all $H$ heads of
        a token (and, with grouped-query attention, the 8 key heads and 32 query heads use the same rows).
        `rotate_half` is `cat(-x2, x1)`. The minus sign is the $-\sin$ of the rotation matrix: it negates the second
        half, which moves to the front. The multiply-add is the vectorised rotation from section 2.

        **`apply_rope_interleaved`.** The first $D/2$ columns of the rotate-half table hold each $\cos m\theta_i$ once.
        The strided slices `0::2` and `1::2` pick the pair coordinates. `stack(..., dim=-1).flatten(-2)` puts
        `(even, odd)` back next to each other, the inverse of the strided split.

        **The usual mistakes, and why they are wrong**:
        - *Angles in the low dtype*: bf16 tables computed in bf16 are noise after a few hundred positions. A check in
          float32 alone never sees it, so the check builds 8192-position tables in every dtype.
        - *`arange(D // 2) / D` for the exponent*: the right shape with the wrong frequencies. Caught by the hand case
          with base 100, where $\theta = (1, 0.1)$.
        - *`repeat_interleave` instead of `cat`*: an interleaved table fed to rotate-half code.
        - *Missing minus in `rotate_half`*: the result is no longer a rotation and lengths change. Caught by the
          90-degree hand case and by the norm property.
        - *`cos` and `sin` swapped*: still length-preserving (a rotation by $90° - m\theta$), so only a comparison
          with a reference catches it.
        - *Positions assumed to be $0, \dots, T-1$*: correct during prefill without padding, wrong at every decoding
          step and for left-padded rows. The model reads its prompt correctly and goes wrong once it starts
          generating.
        - *The wrong pairing*: the halves pairing inside the interleaved function is still a rotation, just of the
          wrong coordinates, so only a reference catches it. GPT-J's `rotate_every_two` combined with a rotate-half
          table is not even a rotation: adjacent coordinates get the cosines of two different frequencies.
        - *Interleaving not restored*: `cat(out_even, out_odd)` returns the rotate-half ordering of an interleaved
          rotation.
        - *Rotating the wrong way* ($e^{-\mathrm{i}m\theta}$): the scores still depend only on $m - n$, but with the
          sign flipped, so they differ from what the checkpoint was trained with.
        - *Forgetting to cast back*: a float32 query in a bf16 model. `F.scaled_dot_product_attention` refuses
          mixed dtypes, and ops that promote instead double the memory traffic of everything after them.
        - In the long-context rules: *the bands swapped* (the fast pairs interpolated, the slow ones kept: the
          opposite of the point); *no clamp* on Llama 3.1's $\gamma$, which extrapolates the blend outside
          $[\theta/s, \theta]$; *YaRN's ramp reversed*; *interpolation everywhere* (plain position interpolation
          under the name `yarn`); *no attention factor*, in `scaled_inv_freq` or in the tables; and the correction
          range *without `floor`/`ceil`* when `truncate` is on, which moves the ramp by a fraction of a pair.

        **`scaled_inv_freq`.** Both rules are one blend between $\theta_i$ and $\theta_i/s$ with a weight in
        $[0, 1]$: Llama 3.1 computes the weight from the wavelength, YaRN from the pair index, and a `clamp` turns a
        straight line into the three bands (keep, blend, interpolate) without any `if`. The frequencies stay in
        float32, as Hugging Face's (its tables are then built from float32 `inv_freq`); the attention factor is a
        Python float because it is a constant of the config.

        **Cost.** The table is $T_{\max} \times D/2$ angles and two transcendental functions each. For Llama 3 at
        8192 positions and $D = 128$ the two duplicated float32 tables take $2 \times 8192 \times 128 \times 4$ B $= 8$
        MiB, built once per model. Applying RoPE is 3 FLOPs per element, against reading and writing the element once:
        far below any GPU's ridge point, so it is memory-bound. Eager PyTorch makes it worse. The solution launches
        about seven kernels (two gathers, negate, cat, two multiplies, add, plus casts for fp16/bf16), each a round
        trip through HBM with its own temporary.

        **What production code does differently.**
        - *Half-size tables.* vLLM's `RotaryEmbedding` stores one `cos_sin_cache` of shape `(max_position, rotary_dim)`
          holding `rotary_dim / 2` cosines followed by `rotary_dim / 2` sines. FlashAttention's `apply_rotary_emb`
          takes `cos, sin` of shape `(seqlen, rotary_dim / 2)`. Neither stores the duplicate half.
        - *A flag for the pairing.* vLLM's `is_neox_style` and FlashAttention's `interleaved` choose the pairing
          inside one kernel. The model's config decides, and getting it wrong is the silent mix-up of section 5.
        - *Fused and in place.* vLLM's custom op rotates $q$ and $k$ together, in place, indexing the cache with a
          flat `(num_tokens,)` position tensor so that batching, padding and decoding all look the same.
          FlashAttention offers `seqlen_offsets` for KV-cache decoding, and `flash_attn_with_kvcache` can rotate the
          new $q$ and $k$ inside the attention kernel itself (`rotary_cos`, `rotary_sin`, `rotary_interleaved`).
          Liger-Kernel's `liger_rotary_pos_emb` is one Triton launch for both $q$ and $k$.
        - *The backward pass is RoPE again.* $y = R_m x$ gives $\partial L/\partial x = R_m^\top\, \partial L/\partial y =
          R(-m\theta)\,\partial L/\partial y$: the same kernel with `sin` negated (Liger's backward flag,
          FlashAttention's `conjugate`).
        - *Partial rotary.* Some models rotate only part of each head: GPT-NeoX-20B rotates 25% of the dimensions
          (`rotary_pct=0.25`), and DeepSeek-V2/V3 give every query head a separate 64-dimensional rotary part
          (`qk_rope_head_dim`) next to a part without position. The rotation is yours, applied to a slice.
        - *Scaled frequencies.* Hugging Face computes `cos, sin` on every forward from `inv_freq` and the position
          ids, with no stored table. The `rope_type` in the config (`"linear"`, `"dynamic"`, `"yarn"`, `"llama3"`,
          ...) only changes `inv_freq`, plus, for YaRN and LongRoPE, a scale on cos and sin (your `scaled_inv_freq`
          and `scaled_rope_cache`). Extending a context means changing `rope_cache`, never the rotation.
        - *Dynamic scaling.* `rope_type="dynamic"` (dynamic NTK) recomputes the base from the current length at every
          forward, so short prompts keep the original frequencies. Serving engines build one table at start-up
          instead (vLLM's YaRN is static), so the scaling applies to short prompts too; Qwen2.5's model cards
          therefore advise adding the YaRN `rope_scaling` block only when prompts really exceed its native 32k
          tokens.
    """)
    lesson.mistakes()
    return lesson
