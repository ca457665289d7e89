"""Checks for p01.kv_cache_math. References: the bytes of the `DynamicCache` that `transformers` allocates in a real
forward pass of small Llama, Qwen3, Mixtral and DeepSeek-V3 models (fp32, fp16, bf16; batch 1 and more, odd
lengths); the published configurations in closed form; a brute-force allocator that hands out blocks one at a time;
and a loop over the sequences of a batch for the bytes of a decoding step."""

import random
import warnings
from functools import cache

import torch

from llm_algo.check import Checks, expect, expect_close, expect_exact_int, expect_value_error, reference_only
from llm_algo.references.hf import config_of, describe_config, returned_cache, transformers_module

checks = Checks("p01.kv_cache_math")
checks.restrict(
    "kv_bytes_per_token",
    forbid=("transformers",),
    instead="compute the bytes from the config's fields (the cache transformers allocates is the checks' reference)",
)


@cache
def allocated_bytes_per_token(kind: str, fields: tuple, dtype: torch.dtype, batch: int, seq_len: int) -> int:
    """Run a small model in `dtype` over (batch, seq_len) tokens with use_cache=True and divide the bytes of every
    tensor its DynamicCache holds by the number of tokens."""
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_of(kind, dict(fields))
        model = transformers_module().AutoModelForCausalLM.from_config(config).to(dtype)
        ids = torch.randint(0, config.vocab_size, (batch, seq_len))
        with torch.no_grad():
            output = model(ids, use_cache=True)
        kv = returned_cache(output)
        total = sum(layer.keys.nbytes + layer.values.nbytes for layer in kv.layers)
    assert total % (batch * seq_len) == 0, "the cache is not a whole number of bytes per token"
    return total // (batch * seq_len)


# ------------------------------------------------------------------------------------------ kv_bytes_per_token

HINT_GQA = "2 (key and value) * num_hidden_layers * num_key_value_heads * head_dim * element size of dtype"
HINT_MLA = "MLA caches kv_lora_rank + qk_rope_head_dim elements per layer (the latent and the shared rotary key)"

SMALL = dict(
    vocab_size=64,
    hidden_size=48,
    intermediate_size=40,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
)
SMALL_MLA = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_hidden_layers=3,
    first_k_dense_replace=1,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=12,
    kv_lora_rank=8,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=6,
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
)


@checks("kv_bytes_per_token")
def matches_dynamic_cache_gqa(ex):
    """small Llama (MHA and GQA), Qwen3 (head_dim != d/H) and Mixtral: the bytes DynamicCache allocates per token"""
    cases = [
        ("LlamaConfig", {**SMALL, "num_key_value_heads": 6}, torch.float32, 1, 5),
        ("LlamaConfig", SMALL, torch.bfloat16, 3, 7),
        ("LlamaConfig", {**SMALL, "num_key_value_heads": 1, "num_hidden_layers": 2}, torch.float16, 2, 9),
        ("Qwen3Config", {**SMALL, "head_dim": 20}, torch.bfloat16, 2, 3),
        ("MixtralConfig", {**SMALL, "num_local_experts": 4, "num_experts_per_tok": 2}, torch.float32, 1, 6),
    ]
    for kind, fields, dtype, batch, seq_len in cases:
        want = allocated_bytes_per_token(kind, tuple(sorted(fields.items())), dtype, batch, seq_len)
        got = ex.kv_bytes_per_token(config_of(kind, fields), dtype)
        label = f"{describe_config(kind, fields)}, {dtype}; DynamicCache after a forward of batch {batch} x {seq_len}"
        expect_exact_int(got, want, label, HINT_GQA, "bytes per token")


@checks("kv_bytes_per_token")
def matches_dynamic_cache_mla(ex):
    """small DeepSeek-V3 models (MLA, with and without a query bottleneck): the bytes DynamicCache allocates"""
    cases = [
        (SMALL_MLA, torch.bfloat16, 2, 5),
        (
            {**SMALL_MLA, "q_lora_rank": None, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "num_hidden_layers": 2},
            torch.float32,
            1,
            7,
        ),
    ]
    for fields, dtype, batch, seq_len in cases:
        want = allocated_bytes_per_token("DeepseekV3Config", tuple(sorted(fields.items())), dtype, batch, seq_len)
        got = ex.kv_bytes_per_token(config_of("DeepseekV3Config", fields), dtype)
        label = f"{describe_config('DeepseekV3Config', fields)}, {dtype}; DynamicCache of batch {batch} x {seq_len}"
        expect_exact_int(got, want, label, HINT_MLA, "bytes per token")


