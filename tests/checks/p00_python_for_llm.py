"""Checks for p00.python_for_llm. References: `torch.nn.utils.rnn.pad_sequence` (with `padding_side`) for padding
and masks, a per-element loop spec of Hugging Face's `position_ids` rule, `LlamaForCausalLM` built on the meta device
for the parameter count, Python's `dataclasses` machinery for the config contract, and a non-streaming slicing of
the whole concatenated corpus for the token blocks."""

import dataclasses
import json
import random
import warnings
from functools import cache

import torch
from torch.nn.utils.rnn import pad_sequence

from llm_algo.check import Checks, describe, expect, expect_refused, expect_tensor, expect_value_error, reference_only
from llm_algo.references.hf import tiny_llama_config, transformers_module

checks = Checks("p00.python_for_llm")
checks.restrict(
    "pad_batch",
    forbid=(pad_sequence, "torch.nn.utils.rnn"),
    instead="fill a (B, T) tensor of pad_id and write each row yourself (pad_sequence is the checks' reference)",
)

# ------------------------------------------------------------------------------------------ pad_batch


def reference_pad(sequences, pad_id, side, max_length):
    rows = [torch.tensor(list(s)[:max_length] if max_length else list(s), dtype=torch.int64) for s in sequences]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id, padding_side=side)
    ones = [torch.ones(len(r), dtype=torch.int64) for r in rows]
    mask = pad_sequence(ones, batch_first=True, padding_value=0, padding_side=side)
    return ids, mask


def reference_positions(mask):
    """Loop spec: the position of a real token is the number of real tokens before it in its row; padding gets 1."""
    out = torch.empty_like(mask, dtype=torch.int64)
    for b in range(mask.shape[0]):
        seen = 0
        for t in range(mask.shape[1]):
            if int(mask[b, t]):
                out[b, t] = seen
                seen += 1
            else:
                out[b, t] = 1
    return out


def expect_same_ints(got, expected, label, what, hint):
    expect_tensor(got, shape=tuple(expected.shape), dtype=torch.int64, input=label, hint=f"{what}: (B, T) int64")
    expect(
        torch.equal(got, expected),
        f"{what} differs",
        input=label,
        expected=str(expected.tolist()),
        got=str(got.tolist()),
        hint=hint,
    )


@checks("pad_batch")
def small_batch_by_hand(ex):
    """[[5, 6, 7], [8], [9, 10]] padded with 0 on the right and on the left: ids and mask as drawn in section 1"""
    batch = [[5, 6, 7], [8], [9, 10]]
    for side, ids, mask in [
        ("right", [[5, 6, 7], [8, 0, 0], [9, 10, 0]], [[1, 1, 1], [1, 0, 0], [1, 1, 0]]),
        ("left", [[5, 6, 7], [0, 0, 8], [0, 9, 10]], [[1, 1, 1], [0, 0, 1], [0, 1, 1]]),
    ]:
        got_ids, got_mask = ex.pad_batch(batch, pad_id=0, padding_side=side)
        label = f"sequences {batch}, pad_id=0, padding_side={side!r}"
        expect_same_ints(got_ids, torch.tensor(ids), label, "input_ids", "left padding puts the pads before the tokens")
        expect_same_ints(got_mask, torch.tensor(mask), label, "attention_mask", "1 for real tokens, 0 for padding")


@checks("pad_batch")
def random_batches_match_pad_sequence(ex):
    """random batches (lengths 0 to 12, batch of 1 to 6, both sides, with and without max_length) equal pad_sequence"""
    for trial in range(12):
        batch = [
            [random.randrange(1, 500) for _ in range(random.randrange(0, 13))] for _ in range(random.randint(1, 6))
        ]
        batch[0].append(7)  # at least one non-empty row
        side = ("right", "left")[trial % 2]
        max_length = (None, 4, 1)[trial % 3]
        pad_id = random.choice([0, 3, 128001])
        ids, mask = reference_pad(batch, pad_id, side, max_length)
        got_ids, got_mask = ex.pad_batch(batch, pad_id, padding_side=side, max_length=max_length)
        label = f"lengths {[len(s) for s in batch]}, pad_id={pad_id}, side={side!r}, max_length={max_length}"
        expect_same_ints(
            got_ids, ids, label, "input_ids", "T = longest row after truncation; truncation keeps the first tokens"
        )
        expect_same_ints(got_mask, mask, label, "attention_mask", "mask the padded places only")


