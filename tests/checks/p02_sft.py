"""Checks for p02.sft. References: Hugging Face `apply_chat_template` on a byte-level BPE tokenizer trained here from
a few strings with a local ChatML Jinja template (nothing downloaded), and its `return_assistant_tokens_mask` from
`{% generation %}` markers; transformers' `ForCausalLMLoss` (the loss of every *ForCausalLM model); float64 loop specs;
torch.autograd.gradcheck; transformers' `DataCollatorWithFlattening` for each packed row; and a per-token bigram model
whose loss on packed rows must equal its loss on the separate examples."""

import functools

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    reference_only,
)
from llm_algo.check.restrictions import CROSS_ENTROPY
from llm_algo.references.hf import transformers_module

checks = Checks("p02.sft")
checks.restrict(
    "render_chat",
    "chat_input_and_labels",
    forbid=["jinja2"],
    instead="build the string in Python (apply_chat_template's Jinja rendering is the checks' reference)",
)
checks.restrict(
    "sft_loss",
    forbid=CROSS_ENTROPY,
    instead="take torch.log_softmax over the vocabulary and gather the targets (F.cross_entropy is the reference)",
)

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TEMPLATE = (  # the checks' own copy of the template (the notebook's CHAT_TEMPLATE is not read)
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONVERSATIONS = [
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ],
    [
        {"role": "user", "content": "Write two lines\nabout rain."},
        {"role": "assistant", "content": "Rain on the roof,\nsoft as a secret."},
        {"role": "user", "content": "Shorter?"},
        {"role": "assistant", "content": " Drip."},
    ],
    [
        {"role": "user", "content": "Übersetze: 猫"},
        {"role": "assistant", "content": "Katze 🐈"},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "x"},
    ],
]


@functools.cache
def chat_tokenizer(vocab_size: int):
    """A byte-level BPE trained on the conversations' texts, with the ChatML special tokens and the template."""
    with reference_only():
        transformers_module()
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

        corpus = [m["content"] for conversation in CONVERSATIONS for m in conversation] * 4
        backend = Tokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", IM_START, IM_END, "<pad>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        backend.train_from_iterator(corpus, trainer)
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token=IM_END
        )
        tokenizer.chat_template = TEMPLATE
        return tokenizer


def hf_render(messages, add_generation_prompt=False) -> str:
    with reference_only():
        return chat_tokenizer(300).apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )


# ------------------------------------------------------------------------------------------ render_chat

RENDER_HINT = (
    "each message: IM_START + role + '\\n' + content + IM_END + '\\n'; then IM_START + 'assistant\\n' if asked"
)


@checks("render_chat")
def renders_like_apply_chat_template(ex):
    """three conversations (multi-line, unicode, empty content), with and without the generation prompt"""
    for index, conversation in enumerate(CONVERSATIONS):
        for generation_prompt in (False, True):
            want = hf_render(conversation, generation_prompt)
            got = ex.render_chat(conversation, add_generation_prompt=generation_prompt)
            expect(
                got == want,
                "the rendering differs from apply_chat_template",
                input=f"conversation {index} ({len(conversation)} messages), add_generation_prompt={generation_prompt}",
                expected=repr(want),
                got=repr(got),
                hint=RENDER_HINT,
            )


@checks("render_chat")
def renders_a_single_turn_by_hand(ex):
    """one user message, rendered by hand, with the open assistant header"""
    want = "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    got = ex.render_chat([{"role": "user", "content": "Hi!"}], add_generation_prompt=True)
    expect(
        got == want,
        "the rendering is wrong",
        input="[{'role': 'user', 'content': 'Hi!'}], add_generation_prompt=True",
        expected=repr(want),
        got=repr(got),
        hint=RENDER_HINT,
    )