@checks("kv_bytes_per_token")
def published_configs(ex):
    """Llama-2-7B 512 KiB, Llama-3-8B 128 KiB, Llama-3-70B 320 KiB, DeepSeek-V3 70272 B per token in bf16; fp8 halves"""
    cases = [
        (
            "Llama-2-7B",
            "LlamaConfig",
            dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32),
            2 * 32 * 32 * 128,
        ),
        (
            "Llama-3-8B",
            "LlamaConfig",
            dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8),
            2 * 32 * 8 * 128,
        ),
        (
            "Llama-3-70B",
            "LlamaConfig",
            dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8),
            2 * 80 * 8 * 128,
        ),
        (
            "Qwen3-8B",
            "Qwen3Config",
            dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128),
            2 * 36 * 8 * 128,
        ),
        (
            "DeepSeek-V3",
            "DeepseekV3Config",
            dict(
                hidden_size=7168, num_hidden_layers=61, num_attention_heads=128, kv_lora_rank=512, qk_rope_head_dim=64
            ),
            61 * (512 + 64),
        ),
    ]
    for name, kind, fields, elements in cases:
        config = config_of(kind, fields)
        for dtype, size in ((torch.bfloat16, 2), (torch.float8_e4m3fn, 1), (torch.float32, 4)):
            got = ex.kv_bytes_per_token(config, dtype)
            hint = HINT_MLA if kind == "DeepseekV3Config" else HINT_GQA
            expect_exact_int(
                got, elements * size, f"{name} ({describe_config(kind, fields)}), {dtype}", hint, "bytes per token"
            )


@checks("kv_bytes_per_token")
def refuses_unknown_layouts(ex):
    """a model type whose cache layout the function does not know (GPT-2, Mamba) raises ValueError"""
    ex.kv_bytes_per_token(config_of("LlamaConfig", SMALL), torch.bfloat16)  # first: it works at all
    for kind in ("GPT2Config", "MambaConfig"):
        config = config_of(kind, {})
        try:
            result = ex.kv_bytes_per_token(config, torch.bfloat16)
        except (ValueError, AttributeError) as error:
            expect(
                isinstance(error, ValueError),
                "an unknown model type failed with an AttributeError",
                input=f"{kind}() (model_type {config.model_type!r})",
                expected="ValueError",
                got=f"AttributeError: {error}",
                hint="check config.model_type first and raise ValueError otherwise",
            )
            continue
        expect(
            False,
            "an unknown model type was accepted",
            input=f"{kind}() (model_type {config.model_type!r})",
            expected="ValueError",
            got=repr(result),
            hint="raise ValueError for model types you do not know",
        )


# ------------------------------------------------------------------------------------------ max_concurrent_sequences


def allocate_block_by_block(budget: int, weights: int, per_token: int, seq_len: int, block: int) -> int:
    """The spec as a loop: admit sequences one at a time, each taking blocks until it holds seq_len tokens."""
    free, admitted = budget - weights, 0
    while True:
        need, held = 0, 0
        while held < seq_len:
            need += block * per_token
            held += block
        if need > free:
            return admitted
        free -= need
        admitted += 1


HINT_BLOCKS = "(budget - weights) // (ceil(seq_len / block_size) * block_size * bytes_per_token), and 0 if negative"


@checks("max_concurrent_sequences")
def brute_force_allocator(ex):
    """random budgets, sizes and block sizes: equal to admitting sequences block by block"""
    rng = random.Random(torch.initial_seed())
    for _ in range(40):
        per_token = rng.choice([1, 3, 64, 1000, 131072])
        seq_len = rng.randrange(1, 300)
        block = rng.choice([1, 8, 16, 32, 7])
        weights = rng.randrange(0, 10**6) * per_token
        budget = weights + rng.randrange(0, 40) * seq_len * per_token + rng.randrange(0, block * per_token + 1)
        want = allocate_block_by_block(budget, weights, per_token, seq_len, block)
        got = ex.max_concurrent_sequences(budget, weights, per_token, seq_len, block)
        expect_exact_int(
            got,
            want,
            f"budget={budget}, weights={weights}, bytes_per_token={per_token}, seq_len={seq_len}, block_size={block}",
            HINT_BLOCKS,
            "number of sequences",
        )


