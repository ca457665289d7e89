"""Source of 02_PyTorch_Algorithms/19_Data_Loading.ipynb (build with `python -m llm_algo build p02.data_loading`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.data_loading",
        path="02_PyTorch_Algorithms/19_Data_Loading.ipynb",
        title_en="Data loading and checkpoints: token streams, document packing, exact resume",
        title_zh="数据加载与检查点：token 流采样、文档打包与精确续训",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p02.attention_mha_gqa", "p02.lr_schedules"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 预训练数据是一条很长的 token 流（token stream）：每个样本是随机起点 $s$ 上长度为 $T$ 的窗口，目标（target）是同一窗口右移一位：$x = t_{s:s+T}$，$y = t_{s+1:s+T+1}$；合法起点共 $N-T$ 个，最后一个是 $N-T-1$。
        - 批次要放到请求的设备上，并且是 `int64`（嵌入层的索引类型）；不存在的设备要在第一步就报错，而不是训练到一半才崩。
        - 文档打包（packing）：把多篇文档用 EOS 连接成一行，消除填充（padding）浪费；位置编号（position ids）在每篇文档开头**重置为 0**。
        - 打包后的注意力掩码是**块对角因果掩码**（block-diagonal causal mask）：$i$ 能看到 $j$ 当且仅当同一文档且 $j \le i$；这样打包的结果与逐篇单独计算完全相同。
        - 文档最后一个 token（EOS）没有同文档的下一个 token，它的标签是 $-100$，不能去预测下一篇文档的开头。
        - 精确续训（exact resume）要保存：模型、优化器状态（AdamW 的一阶/二阶矩和步数）、学习率调度器、采样器的随机数生成器，以及 dropout 用的全局随机数状态；少任何一个，续训结果都不再逐位相同。
        {易错点}

        nanoGPT's OpenWebText preparation writes the whole training set as one array of GPT-2 token ids, 9,035,582,198
        tokens in a 17 GB `train.bin` of `uint16` (nanoGPT `data/openwebtext/prepare.py` and its README), and its
        `get_batch` reads `batch_size` random windows of `block_size + 1` tokens out of a `np.memmap` of that file at
        every step. There is no "dataset object", no epochs, no padding: a pre-training batch is a handful of random
        offsets. When documents are packed back to back, a token can attend across a document boundary into an
        unrelated text; Llama 3 masks that ("we use an attention mask that prevents self-attention between different
        documents within the same sequence", *The Llama 3 Herd of Models*, 2024, §3.2) and found it important for
        continued pre-training on long sequences. Padding instead of packing wastes tokens: Krell et al. (2021,
        *Efficient Sequence Packing without Cross-contamination*) report that up to half of the tokens of BERT's
        Wikipedia pre-training batches were padding. And a run of weeks is interrupted many times (Llama 3 405B saw
        466 job interruptions in a 54-day snapshot, §3.3.4): each restart must continue *exactly* where it stopped.

        **You will implement** `sample_batch` (random windows with targets shifted by one, on the requested device,
        refusing a bad one), `pack_documents` (EOS, labels, per-document position resets), `packed_causal_mask` (the
        block-diagonal causal mask), and `save_checkpoint`/`load_checkpoint` for model + optimizer + scheduler +
        sampler + RNG. **Graded against** counts of the starts over thousands of draws (every start, uniform), a
        loop spec of packing, PyTorch's `scaled_dot_product_attention` and a Hugging Face `LlamaDecoderLayer` run on
        each document separately (a packed row must give the same outputs), and training resumed from your checkpoint
        compared with uninterrupted training, bit for bit.
    """
    )
    lesson.md(r"""
        ## 1. Batches from a token stream

        Tokenise the corpus once, concatenate every document (each followed by an end-of-text token, EOS), and store
        the result as one 1-D array $t$ of $N$ token ids. A language model trained on context length $T$ learns
        $p(t_{i+1} \mid t_{\le i})$ at every position of a window, so one training example is a window of $T + 1$
        tokens, split into inputs and targets shifted by one:

        $$
        x_b = t_{s_b : s_b + T},\qquad y_b = t_{s_b + 1 : s_b + T + 1},\qquad s_b \sim \mathcal U\{0, 1, \dots, N - T - 1\},
        \qquad x, y \in \mathbb Z^{B \times T}.
        $$

        The last window that still has a target for its last input starts at $N - T - 1$, so there are exactly
        $N - T$ starts; `torch.randint(N - T, (B,))` draws them (its upper bound is exclusive). With $N = 9\times10^9$
        and $B T = 5\times10^5$ tokens per step, two batches overlap with negligible probability, and sampling with
        replacement is as good as an epoch-based shuffle.

        **Shapes and dtypes.** $x, y$ are `(B, T)` `int64`: `nn.Embedding` and `F.cross_entropy` want `long`
        indices, while the stream on disk is `uint16` (GPT-2's 50,257 ids fit; Llama 3's 128,256 do not, and need
        `uint32`) — cast each window, never the whole 17 GB stream. **Device.** The batch is moved to the model's
        device; on CUDA, a pinned (page-locked) host copy and `non_blocking=True` let the copy overlap with the
        previous step's compute. A misspelt or missing device (`"gpu"`, `"cuda:3"` on a one-GPU machine) must fail
        when the loader is built, with a message, not as a cryptic error deep in the first forward pass.
        **Randomness.** The starts are drawn from a `torch.Generator` that the sampler owns, not from the global RNG:
        then dropout, data order and initialisation do not disturb each other, and the sampler's position in its
        random sequence can be saved (section 4).
    """)
    lesson.setup(r"""
        import os
        import tempfile

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `sample_batch`
    """)
    lesson.exercise(
        "sample_batch",
        r'''
        def sample_batch(
            tokens: torch.Tensor,
            batch_size: int,
            context_length: int,
            device="cpu",
            generator: torch.Generator | None = None,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """Random training windows from a 1-D integer token stream `tokens` (N,) of any integer dtype.

            Returns (inputs, targets), both (batch_size, context_length) int64 on `device`: row b is
            tokens[s : s + T] and tokens[s + 1 : s + T + 1] for a start s drawn uniformly from 0 .. N - T - 1 with
            `generator` (the global RNG when None). Raises ValueError for a stream that is not 1-D integer, too short
            (N <= T), batch_size or context_length < 1, and a device that does not exist on this machine."""
            # TODO: validate the arguments; turn `device` into a torch.device and refuse one this machine lacks
            # TODO: draw batch_size starts with the generator; the last valid start is N - T - 1
            # TODO: gather the windows, targets shifted by one; int64; move to the device
            ### BEGIN SOLUTION
            if tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
                raise ValueError(f"tokens must be a 1-D integer tensor, got {tuple(tokens.shape)} {tokens.dtype}")
            if batch_size < 1 or context_length < 1:
                raise ValueError(f"need batch_size >= 1 and context_length >= 1, got {batch_size=}, {context_length=}")
            num_tokens = tokens.numel()
            if num_tokens <= context_length:
                raise ValueError(f"a stream of {num_tokens} tokens has no window of {context_length} + 1 tokens")
            try:
                device = torch.device(device)
            except (RuntimeError, TypeError) as error:
                raise ValueError(f"unknown device {device!r}: {error}") from None
            if device.type == "cuda" and not (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
                raise ValueError(f"device {device} is not available on this machine ({torch.cuda.device_count()} CUDA devices)")
            if device.type == "mps" and not torch.backends.mps.is_available():
                raise ValueError("device mps is not available on this machine")
            starts = torch.randint(num_tokens - context_length, (batch_size,), generator=generator)  # 0 .. N-T-1
            offsets = starts[:, None] + torch.arange(context_length + 1)  # (B, T + 1)
            windows = tokens[offsets].to(torch.int64)  # (B, T + 1): cast the window, not the stream
            inputs, targets = windows[:, :-1], windows[:, 1:]  # (B, T) each, shifted by one
            if device.type == "cuda":
                return inputs.pin_memory().to(device, non_blocking=True), targets.pin_memory().to(device, non_blocking=True)
            return inputs.to(device), targets.to(device)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        Where do the starts land? 20,000 windows of $T = 8$ from a stream of $N = 40$ tokens: every one of the 32
        starts should be drawn about 625 times, the first and the last ones included.
    """)
    lesson.code(r"""
        try:
            stream = torch.randperm(40)  # distinct ids: a window's first token tells its start
            where = torch.empty(40, dtype=torch.long)
            where[stream] = torch.arange(40)
            generator = torch.Generator().manual_seed(0)
            counts = torch.zeros(40, dtype=torch.long)
            for _ in range(200):
                inputs, targets = sample_batch(stream, 100, 8, generator=generator)
                counts += torch.bincount(where[inputs[:, 0]], minlength=40)
            fig, ax = plt.subplots(figsize=(8, 2.6))
            ax.bar(range(40), counts.numpy(), color="tab:blue")
            ax.axvline(31.5, color="k", ls=":", label="last valid start N - T - 1 = 31")
            ax.axhline(20_000 / 32, color="tab:red", lw=1, label="uniform: 20000 / 32")
            ax.set_xlabel("start s"); ax.set_ylabel("windows drawn"); ax.legend(fontsize=8)
            ax.set_title("starts of 20,000 windows, N = 40, T = 8")
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("sample_batch is not attempted yet")
    """)
    lesson.md(r"""
        ## 3. Packing documents: EOS, labels, positions, and the block-diagonal mask

        Fine-tuning sets and long-context pre-training work with *documents* of very different lengths. Padding each
        to the longest wastes compute; **packing (打包)** concatenates documents into one row instead. For documents
        $d^{(1)}, \dots, d^{(K)}$ of lengths $n_k$, the packed row has $L = \sum_k (n_k + 1)$ tokens:

        $$
        \text{input\_ids} = d^{(1)}\,\text{EOS}\ d^{(2)}\,\text{EOS} \cdots d^{(K)}\,\text{EOS} \in \mathbb Z^{L}.
        $$

        Three more vectors of length $L$ make the packed row mean exactly what the separate documents meant:

        - `document_ids`: $k - 1$ on every token of document $k$, its EOS included (the EOS ends *its* document);
        - `position_ids`: the position inside the document, $0, 1, \dots, n_k$, so that RoPE sees each document as if
          it started the sequence (without the reset, document 5 would start at position 3000 and the model would
          learn that texts begin in the middle);
        - `labels`: the next token *of the same document*, aligned with the inputs (`labels[i]` is what position $i$
          must predict): `input_ids[i + 1]` inside a document, and $-100$ (`F.cross_entropy`'s `ignore_index`) at
          each document's EOS, whose next token is the first token of an unrelated document.

        The mask that forbids attention across documents is block-diagonal and causal: for a row of document ids $g$,

        $$
        M_{ij} = [\,g_i = g_j\,] \wedge [\,j \le i\,],\qquad M \in \{0, 1\}^{L \times L}\ \ (\text{a batch: } B \times L \times L),
        $$

        `True` where query $i$ may read key $j$. The diagonal is always allowed, so no row is empty (an all-masked row
        makes softmax divide 0 by 0: NaN). With $M$ and the reset positions, attention on the packed row equals
        attention on each document alone, to the last bit in exact arithmetic: that is what the checks verify with a
        Hugging Face Llama decoder layer. The cost: dense attention still computes all $L^2$ scores and throws the
        off-block ones away; kernels that know the boundaries (FlashAttention's `cu_seqlens`, FlexAttention's
        block-sparse masks) skip them, and compute only $\sum_k (n_k + 1)^2 / 2$.
    """)
    lesson.md(r"""
        ## 4. Exercise `pack_documents`
    """)
    lesson.exercise(
        "pack_documents",
        r'''
        def pack_documents(documents, eos_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            """Pack `documents` (a non-empty list of non-empty 1-D integer tensors or lists of ints, none containing
            eos_id) into one row of L = sum(len(d) + 1) tokens, each document followed by eos_id.

            Returns (input_ids, labels, position_ids, document_ids), each (L,) int64:
            labels[i] = input_ids[i + 1] within a document and -100 at each document's EOS;
            position_ids restart at 0 with every document (its EOS gets position len(d));
            document_ids are 0, 1, ... per document, EOS included. Raises ValueError on invalid documents."""
            # TODO: validate: at least one document, none empty, none containing eos_id
            # TODO: for each document: its tokens + EOS, its next-token labels (-100 at the EOS), positions 0..n, its id
            ### BEGIN SOLUTION
            if len(documents) == 0:
                raise ValueError("need at least one document to pack")
            pieces = {"input_ids": [], "labels": [], "position_ids": [], "document_ids": []}
            for index, document in enumerate(documents):
                document = torch.as_tensor(document, dtype=torch.int64).flatten()  # (n,)
                length = document.numel()
                if length == 0:
                    raise ValueError(f"document {index} is empty")
                if bool((document == eos_id).any()):
                    raise ValueError(f"document {index} contains the EOS id {eos_id}: its boundary would be ambiguous")
                eos = torch.tensor([eos_id])
                pieces["input_ids"].append(torch.cat([document, eos]))  # (n + 1,)
                pieces["labels"].append(torch.cat([document[1:], eos, torch.tensor([-100])]))  # next token, none after EOS
                pieces["position_ids"].append(torch.arange(length + 1))  # restart at 0
                pieces["document_ids"].append(torch.full((length + 1,), index))
            input_ids, labels, position_ids, document_ids = (torch.cat(pieces[key]) for key in pieces)  # (L,) each
            return input_ids, labels, position_ids, document_ids
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `packed_causal_mask`
    """)
    lesson.exercise(
        "packed_causal_mask",
        r'''
        def packed_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
            """Block-diagonal causal mask of a packed row (L,) or batch (B, L) of document ids (any integer dtype).

            Returns bool (L, L) or (B, L, L): True where query i may attend to key j, i.e. same document and j <= i.
            Raises ValueError for a tensor that is not 1-D or 2-D, or not integer."""
            # TODO: validate the input
            # TODO: same-document pairs (broadcast the ids against themselves) AND the causal lower triangle
            ### BEGIN SOLUTION
            if document_ids.dim() not in (1, 2) or document_ids.dtype.is_floating_point or document_ids.dtype == torch.bool:
                raise ValueError(f"document_ids must be (L,) or (B, L) integers, got {tuple(document_ids.shape)} {document_ids.dtype}")
            length = document_ids.shape[-1]
            same_document = document_ids[..., :, None] == document_ids[..., None, :]  # (..., L, L)
            causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()  # j <= i
            return same_document & causal
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The packed row of three documents (lengths 5, 3, 7) and its mask. Left: what you built; right: the plain
        causal mask that packing without a document mask would use — every off-block yellow cell is a token reading
        a different document.
    """)
    lesson.code(r"""
        try:
            docs = [torch.randint(1, 50, (n,)) for n in (5, 3, 7)]
            input_ids, labels, position_ids, document_ids = pack_documents(docs, eos_id=0)
            print("input_ids   ", input_ids.tolist())
            print("labels      ", labels.tolist())
            print("position_ids", position_ids.tolist())
            print("document_ids", document_ids.tolist())
            mask = packed_causal_mask(document_ids)
            fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.8))
            left.imshow(mask.numpy(), cmap="viridis")
            left.set_title("block-diagonal causal (packed)")
            right.imshow(torch.ones_like(mask).tril().numpy(), cmap="viridis")
            right.set_title("plain causal: leaks across documents")
            for ax in (left, right):
                ax.set_xlabel("key j"); ax.set_ylabel("query i")
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("pack_documents / packed_causal_mask are not attempted yet")
    """)
    lesson.md(r"""
        ## 6. Exact save and resume

        A checkpoint that only holds the weights resumes a *different* run: AdamW restarts with zero moments (the
        bias correction makes its first step again $\pm\eta$ in every coordinate), the schedule restarts its warmup,
        the sampler replays the batches it already drew, and dropout draws other masks. "Exact" means: train $k$
        steps, save, kill the process, load into freshly built objects, train $n - k$ more, and get the same bits as
        $n$ uninterrupted steps. That needs all of

        | state | where | size for a model of $P$ parameters |
        | --- | --- | --- |
        | weights | `model.state_dict()` | $P$ values |
        | AdamW moments and step | `optimizer.state_dict()` | $2P$ values (fp32) + a step per tensor |
        | schedule position | `scheduler.state_dict()` (`last_epoch`, `base_lrs`) | a few numbers |
        | the sampler's random stream | `generator.get_state()` (a `uint8` tensor) | 5 KB (Mersenne Twister) |
        | dropout's random stream | `torch.get_rng_state()` (CPU), `torch.cuda.get_rng_state_all()` (GPU) | 5 KB (+ 16 B per GPU) |
        | the step | an `int` | — |

        The optimizer state is twice the model: for a 7B model in bf16 with fp32 AdamW moments, 14 GB of weights
        and 56 GB of moments (plus 28 GB for an fp32 master copy under mixed precision, `p02.mixed_precision`).

        Save with `torch.save` a dict of those state dicts, and load it with `torch.load(path, weights_only=True)`:
        since PyTorch 2.6 that is the default, and it refuses to unpickle arbitrary objects, so a checkpoint from the
        internet cannot run code on your machine. Everything above is tensors, numbers and lists, which is exactly
        what `weights_only` allows. Load into objects built the same way as before (same model, same optimizer and
        scheduler constructed over it), *then* call each `load_state_dict`.
    """)
    lesson.md(r"""
        ## 7. Exercise `checkpoint`
    """)
    lesson.exercise(
        "checkpoint",
        r'''
        def save_checkpoint(path, *, model, optimizer, scheduler, generator: torch.Generator, step: int) -> None:
            """Write everything needed to resume training exactly to `path` (loadable with weights_only=True):
            model, optimizer and scheduler state, the sampler's generator state, the global CPU RNG state, the step.
            Raises ValueError for a negative step."""
            # TODO: validate the step; one dict of state dicts and RNG states; torch.save
            ### BEGIN SOLUTION
            if step < 0:
                raise ValueError(f"step must be >= 0, got {step}")
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),  # AdamW's exp_avg, exp_avg_sq and step per parameter
                "scheduler": scheduler.state_dict(),  # last_epoch: where the schedule is
                "generator": generator.get_state(),  # the sampler's position in its random stream
                "cpu_rng": torch.get_rng_state(),  # dropout and anything else on the global RNG
                "step": step,
            }
            temporary = f"{path}.tmp"
            torch.save(state, temporary)
            os.replace(temporary, path)  # atomic: a crash mid-write never leaves a truncated checkpoint at `path`
            ### END SOLUTION


        def load_checkpoint(path, *, model, optimizer, scheduler, generator: torch.Generator) -> int:
            """Restore what save_checkpoint wrote into freshly built model, optimizer, scheduler and generator, and
            the global CPU RNG; return the step. Loads with weights_only=True. Raises ValueError when the file lacks
            one of the expected entries; a model of another shape is refused by load_state_dict."""
            # TODO: torch.load safely; check the entries; restore each object's state and the RNGs; return the step
            ### BEGIN SOLUTION
            state = torch.load(path, weights_only=True)
            missing = {"model", "optimizer", "scheduler", "generator", "cpu_rng", "step"} - set(state)
            if missing:
                raise ValueError(f"{path} is not a checkpoint of save_checkpoint: missing {sorted(missing)}")
            model.load_state_dict(state["model"])  # strict: a key or shape mismatch raises
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            generator.set_state(state["generator"])
            torch.set_rng_state(state["cpu_rng"])
            return int(state["step"])
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What is lost without each piece

        A tiny model with dropout trained for 40 steps with AdamW and a warmup schedule, interrupted at step 20 and
        resumed with your functions, and then resumed again while leaving out one piece of the state. The curve shows
        how far the weights drift from the uninterrupted run.
    """)
    lesson.code(r"""
        def tiny_run(total, resume_at=None, drop=None):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 32))
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
            generator = torch.Generator().manual_seed(1)
            stream = torch.randint(0, 32, (500,), generator=torch.Generator().manual_seed(2))
            drift = []
            folder = tempfile.mkdtemp()
            for step in range(total):
                if step == resume_at:
                    path = os.path.join(folder, "ckpt.pt")
                    save_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, generator=generator, step=step)
                    torch.manual_seed(123)  # a new process: new init, new RNG states
                    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 32))
                    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
                    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
                    fresh = torch.Generator().manual_seed(99)
                    load_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, generator=fresh)
                    generator = fresh if drop != "generator" else torch.Generator().manual_seed(99)
                    if drop == "optimizer":
                        optimizer.state.clear()  # AdamW starts again from zero moments and step 0
                    if drop == "cpu_rng":
                        torch.manual_seed(123)
                inputs, targets = sample_batch(stream, 8, 16, generator=generator)
                loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                drift.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
            return torch.stack(drift)

        try:
            straight = tiny_run(40)
            fig, ax = plt.subplots(figsize=(7, 3))
            for drop in (None, "optimizer", "generator", "cpu_rng"):
                resumed = tiny_run(40, resume_at=20, drop=drop)
                gap = (resumed - straight).abs().max(dim=1).values
                label = "everything restored" if drop is None else f"without {drop} state"
                ax.plot(range(1, 41), gap.numpy() + 1e-12, label=label)
                print(f"{label:>28}: max |weight difference| after 40 steps = {gap[-1].item():.3g}")
            ax.set_yscale("log"); ax.axvline(20, color="k", ls=":")
            ax.set_xlabel("step"); ax.set_ylabel("max |w - w_straight| (+1e-12)"); ax.legend(fontsize=8)
            ax.set_title("resume at step 20")
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("sample_batch / the checkpoint functions are not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`sample_batch`.** Validation comes first because every mistake it catches would otherwise surface far
        away: a float stream would fail inside `nn.Embedding`, a stream shorter than a window would make `randint`
        raise about a bound of 0, and a device string such as `"gpu"` would fail only at `.to(...)`. `torch.device`
        parses the string (and raises `RuntimeError` for an unknown type, which becomes a `ValueError` with the
        device's name); a CUDA index must also be below `torch.cuda.device_count()`, and `mps` needs
        `torch.backends.mps.is_available()`. Any other existing device (`meta`, which holds shapes without data, is
        on every machine) gets the batch through `.to(device)`. The starts come from
        `torch.randint(N - T, ...)`, whose exclusive bound makes $N - T - 1$ the last start; one index tensor
        `starts[:, None] + arange(T + 1)` gathers all windows at once, `(B, T + 1)`, and the two views of it are the
        inputs and the targets. Cast the window to `int64`, never the stream (a 17 GB `uint16` memmap would become
        70 GB). On CUDA, `pin_memory()` + `non_blocking=True` makes the copy asynchronous.

        **`pack_documents`.** A document's labels are its own tokens from the second on, then the EOS (the last real
        token predicts the end of the text), then $-100$ at the EOS itself. The positions are `arange(n + 1)` per
        document; the ids mark which block of the mask each token belongs to.

        **`packed_causal_mask`.** Two broadcasts, `ids[..., :, None] == ids[..., None, :]` for the blocks and a lower
        triangle for causality: $O(L^2)$ booleans, which is why long-context trainers never materialise it.

        **`save_checkpoint` / `load_checkpoint`.** One dict of state dicts, written to a temporary file and renamed
        with `os.replace`, which is atomic on POSIX: a job killed while writing leaves the previous checkpoint intact
        instead of a truncated one. Loading checks the entries, so a file from another tool fails with a clear
        message rather than a `KeyError`.

        **The usual mistakes, and why they are wrong**:
        - *The last start never drawn* (`randint(N - T - 1, ...)`) — invisible in a loss curve, caught by counting
          starts; *targets not shifted* (`y = x`: the model learns to copy, loss goes to 0); *the global RNG used
          instead of the generator*; *no `int64` cast*; *a bad device accepted*;
          *the batch left on the CPU*.
        - *Positions not reset* (one `arange(L)` for the row), *the EOS labelled with the next document's first
          token* (the model learns to predict across unrelated texts), *the EOS counted in the next document*.
        - *A strict triangle* (`j < i`: the first token of each document sees nothing, and softmax returns NaN), *the
          document blocks without causality* (every token reads the future of its document), *a causal mask without
          blocks* (the leak of the right-hand figure).
        - *The optimizer, the scheduler, the generator or the RNG state left out of the checkpoint*: each one
          resumes into a run that differs from the uninterrupted one after the first resumed step.

        **What production code does.** nanoGPT's `get_batch` is this exercise over `np.memmap`, with
        `pin_memory().to(device, non_blocking=True)`. Hugging Face's `DataCollatorWithFlattening` packs a batch into
        one row with `position_ids` that restart at 0 and labels set to $-100$ at each sequence's first token
        (the same rule seen from the other side of the shift), and its FlashAttention path turns the position resets
        into `cu_seqlens` for the variable-length kernel, so no $L \times L$ mask exists at all. PyTorch's
        FlexAttention expresses the document mask as a `mask_mod` (`doc[q] == doc[kv] and q >= kv`) compiled into a
        block-sparse kernel. Megatron-LM's GPT dataset has `--reset-position-ids`, `--reset-attention-mask` and
        `--eod-mask-loss`, the three halves of this lesson as flags. For resume, Hugging Face `Trainer` writes
        `model.safetensors`, `optimizer.pt`, `scheduler.pt`, `rng_state.pth` (Python, NumPy, CPU and CUDA RNGs) and
        `trainer_state.json` per checkpoint, and skips the batches already consumed on resume;
        `torchdata.stateful_dataloader.StatefulDataLoader` saves the loader's position itself. At scale,
        `torch.distributed.checkpoint` writes each rank's shards in parallel and can reload them on a different number
        of GPUs, and every rank saves its own RNG states (Megatron saves them per tensor-parallel rank, since dropout
        must differ across ranks but agree within a replica).
    """)
    lesson.mistakes()
    return lesson
