"""Source of 05_Projects/06_Distributed_Training.ipynb (build with `python -m llm_algo build p05.distributed_training`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p05.distributed_training",
        path="05_Projects/06_Distributed_Training.ipynb",
        title_en="2D parallel training: data parallel × tensor parallel",
        title_zh="二维并行训练：数据并行 × 张量并行",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.tensor_parallel", "p02.ddp", "p02.tiny_llama"],
    )
    lesson.title(
        intro=r"""
        No single parallelism scales a large model on its own. Tensor parallelism (TP) splits every matmul, but it
        all-reduces activations twice per layer, so it only pays inside a node where NVLink moves hundreds of GB/s;
        data parallelism (DP) only all-reduces gradients once per step, so it crosses nodes well, but every replica
        must hold the whole model. Megatron-LM combines them: Narayanan et al. (2021, *Efficient Large-Scale Language
        Model Training on GPU Clusters Using Megatron-LM*) trained a 1-trillion-parameter GPT on 3072 A100s as
        8-way TP inside each node, 64 pipeline stages and 6 data-parallel replicas (8 × 64 × 6 = 3072), at 52% of the
        GPUs' peak. Every large run since, Llama 3's included, is a grid of such groups.

        **You will assemble** your own tensor-parallel layers (`ParallelAttention`, `ParallelSwiGLU` from
        `p02.tensor_parallel`) and your `DDP` (`p02.ddp`) into a 2 × 2 grid of four real processes (gloo on a CPU,
        NCCL on GPUs): the process groups of the grid, a tiny Llama whose layers are split over the TP group, and a
        training loop in which each DP replica sees its own half of every batch. **Graded on outcomes:** the loss
        curve of the four processes equals single-process training of the same Hugging Face model on the whole
        batch, step for step, within float32 round-off; so do the final logits; and each replica touched only its own
        rows of the data.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **二维网格**：world = DP × TP。TP 组是相邻的 rank（同一台机器内，NVLink 带宽高），DP 组是跨步的 rank（跨机器，只在每步同步一次梯度）。
        - **建组的规矩**：`dist.new_group(ranks)` 是集体操作，**每个 rank 都要以相同的顺序为每个组调用一次**，哪怕自己不在组里；否则会卡死。
        - **模型**：嵌入层、RMSNorm、输出头在 TP 组内复制；注意力按头切分，MLP 按中间维切分（你在 `p02.tensor_parallel` 写的层）。
        - **梯度**：被切分的参数在 TP 组内各不相同，只能在 **DP 组** 内平均；复制的参数在 TP 组内的梯度本来就相同，也只在 DP 组内平均。
        - **数据**：DP 副本 $d$ 取全局 batch 的第 $d$ 份；TP 组内的 rank 看同一份数据。
        - **验收**：四个进程的 loss 曲线与单进程训练同一个 Hugging Face 模型逐步相等（float32 舍入误差内），最终 logits 相等。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The grid

        With a world of $W$ ranks and TP size $t$ (so DP size $d = W / t$), Megatron numbers the ranks so that a TP
        group is $t$ **consecutive** ranks: they share a node and its NVLink, and TP's activation all-reduces (two
        per layer forward, two backward) stay inside it. The DP groups are the **strided** sets: rank $r$ is TP rank
        $r \bmod t$ of DP replica $\lfloor r / t \rfloor$, and its DP group holds the ranks with the same TP rank.

        | world 8, t = 2 | TP groups | DP groups |
        | --- | --- | --- |
        | ranks | `[0, 1] [2, 3] [4, 5] [6, 7]` | `[0, 2, 4, 6] [1, 3, 5, 7]` |

        Every rank is in exactly one group of each kind, and a TP group and a DP group meet in exactly one rank.
        Which traffic goes where, per training step of a model with $P$ parameters, $L$ layers, $N$ tokens per
        replica and hidden size $H$ (bf16):

        | group | what | bytes moved per rank (ring) |
        | --- | --- | --- |
        | TP ($t$ ranks) | all-reduce of activations, 4 per layer (2 forward, 2 backward) | $4L \cdot 2\frac{t-1}{t} \cdot 2NH$ |
        | DP ($d$ ranks) | all-reduce of this rank's gradient shard, once | $2\frac{d-1}{d} \cdot 2P/t$ |

        For Llama-3-70B ($L = 80$, $H = 8192$) with $N = 8192$ tokens and $t = 8$, TP moves about
        $4 \cdot 80 \cdot 1.75 \cdot 2 \cdot 8192 \cdot 8192$ bytes $\approx 75$ GB per step, which only NVLink
        (900 GB/s per H100) carries in well under a second; DP moves $2 \cdot 2 \cdot 70\text{e9}/8 \approx 35$ GB
        once, and overlaps it with the backward pass. Hence TP inside the node, DP across.

        ## 2. Creating the groups

        `dist.new_group(ranks)` is itself a collective over the *whole* world: **every** rank must call it for
        **every** group, in the same order, even for groups it is not in, and keep the handle of its own. A rank that
        skips the groups it is not in leaves the others waiting in `new_group` until the deadline: the classic hang of
        a first 2D setup.

        ## 3. What is replicated, what is split, who averages what

        The tiny Llama of this project has, per layer, RMSNorm → attention → residual → RMSNorm → SwiGLU → residual,
        then a final RMSNorm and the output head. The attention's heads and the MLP's intermediate dimension are split
        over the TP group by your layers; the embedding, the norms and the output head are **replicated** in the TP
        group. Two facts make the DP side simple:
        - a **split** parameter has a different shard on each TP rank: its gradient must be averaged only with the same
          shard on the other replicas, the DP group. Averaging over the whole world would mix different shards;
        - a **replicated** parameter already has the *same* gradient on every TP rank (the $f$/$g$ operators make the
          activations and their gradients identical across the TP group), so it too is averaged over the DP group
          only. Your `DDP` over the DP group does both.

        Each replica computes the mean loss over its $B/d$ rows; averaging the gradients over $d$ replicas gives the
        gradient of the mean over all $B$ rows, exactly what one process computes on the whole batch. That equality
        is what this project is graded on.
    """)
    lesson.setup(r"""
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F

        from llm_algo.distributed import run_ranks
        from llm_algo.paths import repo_root
        from llm_algo.references.hf import tiny_llama_config, transformers_module

        # Your building blocks (the reference where yours does not pass its checks yet)
        ParallelAttention, ParallelSwiGLU = lesson.use("p02.tensor_parallel", "ParallelAttention", "ParallelSwiGLU")
        DDP = lesson.use("p02.ddp", "DDP")

        TEXT = (repo_root() / "05_Projects" / "data" / "tiny_stories.txt").read_text(encoding="utf-8")
        CHARS = sorted(set(TEXT))
        VOCAB = 64  # the characters of the corpus (51), padded to a size the TP group could split
        TOKENS = torch.tensor([CHARS.index(c) for c in TEXT[:60_000]])


        def make_model(seed: int = 0):
            '''The model to train: a tiny Llama from Hugging Face (random weights), 2 layers, 4 query heads over 2
            KV heads, hidden 32, intermediate 64.'''
            torch.manual_seed(seed)
            config = tiny_llama_config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=8)
            return transformers_module().LlamaForCausalLM(config)


        def config_of(model) -> dict:
            '''What the 2D model needs to know, as plain numbers.'''
            c = model.config
            return {"vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "num_layers": c.num_hidden_layers,
                    "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
                    "head_dim": c.head_dim, "rms_norm_eps": c.rms_norm_eps,
                    "rope_theta": c.rope_parameters["rope_theta"]}


        def make_batches(steps: int, batch: int, seq: int, seed: int = 0) -> list:
            '''`steps` batches of `batch` windows of seq + 1 characters (inputs and next-token targets).'''
            g = torch.Generator().manual_seed(seed)
            starts = torch.randint(0, len(TOKENS) - seq - 1, (steps, batch), generator=g)
            return [torch.stack([TOKENS[s : s + seq + 1] for s in row.tolist()]) for row in starts]


        class RMSNorm(nn.Module):
            '''Llama's RMSNorm (float32 statistics), replicated in the TP group.'''
            def __init__(self, weight, eps):
                super().__init__()
                self.weight, self.eps = nn.Parameter(weight.detach().clone()), eps

            def forward(self, x):
                variance = x.float().pow(2).mean(-1, keepdim=True)
                return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


        def rope_cos_sin(seq: int, head_dim: int, theta: float, batch: int, dtype=torch.float32):
            '''cos, sin (batch, seq, head_dim) in Hugging Face's rotate-half layout, for apply_rotary.'''
            inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype).expand(batch, -1, -1), emb.sin().to(dtype).expand(batch, -1, -1)
    """)
    lesson.md(r"""
        ## 4. Exercise `grid_groups`: which ranks form which group

        Return the TP groups (consecutive ranks) and the DP groups (strided ranks) of a world of `world_size` ranks
        with TP size `tp`, each a list of global ranks in increasing order, the groups ordered by their first rank.
        Refuse what cannot be a grid: `TypeError` for sizes that are not integers (a bool is not a size), `ValueError`
        for sizes below 1 or a `tp` that does not divide `world_size`. This is plain arithmetic (no process group);
        the next exercises pass its lists to `dist.new_group`.
    """)
    lesson.exercise(
        "grid_groups",
        r'''
        def grid_groups(world_size: int, tp: int) -> tuple[list[list[int]], list[list[int]]]:
            """(tp_groups, dp_groups) of a world_size = dp * tp grid; TP groups are consecutive ranks."""
            # TODO: validate (TypeError for non-int or bool sizes; ValueError for < 1 or tp not dividing world_size)
            # TODO: tp_groups: [0..tp-1], [tp..2tp-1], ...; dp_groups: ranks with the same rank % tp
            ### BEGIN SOLUTION
            for name, value in (("world_size", world_size), ("tp", tp)):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{name} must be an int, got {type(value).__name__}")
                if value < 1:
                    raise ValueError(f"{name} must be at least 1, got {value}")
            if world_size % tp:
                raise ValueError(f"tp={tp} does not divide world_size={world_size}")
            dp = world_size // tp
            tp_groups = [list(range(d * tp, (d + 1) * tp)) for d in range(dp)]
            dp_groups = [list(range(t, world_size, tp)) for t in range(tp)]
            return tp_groups, dp_groups
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `TinyLlama2D`: the model, split over the TP group

        Build the tiny Llama from the Hugging Face model's `state_dict` (names such as
        `model.layers.0.self_attn.q_proj.weight`, `model.layers.0.mlp.gate_proj.weight`,
        `model.layers.0.input_layernorm.weight`, `model.norm.weight`, `model.embed_tokens.weight`,
        `lm_head.weight`): per layer an `RMSNorm` (given) and your `ParallelAttention` of the four projection weights
        with `group=tp_group`, then an `RMSNorm` and your `ParallelSwiGLU` of the three MLP weights. The embedding
        (`nn.Embedding.from_pretrained(..., freeze=False)`), the final norm and the output head (an `nn.Linear` without
        bias, of the weight's dtype, its weight a copy) are replicated. Copy every tensor you keep (`.detach().clone()`): the state dict
        belongs to the caller. `forward(input_ids (B, T))` returns the logits `(B, T, V)`, the same on every rank of the
        TP group; RoPE's `cos, sin` come from `rope_cos_sin` (given) with the config's `head_dim` and `rope_theta`.
        Refuse a `state_dict` that lacks a tensor the config needs (`KeyError` naming it).
    """)
    lesson.exercise(
        "TinyLlama2D",
        r'''
        class TinyLlama2D(nn.Module):
            """A Llama whose attention heads and MLP are split over tp_group; embedding, norms and head replicated."""
            def __init__(self, state_dict: dict, config: dict, tp_group=None):
                super().__init__()
                self.config = config
                # TODO: the embedding, per layer (norm, ParallelAttention, norm, ParallelSwiGLU), final norm, head
                ### BEGIN SOLUTION
                def weight(name):
                    if name not in state_dict:
                        raise KeyError(f"TinyLlama2D: the state_dict has no {name!r}")
                    return state_dict[name].detach().clone()

                eps = config["rms_norm_eps"]
                self.embed = nn.Embedding.from_pretrained(weight("model.embed_tokens.weight"), freeze=False)
                self.layers = nn.ModuleList()
                for i in range(config["num_layers"]):
                    p = f"model.layers.{i}."
                    attention = ParallelAttention(
                        weight(p + "self_attn.q_proj.weight"), weight(p + "self_attn.k_proj.weight"),
                        weight(p + "self_attn.v_proj.weight"), weight(p + "self_attn.o_proj.weight"),
                        config["num_heads"], config["num_kv_heads"], group=tp_group,
                    )
                    mlp = ParallelSwiGLU(
                        weight(p + "mlp.gate_proj.weight"), weight(p + "mlp.up_proj.weight"),
                        weight(p + "mlp.down_proj.weight"), group=tp_group,
                    )
                    self.layers.append(nn.ModuleDict({
                        "norm1": RMSNorm(weight(p + "input_layernorm.weight"), eps), "attention": attention,
                        "norm2": RMSNorm(weight(p + "post_attention_layernorm.weight"), eps), "mlp": mlp,
                    }))
                self.norm = RMSNorm(weight("model.norm.weight"), eps)
                head = weight("lm_head.weight")
                self.head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False, dtype=head.dtype)
                with torch.no_grad():
                    self.head.weight.copy_(head)
                ### END SOLUTION

            def forward(self, input_ids):
                """input_ids (B, T) -> logits (B, T, V), replicated over the TP group."""
                # TODO: embed; cos, sin; each layer: x += attention(norm1(x), cos, sin); x += mlp(norm2(x)); norm; head
                ### BEGIN SOLUTION
                batch, seq = input_ids.shape
                cos, sin = rope_cos_sin(seq, self.config["head_dim"], self.config["rope_theta"], batch)
                x = self.embed(input_ids)
                for layer in self.layers:
                    x = x + layer["attention"](layer["norm1"](x), cos.to(x.dtype), sin.to(x.dtype))
                    x = x + layer["mlp"](layer["norm2"](x))
                return self.head(self.norm(x))
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `train_2d`: one training run on the grid

        `train_2d` runs in **every** rank of the world (the checks and the demo start the ranks with `run_ranks`).
        1. Build the grid with your `grid_groups(dist.get_world_size(), tp)` and create **every** group with
           `dist.new_group`, TP groups first, then DP groups, keeping this rank's TP group and DP group.
        2. Build `TinyLlama2D(state_dict, config, tp_group)` and wrap it in your `DDP(model, group=dp_group)`.
        3. Make `torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)`.
        4. For each batch `(B, T + 1)` of `batches`: this replica's rows are `[d·B/dp, (d+1)·B/dp)` where `d` is
           this rank's index in its DP group (refuse with `ValueError` a `B` that the DP size does not divide); the
           inputs are the first `T` columns, the targets the last `T`; the loss is the mean next-token cross-entropy
           over the replica's rows; backward; step; zero the gradients. Record the **global** loss of the step: the
           mean over all `B` rows, i.e. the replica losses averaged over the DP group (`dist.all_reduce` on a copy,
           `group=dp_group`).
        5. Return `{"losses": [...], "rows": (start, stop), "logits": ...}`: the global losses (Python floats), this
           replica's row range, and the trained model's logits on the first batch's inputs, all `B` rows
           (`model.eval()`, `torch.no_grad()`), detached.

        The checks train the same Hugging Face model in one process on the whole batches, with the same AdamW, and
        compare: every loss within float32 round-off, the final logits too, and the rows each replica used.
    """)
    lesson.exercise(
        "train_2d",
        r'''
        def train_2d(state_dict: dict, config: dict, batches: list, tp: int, lr: float = 3e-3) -> dict:
            """Run in every rank: DP x TP training of TinyLlama2D; this rank's losses, rows and final logits."""
            # TODO: groups (every rank creates every group, same order), model, DDP over the DP group, AdamW
            # TODO: per batch: this replica's rows, loss, backward, step, zero_grad; the global loss over the DP group
            ### BEGIN SOLUTION
            tp_groups, dp_groups = grid_groups(dist.get_world_size(), tp)
            rank = dist.get_rank()
            handles = [dist.new_group(ranks) for ranks in tp_groups + dp_groups]  # every rank, every group, in order
            tp_group = handles[rank // tp]
            dp_group = handles[len(tp_groups) + rank % tp]
            dp_size, dp_index = len(dp_groups[0]), rank // tp
            model = DDP(TinyLlama2D(state_dict, config, tp_group), group=dp_group)
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
            losses, rows = [], None
            for batch in batches:
                if batch.shape[0] % dp_size:
                    raise ValueError(f"a batch of {batch.shape[0]} rows does not split over {dp_size} replicas")
                share = batch.shape[0] // dp_size
                rows = (dp_index * share, (dp_index + 1) * share)
                local = batch[rows[0] : rows[1]]
                logits = model(local[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), local[:, 1:].reshape(-1))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                total = loss.detach().clone()
                dist.all_reduce(total, group=dp_group)
                losses.append(total.item() / dp_size)
            model.eval()
            with torch.no_grad():
                logits = model(batches[0][:, :-1]).detach()
            return {"losses": losses, "rows": rows, "logits": logits}
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Train on the grid and compare with one process

        Four ranks (DP 2 × TP 2) train for 40 steps on batches of 8 windows of 32 characters; the same Hugging Face
        model trains in this process on the whole batches. The two curves should lie on top of each other. On a CPU
        most of the time goes to gloo's messages between processes, not to the math: the point here is equality,
        not speed. On a machine with 4 GPUs, `run_ranks(..., device="cuda")` runs the same code over NCCL.
    """)
    lesson.code(r"""
        base = make_model()
        config = config_of(base)
        batches = make_batches(steps=40, batch=8, seq=32)

        started = time.perf_counter()
        results = run_ranks(train_2d, 4, args=(base.state_dict(), config, batches, 2), deadline=300)
        grid_seconds = time.perf_counter() - started
        if any(r.not_attempted for r in results):
            print("Implement grid_groups, TinyLlama2D and train_2d first.")
        elif not all(r.ok for r in results):
            raise RuntimeError("; ".join(r.describe() for r in results if not r.ok))
        else:
            values = [r.value for r in results]
            reference = make_model()  # the same seed: the same weights
            optimizer = torch.optim.AdamW(reference.parameters(), lr=3e-3, weight_decay=0.0)
            single = []
            for batch in batches:
                logits = reference(input_ids=batch[:, :-1]).logits
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                single.append(loss.item())

            gap = max(abs(a - b) for a, b in zip(values[0]["losses"], single))
            print(f"4 ranks: {grid_seconds:.1f} s; largest loss difference from one process: {gap:.2e}")
            print("rows per rank:", [v["rows"] for v in values])
            plt.plot(single, label="one process, whole batch (Hugging Face)", linewidth=4, alpha=0.4)
            plt.plot(values[0]["losses"], "--", label="DP 2 x TP 2, four processes (yours)")
            plt.xlabel("step")
            plt.ylabel("cross-entropy (nats per character)")
            plt.legend()
            plt.title("2D-parallel training equals single-process training")
            plt.show()
    """)
    lesson.md(r"""
        **What you should see:** the two curves coincide (differences around $10^{-6}$, float32 summation order), the
        loss falls from $\ln 64 \approx 4.16$ towards 3 in 40 steps, ranks 0 and 1 (one TP group) use rows `(0, 4)`
        and ranks 2 and 3 rows `(4, 8)`.

        **Usual mistakes**, and why they are wrong:
        - DDP over the whole world instead of the DP group: the shards of a split weight from different TP ranks are
          averaged together, and the model drifts from the first step;
        - every replica trains on the whole batch: the curve is right (the mean of identical gradients) but each
          replica does $d$ times the work, which is why the checks look at the rows;
        - the local loss recorded instead of the global one: the curve is one replica's half of the batch;
        - DP groups built from consecutive ranks: they are the TP groups again.

        **In production.** Megatron-LM's `parallel_state.initialize_model_parallel` builds exactly these groups (plus
        pipeline, context and expert groups); PyTorch's `init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp",
        "tp"))` builds them from a mesh and hands `mesh["tp"]` to `parallelize_module` and `mesh["dp"]` to FSDP2's
        `fully_shard`. torchtitan trains Llama 3 with that FSDP × TP (× PP) mesh.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`grid_groups`.** Rank $r$ sits at row $\lfloor r/t \rfloor$ (its DP replica) and column $r \bmod t$ (its TP
        rank) of a $d \times t$ grid; TP groups are rows, DP groups columns.

        **`TinyLlama2D`.** The only split layers are the two you wrote in `p02.tensor_parallel`; everything else is
        an ordinary module, copied on every rank. Because the $g$ operator all-reduces the output of each split block,
        the residual stream is identical on the TP ranks, so the replicated norms and head see the same inputs and
        produce the same gradients there.

        **`train_2d`.** `dist.new_group` is called for all $d + t$ groups on every rank, in one order; the rank keeps
        handle `rank // t` (its TP group) and `d + rank % t` (its DP group). The global loss is a DP all-reduce of a
        *copy* of the loss: `all_reduce` works in place, and reducing the loss tensor itself after `backward` would be
        harmless here but is a habit that corrupts tensors autograd still needs elsewhere.
    """)
    lesson.mistakes()
    return lesson
