"""Source of 05_Projects/01_Tiny_LLM_From_Scratch.ipynb (build with `python -m llm_algo build p05.tiny_llm_from_scratch`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p05.tiny_llm_from_scratch",
        path="05_Projects/01_Tiny_LLM_From_Scratch.ipynb",
        title_en="Project: train a tiny LLM from scratch",
        title_zh="项目：从零训练一个小型语言模型",
        difficulty="hard",
        device="cpu",
        minutes=150,
        prerequisites=[
            "p02.bpe_tokenizer",
            "p02.tiny_llama",
            "p02.adamw",
            "p02.lr_schedules",
            "p02.grad_accum_clip",
            "p02.data_loading",
            "p02.sampling",
        ],
    )
    lesson.title(
        intro=r"""
        Every piece of a pre-training run is now on your disk: your byte-level BPE tokenizer, your Llama, your AdamW,
        your warmup-cosine schedule, your gradient clipping, your batch sampler and checkpoint functions, your
        sampling processors. This project wires them into the loop that trained Llama, in miniature: tokenize a corpus,
        train on random windows, watch the validation loss fall, survive an interruption without changing a single
        bit of the result, and read what the model writes.

        The corpus is 648 short children's stories (240 KB) written by a committed script, in the spirit of
        TinyStories (Eldan and Li, 2023, who showed that models of a few million parameters write fluent English
        when the language is simple enough). The CPU configuration is a 2-layer Llama of 48k parameters trained for a
        few seconds; on a GPU the same code trains a bigger one on the whole corpus and reports tokens per second and
        model FLOPs utilisation (MFU).

        **You will build** `prepare_corpus` (your tokenizer trained on the training split only, uint16 token
        streams), `train_step` (one optimizer step with your clipping and schedule), `evaluate` (held-out loss over
        fixed windows), `TrainingRun` (your model, optimizer, schedule and sampler in one object that trains, writes
        checkpoints and resumes), `distinct_ngram_ratio` and `generate` (KV-cached sampling with your processors).
        **Graded on outcomes:** the validation loss after the CPU configuration's 60 steps must be below 1.85 nats
        per token (a bigram model gets 2.06); training resumed from a checkpoint must give the uninterrupted run's
        losses and weights bit for bit; greedy generation must equal your `generate_greedy` token for token and
        seeded sampling must follow the model's distribution (a chi-square test); samples from the trained model must
        be diverse (distinct bigram ratio above 0.35 where greedy decoding gets 0.07) without being noise (the model's
        own loss on them below 2.8 nats per token).
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **目标**：把 Part 02 里自己写的组件（BPE 分词器、TinyLlama、AdamW、warmup-cosine 学习率、梯度裁剪、`sample_batch`、checkpoint、采样处理器）通过 `lesson.use(...)` 组装成一个完整的预训练流程。
        - **数据**：分词器只在训练集文档上训练（验证集不能泄漏进词表）；每篇文档后接 `<|endoftext|>`；token 流存成 `uint16`（nanoGPT 的 `train.bin` 就是这样）。
        - **一步训练**：前向 → float32 交叉熵（按 token 平均）→ `zero_grad` → `backward` → 裁剪全局梯度范数 → `optimizer.step()` → `scheduler.step()`；顺序错了（先调 scheduler、裁剪放在 step 之后、不清梯度）训练照样能跑，结果却不对。
        - **评估**：在固定的、不重叠的验证窗口上求每个 token 的平均交叉熵；最后一个批次较小时，对批次平均再平均是错的；评估完要恢复 `model.train()` 状态。
        - **精确续训**：checkpoint 里要有模型、优化器动量、调度器位置、采样器的随机数状态和步数；恢复后的 loss 与不中断的训练逐位相同。
        - **生成**：prefill 一次，之后每步只送一个 token 进 KV cache；temperature 为 0 时等价于 greedy；用 distinct n-gram 比例衡量样本是否退化（greedy 容易陷入循环）。
        - **评分标准**：CPU 配置下 60 步后验证 loss < 1.85 nats/token（bigram 模型为 2.06）；续训逐位一致；greedy 与 `generate_greedy` 逐 token 相同；采样分布通过卡方检验；训练后样本的 distinct-2 比例 > 0.35。
        - **GPU 上**：同一份代码放大模型和数据，报告 tokens/s 与 MFU（$6N$ FLOPs/token 加注意力项，除以峰值算力）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The run you are about to build

        | stage | your component (lesson) | what this project adds |
        | --- | --- | --- |
        | text → ids | `train_bpe`, `BPETokenizer` (`p02.bpe_tokenizer`) | a train/validation split by document, the tokenizer trained on the training split only, `uint16` streams |
        | ids → batches | `sample_batch` (`p02.data_loading`) | driven by a generator that the run owns and checkpoints |
        | model | `TinyLlama` (`p02.tiny_llama`) | seeded initialisation |
        | one update | `AdamW`, `weight_decay_param_groups` (`p02.adamw`), `clip_grad_norm` (`p02.grad_accum_clip`), `warmup_cosine_lr`, `make_lambda_lr` (`p02.lr_schedules`) | the order of the calls in a step |
        | progress | — | held-out loss on fixed windows, a progress bar, a loss curve |
        | interruption | `save_checkpoint`, `load_checkpoint` (`p02.data_loading`) | periodic checkpoints, resume into fresh objects |
        | text out | `KVCache`, `generate_greedy` (`p02.tiny_llama`), `Temperature`, `TopK`, `sample_next_token` (`p02.sampling`) | a KV-cached sampler, a diversity measure |

        **Shapes.** A batch is `inputs, targets: (B, T)` int64 with `targets[b, t] = inputs[b, t + 1]`; the model
        returns `logits: (B, T, V)`; the loss is the mean over the $BT$ positions of
        $-\log \operatorname{softmax}(\text{logits}_{b,t})[\text{targets}_{b,t}]$, in nats per token. For the CPU
        configuration $B = 16$, $T = 32$, $V = 256 + 100 + 1 = 357$ (bytes, 100 merges, `<|endoftext|>`), $d = 32$,
        2 layers, 4 query heads of size 8 sharing 2 key/value heads, an FFN of width 96: 47,584 parameters.

        **What the numbers mean.** A model that knows nothing scores $\ln V = 5.88$ nats per token; one that knows
        only token frequencies (a unigram model fitted on the training split) scores 4.50 on the validation split;
        one that knows the previous token (a bigram model, add-0.1 smoothing) scores 2.06. The target of this
        project, **below 1.85 after 60 steps**, needs the model to use more than the previous token: which
        character the story is about, which object was found. Loss per token depends on the tokenizer, so compare
        runs with the same one; bits per byte, $\text{loss} \cdot (\text{tokens}/\text{bytes}) / \ln 2$, does not
        (the CPU tokenizer makes 2.06 bytes per token).

        **Cost.** Training costs about $6N$ FLOPs per token for $N$ weights (2 for the forward matmuls, 4 for the
        backward; Kaplan et al. 2020), plus attention's $12\,L\,T\,d$ per token. The CPU run processes
        $60 \times 16 \times 32 = 30{,}720$ tokens, about 9.5 GFLOP: a fraction of a second of arithmetic. It takes
        seconds because each step launches a few hundred small operators from Python, which is why the same code
        needs a bigger model before a GPU is worth it (section 7).
    """)
    lesson.setup(r"""
        import functools
        import math
        import os
        import tempfile
        import time
        from collections import Counter
        from dataclasses import dataclass

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        from tqdm.auto import tqdm

        from llm_algo.paths import repo_root

        if lesson.device == "cpu":
            torch.set_num_threads(1)  # models this small: thread hand-offs cost more than a second core saves

        # Your components from Part 02 (the reference where yours does not pass its checks yet)
        train_bpe, BPETokenizer = lesson.use("p02.bpe_tokenizer", "train_bpe", "BPETokenizer")
        TinyLlama, generate_greedy = lesson.use("p02.tiny_llama", "TinyLlama", "generate_greedy")
        KVCache = lesson.use("p02.attention_mha_gqa", "KVCache")
        AdamW, weight_decay_param_groups = lesson.use("p02.adamw", "AdamW", "weight_decay_param_groups")
        warmup_cosine_lr, make_lambda_lr = lesson.use("p02.lr_schedules", "warmup_cosine_lr", "make_lambda_lr")
        clip_grad_norm = lesson.use("p02.grad_accum_clip", "clip_grad_norm")
        sample_batch, save_checkpoint, load_checkpoint = lesson.use(
            "p02.data_loading", "sample_batch", "save_checkpoint", "load_checkpoint"
        )
        Temperature, TopK, sample_next_token = lesson.use("p02.sampling", "Temperature", "TopK", "sample_next_token")

        END_OF_TEXT = "<|endoftext|>"
        # Written by 05_Projects/data/make_corpus.py: 648 synthetic stories separated by END_OF_TEXT, 240 KB
        CORPUS = (repo_root() / "05_Projects" / "data" / "tiny_stories.txt").read_text(encoding="utf-8")


        @dataclass(frozen=True)
        class ModelArgs:  # TinyLlama's hyper-parameters (p02.tiny_llama), at the CPU configuration's size
            dim: int = 32
            n_layers: int = 2
            n_heads: int = 4
            n_kv_heads: int = 2
            head_dim: int = 8
            hidden_dim: int = 96
            vocab_size: int = 357  # 256 bytes + 100 merges + END_OF_TEXT
            norm_eps: float = 1e-6
            rope_theta: float = 10000.0
            tie_embeddings: bool = False


        @dataclass(frozen=True)
        class TrainConfig:  # the CPU configuration; section 7 scales it up on a GPU
            steps: int = 60  # the schedule's length: decay_end of the warmup-cosine schedule
            batch_size: int = 16
            context_length: int = 32
            peak_lr: float = 2e-2
            min_lr: float = 2e-3
            warmup_steps: int = 6
            weight_decay: float = 0.1
            betas: tuple[float, float] = (0.9, 0.95)
            max_grad_norm: float = 1.0
            seed: int = 0


        # The CPU configuration's data: 100 merges learned on the first 120 stories; the next 24 are held out
        CPU_MERGES, CPU_TRAIN_STORIES, CPU_VAL_STORIES = 100, 120, 24
        CPU_TEXT = END_OF_TEXT.join(CORPUS.split(END_OF_TEXT)[: CPU_TRAIN_STORIES + CPU_VAL_STORIES])
        VAL_LOSS_TARGET = 1.85  # nats per token after TrainConfig.steps steps (a bigram model: 2.06)
        DISTINCT_2_TARGET = 0.35  # distinct bigram ratio of samples from the trained model
    """)
    lesson.md(r"""
        ## 2. Exercise `prepare_corpus`: a tokenizer that never saw the validation set

        Split the text into documents at `END_OF_TEXT` and hold out the **last** `val_documents` of them. Learn the
        merges on the training documents only: merges learned on the validation text would make its frequent
        strings single tokens, and the validation loss would be measured with a tokenizer fitted to it (a small
        leak, but the same kind as training on the test set). Then encode each split as one stream, every document
        followed by the `END_OF_TEXT` id, so that the model learns where a story ends and a window that crosses a
        boundary sees the marker.

        Store the streams as `torch.uint16`: 2 bytes per token, as nanoGPT's `train.bin` (GPT-2's 50,257 ids fit;
        Llama 3's 128,256 would need `uint32`, so refuse a vocabulary that does not fit). Your `sample_batch` casts
        each window to int64.
    """)
    lesson.exercise(
        "prepare_corpus",
        r'''
        def prepare_corpus(text: str, num_merges: int, val_documents: int):
            """text: documents separated by END_OF_TEXT; the LAST `val_documents` documents are the validation split.

            returns (tokenizer, train_ids, val_ids):
              tokenizer  a BPETokenizer whose num_merges merges were learned on the training documents only
                         (joined by END_OF_TEXT)
              train_ids  (N_train,) torch.uint16: each training document's ids followed by END_OF_TEXT's id
              val_ids    (N_val,) torch.uint16: the same for the validation documents
            Raises ValueError unless 1 <= val_documents < the number of documents, num_merges >= 0 and the
            vocabulary (256 + num_merges + 1 ids) fits in uint16."""
            # TODO: validate; split into documents; hold out the last val_documents
            # TODO: learn the merges on the training documents only; build the tokenizer
            # TODO: encode each split: every document's ids, then END_OF_TEXT's id; uint16 tensors
            ### BEGIN SOLUTION
            documents = text.split(END_OF_TEXT)
            if not 1 <= val_documents < len(documents):
                raise ValueError(f"val_documents must be in [1, {len(documents) - 1}] for {len(documents)} documents, "
                                 f"got {val_documents}")
            if num_merges < 0 or 256 + num_merges + 1 > 2**16:
                raise ValueError(f"num_merges must be in [0, {2**16 - 257}] for uint16 ids, got {num_merges}")
            train_documents, held_out = documents[:-val_documents], documents[-val_documents:]
            tokenizer = BPETokenizer(train_bpe(END_OF_TEXT.join(train_documents), num_merges))
            end_id = tokenizer.special_ids[END_OF_TEXT]

            def stream(split: list[str]) -> torch.Tensor:
                ids = []
                for document in split:
                    ids.extend(tokenizer.encode(document))
                    ids.append(end_id)  # the model learns where a story ends
                return torch.tensor(ids, dtype=torch.uint16)  # (N,): 2 bytes per token

            return tokenizer, stream(train_documents), stream(held_out)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The CPU configuration's data, and what the tokenizer made of the first sentence (each token between bars):
    """)
    lesson.code(r"""
        try:
            start = time.perf_counter()
            tokenizer, train_ids, val_ids = prepare_corpus(CPU_TEXT, CPU_MERGES, CPU_VAL_STORIES)
            print(f"prepare_corpus: {time.perf_counter() - start:.1f} s; {len(train_ids):,} training tokens, "
                  f"{len(val_ids):,} validation tokens, {len(tokenizer.vocab)} ids")
            train_bytes = len(END_OF_TEXT.join(CPU_TEXT.split(END_OF_TEXT)[:CPU_TRAIN_STORIES]).encode("utf-8"))
            print(f"compression: {train_bytes / len(train_ids):.2f} bytes per token")
            first = tokenizer.encode(CORPUS.split(". ")[0] + ".")
            print("|" + "|".join(tokenizer.decode([i]) for i in first) + "|")
        except NotImplementedError:
            print("prepare_corpus is not attempted yet")
    """)
    lesson.md(r"""
        ## 3. Exercise `train_step`: the order of six calls

        One step of training is six calls, and each has a place:

        1. `logits = model(inputs)`, `(B, T, V)`; the loss is `F.cross_entropy` over the flattened `(B·T, V)` logits
           in float32 and the `(B·T,)` targets: the **mean** over positions, so the gradient's scale does not depend
           on the batch size;
        2. `optimizer.zero_grad()`: PyTorch **adds** into `.grad`, so without it every step uses the sum of all past
           gradients;
        3. `loss.backward()`;
        4. `clip_grad_norm(model.parameters(), max_norm)` — **yours**, after the backward and **before** the step
           (clipping after the step clips nothing that matters); keep the norm it returns, measured before clipping:
           it is the first thing to plot when a run diverges;
        5. `optimizer.step()`, with the learning rate the scheduler set for this step;
        6. `scheduler.step()`, which sets the learning rate of the **next** step. Calling it first shifts the whole
           schedule by one (PyTorch warns about exactly this order); with a warmup from 0, the first update then
           uses the second step's rate.

        Return plain Python floats: a tensor that still holds its graph kept in a list of losses keeps every step's
        activations alive.
    """)
    lesson.exercise(
        "train_step",
        r'''
        def train_step(model, optimizer, scheduler, inputs: torch.Tensor, targets: torch.Tensor,
                       max_grad_norm: float) -> tuple[float, float]:
            """One optimizer step on one batch: inputs, targets (B, T) int64 (targets = inputs shifted by one).

            returns (loss, grad_norm) as Python floats: the batch's mean cross-entropy in nats per token, and the
            global L2 norm of the gradients BEFORE clipping. Raises ValueError when inputs and targets are not two
            tensors of the same (B, T) shape, or max_grad_norm <= 0."""
            # TODO: validate
            # TODO: forward; mean cross-entropy over all B*T positions, in float32
            # TODO: clear the old gradients; backward; clip with YOUR clip_grad_norm; optimizer step; schedule step
            ### BEGIN SOLUTION
            if inputs.dim() != 2 or inputs.shape != targets.shape:
                raise ValueError(f"inputs and targets must be (B, T) of one shape, got {tuple(inputs.shape)} and "
                                 f"{tuple(targets.shape)}")
            if not max_grad_norm > 0:
                raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
            logits = model(inputs)                                                    # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())  # mean over B*T positions
            optimizer.zero_grad(set_to_none=True)                                     # .grad accumulates otherwise
            loss.backward()
            grad_norm = clip_grad_norm(model.parameters(), max_grad_norm)             # the norm before clipping
            optimizer.step()                                                          # at this step's lr
            scheduler.step()                                                          # the next step's lr
            return loss.item(), float(grad_norm)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `evaluate`: a held-out loss that means the same thing every time

        Training losses are measured on random windows, each on weights that have since moved. To compare one moment
        of a run with another (and one run with another) measure the loss on **fixed** held-out windows: the
        $k = \lfloor (N - 1) / T \rfloor$ non-overlapping windows of the validation stream starting at
        $0, T, 2T, \dots$, each with its targets shifted by one, so that almost every validation token is predicted
        exactly once, with the context of at most $T$ tokens before it inside its window.

        Run them `batch_size` windows at a time under `torch.no_grad()` (no activations kept for a backward that
        will never come) and in `model.eval()` mode (no dropout in this model, but the habit matters: dropout or
        batch statistics would make the number random), then put the model back in the mode it was in. Every
        predicted token weighs the same: sum the per-token losses and divide by $kT$. Averaging the per-batch means
        gives the last, smaller batch the weight of a full one.
    """)
    lesson.exercise(
        "evaluate",
        r'''
        @torch.no_grad()
        def evaluate(model, tokens: torch.Tensor, context_length: int, batch_size: int) -> float:
            """Mean cross-entropy (nats per token) of `model` on the held-out stream `tokens` (N,) of any integer dtype,
            over the k = (N - 1) // context_length windows tokens[iT : iT + T] with targets tokens[iT + 1 : iT + T + 1],
            batch_size windows per forward pass, in eval mode; the model is left in the mode it was in.
            Raises ValueError when tokens is not 1-D with N >= context_length + 1, or context_length or batch_size < 1."""
            # TODO: validate; the k windows and their shifted targets as (k, T) int64 on the model's device
            # TODO: eval mode; sum the per-token losses batch by batch; restore the mode; divide by k * T
            ### BEGIN SOLUTION
            if context_length < 1 or batch_size < 1:
                raise ValueError(f"need context_length >= 1 and batch_size >= 1, got {context_length}, {batch_size}")
            if tokens.dim() != 1 or tokens.numel() < context_length + 1:
                raise ValueError(f"need a 1-D stream of at least {context_length + 1} tokens, got {tuple(tokens.shape)}")
            T = context_length
            k = (tokens.numel() - 1) // T
            device = next(model.parameters()).device
            inputs = tokens[: k * T].to(device=device, dtype=torch.int64).view(k, T)        # (k, T)
            targets = tokens[1 : k * T + 1].to(device=device, dtype=torch.int64).view(k, T)  # (k, T), shifted by one
            was_training = model.training
            model.eval()
            total = 0.0
            for start in range(0, k, batch_size):
                logits = model(inputs[start : start + batch_size])                           # (b, T, V), b <= batch_size
                total += F.cross_entropy(logits.flatten(0, 1).float(), targets[start : start + batch_size].flatten(),
                                         reduction="sum").item()
            model.train(was_training)
            return total / (k * T)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        What the numbers of section 1 look like before any training: your untrained model, and the unigram and
        bigram models fitted on the training stream, all scored on the same validation stream (the count models
        score every validation token; `evaluate` scores all but the remainder of the last window).
    """)
    lesson.code(r"""
        def count_model_losses(train_ids, val_ids, vocab_size):  # unigram (add-one) and bigram (add-0.1) baselines
            train, val = train_ids.tolist(), val_ids.tolist()
            unigram = Counter(train)
            uni = -sum(math.log((unigram[t] + 1) / (len(train) + vocab_size)) for t in val) / len(val)
            bigram = Counter(zip(train, train[1:]))
            bi = -sum(math.log((bigram[(a, b)] + 0.1) / (unigram[a] + 0.1 * vocab_size)) for a, b in zip(val, val[1:]))
            return uni, bi / (len(val) - 1)


        try:
            torch.manual_seed(0)
            untrained = TinyLlama(ModelArgs())
            unigram_loss, bigram_loss = count_model_losses(train_ids, val_ids, ModelArgs().vocab_size)
            print(f"uniform ln V        {math.log(ModelArgs().vocab_size):.3f} nats/token")
            print(f"untrained TinyLlama {evaluate(untrained, val_ids, 32, 64):.3f}")
            print(f"unigram             {unigram_loss:.3f}")
            print(f"bigram              {bigram_loss:.3f}")
        except (NotImplementedError, NameError):
            print("prepare_corpus and evaluate are not attempted yet")
    """)
    lesson.md(r"""
        ## 5. Exercise `TrainingRun`: one object that trains, checkpoints and resumes

        A run is the model, the optimizer, the schedule, the sampler's generator and the step counter: everything
        that changes while training and must be saved to continue. Build them in `__init__` from the two configs:

        - `torch.manual_seed(config.seed)` and then `TinyLlama(model_args)`: the same seed, the same initial weights;
        - your `AdamW` over your `weight_decay_param_groups(model, config.weight_decay)` (no decay on the norm gains),
          `lr=config.peak_lr`, `betas=config.betas`;
        - your `make_lambda_lr` around your `warmup_cosine_lr` with `warmup_steps=config.warmup_steps` and
          `decay_end=config.steps`: the schedule ends where the run ends;
        - a `torch.Generator` seeded with `config.seed + 1` that only the sampler uses, and `step = 0`;
        - the model and every batch on `device`.

        `train(tokens, until_step)` runs steps `self.step .. until_step - 1` (so a run can be trained in pieces,
        and an evaluation can sit between two pieces), each on `sample_batch(tokens, B, T, device, generator)` and
        your `train_step`, with a `tqdm` bar when `progress=True`, and returns the losses of those steps. With
        `checkpoint_every = c > 0` it writes your `save_checkpoint` after every step that makes `self.step` a
        multiple of $c$ (the file records the number of steps done). `TrainingRun.resume(path, ...)` builds a fresh
        run and loads the checkpoint into it with your `load_checkpoint`, which returns the step to continue from.

        "Exact" is a strong word and the check takes it literally: train 8 steps straight; train 4 (or 3, with the
        last checkpoint at step 2), resume in objects built after the global random state was disturbed, and finish;
        the losses and the final weights must be equal, bit for bit.
    """)
    lesson.exercise(
        "TrainingRun",
        r'''
        class TrainingRun:
            """Model, optimizer, schedule, sampler generator and step of one training run."""

            def __init__(self, model_args: ModelArgs, config: TrainConfig, device="cpu"):
                self.model_args, self.config, self.device = model_args, config, torch.device(device)
                # TODO: seed the global RNG with config.seed, then build your TinyLlama on the device
                # TODO: your AdamW over your weight-decay param groups (lr = peak_lr, betas); your make_lambda_lr
                #       around your warmup_cosine_lr (warmup_steps, decay_end = config.steps, min_lr)
                # TODO: the sampler's own generator seeded with config.seed + 1; step = 0
                ### BEGIN SOLUTION
                torch.manual_seed(config.seed)
                self.model = TinyLlama(model_args).to(self.device)
                self.optimizer = AdamW(weight_decay_param_groups(self.model, config.weight_decay), lr=config.peak_lr,
                                       betas=config.betas)
                schedule = functools.partial(warmup_cosine_lr, peak_lr=config.peak_lr, min_lr=config.min_lr,
                                             warmup_steps=config.warmup_steps, decay_end=config.steps)
                self.scheduler = make_lambda_lr(self.optimizer, schedule, config.peak_lr)
                self.generator = torch.Generator().manual_seed(config.seed + 1)  # the data order, and nothing else
                self.step = 0
                ### END SOLUTION

            def train(self, tokens: torch.Tensor, until_step: int, *, checkpoint_path=None, checkpoint_every: int = 0,
                      progress: bool = False) -> list[float]:
                """Steps self.step .. until_step - 1 on random windows of `tokens` (N,); returns their losses.
                With checkpoint_every = c > 0, save a checkpoint to checkpoint_path whenever self.step becomes a
                multiple of c. Raises ValueError unless self.step <= until_step <= config.steps, checkpoint_every >= 0,
                and a checkpoint_path is given when checkpoint_every > 0."""
                # TODO: validate
                # TODO: each step: a batch from sample_batch with the run's generator and device; your train_step;
                #       count the step; save a checkpoint when due; a tqdm bar over the steps when progress is True
                ### BEGIN SOLUTION
                if not self.step <= until_step <= self.config.steps:
                    raise ValueError(f"until_step must be in [{self.step}, {self.config.steps}], got {until_step}")
                if checkpoint_every < 0 or (checkpoint_every > 0 and checkpoint_path is None):
                    raise ValueError(f"checkpoint_every must be >= 0 (and > 0 needs a checkpoint_path), got "
                                     f"{checkpoint_every}, {checkpoint_path!r}")
                config, losses = self.config, []
                for _ in tqdm(range(self.step, until_step), disable=not progress, desc="training", leave=False):
                    inputs, targets = sample_batch(tokens, config.batch_size, config.context_length, self.device,
                                                   self.generator)
                    loss, _ = train_step(self.model, self.optimizer, self.scheduler, inputs, targets, config.max_grad_norm)
                    losses.append(loss)
                    self.step += 1                                          # the number of steps done
                    if checkpoint_every and self.step % checkpoint_every == 0:
                        save_checkpoint(checkpoint_path, model=self.model, optimizer=self.optimizer,
                                        scheduler=self.scheduler, generator=self.generator, step=self.step)
                return losses
                ### END SOLUTION

            @classmethod
            def resume(cls, path, model_args: ModelArgs, config: TrainConfig, device="cpu") -> "TrainingRun":
                """A fresh run with the state of the checkpoint at `path` (its step included)."""
                # TODO: build a run, load the checkpoint into its objects, continue from the saved step
                ### BEGIN SOLUTION
                run = cls(model_args, config, device)
                run.step = load_checkpoint(path, model=run.model, optimizer=run.optimizer, scheduler=run.scheduler,
                                           generator=run.generator)
                return run
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The CPU run: loss curve, validation loss, and an interruption

        The cell trains the CPU configuration in four pieces of 15 steps with a progress bar, measures the validation
        loss between pieces, and writes a checkpoint every 15 steps. Then it resumes from the step-45 checkpoint in a
        fresh run and trains to the end again: the last 15 losses must be identical. The time it prints is
        this machine's: on the 2-core machine this project was written on, shared with other jobs, the 60 steps took
        4.4 s on one thread (about 7,000 tokens/s, evaluations included) and twice that when the machine was busier,
        for 9.5 GFLOP of arithmetic: almost all of it is Python and operator launch overhead.
    """)
    lesson.code(r"""
        try:
            config, model_args = TrainConfig(), ModelArgs()
            folder = tempfile.mkdtemp()
            checkpoint = os.path.join(folder, "run.pt")
            run = TrainingRun(model_args, config)
            losses, val_points = [], [(0, evaluate(run.model, val_ids, config.context_length, 64))]
            start = time.perf_counter()
            for until in (15, 30, 45, 60):
                losses += run.train(train_ids, until, checkpoint_path=checkpoint, checkpoint_every=15, progress=True)
                val_points.append((until, evaluate(run.model, val_ids, config.context_length, 64)))
                if until == 45:
                    os.replace(checkpoint, os.path.join(folder, "step45.pt"))  # keep the step-45 checkpoint aside
            seconds = time.perf_counter() - start
            tokens_seen = config.steps * config.batch_size * config.context_length
            print(f"{config.steps} steps, {tokens_seen:,} tokens in {seconds:.1f} s ({tokens_seen / seconds:,.0f} tokens/s "
                  f"on {torch.get_num_threads()} CPU thread(s), evaluations included)")
            print(f"validation loss after {config.steps} steps: {val_points[-1][1]:.3f} nats/token "
                  f"(target < {VAL_LOSS_TARGET}; bigram {bigram_loss:.3f})")
            resumed = TrainingRun.resume(os.path.join(folder, "step45.pt"), model_args, config)
            last_quarter = resumed.train(train_ids, config.steps)
            print("resumed at step 45: the last 15 losses are identical:", last_quarter == losses[45:])
            trained_model = run.model

            fig, ax = plt.subplots(figsize=(7, 3.4))
            ax.plot(range(1, len(losses) + 1), losses, lw=1, label="training loss (one batch)")
            ax.plot(*zip(*val_points), "o-", label="validation loss (fixed windows)")
            ax.axhline(bigram_loss, color="gray", ls=":", label=f"bigram model ({bigram_loss:.2f})")
            ax.axhline(unigram_loss, color="gray", ls="--", lw=0.8, label=f"unigram model ({unigram_loss:.2f})")
            ax.set_xlabel("step"); ax.set_ylabel("cross-entropy (nats/token)"); ax.set_ylim(1, 6.5)
            ax.set_title("tiny Llama, CPU configuration"); ax.legend(fontsize=8); fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish prepare_corpus, train_step, evaluate and TrainingRun to train your model")
    """)
    lesson.md(r"""
        ## 6. Exercises `distinct_ngram_ratio` and `generate`: is the model writing or looping?

        A small model decoded greedily falls into loops ("Tom and Tom and Tom and ..."): the most likely next token
        after a loop is its continuation. The **distinct-$n$ ratio** (Li et al., 2016) measures it: over all the
        generated sequences, the number of distinct $n$-grams (tuples of $n$ consecutive ids inside one sequence)
        divided by the number of $n$-grams. 1 means no $n$-gram repeats; a loop of period $p$ has at most $p$
        distinct ones however long it runs. It says nothing about quality (random tokens score 1), so the check pairs
        it with the model's own loss on what it wrote.

        One trap: tuples of 0-d tensors hash by identity, not value, so `set(tuple(t[i:i+n]) ...)` over a tensor
        counts every $n$-gram as new. Convert to Python ints first.

        `generate` is your `generate_greedy` with a sampler in place of the argmax: prefill the prompts through one
        `KVCache` per layer, then feed one token per step. `temperature = 0` means greedy; otherwise use your
        processors (`Temperature`, then `TopK` when `top_k` is given) and your `sample_next_token` with the
        caller's `generator`, so that a seed reproduces a sample.
    """)
    lesson.exercise(
        "distinct_ngram_ratio",
        r'''
        def distinct_ngram_ratio(sequences, n: int) -> float:
            """sequences: an iterable of token-id sequences (lists of ints or 1-D integer tensors).
            returns (number of distinct n-grams) / (number of n-grams), n-grams taken inside each sequence, pooled
            over all sequences. Raises ValueError for n < 1 or when no sequence has n tokens."""
            # TODO: validate n; collect every n-gram of every sequence as a tuple of Python ints; the ratio
            ### BEGIN SOLUTION
            if n < 1:
                raise ValueError(f"n must be >= 1, got {n}")
            ngrams = []
            for sequence in sequences:
                ids = [int(token) for token in sequence]  # 0-d tensors hash by identity: count values, not objects
                ngrams.extend(tuple(ids[i : i + n]) for i in range(len(ids) - n + 1))
            if not ngrams:
                raise ValueError(f"no sequence has {n} tokens")
            return len(set(ngrams)) / len(ngrams)
            ### END SOLUTION
    ''',
    )
    lesson.exercise(
        "generate",
        r'''
        @torch.no_grad()
        def generate(model, input_ids: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                     top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
            """KV-cached decoding. input_ids (B, T) int64 prompts of one length (no padding).
            temperature 0: greedy; > 0: sample from softmax(logits / temperature), restricted to the top_k largest
            logits when top_k is given, drawing with `generator`.
            returns (B, T + max_new_tokens) int64: the prompts followed by the new tokens.
            Raises ValueError when input_ids is not 2-D, temperature < 0 or max_new_tokens < 0."""
            # TODO: validate; the processors (none for greedy); one fresh KVCache per layer
            # TODO: prefill the prompts; then each step: pick the next tokens from the last logits with your
            #       sample_next_token, append them, and run only them through the model with the caches
            ### BEGIN SOLUTION
            if input_ids.dim() != 2 or temperature < 0 or max_new_tokens < 0:
                raise ValueError(f"need input_ids (B, T), temperature >= 0 and max_new_tokens >= 0, got "
                                 f"{tuple(input_ids.shape)}, {temperature}, {max_new_tokens}")
            processors = [] if temperature == 0 else [Temperature(temperature)] + ([TopK(top_k)] if top_k else [])
            caches = [KVCache() for _ in model.layers]
            tokens = input_ids
            logits = model(input_ids, caches=caches)[:, -1]                                 # (B, V): prefill
            for step in range(max_new_tokens):
                next_token = sample_next_token(tokens, logits, processors, generator=generator,
                                               do_sample=temperature > 0)                   # (B,)
                tokens = torch.cat((tokens, next_token[:, None]), dim=1)                    # (B, T + step + 1)
                if step + 1 < max_new_tokens:
                    logits = model(next_token[:, None], caches=caches)[:, -1]               # (B, V): one new token
            return tokens
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the trained model writes, and the diversity–likelihood trade-off

        Eight continuations of "Once upon a time," from the model trained in section 5, at five temperatures
        (0 is greedy). For each, the distinct-2 ratio of the generated tokens (diversity) and the model's own mean
        loss on them (how surprised the model is by what it wrote: low is "safe", high is "noise"). Greedy writes
        the single most likely story eight times, and loops inside it; high temperatures write things the model
        itself finds unlikely.
    """)
    lesson.code(r"""
        try:
            prompt = torch.tensor([tokenizer.encode("Once upon a time,")] * 8)  # (8, T0)
            temperatures, diversity, surprise = [0.0, 0.5, 0.8, 1.0, 1.5], [], []
            for temperature in temperatures:
                generator = torch.Generator().manual_seed(0)
                out = generate(trained_model, prompt, 48, temperature=temperature, generator=generator)
                new = out[:, prompt.shape[1]:]
                diversity.append(distinct_ngram_ratio(new, 2))
                with torch.no_grad():
                    logits = trained_model(out)[:, prompt.shape[1] - 1 : -1]  # (8, 48, V): the logits that chose them
                    surprise.append(F.cross_entropy(logits.flatten(0, 1).float(), new.flatten()).item())
                if temperature in (0.0, 0.5):
                    print(f"--- temperature {temperature}:")
                    print(tokenizer.decode(out[0].tolist()))
            fig, ax = plt.subplots(figsize=(5, 3.4))
            ax.plot(surprise, diversity, "o-")
            for t, x, y in zip(temperatures, surprise, diversity):
                ax.annotate(f"T = {t}", (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8)
            ax.axhline(DISTINCT_2_TARGET, color="gray", ls=":", label=f"target {DISTINCT_2_TARGET}")
            ax.set_xlabel("the model's loss on its own samples (nats/token)"); ax.set_ylabel("distinct-2 ratio")
            ax.set_title("8 samples of 48 tokens"); ax.legend(fontsize=8); fig.tight_layout()
            plt.show()
        except (NotImplementedError, NameError):
            print("train the model above and finish distinct_ngram_ratio and generate to sample from it")
    """)
    lesson.md(r"""
        ## 7. On a GPU: the same code, bigger, and how well it uses the chip

        With CUDA, the cell below trains a wider and deeper model (the same classes and functions) on the whole corpus
        with 400 merges, and reports throughput in tokens per second and **MFU** (model FLOPs utilisation, PaLM,
        Chowdhery et al. 2022): the FLOPs the model needs per token, $6N + 12\,L\,T\,d$ (weights, then attention),
        times tokens per second, divided by the chip's dense bf16 peak. The run is in float32 (TF32 matmuls
        allowed), so the ratio is honest but pessimistic. nanoGPT's `estimate_mfu` computes the same estimate
        (against the A100's 312 TFLOP/s bf16 peak) and logs it at every step. A model this small cannot fill an H200: every matmul is tiny and the step is
        launch-bound, which is exactly what the number shows. On a CPU the cell prints nothing.
    """)
    lesson.code(r"""
        PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "T4": 65e12}  # dense; T4: fp16

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                gpu_tokenizer, gpu_train, gpu_val = prepare_corpus(CORPUS, 400, 64)
                gpu_args = ModelArgs(dim=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32, hidden_dim=704,
                                     vocab_size=256 + 400 + 1)
                gpu_config = TrainConfig(steps=600, batch_size=64, context_length=256, peak_lr=3e-3, min_lr=3e-4,
                                         warmup_steps=60)
                gpu_run = TrainingRun(gpu_args, gpu_config, device="cuda")
                gpu_run.train(gpu_train, 20)  # warm-up steps: allocator, kernels
                torch.cuda.synchronize()
                start = time.perf_counter()
                gpu_losses = gpu_run.train(gpu_train, gpu_config.steps, progress=True)
                torch.cuda.synchronize()
                seconds = time.perf_counter() - start
                tokens = (gpu_config.steps - 20) * gpu_config.batch_size * gpu_config.context_length
                n_params = sum(p.numel() for p in gpu_run.model.parameters())
                flops_per_token = 6 * n_params + 12 * gpu_args.n_layers * gpu_config.context_length * gpu_args.dim
                name = torch.cuda.get_device_name()
                peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
                print(f"{name}: {n_params / 1e6:.2f}M parameters, {tokens / seconds:,.0f} tokens/s, "
                      f"{flops_per_token * tokens / seconds / 1e12:.2f} TFLOP/s"
                      + (f", MFU {flops_per_token * tokens / seconds / peak:.1%} of the bf16 peak" if peak else ""))
                print(f"validation loss {evaluate(gpu_run.model, gpu_val, 256, 32):.3f} nats/token after "
                      f"{gpu_config.steps} steps")
                sample = generate(gpu_run.model, torch.tensor([gpu_tokenizer.encode("Once upon a time,")], device="cuda"),
                                  80, temperature=0.8, generator=torch.Generator("cuda").manual_seed(0))
                print(gpu_tokenizer.decode(sample[0].tolist()))
            except NotImplementedError:
                print("finish the exercises to train on the GPU")
        else:
            print("no GPU here: the scaled-up run and its tokens/s and MFU are skipped")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`prepare_corpus`.** `text.split(END_OF_TEXT)` gives the documents; the held-out ones are the last, so the
        split never depends on a random seed. The merges are learned from the training documents joined by the
        special token (your `train_bpe` cuts there, so no merge spans two stories). Each split is encoded document by
        document with the end id appended, and stored as `uint16`. Encoding one joined string, whose special tokens
        your `BPETokenizer.encode` maps to their id, gives the same stream; the checks do it that way.

        **`train_step`.** The six calls of section 3, in that order. `set_to_none=True` frees the gradient memory
        between steps instead of writing zeros (PyTorch's default since 2.0). The cross-entropy is taken in float32:
        under bf16 autocast the logits are bf16, and a log-softmax over 50k entries in bf16 loses the small
        probabilities. `loss.item()` synchronises with the GPU once per step; production loops log every few steps
        for that reason.

        **`evaluate`.** One `(k, T)` view of the stream for the inputs and one for the targets, a sum of
        `reduction="sum"` losses, one division. `model.train(was_training)` restores whatever mode the caller had.

        **`TrainingRun`.** Seeding immediately before building the model makes the initial weights a function of
        `config.seed` alone. The generator belongs to the run and is created once: re-creating it in `train` would
        replay the same batches after every resume. The step counter counts steps *done*, and the checkpoint is
        written after the counter moves, so a run resumed from it starts with the next step. `resume` is a
        `classmethod`: the objects must be built exactly as for a new run (same parameter groups, same scheduler
        lambda) before `load_state_dict` can fill them.

        **`distinct_ngram_ratio` and `generate`.** `int(token)` makes the $n$-grams hashable by value. `generate`
        differs from `generate_greedy` only in the choice of the next token; `top_k` and `Temperature` commute (a
        positive scale keeps the order of the logits), the order here is transformers'.

        **The usual mistakes, and why they are wrong**:
        - *The tokenizer trained on all the text*, validation included; *no end-of-text id after each document*;
          *the validation split taken from the front*; *int64 streams* (4 times the memory of `uint16`).
        - *No `zero_grad`* (gradients summed over steps), *the scheduler stepped before the optimizer* (the schedule
          shifted by one), *clipping after the step*, *the norm returned after clipping* (always at most the
          threshold: the divergence you wanted to see is hidden).
        - *The mean of per-batch means*, *targets not shifted* (the model is asked to predict the token it is
          given), *the model left in eval mode*.
        - *A generator created in `train`*, *the step not restored on resume*, *the checkpoint written before the
          step counter moves* (the resumed run repeats a step), *weight decay on every parameter*, *a schedule that
          ends before the run*, *no seed*.
        - *n-grams of tensors* (every one distinct), *n-grams across sequence boundaries*, *the last n-gram of each
          sequence dropped*; *no temperature*, *decoding steps without the caches* (the model sees one token),
          *the generator not passed* (a seed no longer reproduces a sample), *the prefill's first column*.

        **How real runs differ.**
        - *Scale.* Llama 3 8B was trained on about 15T tokens with a 128k-token tokenizer (Meta, 2024); this run sees
          31k tokens. The recipe is the same: AdamW with $\beta_2 = 0.95$ and weight decay 0.1, linear warmup and
          cosine decay to 10% of the peak, gradient clipping at 1.0.
        - *Precision and speed.* bf16 autocast with float32 master weights (`p02.mixed_precision`), fused or
          `torch.compile`d kernels, FlashAttention; nanoGPT's `train.py` adds gradient accumulation to reach a batch
          of 0.5M tokens, and `torch.compile` for about a 2× speed-up.
        - *Data.* Pre-tokenized shards read through `np.memmap` (nanoGPT) or streaming datasets with their own
          checkpointable state (`torchdata`'s `StatefulDataLoader`); documents packed with a block-diagonal mask
          (`p02.data_loading`).
        - *Checkpoints.* Sharded and asynchronous (`torch.distributed.checkpoint`), every few hundred steps, because
          at thousands of GPUs an interruption every few hours is the norm (Llama 3 405B: 466 in 54 days).
        - *Evaluation.* Fixed validation sets and benchmark suites run every few thousand steps; loss in bits per
          byte when tokenizers differ.
    """)
    lesson.mistakes()
    return lesson