@checks("render_chat")
def refuses_bad_conversations(ex):
    """no message, an unknown role, a non-string content, a system message after the first: ValueError"""
    cases = [
        ([], "no messages"),
        ([{"role": "robot", "content": "hi"}], "role 'robot'"),
        ([{"role": "user", "content": None}], "content None"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "system message second"),
    ]
    for messages, why in cases:
        expect_value_error(
            lambda messages=messages: ex.render_chat(messages),
            input=f"render_chat({messages}) ({why})",
            hint="validate every message: role in ROLES, str content, system only at index 0",
        )


# ------------------------------------------------------------------------------------------ chat_input_and_labels

LABELS_HINT = (
    "label the tokens of each assistant content AND its IM_END (not the role header, not the newline after); "
    "-100 elsewhere; tokenise the whole rendered string once"
)


def hf_ids_and_labels(conversation, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    with reference_only():
        out = chat_tokenizer(vocab_size).apply_chat_template(
            conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
    ids = torch.tensor(out["input_ids"], dtype=torch.int64)
    mask = torch.tensor(out["assistant_masks"], dtype=torch.bool)
    return ids, torch.where(mask, ids, torch.full_like(ids, -100))


def expect_ids_and_labels(got, want_ids, want_labels, case: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "chat_input_and_labels must return (input_ids, labels)",
        input=case,
        expected="a tuple of 2 tensors",
        got=type(got).__name__,
    )
    ids, labels = got
    for name, value in (("input_ids", ids), ("labels", labels)):
        expect_tensor(value, shape=tuple(want_ids.shape), dtype=torch.int64, input=case, what=name, hint=LABELS_HINT)
    expect(
        torch.equal(ids, want_ids),
        "input_ids differ from apply_chat_template(tokenize=True)",
        input=case,
        expected=str(want_ids.tolist()),
        got=str(ids.tolist()),
        hint="tokenise render_chat(messages) with add_special_tokens=False",
    )
    wrong = (labels != want_labels).nonzero().flatten().tolist()
    expect(
        not wrong,
        f"labels wrong at {len(wrong)} positions",
        input=case,
        expected=f"labels {want_labels.tolist()}",
        got=f"labels {labels.tolist()} (wrong at {wrong[:8]})",
        hint=LABELS_HINT,
    )


@checks("chat_input_and_labels")
def labels_match_assistant_tokens_mask(ex):
    """ids and labels equal apply_chat_template's ids and return_assistant_tokens_mask, two tokenizers"""
    for vocab_size in (300, 400):
        with reference_only():
            tokenizer = chat_tokenizer(vocab_size)
        for index, conversation in enumerate(CONVERSATIONS):
            want_ids, want_labels = hf_ids_and_labels(conversation, vocab_size)
            case = f"conversation {index} ({len(conversation)} messages), BPE tokenizer of {vocab_size} ids"
            expect_ids_and_labels(ex.chat_input_and_labels(conversation, tokenizer), want_ids, want_labels, case)


@checks("chat_input_and_labels")
def trained_tokens_spell_the_answers(ex):
    """the labelled tokens decode to exactly the assistant contents, each followed by <|im_end|>"""
    with reference_only():
        tokenizer = chat_tokenizer(300)
    for index, conversation in enumerate(CONVERSATIONS):
        ids, labels = ex.chat_input_and_labels(conversation, tokenizer)
        with reference_only():
            decoded = tokenizer.decode(labels[labels != -100].tolist())
        want = "".join(m["content"] + IM_END for m in conversation if m["role"] == "assistant")
        expect(
            decoded == want,
            "the trained-on tokens are not the assistant answers",
            input=f"conversation {index}",
            expected=repr(want),
            got=repr(decoded),
            hint=LABELS_HINT,
        )


@checks("chat_input_and_labels")
def refuses_conversations_without_answers(ex):
    """a conversation without an assistant message, or one render_chat refuses: ValueError"""
    with reference_only():
        tokenizer = chat_tokenizer(300)
    for messages, why in (
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "no assistant message"),
        ([{"role": "user", "content": "Hi"}, {"role": "critic", "content": "no"}], "role 'critic'"),
    ):
        expect_value_error(
            lambda messages=messages: ex.chat_input_and_labels(messages, tokenizer),
            input=f"chat_input_and_labels({messages}) ({why})",
            hint="with no assistant span there is nothing to learn: raise ValueError",
        )


# ------------------------------------------------------------------------------------------ sft_loss

LOSS_HINT = (
    "log_softmax(logits[:, :-1]) against labels[:, 1:], keep labels != -100; token: sum / count over the batch; "
    "sequence: each row's mean, then the mean over rows that have a valid target"
)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    with reference_only():
        transformers_module()
        from transformers.loss.loss_utils import ForCausalLMLoss

        return ForCausalLMLoss(logits.double(), labels, vocab_size=logits.shape[-1])


def loop_sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The sequence mean, one position at a time in float64."""
    row_means = []
    for b in range(logits.shape[0]):
        total, count = 0.0, 0
        for t in range(logits.shape[1] - 1):
            target = int(labels[b, t + 1])
            if target == -100:
                continue
            row = logits[b, t].double()
            total += float(torch.log(torch.exp(row - row.max()).sum()) + row.max() - row[target])
            count += 1
        if count:
            row_means.append(total / count)
    return torch.tensor(sum(row_means) / len(row_means), dtype=torch.float64)


def random_labels(batch: int, length: int, vocab: int, keep: float = 0.5) -> torch.Tensor:
    labels = torch.randint(0, vocab, (batch, length))
    return labels.masked_fill(torch.rand(batch, length) > keep, -100)


@checks("sft_loss")
def token_mean_matches_for_causal_lm_loss(ex):
    """reduction="token" equals transformers' ForCausalLMLoss, several shapes, float32 and float64"""
    for (batch, length, vocab), dtype in (
        ((2, 7, 11), torch.float32),
        ((1, 5, 33), torch.float64),
        ((4, 9, 5), torch.float32),
    ):
        logits = torch.randn(batch, length, vocab, dtype=dtype) * 3
        labels = random_labels(batch, length, vocab)
        labels[0, 1] = int(torch.randint(vocab, ()))  # at least one valid target
        got = ex.sft_loss(logits, labels, "token")
        case = describe(logits=logits, labels=labels) + ', reduction="token"'
        expect_tensor(got, shape=(), dtype=dtype, input=case, hint="a 0-d tensor")
        expect_close(got, causal_lm_loss(logits, labels), input=case, hint=LOSS_HINT)


@checks("sft_loss")
def sequence_mean_matches_loop_spec(ex):
    """reduction="sequence" against a float64 loop, with one row that has no valid target (left out)"""
    logits = torch.randn(4, 8, 13, dtype=torch.float64)
    labels = random_labels(4, 8, 13, keep=0.6)
    labels[1] = -100  # a row whose answer was truncated away
    labels[2, 1:3] = torch.tensor([4, 5])
    labels[0, 7] = 2
    labels[3] = -100
    labels[3, 4] = 7  # a row with a single target still counts
    got = ex.sft_loss(logits, labels, "sequence")
    case = describe(logits=logits) + f", labels {labels.tolist()}, reduction='sequence'"
    expect_close(got, loop_sequence_loss(logits, labels), input=case, hint=LOSS_HINT)
    lengths_differ = ex.sft_loss(logits, labels, "token")
    expect(
        not torch.allclose(lengths_differ, got),
        "token and sequence means agree on rows of different answer lengths",
        input=case,
        expected="two different numbers",
        got=f"{float(lengths_differ):.6f} and {float(got):.6f}",
        hint="token: one mean over every valid target; sequence: per-row means, then their mean",
    )


@checks("sft_loss")
def stable_in_half_precision(ex):
    """bfloat16 logits of size 40 return a float32 loss close to the float64 oracle"""
    logits = (torch.randn(2, 6, 40) * 40).to(torch.bfloat16)
    labels = random_labels(2, 6, 40, keep=0.8)
    labels[1, 5] = 3
    got = ex.sft_loss(logits, labels, "token")
    case = describe(logits=logits, labels=labels) + ', reduction="token"'
    expect_tensor(got, shape=(), dtype=torch.float32, input=case, hint="upcast: promote_types(logits.dtype, float32)")
    expect_close(got, causal_lm_loss(logits, labels), input=case, dtype=torch.float32, hint=LOSS_HINT)


@checks("sft_loss")
def gradients_pass_gradcheck(ex):
    """torch.autograd.gradcheck in float64, both reductions"""
    labels = random_labels(2, 4, 3, keep=0.7)
    labels[0, 2] = 1
    labels[1, 1:] = -100  # a row without targets: no gradient, and no NaN
    labels[1, 0] = 2  # position 0 is never a target
    for reduction in ("token", "sequence"):
        logits = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        expect_gradcheck(
            lambda z, reduction=reduction: ex.sft_loss(z, labels, reduction),
            (logits,),
            input=describe(logits=logits) + f", reduction={reduction!r}",
            hint="build the loss from differentiable torch ops (log_softmax, gather, sum)",
        )


@checks("sft_loss")
def refuses_bad_input(ex):
    """no valid target, mismatched shapes, an unknown reduction: ValueError"""
    logits = torch.randn(2, 4, 5)
    good = torch.randint(0, 5, (2, 4))
    cases = [
        ((logits, torch.full((2, 4), -100)), {}, "every label -100"),
        ((logits, good[:, :3]), {}, "labels (2, 3) for logits (2, 4, 5)"),
        ((logits[0], good[0]), {}, "2-D logits"),
        ((logits, good), {"reduction": "mean"}, "reduction='mean'"),
    ]
    for args, kwargs, why in cases:
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.sft_loss(*args, **kwargs),
            input=f"sft_loss with {why}",
            hint="validate shapes and the reduction; with no valid target there is no loss (raise, do not return NaN)",
        )


