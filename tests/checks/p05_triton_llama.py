"""Checks for p05.triton_llama, graded on outcomes against Hugging Face's Llama.

References, independent of the solutions: `LlamaDecoderLayer` and `LlamaForCausalLM` of a tiny config with random
weights, run in float64 (the oracle) and in the dtype under test (the tolerance baseline: the block may be as far from
float64 as PyTorch's own eager path in that dtype, times the policy's factor); their autograd for every gradient;
`F.cross_entropy` of the float64 logits for the loss; `torch.optim.SGD` on the Hugging Face model for the training step;
and a causality property (changing a later token leaves earlier outputs unchanged)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    one_thread,
    reference_only,
)
from llm_algo.check.restrictions import ATTENTION, CROSS_ENTROPY, RMS_NORM, SOFTMAX
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p05.triton_llama", triton=True)
FORBID = [*RMS_NORM, *SOFTMAX, *ATTENTION, F.silu, nn.SiLU, *CROSS_ENTROPY]
checks.restrict(
    "TritonLlamaBlock",
    "TritonLlama",
    forbid=FORBID,
    instead="use your Triton kernels (rms_norm, RotaryEmbedding, FlashAttention, SwiGLU, fused_cross_entropy)",
)

BLOCK_NAMES = {
    "input_layernorm": "input_layernorm.weight",
    "q_proj": "self_attn.q_proj.weight",
    "k_proj": "self_attn.k_proj.weight",
    "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight",
    "post_attention_layernorm": "post_attention_layernorm.weight",
    "gate_proj": "mlp.gate_proj.weight",
    "up_proj": "mlp.up_proj.weight",
    "down_proj": "mlp.down_proj.weight",
}
HINT_BLOCK = (
    "x + o_proj(attention(RoPE(q), RoPE(k), v, causal)) of rms_norm(x, input_layernorm, eps), then "
    "+ down_proj(SwiGLU(gate, up)) of rms_norm(., post_attention_layernorm, eps)"
)


def sixteen_bit():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def config_for(**overrides):
    from llm_algo.references.hf import tiny_llama_config

    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128)
    return tiny_llama_config(**{**fields, **overrides})


# cases: (label, config overrides, batch, seq)
BLOCK_CASES = [
    ("hidden 64, 4 query heads over 2 KV heads of 16 (GQA)", {}, 2, 24),
    (
        "hidden 64, 2 heads of 32 (MHA), eps 0.25, theta 500000, odd length",
        dict(num_attention_heads=2, num_key_value_heads=2, head_dim=32, rms_norm_eps=0.25, rope_theta=500000.0),
        1,
        17,
    ),
]


def hf_layer(config, seed=0):
    from llm_algo.references.llama import llama_layer

    torch.manual_seed(seed)
    with reference_only():
        return llama_layer("block", config)


def run_hf_layer(layer, config, x, dtype):
    """The layer's output for x in dtype (a copy of the layer in that dtype), differentiable in x and the weights."""
    from llm_algo.references.llama import additive_mask, rotary_tables

    module = type(layer)(config, layer_idx=0).to(dtype)
    module.load_state_dict({k: v.to(dtype) for k, v in layer.state_dict().items()})
    batch, seq = x.shape[:2]
    positions = torch.arange(seq).expand(batch, seq)
    mask = additive_mask(torch.ones(batch, seq, dtype=torch.bool), seq, dtype)
    out = module(
        x, attention_mask=mask, position_ids=positions, position_embeddings=rotary_tables(config, x, positions)
    )
    return (out[0] if isinstance(out, tuple) else out), module


def make_block(ex, layer, config, dtype):
    return ex.TritonLlamaBlock(layer.state_dict(), config, dtype=dtype, device=triton_device())