@checks("pad_batch")
def eos_used_as_pad_stays_real(ex):
    """pad_id equal to a real token (eos reused as padding): the real eos keeps mask 1"""
    eos = 2
    batch = [[11, 12, eos], [13, eos], [eos, 14, 15, 16, eos]]
    for side in ("right", "left"):
        ids, mask = reference_pad(batch, eos, side, None)
        got_ids, got_mask = ex.pad_batch(batch, pad_id=eos, padding_side=side)
        label = f"sequences {batch}, pad_id={eos} (= eos), side={side!r}"
        expect_same_ints(got_ids, ids, label, "input_ids", "fill with pad_id, then write the rows")
        expect_same_ints(
            got_mask, mask, label, "attention_mask", "build the mask from the lengths, not from ids != pad_id"
        )


@checks("pad_batch")
def position_ids_match_the_rule(ex):
    """position_ids of left-, right-padded and gappy masks equal the loop spec (cumulative count, 1 at padding)"""
    masks = [
        torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]]),
        torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]),
        torch.tensor([[1, 0, 1, 1, 0, 1]]),
        (torch.rand(4, 9) < 0.7).long(),
        (torch.rand(3, 6) < 0.5),  # a boolean mask is a mask too
        torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),  # and so is a float one (some pipelines keep it float)
    ]
    for mask in masks:
        got = ex.position_ids(mask)
        label = describe(attention_mask=mask) + f" {mask.long().tolist()}"
        expect_same_ints(
            got,
            reference_positions(mask),
            label,
            "position_ids",
            "count real tokens only (cumsum of the mask minus 1); a left-padded row starts at 0 at its first token",
        )


@checks("pad_batch")
def bad_arguments_refused(ex):
    """an empty batch, padding_side='middle', max_length=0: ValueError"""
    for call, label in [
        (lambda: ex.pad_batch([], 0), "sequences []"),
        (lambda: ex.pad_batch([[1, 2]], 0, padding_side="middle"), "padding_side='middle'"),
        (lambda: ex.pad_batch([[1, 2]], 0, max_length=0), "max_length=0"),
    ]:
        expect_value_error(call, label, "validate the arguments first and say what was expected")
    ids, mask = ex.pad_batch([[], []], 0)
    expect(
        tuple(ids.shape) == (2, 0) and tuple(mask.shape) == (2, 0),
        "a batch of empty sequences is a (B, 0) batch",
        input="sequences [[], []]",
        expected="(2, 0) and (2, 0)",
        got=f"{tuple(ids.shape)} and {tuple(mask.shape)}",
        hint="T is the longest length, which can be 0",
    )


# ------------------------------------------------------------------------------------------ model_config

LLAMA3_8B = dict(
    vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, intermediate_size=14336
)


@cache
def hf_parameter_count(fields: tuple) -> int:
    f = dict(fields)
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = tiny_llama_config(
            vocab_size=f["vocab_size"],
            hidden_size=f["hidden_size"],
            num_hidden_layers=f["num_layers"],
            num_attention_heads=f["num_heads"],
            num_key_value_heads=f["num_kv_heads"] or f["num_heads"],
            head_dim=f["hidden_size"] // f["num_heads"],
            intermediate_size=f["intermediate_size"],
            tie_word_embeddings=f["tie_embeddings"],
        )
        with torch.device("meta"):
            model = transformers_module().LlamaForCausalLM(config)
        return sum(p.numel() for p in model.parameters())


@checks("model_config")
def fields_defaults_and_head_dim(ex):
    """a frozen dataclass: Llama-3-8B's fields, num_kv_heads defaulting to num_heads, head_dim = hidden / heads"""
    config = ex.ModelConfig(**LLAMA3_8B)
    expect(dataclasses.is_dataclass(config), "ModelConfig is not a dataclass", hint="keep @dataclasses.dataclass")
    label = "ModelConfig(Llama-3-8B: hidden 4096, 32 heads, 8 KV heads)"
    expect(
        config.head_dim == 128 and isinstance(config.head_dim, int),
        "head_dim",
        input=label,
        expected="128 (an int: it is a tensor size)",
        got=repr(config.head_dim),
        hint="head_dim = hidden_size // num_heads (integer division; the query heads, not the KV heads)",
    )
    mha = ex.ModelConfig(vocab_size=100, hidden_size=48, num_layers=2, num_heads=6, intermediate_size=96)
    expect(
        mha.num_kv_heads == 6,
        "num_kv_heads=None must become num_heads",
        input="ModelConfig(num_heads=6)",
        expected="6",
        got=repr(mha.num_kv_heads),
        hint="set it in __post_init__ with object.__setattr__",
    )
    expect(
        mha
        == ex.ModelConfig(
            vocab_size=100, hidden_size=48, num_layers=2, num_heads=6, intermediate_size=96, num_kv_heads=6
        ),
        "a config with num_kv_heads=None must equal the same config with num_kv_heads=num_heads",
        input=repr(mha),
    )
    try:
        config.hidden_size = 1
        frozen = False
    except dataclasses.FrozenInstanceError:
        frozen = True
    expect(
        frozen,
        "assigning config.hidden_size succeeded",
        input=label,
        expected="FrozenInstanceError",
        got="the assignment went through",
        hint="keep frozen=True",
    )
    smaller = dataclasses.replace(config, num_layers=2)
    expect(
        smaller.num_layers == 2 and smaller.num_kv_heads == 8,
        "dataclasses.replace(config, num_layers=2)",
        input=label,
        got=repr(smaller),
    )