# ------------------------------------------------------------------------------------------ pack_sft

PACK_HINT = (
    "next-fit: a new row when used + len(example) > max_length; labels[1:] copied, the first label of each example "
    "-100; positions 0..n-1 per example; padding: pad_id, -100, 0"
)


def next_fit_groups(lengths: list[int], max_length: int) -> list[list[int]]:
    groups, used = [[]], 0
    for index, n in enumerate(lengths):
        if used + n > max_length:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += n
    return groups


def flattening_reference(examples, max_length: int, pad_id: int):
    """Each next-fit row through transformers' DataCollatorWithFlattening, then padded."""
    with reference_only():
        collator = transformers_module().DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
        groups = next_fit_groups([len(ids) for ids, _ in examples], max_length)
        out = {
            "input_ids": torch.full((len(groups), max_length), pad_id),
            "labels": torch.full((len(groups), max_length), -100),
            "position_ids": torch.zeros(len(groups), max_length, dtype=torch.int64),
        }
        for row, group in enumerate(groups):
            batch = collator([{"input_ids": list(examples[i][0]), "labels": list(examples[i][1])} for i in group])
            for key, value in out.items():
                flat = batch[key][0]
                value[row, : flat.numel()] = flat
    return out


def random_examples(count: int, max_length: int, vocab: int = 50):
    examples = []
    for _ in range(count):
        n = int(torch.randint(1, max_length + 1, ()))
        ids = torch.randint(1, vocab, (n,))
        labels = ids.masked_fill(torch.rand(n) < 0.4, -100)
        examples.append((ids.tolist(), labels.tolist()))
    return examples