@checks("max_concurrent_sequences")
def llama3_8b_on_an_h100(ex):
    """Llama-3-8B bf16 in 72 GB: 52 sequences of 8192 tokens, 51 of 8193 (one more block each), 6 of 65536"""
    cases = [(8192, 16, 52), (8193, 16, 51), (65536, 16, 6), (8192, 1, 52), (1000, 16, 423)]
    for seq_len, block, want in cases:
        assert allocate_block_by_block(72_000_000_000, 16_060_000_000, 131072, seq_len, block) == want
        got = ex.max_concurrent_sequences(72_000_000_000, 16_060_000_000, 131072, seq_len, block)
        expect_exact_int(
            got,
            want,
            f"budget 72e9 B, weights 16.06e9 B, 131072 B/token, seq_len={seq_len}, block={block}",
            HINT_BLOCKS,
            "number of sequences",
        )


@checks("max_concurrent_sequences")
def nothing_fits_and_exact_fits(ex):
    """weights larger than the budget give 0 (not a negative count); exact fits; one-token sequences; an empty budget"""
    cases = [
        (dict(budget_bytes=10**9, weight_bytes=2 * 10**9, bytes_per_token=1024, seq_len=100, block_size=16), 0),
        (dict(budget_bytes=10**9, weight_bytes=10**9, bytes_per_token=1024, seq_len=100, block_size=16), 0),
        (dict(budget_bytes=5 * 112 * 1024, weight_bytes=0, bytes_per_token=1024, seq_len=100, block_size=16), 5),
        (dict(budget_bytes=5 * 112 * 1024 - 1, weight_bytes=0, bytes_per_token=1024, seq_len=100, block_size=16), 4),
        (dict(budget_bytes=3 * 96 * 10, weight_bytes=0, bytes_per_token=10, seq_len=96, block_size=16), 3),
        (dict(budget_bytes=1, weight_bytes=0, bytes_per_token=1, seq_len=1, block_size=1), 1),
        (dict(budget_bytes=0, weight_bytes=0, bytes_per_token=1, seq_len=1, block_size=1), 0),
        (dict(budget_bytes=1000, weight_bytes=0, bytes_per_token=3, seq_len=1, block_size=16), 20),
    ]
    for args, want in cases:
        expect_exact_int(
            ex.max_concurrent_sequences(**args),
            want,
            str(args),
            HINT_BLOCKS + " (100 tokens in blocks of 16 take 7 blocks = 112 tokens)",
            "number of sequences",
        )


@checks("max_concurrent_sequences")
def refuses_impossible_sizes(ex):
    """seq_len or block_size below 1, zero bytes per token, or negative byte counts raise ValueError"""
    ex.max_concurrent_sequences(10**6, 0, 10, 5, 16)  # first: it works at all
    bad = [
        (10**6, 0, 10, 0, 16),
        (10**6, 0, 10, 5, 0),
        (10**6, 0, 0, 5, 16),
        (-1, 0, 10, 5, 16),
        (10**6, -5, 10, 5, 16),
    ]
    for args in bad:
        expect_value_error(
            lambda args=args: ex.max_concurrent_sequences(*args),
            f"max_concurrent_sequences{args}",
            "check every size first",
        )


# ------------------------------------------------------------------------------------------ decode_step_bound


def step_by_loop(weights: int, per_token: int, lens: list, bandwidth: float) -> tuple[int, float]:
    moved = weights
    for length in lens:
        moved += length * per_token
    seconds = moved / bandwidth
    return moved, len(lens) / seconds


def expect_step(got, want: tuple, label: str, hint: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "expected (bytes, tokens per second)",
        input=label,
        expected="a tuple of two",
        got=repr(got)[:120],
        hint="return step_bytes, tokens_per_second",
    )
    expect_exact_int(got[0], want[0], label, hint, "bytes per step")
    expect_close(
        torch.tensor(float(got[1]), dtype=torch.float64),
        torch.tensor(want[1], dtype=torch.float64),
        input=label,
        what="tokens per second",
        hint=hint,
    )