@checks("model_config")
def invalid_configs_refused(ex):
    """hidden not divisible by heads, heads not divisible by KV heads, zero or negative sizes: ValueError"""
    base = dict(vocab_size=64, hidden_size=48, num_layers=2, num_heads=6, intermediate_size=96)
    for change in [
        dict(hidden_size=50),
        dict(num_kv_heads=4),
        dict(num_kv_heads=12),
        dict(vocab_size=0),
        dict(num_layers=0),
        dict(num_heads=-6),
        dict(intermediate_size=0),
        dict(num_kv_heads=0),
    ]:
        expect_value_error(
            lambda c=change: ex.ModelConfig(**{**base, **c}),
            f"ModelConfig(hidden 48, 6 heads, 2 layers, V 64, f 96) with {change}",
            "validate in __post_init__: sizes >= 1, hidden % heads == 0, heads % kv_heads == 0",
        )


@checks("model_config")
def parameter_count_matches_llama(ex):
    """num_parameters() equals LlamaForCausalLM's parameter count (MHA, GQA, MQA, tied head) and 8,030,261,248"""
    cases = [
        dict(
            vocab_size=128,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=160,
            tie_embeddings=False,
        ),
        dict(
            vocab_size=97,
            hidden_size=48,
            num_layers=3,
            num_heads=6,
            num_kv_heads=None,
            intermediate_size=80,
            tie_embeddings=True,
        ),
        dict(
            vocab_size=50,
            hidden_size=96,
            num_layers=1,
            num_heads=8,
            num_kv_heads=1,
            intermediate_size=200,
            tie_embeddings=False,
        ),
    ]
    for fields in cases:
        got = ex.ModelConfig(**fields).num_parameters()
        expected = hf_parameter_count(tuple(sorted(fields.items())))
        expect(
            got == expected,
            "num_parameters() differs from LlamaForCausalLM",
            input=str(fields),
            expected=f"{expected:,}",
            got=f"{got:,}" if isinstance(got, int) else repr(got),
            hint="W_k and W_v are (num_kv_heads * head_dim, d); a tied head adds nothing; two norms per layer",
        )
    got = ex.ModelConfig(**LLAMA3_8B).num_parameters()
    expect(
        got == 8_030_261_248,
        "Llama-3-8B's parameter count",
        input=str(LLAMA3_8B),
        expected="8,030,261,248",
        got=f"{got:,}" if isinstance(got, int) else repr(got),
        hint="section 3's formula",
    )


@checks("model_config")
def from_dict_round_trip_and_unknown_keys(ex):
    """from_dict(asdict(c)) == c through JSON; an unknown key ('num_head') is refused and named"""
    config = ex.ModelConfig(**LLAMA3_8B, tie_embeddings=True)
    again = ex.ModelConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(config))))
    expect(
        again == config,
        "from_dict(asdict(config)) through JSON is not the same config",
        input=repr(config),
        got=repr(again),
    )
    typo = {**LLAMA3_8B, "num_head": 8}
    del typo["num_heads"]
    try:
        ex.ModelConfig.from_dict({**LLAMA3_8B, "num_head": 8})
        refused, message = False, "accepted"
    except ValueError as error:
        refused, message = True, str(error)
    expect(
        refused and "num_head" in message,
        "an unknown key must raise ValueError naming it",
        input="from_dict({... 'num_head': 8})",
        expected="ValueError mentioning 'num_head'",
        got=message,
        hint="compare the keys with dataclasses.fields(cls) and refuse the others; never drop them silently",
    )
    expect_refused(
        lambda: ex.ModelConfig.from_dict(typo),
        "from_dict with 'num_head' instead of 'num_heads'",
        "unknown key 'num_head' (and the missing num_heads)",
        errors=(ValueError, TypeError),
    )


