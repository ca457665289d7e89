"""Checks for p02.mla. References: Hugging Face `DeepseekV3Attention` built locally from a tiny random
`DeepseekV3Config` (float64 oracle with exact RoPE tables, float32 baseline with its own rotary embedding; its
`DynamicCache` for what an MLA cache really stores), `LlamaAttention` + `DynamicCache` for the GQA cache size, a slow
float64 loop over heads and positions written from the lesson's equations, published model configs, and a
TorchDispatchMode record of the operands that kv_b_proj's weight meets (the absorbed form never meets the cache)."""

import copy
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor
from llm_algo.references.hf import tiny_llama_config, transformers_module

checks = Checks("p02.mla")

# Two tiny MLA layers: d_nope = d_v (as in DeepSeek-V3), and every size different (d_rope > d_nope, d_v odd).
DIMS = [
    dict(
        hidden_size=64,
        num_heads=4,
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
    ),
    dict(
        hidden_size=48,
        num_heads=3,
        q_lora_rank=20,
        kv_lora_rank=12,
        qk_nope_head_dim=6,
        qk_rope_head_dim=8,
        v_head_dim=10,
    ),
]
BASE = 5000.0  # not the module's default 10000: a rope_base the module ignores is caught
SPEC_EPS = 1e-5  # the float64 spec's RMSNorm eps: not the module's default 1e-6 (DeepseekV3Attention hard-codes 1e-6)
MAX_POSITION = 64


# ------------------------------------------------------------------------------------------ references


def deepseek_config(dims: dict, num_layers: int = 1):
    transformers = transformers_module()
    config = transformers.DeepseekV3Config(
        vocab_size=32,
        hidden_size=dims["hidden_size"],
        intermediate_size=32,
        moe_intermediate_size=16,
        num_hidden_layers=num_layers,
        num_attention_heads=dims["num_heads"],
        num_key_value_heads=dims["num_heads"],
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        q_lora_rank=dims["q_lora_rank"],
        kv_lora_rank=dims["kv_lora_rank"],
        qk_nope_head_dim=dims["qk_nope_head_dim"],
        qk_rope_head_dim=dims["qk_rope_head_dim"],
        v_head_dim=dims["v_head_dim"],
        head_dim=dims["qk_rope_head_dim"],  # the rotary embedding's size
        rope_interleave=False,  # rotate-half pairing, the lesson's apply_rope_rotate_half
        max_position_embeddings=MAX_POSITION,
        attention_bias=False,
        rms_norm_eps=1e-6,
        rope_theta=BASE,
    )
    config._attn_implementation = "eager"
    return config


def hf_mla(dims: dict, layer_idx: int = 0, config=None):
    """A DeepseekV3Attention with random weights (norm gains too) that keep the scores in a useful range."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    module = DeepseekV3Attention(config or deepseek_config(dims), layer_idx).eval()
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "layernorm" in name:
                param.copy_(1 + 0.3 * torch.randn_like(param))
            else:
                param.copy_(torch.randn_like(param) / math.sqrt(param.shape[1]))
    return module


def exact_tables(position_ids: torch.Tensor, d_rope: int):
    """float64 rotate-half cos/sin (B, S, d_rope) at the given positions."""
    theta = BASE ** (-torch.arange(0, d_rope, 2, dtype=torch.float64) / d_rope)
    angles = position_ids.to(torch.float64)[..., None] * theta
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def hf_output(module, x, position_ids, dtype, cache=None):
    """DeepseekV3Attention on x, causal over its S tokens: float64 with exact tables, or x's dtype with HF's rotary."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    module = copy.deepcopy(module).to(dtype)
    x = x.to(dtype)
    if dtype == torch.float64:
        tables = exact_tables(position_ids, module.qk_rope_head_dim)
    else:
        tables = DeepseekV3RotaryEmbedding(module.config)(x, position_ids)
    S = x.shape[1]
    mask = torch.zeros(S, S, dtype=dtype).masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    with torch.no_grad():
        return module(x, tables, mask[None, None], cache)[0]


