"""Source of 02_PyTorch_Algorithms/08_Tiny_Llama.ipynb (build with `python -m llm_algo build p02.tiny_llama`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.tiny_llama",
        path="02_PyTorch_Algorithms/08_Tiny_Llama.ipynb",
        title_en="A full tiny Llama",
        title_zh="从零组装一个小型 Llama",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p00.module_basics", "p02.rmsnorm", "p02.rope", "p02.attention_mha_gqa", "p02.llama_block"],
    )
    lesson.title(
        intro=r"""
        This is the lesson where your code becomes a language model. A token id goes in, a row of the embedding
        table comes out, your decoder blocks transform it, a final RMSNorm and the output head turn it into one
        score per vocabulary entry, and greedy decoding with your KV cache turns scores into text. With the right
        weights, the model you assemble here *is* Llama: the same function, number for number, as Hugging Face's
        `LlamaForCausalLM`.

        Getting the weights right is half the work. Checkpoints come in more than one format, and the two Llama
        formats differ by more than their names: Meta's original files store $W_q$ and $W_k$ for the interleaved RoPE
        pairing, Hugging Face's for rotate-half. Load one into code written for the other without the row
        permutation and every shape matches, nothing raises, and the model produces fluent-looking garbage.

        **You will implement** the model (`TinyLlama`, built from **your** blocks), the conversion of a Meta-format
        checkpoint into it (`convert_meta_checkpoint`), and greedy generation with a KV cache (`generate_greedy`).
        **Graded against** Hugging Face `LlamaForCausalLM` built locally from a tiny random config: logits on random
        token ids in fp32 (within the contract's fp32 tolerance) and bf16, batches of three with left padding and the
        same position ids on both sides, tied and untied heads, GQA and MHA; the Meta checkpoint is written from the
        Hugging Face one by the checks; generation is compared with `generate(do_sample=False)` and with full
        recomputation.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：把 embedding、decoder block、最终 RMSNorm 和输出头拼成完整的语言模型，与 Hugging Face `LlamaForCausalLM` 逐数一致，并用 KV cache 做 greedy 解码。
        - **前向**：token ids `(B, T)` → embedding `(B, T, d)`（不乘 $\sqrt d$，那是 Gemma 的约定）→ $L$ 个 block（每层一个自己的 cache）→ `norm` → `lm_head` 得 logits `(B, T, V)`；tied head 与 embedding 共享同一个 `Parameter`，不是拷贝。
        - **position ids**：取 `attention_mask.cumsum(-1) - 1`（left padding 时真实 token 从 0 开始）；解码时取最后 $T$ 列，而不是每次从 0 重新开始。
        - **Meta checkpoint 转换**：Meta 的 $W_q$、$W_k$ 按 interleaved RoPE 存储，要对每个头的行做 permutation 转成 rotate-half 布局；$W_k$ 按 $n_{kv}$ 个头置换；`w1`→`gate_proj`，`w3`→`up_proj`，`w2`→`down_proj`。
        - **Greedy 生成**：先带 mask prefill 整个 prompt，之后每步只输入一个新 token，取最后一列的 logits 做 argmax，每步都传入扩展后的 mask。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The whole model, with shapes

        For token ids `input_ids: (B, T)` (int64), vocabulary $V$, width $d$ and $L$ layers:

        | step | computation | shape |
        | --- | --- | --- |
        | embed | $h_0 = E[\text{input\_ids}]$, a row lookup in $E \in \mathbb{R}^{V \times d}$ | `(B, T, d)` |
        | $L$ blocks | $h_{\ell} = \operatorname{Block}_\ell(h_{\ell-1})$, each with its own weights and KV cache | `(B, T, d)` |
        | final norm | $\operatorname{RMSNorm}(h_L)$: the residual stream is never normalised inside the blocks | `(B, T, d)` |
        | head | logits $= \operatorname{RMSNorm}(h_L)\, W_{\text{head}}^\top$, $W_{\text{head}} \in \mathbb{R}^{V \times d}$ | `(B, T, V)` |

        The RoPE tables are built **once per forward** for all layers (every layer rotates with the same angles), in
        float32 whatever the model's dtype, as Hugging Face's `LlamaRotaryEmbedding` does.

        **Tied embeddings.** $E$ and $W_{\text{head}}$ have the same shape, and small models share them
        (`tie_word_embeddings=True`: Llama-3.2-1B and 3B, Gemma, Qwen2.5 up to 3B), because with $V = 128256$ and
        $d = 2048$ each matrix is 263M weights, a fifth of a 1B model. Tying means one `nn.Parameter` used twice, so
        both uses receive gradients and an optimizer updates it once; a copy would drift apart after one step.

        **Position ids and padding.** A batch of prompts of different lengths is padded on the **left** for
        generation, so that every row's next token is written in the same last column. As Hugging Face's
        `generate` does, take `position_ids = attention_mask.cumsum(-1) - 1` for the real tokens (`generate` puts 1 on
        the padding, this lesson clamps it at 0; padding keys are masked, so either is fine), which starts
        every row's first real token at position 0. With a KV cache, the mask covers the cached tokens and the new
        ones, and the new tokens' positions are the last $T$ columns of that cumulative sum.

        A subtle point: with RoPE alone, shifting *all* positions of a row by the same amount changes no score (the
        relative-position property of `p02.rope`), so plain `0 .. T-1` positions on a left-padded prompt give the
        same logits up to rounding. The convention still matters: it keeps every row inside the context length the
        model was trained on, it is what models with absolute position embeddings (GPT-2) or position-dependent
        RoPE scaling need, and it is what the reference implementation does, so the checks pass the same position
        ids to both models. What does break a RoPE model is positions that are not a constant shift: a decoding
        step that restarts at position 0 sees every cached key at the wrong distance.

        ## 2. Greedy decoding with a KV cache

        Prefill (预填充) runs the whole prompt once, filling one `KVCache` per layer; the last column's logits pick
        the first new token. Each decoding step (解码) then feeds **one** token per row: its query attends to
        everything cached, so a step costs $O(S)$ attention work instead of the $O(S^2)$ of recomputing the whole
        sequence, and the projections and FFN run on one token instead of $S$. The mask grows by a column of ones
        per step (every generated token is real). The KV cache must change the cost, never the result: greedy tokens
        with and without it are identical.

        ## 3. Two checkpoint formats, and why $W_q$ and $W_k$ are permuted

        Meta's `llama/model.py` names the weights differently and applies RoPE with the **interleaved** pairing
        $(x_{2i}, x_{2i+1})$ via complex multiplication; Hugging Face applies it with **rotate-half**
        $(x_i, x_{i+D/2})$, and so does your block. The `p02.rope` lesson showed that the two are the same rotation on a
        permuted head dimension: with $P$ the permutation that lists each head's even coordinates and then its odd ones,
        $\operatorname{RoPE}_{\text{half}}(Px) = P\,\operatorname{RoPE}_{\text{interleaved}}(x)$. Rows of $W_q$ produce
        coordinates of $q$, so permuting the rows of each head of $W_q$ and $W_k$ by $P$ makes your rotate-half block
        compute $P q$ and $P k$ where Meta computed $q$ and $k$, and every score is unchanged since
        $\langle Pa, Pb \rangle = \langle a, b \rangle$. $W_v$ and $W_o$ are not touched: values are never rotated.

        In code, for one projection with `n` heads of size `D` and `d_in` input features, the rows of each head form
        `D/2` pairs; Meta stores them pair by pair, rotate-half wants all first members, then all second members:

        ```python
        w.view(n, D // 2, 2, d_in)   # (head, pair i, member of the pair, input): Meta's row 2i + j
         .transpose(1, 2)            # (head, member j, pair i, input)
         .reshape(n * D, d_in)       # rotate-half row j * D/2 + i
        ```

        This is the `permute` function of Hugging Face's `convert_llama_weights_to_hf.py`. With GQA, $W_k$ has
        `n_kv_heads` heads, not `n_heads` (the script passes `num_key_value_heads` for it): permuting $W_k$ as if it
        had `n_heads` heads runs without an error, because only the product of the head count and $D$ is checked.
        The name mapping (the FFN's `w1`, `w3`, `w2` are gate, up, down):

        | Meta | your model (Hugging Face's names without the `model.` prefix) |
        | --- | --- |
        | `tok_embeddings.weight` | `embed_tokens.weight` |
        | `layers.{i}.attention.wq / wk / wv / wo.weight` | `layers.{i}.self_attn.q_proj / k_proj / v_proj / o_proj.weight` |
        | `layers.{i}.feed_forward.w1 / w3 / w2.weight` | `layers.{i}.mlp.gate_proj / up_proj / down_proj.weight` |
        | `layers.{i}.attention_norm.weight`, `ffn_norm.weight` | `layers.{i}.input_layernorm.weight`, `post_attention_layernorm.weight` |
        | `norm.weight`, `output.weight` (absent when tied) | `norm.weight`, `lm_head.weight` |
    """)
    lesson.setup(r"""
        from dataclasses import dataclass

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn

        # Your building blocks from the earlier lessons (the reference where yours does not pass its checks yet)
        RMSNorm = lesson.use("p02.rmsnorm", "RMSNorm")
        rope_cache = lesson.use("p02.rope", "rope_cache")
        KVCache = lesson.use("p02.attention_mha_gqa", "KVCache")
        LlamaBlock = lesson.use("p02.llama_block", "LlamaBlock")


        @dataclass
        class ModelArgs:  # a Llama's hyper-parameters, named as in Meta's llama/model.py (given: not an exercise)
            dim: int = 64               # d, the residual stream's width (hidden_size)
            n_layers: int = 2
            n_heads: int = 4            # query heads
            n_kv_heads: int = 2         # key/value heads (GQA when < n_heads)
            head_dim: int = 16
            hidden_dim: int = 160       # the SwiGLU FFN's hidden size (intermediate_size)
            vocab_size: int = 128
            norm_eps: float = 1e-6
            rope_theta: float = 10000.0
            tie_embeddings: bool = False
    """)
    lesson.md(r"""
        ## 4. Exercise `TinyLlama`

        Build the members under the names of section 3 (`embed_tokens`, `layers`, `norm`, `lm_head`), tie the head
        when `args.tie_embeddings`, and write `forward` for a padded batch with an optional list of per-layer
        caches. Defaults: no `attention_mask` means every token (cached or new) is real; no `position_ids` means the
        cumulative-sum rule of section 1.
    """)
    lesson.exercise(
        "TinyLlama",
        r'''
        class TinyLlama(nn.Module):
            """A Llama causal LM; state_dict() keys are LlamaForCausalLM's without the "model." prefix."""

            def __init__(self, args: ModelArgs):
                super().__init__()
                self.args = args
                # TODO: embed_tokens (V, d); layers: an nn.ModuleList of args.n_layers LlamaBlocks; norm; lm_head d -> V
                # TODO: with args.tie_embeddings, the head uses the embedding's Parameter itself (not a copy)
                ### BEGIN SOLUTION
                self.embed_tokens = nn.Embedding(args.vocab_size, args.dim)
                self.layers = nn.ModuleList(
                    LlamaBlock(args.dim, args.n_heads, args.n_kv_heads, args.head_dim, args.hidden_dim, eps=args.norm_eps)
                    for _ in range(args.n_layers)
                )
                self.norm = RMSNorm(args.dim, eps=args.norm_eps)
                self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False)
                if args.tie_embeddings:
                    self.lm_head.weight = self.embed_tokens.weight  # one Parameter, two uses
                ### END SOLUTION

            def forward(self, input_ids, attention_mask=None, position_ids=None, caches=None):
                """input_ids: (B, T) int64, the new tokens;
                attention_mask: (B, S_k) bool or 0/1, True = real token, over cached + new tokens (None = all real);
                position_ids: (B, T) int64 (None = attention_mask.cumsum(-1) - 1 at the new tokens, clamped at 0);
                caches: None or a list of one KVCache per layer, updated in place.
                returns logits (B, T, V) in the model's dtype"""
                B, T = input_ids.shape
                # TODO: the number of cached tokens (0 without caches); the default mask and position ids
                # TODO: float32 RoPE tables long enough for the largest position, on the input's device
                # TODO: embed, run every block (with its own cache), final norm, head
                ### BEGIN SOLUTION
                past = caches[0].length if caches is not None else 0
                if attention_mask is None:
                    attention_mask = torch.ones(B, past + T, dtype=torch.bool, device=input_ids.device)
                key_padding_mask = attention_mask.bool()                               # (B, S_k)
                if position_ids is None:
                    position_ids = (key_padding_mask.long().cumsum(-1) - 1).clamp_min(0)[:, -T:]  # (B, T)
                cos, sin = rope_cache(int(position_ids.max()) + 1, self.args.head_dim, self.args.rope_theta)
                cos, sin = cos.to(input_ids.device), sin.to(input_ids.device)          # (P, D) float32
                h = self.embed_tokens(input_ids)                                        # (B, T, d)
                for i, layer in enumerate(self.layers):
                    h = layer(h, cos, sin, position_ids, key_padding_mask, None if caches is None else caches[i])
                return self.lm_head(self.norm(h))                                       # (B, T, V)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks load a random `LlamaForCausalLM`'s state dict (keys without `model.`) and compare logits at the
        real tokens of a left-padded batch, passing the same position ids to both models: in fp32 within the
        contract's tolerance against a float64 run of the same Hugging Face model, and in bf16. They also call your
        model without `position_ids` (your default must be the cumulative-sum rule), decode token by token through
        `KVCache`s against one full pass, and check that a tied head shares the embedding's Parameter.
    """)
    lesson.md(r"""
        ## 5. Exercise `convert_meta_checkpoint`

        Turn a Meta-format state dict (section 3) into one that `TinyLlama(args).load_state_dict` accepts: rename
        every tensor, permute the rows of each head of `wq` (with `args.n_heads` heads) and `wk` (with
        `args.n_kv_heads` heads) from the interleaved to the rotate-half layout, and give a tied model's
        `lm_head.weight` the embedding (a Meta checkpoint of a tied model has no `output.weight`).
    """)
    lesson.exercise(
        "convert_meta_checkpoint",
        r'''
        def convert_meta_checkpoint(state_dict: dict, args: ModelArgs) -> dict:
            """Meta llama/model.py names and interleaved q/k rows -> TinyLlama's names and rotate-half rows.

            state_dict: {"tok_embeddings.weight": (V, d), "layers.0.attention.wq.weight": (n_heads*D, d), ...}
            returns     a new dict with exactly TinyLlama(args).state_dict()'s keys
            """
            # TODO: a helper that reorders the rows of every head from pairs (2i, 2i+1) to halves (i, i + D/2)
            # TODO: model-level tensors: embeddings, final norm, head (the embedding again when tied)
            # TODO: per layer: the two norms, q/k (permuted, with their own head counts), v/o, and w1/w3/w2
            ### BEGIN SOLUTION
            def to_rotate_half(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
                rows, d_in = weight.shape                                # rows = n_heads * D
                # (head, pair i, member j, in) -> (head, member j, pair i, in): row 2i + j becomes row j * D/2 + i
                return weight.view(n_heads, rows // n_heads // 2, 2, d_in).transpose(1, 2).reshape(rows, d_in)

            out = {
                "embed_tokens.weight": state_dict["tok_embeddings.weight"],
                "norm.weight": state_dict["norm.weight"],
                "lm_head.weight": state_dict.get("output.weight", state_dict["tok_embeddings.weight"]),
            }
            for i in range(args.n_layers):
                meta, ours = f"layers.{i}.", f"layers.{i}."
                out[ours + "input_layernorm.weight"] = state_dict[meta + "attention_norm.weight"]
                out[ours + "self_attn.q_proj.weight"] = to_rotate_half(state_dict[meta + "attention.wq.weight"], args.n_heads)
                out[ours + "self_attn.k_proj.weight"] = to_rotate_half(state_dict[meta + "attention.wk.weight"], args.n_kv_heads)
                out[ours + "self_attn.v_proj.weight"] = state_dict[meta + "attention.wv.weight"]
                out[ours + "self_attn.o_proj.weight"] = state_dict[meta + "attention.wo.weight"]
                out[ours + "post_attention_layernorm.weight"] = state_dict[meta + "ffn_norm.weight"]
                out[ours + "mlp.gate_proj.weight"] = state_dict[meta + "feed_forward.w1.weight"]
                out[ours + "mlp.up_proj.weight"] = state_dict[meta + "feed_forward.w3.weight"]
                out[ours + "mlp.down_proj.weight"] = state_dict[meta + "feed_forward.w2.weight"]
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `generate_greedy`

        Prefill the prompt through fresh caches (one `KVCache()` per layer), then feed one token per step, extending
        the mask by a column of ones each time. Pick each token with `argmax` over the last column's logits.
    """)
    lesson.exercise(
        "generate_greedy",
        r'''
        @torch.no_grad()
        def generate_greedy(model: TinyLlama, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                            max_new_tokens: int = 16) -> torch.Tensor:
            """Greedy decoding with a KV cache.

            input_ids:      (B, T) int64 prompts, left-padded
            attention_mask: (B, T) bool or 0/1, True = real token (None = no padding)
            returns         (B, T + max_new_tokens) int64: the prompts followed by the generated tokens
            """
            B, T = input_ids.shape
            # TODO: the default mask; one fresh KVCache per layer
            # TODO: prefill the whole prompt; then repeatedly: argmax of the last logits, append it, extend the mask,
            #       and run only the new token through the model with the caches
            ### BEGIN SOLUTION
            mask = torch.ones(B, T, dtype=torch.bool, device=input_ids.device) if attention_mask is None else attention_mask.bool()
            caches = [KVCache() for _ in model.layers]
            tokens = input_ids
            logits = model(input_ids, attention_mask=mask, caches=caches)       # (B, T, V): prefill
            for step in range(max_new_tokens):
                next_token = logits[:, -1].argmax(dim=-1, keepdim=True)          # (B, 1)
                tokens = torch.cat((tokens, next_token), dim=1)                  # (B, T + step + 1)
                if step + 1 < max_new_tokens:
                    mask = torch.cat((mask, mask.new_ones(B, 1)), dim=1)
                    logits = model(next_token, attention_mask=mask, caches=caches)  # (B, 1, V): one token
            return tokens
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Your Llama, generating: the work of a step with and without the cache

        The cell below builds your model at the tiny size with four layers and random weights, generates 40 tokens
        from a left-padded batch with your `generate_greedy`, and checks them against greedy decoding by full
        recomputation (the whole sequence through the model at every step). It counts the floating-point operations
        of every fourth step both ways with PyTorch's `FlopCounterMode` (matrix multiplies, which is nearly all of them)
        rather than timing them: at this size a CPU's time per call is mostly Python and launch overhead, while the
        count is exact. Without the cache the work grows with the sequence (and its attention part with its
        square); with the cache a step costs one token's projections and FFN plus one row of attention.
    """)
    lesson.code(r"""
        from torch.utils.flop_counter import FlopCounterMode


        def counted(call):  # (the call's result, its FLOPs)
            with FlopCounterMode(display=False) as counter:
                result = call()
            return result, counter.get_total_flops()


        torch.manual_seed(0)
        try:
            model = TinyLlama(ModelArgs(n_layers=4)).eval()
            prompts = torch.randint(0, 128, (2, 12))
            mask = torch.ones(2, 12, dtype=torch.bool)
            mask[1, :5] = False  # the second prompt has 7 real tokens, padded on the left
            steps = 40
            tokens = generate_greedy(model, prompts, mask, max_new_tokens=steps)
            sequence, grown_mask, caches = prompts, mask, [KVCache() for _ in model.layers]
            without_cache, with_cache = [], []
            every = 4  # counting is slow (Python sees every op); one step in four is plenty for a straight line
            lengths = []
            with torch.no_grad():
                model(prompts, attention_mask=mask, caches=caches)  # prefill the caches
                for step in range(steps):
                    full = lambda: model(sequence, attention_mask=grown_mask)  # noqa: E731
                    logits, flops = counted(full) if step % every == 0 else (full(), None)
                    next_token = logits[:, -1].argmax(-1, keepdim=True)
                    sequence = torch.cat((sequence, next_token), dim=1)
                    grown_mask = torch.cat((grown_mask, torch.ones(2, 1, dtype=torch.bool)), dim=1)
                    one = lambda: model(next_token, attention_mask=grown_mask, caches=caches)  # noqa: E731
                    if flops is None:
                        one()
                        continue
                    lengths.append(sequence.shape[1] - 1)
                    without_cache.append(flops)
                    with_cache.append(counted(one)[1])
            print("greedy tokens with the KV cache == full recomputation:", torch.equal(tokens, sequence))
            plt.figure(figsize=(6, 3.2))
            plt.semilogy(lengths, [f / 1e6 for f in without_cache], "o-", label="full recomputation")
            plt.semilogy(lengths, [f / 1e6 for f in with_cache], "o-", label="one new token, KV cache")
            plt.xlabel("sequence length before the step"); plt.ylabel("MFLOP per step (batch of 2)")
            plt.title("work per decoding step, tiny Llama (4 layers)"); plt.legend(fontsize=8); plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish TinyLlama and generate_greedy to run your model")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`TinyLlama.__init__`.** An `nn.ModuleList`, not a Python list: only registered submodules appear in
        `state_dict()`, `parameters()` and `.to()`. Tying assigns the *Parameter* (`self.lm_head.weight =
        self.embed_tokens.weight`), so `state_dict()` lists both names for one tensor, as Hugging Face's does, and one
        optimizer update moves both uses.

        **`TinyLlama.forward`.** The number of cached tokens comes from the first cache. The default mask covers
        cached and new tokens; the default positions are the last $T$ columns of the mask's cumulative sum, which is
        $0 \dots T-1$ for an unpadded prefill, `past` for a decoding step, and starts at 0 at every row's first real
        token under left padding. The RoPE tables are built once per call in float32 (a buffer would be cast to bf16
        by `model.to(torch.bfloat16)`, which the `p02.rope` lesson showed ruins the angles); each block receives them
        with its own cache.

        **`convert_meta_checkpoint`.** `view(n, D/2, 2, d_in).transpose(1, 2)` is $P$ applied to each head's rows.
        `state_dict.get("output.weight", ...)` handles tied models.

        **`generate_greedy`.** One prefill, then one single-token forward per new token; the last token needs no
        forward pass of its own. Under `torch.no_grad()` nothing is kept for a backward pass.

        **The usual mistakes, and why they are wrong**:
        - *No final norm*: the head reads the raw residual stream, whose scale grows with depth.
        - *Scaling the embeddings by $\sqrt{d}$*: Gemma's convention, not Llama's.
        - *A copy instead of tying* (`nn.Parameter(embed.weight.clone())`): equal today, different after one
          optimizer step; and the parameter count no longer matches the checkpoint's.
        - *Positions restarting at 0 on every call*, or *the first $T$ columns of the cumulative sum*: right for the
          prefill, wrong at every decoding step (a constant shift per row would have been harmless, see section 1).
        - *Blocks run without the padding mask*: real tokens attend to padding. *One cache for every layer*: the
          second layer appends its keys to the first layer's.
        - *No q/k permutation*, *the inverse permutation* (`view(n, 2, D/2, d_in)`: Hugging Face → Meta, the right
          direction only when $D = 4$), and *`wk` permuted with `n_heads`* (runs without error on a GQA model and
          scrambles the key heads): all load cleanly and give wrong logits.
        - *`w2` and `w3` swapped*: up and down have transposed shapes, so this one at least fails loudly; *`w1` and
          `w3` swapped* does not.
        - *Recomputing the whole sequence every step*: the same tokens, $O(S^2)$ work per step instead of $O(S)$.
          The check watches the model's inputs: after the prefill, every call must carry one token.
        - *Logits of the first column* instead of the last, or *a prefill without the mask*.

        **Cost.** A forward pass costs about $2N$ FLOPs per token for $N$ weights (plus attention), so generating
        $n$ tokens costs about $2Nn$ with the cache and $\approx N n^2$ without. Each decoding step reads **all**
        weights and the whole cache to produce one token per row, so small-batch decoding is memory-bound: Llama-3-8B
        in bf16 reads 16 GB per step, about 3 ms at the H200's 4.8 TB/s, whatever the batch size up to the point
        where compute takes over.

        **What production code does differently.**
        - *Continuous batching* (vLLM, TGI, SGLang): requests join and leave the batch at every step, with no padding;
          sequences are packed into one token dimension and each has its own position offset.
        - *Paged KV caches* preallocated in blocks (vLLM's PagedAttention) instead of `torch.cat` per step, which
          copies the whole cache and, over $n$ steps, costs $O(n^2)$ memory traffic.
        - *CUDA graphs* or `torch.compile` with a static cache remove the per-step Python and kernel-launch overhead,
          which dominates at this tiny size.
        - *Sampling* (temperature, top-k, top-p) replaces `argmax` in chat models; greedy decoding is what tests and
          benchmarks use because it is deterministic. Speculative decoding keeps greedy's output exactly while
          verifying several tokens per step.
        - *Checkpoint loading* in vLLM renames and fuses weights on the fly (`load_weights` maps `q_proj`, `k_proj`,
          `v_proj` into one `qkv_proj`), and llama.cpp's `convert_hf_to_gguf.py` permutes q/k back to the interleaved
          layout that its kernels use.
    """)
    lesson.mistakes()
    return lesson
