"""Source of 04_CUDA_Systems/08_CUDA_Graphs.ipynb (build with `python -m llm_algo build p04.cuda_graphs`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.cuda_graphs",
        path="04_CUDA_Systems/08_CUDA_Graphs.ipynb",
        title_en="CUDA graphs: capture and replay a decode step",
        title_zh="CUDA Graph：捕获并重放一个解码步",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p02.kv_cache", "p02.continuous_batching", "p04.streams"],
    )
    lesson.title(
        intro=r"""
        A decode step of a small model is hundreds of tiny kernels: for every layer an RMSNorm (five or six
        elementwise kernels in eager PyTorch), three projections, the KV-cache writes, two attention matmuls, a
        softmax, a mask, the output projection, another norm, the MLP and two residual adds. Each kernel does a
        few microseconds of GPU work, and each costs the CPU about as much or more to *launch* (Python, PyTorch's
        dispatcher, the allocator, then `cudaLaunchKernel`). The GPU then waits for the CPU: the step takes
        (number of kernels) x (CPU cost per launch), however fast the GPU is. A **CUDA graph** (CUDA 图) records
        the launches of a step once and replays all of them with a single call, so the CPU cost per step drops to
        one launch and the GPU runs the kernels back to back. Every serving engine captures its decode step this
        way: vLLM and SGLang capture one graph per batch size (1, 2, 4, 8, 16, 24, ...), TensorRT-LLM has
        `cuda_graph_mode`, and `torch.compile(mode="reduce-overhead")` does it for a PyTorch function.

        A graph replays *exactly* what was recorded: the same kernels, on the same addresses, with the same
        scalar arguments. That single fact gives all the rules this lesson is about: inputs live in **static
        buffers** that you copy new values into, outputs are read from static buffers, the KV cache is
        preallocated and written in place at positions that are **device tensors** (a Python `int` would be baked
        into the graph), nothing may synchronise with the CPU (`.item()`, `print(tensor)`, `if tensor:`), and the
        shapes are fixed, so a real batch is **padded** to the nearest captured size.

        **You will implement** the bucketing and padding of a batch (`bucket_for`, `pad_batch`); a graph-safe
        decode step of a 32-layer tiny decoder (`StaticDecodeStep`) that owns its static inputs and output and
        writes the shared KV cache in place; and `GraphedDecoder`, which captures one `torch.cuda.CUDAGraph` per
        bucket and serves batches of any size by padding and replaying. **Graded against** brute-force bucket
        search, a full-recompute reference (float64, `F.scaled_dot_product_attention`), a recorder that fails on any
        CPU synchronisation inside the step, the storage addresses of every buffer, and a **capture/replay
        emulator** in the checks that records the operations of one call of your step and replays them, as a CUDA
        graph would, after new inputs were copied in: a value baked in at capture shows up as a stale result. On a
        GPU, the checks also capture your step in a real CUDA graph, and `python -m llm_algo bench p04.cuda_graphs`
        times an eager step against a replay.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **启动开销（launch overhead）**：小模型的一个解码步是几百个小核函数；每个核函数 GPU 只算 2–3 µs，CPU 发射它却要 5–10 µs（Python、调度器、`cudaLaunchKernel`），于是 GPU 在等 CPU，步时间 ≈ 核函数个数 × 单次发射开销。
        - **CUDA Graph**：把一步里的所有发射录制（capture）一次，之后一次 `g.replay()` 重放全部核函数；CPU 开销从几百次发射降到一次。
        - **静态地址**：重放时核函数读写的是捕获时的同一批地址。输入要 `copy_` 进静态缓冲区（不能重新绑定成新张量），输出从静态缓冲区读取，KV 缓存预先分配、原地写入。
        - **位置必须是设备张量**：捕获时读到的 Python 数（`int(pos)`、`.item()`、Python 计数器）会被“烤”进图里，重放时永远是旧值。
        - **捕获期间禁止同步**：`.item()`、`.tolist()`、`print(tensor)`、`if tensor:`、布尔掩码索引（`nonzero`）都会让 CPU 等 GPU，捕获会直接报错；也不能有依赖数据的控制流。
        - **形状固定 → 分桶**：每个批大小捕获一张图（vLLM/SGLang：1, 2, 4, 8, 16, 24, …），真实批次补齐到不小于它的最小桶，输出再切片；填充行的 KV 写入一个专用的“垃圾槽位”，否则会覆盖真实序列的缓存。
        - **捕获流程**：在侧流上预热几次（cuBLAS 句柄、分配器），再 `with torch.cuda.graph(g, pool=...)` 捕获；多张图共享一个内存池，从最大的桶开始捕获。
        - **实测（H200，一次运行，`python -m llm_algo bench p04.cuda_graphs`）**：32 层小模型一个解码步，eager 23.3 ms，CUDA Graph 重放 2.04 ms（batch 1，快 11.4 倍）；batch 8 为 20.6 ms 对 2.46 ms（8.4 倍）；含补齐与拷贝的 `GraphedDecoder` 调用为 9.7 倍 / 7.3 倍，达到“至少 5 倍”的目标。按约 1000 个核函数折算，每个核函数的 CPU 开销约 23 µs，比上面 5–10 µs 的估计大。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Where the time of a small decode step goes

        Take the model of this lesson: 32 layers, width 64, 4 heads. Count the kernels of one eager decode step per
        layer (section 4 writes it): RMSNorm as `pow, mean, add, rsqrt, mul, mul` (6), the q, k, v projections
        (3), two KV-cache writes and two gathers (4), the score matmul, scale and mask (3), softmax (1), the value
        matmul (1), the output projection and residual add (2), the second RMSNorm (6), the MLP up, SiLU, down and
        add (4): about 30 kernels, so

        $$
        n_\text{kernels} \approx 32 \times 30 + \text{a few} \approx 1000 \text{ kernels per token.}
        $$

        Each one moves tens of kilobytes at most (a $64 \times 64$ fp32 weight is 16 KB): on an H200 (spec sheet: 4.8 TB/s
        of HBM bandwidth) that is nanoseconds of memory traffic, so each kernel's GPU time is its fixed cost, about
        2-3 µs (a launch's latency on the device, the block scheduling, the tail). The CPU side of an eager PyTorch
        op is larger: roughly 5-10 µs (Python, argument parsing, the dispatcher, the caching allocator, the
        `cudaLaunchKernel` call itself, which alone is a few microseconds). With per-launch CPU cost $c$ and
        per-kernel GPU time $g$, a step of $n$ kernels costs

        $$
        t_\text{eager} \approx n \cdot \max(c, g), \qquad t_\text{graph} \approx c_\text{replay} + n \cdot (g + \delta),
        $$

        where $c_\text{replay}$ is one `cudaGraphLaunch` (microseconds to tens of microseconds) and $\delta$, about
        a microsecond, the gap between two replayed kernels. With $c = 8$ µs, $g = 2.5$ µs and $\delta = 1$ µs:
        $t_\text{eager} \approx 8$ ms and $t_\text{graph} \approx 3.5$ ms for $n = 1000$, a factor of 2 to 3 from
        launches alone. The factor grows with $c$ (a slower host CPU, more Python per op, sampling and bookkeeping
        between ops) and shrinks as the kernels grow.
        These are the model's assumptions, not measurements. The benchmark of this lesson measured the real thing
        (`python -m llm_algo bench p04.cuda_graphs`, one run on an H200; your machine will differ): at batch 1 the
        eager step took 23.3 ms and the replay of its graph 2.04 ms, **11.4x** less. The step launches about 1000
        kernels, as estimated above (a count of its operator calls: 1004 that compute, plus about 1000 views that
        launch nothing), so the replay costs about 2 µs per kernel, below the model's $g + \delta$, and the eager
        step about 23 µs of CPU time per kernel, three times the $c$ assumed here. Section 6 reads the whole
        table. A bigger model moves
        more bytes per kernel, $g$ grows past $c$, and graphs matter less: that is why decode (one token per
        sequence, small matrices) is where engines use them, and prefill (thousands of tokens per kernel) is not.

        The figure below draws the two timelines from this model (the numbers are stated in the cell).
    """)
    lesson.setup(r"""
        from dataclasses import dataclass

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F


        @dataclass
        class TinyDecoder:
            # A decoder-only transformer small enough that its decode step is all launch overhead.
            embed: torch.Tensor       # (V, D), tied with the output head
            pos_embed: torch.Tensor   # (T_max, D) learned absolute positions
            layers: list              # per layer: attn_norm (D,), wq, wk, wv, wo (D, D), mlp_norm (D,), w_up (D, F), w_down (F, D)
            final_norm: torch.Tensor  # (D,)
            num_heads: int

            @property
            def num_layers(self) -> int:
                return len(self.layers)

            @property
            def dim(self) -> int:
                return self.embed.shape[1]

            @property
            def head_dim(self) -> int:
                return self.dim // self.num_heads

            @property
            def vocab_size(self) -> int:
                return self.embed.shape[0]

            @property
            def max_len(self) -> int:
                return self.pos_embed.shape[0]


        def make_tiny_decoder(num_layers=32, dim=64, num_heads=4, ffn_dim=128, vocab_size=256, max_len=64, seed=0,
                              dtype=torch.float32, device="cpu") -> TinyDecoder:
            generator = torch.Generator().manual_seed(seed)

            def weight(*shape, scale):
                return (torch.randn(*shape, generator=generator) * scale).to(device=device, dtype=dtype)

            def norm():
                return (1.0 + 0.1 * torch.randn(dim, generator=generator)).to(device=device, dtype=dtype)

            layers = [
                dict(attn_norm=norm(), wq=weight(dim, dim, scale=dim**-0.5), wk=weight(dim, dim, scale=dim**-0.5),
                     wv=weight(dim, dim, scale=dim**-0.5), wo=weight(dim, dim, scale=0.5 * dim**-0.5), mlp_norm=norm(),
                     w_up=weight(dim, ffn_dim, scale=dim**-0.5), w_down=weight(ffn_dim, dim, scale=0.5 * ffn_dim**-0.5))
                for _ in range(num_layers)
            ]
            return TinyDecoder(weight(vocab_size, dim, scale=1.0), weight(max_len, dim, scale=0.5), layers, norm(), num_heads)


        def rms_norm(x, weight, eps=1e-6):
            # x (..., D) -> (..., D); written with elementwise ops on purpose: six small kernels in eager mode
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


        def allocate_kv_cache(model: TinyDecoder, num_slots: int):
            # One K and one V buffer for every layer and every sequence slot: (L, slots, H, T_max, hd), allocated once.
            shape = (model.num_layers, num_slots, model.num_heads, model.max_len, model.head_dim)
            return (torch.zeros(shape, dtype=model.embed.dtype, device=model.embed.device),
                    torch.zeros(shape, dtype=model.embed.dtype, device=model.embed.device))
    """)
    lesson.code(r"""
        # The timeline model of section 1: per-launch CPU cost, per-kernel GPU time, the gap between replayed kernels
        # and the cost of one graph launch (assumed values, of the orders quoted above; the benchmark measures them).
        cpu_launch_us, gpu_kernel_us, replay_gap_us, graph_launch_us, kernels = 8.0, 2.5, 1.0, 10.0, 12


        def timelines(graph: bool):
            cpu, gpu, gpu_free = [], [], 0.0
            if graph:
                cpu.append((0.0, graph_launch_us))
                start = graph_launch_us
                for _ in range(kernels):
                    gpu.append((start, gpu_kernel_us))
                    start += gpu_kernel_us + replay_gap_us
            else:
                for k in range(kernels):
                    issued = (k + 1) * cpu_launch_us           # the kernel can start once its launch call is done
                    cpu.append((k * cpu_launch_us, cpu_launch_us))
                    start = max(issued, gpu_free)
                    gpu.append((start, gpu_kernel_us))
                    gpu_free = start + gpu_kernel_us
            return cpu, gpu


        fig, axes = plt.subplots(2, 1, figsize=(9, 3.2), sharex=True)
        for ax, graph in zip(axes, (False, True)):
            cpu, gpu = timelines(graph)
            ax.broken_barh(cpu, (1, 0.8), facecolors="C0", edgecolor="white")
            ax.broken_barh(gpu, (0, 0.8), facecolors="C1", edgecolor="white")
            end = max(s + w for s, w in gpu)
            busy = sum(w for _, w in gpu)
            ax.set_yticks([0.4, 1.4], ["GPU", "CPU"])
            ax.set_title(f"{'CUDA graph replay' if graph else 'eager launches'}: {kernels} kernels in {end:.0f} µs, "
                         f"GPU busy {100 * busy / end:.0f}%", fontsize=9)
        axes[-1].set_xlabel("µs (model: launch 8 µs of CPU, kernel 2.5 µs of GPU, 1 µs between replayed kernels)")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 2. What capture records, and the rules that follow

        ```python
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):              # warm-up: cuBLAS workspaces, lazy inits, allocator pools
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):                  # capture: kernels are recorded, not run
            out = step()
        ...
        static_input.copy_(new_input)              # new data into the SAME memory
        g.replay()                                 # every recorded kernel, one launch
        result = out                               # the same memory, rewritten by the replay
        ```

        During capture the stream is in *capture mode*: each kernel launch is appended to a graph with its
        arguments (pointers and scalars) instead of being run. Memory allocated during capture comes from the
        graph's **private pool** and stays reserved for it, so the intermediates get the same addresses at every
        replay. From "the same kernels, the same pointers, the same scalars":

        | rule | why | what breaks it |
        | --- | --- | --- |
        | inputs are copied into static buffers | the kernels read the pointers they were captured with | `self.ids = new_ids` (a new tensor the graph never sees) |
        | outputs are read from a fixed buffer | the replay writes where capture wrote, nowhere else | `self.logits = new_logits` in the step (the caller holds the old tensor; a graph never makes the new one) |
        | no CPU synchronisation | the GPU runs nothing during capture, there is no value to read; CUDA refuses (`operation not permitted when stream is capturing`) | `.item()`, `.tolist()`, `float(t)`, `if t.any():`, `print(t)`, `x[bool_mask]` (a `nonzero`) |
        | no data-dependent control flow | Python ran once, at capture; the branch taken then is the branch forever | `if pos > 100: ...` with `pos` from a tensor |
        | positions and slots are device tensors | a Python scalar becomes a kernel argument, frozen | `cache[:, :, int(pos)] = k`, a Python step counter |
        | fixed shapes | the grid and the strides are baked in | a batch of 5 through a graph captured for 8 |
        | the KV cache is preallocated and written in place | its address is in the graph | `torch.cat([cache, k], dim=2)` (a new tensor each step) |

        Work that legitimately depends on CPU values (validating inputs, choosing the bucket, sampling with a
        Python loop) happens *outside* the captured function, before the copies into the static buffers. The
        `StaticKVCache.update` of `p02.kv_cache` is a good example of code that is right eagerly and cannot be
        captured: it validates with `bool((...).any())` and finds the columns to write with `nonzero`, both
        synchronisations. Here the validation moves to `set_inputs`, and the write becomes one `index_put_` whose
        indices are the position and slot tensors.
        Attention over a growing context is made shape-static by attending over the whole preallocated cache with
        a mask `key_index <= position` (built on the device from the position tensor), as a `StaticCache` in
        Hugging Face transformers does for `torch.compile`; paged kernels (vLLM's, FlashInfer's) instead take the
        block table and sequence lengths as device tensors and stop at each sequence's length inside the kernel.

        ## 3. Exercise `pad_batch`: buckets

        A graph has a fixed batch size, so an engine captures a list of sizes and pads each real batch to the
        smallest captured size that holds it: vLLM's default list starts 1, 2, 4, then every multiple of 8 (every 16
        past 256 in recent versions) up to its capture limit, and SGLang's is similar. Padding 5 sequences to 8 wastes 3 rows of
        (cheap, launch-bound) compute; capturing every size from 1 to 512 would cost memory and start-up time.

        - `bucket_for(batch, buckets) -> int`: the smallest bucket $\ge$ `batch`. `buckets` is any iterable of
          positive ints, in any order. Refuse (ValueError) `batch < 1`, a batch larger than the largest bucket (the
          engine must then split it or run it eagerly: silently truncating it would drop sequences), an empty or
          non-positive bucket list; (TypeError) a `batch` that is not an `int` (a `bool` is not a batch size).
        - `pad_batch(token_ids, positions, slots, buckets, pad_slot) -> (token_ids, positions, slots)`: three
          `(B,)` integer tensors in, three `(P,)` tensors out, `P = bucket_for(B, buckets)`, the first $B$ rows the
          inputs, same dtype and device. Padding rows get token 0, position 0 (a valid index, so their reads and
          writes stay in bounds) and slot `pad_slot`: a KV-cache slot kept for padding, so that their K/V writes
          land in scratch memory and never in a real sequence's slot. Refuse inputs of different lengths or not 1-D
          (ValueError).
    """)
    lesson.exercise(
        "pad_batch",
        r'''
        def bucket_for(batch: int, buckets) -> int:
            """The smallest bucket >= batch. buckets: an iterable of ints >= 1, in any order."""
            # TODO: refuse a non-int batch (TypeError), batch < 1, empty or non-positive buckets (ValueError)
            # TODO: the smallest bucket that holds the batch; ValueError if none does
            ### BEGIN SOLUTION
            if not isinstance(batch, int) or isinstance(batch, bool):
                raise TypeError(f"batch must be an int, got {type(batch).__name__}")
            buckets = list(buckets)
            if not buckets or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in buckets):
                raise ValueError(f"buckets must be a non-empty list of ints >= 1, got {buckets}")
            if batch < 1:
                raise ValueError(f"batch must be >= 1, got {batch}")
            fitting = [b for b in buckets if b >= batch]
            if not fitting:
                raise ValueError(f"a batch of {batch} is larger than the largest captured size {max(buckets)}: "
                                 "split it or run it eagerly")
            return min(fitting)
            ### END SOLUTION


        def pad_batch(token_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, buckets, pad_slot: int):
            """(B,) integer tensors -> (P,) tensors, P = bucket_for(B, buckets); padding rows: token 0, position 0,
            slot pad_slot."""
            # TODO: refuse tensors that are not 1-D or not of one length (ValueError)
            # TODO: allocate (P,) outputs like the inputs, copy the B real rows, fill the padding rows
            ### BEGIN SOLUTION
            if any(t.dim() != 1 for t in (token_ids, positions, slots)):
                raise ValueError("token_ids, positions and slots must be 1-D tensors (B,)")
            batch = token_ids.shape[0]
            if positions.shape[0] != batch or slots.shape[0] != batch:
                raise ValueError(f"token_ids, positions and slots have different lengths: {batch}, "
                                 f"{positions.shape[0]}, {slots.shape[0]}")
            size = bucket_for(batch, buckets)
            padded_ids = token_ids.new_zeros(size)                   # (P,) pad token 0
            padded_positions = positions.new_zeros(size)             # (P,) position 0: in bounds
            padded_slots = slots.new_full((size,), pad_slot)         # (P,) the scratch slot
            padded_ids[:batch] = token_ids
            padded_positions[:batch] = positions
            padded_slots[:batch] = slots
            return padded_ids, padded_positions, padded_slots
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `StaticDecodeStep`: a decode step that can be captured

        One decode step for a batch of $B$ sequences, each at its own position (continuous batching: sequences
        join and leave, so the rows are at different lengths) and each owning a **slot** of a KV cache shared by
        every step object (every bucket's graph writes the same cache):

        | tensor | shape | meaning |
        | --- | --- | --- |
        | `token_ids`, `positions`, `slots` | $(B,)$ int64 | static inputs: the token to process, its position $p_b$, the sequence's cache slot $s_b$ |
        | `k_cache`, `v_cache` | $(L, S, H, T_\max, d_h)$ | given to the constructor, shared; slot $s$ holds one sequence |
        | `logits` | $(B, V)$ | static output |

        The step, with $x_b \in \mathbb{R}^D$ the hidden state of row $b$ and, per layer $\ell$,
        $h = \text{RMSNorm}(x)$, $q, k, v = h W_q, h W_k, h W_v$ split into $H$ heads of $d_h = D/H$:

        $$
        \begin{aligned}
        x_b &= E[\text{token}_b] + P[p_b] \\
        K_\ell[s_b, :, p_b] &\leftarrow k_b, \qquad V_\ell[s_b, :, p_b] \leftarrow v_b \quad \text{(in place)} \\
        a_{b,h} &= \operatorname{softmax}_{t \le p_b}\!\Big(\tfrac{q_{b,h} \cdot K_\ell[s_b, h, t]}{\sqrt{d_h}}\Big)\, V_\ell[s_b, h, t] \\
        x &\leftarrow x + a W_o, \qquad x \leftarrow x + \operatorname{SiLU}(\text{RMSNorm}(x) W_\text{up}) W_\text{down} \\
        \text{logits} &= \text{RMSNorm}(x)\, E^\top \quad (B, V),
        \end{aligned}
        $$

        each RMSNorm with its own weight (`attn_norm`, `mlp_norm`, `final_norm`; use the setup's `rms_norm`), the
        softmax over all $T_\max$ key columns with columns $t > p_b$ masked to $-\infty$ (fixed shapes: no slicing
        to $p_b + 1$). This is the model the checks recompute in full, token by token, in float64.

        `StaticDecodeStep(model, batch_size, k_cache, v_cache)`:

        - `__init__`: refuse `batch_size < 1` or a non-int (ValueError), caches whose shape is not
          $(L, S, H, T_\max, d_h)$ for this model (ValueError). Allocate the static buffers once, on the model's
          device: `self.token_ids`, `self.positions`, `self.slots` (int64 zeros, $(B,)$) and `self.logits`
          ($(B, V)$ in the model's dtype), and anything constant the step needs (an `arange` of key columns).
        - `set_inputs(token_ids, positions, slots)`: runs *outside* the graph, so it may look at values: refuse
          (TypeError) a non-tensor or a non-integer dtype, (ValueError) a shape other than $(B,)$ or values out of
          range (tokens in $[0, V)$, positions in $[0, T_\max)$, slots in $[0, S)$); then **copy** the values into
          the static buffers.
        - `step()`: the decode step above from the static buffers only; writes the logits into `self.logits` and
          returns it. Inside `step()`: no `.item()`, `.tolist()`, `int()`/`float()`/`bool()` of a tensor, no boolean
          mask indexing, no Python value derived from the data, no new tensor kept in `self`; index with the
          position and slot tensors (`cache[layer, slots, :, positions] = k` writes $B$ vectors in one
          `index_put_`).
    """)
    lesson.exercise(
        "StaticDecodeStep",
        r'''
        class StaticDecodeStep:
            """A graph-safe decode step: static inputs (token_ids, positions, slots) and output (logits), the shared
            KV cache written in place at device-tensor positions."""

            def __init__(self, model: TinyDecoder, batch_size: int, k_cache: torch.Tensor, v_cache: torch.Tensor):
                # TODO: refuse a bad batch_size and caches that are not (L, S, H, T_max, hd) for this model
                # TODO: the static buffers: token_ids, positions, slots (B,) int64; logits (B, V); key column indices
                ### BEGIN SOLUTION
                if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
                    raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
                want = (model.num_layers, model.num_heads, model.max_len, model.head_dim)
                for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
                    if cache.dim() != 5 or (cache.shape[0], *cache.shape[2:]) != want:
                        raise ValueError(f"{name} must be (L={want[0]}, slots, H={want[1]}, T_max={want[2]}, "
                                         f"hd={want[3]}), got {tuple(cache.shape)}")
                self.model, self.k_cache, self.v_cache = model, k_cache, v_cache
                device = model.embed.device
                self.token_ids = torch.zeros(batch_size, dtype=torch.long, device=device)        # (B,)
                self.positions = torch.zeros(batch_size, dtype=torch.long, device=device)        # (B,)
                self.slots = torch.zeros(batch_size, dtype=torch.long, device=device)            # (B,)
                self.key_index = torch.arange(model.max_len, device=device)                     # (T_max,)
                self.logits = torch.zeros(batch_size, model.vocab_size, dtype=model.embed.dtype, device=device)
                ### END SOLUTION

            def set_inputs(self, token_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
                """Validate (outside the graph) and copy the new inputs into the static buffers."""
                # TODO: TypeError for a non-tensor or non-integer dtype; ValueError for a shape != (B,) or a value out
                #       of range; then copy into self.token_ids, self.positions, self.slots
                ### BEGIN SOLUTION
                batch = self.token_ids.shape[0]
                limits = (("token_ids", token_ids, self.model.vocab_size), ("positions", positions, self.model.max_len),
                          ("slots", slots, self.k_cache.shape[1]))
                for name, values, high in limits:
                    if (not isinstance(values, torch.Tensor) or values.dtype == torch.bool or values.is_floating_point()
                            or values.is_complex()):
                        raise TypeError(f"{name} must be an integer tensor, got {getattr(values, 'dtype', type(values))}")
                    if values.shape != (batch,):
                        raise ValueError(f"{name} must have shape ({batch},), got {tuple(values.shape)}")
                    if bool((values < 0).any()) or bool((values >= high).any()):
                        raise ValueError(f"{name} must lie in [0, {high}), got {values.tolist()}")
                self.token_ids.copy_(token_ids)
                self.positions.copy_(positions)
                self.slots.copy_(slots)
                ### END SOLUTION

            @torch.no_grad()
            def step(self) -> torch.Tensor:
                """The decode step on the static inputs; returns self.logits (B, V), written in place."""
                # TODO: embeddings of the tokens and positions; the mask of visible key columns (B, T_max)
                # TODO: per layer: norm, q/k/v, write k and v at [layer, slots, :, positions] in place, attention over
                #       the slots' whole cache rows with the mask, output projection, MLP, residuals
                # TODO: final norm and tied head, written into self.logits
                ### BEGIN SOLUTION
                m = self.model
                B, H, hd = self.token_ids.shape[0], m.num_heads, m.head_dim
                x = m.embed[self.token_ids] + m.pos_embed[self.positions]                 # (B, D)
                visible = self.key_index[None, :] <= self.positions[:, None]             # (B, T_max)
                for layer, w in enumerate(m.layers):
                    h = rms_norm(x, w["attn_norm"])                                       # (B, D)
                    q = (h @ w["wq"]).view(B, H, hd)                                      # (B, H, hd)
                    k = (h @ w["wk"]).view(B, H, hd)
                    v = (h @ w["wv"]).view(B, H, hd)
                    self.k_cache[layer, self.slots, :, self.positions] = k               # index_put_, (B, H, hd)
                    self.v_cache[layer, self.slots, :, self.positions] = v
                    keys = self.k_cache[layer, self.slots]                                # (B, H, T_max, hd)
                    values = self.v_cache[layer, self.slots]
                    scores = torch.einsum("bhd,bhtd->bht", q, keys) * hd**-0.5           # (B, H, T_max)
                    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
                    attn = torch.einsum("bht,bhtd->bhd", scores.softmax(dim=-1), values)  # (B, H, hd)
                    x = x + attn.reshape(B, H * hd) @ w["wo"]                              # (B, D)
                    x = x + F.silu(rms_norm(x, w["mlp_norm"]) @ w["w_up"]) @ w["w_down"]
                self.logits.copy_(rms_norm(x, m.final_norm) @ m.embed.T)                  # (B, V) into the static buffer
                return self.logits
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        Try it eagerly (this cell runs once you have written the exercise): two sequences in slots 0 and 2, the
        second one joining a step later. The eager step already behaves like a graph would, because it only ever
        reads the static buffers: after `set_inputs`, `step()` sees the new values through the same addresses.
    """)
    lesson.code(r"""
        try:
            model = make_tiny_decoder(num_layers=32)
            k_cache, v_cache = allocate_kv_cache(model, num_slots=4)
            decode = StaticDecodeStep(model, 2, k_cache, v_cache)
            address = decode.logits.data_ptr()
            for t in range(3):
                decode.set_inputs(torch.tensor([7 + t, 11 + t]), torch.tensor([t, max(t - 1, 0)]), torch.tensor([0, 2]))
                logits = decode.step()
                print(f"step {t}: next tokens {logits.argmax(-1).tolist()}, logits at the same address: "
                      f"{logits.data_ptr() == address}")
        except NotImplementedError:
            print("write StaticDecodeStep first")
    """)
    lesson.md(r"""
        ## 5. Exercise `GraphedDecoder`: one graph per bucket

        `GraphedDecoder(model, buckets, num_slots)` is the decode loop of a serving engine, minus the scheduler:

        - `__init__`: refuse (ValueError) `num_slots < 1` and bad buckets (your `bucket_for`'s rules: an empty list
          or a size below 1). Keep `self.buckets` (sorted, without repeats) and `self.pad_slot = num_slots`, and
          allocate `self.k_cache, self.v_cache` with **`num_slots + 1`** slots (`allocate_kv_cache`): slots
          $0..S-1$ for sequences,
          slot $S$ the scratch slot of the padding rows. `self.steps[b]`: a `StaticDecodeStep` of batch size $b$ for
          every bucket, all on the same cache. On a GPU (the model's device is `cuda`), capture
          `self.graphs[b]`, a `torch.cuda.CUDAGraph` for every bucket: first set every step's inputs to padding
          rows (token 0, position 0, `pad_slot`), warm each step up a few times on a side stream, then capture from
          the largest bucket down with one shared memory pool (`torch.cuda.graph_pool_handle()`, passed as
          `pool=`): the intermediates of every graph then come from the same memory, which is free for reuse
          because the graphs never run at the same time. On a CPU `self.graphs` stays empty.
        - `__call__(token_ids, positions, slots) -> logits (B, V)`: pad with your `pad_batch` (a batch larger than
          the largest bucket is refused there), `set_inputs` of that bucket's step, then `self.graphs[P].replay()`
          where there is a graph and `step()` otherwise; return the first $B$ rows **as a copy**: the static buffer
          is overwritten by the next replay, and a caller that keeps the result (a sampler, a log) would see it
          change.

        `torch.compile` and `torch.cuda.make_graphed_callables` are forbidden here: they would do the capture for
        you. On a CPU the checks grade the padding, the slots and the results; on a GPU also that every bucket has
        its graph and that `__call__` replays it instead of running the eager step.
    """)
    lesson.exercise(
        "GraphedDecoder",
        r'''
        class GraphedDecoder:
            """Decode steps of any batch size up to max(buckets): padded to a bucket, replayed from its CUDA graph."""

            def __init__(self, model: TinyDecoder, buckets, num_slots: int):
                # TODO: refuse num_slots < 1 and bad buckets; self.buckets sorted without repeats; pad_slot = num_slots
                # TODO: self.k_cache, self.v_cache with num_slots + 1 slots; self.steps[b], a StaticDecodeStep per bucket
                # TODO: self.graphs = {} (it stays empty on a CPU)
                # TODO: on cuda: padding inputs, warm-up on a side stream, capture each bucket (largest first, one
                #       shared pool) into self.graphs[bucket]
                ### BEGIN SOLUTION
                if not isinstance(num_slots, int) or num_slots < 1:
                    raise ValueError(f"num_slots must be an int >= 1, got {num_slots!r}")
                buckets = list(buckets)
                bucket_for(1, buckets)  # the same rules for the bucket list as the padding uses
                self.model, self.buckets, self.pad_slot = model, sorted(set(buckets)), num_slots
                self.k_cache, self.v_cache = allocate_kv_cache(model, num_slots + 1)
                self.steps = {b: StaticDecodeStep(model, b, self.k_cache, self.v_cache) for b in self.buckets}
                self.graphs = {}
                if model.embed.device.type == "cuda":
                    self._capture()

            def _capture(self) -> None:
                device = self.model.embed.device
                for size, step in self.steps.items():  # padding rows: the warm-up writes only the scratch slot
                    pad = torch.zeros(size, dtype=torch.long, device=device)
                    step.set_inputs(pad, pad, torch.full_like(pad, self.pad_slot))
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    for step in self.steps.values():
                        for _ in range(3):
                            step.step()
                torch.cuda.current_stream(device).wait_stream(side)
                pool = torch.cuda.graph_pool_handle()
                for size in reversed(self.buckets):  # largest first: the smaller graphs fit in its memory
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        self.steps[size].step()
                    self.graphs[size] = graph
                ### END SOLUTION

            def __call__(self, token_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
                """(B,) inputs -> logits (B, V), a copy."""
                # TODO: pad to the bucket, set the bucket step's inputs, replay its graph (or step() without one)
                # TODO: return the first B rows of its logits, copied
                ### BEGIN SOLUTION
                batch = token_ids.shape[0]
                padded = pad_batch(token_ids, positions, slots, self.buckets, self.pad_slot)
                size = padded[0].shape[0]
                step = self.steps[size]
                step.set_inputs(*padded)
                if size in self.graphs:
                    self.graphs[size].replay()
                else:
                    step.step()
                return step.logits[:batch].clone()
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Timing it on a GPU

        On a machine with CUDA (Colab's T4 will do), the next cell captures your `StaticDecodeStep` for the
        32-layer model at batch 8 exactly as section 2 shows, and times eager steps against replays with the
        wall clock (launch overhead is CPU time, so the wall clock is the right measure here). On a CPU it says so
        and does nothing.
    """)
    lesson.code(r"""
        import time


        def per_step_us(fn, repeats=50):
            fn()  # once untimed: a graph's first replay also uploads it to the device
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            torch.cuda.synchronize()
            return 1e6 * (time.perf_counter() - start) / repeats


        if not torch.cuda.is_available():
            print("no GPU here: on one, this cell captures your step and times eager steps against graph replays")
        else:
            try:
                gpu_model = make_tiny_decoder(num_layers=32, device="cuda")
                k_cache, v_cache = allocate_kv_cache(gpu_model, 8)
                decode = StaticDecodeStep(gpu_model, 8, k_cache, v_cache)
                decode.set_inputs(torch.randint(0, 256, (8,), device="cuda"), 7 * torch.arange(8, device="cuda"),
                                  torch.arange(8, device="cuda"))
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        decode.step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    decode.step()
                eager_us, replay_us = per_step_us(decode.step), per_step_us(graph.replay)
                print(f"{torch.cuda.get_device_name()}: eager {eager_us:.0f} µs per step, replay {replay_us:.0f} µs "
                      f"per step ({eager_us / replay_us:.1f}x)")
            except NotImplementedError:
                print("write StaticDecodeStep first")
    """)
    lesson.md(r"""
        ### Counting the launches

        The cell below counts the operations one call of your step sends to PyTorch's dispatcher, with a
        `TorchDispatchMode` (the hook that sits just above the kernels). Views (`view`, `select`, `transpose`,
        `expand`, ...) launch nothing; the others are roughly the kernels a GPU would run. That count is the $n$ of
        section 1 for this model.
    """)
    lesson.code(r"""
        from torch.utils._python_dispatch import TorchDispatchMode

        VIEWS = {"view", "_unsafe_view", "select", "slice", "transpose", "expand", "t", "unsqueeze", "squeeze", "permute",
                 "alias", "detach", "as_strided", "_reshape_alias", "reshape", "lift_fresh"}


        class OpCounter(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops, self.views = 0, 0

            @classmethod
            def _should_skip_dynamo(cls):  # nothing is compiled here: spares the import of torch._dynamo
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.overloadpacket.__name__ in VIEWS:
                    self.views += 1
                else:
                    self.ops += 1
                return func(*args, **(kwargs or {}))


        try:
            for layers in (1, 8, 32):
                small = make_tiny_decoder(num_layers=layers)
                k_cache, v_cache = allocate_kv_cache(small, 2)
                decode = StaticDecodeStep(small, 2, k_cache, v_cache)
                decode.set_inputs(torch.tensor([1, 2]), torch.tensor([0, 3]), torch.tensor([0, 1]))
                with OpCounter() as counter:
                    decode.step()
                print(f"{layers:2d} layers: {counter.ops:5d} operations that launch a kernel, {counter.views:5d} views")
        except NotImplementedError:
            print("write StaticDecodeStep first")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`bucket_for` and `pad_batch`.** The smallest bucket that holds the batch; the one mistake that matters
        is `>` for `>=` (a batch of exactly 8 padded to 16: twice the work, and with no larger bucket, a refusal of
        a batch that fits). A batch beyond the largest bucket must be refused loudly: vLLM falls back to eager
        execution there, and a bucket that silently held fewer rows than the batch would drop sequences. The
        padding rows must be *valid* inputs: position 0 (an index inside the cache; `torch.empty` would hold
        anything and index out of bounds, which on a GPU is a device-side assert inside a replay) and the scratch
        slot (vLLM's `PAD_SLOT_ID = -1`, which its cache-write kernel skips; here a real slot that no sequence owns).
        With slot 0 instead, every padded step overwrites position 0 of the sequence in slot 0, and that sequence's
        outputs drift from then on, without any error.

        **`StaticDecodeStep`.** Everything the step reads lives in `self` or in the model, allocated once;
        everything it computes is a function of tensors, never of Python values read from them. The three lines
        that make it graph-safe:

        - `self.k_cache[layer, self.slots, :, self.positions] = k` is one `index_put_` with two index tensors: row
          $b$ of `k` (its $H \times d_h$ values) goes to slot `slots[b]`, column `positions[b]`. The position is
          read by the kernel at replay time, from the static buffer: the mutant with `int(self.positions[0])`
          (or a Python step counter) computes the right thing eagerly for one position, is refused by the
          recorder (a CPU synchronisation), and in a graph would write every future token at the capture's position.
        - `visible = key_index[None, :] <= positions[:, None]`: the mask of visible columns, built on the device.
          The alternative, `cache[..., : pos + 1]`, needs `pos` on the CPU (a sync) and changes the shape every step
          (a new graph every step). Attending over all $T_\max$ columns costs $O(T_\max)$ per step instead of
          $O(p)$: fine at 64 columns, and the reason paged-attention kernels take sequence lengths as tensors.
        - `self.logits.copy_(...)` and `self.token_ids.copy_(...)`: the addresses never change. `self.token_ids =
          token_ids` works eagerly and fails in a graph, which keeps reading the old buffer: the checks' emulator
          replays the captured operations and sees exactly that (stale logits).

        `set_inputs` may synchronise (`bool(...)`, `.tolist()` in an error message): it runs outside the graph,
        before the replay, where the engine's scheduler decides what to run anyway. In production the inputs are
        prepared on the CPU (vLLM builds `input_ids`, `positions` and `slot_mapping` in pinned host buffers) and
        copied in with `non_blocking=True`.

        **`GraphedDecoder`.** The warm-up on a side stream is what PyTorch's documentation asks for: the first
        calls of cuBLAS create handles and workspaces and the caching allocator grows its pools, none of which may
        happen during capture. Setting the static inputs to padding rows first makes the warm-up write only the
        scratch slot. Capturing from the largest bucket down with one pool lets the smaller graphs reuse the
        larger one's intermediate memory (vLLM does the same, in the same order); that is safe because only one
        graph runs at a time, in stream order, and no graph's output lives in the pool (each step's `logits` were
        allocated before any capture), so the graphs may be replayed in any order. The result is copied out because
        the static `logits` belong to the step and its graph: the next call in the same bucket overwrites them.

        **The usual mistakes, and why they are wrong**: `>` for `>=`; the
        first fitting bucket of an unsorted list; no refusal beyond the largest bucket; padding positions left
        uninitialised; padding rows in slot 0; a position read with `int()` or a length with `.item()` (a sync
        during capture); the attended length computed as a Python int in `set_inputs` (no sync in the step, right
        eagerly, and stale in every replay: only the emulator sees it); a Python step counter as the position; the inputs rebound instead of copied; a fresh
        output tensor kept in `self`; the KV cache written out of place (`index_put` instead of `index_put_`);
        the current token's column masked out (`<` for `<=`); no validation in `set_inputs`; one KV cache per
        bucket (a sequence that changes bucket loses its past); every batch run in the largest bucket; the result
        returned as a view of the static buffer. Another one to avoid, which no mutant here covers: a decoder that
        captures its graphs but never replays them.

        **Cost.** Capture costs one eager step's time per bucket plus the graph instantiation; the memory is the
        largest bucket's intermediates (shared pool) plus the static buffers. Replay costs one launch on the CPU.
        Graphs are not free of constraints: any new shape needs a new graph, and replaying a graph whose inputs
        you forgot to copy gives a confidently wrong answer, never an error.

        **In production.** vLLM captures the decode step of the whole model for its list of batch sizes at
        start-up (`--enforce-eager` turns it off; recent versions capture "piecewise", around attention, and
        full graphs for decode-only batches). SGLang does the same (`--cuda-graph-max-bs`, `--disable-cuda-graph`).
        TensorRT-LLM captures per batch size as well. `torch.compile(mode="reduce-overhead")` wraps compiled
        regions in CUDA graphs (CUDAGraph Trees), copying inputs into static buffers for you and re-recording
        when a shape changes; Hugging Face's `StaticCache` exists so that `generate` can be compiled that way.
        Speculative decoding and MoE kernels with data-dependent routing are where graphs get hard: the number of
        accepted tokens or tokens per expert must become a tensor, never a Python branch.

        **Reading the numbers.** One run on an H200 (`python -m llm_algo bench p04.cuda_graphs`; torch 2.11,
        CUDA 13.0; your GPU and host CPU will differ), the 32-layer model (dim 64, 4 heads, 256 positions of cache),
        median times:

        | batch | eager step | CUDA graph replay | `GraphedDecoder` call (pad, copy in, replay, copy out) |
        | --- | --- | --- | --- |
        | 1 | 23.29 ms | 2.04 ms, **11.4x** less than eager | 2.39 ms, 9.7x |
        | 8 | 20.57 ms | 2.46 ms, **8.4x** | 2.83 ms, 7.3x |

        **The target of a 5x cut in a 32-layer tiny decode step's launch overhead is met**: 11.4x at batch 1 and
        8.4x at batch 8 for the replay, and still 9.7x and 7.3x once `GraphedDecoder`'s bookkeeping is counted.
        Section 1's model predicted a factor of 2 to 3 with $c = 8$ µs; the measured factor is larger because the
        CPU cost per kernel is larger. The step launches about 1000 kernels (1004 operator calls that compute, and
        about 1000 views between them that launch nothing but still pass through Python and the dispatcher), so the
        eager step costs about 23 µs of CPU time per kernel, while the replay costs about 2 µs per kernel of GPU
        time and gaps. Where the CPU's 23 µs go (Python, `einsum`'s parsing, advanced indexing's argument
        handling, the dispatcher, the launch) a CPU profile (`torch.profiler` with `record_shapes`, or `py-spy`)
        would show; this run only timed the step.

        The eager step does not depend on the batch: the same operators run, and the 2.7 ms between the two eager
        rows (batch 8 the faster one) is most likely the host's variation between two measurements, not an
        effect of the batch. The replay does grow with the batch, by 21% (2.04 to 2.46 ms), most likely because the
        GPU work grows: the gathers of the slots' cache rows and the attention over them are 8 times larger at
        batch 8. That is also why the ratio
        falls from 11.4x to 8.4x, and it will keep falling as the kernels grow, which is section 1's point: graphs
        matter for decode, where kernels are tiny. `GraphedDecoder`'s call adds about 0.36 ms at both batch sizes:
        the padding, `set_inputs`' validation (its `bool(...)` checks each wait for the GPU) and copies, and the copy
        out. In a real engine that work is done on pinned host buffers while the previous step runs.
    """)
    lesson.mistakes()
    return lesson
