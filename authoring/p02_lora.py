"""Source of 02_PyTorch_Algorithms/21_LoRA.ipynb (build with `python -m llm_algo build p02.lora`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.lora",
        path="02_PyTorch_Algorithms/21_LoRA.ipynb",
        title_en="LoRA: low-rank adapters",
        title_zh="LoRA 低秩适配",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p02.tiny_llama", "p02.adamw"],
    )
    lesson.title(
        intro=r"""
        Fine-tuning every weight of Llama-3-8B with mixed-precision AdamW needs about 16 bytes per parameter (bf16
        weights and gradients, float32 master weights and two moments): 128 GB before a single activation, more
        than one 80 GB GPU holds. LoRA (Hu et al., 2021, *LoRA: Low-Rank Adaptation of Large Language Models*)
        freezes the pretrained weights and learns a low-rank correction $\Delta W = \gamma\, B A$ next to each chosen
        linear layer. With rank 16 on all seven projections of Llama-3-8B that is 41.9 M trainable parameters, 0.52%
        of the model (you will derive this number), and the optimizer state shrinks from 96 GB to 0.5 GB. The paper
        reports 10,000 times fewer trainable parameters and a third of the GPU memory for GPT-3 175B, at the quality
        of full fine-tuning on its benchmarks. After training, $\Delta W$ folds into $W$: no extra latency at all.

        **You will implement** a LoRA linear layer exactly as Hugging Face PEFT builds it (initialisation, the
        $\alpha/r$ and rsLoRA $\alpha/\sqrt r$ scales, merge and unmerge), a function that puts it into a Llama
        model and freezes the rest, and the trainable-parameter count of a Llama config in closed form.
        **Graded against** PEFT 0.21 itself (`LoraConfig`, `get_peft_model` on a tiny local Llama built from a
        config: state-dict names, outputs, trainable counts), float64 merge round trips, `torch.autograd.gradcheck`,
        and the module shapes of a real Llama-3-8B built on the `meta` device (no memory, no download).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：全参数微调 8B 模型需要约 128 GB 显存（每参数 16 字节）；LoRA 冻结原权重 $W$，只训练低秩增量 $\Delta W = \gamma BA$。
        - **形状**：$W \in \mathbb{R}^{d_\text{out}\times d_\text{in}}$，$A \in \mathbb{R}^{r\times d_\text{in}}$，$B \in \mathbb{R}^{d_\text{out}\times r}$，$r \ll \min(d_\text{in}, d_\text{out})$；每层新增参数 $r(d_\text{in}+d_\text{out})$。
        - **初始化**：$B=0$（训练开始时模型输出不变），$A$ 用 Kaiming 均匀分布（与 `nn.Linear` 相同，界为 $1/\sqrt{d_\text{in}}$）。
        - **缩放**：标准 LoRA $\gamma=\alpha/r$；rsLoRA $\gamma=\alpha/\sqrt r$，使大秩时学习速度不再变慢。
        - **合并（merge）**：$W \leftarrow W + \gamma BA$，推理零额外延迟；取消合并（unmerge）减回去，float64 下可精确还原，bf16 下会有舍入误差。
        - **参数计数**：GQA 下 `k_proj`/`v_proj` 的输出维度是 $n_{kv}\cdot d_\text{head}$，不是 hidden size。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why a low-rank update is enough, and what it saves

        Fine-tuning moves a pretrained weight $W_0$ to $W_0 + \Delta W$. Aghajanyan et al. (2020, *Intrinsic
        Dimensionality Explains the Effectiveness of Language Model Fine-Tuning*) found that optimising only 200
        parameters, randomly projected back into RoBERTa's full weight space, reaches 90% of full fine-tuning's
        score on MRPC; Hu et al. took the
        hypothesis that $\Delta W$ itself has a low *intrinsic rank* and parametrised it as a product:

        $$
        h = W_0 x + \gamma\, B A x, \qquad
        W_0 \in \mathbb{R}^{d_\text{out}\times d_\text{in}}\ \text{(frozen)},\quad
        A \in \mathbb{R}^{r\times d_\text{in}},\quad B \in \mathbb{R}^{d_\text{out}\times r},\quad
        r \ll \min(d_\text{in}, d_\text{out}).
        $$

        For a batch `x: (..., d_in)`: `x @ A.T: (..., r)` then `@ B.T: (..., d_out)`, times the scalar $\gamma$, added
        to the frozen layer's output `(..., d_out)`. A full update of a $4096 \times 4096$ projection has 16.8 M
        numbers; at $r = 16$ the adapter has $16 \cdot (4096 + 4096) = 131{,}072$, 128 times fewer. Only $A$ and $B$
        get gradients and optimizer state; $W_0$ can stay in bf16 (or 4-bit, QLoRA) and is never copied.

        The computation costs little: the adapter adds $2 r (d_\text{in} + d_\text{out})$ FLOPs per token to the
        layer's $2 d_\text{in} d_\text{out}$, 0.8% at $r=16$ for a square 4096 layer. The saving is memory: gradients
        and AdamW moments for 0.5% of the parameters, and a checkpoint of tens of MB instead of 16 GB, so one base
        model can serve hundreds of adapters (S-LoRA, Punica, vLLM's multi-LoRA batching).

        ## 2. Initialisation and the scale $\gamma$

        **$B = 0$, $A$ random.** At step 0 the model must be exactly the pretrained one, so $BA = 0$. Setting *both* to
        zero would kill learning: $\partial L/\partial B = \gamma\, (\partial L/\partial h)\, (Ax)^\top = 0$ and
        $\partial L/\partial A = \gamma B^\top (\partial L/\partial h)\, x^\top = 0$. With $A$ random and $B = 0$,
        $B$ receives a gradient at once and $A$ from the second step on. PEFT (`peft/tuners/lora/layer.py`,
        `reset_lora_parameters`, version 0.21.2) initialises $A$ like `nn.Linear`'s default,
        `nn.init.kaiming_uniform_(A, a=math.sqrt(5))`: uniform on $[-b, b]$ with
        $b = \sqrt{6 / ((1 + a^2)\, d_\text{in})} = 1/\sqrt{d_\text{in}}$, standard deviation $1/\sqrt{3 d_\text{in}}$.

        **$\gamma = \alpha / r$.** The paper divides by $r$ so that changing the rank does not require re-tuning the
        learning rate ("we simply set $\alpha$ to the first $r$ we try and do not tune it"). Kalajdzievski (2023, *A
        Rank Stabilization Scaling Factor for Fine-Tuning with LoRA*) showed that $1/r$ over-corrects: with $A$ of
        fixed entry size, $\|BAx\|$ grows like $\sqrt r$, not $r$, so $\alpha/r$ shrinks a high-rank adapter's updates
        too much: in their fine-tuning runs over ranks from 4 to 2048 the training curves under $\alpha/r$ nearly
        coincide, a larger rank buying nothing, while under $\alpha/\sqrt r$ a larger rank trains to a lower loss. **rsLoRA** uses $\gamma = \alpha/\sqrt r$
        (`LoraConfig(use_rslora=True)`). Common settings: $r \in \{8, 16, 64\}$, $\alpha = 2r$ or $\alpha = 16$.

        ## 3. Merge and unmerge

        Because the adapter is linear, $W_0 x + \gamma BAx = (W_0 + \gamma BA)\,x$: for serving one adapter,
        add $\Delta W = \gamma BA$ (shape `(d_out, d_in)`, the layout of `nn.Linear.weight`) into $W_0$ once, and the
        model runs at exactly the base model's cost. `unmerge` subtracts it again to switch adapters or continue
        training. In float64 the round trip returns $W_0$ up to a few ulps; in bf16 (8 bits of mantissa) adding and
        subtracting a small $\Delta W$ rounds it away, which is why PEFT keeps the adapter separate during
        training and why a merged bf16 model is not bit-identical to the unmerged one.

        ## 4. Where the adapters go in a Llama

        Each decoder layer has seven linear projections: `q_proj`, `k_proj`, `v_proj`, `o_proj` in attention and
        `gate_proj`, `up_proj`, `down_proj` in the MLP. With grouped-query attention `k_proj` and `v_proj` map
        `hidden_size` to `num_key_value_heads * head_dim` (1024 in Llama-3-8B, not 4096). The original paper adapted
        only $W_q$ and $W_v$; QLoRA (Dettmers et al., 2023) found that adapting *all* linear layers is needed to
        match full fine-tuning, and that is today's default (`target_modules="all-linear"` in PEFT).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
    """)
    lesson.md(r"""
        ## 5. Exercise `lora_linear`: the layer

        Wrap a frozen `nn.Linear` with PEFT's attribute names, so that your state dict reads like PEFT's
        (`base_layer.weight`, `lora_A.weight`, `lora_B.weight`; PEFT adds the adapter's name, `lora_A.default.weight`,
        because it can hold several): `lora_A` is an `nn.Linear(d_in, r, bias=False)`, `lora_B` an
        `nn.Linear(r, d_out, bias=False)`, both in the base layer's dtype and on its device. `merge()` and `unmerge()`
        change the base weight in place and are no-ops when already in that state (PEFT warns and does nothing).
        Refuse a rank below 1 and a base layer that is not an `nn.Linear` with a clear error.
    """)
    lesson.exercise(
        "lora_linear",
        r'''
        class LoRALinear(nn.Module):
            """y = base_layer(x) + scaling * lora_B(lora_A(x)); base_layer frozen, lora_A/lora_B trainable.

            base_layer: nn.Linear(d_in, d_out), any dtype; x: (..., d_in) -> (..., d_out)
            scaling: alpha / r, or alpha / sqrt(r) with use_rslora
            """

            def __init__(self, base_layer: nn.Linear, r: int, alpha: float, use_rslora: bool = False):
                super().__init__()
                # TODO: refuse a base layer that is not an nn.Linear (TypeError) and r < 1 (ValueError)
                # TODO: keep base_layer and freeze its parameters
                # TODO: lora_A: nn.Linear(d_in, r), lora_B: nn.Linear(r, d_out), no bias, base's dtype and device;
                #       A Kaiming-uniform with a = sqrt(5) (nn.Linear's default), B zeros
                # TODO: self.scaling (a float) and self.merged = False
                ### BEGIN SOLUTION
                if not isinstance(base_layer, nn.Linear):
                    raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base_layer).__name__}")
                if r < 1:
                    raise ValueError(f"the LoRA rank must be at least 1, got r={r}")
                self.base_layer = base_layer.requires_grad_(False)            # W0 (and bias): frozen
                weight = base_layer.weight                                    # (d_out, d_in)
                factory = dict(bias=False, dtype=weight.dtype, device=weight.device)
                self.lora_A = nn.Linear(base_layer.in_features, r, **factory)   # A: (r, d_in)
                self.lora_B = nn.Linear(r, base_layer.out_features, **factory)  # B: (d_out, r)
                nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))  # uniform, bound 1/sqrt(d_in)
                nn.init.zeros_(self.lora_B.weight)                            # B = 0: starts as the base model
                self.scaling = alpha / math.sqrt(r) if use_rslora else alpha / r
                self.merged = False
                ### END SOLUTION

            def delta_weight(self) -> torch.Tensor:
                """scaling * B @ A: (d_out, d_in), the layout of base_layer.weight."""
                # TODO
                ### BEGIN SOLUTION
                return self.scaling * (self.lora_B.weight @ self.lora_A.weight)  # (d_out, r) @ (r, d_in)
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                # TODO: the base output; add the scaled adapter path unless the adapter is merged
                ### BEGIN SOLUTION
                result = self.base_layer(x)                                   # (..., d_out)
                if self.merged:
                    return result                                             # BA already inside W0
                return result + self.lora_B(self.lora_A(x)) * self.scaling    # (..., r) -> (..., d_out)
                ### END SOLUTION

            @torch.no_grad()
            def merge(self) -> None:
                """W0 += scaling * B @ A in place; a no-op when already merged."""
                # TODO
                ### BEGIN SOLUTION
                if self.merged:
                    return
                self.base_layer.weight += self.delta_weight().to(self.base_layer.weight.dtype)
                self.merged = True
                ### END SOLUTION

            @torch.no_grad()
            def unmerge(self) -> None:
                """W0 -= scaling * B @ A in place; a no-op when not merged."""
                # TODO
                ### BEGIN SOLUTION
                if not self.merged:
                    return
                self.base_layer.weight -= self.delta_weight().to(self.base_layer.weight.dtype)
                self.merged = False
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### $\alpha/r$ against $\alpha/\sqrt r$: a picture

        Below, a frozen $64 \times 64$ layer must learn a rank-4 change with AdamW at one learning rate, for adapters of
        rank 4, 16 and 48 under both scales ($\alpha = 8$). With $\alpha/r$ the three curves nearly coincide: the
        extra rank would let the adapter move faster, and the $1/r$ factor takes exactly that away (at step 50 the
        loss is 0.156, 0.107 and 0.102 for r = 4, 16, 48, measured with the reference solution). With
        $\alpha/\sqrt r$ the rank pays off: 0.117, 0.019 and 0.0038 at step 50. That is rsLoRA's point; the price is
        that $\alpha$ (or the learning rate) must be re-tuned when moving from one scaling to the other.
    """)
    lesson.code(r"""
        def fit(r, use_rslora, steps=150, d=64, alpha=8.0, lr=2e-3):
            torch.manual_seed(0)
            base = nn.Linear(d, d, bias=False)
            target = base.weight.detach() + 0.3 * torch.randn(d, 4) @ torch.randn(4, d) / d ** 0.5  # rank-4 change
            layer = LoRALinear(base, r=r, alpha=alpha, use_rslora=use_rslora)
            optimizer = torch.optim.AdamW([p for p in layer.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
            x = torch.randn(256, d)
            losses = []
            for _ in range(steps):
                loss = (layer(x) - x @ target.T).pow(2).mean()
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                losses.append(loss.item())
            return losses

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: one thread beats two (no hand-offs); restored below
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.3), sharey=True)
        for ax, use_rslora, name in ((axes[0], False, "LoRA: scale α/r"), (axes[1], True, "rsLoRA: scale α/√r")):
            for r in (4, 16, 48):
                try:
                    ax.semilogy(fit(r, use_rslora), label=f"r = {r}")
                except NotImplementedError:
                    pass  # not attempted yet: no curves
            ax.set_title(name); ax.set_xlabel("AdamW step"); ax.legend()
        torch.set_num_threads(threads)
        axes[0].set_ylabel("MSE to the target layer")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 6. Exercise `apply_lora`: adapters in a model

        Replace every `nn.Linear` whose *last name component* is in `target_modules` (`"q_proj"` matches
        `model.layers.3.self_attn.q_proj`, as PEFT matches a list of names) with your `LoRALinear` around it, and
        freeze every other parameter of the model: embeddings, norms, the output head. Return the model (changed in
        place). A list of targets that matches nothing is almost always a typo (`"qproj"`, or a GPT-2 model whose
        attention is `c_attn`); refuse it with a `ValueError`, as PEFT does.
    """)
    lesson.exercise(
        "apply_lora",
        r'''
        def apply_lora(
            model: nn.Module, target_modules: list[str], r: int, alpha: float, use_rslora: bool = False
        ) -> nn.Module:
            """Wrap the matching nn.Linear layers in LoRALinear; afterwards only lora_A/lora_B are trainable."""
            # TODO: freeze every parameter of the model
            # TODO: collect (name, module) of the nn.Linear layers whose last name part is a target
            #       (collect first: do not replace modules while iterating named_modules())
            # TODO: refuse an empty match; replace each on its parent module (model.get_submodule, setattr)
            ### BEGIN SOLUTION
            model.requires_grad_(False)                                       # embeddings, norms, head: frozen
            targets = [
                (name, module)
                for name, module in model.named_modules()
                if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules
            ]
            if not targets:
                raise ValueError(f"no nn.Linear named {target_modules} in {type(model).__name__}")
            for name, module in targets:
                parent_name, _, child_name = name.rpartition(".")
                parent = model.get_submodule(parent_name)                     # "" -> the model itself
                setattr(parent, child_name, LoRALinear(module, r=r, alpha=alpha, use_rslora=use_rslora))
            return model
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `lora_parameter_count`: the budget of a config

        Before launching a run you want the number without building the model. For a Llama config (the fields of
        `transformers.LlamaConfig`: `hidden_size`, `intermediate_size`, `num_hidden_layers`, `num_attention_heads`,
        `num_key_value_heads`, and `head_dim`, which may be absent or `None`, meaning `hidden_size //
        num_attention_heads`), the adapters on the projections named in `target_modules` add, per layer and per
        projection, $r\,(d_\text{in} + d_\text{out})$ parameters:

        | projection | $d_\text{in}$ | $d_\text{out}$ |
        | --- | --- | --- |
        | `q_proj` | hidden | heads · head_dim |
        | `k_proj`, `v_proj` | hidden | kv_heads · head_dim |
        | `o_proj` | heads · head_dim | hidden |
        | `gate_proj`, `up_proj` | hidden | intermediate |
        | `down_proj` | intermediate | hidden |

        Llama-3-8B (hidden 4096, intermediate 14336, 32 layers, 32 heads, 8 KV heads of 128) at $r = 8$ on `q_proj`
        and `v_proj` gets $32 \cdot 8 \cdot (8192 + 5120) = 3{,}407{,}872$ parameters, the number PEFT prints for the
        classic recipe. Refuse an unknown projection name and a rank below 1.
    """)
    lesson.exercise(
        "lora_parameter_count",
        r'''
        def lora_parameter_count(config, r: int, target_modules: list[str]) -> int:
            """Trainable LoRA parameters of a Llama config with rank-r adapters on the named projections."""
            # TODO: head_dim from the config, or hidden_size // num_attention_heads when absent or None
            # TODO: (d_in, d_out) of each of the seven projections; refuse unknown names and r < 1
            # TODO: layers * sum over targets of r * (d_in + d_out)
            ### BEGIN SOLUTION
            if r < 1:
                raise ValueError(f"the LoRA rank must be at least 1, got r={r}")
            hidden, inter = config.hidden_size, config.intermediate_size
            head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
            q_width = config.num_attention_heads * head_dim
            kv_width = config.num_key_value_heads * head_dim                  # GQA: narrower than hidden
            shapes = {
                "q_proj": (hidden, q_width),
                "k_proj": (hidden, kv_width),
                "v_proj": (hidden, kv_width),
                "o_proj": (q_width, hidden),
                "gate_proj": (hidden, inter),
                "up_proj": (hidden, inter),
                "down_proj": (inter, hidden),
            }
            unknown = sorted(set(target_modules) - set(shapes))
            if unknown:
                raise ValueError(f"unknown Llama projections {unknown}; expected some of {list(shapes)}")
            per_layer = sum(r * (shapes[name][0] + shapes[name][1]) for name in set(target_modules))
            return config.num_hidden_layers * per_layer
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The budget of Llama-3-8B, in a picture

        The cell below uses your count on Llama-3-8B's config (written out here, nothing is downloaded) for the two
        usual recipes, against the 8.03 B parameters of the full model and the 16 bytes per trainable parameter of
        mixed-precision AdamW.
    """)
    lesson.code(r"""
        from types import SimpleNamespace

        llama3_8b = SimpleNamespace(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128)
        all_linear = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        ranks = [4, 8, 16, 32, 64, 128, 256]
        full = 8.03e9
        try:
            qv = [lora_parameter_count(llama3_8b, r, ["q_proj", "v_proj"]) for r in ranks]
            every = [lora_parameter_count(llama3_8b, r, all_linear) for r in ranks]
            fig, ax = plt.subplots(figsize=(6.5, 3.5))
            ax.loglog(ranks, qv, "o-", label="q_proj, v_proj (LoRA paper)")
            ax.loglog(ranks, every, "s-", label="all seven projections (QLoRA)")
            ax.axhline(full, color="k", ls=":", label="full fine-tuning: 8.03 B")
            ax.set_xlabel("rank r"); ax.set_ylabel("trainable parameters"); ax.legend(fontsize=8)
            ax.set_title("Llama-3-8B: LoRA's trainable parameters")
            plt.tight_layout(); plt.show()
            r16 = lora_parameter_count(llama3_8b, 16, all_linear)
            print(f"r=16, all linear: {r16:,} parameters = {100 * r16 / full:.2f}% of the model; "
                  f"AdamW state + grads + master weights at 16 B/param: {16 * r16 / 1e9:.2f} GB "
                  f"instead of {16 * full / 1e9:.0f} GB")
        except NotImplementedError:
            print("lora_parameter_count not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`LoRALinear`.** `requires_grad_(False)` on the base layer freezes $W_0$ and its bias: autograd still flows
        *through* the layer to `x` (the layers below need it) but no gradient buffer is ever allocated for $W_0$. The
        two adapters are `nn.Linear` modules so the state dict reads `lora_A.weight`, `lora_B.weight` like PEFT's, and
        they take the base's dtype and device (a bf16 model gets bf16 adapters; PEFT's `autocast_adapter_dtype`
        upcasts them to float32 by default when the base is bf16/fp16, which trains better). `kaiming_uniform_` with
        $a = \sqrt 5$ is exactly `nn.Linear.reset_parameters`; the zeros in $B$ make the wrapped model equal to the
        base model at step 0 (a check compares outputs bit for bit). The forward computes `lora_B(lora_A(x))`, never
        $BA$ itself: $(T \times d_\text{in})(d_\text{in} \times r)$ then $(T\times r)(r \times d_\text{out})$ costs
        $2Tr(d_\text{in} + d_\text{out})$ FLOPs, while forming $BA$ would cost $2 r\, d_\text{in} d_\text{out}$ and a
        full-size temporary. `merge` does form it, once.

        **`apply_lora`.** Freeze first, then wrap: the new `lora_A`/`lora_B` are created trainable, so the order
        leaves exactly the adapters trainable. Modules are collected before any `setattr`, because replacing
        children while `named_modules()` is iterating changes the tree under the iterator. Matching on the last name
        component is PEFT's rule for a list of names (`key.endswith("." + target)`); a string is a regular
        expression there, and `"all-linear"` means every linear layer except the output head.

        **`lora_parameter_count`.** The only trap is GQA: `k_proj` and `v_proj` output
        `num_key_value_heads * head_dim`, a quarter of the hidden size in Llama-3-8B; and `head_dim` is not always
        `hidden_size // num_attention_heads` (Gemma, Qwen3 and some tiny test configs set it separately).

        **The usual mistakes, and why they are wrong**: $B$ initialised randomly (the
        model changes before training), $A$ and $B$ both zero or swapped (no gradient), scale $\alpha$ without the
        division, rsLoRA's $\sqrt r$ forgotten, the base weight left trainable, `merge` without the scale, `unmerge`
        that adds, a merged forward that adds the adapter a second time, a second `merge` that adds it again; in the
        model, a frozen-nothing wrap, adapters on every linear layer including `lm_head`; in the count, MHA widths
        for GQA projections and `hidden // heads` instead of the config's `head_dim`.

        **In production.** PEFT's `lora.Linear` does the same arithmetic plus dropout on the adapter's input, several
        named adapters per layer (`set_adapter`, `add_weighted_adapter`), `fan_in_fan_out` for GPT-2's `Conv1D`
        (weights stored transposed), and `merge(safe_merge=True)`, which checks the merged weight for NaNs before
        writing it. Variants change the parametrisation, not the idea: DoRA (Liu et al., 2024) splits $W$ into a
        magnitude vector and a direction and adapts the direction; PiSSA initialises $A$, $B$ from the top singular
        vectors of $W$; LoRA+ gives $B$ a larger learning rate than $A$; QLoRA keeps $W_0$ in 4-bit NF4
        (`p02.qlora_nf4`) and dequantizes it on the fly. Serving systems keep adapters unmerged to batch requests
        for different adapters together: vLLM's and S-LoRA's kernels (Punica's SGMV/BGMV) gather each request's
        $A$ and $B$ and apply them to its tokens in one launch.
    """)
    lesson.mistakes()
    return lesson