HINT_STEP = "bytes = weights + bytes_per_token * sum(context_lens); tokens/s = batch size * bandwidth / bytes"


@checks("decode_step_bound")
def loop_over_the_batch(ex):
    """random batches (1 to 64 sequences, mixed lengths): equal to adding up the weights and each cache in a loop"""
    rng = random.Random(torch.initial_seed())
    for _ in range(20):
        lens = [rng.randrange(0, 40000) for _ in range(rng.choice([1, 2, 7, 64]))]
        weights, per_token = rng.randrange(10**8, 10**11), rng.choice([70272, 131072, 327680])
        bandwidth = rng.choice([0.9e12, 2.0e12, 3.35e12, 4.8e12])
        got = ex.decode_step_bound(weights, per_token, lens, bandwidth)
        expect_step(
            got,
            step_by_loop(weights, per_token, lens, bandwidth),
            f"weights={weights}, bytes_per_token={per_token}, {len(lens)} sequences, bandwidth={bandwidth:g}",
            HINT_STEP,
        )


@checks("decode_step_bound")
def llama3_8b_decoding_on_an_h100(ex):
    """Llama-3-8B bf16 on an H100 (3.35 TB/s): one 8k sequence at most 195.5 tokens/s; 32 of them 66.4 each"""
    weights, per_token, bandwidth = 16_060_000_000, 131072, 3.35e12
    for batch, per_sequence in ((1, 195.52), (32, 66.44)):
        lens = [8192] * batch
        got = ex.decode_step_bound(weights, per_token, lens, bandwidth)
        want = step_by_loop(weights, per_token, lens, bandwidth)
        expect_step(
            got,
            want,
            f"{batch} x 8192-token contexts, weights 16.06e9 B, 131072 B/token, 3.35e12 B/s",
            "the weights are read once per step for the whole batch; every sequence's cache once",
        )
        assert abs(want[1] / batch - per_sequence) < 0.01, "the lesson's published example no longer holds"


@checks("decode_step_bound")
def batching_amortises_weights_only(ex):
    """doubling a batch of empty contexts doubles tokens/s; each added sequence adds exactly its own cache"""
    weights, per_token, bandwidth = 10**9, 1000, 1e12
    one = ex.decode_step_bound(weights, per_token, [0], bandwidth)
    two = ex.decode_step_bound(weights, per_token, [0, 0], bandwidth)
    expect_close(
        torch.tensor(two[1], dtype=torch.float64),
        torch.tensor(2 * one[1], dtype=torch.float64),
        input="contexts [0] then [0, 0]: only the weights move",
        what="tokens per second",
        hint="read the weights once per step, not once per sequence",
    )
    base = ex.decode_step_bound(weights, per_token, [100, 250], bandwidth)[0]
    more = ex.decode_step_bound(weights, per_token, [100, 250, 4000], bandwidth)[0]
    expect_exact_int(
        more - base,
        4000 * per_token,
        "contexts [100, 250] then [100, 250, 4000]",
        "a sequence of 4000 cached tokens adds 4000 * bytes_per_token to the step",
        "bytes a sequence adds",
    )


@checks("decode_step_bound")
def refuses_bad_batches(ex):
    """an empty batch, a negative length, no weights, a negative bytes_per_token or bandwidth <= 0 raise ValueError"""
    ex.decode_step_bound(10, 1, [1], 1.0)  # first: it works at all
    for args in ((1, 1, [0], 1.0), (10, 0, [5], 1.0)):  # the smallest model, a model without a KV cache
        got = ex.decode_step_bound(*args)
        expect_step(
            got,
            step_by_loop(*args),
            f"decode_step_bound{args}",
            "weight_bytes >= 1 and bytes_per_token >= 0 are valid: refuse only below that",
        )
    bad = [
        (0, 1, [5], 1.0),
        (10, 1, [], 1.0),
        (10, 1, [5, -1], 1.0),
        (-10, 1, [5], 1.0),
        (10, -1, [5], 1.0),
        (10, 1, [5], 0.0),
        (10, 1, [5], -3.0),
    ]
    for args in bad:
        expect_value_error(
            lambda args=args: ex.decode_step_bound(*args),
            f"decode_step_bound{args}",
            "check the batch, the lengths, the byte counts and the bandwidth first",
        )
