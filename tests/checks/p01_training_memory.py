"""Checks for p01.training_memory. References: the state `torch.optim.AdamW` allocates on a ZeRO shard of a real bf16
model (flat fp32 master buffer padded to a multiple of the data-parallel size); the ZeRO paper's Figure 1; a loop
that shards the states one at a time; and the tensors autograd saves in forward passes of `transformers`'
`LlamaDecoderLayer` (eager attention; fp32, bf16, fp16; MHA, GQA, head_dim set), counted as distinct storages with
`torch.autograd.graph.saved_tensors_hooks`, without and with `torch.utils.checkpoint` on every layer."""

import functools
import random
import warnings
from functools import cache

import torch

from llm_algo.check import Checks, expect, expect_exact_int, expect_value_error, one_thread, reference_only
from llm_algo.references.hf import transformers_module

checks = Checks("p01.training_memory")
checks.restrict(
    "layer_activation_bytes",
    "activation_memory",
    forbid=("transformers",),
    instead="count from the config's fields (the layers transformers builds are the checks' reference)",
)


# ------------------------------------------------------------------------------------------ model_state_bytes

HINT_STATES = (
    "params 2 B (sharded from ZeRO-3), grads 2 B (from ZeRO-2), optimizer 12 B = fp32 master + m + v (from ZeRO-1); "
    "a shard holds ceil(num_params / dp_size) elements"
)


def expect_states(got, want: dict, label: str) -> None:
    expect(
        isinstance(got, dict) and set(got) == {"params", "grads", "optimizer"},
        "the result is not a dict with the keys 'params', 'grads', 'optimizer'",
        input=label,
        expected="{'params': ..., 'grads': ..., 'optimizer': ...}",
        got=repr(got)[:160],
        hint="return a dict of three ints",
    )
    for key in ("params", "grads", "optimizer"):
        expect_exact_int(got[key], want[key], f"{label}, key {key!r}", HINT_STATES, f"{key} bytes")


def states_one_by_one(num_params: int, stage: int, dp: int) -> dict:
    """The spec as a loop: each state with its bytes per element and the first stage that shards it; a sharded state
    is a flat buffer padded with zeros until dp GPUs get equal slices."""
    out = {}
    for key, element, sharded_from in (("params", 2, 3), ("grads", 2, 2), ("optimizer", 12, 1)):
        elements = num_params
        if stage >= sharded_from:
            padded = num_params
            while padded % dp:
                padded += 1
            elements = padded // dp
        out[key] = elements * element
    return out


@checks("model_state_bytes")
def zero_paper_figure_1(ex):
    """the ZeRO paper's Figure 1: 7.5 B parameters on 64 GPUs take 120, 31.4, 16.6 and 1.9 GB per GPU"""
    published = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}  # GB, rounded to one decimal in the paper
    for stage, gb in published.items():
        got = ex.model_state_bytes(7_500_000_000, stage, 64)
        expect_states(got, states_one_by_one(7_500_000_000, stage, 64), f"num_params=7.5e9, zero_stage={stage}, dp=64")
        total = sum(got.values()) / 1e9
        expect(
            round(total, 1) == gb,
            "the total differs from the ZeRO paper",
            input=f"num_params=7.5e9, zero_stage={stage}, dp_size=64",
            expected=f"{gb} GB",
            got=f"{total:.3f} GB",
            hint=HINT_STATES,
        )