# ------------------------------------------------------------------------------------------ token_blocks


def reference_blocks(documents, block_size, eos_id):
    """Non-streaming: the whole corpus at once, then the windows starting at 0, block_size, 2 block_size, ..."""
    stream = torch.tensor([token for doc in documents for token in [*doc, eos_id]], dtype=torch.int64)
    count = (len(stream) - 1) // block_size if len(stream) > block_size else 0
    return [
        (stream[k * block_size : (k + 1) * block_size], stream[k * block_size + 1 : (k + 1) * block_size + 1])
        for k in range(count)
    ]


class CountingDocuments:
    """An iterator over documents that records how many were pulled."""

    def __init__(self, documents):
        self.documents, self.pulled = list(documents), 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pulled == len(self.documents):
            raise StopIteration
        self.pulled += 1
        return self.documents[self.pulled - 1]


def expect_blocks(got_blocks, expected, label):
    expect(
        len(got_blocks) == len(expected),
        "wrong number of blocks",
        input=label,
        expected=str(len(expected)),
        got=str(len(got_blocks)),
        hint="blocks start every block_size tokens and share one token; the incomplete last one is dropped",
    )
    for k, ((x, y), (ex_x, ex_y)) in enumerate(zip(got_blocks, expected, strict=True)):
        for name, got, want in (("x", x, ex_x), ("y", y, ex_y)):
            expect_tensor(got, shape=tuple(want.shape), dtype=torch.int64, input=f"{label}, block {k} {name}")
            expect(
                torch.equal(got, want),
                f"block {k}: {name} differs",
                input=label,
                expected=str(want.tolist()),
                got=str(got.tolist()),
                hint="eos after every document; y is x shifted by one; the next block starts at this block's last token",
            )


@checks("token_blocks")
def small_stream_by_hand(ex):
    """documents [[1, 2, 3], [4, 5]], eos 0, block_size 2: x/y = [1 2]/[2 3], [3 0]/[0 4], [4 5]/[5 0]"""
    got = list(ex.token_blocks([[1, 2, 3], [4, 5]], block_size=2, eos_id=0))
    expected = [(torch.tensor(x), torch.tensor(y)) for x, y in [([1, 2], [2, 3]), ([3, 0], [0, 4]), ([4, 5], [5, 0])]]
    expect_blocks(got, expected, "documents [[1, 2, 3], [4, 5]], block_size=2, eos_id=0")


@checks("token_blocks")
def random_corpora_match_slicing(ex):
    """random corpora (empty documents, block sizes 1, 5, 16, one larger than the corpus) equal slicing of the whole"""
    for block_size in (1, 5, 16, 400):
        documents = [[random.randrange(3, 1000) for _ in range(random.randrange(0, 30))] for _ in range(9)]
        documents[2] = []
        got = list(ex.token_blocks(iter(documents), block_size, eos_id=2))
        label = f"9 documents of lengths {[len(d) for d in documents]}, block_size={block_size}, eos_id=2"
        expect_blocks(got, reference_blocks(documents, block_size, 2), label)


@checks("token_blocks")
def reads_lazily(ex):
    """a generator: nothing is read before next(); the first block pulls only the documents it needs"""
    documents = [[random.randrange(3, 99) for _ in range(4)] for _ in range(500)]  # 5 tokens each with eos
    source = CountingDocuments(documents)
    stream = ex.token_blocks(source, block_size=12, eos_id=1)
    expect(
        source.pulled == 0,
        "documents were read before the first next()",
        input="500 documents of 4 tokens",
        expected="0 read",
        got=f"{source.pulled} read",
        hint="use yield: the body runs at the first next()",
    )
    x, y = next(stream)
    expect(
        source.pulled == 3,
        "the first block of 13 tokens needs 3 documents of 5 tokens (with eos)",
        input="500 documents of 4 tokens, block_size=12",
        expected="3 documents read",
        got=f"{source.pulled} documents read",
        hint="pull one document at a time and yield as soon as block_size + 1 tokens are buffered",
    )
    expect_blocks([(x, y)], reference_blocks(documents[:3], 12, 1), "the first block")


@checks("token_blocks")
def bad_block_size_refused(ex):
    """block_size 0 or -3: ValueError at the first next()"""
    for block_size in (0, -3):
        expect_value_error(
            lambda b=block_size: next(ex.token_blocks([[1, 2, 3]], b, 0)),
            f"block_size={block_size}",
            "check block_size >= 1 at the top of the generator",
        )