@checks("TritonLlamaBlock")
@one_thread()
def block_output_equals_hf_layer(ex):
    """the output equals Hugging Face's LlamaDecoderLayer: GQA and MHA, a large eps and theta, fp16 (and bf16 on a GPU)"""
    for label, overrides, batch, seq in BLOCK_CASES:
        config = config_for(**overrides)
        layer = hf_layer(config)
        torch.manual_seed(1)
        x = torch.randn(batch, seq, config.hidden_size, dtype=torch.float64)
        with reference_only(), torch.no_grad():
            oracle, _ = run_hf_layer(layer, config, x, torch.float64)
        for dtype in sixteen_bit():
            with reference_only(), torch.no_grad():
                baseline, _ = run_hf_layer(layer, config, x.to(dtype), dtype)
            block = make_block(ex, layer, config, dtype)
            with torch.no_grad():
                got = block(x.to(dtype).to(triton_device()))
            expect(
                isinstance(got, torch.Tensor) and got.dtype == dtype,
                "the block's output is not a tensor of the block's dtype",
                input=f"{label}, {describe(x=x.to(dtype))}",
                expected=str(dtype),
                got=str(getattr(got, "dtype", type(got).__name__)),
                hint="keep x's dtype through the block",
            )
            expect_close(
                got.cpu(),
                oracle,
                baseline=baseline,
                dtype=dtype,
                input=f"{label}, {describe(x=x.to(dtype))}",
                hint=HINT_BLOCK,
            )


@checks("TritonLlamaBlock")
@one_thread()
def weights_and_input_in_their_own_layouts(ex):
    """a state_dict whose nine weights each have a layout of their own (slices of a fused QKV or gate/up projection,
    padded rows, transposed storage) and x a slice of a wider tensor: the output equals Hugging Face's layer"""
    label, overrides, _, _ = BLOCK_CASES[0]
    batch, seq = 1, 9  # one short sequence: the layouts are the point, and the interpreter's attention is slow
    config = config_for(**overrides)
    layer = hf_layer(config)
    torch.manual_seed(2)
    x = torch.randn(batch, seq, config.hidden_size, dtype=torch.float64)
    with reference_only(), torch.no_grad():
        oracle, _ = run_hf_layer(layer, config, x, torch.float64)
    dtype = sixteen_bit()[0]
    with reference_only(), torch.no_grad():
        baseline, _ = run_hf_layer(layer, config, x.to(dtype), dtype)
    state = {k: v.detach().to(dtype) for k, v in layer.state_dict().items()}
    keys = list(BLOCK_NAMES.values())
    views = distinct_layouts(*(state[k] for k in keys), x.to(dtype).to(triton_device()))
    expect_own_layouts(*views)
    strided = {**state, **dict(zip(keys, views[:-1], strict=True))}
    block = ex.TritonLlamaBlock(strided, config, dtype=dtype, device=triton_device())
    label = f"{label}, {describe(x=views[-1])} with strides {views[-1].stride()}, every weight strided"
    with torch.no_grad():
        got = block(views[-1])
    expect_close(got.cpu(), oracle, baseline=baseline, dtype=dtype, input=label, hint=HINT_BLOCK)


