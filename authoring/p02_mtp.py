"""Source of 02_PyTorch_Algorithms/35_MTP.ipynb (build with `python -m llm_algo build p02.mtp`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.mtp",
        path="02_PyTorch_Algorithms/35_MTP.ipynb",
        title_en="Multi-token prediction: DeepSeek-V3's MTP modules and self-speculation",
        title_zh="多 token 预测（MTP）与自推测解码",
        difficulty="hard",
        device="cpu",
        minutes=75,
        prerequisites=["p02.rmsnorm", "p02.cross_entropy", "p02.speculative_decoding"],
    )
    lesson.title(
        intro=r"""
        A language model is trained to predict one token: position $i$ sees $t_0..t_i$ and is scored on $t_{i+1}$.
        **Multi-token prediction** (多 token 预测) adds a denser signal: position $i$ is also scored on $t_{i+2}$,
        $t_{i+3}$, ... DeepSeek-V3 (DeepSeek-AI, *DeepSeek-V3 Technical Report*, arXiv:2412.19437, section 2.2) does it
        with **sequential MTP modules** that share the main model's embedding and output head, trains with one extra
        depth ($D = 1$) and a loss weight $\lambda = 0.3$ for the first 10T tokens and $0.1$ for the last 4.8T, and
        reuses the module at inference as a built-in draft model: the report gives an acceptance rate of 85-90% for
        the second token and about 1.8x the tokens per second (section 5.4.3; section numbers from memory, the
        figures checked against quotations of the report).

        **You will implement** one MTP module (two RMSNorms, a concatenation, a projection, a transformer block),
        the sequential forward over $D$ depths with the shifted token embeddings, the MTP loss (cross-entropy per
        depth on targets shifted by $k + 1$, averaged over depths, weighted by $\lambda$), and greedy drafting with
        the MTP modules for self-speculation. **Graded against** loop specs in float64 written per position and per
        depth in the checks file (RMSNorm by hand, the projection split into its two halves, the causal block run on
        each prefix, cross-entropy as $\operatorname{logsumexp} - $ logit), `torch.autograd.gradcheck`, and the
        refusal of bad input (no depth, sequences too short for the depth).
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：普通语言模型每个位置只预测下一个 token；MTP 让位置 $i$ 还预测 $t_{i+2}, \dots, t_{i+D+1}$，训练信号更密。
        - **DeepSeek-V3 的做法**：$D$ 个**串行**的 MTP 模块，与主模型**共享**嵌入层和输出头；第 $k$ 个模块把上一深度的隐状态 $h^{k-1}_i$ 与 $t_{i+k}$ 的嵌入分别做 RMSNorm、拼接、线性投影（$2d \to d$），再过一个 Transformer 块。
        - **形状**：深度 $k$ 只有 $T-k$ 个位置有输入，其中前 $T-k-1$ 个有目标 $t_{i+k+1}$；所以序列长度至少 $D+2$。
        - **损失**：每个深度一个交叉熵，对深度取平均，再乘以 $\lambda$（V3：前 10T token 取 0.3，之后 0.1），加到主损失上。
        - **推理**：MTP 模块可以丢掉，也可以当作草稿模型做自推测解码：逐深度贪心生成草稿，主模型一次前向验证。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The MTP module, with shapes

        Notation of the report (0-indexed here): tokens $t_0 \dots t_{T-1}$, the main model's last hidden states
        $h^0 \in \mathbb{R}^{B \times T \times d}$ (before its output head), the shared embedding
        $\operatorname{Emb}$ and shared head $\operatorname{OutHead}$ (norm + linear to $V$ logits). Module $k$
        ($k = 1..D$) has its own two RMSNorms, a projection $M_k \in \mathbb{R}^{d \times 2d}$ and one transformer
        block $\operatorname{TRM}_k$:

        $$
        h'^{k}_i = M_k \big[\operatorname{RMSNorm}(h^{k-1}_i);\ \operatorname{RMSNorm}(\operatorname{Emb}(t_{i+k}))\big],
        \qquad h^{k}_{0:T-k} = \operatorname{TRM}_k\big(h'^{k}_{0:T-k}\big),
        \qquad P^{k}_{i} = \operatorname{softmax}\big(\operatorname{OutHead}(h^{k}_i)\big).
        $$

        $P^k_i$ predicts $t_{i+k+1}$. Position $i$ of depth $k$ therefore knows $t_0..t_{i+k}$ (through
        $h^{k-1}_i$, which knew $t_0..t_{i+k-1}$, plus the new embedding): each depth extends the causal chain by one
        token, which is the difference from Gloeckle et al. (Meta, 2024, *Better & Faster Large Language Models via
        Multi-token Prediction*), whose $n$ heads read the same trunk state in parallel and predict $t_{i+1..i+n}$
        independently.

        | tensor | shape |
        | --- | --- |
        | `h` of depth $k-1$, cut to the first $T-k$ positions | `(B, T-k, d)` |
        | `Emb(tokens[:, k:])` | `(B, T-k, d)` |
        | concatenation | `(B, T-k, 2d)` |
        | after $M_k$ and $\operatorname{TRM}_k$: $h^k$ | `(B, T-k, d)` |
        | logits of depth $k$ | `(B, T-k, V)` |

        **Cost.** One block, two norms and a $2d \times d$ projection per depth; the embedding and the head (for
        V3, $129280 \times 7168 \approx 0.93$B parameters each, vocabulary and width from its `config.json`) are
        shared, not trained twice. The released checkpoint is 685B parameters: 671B for the main model and 14B for the
        MTP module (the model card), of which 11.5B are the module's own (`README_WEIGHTS.md` in the DeepSeek-V3
        repository); the rest, about $2 \times 0.93$B, is the shared embedding and head stored again with the module
        (figures as recalled and cross-checked against public copies of those files, not measured here). With
        $d = 7168$ the projection alone is $2d^2 \approx 103$M parameters; most of the 11.5B is the module's
        mixture-of-experts block.

        **The concatenation order.** The report's equation writes the hidden state first, as here. The public
        implementations that load the released weights (vLLM's `deepseek_mtp.py` and the Hugging Face-style MTP
        layers, whose modules are named `enorm`, `hnorm`, `eh_proj`) concatenate the normalised **embedding first**:
        `eh_proj(cat([enorm(e), hnorm(h)]))`. Which half of the projection sees which input is a convention fixed by
        the checkpoint, so follow the checkpoint when you load one. This lesson follows the report's equation, and
        the checks hold you to it. Those implementations also give each module its own final norm in front of the
        shared head (`shared_head.norm`); here that norm is part of `head`.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class CausalBlock(nn.Module):
            # A tiny pre-norm transformer block (attention + MLP) with a causal mask: (B, L, d) -> (B, L, d).
            def __init__(self, dim: int, heads: int = 2):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                mask = nn.Transformer.generate_square_subsequent_mask(x.shape[-2], dtype=x.dtype)
                return self.layer(x, src_mask=mask, is_causal=True)
    """)
    lesson.md(r"""
        ## 2. Exercise `MTPModule`

        Parameters, named so that the checks can set them: `norm_h` and `norm_e` (`nn.RMSNorm(dim, eps=eps)`, for the
        hidden state and the embedding), `proj` (`nn.Linear(2 * dim, dim, bias=False)`), and `block` (given: any
        causal module `(B, L, d) -> (B, L, d)`). `forward(h, e)` takes the previous depth's hidden states and the
        embeddings of the tokens $k$ steps ahead, both `(B, L, d)`; refuse mismatched shapes with a `ValueError`.
        No residual around the block from outside: the block has its own.
    """)
    lesson.exercise(
        "mtp_module",
        r'''
        class MTPModule(nn.Module):
            """One DeepSeek-V3 MTP module: block(proj([norm_h(h); norm_e(e)]))."""

            def __init__(self, dim: int, block: nn.Module, eps: float = 1e-6):
                super().__init__()
                # TODO: norm_h, norm_e (nn.RMSNorm), proj (nn.Linear 2*dim -> dim, no bias), block
                ### BEGIN SOLUTION
                self.norm_h = nn.RMSNorm(dim, eps=eps)
                self.norm_e = nn.RMSNorm(dim, eps=eps)
                self.proj = nn.Linear(2 * dim, dim, bias=False)
                self.block = block
                ### END SOLUTION

            def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
                """h: (B, L, d) hidden states of depth k-1; e: (B, L, d) embeddings of t_{i+k}. Returns (B, L, d)."""
                # TODO: refuse h.shape != e.shape (ValueError)
                # TODO: normalise each, concatenate [hidden; embedding] on the last axis, project, run the block
                ### BEGIN SOLUTION
                if h.shape != e.shape:
                    raise ValueError(f"h and e must have the same shape, got {tuple(h.shape)} and {tuple(e.shape)}")
                x = torch.cat([self.norm_h(h), self.norm_e(e)], dim=-1)     # (B, L, 2d), hidden first
                return self.block(self.proj(x))                             # (B, L, d)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Exercise `mtp_logits`: the sequential forward

        `h_main: (B, T, d)` (the main model's last hidden states), `tokens: (B, T)` int64, `embed` and `head` the
        shared callables (`(B, L) -> (B, L, d)` and `(B, L, d) -> (B, L, V)`), `modules` a list of $D$ `MTPModule`s.
        Depth $k$ reads the first $T-k$ positions of depth $k-1$ and `embed(tokens[:, k:])`. Return the list of the
        $D$ logits tensors, depth $k$ of shape `(B, T-k, V)`. Refuse (`ValueError`) an empty list of modules, a
        `h_main` whose first two dimensions are not those of `tokens`, and $T < D + 2$ (the last depth would have no
        target).
    """)
    lesson.exercise(
        "mtp_logits",
        r'''
        def mtp_logits(h_main: torch.Tensor, tokens: torch.Tensor, embed, head, modules) -> list:
            """Logits of every MTP depth: depth k (1-based) -> (B, T-k, V), predicting tokens[:, k+1:]."""
            # TODO: validate: at least one module, h_main (B, T, d) with tokens (B, T), T >= D + 2
            # TODO: h = h_main; for k = 1..D: h = module_k(h[:, :T-k], embed(tokens[:, k:])); keep head(h)
            ### BEGIN SOLUTION
            depth = len(modules)
            if depth < 1:
                raise ValueError("need at least one MTP module (depth >= 1)")
            if h_main.dim() != 3 or h_main.shape[:2] != tokens.shape:
                raise ValueError(f"h_main must be (B, T, d) with tokens (B, T), got {tuple(h_main.shape)}, {tuple(tokens.shape)}")
            T = tokens.shape[1]
            if T < depth + 2:
                raise ValueError(f"a sequence of length {T} is too short for depth {depth}: need T >= depth + 2")
            h, out = h_main, []
            for k, module in enumerate(modules, start=1):
                h = module(h[:, : T - k], embed(tokens[:, k:]))            # (B, T-k, d): sees t_0 .. t_{i+k}
                out.append(head(h))                                         # (B, T-k, V): predicts t_{i+k+1}
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `mtp_loss`

        $$
        \mathcal{L}^k_{\text{MTP}} = \operatorname{mean}_{b,\ i < T-k-1}\big[-\log P^k_{b,i}[t_{b,\,i+k+1}]\big],
        \qquad
        \mathcal{L}_{\text{MTP}} = \frac{\lambda}{D}\sum_{k=1}^{D} \mathcal{L}^k_{\text{MTP}} .
        $$

        Depth $k$'s logits have $T-k$ positions; the last one has no target inside the sequence and is dropped. The
        report normalises each depth by $T$ (its targets run past the sequence in a packed training stream); here
        each depth is a mean over its own targets, which differs only by the factor $(T-k-1)/T$. Compute the
        cross-entropy from the logits (`F.cross_entropy`, i.e. $\operatorname{logsumexp} - $ logit), never as
        `log(softmax)`, which returns $-\infty$ once a logit gap exceeds about 104 in float32. The total training
        loss is $\mathcal{L}_{\text{main}} + \mathcal{L}_{\text{MTP}}$. Return `(loss, per_depth)`: the 0-dim loss
        and the `(D,)` tensor of the $\mathcal{L}^k$ (before $\lambda$). Refuse an empty list, logits whose length is
        not $T-k$, and $T < D + 2$.
    """)
    lesson.exercise(
        "mtp_loss",
        r'''
        def mtp_loss(logits: list, tokens: torch.Tensor, lam: float = 0.3):
            """lam * mean over depths of the cross-entropy of depth k on tokens[:, k+1:]. Returns (loss, per_depth (D,))."""
            # TODO: validate (depth >= 1, T >= D + 2, depth k's logits are (B, T-k, V))
            # TODO: per depth: cross-entropy of logits[:, :T-k-1] against tokens[:, k+1:]; mean over depths; times lam
            ### BEGIN SOLUTION
            depth = len(logits)
            if depth < 1:
                raise ValueError("need the logits of at least one depth")
            B, T = tokens.shape
            if T < depth + 2:
                raise ValueError(f"a sequence of length {T} is too short for depth {depth}: need T >= depth + 2")
            per_depth = []
            for k, lg in enumerate(logits, start=1):
                if lg.dim() != 3 or lg.shape[:2] != (B, T - k):
                    raise ValueError(f"depth {k}: logits must be (B, T-k, V) = ({B}, {T - k}, V), got {tuple(lg.shape)}")
                n = T - k - 1                                               # positions with a target
                per_depth.append(F.cross_entropy(lg[:, :n].flatten(0, 1), tokens[:, k + 1 :].flatten()))
            per_depth = torch.stack(per_depth)                              # (D,)
            return lam * per_depth.mean(), per_depth
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Self-speculation with the MTP modules

        At inference the MTP modules can be dropped (the main model works alone) or used as a **draft model that
        comes for free**: it shares the embedding and head, and its input $h^0$ is computed anyway. For a prefix
        $t_0..t_{n-1}$ the main model gives $h^0$ (`(B, n, d)`) and its greedy next token $t_n$. Then, with the
        sequence extended by every token decided so far:

        - depth 1 runs on positions $0..n-1$ with `embed` of $t_1..t_n$; its last position predicts the draft $d_1$;
        - depth $k$ runs on the same $n$ positions with $h^{k-1}$ and `embed` of $t_k .. t_{n-1}, t_n, d_1, \dots,
          d_{k-1}$; its last position predicts $d_k$.

        The main model then scores $t_0..t_n, d_1..d_D$ in **one** forward pass and keeps the drafts up to the first
        one that differs from its own greedy choice (greedy verification: the output is exactly the main model's
        greedy output, see p02.speculative_decoding). A step thus emits $1 + $ (accepted drafts) tokens for one main
        forward. Production engines (vLLM, SGLang) keep a KV cache per MTP module so that a draft costs one position,
        not $n$; here each depth recomputes the prefix, which is simpler and gives the same drafts.

        ## 6. Exercise `mtp_draft`

        `h_main: (B, n, d)`, `tokens: (B, n)`, `next_token: (B,)` (the main model's choice for position $n$). Return
        the greedy drafts `(B, D)` int64 as above (`argmax` of the head at the last position of each depth). Refuse
        an empty list of modules and mismatched shapes with a `ValueError`. Run it under `torch.no_grad()` in
        practice; the checks do not need gradients here.
    """)
    lesson.exercise(
        "mtp_draft",
        r'''
        def mtp_draft(h_main: torch.Tensor, tokens: torch.Tensor, next_token: torch.Tensor, embed, head, modules) -> torch.Tensor:
            """Greedy drafts d_1..d_D (B, D) from the MTP modules, each depth fed the token decided just before it."""
            # TODO: validate (at least one module; h_main (B, n, d), tokens (B, n), next_token (B,))
            # TODO: seq = tokens + [next_token]; h = h_main; for k = 1..D:
            #       h = module_k(h, embed(seq[:, k:k+n])); d_k = argmax of head(h)[:, -1]; append d_k to seq
            ### BEGIN SOLUTION
            if len(modules) < 1:
                raise ValueError("need at least one MTP module (depth >= 1)")
            B, n = tokens.shape
            if h_main.dim() != 3 or h_main.shape[:2] != (B, n) or next_token.shape != (B,):
                raise ValueError(
                    f"need h_main (B, n, d), tokens (B, n), next_token (B,); got {tuple(h_main.shape)}, "
                    f"{tuple(tokens.shape)}, {tuple(next_token.shape)}"
                )
            seq = torch.cat([tokens, next_token[:, None]], dim=1)            # (B, n+1): t_0 .. t_n
            h, drafts = h_main, []
            for k, module in enumerate(modules, start=1):
                h = module(h, embed(seq[:, k : k + n]))                       # (B, n, d)
                d_k = head(h)[:, -1].argmax(dim=-1)                           # (B,)
                drafts.append(d_k)
                seq = torch.cat([seq, d_k[:, None]], dim=1)                   # the next depth embeds d_k
            return torch.stack(drafts, dim=1)                                 # (B, D)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A tiny model trained with MTP, then self-speculation

        Synthetic data with structure several tokens deep: $t_{i+1} = (t_i + t_{i-1}) \bmod 17$ (a Fibonacci
        recurrence), with 10% of the tokens replaced by random ones. A main model (embedding, two causal blocks, a
        shared RMSNorm + linear head) and $D = 2$ MTP modules are trained together on $\mathcal{L}_\text{main} +
        \mathcal{L}_\text{MTP}$ with $\lambda = 0.3$, then used to self-speculate on fresh sequences. The demo
        prints the acceptance rate of each draft depth (the fraction of steps where drafts $1..k$ all match the
        main model's greedy tokens) and plots the losses. It reports rates on a toy; it says nothing about speed on
        real hardware.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        V, d, T, D = 17, 32, 24, 2


        def fib_batch(batch, length, noise=0.1):
            t = torch.zeros(batch, length, dtype=torch.long)
            t[:, :2] = torch.randint(0, V, (batch, 2))
            for i in range(2, length):
                t[:, i] = (t[:, i - 1] + t[:, i - 2]) % V
                flip = torch.rand(batch) < noise
                t[flip, i] = torch.randint(0, V, (int(flip.sum()),))
            return t


        embed = nn.Embedding(V, d)
        trunk = nn.Sequential(CausalBlock(d), CausalBlock(d))
        head = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, V, bias=False))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model: one thread beats two (no hand-offs); restored below
        try:
            modules = nn.ModuleList([MTPModule(d, CausalBlock(d)) for _ in range(D)])
            params = [*embed.parameters(), *trunk.parameters(), *head.parameters(), *modules.parameters()]
            opt = torch.optim.AdamW(params, lr=5e-3)
            history = []
            for step in range(120):
                tokens = fib_batch(32, T)
                h0 = trunk(embed(tokens))
                main = F.cross_entropy(head(h0)[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
                extra, per_depth = mtp_loss(mtp_logits(h0, tokens, embed, head, modules), tokens, lam=0.3)
                opt.zero_grad()
                (main + extra).backward()
                opt.step()
                history.append([main.item(), *per_depth.tolist()])
        except NotImplementedError:
            history = None
            print("Implement MTPModule, mtp_logits and mtp_loss first.")
        torch.set_num_threads(threads)
        if history:
            history = torch.tensor(history)
            plt.figure(figsize=(6, 3.5))
            for j, name in enumerate(["main: t_(i+1)", "MTP depth 1: t_(i+2)", "MTP depth 2: t_(i+3)"]):
                plt.plot(history[:, j], label=name)
            plt.xlabel("step"); plt.ylabel("cross-entropy (nats)"); plt.legend(); plt.title("Training with MTP, D = 2")
            plt.tight_layout(); plt.show()
    """)
    lesson.code(r"""
        if history is not None:
            try:
                with torch.no_grad():
                    tokens = fib_batch(256, 12, noise=0.0)
                    h0 = trunk(embed(tokens))
                    next_token = head(h0)[:, -1].argmax(-1)                                 # the main model's t_n
                    drafts = mtp_draft(h0, tokens, next_token, embed, head, modules)        # (256, D)
                    seq = torch.cat([tokens, next_token[:, None], drafts], dim=1)
                    verify = head(trunk(embed(seq))).argmax(-1)                             # one main forward
                    n = tokens.shape[1]
                    agree = drafts == verify[:, n : n + D]                                  # d_k vs main's choice
                    accepted = agree.long().cumprod(dim=1)                                  # stop at the first miss
                for k in range(D):
                    print(f"draft depth {k + 1}: accepted in {accepted[:, k].float().mean().item():.0%} of the steps")
                print(f"tokens per main forward: {1 + accepted.sum(dim=1).float().mean().item():.2f}")
            except NotImplementedError:
                print("Implement mtp_draft first.")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`MTPModule`.** Two separate norms because the two inputs live on different scales: $h^{k-1}$ is a
        residual stream that has grown through the whole main model, the embedding is fresh. After the norms they
        weigh equally in the projection. The projection halves are $M_k[:, :d]$ for the hidden state and
        $M_k[:, d:]$ for the embedding; swapping the concatenation silently swaps them, which only a check with
        different norm gains and a random projection notices.

        **`mtp_logits`.** The whole lesson is two slices: `h[:, :T-k]` and `tokens[:, k:]`. Depth $k$ feeds
        depth $k+1$ its own output $h^k$, not $h^0$; using $h^0$ at every depth gives Meta's parallel heads with an
        extra embedding, and the chain of section 1 breaks.

        **`mtp_loss`.** Depth $k$ is scored on `tokens[:, k+1:]` (two steps ahead for $k = 1$). The mean over
        depths (not the sum) keeps $\lambda$ meaning the same for any $D$.

        **`mtp_draft`.** The sequence grows by one token per depth, and depth $k$ embeds the token chosen just
        before it ($t_n$ for depth 1, $d_{k-1}$ after). Feeding $t_n$ to every depth, or $h^0$ to every depth, are the
        usual mistakes.

        **The usual mistakes, and why they are wrong**: the concatenation reversed; one
        norm used for both inputs; a residual added around the module; the embedding of $t_{i+k-1}$ instead of
        $t_{i+k}$; $h^0$ at every depth; targets shifted by $k$ instead of $k+1$; the depths summed; $\lambda$
        forgotten; `log(softmax)` instead of a stable cross-entropy; the drafts all embedding $t_n$; drafting from $h^0$ at every depth.

        **In production.** DeepSeek-V3 trains with $D = 1$ and can discard the module at inference; its report
        quotes 85-90% acceptance for the second token and about 1.8x tokens per second with it (section 5.4.3,
        from memory). vLLM and SGLang load the module as an "MTP" speculative method (vLLM: `deepseek_mtp.py`,
        `--speculative-config` with `method` set to MTP, from memory) with its own KV cache, and may run the one
        module several times to draft more than one token. Megatron-LM has an MTP implementation for training
        (`multi_token_prediction.py`, from memory). The acceptance-rate demo above is a toy: speed depends on
        batch size, on the verification cost and on the hardware, and is not asserted anywhere.
    """)
    lesson.mistakes()
    return lesson