@one_thread()
@checks("model_state_bytes")
def matches_adamw_on_a_shard(ex):
    """a real bf16 model; fp32 master shard of the padded flat buffer; torch.optim.AdamW's state after one step"""
    torch.manual_seed(torch.initial_seed() % 2**31)
    model = torch.nn.Sequential(torch.nn.Linear(13, 7), torch.nn.GELU(), torch.nn.Linear(7, 5)).to(torch.bfloat16)
    model(torch.randn(4, 13, dtype=torch.bfloat16)).float().square().sum().backward()
    params = list(model.parameters())
    num_params = sum(p.numel() for p in params)  # 13*7 + 7 + 7*5 + 5 = 138
    for stage, dp in ((0, 1), (0, 4), (1, 4), (2, 5), (3, 5), (3, 7), (2, 138), (3, 200), (1, 1)):
        flat = torch.cat([p.detach().float().reshape(-1) for p in params])
        padded = torch.cat([flat, flat.new_zeros((-flat.numel()) % dp)])
        shard = padded.view(dp, -1)[0].clone().requires_grad_()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        grad_shard = torch.cat([grads, grads.new_zeros((-grads.numel()) % dp)]).view(dp, -1)[0]
        master = shard if stage >= 1 else flat.clone().requires_grad_()
        master.grad = (grad_shard if stage >= 1 else grads).float()
        optimizer = torch.optim.AdamW([master], lr=1e-3)
        optimizer.step()
        state = optimizer.state[master]
        optimizer_bytes = master.nbytes + state["exp_avg"].nbytes + state["exp_avg_sq"].nbytes
        want = {
            "params": (padded.view(dp, -1)[0].numel() if stage >= 3 else num_params) * params[0].element_size(),
            "grads": grad_shard.nbytes if stage >= 2 else grads.nbytes,
            "optimizer": optimizer_bytes,
        }
        expect_states(
            ex.model_state_bytes(num_params, stage, dp),
            want,
            f"a bf16 MLP of {num_params} parameters, zero_stage={stage}, dp_size={dp} (AdamW on the shard)",
        )


@checks("model_state_bytes")
def every_stage_and_size(ex):
    """random sizes (not multiples of dp), dp from 1 to 1024, every stage: equal to sharding state by state"""
    rng = random.Random(torch.initial_seed())
    cases = [(1, 0, 1), (1, 3, 8), (10, 3, 4), (10, 2, 4), (10, 1, 4), (8, 3, 4), (7, 3, 1000)]
    cases += [(rng.randrange(1, 10**10), rng.randrange(4), rng.choice([1, 2, 3, 8, 64, 1024])) for _ in range(40)]
    for num_params, stage, dp in cases:
        expect_states(
            ex.model_state_bytes(num_params, stage, dp),
            states_one_by_one(num_params, stage, dp),
            f"num_params={num_params}, zero_stage={stage}, dp_size={dp}",
        )


@checks("model_state_bytes")
def refuses_impossible_arguments(ex):
    """no parameters, no GPUs, or a ZeRO stage other than 0-3 raise ValueError"""
    ex.model_state_bytes(1000, 2, 8)  # first: it works at all
    for args in ((0, 1, 8), (-5, 1, 8), (1000, 1, 0), (1000, 1, -2), (1000, 4, 8), (1000, -1, 8)):
        expect_value_error(
            lambda args=args: ex.model_state_bytes(*args),
            "num_params={}, zero_stage={}, dp_size={}".format(*args),
            "check num_params >= 1, dp_size >= 1 and zero_stage in (0, 1, 2, 3) first",
        )


# ------------------------------------------------------------------------------------------ layer_activation_bytes

SMALL = dict(
    vocab_size=64,
    hidden_size=48,
    intermediate_size=40,
    num_hidden_layers=1,
    num_attention_heads=6,
    num_key_value_heads=2,
)
HINT_LAYER = (
    "2 RMSNorms x (B*T*d*(4 + 2s) + 4*B*T) + q, k, v, o: 4*s*B*T*H*head_dim (k and v repeated to H heads) "
    "+ probabilities (4 + s, or 4 in fp32)*B*H*T*T + MLP 4*s*B*T*d_ff"
)


def make_config(fields: dict):
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers_module().LlamaConfig(attn_implementation="eager", **fields)


def describe_config(fields: dict) -> str:
    return "LlamaConfig(" + ", ".join(f"{k}={v}" for k, v in fields.items() if k != "vocab_size") + ")"