@checks("TritonLlamaBlock")
@one_thread()
def block_gradients_equal_hf_layer(ex):
    """the gradients of x and of all nine weights equal Hugging Face's autograd (your backward kernels run)"""
    label, overrides, batch, seq = BLOCK_CASES[0]
    config = config_for(**overrides)
    layer = hf_layer(config, seed=2)
    torch.manual_seed(3)
    x = torch.randn(batch, seq, config.hidden_size, dtype=torch.float64)
    dy = torch.randn(batch, seq, config.hidden_size, dtype=torch.float64)
    wanted = {}
    for dtype in (torch.float64, *sixteen_bit()):
        with reference_only():
            xs = x.to(dtype).clone().requires_grad_()  # x itself stays a plain tensor
            out, module = run_hf_layer(layer, config, xs, dtype)
            out.backward(dy.to(dtype))
            params = dict(module.named_parameters())
            wanted[dtype] = {"x": xs.grad, **{a: params[k].grad for a, k in BLOCK_NAMES.items()}}
    for dtype in sixteen_bit():
        block = make_block(ex, layer, config, dtype)
        xs = x.to(dtype).to(triton_device()).clone().requires_grad_()
        block(xs).backward(dy.to(dtype).to(triton_device()))
        params = dict(block.named_parameters())
        for name in ["x", *BLOCK_NAMES]:
            got = xs.grad if name == "x" else getattr(params.get(name), "grad", None)
            expect(
                got is not None,
                f"no gradient for {name}",
                input=f"{label}, {dtype}",
                expected=f"a gradient for {'the input' if name == 'x' else 'the parameter ' + name}",
                got="None",
                hint="keep each weight as an nn.Parameter named after its Hugging Face module; use the autograd Functions",
            )
            expect_close(
                got.cpu(),
                wanted[torch.float64][name],
                baseline=wanted[dtype][name],
                dtype=dtype,
                what=f"gradient of {name}",
                input=f"{label}, {describe(x=xs)}, random upstream gradient",
                hint=HINT_BLOCK,
            )


@checks("TritonLlamaBlock")
@one_thread()
def block_is_causal(ex):
    """changing the last token's hidden state changes only the last output row: attention is causal"""
    config = config_for()
    layer = hf_layer(config, seed=4)
    torch.manual_seed(5)
    dtype = torch.float16
    x = torch.randn(1, 20, config.hidden_size).to(dtype)
    x2 = x.clone()
    x2[0, -1] = torch.randn(config.hidden_size).to(dtype)
    block = make_block(ex, layer, config, dtype)
    with torch.no_grad():
        a, b = block(x.to(triton_device())).cpu(), block(x2.to(triton_device())).cpu()
    changed = (a[0, :-1] != b[0, :-1]).any(dim=-1).nonzero().flatten().tolist()
    expect(
        not changed,
        "earlier positions changed when only the last token changed",
        input="x (1, 20, 64) float16, then the same with a new last token",
        expected="rows 0..18 identical",
        got=f"rows {changed[:6]} changed",
        hint="call FlashAttention with causal=True: a token may attend only to itself and earlier tokens",
    )


@checks("TritonLlamaBlock")
def block_refuses_what_it_cannot_run(ex):
    """float32 block or input, a wrong width, no batch dimension: ValueError; a missing weight: KeyError"""
    config = config_for()
    layer = hf_layer(config, seed=6)
    state = layer.state_dict()
    expect_refused(
        lambda: ex.TritonLlamaBlock(state, config, dtype=torch.float32, device=triton_device()),
        "dtype=torch.float32 (the attention kernels need 16-bit)",
        "accept float16 and bfloat16 only",
        errors=(ValueError,),
    )
    missing = {k: v for k, v in state.items() if k != "mlp.up_proj.weight"}
    expect_refused(
        lambda: ex.TritonLlamaBlock(missing, config, dtype=torch.float16, device=triton_device()),
        "a state_dict without mlp.up_proj.weight",
        "raise KeyError naming the missing key",
        errors=(KeyError,),
    )
    block = make_block(ex, layer, config, torch.float16)
    for label, x in [
        ("x (1, 8, 64) float32 for a float16 block", torch.randn(1, 8, 64)),
        ("x (1, 8, 32) float16: hidden size 32, not 64", torch.randn(1, 8, 32).half()),
        ("x (8, 64) float16: no batch dimension", torch.randn(8, 64).half()),
    ]:
        expect_refused(
            lambda x=x: block(x.to(triton_device())),
            label,
            "check x's shape, dtype and device before the kernels",
            errors=(ValueError,),
        )


# ---------------------------------------------------------------------------------------------- the whole model


def hf_model(seed=0, **overrides):
    from llm_algo.references.llama import causal_lm

    torch.manual_seed(seed)
    with reference_only():
        return causal_lm(config_for(**overrides))


