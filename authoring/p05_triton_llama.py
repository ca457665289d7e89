"""Source of 05_Projects/05_Triton_Llama.ipynb (build with `python -m llm_algo build p05.triton_llama`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p05.triton_llama",
        path="05_Projects/05_Triton_Llama.ipynb",
        title_en="A Llama in your own Triton kernels",
        title_zh="用你自己的 Triton 内核拼出 Llama",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=[
            "p03.rmsnorm",
            "p03.rope",
            "p03.flash_attention_bwd",
            "p03.fused_elementwise",
            "p03.cross_entropy",
            "p02.llama_block",
        ],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Eager PyTorch runs a Llama decoder layer as a few dozen kernels, and outside the six projection matmuls almost
        all of them are memory-bound: RMSNorm reads and writes the hidden states in several passes, RoPE builds
        `rotate_half` copies, attention materialises the $S \times S$ score matrix, SwiGLU writes `silu(gate)` before
        multiplying it by `up`, and the loss writes a float32 copy of the `(tokens, vocab)` logits. Liger-Kernel
        (Hsu et al., 2024, *Liger Kernel: Efficient Triton Kernels for LLM Training*) replaces RMSNorm, RoPE, SwiGLU and
        the loss with Triton kernels, leaves attention to FlashAttention, and reports on average 20% higher training
        throughput and 60% less GPU memory than Hugging Face's implementations of popular LLMs (most of the memory from
        its fused linear cross-entropy); Unsloth ships the same set. The projections stay cuBLAS matmuls: they are
        already compute-bound.

        **You will assemble** the kernels you wrote in Part 03 into one Llama: your `rms_norm`
        (`p03.rmsnorm`), `RotaryEmbedding` (`p03.rope`), FlashAttention forward and backward
        (`p03.flash_attention_fwd`, `p03.flash_attention_bwd`), `SwiGLU` (`p03.fused_elementwise`) and
        `fused_cross_entropy` (`p03.cross_entropy`). **Graded on outcomes:** the block's output and every gradient
        equal those of Hugging Face's `LlamaDecoderLayer` built from the same weights; the whole model's logits, loss
        and one training step equal `LlamaForCausalLM`'s; and the PyTorch builtins that your kernels replace may not
        run inside your code. On a GPU, `python -m llm_algo bench p05.triton_llama` times your block against eager
        Hugging Face and `torch.compile` at Llama-3-8B's layer shape.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **组装，而不是重写**：RMSNorm、RoPE、FlashAttention（前向 + 反向）、SwiGLU、融合交叉熵都来自你在第 03 部分写的 Triton 内核（`lesson.use` 取你的版本，未通过时取参考实现）。
        - **投影仍用矩阵乘**：q/k/v/o 和 MLP 的三个投影是计算密集的 GEMM，交给 cuBLAS（`x @ W.T`）；被替换的是其余访存密集的算子。
        - **布局**：RoPE 内核要 `(B, S, H, D)`，FlashAttention 要 `(B, H, S, D)`：用 `transpose(1, 2)` 视图衔接，只要最后一维连续即可，不必复制。
        - **dtype**：FlashAttention 只接受 fp16/bf16，所以整个块以一种 16 位 dtype 运行；CPU 上的 Triton 解释器没有 bf16，检查用 fp16，GPU 上再加 bf16。
        - **融合交叉熵会覆盖 logits**：前向结束时 logits 的内存里已是梯度；需要 logits 的人必须先自己复制一份。
        - **验收**：块的输出和所有梯度、整个模型的 logits、loss 和一步训练后的权重，都与 Hugging Face 的 `LlamaDecoderLayer` / `LlamaForCausalLM` 相等（在容差策略内）；内核所替代的 PyTorch 算子（`F.rms_norm`、softmax、SDPA、`F.silu`、`F.cross_entropy`）在你的代码里被禁止。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Which kernel replaces what

        One Llama decoder layer, for hidden states $x$ of shape $(B, S, d)$ with $H$ query heads and $H_{kv}$ key/value
        heads of size $D$ (so $d = H D$) and an MLP of width $I$:

        | step | eager PyTorch (Hugging Face) | this project | shapes |
        | --- | --- | --- | --- |
        | $h = \operatorname{RMSNorm}(x) \odot g_1$ | `pow`, `mean`, `rsqrt`, `mul`, `mul` | your `rms_norm` | $(B, S, d)$ |
        | $q, k, v = h W_q^\top, h W_k^\top, h W_v^\top$ | 3 GEMMs | 3 GEMMs (unchanged) | $(B, S, H, D)$, $(B, S, H_{kv}, D)$ |
        | RoPE on $q$, $k$ | `rotate_half` (cat, neg), 4 `mul`, 2 `add` | your `RotaryEmbedding` | same |
        | $o = \operatorname{softmax}(q k^\top / \sqrt D + M)\, v$ | GEMM, mask, softmax, GEMM (scores in HBM) | your `FlashAttention` | $(B, H, S, D)$ |
        | $x \mathrel{+}= o W_o^\top$ | GEMM, add | GEMM, add | $(B, S, d)$ |
        | $h = \operatorname{RMSNorm}(x) \odot g_2$ | as above | your `rms_norm` | $(B, S, d)$ |
        | $x \mathrel{+}= (\operatorname{silu}(h W_g^\top) \odot h W_u^\top) W_d^\top$ | 3 GEMMs, `silu`, `mul`, add | 3 GEMMs, your `SwiGLU` | $(B S, I)$ |

        At the end of the model: a final RMSNorm, the head $z = h W_{\text{head}}^\top$ of shape $(B S, V)$, and the
        mean cross-entropy, which your `fused_cross_entropy` computes together with its gradient in one pass over $z$.

        **Where the time goes.** At Llama-3-8B's layer ($d = 4096$, $I = 14336$, $H = 32$, $H_{kv} = 8$, $D = 128$)
        with $B = 4$, $S = 2048$ in bf16, the seven GEMMs are $2 \cdot 8192 \cdot (4096 \cdot 6144 + 4096 \cdot 4096 +
        3 \cdot 4096 \cdot 14336) \approx 3.6$ TFLOP per forward, about 5 ms at the ~750 bf16 TFLOP/s that cuBLAS
        reaches on an H100 (989 peak); causal attention adds $4 B H S^2 D / 2 \approx 0.14$ TFLOP. What the fusion
        removes is traffic: eager attention alone writes and reads the $(B, H, S, S)$ scores, $4 \cdot 32 \cdot 2048^2 \cdot 2$ bytes = 1 GiB
        per pass in bf16, and each elementwise op moves the $(B S, d)$ or $(B S, I)$ activations once more.

        ## 2. Layouts between the kernels

        - Your `RotaryEmbedding.apply(q, k, cos, sin, offsets)` takes `q (B, S, H, D)` and `k (B, S, H_kv, D)`, the
          natural view of a projection's output, and returns rotated copies. `cos`, `sin` are `(S, D/2)` float32
          tables (given below: `rope_tables`), `offsets` the `(B,)` int32 start positions (zeros here).
        - `FlashAttention.apply(q, k, v, causal)` (given below, from your forward and backward) wants
          `(B, H, S, D)`: `q.transpose(1, 2)` is a view whose last dimension is still contiguous, which is all the
          kernels ask for. Grouped-query attention needs no `repeat_interleave`: the kernels map query head $h$ to key
          head $h \cdot H_{kv} / H$ themselves.
        - `SwiGLU.apply(gate, up)` takes 2-D `(B S, I)` tensors; `rms_norm(x, weight, eps)` any `(..., d)`.
        - The kernels differentiate through `torch.autograd.Function`s, so `loss.backward()` runs your backward
          kernels; the GEMMs and the embedding lookup keep PyTorch's autograd.

        **Dtypes.** FlashAttention accepts only fp16 and bf16 (tensor cores), so the whole block runs in one 16-bit
        dtype, its weights included; the norms, RoPE and the loss compute in float32 inside their kernels. On a CPU,
        the Triton interpreter has no bf16: the checks use fp16 there and add bf16 on a GPU.
    """)
    lesson.setup(r"""
        import math
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn

        from llm_algo.references.hf import tiny_llama_config, transformers_module

        # Your kernels (the reference where yours does not pass its checks yet)
        rms_norm = lesson.use("p03.rmsnorm", "rms_norm")
        RotaryEmbedding = lesson.use("p03.rope", "RotaryEmbedding")
        flash_attention_fwd = lesson.use("p03.flash_attention_fwd", "flash_attention_fwd")
        flash_attention_bwd = lesson.use("p03.flash_attention_bwd", "flash_attention_bwd")
        SwiGLU = lesson.use("p03.fused_elementwise", "SwiGLU")
        fused_cross_entropy = lesson.use("p03.cross_entropy", "fused_cross_entropy")


        class FlashAttention(torch.autograd.Function):
            '''Differentiable attention from your forward and backward kernels: q (B, H, S, D), k, v (B, H_kv, S, D).'''

            @staticmethod
            def forward(ctx, q, k, v, causal):
                out, lse = flash_attention_fwd(q, k, v, causal=causal)
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.causal = causal
                return out

            @staticmethod
            def backward(ctx, dout):
                q, k, v, out, lse = ctx.saved_tensors
                dq, dk, dv = flash_attention_bwd(q, k, v, out, lse, dout.contiguous(), causal=ctx.causal)
                return dq, dk, dv, None


        def rope_tables(seq_len: int, head_dim: int, theta: float, device=None):
            '''cos and sin of m * theta^(-2i/D) for positions m < seq_len: each (seq_len, head_dim // 2) float32.'''
            inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            angles = torch.arange(seq_len, dtype=torch.float32)[:, None] * inv_freq
            return angles.cos().to(device), angles.sin().to(device)


        def make_hf_model(seed: int = 0, **overrides):
            '''A tiny Hugging Face Llama with random weights (no download): hidden 64, 4 query heads over 2 KV heads
            of 16, MLP 128, vocab 128, 2 layers.'''
            torch.manual_seed(seed)
            fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128)
            config = tiny_llama_config(**{**fields, **overrides})
            model = transformers_module().LlamaForCausalLM(config)
            with torch.no_grad():
                for name, param in model.named_parameters():  # norm gains away from 1, so a swapped norm shows
                    if param.dim() == 1:
                        param.copy_(1 + 0.3 * torch.randn_like(param))
            return model.eval()
    """)
    lesson.md(r"""
        ## 3. Exercise `TritonLlamaBlock`: one decoder layer

        Build the layer from the `state_dict` of a Hugging Face `LlamaDecoderLayer` (keys `input_layernorm.weight`,
        `self_attn.q_proj.weight`, `self_attn.k_proj.weight`, `self_attn.v_proj.weight`, `self_attn.o_proj.weight`,
        `post_attention_layernorm.weight`, `mlp.gate_proj.weight`, `mlp.up_proj.weight`, `mlp.down_proj.weight`) and
        its `LlamaConfig` (`hidden_size`, `num_attention_heads`, `num_key_value_heads`, `head_dim`, `rms_norm_eps`,
        `rope_parameters["rope_theta"]`). Keep each tensor as an `nn.Parameter` named after its Hugging Face module —
        `input_layernorm`, `q_proj`, `k_proj`, `v_proj`, `o_proj`, `post_attention_layernorm`, `gate_proj`, `up_proj`,
        `down_proj` — copied (`.detach().clone()`), converted to `dtype` (fp16 or bf16: refuse others with
        `ValueError`) and moved to `device`. A missing key raises `KeyError` naming it.

        `forward(x)` takes `x (B, S, d)` of the block's dtype and device (refuse anything else with `ValueError`: a
        float32 `x` would reach the attention kernel and fail there with a less helpful message) and returns the
        layer's output, same shape and dtype, causal, positions $0 \ldots S-1$. Use your kernels for the norms, RoPE,
        attention and SwiGLU, and `@` with the transposed weights for the projections. `F.rms_norm`, softmax, SDPA and
        `F.silu` are forbidden while the checks run.
    """)
    lesson.exercise(
        "TritonLlamaBlock",
        r'''
        class TritonLlamaBlock(nn.Module):
            """A Llama decoder layer whose RMSNorm, RoPE, attention and SwiGLU are your Triton kernels."""

            NAMES = {
                "input_layernorm": "input_layernorm.weight",
                "q_proj": "self_attn.q_proj.weight",
                "k_proj": "self_attn.k_proj.weight",
                "v_proj": "self_attn.v_proj.weight",
                "o_proj": "self_attn.o_proj.weight",
                "post_attention_layernorm": "post_attention_layernorm.weight",
                "gate_proj": "mlp.gate_proj.weight",
                "up_proj": "mlp.up_proj.weight",
                "down_proj": "mlp.down_proj.weight",
            }

            def __init__(self, state_dict: dict, config, dtype=torch.float16, device=None):
                super().__init__()
                # TODO: refuse a dtype other than fp16/bf16; keep the config numbers (heads, kv heads, head_dim, eps, theta)
                # TODO: one nn.Parameter per entry of NAMES (a copy, in dtype, on device); KeyError for a missing key
                ### BEGIN SOLUTION
                if dtype not in (torch.float16, torch.bfloat16):
                    raise ValueError(f"the attention kernels need float16 or bfloat16, got {dtype}")
                self.dtype = dtype
                self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
                self.head_dim, self.hidden_size = config.head_dim, config.hidden_size
                self.eps, self.theta = config.rms_norm_eps, config.rope_parameters["rope_theta"]
                for attribute, key in self.NAMES.items():
                    if key not in state_dict:
                        raise KeyError(f"TritonLlamaBlock: the state_dict has no {key!r}")
                    tensor = state_dict[key].detach().clone().to(device=device, dtype=dtype)
                    setattr(self, attribute, nn.Parameter(tensor))
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                """x (B, S, d) in the block's dtype -> (B, S, d): x + attention(norm(x)), then + mlp(norm(.))."""
                # TODO: validate x; h = rms_norm; q, k, v projections viewed (B, S, heads, D); RotaryEmbedding;
                #       FlashAttention on (B, H, S, D) views, causal; o_proj; residual; rms_norm; SwiGLU on 2-D rows;
                #       down_proj; residual
                ### BEGIN SOLUTION
                device = self.q_proj.device  # "cuda" as given becomes "cuda:0" here: compare with the weights'
                if x.dim() != 3 or x.shape[-1] != self.hidden_size or x.dtype != self.dtype or x.device != device:
                    raise ValueError(
                        f"x must be (B, S, {self.hidden_size}) {self.dtype} on {device}, "
                        f"got {tuple(x.shape)} {x.dtype} on {x.device}"
                    )
                batch, seq, _ = x.shape
                h = rms_norm(x, self.input_layernorm, self.eps)
                q = (h @ self.q_proj.T).view(batch, seq, self.num_heads, self.head_dim)
                k = (h @ self.k_proj.T).view(batch, seq, self.num_kv_heads, self.head_dim)
                v = (h @ self.v_proj.T).view(batch, seq, self.num_kv_heads, self.head_dim)
                cos, sin = rope_tables(seq, self.head_dim, self.theta, device=x.device)
                offsets = torch.zeros(batch, dtype=torch.int32, device=x.device)
                q, k = RotaryEmbedding.apply(q, k, cos, sin, offsets)
                out = FlashAttention.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True)
                out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
                x = x + out @ self.o_proj.T
                h = rms_norm(x, self.post_attention_layernorm, self.eps).reshape(batch * seq, self.hidden_size)
                act = SwiGLU.apply(h @ self.gate_proj.T, h @ self.up_proj.T)
                return x + (act @ self.down_proj.T).view(batch, seq, self.hidden_size)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Your block against Hugging Face's

        The first layer of a tiny Hugging Face Llama, in float64 as the reference and in fp16 eager, against your block
        in fp16: the error of each, per hidden state. Your block should be about as far from the float64 truth as
        PyTorch's own fp16 path, not closer to PyTorch than to the truth.
    """)
    lesson.code(r"""
        hf = make_hf_model()
        layer = hf.model.layers[0]
        prefix = "model.layers.0."
        layer_state = {k[len(prefix):]: v for k, v in hf.state_dict().items() if k.startswith(prefix)}
        torch.manual_seed(1)
        x = torch.randn(2, 32, hf.config.hidden_size)
        position_ids = torch.arange(32).expand(2, 32)


        def hf_layer_out(dtype):
            module = transformers_module().LlamaForCausalLM(hf.config).model.layers[0].to(dtype)
            module.load_state_dict({k: v.to(dtype) for k, v in layer.state_dict().items()})
            rotary = transformers_module().models.llama.modeling_llama.LlamaRotaryEmbedding(hf.config)
            mask = torch.full((32, 32), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]
            xs = x.to(dtype)
            with torch.no_grad():
                return module(xs, attention_mask=mask, position_ids=position_ids,
                              position_embeddings=rotary(xs, position_ids))


        try:
            block = TritonLlamaBlock(layer_state, hf.config, dtype=torch.float16, device=DEVICE)
            with torch.no_grad():
                mine = block(x.half().to(DEVICE)).float().cpu()
        except NotImplementedError:
            print("Implement TritonLlamaBlock first.")
        else:
            truth, eager16 = hf_layer_out(torch.float64), hf_layer_out(torch.float16)
            err_mine = (mine.double() - truth).abs().flatten()
            err_eager = (eager16.double() - truth).abs().flatten()
            print(f"max error vs float64: yours {err_mine.max():.2e}, Hugging Face fp16 {err_eager.max():.2e}")
            plt.figure(figsize=(6.5, 3))
            bins = torch.logspace(-7, -1, 40)
            plt.hist(err_eager.clamp_min(1e-7).numpy(), bins=bins.numpy(), alpha=0.5, label="Hugging Face, fp16 eager")
            plt.hist(err_mine.clamp_min(1e-7).numpy(), bins=bins.numpy(), alpha=0.5, label="your Triton block, fp16")
            plt.xscale("log"); plt.xlabel("|output - float64 reference|"); plt.ylabel("elements"); plt.legend()
            plt.title("One decoder layer, 2 x 32 tokens, hidden 64"); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `TritonLlama`: the whole model and the fused loss

        Build the model from a `LlamaForCausalLM`'s `state_dict` and config: `embed_tokens`
        (`model.embed_tokens.weight`), `layers` (an `nn.ModuleList` of your `TritonLlamaBlock`, layer $i$ from the keys
        under `model.layers.{i}.` with that prefix removed), `norm` (`model.norm.weight`) and `lm_head`
        (`lm_head.weight`), each an `nn.Parameter` (a copy, in `dtype`, on `device`). The config's
        `tie_word_embeddings` is false here: the head has its own weight.

        - `forward(input_ids (B, S))` returns the logits `(B, S, V)` in the model's dtype: embedding lookup
          (`embed_tokens[input_ids]`), the layers, `rms_norm` with `norm`, the head.
        - `loss(input_ids, targets)` returns the mean next-token cross-entropy (a float32 scalar) of the logits of
          `input_ids (B, S)` against `targets (B, S)` of any integer dtype (already shifted by the caller; `-100` is
          ignored; your kernel wants int64), through your
          `fused_cross_entropy` on the `(B S, V)` rows. It overwrites the logits with their gradient, which is fine
          because nothing else reads them: the head's GEMM saved its inputs, not its output. Refuse `targets` whose
          shape differs from `input_ids` with `ValueError`.

        `F.cross_entropy` (and the kernels' builtins) are forbidden while the checks run. They compare your logits and
        loss with Hugging Face's, the gradients of every weight, and the weights after one SGD step of each model.
    """)
    lesson.exercise(
        "TritonLlama",
        r'''
        class TritonLlama(nn.Module):
            """A Llama causal LM from TritonLlamaBlocks, with your fused cross-entropy as its loss."""

            def __init__(self, state_dict: dict, config, dtype=torch.float16, device=None):
                super().__init__()
                # TODO: embed_tokens, layers (TritonLlamaBlock per layer from its prefixed keys), norm, lm_head
                ### BEGIN SOLUTION
                def parameter(key):
                    if key not in state_dict:
                        raise KeyError(f"TritonLlama: the state_dict has no {key!r}")
                    return nn.Parameter(state_dict[key].detach().clone().to(device=device, dtype=dtype))

                self.eps = config.rms_norm_eps
                self.embed_tokens = parameter("model.embed_tokens.weight")
                self.layers = nn.ModuleList()
                for i in range(config.num_hidden_layers):
                    prefix = f"model.layers.{i}."
                    sub = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
                    self.layers.append(TritonLlamaBlock(sub, config, dtype=dtype, device=device))
                self.norm = parameter("model.norm.weight")
                self.lm_head = parameter("lm_head.weight")
                ### END SOLUTION

            def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
                """input_ids (B, S) -> logits (B, S, V)."""
                # TODO: embedding lookup, the layers, the final rms_norm, the head
                ### BEGIN SOLUTION
                x = self.embed_tokens[input_ids]
                for layer in self.layers:
                    x = layer(x)
                return rms_norm(x, self.norm, self.eps) @ self.lm_head.T
                ### END SOLUTION

            def loss(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
                """Mean cross-entropy of the logits of input_ids against targets (B, S), with fused_cross_entropy."""
                # TODO: refuse mismatched shapes; logits as (B S, V) rows; fused_cross_entropy against (B S,) targets
                ### BEGIN SOLUTION
                if targets.shape != input_ids.shape:
                    raise ValueError(f"targets {tuple(targets.shape)} must match input_ids {tuple(input_ids.shape)}")
                logits = self(input_ids)
                return fused_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Train it for a few steps

        Your model and Hugging Face's, from the same weights, trained side by side with SGD on a fixed random batch
        (one sequence of 16 tokens, the same every step, so the loss must fall): the two curves should coincide to fp16 precision.
    """)
    lesson.code(r"""
        import torch.nn.functional as F  # for Hugging Face's side only

        hf = make_hf_model()
        tokens = torch.randint(0, hf.config.vocab_size, (1, 17), generator=torch.Generator().manual_seed(0))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        try:
            model = TritonLlama(hf.state_dict(), hf.config, dtype=torch.float16, device=DEVICE)
        except NotImplementedError:
            print("Implement TritonLlamaBlock and TritonLlama first.")
        else:
            reference = make_hf_model().half()
            opt_mine = torch.optim.SGD(model.parameters(), lr=0.05)
            opt_hf = torch.optim.SGD(reference.parameters(), lr=0.05)
            mine_curve, hf_curve = [], []
            started = time.perf_counter()
            for step in range(4):
                loss = model.loss(inputs.to(DEVICE), targets.to(DEVICE))
                loss.backward(); opt_mine.step(); opt_mine.zero_grad()
                mine_curve.append(loss.detach().item())
                hf_logits = reference(input_ids=inputs).logits.float()
                hf_loss = F.cross_entropy(hf_logits.reshape(-1, hf_logits.shape[-1]), targets.reshape(-1))
                hf_loss.backward(); opt_hf.step(); opt_hf.zero_grad()
                hf_curve.append(hf_loss.detach().item())
            print(f"4 steps in {time.perf_counter() - started:.1f} s; "
                  f"largest loss difference {max(abs(a - b) for a, b in zip(mine_curve, hf_curve)):.2e}")
            plt.figure(figsize=(6.5, 3))
            plt.plot(hf_curve, linewidth=4, alpha=0.4, label="Hugging Face LlamaForCausalLM, fp16 eager")
            plt.plot(mine_curve, "--", label="your TritonLlama, fp16")
            plt.xlabel("SGD step"); plt.ylabel("cross-entropy (nats)"); plt.legend(); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        **What you should see:** the curves coincide to about $10^{-4}$ (fp16 rounding), falling from about $\ln 128 \approx 4.9$.
        On the CPU every kernel runs in Triton's interpreter, one program at a time in NumPy, so a step takes seconds
        for a model that a GPU runs in microseconds: here the point is equality, not speed.

        **Usual mistakes**, and why they are wrong:
        - RoPE applied to $v$ instead of $k$ (or to neither): the output is smooth and plausible, and wrong;
        - `causal=False`: every token sees the future; the loss of a trained model would look far too good;
        - a residual missing (`x = attention(...)` instead of `x = x + ...`);
        - the config's `rms_norm_eps` ignored in favour of a default: invisible at $\epsilon = 10^{-6}$, visible with
          the larger $\epsilon$ of a check;
        - the two norms' gains swapped, or the head taken from the embedding (a tied model's habit);
        - the logits used after `fused_cross_entropy`: they now hold $\partial L / \partial z$.

        ## 5. Speed on a GPU

        `python -m llm_algo bench p05.triton_llama` times one decoder layer at Llama-3-8B's shape ($d = 4096$,
        $I = 14336$, 32 query heads over 8 KV heads of 128, $B = 4$, $S = 2048$, bf16), forward and forward + backward:
        your `TritonLlamaBlock`, Hugging Face's `LlamaDecoderLayer` in eager mode with SDPA attention, and the same
        layer under `torch.compile`; the measured numbers follow the expectations below.

        What to expect and why: the GEMMs are the same cuBLAS calls in all three, so the gap is the memory-bound rest.
        `torch.compile` already fuses RMSNorm, RoPE and SwiGLU into Triton kernels of its own (Inductor generates
        Triton) and calls FlashAttention through SDPA, so it is the fair opponent; eager Hugging Face with SDPA also
        has a fused attention, and loses mostly on the norms, RoPE and SwiGLU. The loss is where a fused kernel saves
        the most memory: at Llama 3's vocabulary of 128256 and $B S = 8192$ tokens, float32 logits take 4.2 GB, which
        the fused cross-entropy never allocates a second time (and `p03.fused_linear_cross_entropy` never at all).

        **Reading the numbers** (one run of `python -m llm_algo bench p05.triton_llama` with the reference solutions
        on an NVIDIA H200, Triton 3.6, torch 2.11, all three layers in the same run; your GPU will differ):

        | one layer, B4 S2048 bf16 | forward | forward + backward (gradient of $x$) |
        | --- | --- | --- |
        | your `TritonLlamaBlock` | 6.16 ms | 13.37 ms |
        | Hugging Face, eager, SDPA | 6.81 ms | 15.71 ms |
        | Hugging Face, `torch.compile` | 5.64 ms | 17.31 ms |

        *Forward.* Yours is 1.11x faster than eager Hugging Face, and `torch.compile` is 1.09x faster than yours (0.51
        ms). The benchmark counts 3.71 TFLOP per forward (3.57 in the seven GEMMs, 0.14 in causal attention, counted as
        half of full attention), so 603, 545 and 658 TFLOP/s. Where compile's half millisecond comes from was not
        measured; the likely candidates are attention (SDPA's default backend on an H200 was cuDNN in the course's
        attention benchmarks, faster there than the Triton forward of `p03.flash_attention_fwd`), the copies this block
        makes between kernels (RoPE returns rotated copies, and the attention output transposed back to `(B, S, H D)` is
        another), and the RoPE tables rebuilt on every call. A `torch.profiler` trace of one forward would split the 0.5
        ms.

        *Forward + backward: compare milliseconds, not the table's TFLOP/s.* Yours is 1.17x faster than eager Hugging
        Face. The benchmark asks for the gradient of $x$ only (`torch.autograd.grad(out, (x,), dy)`), and eager autograd
        then skips the weights' gradients (a matmul's backward computes only the inputs somebody needs), so yours and
        eager Hugging Face run each GEMM's backward once ($dX$, 3.57 TFLOP) — but the benchmark's FLOP count charges it
        twice ($dX$ and $dW$, as in a training step) plus $2.5\times$ the attention forward. It therefore prints 837.6
        TFLOP/s for yours, 0.85 of the H200's ~990 dense bf16 peak, implausible for a layer that also runs attention and
        memory-bound kernels; the work actually done is 7.63 TFLOP, so 570 TFLOP/s for yours and 485 for eager Hugging
        Face (the printed 713 overstates it by the same 1.47x). `torch.compile`'s row is slowest although its forward is
        fastest, very likely because it computes the weight gradients anyway: AOTAutograd compiles one backward graph
        for every input that requires grad, the layer's parameters included, about 3.6 TFLOP of extra GEMMs (some 5 ms
        at cuBLAS's rate). For that row the count (11.2 TFLOP, 647 TFLOP/s) fits, and its milliseconds are not
        comparable with the other two. A fair comparison asks all three for the same gradients, and the benchmark now
        does: since this run it asks for $x$'s gradient and every weight's, as a training step does, so each row does
        the 11.2 TFLOP it is charged with. That corrected benchmark has not been run on a GPU yet; until it is, the
        fair forward + backward comparison above is yours against eager Hugging Face (both without $dW$): 1.17x.

        **In production.** Liger-Kernel's `apply_liger_kernel_to_llama()` monkey-patches exactly these modules of
        Hugging Face's Llama (`LlamaRMSNorm`, `apply_rotary_pos_emb`, `LlamaMLP`, the loss) and leaves attention to
        FlashAttention or SDPA; Unsloth ships its own Triton RMSNorm, RoPE, SwiGLU and cross-entropy; torchtitan relies
        on `torch.compile` for the elementwise fusions and on FlashAttention through SDPA. All of them keep the
        projections in cuBLAS.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`TritonLlamaBlock`.** The projections' outputs are viewed as `(B, S, heads, D)` with no copy; RoPE returns
        rotated contiguous copies; `transpose(1, 2)` hands FlashAttention `(B, H, S, D)` views with a contiguous last
        dimension, and its output is transposed back and flattened to `(B, S, H D)` (a copy, because the transposed
        view is not contiguous) before $W_o$. SwiGLU's kernel takes 2-D rows, so the MLP runs on `(B S, d)`. Every
        parameter is stored under its Hugging Face name, so a state dict maps one to one.

        **`TritonLlama`.** `embed_tokens[input_ids]` is an index, whose backward scatters the rows' gradients into the
        embedding (what `F.embedding` does). The loss reshapes the logits to rows and lets the fused kernel leave
        $\partial L / \partial z$ where $z$ was; the head's GEMM saved $h$ and $W_{\text{head}}$, so its backward never
        needs $z$.
    """)
    lesson.mistakes()
    return lesson