def expect_packed(got, want: dict, case: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "pack_sft must return (input_ids, labels, position_ids)",
        input=case,
        expected="a tuple of 3 tensors",
        got=type(got).__name__,
    )
    for name, value in zip(want, got, strict=True):
        expect_tensor(value, shape=tuple(want[name].shape), dtype=torch.int64, input=case, what=name, hint=PACK_HINT)
        wrong = (value != want[name]).nonzero().tolist()
        expect(
            not wrong,
            f"{name} is wrong at {len(wrong)} places",
            input=case,
            expected=str(want[name].tolist()),
            got=f"{value.tolist()} (wrong at (row, col) {wrong[:6]})",
            hint=PACK_HINT,
        )


@checks("pack_sft")
def packs_by_hand(ex):
    """three examples of lengths 3, 2, 3 into rows of 5, worked out by hand"""
    examples = [([11, 12, 13], [-100, 12, 13]), ([21, 22], [21, 22]), ([31, 32, 33], [31, -100, 33])]
    want = {
        "input_ids": torch.tensor([[11, 12, 13, 21, 22], [31, 32, 33, 0, 0]]),
        "labels": torch.tensor([[-100, 12, 13, -100, 22], [-100, -100, 33, -100, -100]]),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 0, 0]]),
    }
    expect_packed(ex.pack_sft(examples, 5, pad_id=0), want, f"pack_sft({examples}, max_length=5, pad_id=0)")