@cache
def measured(fields: tuple, dtype: torch.dtype, batch: int, seq_len: int, checkpointing: bool) -> dict:
    """Run num_hidden_layers LlamaDecoderLayers on a (batch, seq_len, d) input and backward; count the distinct
    storages autograd saves (parameters and the shared rotary tables left out): 'forward' during the forward pass,
    'recompute' the largest recomputation of one layer during the backward pass (checkpointing only)."""
    with reference_only(), one_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modeling = transformers_module().models.llama.modeling_llama
        config = make_config(dict(fields))
        layers = [modeling.LlamaDecoderLayer(config, i).to(dtype).train() for i in range(config.num_hidden_layers)]
        hidden = torch.randn(batch, seq_len, config.hidden_size, dtype=dtype, requires_grad=True)
        cos, sin = modeling.LlamaRotaryEmbedding(config)(hidden, torch.arange(seq_len)[None])
        skip = {t.untyped_storage().data_ptr() for t in (cos, sin)}
        skip |= {p.untyped_storage().data_ptr() for layer in layers for p in layer.parameters()}
        phase, saved = ["forward"], {}

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in skip:
                saved.setdefault(phase[0], {})[storage.data_ptr()] = storage.nbytes()
            return tensor

        def run_layer(index, x):
            if checkpointing and torch.is_grad_enabled():
                phase[0] = f"recompute {index}"
            return layers[index](x, position_embeddings=(cos, sin))

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            x = hidden
            for index in range(len(layers)):
                step = functools.partial(run_layer, index)
                x = torch.utils.checkpoint.checkpoint(step, x, use_reentrant=True) if checkpointing else step(x)
            x.backward(torch.randn_like(x))  # saves nothing itself
    totals = {key: sum(storages.values()) for key, storages in saved.items()}
    return {
        "forward": totals.get("forward", 0),
        "recompute": max((v for k, v in totals.items() if k.startswith("recompute")), default=0),
    }


LAYER_CASES = [
    (SMALL, torch.float32, 2, 5),
    (SMALL, torch.bfloat16, 2, 5),
    (SMALL, torch.float16, 1, 7),
    ({**SMALL, "num_key_value_heads": 6}, torch.bfloat16, 3, 4),
    ({**SMALL, "num_key_value_heads": 1, "intermediate_size": 24}, torch.float32, 2, 9),
    ({**SMALL, "head_dim": 10}, torch.bfloat16, 2, 3),
    ({**SMALL, "num_attention_heads": 4, "num_key_value_heads": 4}, torch.float16, 2, 1),
]


@checks("layer_activation_bytes")
def matches_saved_tensors_fp32_and_16_bit(ex):
    """one LlamaDecoderLayer in fp32, bf16 and fp16: the bytes autograd saves (saved_tensors_hooks)"""
    for fields, dtype, batch, seq_len in LAYER_CASES[:3]:
        want = measured(tuple(sorted(fields.items())), dtype, batch, seq_len, False)["forward"]
        got = ex.layer_activation_bytes(make_config(fields), batch, seq_len, dtype)
        label = f"{describe_config(fields)}, {dtype}, batch {batch} x {seq_len} tokens; saved_tensors_hooks"
        expect_exact_int(got, want, label, HINT_LAYER, "bytes saved by one layer")


@checks("layer_activation_bytes")
def matches_saved_tensors_heads_and_widths(ex):
    """MHA (K = H), GQA with one KV head, head_dim set apart from d/H, a one-token sequence: measured bytes"""
    for fields, dtype, batch, seq_len in LAYER_CASES[3:]:
        want = measured(tuple(sorted(fields.items())), dtype, batch, seq_len, False)["forward"]
        got = ex.layer_activation_bytes(make_config(fields), batch, seq_len, dtype)
        label = f"{describe_config(fields)}, {dtype}, batch {batch} x {seq_len} tokens; saved_tensors_hooks"
        expect_exact_int(got, want, label, HINT_LAYER, "bytes saved by one layer")


@checks("layer_activation_bytes")
def quadratic_in_sequence_length(ex):
    """bf16, batch 1: the second difference in T is the probabilities' 2 * 6 * H bytes, as the measured layer shows"""
    fields = {**SMALL, "num_attention_heads": 4, "num_key_value_heads": 2}
    lengths = (3, 4, 5)
    want = [measured(tuple(sorted(fields.items())), torch.bfloat16, 1, t, False)["forward"] for t in lengths]
    got = [ex.layer_activation_bytes(make_config(fields), 1, t, torch.bfloat16) for t in lengths]
    for t, g, w in zip(lengths, got, want, strict=True):
        expect_exact_int(
            g, w, f"{describe_config(fields)}, bf16, batch 1 x {t}", HINT_LAYER, "bytes saved by one layer"
        )
    expect(
        got[2] - 2 * got[1] + got[0] == 2 * 6 * 4,
        "the bytes are not quadratic in T with the probabilities' coefficient",
        input=f"{describe_config(fields)}, bf16, T = 3, 4, 5",
        expected=f"second difference {2 * 6 * 4}",
        got=f"{got[2] - 2 * got[1] + got[0]}",
        hint="the (B, H, T, T) probabilities are saved in fp32 and again in bf16",
    )