def model_hf_name(name: str) -> str:
    """The learner's parameter name (layers.0.q_proj) -> Hugging Face's (model.layers.0.self_attn.q_proj.weight)."""
    if name in ("embed_tokens", "norm"):
        return f"model.{name}.weight"
    if name == "lm_head":
        return "lm_head.weight"
    _, index, attribute = name.split(".")
    return f"model.layers.{index}.{BLOCK_NAMES[attribute]}"


def copy_in(model, dtype):
    twin = type(model)(model.config).to(dtype)
    twin.load_state_dict({k: v.to(dtype) for k, v in model.state_dict().items()})
    return twin


def batch_tokens(vocab, batch=2, seq=16, seed=0, ignore=()):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    for row, col in ignore:
        targets[row, col] = -100
    return inputs, targets


@checks("TritonLlama")
def weights_take_the_dtype_given(ex):
    """TritonLlama(..., dtype=bfloat16): every weight a bfloat16 copy of the state dict's (built, not run: the CPU
    interpreter has no bfloat16 kernels); dtype=float32 is refused (ValueError: the attention kernels need 16 bits)"""
    hf = hf_model(seed=3)
    state = hf.state_dict()
    model = ex.TritonLlama(state, hf.config, dtype=torch.bfloat16, device=triton_device())
    label = "TritonLlama(tiny state_dict (float32), config, dtype=torch.bfloat16)"
    names = dict(model.named_parameters())
    expect(
        {model_hf_name(n) for n in names} == set(state),
        "the model's parameters are not named as the exercise asks",
        input=label,
        expected="embed_tokens, layers.{i}.<q_proj, ...>, norm, lm_head",
        got=", ".join(sorted(names))[:200],
        hint="nn.Parameter attributes embed_tokens, norm, lm_head and an nn.ModuleList `layers` of blocks",
    )
    wrong = [
        f"{name} {param.dtype}"
        for name, param in names.items()
        if param.dtype != torch.bfloat16 or not torch.equal(param.detach().cpu(), state[model_hf_name(name)].bfloat16())
    ]
    expect(
        not wrong,
        "weights are not bfloat16 copies of the state dict",
        input=label,
        expected="every parameter state_dict[key].to(torch.bfloat16)",
        got=f"{len(wrong)} differ, e.g. {wrong[:3]}",
        hint="pass dtype to every parameter and to every TritonLlamaBlock: .to(device=device, dtype=dtype)",
    )
    expect_refused(
        lambda: ex.TritonLlama(state, hf.config, dtype=torch.float32, device=triton_device()),
        "TritonLlama(tiny state_dict, config, dtype=torch.float32)",
        "pass dtype on to the blocks, which refuse anything but float16 and bfloat16",
        errors=(ValueError,),
    )


@checks("TritonLlama")
@one_thread()
def logits_and_loss_equal_hf(ex):
    """logits equal LlamaForCausalLM's, the loss equals cross-entropy of the float64 logits (with ignored targets)"""
    hf = hf_model()
    inputs, targets = batch_tokens(hf.config.vocab_size, ignore=[(0, 3), (1, 15)])
    with reference_only(), torch.no_grad():
        logits64 = copy_in(hf, torch.float64)(input_ids=inputs).logits
        loss64 = F.cross_entropy(logits64.reshape(-1, logits64.shape[-1]), targets.reshape(-1))
    for dtype in sixteen_bit():
        with reference_only(), torch.no_grad():
            logits_low = copy_in(hf, dtype)(input_ids=inputs).logits
            loss_low = F.cross_entropy(logits_low.float().reshape(-1, logits_low.shape[-1]), targets.reshape(-1))
        model = ex.TritonLlama(hf.state_dict(), hf.config, dtype=dtype, device=triton_device())
        label = f"tiny Llama (2 layers, hidden 64, vocab 128), {describe(input_ids=inputs)}, {dtype}"
        with torch.no_grad():
            logits = model(inputs.to(triton_device()))
            loss = model.loss(inputs.to(triton_device()), targets.to(triton_device()))
        expect_close(
            logits.cpu(),
            logits64,
            baseline=logits_low,
            dtype=dtype,
            what="logits",
            input=label,
            hint="embedding rows, the blocks, the final rms_norm with model.norm.weight, then lm_head (not the embedding)",
        )
        expect_close(
            torch.as_tensor(loss).reshape(()).cpu(),
            loss64,
            baseline=loss_low,
            dtype=dtype,
            what="loss",
            input=label + ", targets -100 at (0, 3) and (1, 15)",
            hint="fused_cross_entropy over the (B S, V) logits against the (B S,) targets as given (no extra shift)",
        )


