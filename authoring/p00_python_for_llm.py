"""Source of 00_Prerequisites/01_Python_For_LLM.ipynb (build with `python -m llm_algo build p00.python_for_llm`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.python_for_llm",
        path="00_Prerequisites/01_Python_For_LLM.ipynb",
        title_en="Python for LLM code: batches, configs, token streams",
        title_zh="LLM 代码中的 Python：批处理、配置与 token 流",
        difficulty="easy",
        device="cpu",
        minutes=35,
        prerequisites=[],
    )
    lesson.title(
        intro=r"""
        Before a model sees a tensor, plain Python decides three things that silently change what it learns. A
        **batch** of sentences of different lengths must become one rectangle of token ids plus a mask that says
        which entries are real; decoder-only models pad on the *left* for generation, and a mask built from
        `ids != pad_id` breaks the day a tokenizer reuses its end-of-text id as padding (GPT-2 and Llama-3 ship no pad
        token, so `pad_token = eos_token` is the usual recipe). A **config** object carries the shape of the model; a
        typo such as `num_head=8` that is silently ignored trains a different model for days. And pre-training data
        does not fit in memory (Llama 3 was trained on about 15T tokens, Meta's
        [model card](https://github.com/meta-llama/llama3/blob/main/MODEL_CARD.md)), so documents are **streamed**
        through generators and cut into fixed-length blocks.

        **You will implement** `pad_batch` and `position_ids` (left/right padding, truncation, a mask from the
        lengths), a frozen `ModelConfig` dataclass that validates itself, loads from a dict and counts the
        parameters of the Llama it describes, and a generator `token_blocks` that turns a stream of documents into
        `(input, target)` training blocks without reading more than it needs. **Graded against**
        `torch.nn.utils.rnn.pad_sequence`, a loop spec of Hugging Face's position ids, `LlamaForCausalLM` built on the
        meta device (parameter count), and a non-streaming slicing of the concatenated corpus.

        **本节要点**
        - 批处理 (batching)：把不等长序列补齐 (padding) 成 `(B, T)` 的 `input_ids`，同时给出 `attention_mask`（真实 token 为 1，填充为 0）。
        - 掩码要由**长度**得到，不能用 `ids != pad_id`：很多模型把 eos 当作 pad，真实的 eos 也会被误判为填充。
        - 仅解码器模型生成时用**左填充**，因为新 token 接在每行末尾；位置编号 `position_ids` 只对真实 token 计数（`cumsum(mask) - 1`）。
        - 配置用 `@dataclass(frozen=True)`，在 `__post_init__` 中校验（`hidden % heads == 0`、`heads % kv_heads == 0`），`from_dict` 拒绝未知键，防止拼写错误被静默忽略。
        - 生成器 (generator) 惰性地逐块产出数据：函数体在第一次 `next()` 时才执行，只读取所需的文档。
        - 训练块：每个块取 `block_size + 1` 个 token，输入是前 `block_size` 个，目标是后 `block_size` 个；相邻块重叠一个 token，每个 token 恰好作为一次目标。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. A batch is a rectangle plus a mask

        A tokenizer turns each text into a list of ids of its own length. A GPU kernel wants one `(B, T)` tensor, so
        every row is padded to the longest one, `T = max_b len_b`, and an `attention_mask (B, T)` of 1s (real) and 0s
        (padding) travels with it: attention must not look at padding, and the loss must not learn to predict it.

        ```
        right padding (training, encoders)      left padding (decoder-only generation)
        ids    5  6  7          mask 1 1 1      ids    5  6  7        mask 1 1 1
               8  P  P               1 0 0             P  P  8             0 0 1
               9 10  P               1 1 0             P  9 10             0 1 1
        ```

        Why left for generation? `generate` appends the next token at column `T` of every row. With right padding,
        row 2's next token would follow two pad tokens; with left padding every row ends with a real token.
        Hugging Face's tokenizers expose exactly this choice (`tokenizer.padding_side = "left"`), and warn when a
        decoder-only model is asked to generate from right-padded input.

        **Position ids.** RoPE rotates each token by its position. In a left-padded row the first *real* token must
        get position 0, not 2, or the row is encoded as if it were shifted. Hugging Face's `generate` computes
        `position_ids = attention_mask.cumsum(-1) - 1` and writes 1 at the padded places (any value works there: the
        mask hides them). Cost of padding: every pad token is computed like a real one, so a batch whose lengths vary
        a lot spends most of its FLOPs on padding (the figure after the exercise measures it).

        **Truncation.** With `max_length`, longer sequences keep their *first* `max_length` tokens (Hugging Face's
        default `truncation_side="right"`).
    """)
    lesson.setup(r"""
        import dataclasses
        import inspect
        import itertools
        import json
        import random
        from collections.abc import Iterable, Iterator

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 2. Exercise `pad_batch`

        `pad_batch(sequences, pad_id, padding_side="right", max_length=None)` takes a list of lists of ints and returns
        `(input_ids, attention_mask)`, both `(B, T)` int64, `T` the longest length after truncation (0 when every
        sequence is empty). `position_ids(attention_mask)` returns `(B, T)` int64: 0, 1, 2, ... over the real tokens
        of each row, 1 at the padded places. Refuse an empty batch, a `padding_side` other than `"left"`/`"right"` and
        a `max_length < 1` with `ValueError`.

        The likely mistake: `attention_mask = (input_ids != pad_id)`. It is right until `pad_id` is also a real token
        (eos used as pad): then every real eos is masked out. Build the mask from the lengths.
        `torch.nn.utils.rnn.pad_sequence` is the checks' reference and is forbidden here.
    """)
    lesson.exercise(
        "pad_batch",
        r'''
        def pad_batch(
            sequences: list[list[int]], pad_id: int, padding_side: str = "right", max_length: int | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """sequences: B lists of token ids -> (input_ids (B, T) int64, attention_mask (B, T) int64)."""
            # TODO: refuse an empty batch, an unknown padding_side, max_length < 1 (ValueError)
            # TODO: truncate each sequence to its first max_length tokens (when given)
            # TODO: fill a (B, T) tensor with pad_id and a (B, T) zero mask; write each row on the chosen side
            ### BEGIN SOLUTION
            if len(sequences) == 0:
                raise ValueError("pad_batch needs at least one sequence")
            if padding_side not in ("left", "right"):
                raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
            if max_length is not None and max_length < 1:
                raise ValueError(f"max_length must be >= 1, got {max_length}")
            rows = [list(seq)[:max_length] if max_length is not None else list(seq) for seq in sequences]
            width = max(len(row) for row in rows)                         # T
            input_ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)  # (B, T)
            attention_mask = torch.zeros((len(rows), width), dtype=torch.int64)  # (B, T)
            for b, row in enumerate(rows):
                if not row:
                    continue
                start = width - len(row) if padding_side == "left" else 0
                input_ids[b, start : start + len(row)] = torch.tensor(row, dtype=torch.int64)
                attention_mask[b, start : start + len(row)] = 1
            return input_ids, attention_mask
            ### END SOLUTION


        def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
            """attention_mask (B, T) of 0/1 -> (B, T) int64: 0, 1, 2, ... over real tokens, 1 where padded."""
            # TODO: count the real tokens seen so far in each row; put 1 at the padded places
            ### BEGIN SOLUTION
            mask = attention_mask.to(torch.int64)                           # (B, T)
            positions = mask.cumsum(dim=-1) - 1                             # (B, T): 0 at the first real token
            return positions.masked_fill(mask == 0, 1)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What padding costs

        Lengths of real chat or web documents are heavy-tailed. Below, 4096 synthetic lengths drawn from a
        log-normal (median 256 tokens) are batched by 32 in random order and in length-sorted order ("bucketing",
        what Hugging Face's `group_by_length=True` and most inference servers do). The figure uses your `pad_batch`
        when it is written.
    """)
    lesson.code(r"""
        rng = random.Random(0)
        lengths = [max(1, min(4096, int(rng.lognormvariate(5.55, 0.9)))) for _ in range(4096)]

        def pad_fraction(order, batch_size=32):
            padded = real = 0
            for i in range(0, len(order), batch_size):
                batch = [[1] * lengths[j] for j in order[i : i + batch_size]]
                try:
                    ids, mask = pad_batch(batch, pad_id=0)
                except NotImplementedError:
                    width = max(len(s) for s in batch)
                    ids, mask = torch.zeros(len(batch), width), torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
                padded += ids.numel()
                real += int(mask.sum())
            return 1 - real / padded

        random_order = list(range(len(lengths)))
        rng.shuffle(random_order)
        sorted_order = sorted(range(len(lengths)), key=lengths.__getitem__)
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.2))
        ax.hist(lengths, bins=60, color="tab:blue")
        ax.set_xlabel("tokens per document"); ax.set_ylabel("documents"); ax.set_title("synthetic lengths (log-normal)")
        fractions = [pad_fraction(random_order), pad_fraction(sorted_order)]
        bx.bar(["random batches", "length-sorted batches"], [100 * f for f in fractions], color=["tab:red", "tab:green"])
        bx.set_ylabel("% of computed tokens that are padding"); bx.set_title("batch of 32")
        for i, f in enumerate(fractions):
            bx.text(i, 100 * f + 1, f"{100 * f:.0f}%", ha="center")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. A config that refuses to be wrong

        A model is built from a handful of integers. For a Llama-style decoder (embeddings `V × d`, `L` blocks, each
        with query/key/value/output projections and a gated MLP of width `f`, two RMSNorm gains per block, a final
        norm and an output head):

        | field | Llama-3-8B | constraint |
        | --- | --- | --- |
        | `vocab_size` $V$ | 128256 | $\ge 1$ |
        | `hidden_size` $d$ | 4096 | divisible by `num_heads` |
        | `num_layers` $L$ | 32 | $\ge 1$ |
        | `num_heads` $H$ | 32 | divisible by `num_kv_heads` (each KV head serves $H/H_{kv}$ query heads: GQA) |
        | `num_kv_heads` $H_{kv}$ | 8 | defaults to $H$ (plain multi-head attention) |
        | `intermediate_size` $f$ | 14336 | $\ge 1$ |
        | `tie_embeddings` | False | the output head reuses the embedding matrix when True |

        (values from the model's `config.json` on the Hugging Face Hub, `meta-llama/Meta-Llama-3-8B`).

        With `head_dim` $= d/H$, the parameter count is

        $$
        N = \underbrace{V d}_{\text{embedding}}
          + L\big(\underbrace{d \cdot d}_{W_q} + \underbrace{2\, d\, H_{kv}\, \tfrac{d}{H}}_{W_k, W_v}
          + \underbrace{d \cdot d}_{W_o} + \underbrace{3 d f}_{\text{gate, up, down}} + \underbrace{2d}_{\text{norms}}\big)
          + \underbrace{d}_{\text{final norm}} + \underbrace{[\text{not tied}]\, V d}_{\text{head}} ,
        $$

        which gives 8,030,261,248 for Llama-3-8B: the "8B" in its name.

        Python's `@dataclass(frozen=True)` writes `__init__`, `__repr__` and `__eq__` for you and makes instances
        immutable, so a config can be shared, hashed and trusted. Validation goes in `__post_init__`, which the
        generated `__init__` calls last; a frozen dataclass sets a derived field there with
        `object.__setattr__(self, name, value)`. Configs arrive as JSON, so a `from_dict` classmethod must refuse
        keys it does not know: `ModelConfig(**d)` would raise a `TypeError` for them, but code that filters with
        `if k in fields` silently drops `num_head=8` and builds a model with the default.
    """)
    lesson.md(r"""
        ## 4. Exercise `model_config`

        Complete the frozen dataclass: validation in `__post_init__` (every size $\ge 1$, `hidden_size % num_heads
        == 0`, `num_heads % num_kv_heads == 0`, else `ValueError` saying which), `num_kv_heads=None` replaced by
        `num_heads`, the property `head_dim`, `num_parameters()` by the formula above, and `from_dict` that raises
        `ValueError` naming every unknown key. The likely mistakes: `head_dim = hidden_size // num_kv_heads`, and
        counting $W_k, W_v$ as $d \times d$ (true only without GQA).
    """)
    lesson.exercise(
        "model_config",
        r'''
        @dataclasses.dataclass(frozen=True)
        class ModelConfig:
            """The shape of a Llama-style decoder. Frozen: build a new one with dataclasses.replace."""

            vocab_size: int
            hidden_size: int
            num_layers: int
            num_heads: int
            intermediate_size: int
            num_kv_heads: int | None = None
            tie_embeddings: bool = False

            def __post_init__(self):
                # TODO: num_kv_heads None -> num_heads (a frozen dataclass needs object.__setattr__)
                # TODO: every size >= 1; hidden_size % num_heads == 0; num_heads % num_kv_heads == 0 (ValueError)
                ### BEGIN SOLUTION
                if self.num_kv_heads is None:
                    object.__setattr__(self, "num_kv_heads", self.num_heads)
                for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "num_kv_heads"):
                    if getattr(self, name) < 1:
                        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
                if self.hidden_size % self.num_heads:
                    raise ValueError(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
                if self.num_heads % self.num_kv_heads:
                    raise ValueError(f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.num_kv_heads}")
                ### END SOLUTION

            @property
            def head_dim(self) -> int:
                # TODO: the width of one attention head
                ### BEGIN SOLUTION
                return self.hidden_size // self.num_heads
                ### END SOLUTION

            def num_parameters(self) -> int:
                """Parameters of the Llama this config describes (section 3's formula)."""
                # TODO: embedding + per-layer (q, k, v, o, gate/up/down, two norms) + final norm + head unless tied
                ### BEGIN SOLUTION
                d, kv_width = self.hidden_size, self.num_kv_heads * self.head_dim
                attention = d * d + 2 * d * kv_width + d * d                    # W_q, W_k, W_v, W_o
                per_layer = attention + 3 * d * self.intermediate_size + 2 * d  # + MLP + two RMSNorm gains
                head = 0 if self.tie_embeddings else self.vocab_size * d
                return self.vocab_size * d + self.num_layers * per_layer + d + head
                ### END SOLUTION

            @classmethod
            def from_dict(cls, fields: dict) -> "ModelConfig":
                """Build from a dict (e.g. parsed JSON); ValueError naming every unknown key."""
                # TODO: compare the keys with the dataclass's field names, refuse the unknown ones, then build
                ### BEGIN SOLUTION
                known = {field.name for field in dataclasses.fields(cls)}
                unknown = sorted(set(fields) - known)
                if unknown:
                    raise ValueError(f"unknown config keys {unknown}; known keys are {sorted(known)}")
                return cls(**fields)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Streaming tokens with a generator

        A pre-training corpus is read as a stream of tokenized documents. They are concatenated with an end-of-text
        id after each document (so the model learns where a document stops), and the stream is cut into blocks of
        `block_size + 1` tokens: the first `block_size` are the input `x`, the last `block_size` the target `y`
        (next-token prediction, `y[t] = x[t+1]`). Consecutive blocks share one token, so every token of the stream
        is a target exactly once:

        ```
        stream   1 2 3 E 4 5 E 6 ...        (E = eos, block_size = 2)
        block 0  1 2 3        x = [1 2]  y = [2 3]
        block 1      3 E 4    x = [3 E]  y = [E 4]
        block 2          4 5 E  ...
        ```

        Cutting disjoint blocks of `block_size + 1` instead loses one target per block. The last incomplete block is
        dropped (as nanoGPT and Hugging Face's `group_texts` recipe do).

        A function containing `yield` is a **generator function**: calling it runs *nothing* and returns an iterator;
        each `next()` runs the body up to the next `yield`. That is why the data loader can start training after
        reading one document of a terabyte, and also why argument checks in a generator fire only at the first
        `next()`. Reading the whole input first (`list(documents)`) defeats the purpose and, on an endless stream,
        never returns.
    """)
    lesson.md(r"""
        ## 6. Exercise `token_blocks`

        `token_blocks(documents, block_size, eos_id)`: `documents` is any iterable of lists of ints (possibly an
        endless generator). Yield `(x, y)`, two int64 tensors of shape `(block_size,)`, as above, pulling each
        document from `documents` only when its tokens are needed. Refuse `block_size < 1` with `ValueError` (it
        will be raised at the first `next()`).
    """)
    lesson.exercise(
        "token_blocks",
        r'''
        def token_blocks(
            documents: Iterable[list[int]], block_size: int, eos_id: int
        ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            """Yield (x, y), each (block_size,) int64, from the documents joined with eos_id after each one."""
            # TODO: refuse block_size < 1
            # TODO: keep a buffer of pending tokens; pull one document at a time (tokens + [eos_id])
            # TODO: while the buffer holds block_size + 1 tokens, yield a block and keep its last token
            ### BEGIN SOLUTION
            if block_size < 1:
                raise ValueError(f"block_size must be >= 1, got {block_size}")
            buffer: list[int] = []
            for document in documents:
                buffer.extend(document)
                buffer.append(eos_id)
                while len(buffer) >= block_size + 1:
                    block = torch.tensor(buffer[: block_size + 1], dtype=torch.int64)  # (block_size + 1,)
                    yield block[:-1], block[1:]
                    buffer = buffer[block_size:]                    # the last token starts the next block
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # A generator runs lazily: watch which documents are pulled while blocks are produced.
        def noisy_documents():
            for i in itertools.count():
                print(f"  reading document {i}")
                yield list(range(10 * i, 10 * i + 3))

        try:
            stream = token_blocks(noisy_documents(), block_size=4, eos_id=-1)
            print("generator created, nothing read yet")
            for x, y in itertools.islice(stream, 3):
                print("x", x.tolist(), "y", y.tolist())
        except NotImplementedError:
            print("token_blocks is not written yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`pad_batch` and `position_ids`.** The mask is written from each row's length, never compared with `pad_id`,
        so an eos reused as padding stays a real token. Left padding only moves the start column,
        `width - len(row)`. `cumsum(mask) - 1` counts the real tokens before each place, which is a correct position
        for left, right and even gappy masks. *Mistakes*: the
        mask from `ids != pad_id`, position ids `arange(T)` (RoPE then shifts every left-padded row), truncation that
        keeps the *last* tokens, left padding ignored. Production: Hugging Face tokenizers pad in Rust
        (`tokenizer(texts, padding=True, return_tensors="pt")`); `DataCollatorWithPadding` also rounds `T` up to a
        multiple of 8 or 64 (`pad_to_multiple_of`) for tensor-core shapes; vLLM and FlashAttention's `varlen` kernels
        avoid padding altogether by packing the sequences into one row with `cu_seqlens` offsets.

        **`ModelConfig`.** `frozen=True` turns assignment into `FrozenInstanceError`, which is why `__post_init__`
        uses `object.__setattr__`. `dataclasses.fields` lists the declared fields, the honest source for the allowed
        keys. The count matches `LlamaForCausalLM`'s `sum(p.numel() for p in model.parameters())` exactly, which the
        checks verify on the meta device (no memory allocated). *Mistakes*: `head_dim` from the KV heads, K/V counted
        as `d × d` (overcounts Llama-3-8B by 0.8B parameters, 10%), the tied head counted twice, unknown keys dropped.
        Production: Hugging Face's `PretrainedConfig` deliberately *accepts* unknown keys (it stores them as
        attributes, so old configs keep loading); that tolerance is the reason to validate your own.

        **`token_blocks`.** The buffer holds at most `block_size + max document length` tokens, whatever the corpus
        size. `buffer = buffer[block_size:]` keeps the shared token. *Mistakes*: disjoint blocks (`buffer[block_size
        + 1:]`), reading all documents first, eos in front of each document instead of after it. Production:
        nanoGPT memory-maps one flat `uint16` file of token ids and samples random windows; Hugging Face
        `datasets.IterableDataset` streams shards and `group_texts` packs them; large runs (Megatron, torchtitan)
        pre-tokenize into indexed binary files and shuffle at the document and block level. Next:
        [p00.tensor_basics](03_Tensor_Basics.ipynb) makes these id tensors into masks and reductions.
    """)
    lesson.mistakes()
    return lesson
