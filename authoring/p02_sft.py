"""Source of 02_PyTorch_Algorithms/20_SFT.ipynb (build with `python -m llm_algo build p02.sft`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.sft",
        path="02_PyTorch_Algorithms/20_SFT.ipynb",
        title_en="Supervised fine-tuning: chat templates, loss masks, packing",
        title_zh="监督微调（SFT）：对话模板、损失掩码与打包",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p02.cross_entropy", "p02.data_loading"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 监督微调（SFT）把对话渲染成一条字符串：对话模板（chat template）给每条消息加上角色头和结束符，如 `<|im_start|>user\n…<|im_end|>\n`；训练和推理必须用**同一个**模板，否则模型在推理时看到的是陌生格式。
        - 只在助手（assistant）回答上计算损失：提示词（系统、用户消息和角色头）的标签设为 $-100$；助手的结束符 `<|im_end|>` **要**算损失，否则模型学不会停下。
        - 标签与输入对齐存放，损失内部错位一位：位置 $t$ 的 logits 预测标签 $t+1$。
        - 两种平均：按 token 平均（所有有效 token 一起平均，长回答权重大）与按序列平均（每条先平均再平均）；梯度累积时要按 token 数而不是微批数归一化。
        - SFT 打包（packing）：按顺序把样本装进长度上限为 $L$ 的行（next-fit），位置编号在每个样本开头重置，每个样本第一个 token 的标签设为 $-100$，避免跨样本预测。
        {易错点}

        Llama 2-Chat's supervised fine-tuning used 27,540 annotated dialogues; the authors "concatenate all the
        prompts and answers from the training set", separate prompt and answer with a special token, and "zero-out
        the loss on tokens from the user prompt, so as a result, we backpropagate only on answer tokens" (Touvron et
        al., 2023, *Llama 2*, §3.1: learning rate $2\times10^{-5}$, cosine schedule, 4096-token sequences, 2 epochs).
        LIMA reached a strong chat model from 1,000 curated examples (Zhou et al., 2023). In every case the training
        loop is the pre-training one; what changes is the data: a **chat template** that turns messages into tokens,
        a **loss mask** that keeps only the answers, and **packing** that keeps short dialogues from wasting the
        context. Each is a place where a silent bug costs a model: a template that differs by one newline from the
        one used at inference, a loss that also trains on user turns (the model learns to write the user's side), or
        an end token left out of the loss (the model never stops).

        **You will implement** `render_chat` (a ChatML-style template), `chat_input_and_labels` (tokens and the
        assistant-only labels from character offsets), `sft_loss` (shifted masked cross-entropy, token or sequence
        mean), and `pack_sft` (next-fit packing with position resets). **Graded against** Hugging Face's
        `apply_chat_template` on a tokenizer built here from a local Jinja template (and its
        `return_assistant_tokens_mask`), transformers' `ForCausalLMLoss`, float64 loop specs, `gradcheck`, and
        transformers' `DataCollatorWithFlattening`.
    """
    )
    lesson.md(r"""
        ## 1. The chat template

        A conversation is a list of messages `{"role": ..., "content": ...}` with roles `system` (optional, first),
        `user` and `assistant`. A base model sees only token ids, so the conversation is rendered into one string with
        markers the tokenizer maps to single **special tokens**. This lesson uses ChatML (OpenAI's chat markup, used by
        Qwen and many open models):

        ```text
        <|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n
        ```

        Each message is `<|im_start|>` + role + `\n` + content + `<|im_end|>` + `\n`. At inference, the prompt ends
        with an open assistant header, `<|im_start|>assistant\n` (`add_generation_prompt=True`), and generation stops
        when the model emits `<|im_end|>`. Llama 3 writes the same idea as
        `<|start_header_id|>user<|end_header_id|>\n\n...<|eot_id|>`; the structure, not the spelling, is what matters.

        Hugging Face stores the template as a Jinja string in `tokenizer_config.json` (`tokenizer.chat_template`) and
        renders it with `tokenizer.apply_chat_template(messages, tokenize=False)`; training code (TRL's `SFTTrainer`)
        and serving code (vLLM's OpenAI server) both call it, which is how they agree. You will write the same
        rendering in Python and the checks compare it with `apply_chat_template` character for character.

        ## 2. Which tokens carry the loss

        Tokenise the rendered string: ids $x \in \mathbb Z^{L}$. The **labels** $y \in \mathbb Z^{L}$ are aligned with the
        inputs (Hugging Face's convention): $y_i = x_i$ on tokens of an assistant's *content and its `<|im_end|>`*, and
        $y_i = -100$ everywhere else (system and user messages, every role header, the newline after `<|im_end|>`).
        The model shifts by one internally: the logits at position $t$ predict $y_{t+1}$, so the last header token
        `\n` predicts the first answer token, and the last answer token predicts `<|im_end|>`.

        To find the assistant tokens, keep the character span $[s, e)$ of every assistant content + `<|im_end|>` while
        rendering, and ask the (fast) tokenizer for each token's character offsets
        (`return_offsets_mapping=True`): a token belongs to the answer when its offsets lie inside a span. This works
        for any tokenizer, because in a template the spans start after a newline and end with a special token, which
        tokens do not cross. Hugging Face's `return_assistant_tokens_mask` does the same from `{% generation %}` markers
        in the Jinja template.

        ## 3. The loss, and two ways to average it

        With logits $z \in \mathbb R^{B \times L \times V}$ and labels $y \in \mathbb Z^{B\times L}$, the valid targets are
        $m_{b,t} = [y_{b,t+1} \ne -100]$ for $t < L - 1$ and the per-token loss is
        $\ell_{b,t} = -\log \mathrm{softmax}(z_{b,t})_{y_{b,t+1}}$. Two reductions:

        $$
        \mathcal L_\text{token} = \frac{\sum_{b,t} m_{b,t}\, \ell_{b,t}}{\sum_{b,t} m_{b,t}},\qquad
        \mathcal L_\text{seq} = \frac{1}{|\mathcal B'|} \sum_{b \in \mathcal B'} \frac{\sum_t m_{b,t}\, \ell_{b,t}}{\sum_t m_{b,t}},
        \quad \mathcal B' = \{b : \textstyle\sum_t m_{b,t} > 0\}.
        $$

        The token mean (Hugging Face's and TRL's default) weighs every answer token equally, so a 500-token answer
        counts 50 times more than a 10-token one; the sequence mean weighs every conversation equally. A row with no
        answer token (truncated away) has no loss: it must drop out of the sequence mean, not divide 0 by 0. Under
        gradient accumulation the token mean must divide by the tokens of *all* micro-batches (`p02.grad_accum_clip`;
        transformers' `num_items_in_batch`), not average per micro-batch means.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F

        IM_START, IM_END = "<|im_start|>", "<|im_end|>"
        ROLES = ("system", "user", "assistant")
        CHAT_TEMPLATE = (  # what tokenizer_config.json would hold; {% generation %} marks the assistant's tokens
            "{% for message in messages %}"
            "{{ '<|im_start|>' + message['role'] + '\n' }}"
            "{% if message['role'] == 'assistant' %}"
            "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
            "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}"
            "{{ '\n' }}"
            "{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
        )


        def build_chat_tokenizer(corpus, vocab_size=300):
            # A byte-level BPE trained here on `corpus` (a few strings, milliseconds), wrapped as a Hugging Face fast
            # tokenizer with the ChatML special tokens and CHAT_TEMPLATE. Nothing is downloaded.
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
            from transformers import PreTrainedTokenizerFast

            specials = ["<unk>", IM_START, IM_END, "<pad>"]
            backend = Tokenizer(models.BPE(unk_token="<unk>"))
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            backend.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            backend.train_from_iterator(corpus, trainer)
            tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                                eos_token=IM_END)
            tokenizer.chat_template = CHAT_TEMPLATE
            return tokenizer


        CONVERSATION = [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?"},
            {"role": "assistant", "content": "Rome, since 1871."},
        ]
    """)
    lesson.md(r"""
        ## 4. Exercise `render_chat`
    """)
    lesson.exercise(
        "render_chat",
        r'''
        def render_chat(messages: list[dict], add_generation_prompt: bool = False) -> str:
            """ChatML rendering: for each message IM_START + role + "\n" + content + IM_END + "\n"; then, if
            add_generation_prompt, IM_START + "assistant\n".

            messages: a non-empty list of {"role": one of ROLES, "content": str}; a "system" message only first.
            Raises ValueError otherwise."""
            # TODO: validate the conversation (non-empty, known roles, string contents, system only at index 0)
            # TODO: concatenate the rendered messages, then the optional open assistant header
            ### BEGIN SOLUTION
            if not messages:
                raise ValueError("a conversation needs at least one message")
            parts = []
            for index, message in enumerate(messages):
                role, content = message.get("role"), message.get("content")
                if role not in ROLES or not isinstance(content, str):
                    raise ValueError(f"message {index}: need a role in {ROLES} and a string content, got {message!r}")
                if role == "system" and index != 0:
                    raise ValueError(f"message {index}: a system message may only come first")
                parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
            if add_generation_prompt:
                parts.append(f"{IM_START}assistant\n")  # the model writes from here and stops at IM_END
            return "".join(parts)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `chat_input_and_labels`

        Render with your `render_chat`, remember each assistant's span (content + `<|im_end|>`) in characters, tokenise
        once with offsets, and keep the label only on tokens inside a span.
    """)
    lesson.exercise(
        "chat_input_and_labels",
        r'''
        def chat_input_and_labels(messages: list[dict], tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
            """Token ids of render_chat(messages) and their labels, both (L,) int64.

            labels[i] = input_ids[i] on the tokens of every assistant message's content and its IM_END, -100 elsewhere
            (system/user messages, role headers, the newline after IM_END). `tokenizer` is a Hugging Face fast
            tokenizer (call it with add_special_tokens=False, return_offsets_mapping=True). Raises ValueError for a
            conversation without an assistant message (nothing to learn) and whatever render_chat refuses."""
            # TODO: render; the character span [start, end) of each assistant content + IM_END
            # TODO: tokenise with offsets; a token is trained on when its offsets lie inside a span
            ### BEGIN SOLUTION
            text = render_chat(messages)
            spans, cursor = [], 0
            for message in messages:
                start = cursor + len(IM_START + message["role"] + "\n")  # after the role header
                end = start + len(message["content"] + IM_END)  # the end token is part of the answer
                if message["role"] == "assistant":
                    spans.append((start, end))
                cursor = end + 1  # the newline after IM_END
            if not spans:
                raise ValueError("no assistant message: there is nothing to train on")
            encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            input_ids = torch.tensor(encoding["input_ids"], dtype=torch.int64)  # (L,)
            offsets = torch.tensor(encoding["offset_mapping"], dtype=torch.int64)  # (L, 2) character [begin, end)
            in_answer = torch.zeros(len(input_ids), dtype=torch.bool)
            for start, end in spans:
                in_answer |= (offsets[:, 0] >= start) & (offsets[:, 1] <= end)
            labels = torch.where(in_answer, input_ids, torch.full_like(input_ids, -100))
            return input_ids, labels
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The conversation above, token by token: green tokens carry the loss.
    """)
    lesson.code(r"""
        try:
            tokenizer = build_chat_tokenizer([m["content"] for m in CONVERSATION] * 3)
            input_ids, labels = chat_input_and_labels(CONVERSATION, tokenizer)
            pieces = tokenizer.convert_ids_to_tokens(input_ids.tolist())
            fig, ax = plt.subplots(figsize=(11, 3.2))
            per_line = 20
            for i, (piece, label) in enumerate(zip(pieces, labels.tolist())):
                row, col = divmod(i, per_line)
                ax.text(col, -row, piece.replace("Ġ", "·").replace("Ċ", "\\n")[:12], ha="center", va="center", fontsize=7,
                        bbox=dict(boxstyle="round,pad=0.2", fc="#9be59b" if label != -100 else "#eeeeee", ec="none"))
            ax.set_xlim(-1, per_line); ax.set_ylim(-(len(pieces) // per_line) - 1, 1); ax.axis("off")
            ax.set_title(f"{len(pieces)} tokens, {int((labels != -100).sum())} trained on (green)")
            plt.show()
            print("apply_chat_template agrees:", tokenizer.apply_chat_template(CONVERSATION, tokenize=False) == render_chat(CONVERSATION))
        except NotImplementedError:
            print("render_chat / chat_input_and_labels are not attempted yet")
    """)
    lesson.md(r"""
        ## 6. Exercise `sft_loss`

        Compute $\log\mathrm{softmax}$ over the vocabulary in at least float32 (`p02.cross_entropy`), pick the target's
        entry, and reduce with the mask. `F.cross_entropy` is the checks' reference, so it is off limits here.
    """)
    lesson.exercise(
        "sft_loss",
        r'''
        def sft_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "token") -> torch.Tensor:
            """Shifted, masked next-token cross-entropy. logits (B, L, V) float; labels (B, L) int64 aligned with the
            inputs, -100 = no loss. Position t predicts labels[:, t + 1].

            reduction "token": mean over every valid target of the batch; "sequence": mean over rows of each row's
            mean, rows without a valid target left out. Computed in at least float32; returns a 0-d tensor of dtype
            promote_types(logits.dtype, float32). Raises ValueError for mismatched shapes, an unknown reduction, or no
            valid target at all."""
            # TODO: validate; shift (logits[:, :-1] against labels[:, 1:]); log-softmax in >= float32; gather
            # TODO: the valid mask; the two reductions
            ### BEGIN SOLUTION
            if logits.dim() != 3 or labels.shape != logits.shape[:2]:
                raise ValueError(f"need logits (B, L, V) and labels (B, L), got {tuple(logits.shape)}, {tuple(labels.shape)}")
            if reduction not in ("token", "sequence"):
                raise ValueError(f"reduction must be 'token' or 'sequence', got {reduction!r}")
            compute_dtype = torch.promote_types(logits.dtype, torch.float32)
            log_probs = torch.log_softmax(logits[:, :-1].to(compute_dtype), dim=-1)  # (B, L-1, V)
            targets = labels[:, 1:]  # (B, L-1): position t predicts token t + 1
            valid = targets != -100  # (B, L-1)
            if not bool(valid.any()):
                raise ValueError("no label is different from -100: nothing to train on")
            picked = log_probs.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)  # (B, L-1)
            losses = -picked * valid  # 0 where masked
            if reduction == "token":
                return losses.sum() / valid.sum()
            counts = valid.sum(dim=1)  # (B,)
            rows = counts > 0  # a row without answer tokens has no loss to average
            return (losses.sum(dim=1)[rows] / counts[rows]).mean()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Packing for SFT

        Chat examples are short and vary a lot in length, so SFT packs them: take the examples in order and put each
        into the current row if it still fits in $L_{\max}$ tokens, else start a new row (**next-fit**; sorting by
        length first, first-fit decreasing, packs tighter but reorders the data). Inside a row the examples are
        concatenated, the `position_ids` restart at 0 with each example, and the **first label of every example is set
        to $-100$**: after the internal shift, the last token of example $k$ would otherwise be trained to predict the
        first token of example $k+1$, an unrelated text. The rest of a row is padding: `pad_id`, label $-100$,
        position 0. Attention must also stop at example boundaries (the block-diagonal mask of `p02.data_loading`,
        or FlashAttention's variable-length kernel, which reads the boundaries from the position resets).
    """)
    lesson.exercise(
        "pack_sft",
        r'''
        def pack_sft(examples, max_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Next-fit packing of `examples`, a non-empty list of (input_ids, labels) pairs (1-D int tensors or lists
            of the same non-zero length <= max_length), in order, into R rows of max_length tokens.

            Returns (input_ids, labels, position_ids), each (R, max_length) int64: examples concatenated per row;
            labels as given except -100 at each example's first token; positions restarting at 0 per example; the
            rest of a row filled with pad_id, label -100, position 0. Raises ValueError on invalid examples."""
            # TODO: validate every example; assign examples to rows in order (a new row when the next one does not fit)
            # TODO: fill each row: ids, labels with the first one of each example set to -100, positions 0..n-1, padding
            ### BEGIN SOLUTION
            if not examples:
                raise ValueError("nothing to pack")
            rows, current, used = [], [], 0
            for index, (ids, labels) in enumerate(examples):
                ids = torch.as_tensor(ids, dtype=torch.int64).flatten()
                labels = torch.as_tensor(labels, dtype=torch.int64).flatten()
                if ids.numel() == 0 or ids.shape != labels.shape or ids.numel() > max_length:
                    raise ValueError(f"example {index}: need 1..{max_length} ids and as many labels, got {ids.numel()} and {labels.numel()}")
                if used + ids.numel() > max_length:  # next-fit: close the row, open a new one
                    rows.append(current)
                    current, used = [], 0
                current.append((ids, labels))
                used += ids.numel()
            rows.append(current)
            input_ids = torch.full((len(rows), max_length), pad_id, dtype=torch.int64)
            packed_labels = torch.full((len(rows), max_length), -100, dtype=torch.int64)
            position_ids = torch.zeros((len(rows), max_length), dtype=torch.int64)
            for r, row in enumerate(rows):
                start = 0
                for ids, labels in row:
                    n = ids.numel()
                    input_ids[r, start : start + n] = ids
                    packed_labels[r, start + 1 : start + n] = labels[1:]  # no label across the boundary
                    position_ids[r, start : start + n] = torch.arange(n)
                    start += n
            return input_ids, packed_labels, position_ids
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        How much does packing save? 400 synthetic chat examples with lengths drawn from a long-tailed distribution,
        padded one per row to the longest in a batch of 8, against next-fit packing into rows of 1024 tokens.
    """)
    lesson.code(r"""
        try:
            lengths = (torch.distributions.LogNormal(5.0, 0.8).sample((400,)).clamp(8, 1024)).long().tolist()
            examples = [([1] * n, [1] * n) for n in lengths]
            ids, _, _ = pack_sft(examples, 1024, pad_id=0)
            packed_fill = (ids != 0).float().mean().item()
            padded_fill = sum(lengths) / sum(8 * max(lengths[i : i + 8]) for i in range(0, 400, 8))
            fig, ax = plt.subplots(figsize=(6, 2.8))
            ax.bar(["padded batches of 8", "next-fit packing, 1024"], [padded_fill, packed_fill], color=["tab:gray", "tab:green"])
            ax.set_ylim(0, 1); ax.set_ylabel("fraction of real tokens")
            ax.set_title(f"{sum(lengths)} tokens in 400 examples: {ids.shape[0]} packed rows")
            plt.show()
            print(f"padded: {padded_fill:.0%} real tokens, packed: {packed_fill:.0%}")
        except NotImplementedError:
            print("pack_sft is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`render_chat`.** The rendering is trivial; the validation is the value. A `system` message in the middle or
        a `None` content would render to a string the model never saw in training, and the failure would show up as
        a quality drop, not an error. Real templates raise from Jinja (`raise_exception(...)`) for the same cases.

        **`chat_input_and_labels`.** The spans are computed while walking the messages, with the same string pieces the
        renderer used, so they cannot drift from the text. Tokenising the whole string once (not message by
        message) matters for BPE: merges can differ at piece boundaries, and the ids must be exactly those the model
        sees at inference. `<|im_end|>` is inside the span, the following `\n` is not.

        **`sft_loss`.** The shift pairs logits $t$ with labels $t+1$. `clamp_min(0)` keeps `gather` in range at masked
        positions, whose values the mask then zeroes. The sequence mean leaves out rows without answer tokens.

        **`pack_sft`.** Next-fit never looks back, so the order of the data is kept (and the time is linear). The
        boundary rule is written as "copy `labels[1:]`", so the first label of every example stays $-100$.

        **The usual mistakes, and why they are wrong**: a missing newline after
        `<|im_end|>` or after the role, the generation header without its newline; role headers trained on, the end
        token left out of the span, no mask at all, spans that ignore the newline between messages (they drift);
        no shift, a mean over all positions (masked ones included), a row without answers divided by zero, no float32
        upcast; an example's first label kept, positions not reset, a row overfilled by one token.

        **What production code does.** TRL's `SFTTrainer` applies the tokenizer's chat template, and with
        `assistant_only_loss=True` uses `return_assistant_tokens_mask` (templates need `{% generation %}` markers);
        its `completion_only_loss` masks the prompt of prompt-completion data. It packs with `packing=True`
        (`packing_strategy="bfd"`, best-fit decreasing, by default in recent versions) and relies on
        `position_ids` + FlashAttention's variable-length kernel to keep examples apart ("padding-free").
        `DataCollatorWithFlattening` in transformers is the one-row version of `pack_sft` and marks each example's
        first label with `separator_id = -100`. The loss is the model's `ForCausalLMLoss`: shift, `ignore_index=-100`,
        token mean, divided by `num_items_in_batch` under gradient accumulation. OpenRLHF and LLaMA-Factory do the
        same with their own template registries; vLLM renders the same Jinja template when serving.
    """)
    lesson.mistakes()
    return lesson