@checks("pack_sft")
def rows_match_data_collator_with_flattening(ex):
    """random examples, rows of 7, 16 and 9 tokens (one example per row at the limit): DataCollatorWithFlattening"""
    for count, max_length, pad_id in ((9, 7, 0), (12, 16, 3), (4, 9, 1)):
        examples = random_examples(count, max_length)
        if count == 4:
            examples = [(list(range(1, 10)), list(range(1, 10)))] + examples  # exactly max_length
        given = (
            examples
            if pad_id != 3
            else [(torch.tensor(i, dtype=torch.int32), torch.tensor(label)) for i, label in examples]
        )
        case = f"{len(examples)} examples of lengths {[len(i) for i, _ in examples]}, max_length={max_length}, pad_id={pad_id}"
        expect_packed(
            ex.pack_sft(given, max_length, pad_id=pad_id), flattening_reference(examples, max_length, pad_id), case
        )


@checks("pack_sft")
def packed_loss_equals_separate_loss(ex):
    """a per-token bigram model: the token-mean loss on packed rows equals the loss on the separate examples"""
    vocab, max_length = 30, 12
    table = torch.randn(vocab, vocab, dtype=torch.float64)  # logits of the next token given the current one
    examples = random_examples(10, max_length, vocab)

    def token_losses(ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
        logits = table[ids[..., :-1]]  # (..., n-1, V)
        targets = labels[..., 1:]
        valid = targets != -100
        nll = -torch.log_softmax(logits, -1).gather(-1, targets.clamp_min(0)[..., None])[..., 0]
        return (nll * valid).sum(), int(valid.sum())

    separate = [token_losses(torch.tensor(i), torch.tensor(label)) for i, label in examples]
    want = sum(s for s, _ in separate) / sum(c for _, c in separate)
    ids, labels, _ = ex.pack_sft(examples, max_length, pad_id=0)
    total, count = token_losses(ids, labels)
    case = f"10 examples of lengths {[len(i) for i, _ in examples]}, max_length={max_length}, a bigram model"
    expect(
        count == sum(c for _, c in separate),
        "the packed rows train on a different number of targets than the separate examples",
        input=case,
        expected=f"{sum(c for _, c in separate)} targets",
        got=f"{count} targets",
        hint="set the first label of every example to -100: otherwise the previous example predicts across the boundary",
    )
    expect_close(total / count, want, input=case, what="token-mean loss", hint=PACK_HINT)


@checks("pack_sft")
def refuses_bad_examples(ex):
    """no examples, an empty example, ids and labels of different lengths, an example longer than max_length"""
    cases = [
        ([], "no examples"),
        ([([1, 2], [1, 2]), ([], [])], "an empty example"),
        ([([1, 2, 3], [1, 2])], "3 ids, 2 labels"),
        ([([1] * 9, [1] * 9)], "9 tokens for max_length 8"),
    ]
    for examples, why in cases:
        expect_value_error(
            lambda examples=examples: ex.pack_sft(examples, 8, pad_id=0),
            input=f"pack_sft({examples}, max_length=8) ({why})",
            hint="validate each example (truncating silently would drop the end of an answer)",
        )