@checks("TritonLlama")
@one_thread()
def gradients_and_one_sgd_step_equal_hf(ex):
    """every weight's gradient, and the weights after one SGD step, equal Hugging Face's"""
    hf = hf_model(seed=1)
    inputs, targets = batch_tokens(hf.config.vocab_size, seed=1)
    lr = 0.5
    stepped, grads = {}, {}
    for dtype in (torch.float64, *sixteen_bit()):
        with reference_only():
            twin = copy_in(hf, dtype)
            logits = twin(input_ids=inputs).logits
            F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
            grads[dtype] = {k: p.grad.clone() for k, p in twin.named_parameters()}
            torch.optim.SGD(twin.parameters(), lr=lr).step()
            stepped[dtype] = {k: p.detach().clone() for k, p in twin.named_parameters()}
    for dtype in sixteen_bit():
        model = ex.TritonLlama(hf.state_dict(), hf.config, dtype=dtype, device=triton_device())
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        model.loss(inputs.to(triton_device()), targets.to(triton_device())).backward()
        names = dict(model.named_parameters())
        expect(
            {model_hf_name(n) for n in names} == set(grads[torch.float64]),
            "the model's parameters are not named as the exercise asks",
            input="TritonLlama(tiny state_dict)",
            expected="embed_tokens, layers.{i}.<q_proj, ...>, norm, lm_head",
            got=", ".join(sorted(names))[:200],
            hint="nn.Parameter attributes embed_tokens, norm, lm_head and an nn.ModuleList `layers` of blocks",
        )
        label = f"tiny Llama, {describe(input_ids=inputs)}, {dtype}, SGD lr={lr}"
        for name, param in names.items():
            hf_name = model_hf_name(name)
            expect(param.grad is not None, f"no gradient for {name}", input=label, expected="a gradient", got="None")
            expect_close(
                param.grad.cpu(),
                grads[torch.float64][hf_name],
                baseline=grads[dtype][hf_name],
                dtype=dtype,
                what=f"gradient of {name}",
                input=label,
                hint="the loss is the mean over the B S rows; gradients flow through your kernels' Functions",
            )
        optimizer.step()
        for name, param in names.items():
            hf_name = model_hf_name(name)
            expect_close(
                param.detach().cpu(),
                stepped[torch.float64][hf_name],
                baseline=stepped[dtype][hf_name],
                dtype=dtype,
                what=f"{name} after one SGD step",
                input=label,
                hint="the parameters the optimizer holds must be the ones the forward uses",
            )