@checks("layer_activation_bytes")
def refuses_what_the_table_does_not_cover(ex):
    """another model type, attention dropout, an empty batch or sequence, an integer dtype: ValueError"""
    ex.layer_activation_bytes(make_config(SMALL), 1, 4, torch.bfloat16)  # first: it works at all
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mistral = transformers_module().MistralConfig(**SMALL)
    bad = [
        ("MistralConfig (model_type 'mistral')", lambda: ex.layer_activation_bytes(mistral, 1, 4, torch.bfloat16)),
        (
            "LlamaConfig(attention_dropout=0.1)",
            lambda: ex.layer_activation_bytes(make_config({**SMALL, "attention_dropout": 0.1}), 1, 4, torch.bfloat16),
        ),
        ("batch=0", lambda: ex.layer_activation_bytes(make_config(SMALL), 0, 4, torch.bfloat16)),
        ("seq_len=0", lambda: ex.layer_activation_bytes(make_config(SMALL), 1, 0, torch.bfloat16)),
        ("dtype=torch.int32", lambda: ex.layer_activation_bytes(make_config(SMALL), 1, 4, torch.int32)),
    ]
    for label, call in bad:
        expect_value_error(call, label, "validate model_type, attention_dropout, batch, seq_len and dtype first")


# ------------------------------------------------------------------------------------------ activation_memory

HINT_STACK = "no checkpointing: L * layer; checkpointing: L * B*T*d*s (the layer inputs) + one layer recomputed"
STACK_CASES = [
    ({**SMALL, "num_hidden_layers": 3}, torch.bfloat16, 2, 5),
    ({**SMALL, "num_hidden_layers": 2}, torch.float32, 1, 6),
    ({**SMALL, "num_hidden_layers": 4, "num_key_value_heads": 6}, torch.float16, 2, 3),
]


@checks("activation_memory")
def matches_stack_without_checkpointing(ex):
    """2-4 LlamaDecoderLayers, fp32/bf16/fp16: the bytes saved by the whole forward pass"""
    for fields, dtype, batch, seq_len in STACK_CASES:
        want = measured(tuple(sorted(fields.items())), dtype, batch, seq_len, False)["forward"]
        got = ex.activation_memory(make_config(fields), batch, seq_len, dtype, False)
        label = f"{describe_config(fields)}, {dtype}, batch {batch} x {seq_len}, no checkpointing"
        expect_exact_int(got, want, label, HINT_STACK, "activation bytes")


@checks("activation_memory")
def matches_stack_with_checkpointing(ex):
    """torch.utils.checkpoint on every layer: inputs saved by the forward + the largest recomputation in backward"""
    for fields, dtype, batch, seq_len in STACK_CASES:
        m = measured(tuple(sorted(fields.items())), dtype, batch, seq_len, True)
        got = ex.activation_memory(make_config(fields), batch, seq_len, dtype, True)
        label = (
            f"{describe_config(fields)}, {dtype}, batch {batch} x {seq_len}, checkpointing "
            f"(forward saves {m['forward']:,} B, one recomputed layer {m['recompute']:,} B)"
        )
        expect_exact_int(got, m["forward"] + m["recompute"], label, HINT_STACK, "peak activation bytes")


@checks("activation_memory")
def llama3_8b_at_4k(ex):
    """Llama-3-8B, bf16, one 4096-token sequence: about 131 GB without checkpointing, about 5.2 GB with it"""
    fields = dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8
    )
    config = make_config(fields)
    tokens = 4096
    # the per-token terms, then the probabilities, written out for these sizes
    layer = tokens * (2 * (4096 * 8 + 4) + 8 * 4096 + 8 * 14336) + 6 * 32 * tokens * tokens
    for checkpointing, want in ((False, 32 * layer), (True, 32 * tokens * 4096 * 2 + layer)):
        got = ex.activation_memory(config, 1, tokens, torch.bfloat16, checkpointing)
        expect_exact_int(
            got,
            want,
            f"Llama-3-8B ({describe_config(fields)}), bf16, 1 x 4096, checkpointing={checkpointing}",
            HINT_STACK,
            "activation bytes",
        )
    expect_value_error(
        lambda: ex.activation_memory(config, 1, 0, torch.bfloat16, True),
        "seq_len=0, checkpointing=True",
        "validate (through layer_activation_bytes) before computing",
    )
