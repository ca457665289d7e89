"""Checks for p01.params_and_flops. References: `sum(p.numel())` of `transformers` models (Llama, Qwen3, Mixtral,
DeepSeek-V3) built from the published configs and from random small ones on the `meta` device (shapes only, nothing
downloaded; active parameters from the parameter names of the routed experts), the weights of the models' `nn.Linear`
modules, `torch.utils.flop_counter.FlopCounterMode` over real forward and backward passes of small models with eager
attention, and the MFU the PaLM paper reports (46.2%)."""

import random
import warnings
from functools import cache

import torch
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_exact_int, reference_only
from llm_algo.references.hf import config_of, describe_config, flops_without_rotary_tables, transformers_module

checks = Checks("p01.params_and_flops")
checks.restrict(
    "dense_param_count",
    "moe_param_count",
    "forward_flops",
    "training_flops_and_mfu",
    forbid=("transformers", "torch.utils.flop_counter"),
    instead="compute the counts from the config's fields (a model built by transformers and FlopCounterMode are the "
    "checks' references)",
)

# ------------------------------------------------------------------------------------------ configs and references

PUBLISHED_FIELDS = {  # config.json of each model on the Hugging Face Hub, the fields that matter here
    "Llama-3-8B": (
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
        ),
    ),
    "Llama-3-70B": (
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=8192,
            intermediate_size=28672,
            num_hidden_layers=80,
            num_attention_heads=64,
            num_key_value_heads=8,
        ),
    ),
    "Qwen3-8B": (
        "Qwen3Config",
        dict(
            vocab_size=151936,
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=False,
        ),
    ),
    "Qwen3-0.6B": (
        "Qwen3Config",
        dict(
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
    "Mixtral-8x7B": (
        "MixtralConfig",
        dict(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_local_experts=8,
            num_experts_per_tok=2,
        ),
    ),
    "DeepSeek-V3": (
        "DeepseekV3Config",
        dict(
            vocab_size=129280,
            hidden_size=7168,
            intermediate_size=18432,
            moe_intermediate_size=2048,
            num_hidden_layers=61,
            first_k_dense_replace=3,
            num_attention_heads=128,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            n_routed_experts=256,
            n_shared_experts=1,
            num_experts_per_tok=8,
        ),
    ),
}
PUBLISHED_CLAIM = {
    "Llama-3-8B": "8B",
    "Llama-3-70B": "70B",
    "Qwen3-8B": "8.2B",
    "Qwen3-0.6B": "0.6B",
    "Mixtral-8x7B": "46.7B total, 12.9B active",
    "DeepSeek-V3": "671B total, 37B activated",
}


def frozen(fields: dict) -> tuple:
    return tuple(sorted(fields.items()))


@cache
def meta_reference(kind: str, fields: tuple) -> dict:
    """Counts read off a model built on the meta device: total parameters, active ones (routed experts scaled by
    k/E), and the weights of its nn.Linear modules."""
    config = config_of(kind, dict(fields))
    with reference_only(), torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers_module().AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    routed = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    experts = getattr(config, "num_local_experts", None) or getattr(config, "n_routed_experts", None) or 1
    top_k = getattr(config, "num_experts_per_tok", 1) if routed else 1
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return {"total": total, "active": total - routed + routed * top_k // experts, "linear": linear}


def random_dense_fields(rng: random.Random) -> tuple[str, dict]:
    kind = rng.choice(["LlamaConfig", "Qwen3Config"])
    kv_heads = rng.choice([1, 2, 3])
    heads = kv_heads * rng.choice([1, 2, 4])
    hidden = heads * rng.choice([4, 8, 12])
    fields = dict(
        vocab_size=rng.randrange(50, 400),
        hidden_size=hidden,
        intermediate_size=rng.randrange(16, 200),
        num_hidden_layers=rng.randrange(1, 4),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        attention_bias=rng.random() < 0.5,
        tie_word_embeddings=rng.random() < 0.5,
    )
    if kind == "LlamaConfig":
        fields["mlp_bias"] = rng.random() < 0.5
    if rng.random() < 0.5 or kind == "Qwen3Config":
        fields["head_dim"] = rng.choice([4, 6, 10, 16])
    return kind, fields


# ------------------------------------------------------------------------------------------ dense_param_count

HINT_DENSE = (
    "per layer: 2*d*H*hd (q, o) + 2*d*K*hd (k, v) + 3*d*I + 2*d; biases q,k,v,o when attention_bias; "
    "Qwen3 adds 2*hd; embedding V*d, lm_head V*d unless tied, final norm d"
)


@checks("dense_param_count")
def published_llama3_and_qwen3(ex):
    """Llama-3-8B, Llama-3-70B, Qwen3-8B and Qwen3-0.6B (tied embeddings): equal to the model built on meta"""
    for name in ("Llama-3-8B", "Llama-3-70B", "Qwen3-8B", "Qwen3-0.6B"):
        kind, fields = PUBLISHED_FIELDS[name]
        want = meta_reference(kind, frozen(fields))["total"]
        got = ex.dense_param_count(config_of(kind, fields))
        expect_exact_int(
            got,
            want,
            f"{name} (published: {PUBLISHED_CLAIM[name]}), {describe_config(kind, fields)}",
            HINT_DENSE,
            what="parameter count",
        )


@checks("dense_param_count")
def each_option_on_its_own(ex):
    """a small Llama with one option switched at a time: attention_bias, mlp_bias, tied embeddings, head_dim, Qwen3"""
    base = dict(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    variants = [
        ("LlamaConfig", {}, "the base layout"),
        ("LlamaConfig", {"attention_bias": True}, "attention_bias adds q, k, v AND o_proj biases: H*hd + 2*K*hd + d"),
        ("LlamaConfig", {"mlp_bias": True}, "mlp_bias adds gate, up (I each) and down (d) biases"),
        ("LlamaConfig", {"tie_word_embeddings": True}, "a tied lm_head is the embedding: count V*d once"),
        ("LlamaConfig", {"head_dim": 20}, "use config.head_dim when it is set: H*hd need not equal d"),
        ("Qwen3Config", {"head_dim": 20}, "Qwen3's q_norm and k_norm add 2*head_dim per layer (shared by heads)"),
    ]
    for kind, change, hint in variants:
        fields = {**base, **change}
        want = meta_reference(kind, frozen(fields))["total"]
        got = ex.dense_param_count(config_of(kind, fields))
        expect_exact_int(got, want, describe_config(kind, fields), hint, what="parameter count")
    config = config_of("LlamaConfig", base)
    config.head_dim = None  # what a config.json without the field gives in older transformers versions
    want = meta_reference("LlamaConfig", frozen(base))["total"]
    expect_exact_int(
        ex.dense_param_count(config),
        want,
        describe_config("LlamaConfig", base) + " with head_dim=None",
        "head_dim unset (None): hidden_size // num_attention_heads, an int",
        what="parameter count",
    )


@checks("dense_param_count")
def random_small_configs(ex):
    """twelve random Llama/Qwen3 configs (GQA ratios, biases, tying, head sizes): equal to the model built on meta"""
    rng = random.Random(torch.initial_seed())
    for _ in range(12):
        kind, fields = random_dense_fields(rng)
        want = meta_reference(kind, frozen(fields))["total"]
        got = ex.dense_param_count(config_of(kind, fields))
        expect_exact_int(got, want, describe_config(kind, fields), HINT_DENSE, what="parameter count")


@checks("dense_param_count")
def refuses_impossible_grouping(ex):
    """num_key_value_heads that does not divide num_attention_heads raises ValueError"""
    good = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    ex.dense_param_count(config_of("LlamaConfig", good))  # first: it works at all
    for heads, kv_heads in ((6, 4), (4, 3)):
        fields = {**good, "hidden_size": 8 * heads, "num_attention_heads": heads, "head_dim": 8}
        config = config_of("LlamaConfig", fields)
        config.num_key_value_heads = kv_heads  # set after construction: no such model can be built
        fields["num_key_value_heads"] = kv_heads
        try:
            result = ex.dense_param_count(config)
        except ValueError:
            continue
        expect(
            False,
            "an impossible head grouping was accepted",
            input=describe_config("LlamaConfig", fields),
            expected="ValueError",
            got=repr(result),
            hint="if num_attention_heads % num_key_value_heads: raise ValueError(...)",
        )


# ------------------------------------------------------------------------------------------ moe_param_count

HINT_MOE = (
    "per MoE layer: router E*d + E experts of 3*d*I (active: top-k of them) + shared experts + attention + 2*d; "
    "DeepSeek-V3: the first first_k_dense_replace layers are dense, attention is MLA"
)


def expect_moe(got, want: dict, label: str, hint: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "expected a tuple (total, active)",
        input=label,
        expected="(int, int)",
        got=repr(got)[:120],
        hint="return total, active",
    )
    expect_exact_int(got[0], want["total"], label, hint, what="total parameter count")
    expect_exact_int(
        got[1],
        want["active"],
        label,
        hint + "; active counts only num_experts_per_tok routed experts",
        what="active parameter count",
    )


def random_moe_fields(rng: random.Random) -> tuple[str, dict]:
    heads = rng.choice([2, 4])
    if rng.random() < 0.5:
        experts = rng.choice([2, 4, 8])
        fields = dict(
            vocab_size=rng.randrange(50, 300),
            hidden_size=heads * rng.choice([4, 8]),
            intermediate_size=rng.randrange(8, 64),
            num_hidden_layers=rng.randrange(1, 4),
            num_attention_heads=heads,
            num_key_value_heads=rng.choice([1, heads]),
            num_local_experts=experts,
            num_experts_per_tok=rng.randrange(1, experts + 1),
            tie_word_embeddings=rng.random() < 0.5,
        )
        return "MixtralConfig", fields
    experts = rng.choice([4, 8])
    layers = rng.randrange(2, 5)
    fields = dict(
        vocab_size=rng.randrange(50, 300),
        hidden_size=rng.choice([32, 48]),
        intermediate_size=rng.randrange(16, 96),
        moe_intermediate_size=rng.randrange(8, 40),
        num_hidden_layers=layers,
        first_k_dense_replace=rng.randrange(0, layers),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=rng.choice([None, 12, 24]),
        kv_lora_rank=rng.choice([8, 16]),
        qk_nope_head_dim=rng.choice([8, 16]),
        qk_rope_head_dim=rng.choice([4, 8]),
        v_head_dim=rng.choice([8, 12]),
        n_routed_experts=experts,
        n_shared_experts=rng.choice([1, 2]),
        num_experts_per_tok=rng.randrange(1, experts + 1),
        n_group=1,
        topk_group=1,
        tie_word_embeddings=rng.random() < 0.5,
    )
    return "DeepseekV3Config", fields


@checks("moe_param_count")
def published_mixtral_and_deepseek_v3(ex):
    """Mixtral-8x7B (46.7B/12.9B) and DeepSeek-V3 (671B/37B): total and active equal to the model built on meta"""
    for name in ("Mixtral-8x7B", "DeepSeek-V3"):
        kind, fields = PUBLISHED_FIELDS[name]
        want = meta_reference(kind, frozen(fields))
        got = ex.moe_param_count(config_of(kind, fields))
        expect_moe(got, want, f"{name} (published: {PUBLISHED_CLAIM[name]})", HINT_MOE)


@checks("moe_param_count")
def deepseek_parts_one_at_a_time(ex):
    """small DeepSeek-V3 configs: no q bottleneck, no dense layers, two shared experts, tied embeddings, top-1"""
    base = dict(
        vocab_size=120,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=24,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=6,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        tie_word_embeddings=False,
    )
    variants = [
        (
            {},
            "MLA: q_a (r_q, d), its norm r_q, q_b (H*(nope+rope), r_q); kv_a (r_kv + rope, d), its norm r_kv, "
            "kv_b (H*(nope+v), r_kv); o (d, H*v)",
        ),
        ({"q_lora_rank": None}, "without q_lora_rank the query is one q_proj (H*(nope+rope), d), no norm"),
        ({"first_k_dense_replace": 0}, "first_k_dense_replace=0: every layer is an MoE layer"),
        ({"first_k_dense_replace": 2}, "the first first_k_dense_replace layers have a dense MLP of intermediate_size"),
        ({"n_shared_experts": 2}, "shared experts (moe_intermediate_size wide) are active for every token"),
        ({"tie_word_embeddings": True}, "a tied lm_head is the embedding: count V*d once"),
        ({"num_experts_per_tok": 1}, "active counts num_experts_per_tok routed experts per MoE layer"),
    ]
    for change, hint in variants:
        fields = {**base, **change}
        want = meta_reference("DeepseekV3Config", frozen(fields))
        expect_moe(
            ex.moe_param_count(config_of("DeepseekV3Config", fields)),
            want,
            describe_config("DeepseekV3Config", fields),
            hint,
        )


@checks("moe_param_count")
def random_small_moe_configs(ex):
    """ten random Mixtral and DeepSeek-V3 configs: total and active equal to the model built on meta"""
    rng = random.Random(torch.initial_seed())
    for _ in range(10):
        kind, fields = random_moe_fields(rng)
        want = meta_reference(kind, frozen(fields))
        expect_moe(ex.moe_param_count(config_of(kind, fields)), want, describe_config(kind, fields), HINT_MOE)


@checks("moe_param_count")
def refuses_other_models(ex):
    """a Llama (dense) or Qwen3 config raises ValueError instead of a made-up count"""
    kind, fields = PUBLISHED_FIELDS["Mixtral-8x7B"]
    ex.moe_param_count(config_of(kind, fields))  # first: it works at all
    for kind in ("LlamaConfig", "Qwen3Config"):
        fields = dict(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=40,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        try:
            result = ex.moe_param_count(config_of(kind, fields))
        except ValueError:
            continue
        expect(
            False,
            "a config that is not Mixtral or DeepSeek-V3 was accepted",
            input=describe_config(kind, fields),
            expected="ValueError",
            got=repr(result)[:120],
            hint="branch on config.model_type and raise ValueError in the else branch",
        )


# ------------------------------------------------------------------------------------------ forward_flops

HINT_FLOPS = (
    "2 * B * T * (L * (2*d*H*hd + 2*d*K*hd + 3*d*I) + V*d) + L * 4 * B * H * T * T * hd: "
    "the lm_head is a matmul, attention uses all H query heads and the full T x T scores"
)


def counted_flops(kind: str, fields: dict, batch: int, seq_len: int, backward: bool = False) -> tuple[int, nn.Module]:
    """FlopCounterMode's total over a real forward (and backward) of a small model with eager attention."""
    from torch.utils.flop_counter import FlopCounterMode

    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers_module().AutoModelForCausalLM.from_config(config_of(kind, fields, eager=True))
    ids = torch.randint(0, fields["vocab_size"], (batch, seq_len))
    with reference_only(), FlopCounterMode(display=False) as counter:
        logits = model(ids).logits  # (B, T, V)
        if backward:
            logits.float().pow(2).mean().backward()
    return flops_without_rotary_tables(counter), model


SMALL_LLAMA = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=56,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


@checks("forward_flops")
def matches_flop_counter(ex):
    """small Llama and Qwen3 models (GQA, head_dim != d/H, tied head), batch 1 and 3, odd lengths: FlopCounterMode"""
    cases = [
        ("LlamaConfig", SMALL_LLAMA, 1, 7),
        ("LlamaConfig", {**SMALL_LLAMA, "num_key_value_heads": 1, "num_hidden_layers": 3}, 3, 5),
        ("Qwen3Config", {**SMALL_LLAMA, "head_dim": 12, "tie_word_embeddings": True}, 2, 11),
    ]
    for kind, fields, batch, seq_len in cases:
        want, _ = counted_flops(kind, fields, batch, seq_len)
        got = ex.forward_flops(config_of(kind, fields), batch, seq_len)
        expect_exact_int(
            got,
            want,
            f"{describe_config(kind, fields)}, batch={batch}, seq_len={seq_len}",
            HINT_FLOPS,
            what="FLOP count",
        )


@checks("forward_flops")
def published_models_from_their_linear_layers(ex):
    """Llama-3-8B, Llama-3-70B and Qwen3-8B at T = 1, 4096 and 32768: 2*B*T*(nn.Linear weights) + attention"""
    for name in ("Llama-3-8B", "Llama-3-70B", "Qwen3-8B"):
        kind, fields = PUBLISHED_FIELDS[name]
        config = config_of(kind, fields)
        if name == "Llama-3-70B":
            config.head_dim = None  # Meta's config.json has no head_dim: hidden_size // num_attention_heads
        linear = meta_reference(kind, frozen(fields))["linear"]
        head_dim = fields.get("head_dim", fields["hidden_size"] // fields["num_attention_heads"])
        for batch, seq_len in ((1, 1), (2, 4096), (1, 32768)):
            scores = 2 * 2 * batch * fields["num_attention_heads"] * seq_len**2 * head_dim  # QK^T and PV
            want = 2 * batch * seq_len * linear + fields["num_hidden_layers"] * scores
            got = ex.forward_flops(config, batch, seq_len)
            label = f"{name}{' (head_dim=None)' if config.head_dim is None else ''}, batch={batch}, seq_len={seq_len}"
            expect_exact_int(got, want, label, HINT_FLOPS, what="FLOP count")


@checks("forward_flops")
def quadratic_in_length_linear_in_batch(ex):
    """the FLOPs grow linearly with the batch and by exactly the attention term's T^2 with the length"""
    config = config_of("LlamaConfig", SMALL_LLAMA)
    one, three = ex.forward_flops(config, 1, 9), ex.forward_flops(config, 3, 9)
    expect(
        three == 3 * one,
        "three sequences do not cost three times one",
        input=f"{describe_config('LlamaConfig', SMALL_LLAMA)}, batch 1 and 3, seq_len=9",
        expected=f"{3 * one:,}",
        got=f"{three:,}",
        hint="every term is proportional to the batch size B",
    )
    f1, f2, f3 = (ex.forward_flops(config, 1, t) for t in (8, 16, 24))
    second_difference = f3 - 2 * f2 + f1  # only the T^2 term survives: 2 * 4 * L * H * hd * 8^2
    want = 2 * 4 * 2 * 4 * 8 * 8**2
    expect(
        second_difference == want,
        "the attention term does not grow as T^2 with all query heads",
        input="seq_len = 8, 16, 24: F(24) - 2 F(16) + F(8)",
        expected=f"{want:,} (= 2 * 4 * L * H * hd * 8^2)",
        got=f"{second_difference:,}",
        hint="attention: 4 * B * H * T^2 * hd per layer (H query heads, not K; full T x T, not the causal half)",
    )


@checks("forward_flops")
def refuses_empty_inputs(ex):
    """batch or seq_len below 1 raises ValueError"""
    config = config_of("LlamaConfig", SMALL_LLAMA)
    ex.forward_flops(config, 1, 1)  # first: it works at all
    for batch, seq_len in ((0, 8), (2, 0), (-1, 4)):
        try:
            result = ex.forward_flops(config, batch, seq_len)
        except ValueError:
            continue
        expect(
            False,
            "an empty or negative shape was accepted",
            input=f"batch={batch}, seq_len={seq_len}",
            expected="ValueError",
            got=repr(result),
            hint="check batch >= 1 and seq_len >= 1 first",
        )


# ------------------------------------------------------------------------------------------ training_flops_and_mfu

PALM = dict(n_params=540_350_000_000, n_layers=118, n_heads=48, head_dim=256, seq_len=2048)


@checks("training_flops_and_mfu")
def palm_540b_published_mfu(ex):
    """PaLM 540B: 238.3k tokens/s on 6144 TPU v4 (275 TFLOP/s) is 46.2% MFU (Chowdhery et al., 2022, App. B)"""
    per_token = ex.training_flops_per_token(**PALM)
    want = 6 * PALM["n_params"] + 12 * 118 * 48 * 256 * 2048
    expect_exact_int(
        per_token,
        want,
        f"training_flops_per_token({PALM})",
        "6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len",
        what="FLOPs per token",
    )
    mfu = ex.model_flops_utilization(per_token, 238.3e3, 6144, 275e12)
    expect(
        isinstance(mfu, float) and abs(mfu - 0.462) < 5e-4,
        "PaLM's MFU does not come out as published",
        input="flops_per_token from above, 238.3e3 tokens/s, 6144 chips, 275e12 FLOP/s per chip",
        expected="0.462 (46.2%)",
        got=repr(mfu),
        hint="flops_per_token * tokens_per_second / (num_chips * peak_flops_per_chip)",
    )


@checks("training_flops_and_mfu")
def exact_for_flop_counter_forward_and_backward(ex):
    """small Llamas: FlopCounterMode over forward + backward, per token, equals 6N + 12 L H hd T (N: nn.Linear weights)"""
    for fields, batch, seq_len in (
        (SMALL_LLAMA, 2, 6),
        ({**SMALL_LLAMA, "head_dim": 12, "num_hidden_layers": 1}, 1, 13),
    ):
        total, model = counted_flops("LlamaConfig", fields, batch, seq_len, backward=True)
        linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        head_dim = fields.get("head_dim", fields["hidden_size"] // fields["num_attention_heads"])
        args = dict(
            n_params=linear,
            n_layers=fields["num_hidden_layers"],
            n_heads=fields["num_attention_heads"],
            head_dim=head_dim,
            seq_len=seq_len,
        )
        got = ex.training_flops_per_token(**args)
        expect_exact_int(
            got,
            total // (batch * seq_len),
            f"FlopCounterMode of forward + backward of {describe_config('LlamaConfig', fields)}, "
            f"batch={batch}, seq_len={seq_len}; arguments {args}",
            "forward 2N + 4 L H hd T per token, backward twice that: 6N + 12 L H hd T",
            what="FLOPs per token",
        )


@checks("training_flops_and_mfu")
def mfu_scales_and_stays_a_fraction(ex):
    """random runs: MFU equals achieved / peak, doubles with throughput, halves with twice the chips"""
    rng = random.Random(torch.initial_seed())
    for _ in range(5):
        per_token = rng.randrange(10**9, 10**13)
        tokens_per_second = rng.uniform(1e3, 1e6)
        chips = rng.choice([1, 8, 64, 1024])
        peak = rng.choice([312e12, 989e12, 2250e12])
        want = per_token * tokens_per_second / (chips * peak)
        label = f"flops_per_token={per_token}, tokens/s={tokens_per_second:.6g}, chips={chips}, peak={peak:g}"
        got = ex.model_flops_utilization(per_token, tokens_per_second, chips, peak)
        expect(
            isinstance(got, float) and abs(got - want) <= 1e-12 * want,
            "wrong MFU",
            input=label,
            expected=repr(want),
            got=repr(got),
            hint="achieved FLOP/s = flops_per_token * tokens/s; divide by "
            "num_chips * peak_flops_per_chip (a fraction, not a percentage)",
        )
        doubled = ex.model_flops_utilization(per_token, 2 * tokens_per_second, 2 * chips, peak)
        expect(
            abs(doubled - got) <= 1e-12 * want,
            "twice the throughput on twice the chips changed the MFU",
            input=label,
            expected=repr(got),
            got=repr(doubled),
            hint="MFU is per chip: divide by num_chips",
        )


@checks("training_flops_and_mfu")
def refuses_non_positive_arguments(ex):
    """zero or negative sizes, throughputs, chip counts or peaks raise ValueError"""
    ex.training_flops_per_token(**PALM)  # first: it works at all
    bad_calls = [
        ("training_flops_per_token", (0, 2, 2, 8, 16)),
        ("training_flops_per_token", (10**6, 2, 2, 8, 0)),
        ("model_flops_utilization", (1e9, 0.0, 8, 989e12)),
        ("model_flops_utilization", (1e9, 1e4, 0, 989e12)),
        ("model_flops_utilization", (1e9, 1e4, 8, -1.0)),
    ]
    for name, args in bad_calls:
        try:
            result = getattr(ex, name)(*args)
        except ValueError:
            continue
        expect(
            False,
            f"{name} accepted a non-positive argument",
            input=f"{name}{args}",
            expected="ValueError",
            got=repr(result),
            hint="check every argument is positive before computing",
        )