@checks("TritonLlama")
@one_thread()
def refuses_mismatched_targets_and_copies_weights(ex):
    """targets of another shape: ValueError; int32 targets work; the model copies the state dict (training it leaves the caller's alone)"""
    hf = hf_model(seed=2)
    # already the model's dtype and device, so .to() would not copy (a CPU state dict would be copied onto the GPU)
    state = {k: v.half().to(triton_device()) for k, v in hf.state_dict().items()}
    before = state["model.norm.weight"].clone()
    model = ex.TritonLlama(state, hf.config, dtype=torch.float16, device=triton_device())
    inputs, targets = batch_tokens(hf.config.vocab_size, batch=1, seq=8)
    expect_refused(
        lambda: model.loss(inputs.to(triton_device()), targets[:, :-1].to(triton_device())),
        "input_ids (1, 8), targets (1, 7)",
        "compare targets.shape with input_ids.shape first",
        errors=(ValueError,),
    )
    expect_refused(
        lambda: model.loss(inputs.to(triton_device()), targets.view(2, 4).to(triton_device())),
        "input_ids (1, 8), targets (2, 4): as many tokens, another shape",
        "compare targets.shape with input_ids.shape, not only the number of tokens",
        errors=(ValueError,),
    )
    with torch.no_grad():
        wide = model.loss(inputs.to(triton_device()), targets.to(triton_device()))
    narrow = model.loss(inputs.to(triton_device()), targets.int().to(triton_device()))
    expect(
        torch.equal(torch.as_tensor(narrow).detach().cpu(), torch.as_tensor(wide).cpu()),
        "int32 targets give another loss than int64 ones (or fail)",
        input="the same targets as int32 and as int64",
        expected=f"{float(wide):.6f}",
        got=f"{float(torch.as_tensor(narrow).detach()):.6f}",
        hint="the kernel indexes with int64 targets: convert with .long()",
    )
    narrow.backward()
    with torch.no_grad():
        for param in model.parameters():
            param.sub_(param.grad)
    expect(
        torch.equal(state["model.norm.weight"], before),
        "training the model changed the caller's state dict",
        input="TritonLlama(state_dict), one update",
        expected="state_dict untouched",
        got="model.norm.weight changed",
        hint="copy each tensor: .detach().clone()",
    )


# ---------------------------------------------------------------------------------------------- benchmark


def benchmark(ex):
    """One Llama-3-8B decoder layer (d 4096, I 14336, 32/8 heads of 128), B4 S2048 bf16: yours vs eager HF (SDPA) vs
    torch.compile of the HF layer, forward and forward + backward (the gradients of x and of every weight)."""
    from llm_algo.bench import flops_row
    from llm_algo.references.hf import tiny_llama_config

    config = tiny_llama_config(
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        num_hidden_layers=1,
        rope_theta=500000.0,
    )
    config._attn_implementation = "sdpa"
    from llm_algo.references.llama import llama_layer, rotary_tables

    batch, seq, dtype = 4, 2048, torch.bfloat16
    layer = llama_layer("block", config).to("cuda", dtype)
    mine = ex.TritonLlamaBlock(layer.state_dict(), config, dtype=dtype, device="cuda")
    x = torch.randn(batch, seq, 4096, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    positions = torch.arange(seq, device="cuda").expand(batch, seq)
    cos_sin = rotary_tables(config, x, positions)

    def hf(x):
        out = layer(x, attention_mask=None, position_ids=positions, position_embeddings=cos_sin)
        return out[0] if isinstance(out, tuple) else out

    compiled = torch.compile(hf, dynamic=False)
    gemm = 2 * batch * seq * 4096 * (4096 + 2 * 1024 + 4096 + 3 * 14336)
    attention = 4 * batch * 32 * seq * seq * 128 // 2
    fwd = gemm + attention
    shape = "Llama-3-8B layer, B4 S2048 bf16"
    rows = []
    for name, fn, module in (
        ("TritonLlamaBlock", mine, mine),
        ("HF LlamaDecoderLayer (eager, SDPA)", hf, layer),
        ("HF (torch.compile)", compiled, layer),
    ):
        with torch.no_grad():
            fn(x)
        # x's gradient and every weight's, as a training step needs: asking for x's alone lets eager autograd skip
        # the dW GEMMs while torch.compile's one backward graph computes them anyway, so the rows would do unequal work
        wants = (x, *(p for p in module.parameters() if p.requires_grad))
        rows.append(flops_row(f"{name} forward", shape, lambda fn=fn: fn(x.detach()), fwd))
        rows.append(
            flops_row(
                f"{name} fwd+bwd (dx, dW)",
                shape,
                lambda fn=fn, wants=wants: torch.autograd.grad(fn(x), wants, dy),
                fwd + 2 * gemm + 5 * attention // 2,
            )
        )
    return rows