def oracle_and_baseline(module, x, position_ids):
    return hf_output(module, x, position_ids, torch.float64), hf_output(module, x, position_ids, x.dtype)


def rms_norm64(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate64(x, position):
    """Rotate-half RoPE of one vector x (d_rope,) at an integer position, float64, written pair by pair."""
    half = x.shape[0] // 2
    out = x.clone()
    for i in range(half):
        angle = position * BASE ** (-2 * i / x.shape[0])
        a, b = x[i], x[i + half]
        out[i] = a * math.cos(angle) - b * math.sin(angle)
        out[i + half] = a * math.sin(angle) + b * math.cos(angle)
    return out


def mla_spec(module, x, position_ids, eps=1e-6):
    """Section 2's equations in float64, one batch row, head and query position at a time (slow and plain)."""
    w = {name: p.double() for name, p in module.named_parameters()}  # differentiable: the gradient check uses it
    H, d_nope, d_rope = module.num_heads, module.qk_nope_head_dim, module.qk_rope_head_dim
    d_c, d_v = module.kv_lora_rank, module.v_head_dim
    w_uk_uv = w["kv_b_proj.weight"].view(H, d_nope + d_v, d_c)
    B, S, _ = x.shape
    out = torch.zeros(B, S, w["o_proj.weight"].shape[0], dtype=torch.float64)
    for b in range(B):
        xb = x[b].double()
        c_q = rms_norm64(xb @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"], eps)
        q_all = (c_q @ w["q_b_proj.weight"].T).view(S, H, d_nope + d_rope)
        compressed = xb @ w["kv_a_proj_with_mqa.weight"].T
        c_kv = rms_norm64(compressed[:, :d_c], w["kv_a_layernorm.weight"], eps)  # (S, d_c), the cached latent
        k_rope = torch.stack([rotate64(compressed[t, d_c:], int(position_ids[b, t])) for t in range(S)])
        heads = []
        for h in range(H):
            k = torch.cat((c_kv @ w_uk_uv[h, :d_nope].T, k_rope), dim=-1)  # (S, d_nope + d_rope)
            v = c_kv @ w_uk_uv[h, d_nope:].T  # (S, d_v)
            rows = []
            for m in range(S):
                q = torch.cat((q_all[m, h, :d_nope], rotate64(q_all[m, h, d_nope:], int(position_ids[b, m]))))
                scores = k[: m + 1] @ q / math.sqrt(d_nope + d_rope)
                rows.append(torch.softmax(scores, dim=0) @ v[: m + 1])
            heads.append(torch.stack(rows))  # (S, d_v)
        out[b] = torch.cat(heads, dim=-1) @ w["o_proj.weight"].T
    return out


def learner_mla(ex, dims, hf, dtype=torch.float32, **options):
    module = ex.MultiHeadLatentAttention(**dims, max_position=MAX_POSITION, rope_base=BASE, **options)
    module.load_state_dict(hf.state_dict())
    module = module.to(dtype).eval()
    if dtype == torch.float64:  # the spec's angles are float64; give the module float64 tables too
        cos, sin = exact_tables(torch.arange(MAX_POSITION)[None], dims["qk_rope_head_dim"])
        module.cos, module.sin = cos[0], sin[0]
    return module


class RecordingCache:
    """update(a, b) appends along dim 2 and returns everything so far, like the KVCache lesson's; it also keeps
    the tensors it was given, so a check can see what a layer caches."""

    def __init__(self):
        self.first = self.second = None
        self.calls = []

    def update(self, first, second):
        self.calls.append((tuple(first.shape), tuple(second.shape)))
        first, second = first.detach(), second.detach()
        self.first = first if self.first is None else torch.cat((self.first, first), dim=2)
        self.second = second if self.second is None else torch.cat((self.second, second), dim=2)
        return self.first, self.second


def positions(batch, length, offset=0):
    return (torch.arange(length)[None] + offset + 3 * torch.arange(batch)[:, None]).long()


def decode_schedule(total):
    bounds = [0, 4, 5, 6, 9, total]
    return list(zip(bounds, bounds[1:], strict=False))


def run_prefill(ex, forward_of, hint):
    """Shared: prefill outputs match DeepseekV3Attention over both configs, a batch of one, one token, offsets."""
    for dims in DIMS:
        hf = hf_mla(dims)
        mine = learner_mla(ex, dims, hf)
        for batch, length, offset in [(2, 7, 0), (1, 1, 0), (3, 5, 11)]:
            x = torch.randn(batch, length, dims["hidden_size"])
            position_ids = positions(batch, length, offset)
            label = f"{describe(x=x)}, positions from {position_ids[:, 0].tolist()}, dims {dims}"
            with torch.no_grad():
                got = forward_of(mine)(x, position_ids)
            expect_tensor(got, shape=x.shape, dtype=x.dtype, input=label)
            oracle, baseline = oracle_and_baseline(hf, x, position_ids)
            expect_close(got, oracle, baseline=baseline, input=label, hint=hint)


def run_decoding(ex, forward_of, hint):
    """Shared: prefill, single tokens and a chunk through a cache equal the rows of one full causal forward, and
    the cache receives only (B, 1, ., d_c) latents and (B, 1, ., d_rope) RoPE keys."""
    for dims in DIMS:
        hf = hf_mla(dims)
        mine = learner_mla(ex, dims, hf)
        x = torch.randn(2, 11, dims["hidden_size"])
        position_ids = positions(2, 11)
        oracle, baseline = oracle_and_baseline(hf, x, position_ids)
        recorder = RecordingCache()
        for start, stop in decode_schedule(11):
            label = f"x (2, 11, {dims['hidden_size']}), step over tokens {start}..{stop - 1} with a cache, dims {dims}"
            with torch.no_grad():
                got = forward_of(mine)(x[:, start:stop], position_ids[:, start:stop], recorder)
            expect(
                recorder.calls[-1:]
                == [((2, 1, stop - start, dims["kv_lora_rank"]), (2, 1, stop - start, dims["qk_rope_head_dim"]))],
                "the cache was not given one latent and one RoPE key per new token",
                input=label,
                expected=f"cache.update(c_kv (2, 1, {stop - start}, {dims['kv_lora_rank']}), "
                f"k_rope (2, 1, {stop - start}, {dims['qk_rope_head_dim']}))",
                got=f"update calls {recorder.calls}",
                hint="call cache.update(c_kv, k_rope) once per forward, with the latent and the rotated RoPE key",
            )
            expect_close(
                got,
                oracle[:, start:stop],
                baseline=baseline[:, start:stop],
                input=label,
                hint=hint,
            )


# ------------------------------------------------------------------------------------------ cache formula


@checks("kv_cache_elements_per_token")
def small_cases_by_hand(ex):
    """2 layers: GQA with 3 KV heads of 4 caches 2*2*3*4 = 48; MLA with d_c = 5, d_rope = 3 caches 2*(5+3) = 16"""
    for kwargs, expected in [
        (dict(num_layers=2, num_kv_heads=3, head_dim=4), 48),
        (dict(num_layers=2, kv_lora_rank=5, qk_rope_head_dim=3), 16),
        (dict(num_layers=1, num_kv_heads=1, head_dim=7), 14),
    ]:
        got = ex.kv_cache_elements_per_token(**kwargs)
        expect(
            got == expected,
            "wrong number of cached elements",
            input=str(kwargs),
            expected=str(expected),
            got=str(got),
            hint="GQA: keys and values, 2 * layers * kv heads * head_dim; MLA: layers * (latent + one RoPE key), the "
            "latent serves keys and values and the RoPE key is shared by all heads",
        )


@checks("kv_cache_elements_per_token")
def published_models(ex):
    """Llama-2-7B (MHA), Llama-3-8B and 70B (GQA), Falcon-7B (MQA), DeepSeek-V2 and V3 (MLA), from their configs"""
    for name, kwargs, expected in [
        ("Llama-2-7B", dict(num_layers=32, num_kv_heads=32, head_dim=128), 262_144),
        ("Llama-3-8B", dict(num_layers=32, num_kv_heads=8, head_dim=128), 65_536),
        ("Llama-3-70B", dict(num_layers=80, num_kv_heads=8, head_dim=128), 163_840),
        ("Falcon-7B", dict(num_layers=32, num_kv_heads=1, head_dim=64), 4_096),
        ("DeepSeek-V2", dict(num_layers=60, kv_lora_rank=512, qk_rope_head_dim=64), 34_560),
        ("DeepSeek-V3", dict(num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64), 35_136),
    ]:
        got = ex.kv_cache_elements_per_token(**kwargs)
        expect(
            got == expected,
            f"{name}: wrong number of cached elements",
            input=f"{name}: {kwargs}",
            expected=f"{expected:,}",
            got=f"{got:,}" if isinstance(got, int) else repr(got),
            hint="return an int: elements per token summed over all layers",
        )


@checks("kv_cache_elements_per_token")
def equals_what_hugging_face_caches(ex):
    """the formula equals the elements per token really stored by DynamicCache for LlamaAttention and DeepseekV3"""
    transformers = transformers_module()
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    batch, length = 2, 5
    llama = tiny_llama_config(num_key_value_heads=2)
    cases = [("tiny Llama (GQA)", llama, dict(num_kv_heads=2, head_dim=llama.head_dim))]
    for dims in DIMS:
        config = deepseek_config(dims, num_layers=2)
        cases.append(
            (
                "tiny DeepseekV3 (MLA)",
                config,
                dict(kv_lora_rank=dims["kv_lora_rank"], qk_rope_head_dim=dims["qk_rope_head_dim"]),
            )
        )
    for name, config, kwargs in cases:
        dynamic = transformers.DynamicCache(config=config)
        x = torch.randn(batch, length, config.hidden_size)
        position_ids = torch.arange(length)[None].expand(batch, length)
        with torch.no_grad():
            for layer in range(config.num_hidden_layers):
                if name.startswith("tiny Llama"):
                    module, tables = LlamaAttention(config, layer), LlamaRotaryEmbedding(config)(x, position_ids)
                else:
                    module = hf_mla(None, layer, config)
                    tables = exact_tables(position_ids, config.qk_rope_head_dim)
                    tables = (tables[0].float(), tables[1].float())
                module(x, tables, None, dynamic)
        stored = sum(layer.keys.numel() + layer.values.numel() for layer in dynamic.layers) // (batch * length)
        got = ex.kv_cache_elements_per_token(config.num_hidden_layers, **kwargs)
        expect(
            got == stored,
            f"{name}: the formula differs from what Hugging Face's DynamicCache stores",
            input=f"{name}, {config.num_hidden_layers} layers, {kwargs}",
            expected=f"{stored} elements per token (measured)",
            got=str(got),
            hint="MLA caches the normalised latent (kv_lora_rank) and one RoPE key (qk_rope_head_dim) per layer",
        )


# ------------------------------------------------------------------------------------------ the layer

LAYER_HINT = (
    "queries: q_a_proj -> q_a_layernorm -> q_b_proj, per head [nope | rope]; keys/values: kv_a_proj_with_mqa -> "
    "[latent | rope key], RMSNorm on the latent only, kv_b_proj per head [k_nope | v]; RoPE on both rope parts"
)


@checks("MultiHeadLatentAttention")
def matches_deepseek_v3_attention(ex):
    """prefill: DeepseekV3Attention's weights loaded into yours give the same output (two configs, offsets, B=1, S=1)"""
    run_prefill(ex, lambda mine: mine, LAYER_HINT)


@checks("MultiHeadLatentAttention")
def matches_the_float64_spec(ex):
    """float64, eps=1e-5: equals the loop over heads and positions written from section 2's equations"""
    for dims in DIMS:
        hf = hf_mla(dims)
        mine = learner_mla(ex, dims, hf, torch.float64, eps=SPEC_EPS)
        x = torch.randn(2, 6, dims["hidden_size"], dtype=torch.float64)
        position_ids = positions(2, 6, offset=5)
        with torch.no_grad():
            got = mine(x, position_ids)
        label = f"{describe(x=x)}, positions from {position_ids[:, 0].tolist()}, dims {dims}, eps={SPEC_EPS}"
        expect_tensor(got, shape=x.shape, dtype=torch.float64, input=label)
        expect_close(got, mla_spec(mine, x, position_ids, eps=SPEC_EPS), input=label, hint=LAYER_HINT)


@checks("MultiHeadLatentAttention")
def caches_only_the_latent_and_the_rope_key(ex):
    """prefill with a cache: it receives the normalised latent and the rotated RoPE key, equal to DynamicCache's"""
    transformers = transformers_module()
    dims = DIMS[1]
    hf = hf_mla(dims)
    mine = learner_mla(ex, dims, hf)
    x = torch.randn(2, 6, dims["hidden_size"])
    position_ids = positions(2, 6, offset=2)
    recorder = RecordingCache()
    with torch.no_grad():
        mine(x, position_ids, recorder)
    dynamic = transformers.DynamicCache(config=hf.config)
    hf_output(hf, x.double(), position_ids, torch.float64, dynamic)
    label = f"{describe(x=x)}, one forward with a cache, dims {dims}"
    d_c, d_rope = dims["kv_lora_rank"], dims["qk_rope_head_dim"]
    expect(
        recorder.first is not None, "the cache was never updated", input=label, hint="call cache.update(c_kv, k_rope)"
    )
    expect_tensor(recorder.first, shape=(2, 1, 6, d_c), input=label, what="cached latent c_kv")
    expect_tensor(recorder.second, shape=(2, 1, 6, d_rope), input=label, what="cached RoPE key")
    per_token = (recorder.first.numel() + recorder.second.numel()) // 12
    expect(
        per_token == d_c + d_rope,
        "the cache holds more than the latent and the RoPE key",
        input=label,
        expected=f"{d_c + d_rope} elements per token (d_c + d_rope)",
        got=str(per_token),
    )
    layer = dynamic.layers[0]
    expect_close(
        recorder.first,
        layer.keys,
        input=label,
        what="cached latent c_kv",
        hint="cache the latent after kv_a_layernorm: c_kv = RMSNorm(first kv_lora_rank outputs of kv_a_proj_with_mqa)",
    )
    expect_close(
        recorder.second,
        layer.values,
        input=label,
        what="cached RoPE key",
        hint="cache the RoPE key already rotated at its position (the last qk_rope_head_dim outputs of "
        "kv_a_proj_with_mqa)",
    )


@checks("MultiHeadLatentAttention")
def decoding_through_the_cache(ex):
    """prefill 4, two single tokens, a chunk of 3, two more: each step equals full causal recomputation"""
    run_decoding(
        ex,
        lambda mine: mine,
        "rotate the new tokens at their position_ids (not 0..S-1), append to the cache, up-project all cached "
        "latents, and use the bottom-right causal mask so new token i sees cached tokens 0..T-S+i",
    )


@checks("MultiHeadLatentAttention")
def parameter_gradients_match(ex):
    """float64 training step: the gradient of every weight equals autograd through the float64 loop spec"""
    dims = DIMS[1]
    mine = learner_mla(ex, dims, hf_mla(dims), torch.float64)
    x = torch.randn(2, 5, dims["hidden_size"], dtype=torch.float64)
    position_ids = positions(2, 5, offset=1)
    upstream = torch.randn_like(x)
    names, params = zip(*mine.named_parameters(), strict=True)
    expected = torch.autograd.grad(mla_spec(mine, x, position_ids), params, upstream)
    got = torch.autograd.grad(mine(x, position_ids), params, upstream, allow_unused=True)
    label = f"{describe(x=x)}, causal, dims {dims}, random upstream gradient"
    for name, grad, reference in zip(names, got, expected, strict=True):
        expect(grad is not None, f"no gradient reached {name}", input=label, hint="use every weight in forward")
        expect_close(
            grad,
            reference,
            input=label,
            what=f"gradient of {name}",
            hint="every weight must be used exactly as in the forward equations (no .detach(), no no_grad)",
        )


# ------------------------------------------------------------------------------------------ absorbed form

ABSORBED_HINT = (
    "q_latent = einsum(q_nope, W_uk) with W = kv_b_proj.weight.view(H, d_nope + d_v, d_c); keys [c_kv | k_rope], "
    "values c_kv; softmax scale 1/sqrt(d_nope + d_rope) (not the latent size); then einsum with W_uv and o_proj"
)


def absorbed(ex):
    return lambda mine: lambda x, position_ids, cache=None: ex.mla_absorbed(mine, x, position_ids, cache)


@checks("mla_absorbed")
def absorbed_matches_deepseek_v3_attention(ex):
    """prefill: the absorbed form equals DeepseekV3Attention (non-absorbed) over both configs, offsets, B=1, S=1"""
    run_prefill(ex, absorbed(ex), ABSORBED_HINT)


@checks("mla_absorbed")
def absorbed_matches_the_float64_spec(ex):
    """float64: the absorbed form equals the loop spec that builds every head's keys and values explicitly"""
    for dims in DIMS:
        hf = hf_mla(dims)
        mine = learner_mla(ex, dims, hf, torch.float64)
        x = torch.randn(1, 5, dims["hidden_size"], dtype=torch.float64)
        position_ids = positions(1, 5, offset=7)
        with torch.no_grad():
            got = ex.mla_absorbed(mine, x, position_ids)
        label = f"{describe(x=x)}, positions from 7, dims {dims}"
        expect_tensor(got, shape=x.shape, dtype=torch.float64, input=label)
        expect_close(got, mla_spec(mine, x, position_ids), input=label, hint=ABSORBED_HINT)


@checks("mla_absorbed")
def absorbed_decoding_through_the_cache(ex):
    """decoding with the compressed cache (absorbed) equals full causal recomputation at every step"""
    run_decoding(ex, absorbed(ex), "append (c_kv, k_rope) to the cache and attend over all of it; " + ABSORBED_HINT)


class WeightProducts(TorchDispatchMode):
    """Records, for every aten op that reads kv_b_proj's weight (or a view of it), the shapes of its other tensor
    operands: the absorbed form multiplies the weight only with the S new queries and outputs, never with the T
    cached latents."""

    def __init__(self, weight):
        super().__init__()
        self.storage = weight.untyped_storage().data_ptr()
        self.operand_shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(t.untyped_storage().data_ptr() == self.storage for t in tensors):
            others = [tuple(t.shape) for t in tensors if t.untyped_storage().data_ptr() != self.storage]
            self.operand_shapes.extend(others)
        return func(*args, **(kwargs or {}))


@checks("mla_absorbed")
def never_up_projects_the_cached_latents(ex):
    """a decoding step over 11 cached tokens applies kv_b_proj's weight to the new query only, never to the cache"""
    dims = DIMS[1]
    mine = learner_mla(ex, dims, hf_mla(dims))
    batch, total = 2, 11
    x = torch.randn(batch, total, dims["hidden_size"])
    position_ids = positions(batch, total)
    recorder = RecordingCache()
    with torch.no_grad():
        ex.mla_absorbed(mine, x[:, :-1], position_ids[:, :-1], recorder)  # prefill 10 tokens
        with WeightProducts(mine.kv_b_proj.weight) as products:
            ex.mla_absorbed(mine, x[:, -1:], position_ids[:, -1:], recorder)  # decode token 10 over T = 11
    cache_sized = [shape for shape in products.operand_shapes if total in shape or batch * total in shape]
    expect(
        not cache_sized,
        "the absorbed form up-projects the cached latents with kv_b_proj",
        input=f"x (2, 11, {dims['hidden_size']}): prefill 10 tokens, then one decoding step over T = 11, dims {dims}",
        expected="kv_b_proj.weight multiplied only by tensors of the one new token (q_nope and the weighted latent)",
        got=f"kv_b_proj.weight used with operands of shapes {cache_sized}",
        hint="do not call mla(...) or kv_b_proj(c_kv): fold W_uk into the query (einsum with q_nope) and W_uv into "
        "the output (einsum with the weighted latent), and attend directly over [c_kv | k_rope]",
    )
