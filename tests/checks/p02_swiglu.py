"""Checks for p02.swiglu. References: the float64 closed form with `F.silu`, Hugging Face `LlamaMLP` built
locally from a tiny random config, float64 autograd, and the published FFN sizes of Llama-2 and Llama-3."""

import math

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor
from llm_algo.references.hf import tiny_llama_config

checks = Checks("p02.swiglu")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
CASES = [((5,), 5, 11), ((1, 3, 16), 16, 40), ((2, 5, 33), 33, 91), ((2, 2, 3, 24), 24, 64)]  # (x shape, d, h)


def closed_form(x, w_gate, w_up, w_down):
    """The definition, written without F.linear: silu on the gate branch, times the up branch, then down."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def random_weights(d, h, dtype=torch.float64):
    scale_in, scale_hidden = d**-0.5, h**-0.5  # keeps activations O(1), as a trained layer's are
    return tuple(
        (torch.randn(shape, dtype=torch.float64) * scale).to(dtype)
        for shape, scale in (((h, d), scale_in * 2), ((h, d), scale_in), ((d, h), scale_hidden))
    )


# ------------------------------------------------------------------------------------------ swiglu


@checks("swiglu")
def hand_checkable_units(ex):
    """d = 2, h = 2, identity-like weights: each hidden unit is silu(x_i) * x_j on paper"""
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    w_gate = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # gate unit 0 reads x0, unit 1 reads x1
    w_up = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)  # up unit 0 reads x1, unit 1 reads x0
    w_down = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    silu = lambda z: z / (1 + math.exp(-z))  # noqa: E731
    a0, a1 = silu(1.0) * -2.0, silu(-2.0) * 1.0
    expected = torch.tensor([[a0, a0 + a1]], dtype=torch.float64)
    expect_close(
        ex.swiglu(x, w_gate, w_up, w_down),
        expected,
        input="x=[[1, -2]], w_gate=I, w_up=[[0, 1], [1, 0]], w_down=[[1, 0], [1, 1]]",
        hint="silu goes on x @ w_gate.T (the gate), which multiplies x @ w_up.T; weights are (out, in)",
    )


@checks("swiglu")
def matches_closed_form_over_shapes_and_dtypes(ex):
    """1-D to 4-D inputs, odd sizes, fp32/fp16/bf16/fp64 match the float64 closed form"""
    for shape, d, h in CASES:
        for dtype in DTYPES:
            x = torch.randn(shape, dtype=torch.float64).to(dtype)
            weights = random_weights(d, h, dtype)
            got = ex.swiglu(x, *weights)
            label = describe(x=x, w_gate=weights[0], w_down=weights[2])
            expect_tensor(got, shape=x.shape, dtype=dtype, input=label, hint="return (..., d) in x's dtype")
            expect_close(
                got,
                closed_form(x.double(), *(w.double() for w in weights)),
                baseline=closed_form(x, *weights),
                input=label,
                hint="w_down(silu(x w_gate^T) * (x w_up^T)); SiLU is z * sigmoid(z), not GELU or sigmoid",
            )


@checks("swiglu")
def differentiable_gradcheck(ex):
    """torch.autograd.gradcheck in float64 through x and all three weights"""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    weights = [w.requires_grad_(True) for w in random_weights(4, 6)]
    expect_gradcheck(
        ex.swiglu,
        (x, *weights),
        input=describe(x=x, w_gate=weights[0]),
        hint="torch ops end to end: no .detach(), .item(), numpy or in-place writes",
    )


@checks("swiglu")
def gate_and_up_are_not_interchangeable(ex):
    """swapping w_gate and w_up must change the result (the activation belongs to the gate only)"""
    x = torch.randn(4, 12, dtype=torch.float64)
    w_gate, w_up, w_down = random_weights(12, 20)
    got = ex.swiglu(x, w_gate, w_up, w_down)
    expect_close(
        got,
        closed_form(x, w_gate, w_up, w_down),
        input=describe(x=x, w_gate=w_gate),
        hint="silu(x @ w_gate.T) * (x @ w_up.T): applying silu to the up branch is the classic mix-up",
    )
    expect(
        not torch.allclose(got, closed_form(x, w_up, w_gate, w_down)),
        "your result is symmetric in w_gate and w_up",
        input=describe(x=x, w_gate=w_gate),
        expected="silu on the gate branch only",
        got="the same output with the two weights swapped",
        hint="one branch goes through silu, the other stays linear",
    )


# ------------------------------------------------------------------------------------------ swiglu_hidden_dim

PUBLISHED = [  # (model, dim, multiple_of, ffn_dim_multiplier, intermediate_size in its released config)
    ("Llama-2-7B", 4096, 256, None, 11008),
    ("Llama-2-13B", 5120, 256, None, 13824),
    ("Llama-2-70B", 8192, 4096, 1.3, 28672),
    ("Llama-3-8B", 4096, 1024, 1.3, 14336),
    ("Llama-3-70B", 8192, 4096, 1.3, 28672),
    ("Llama-3.1-405B", 16384, 4096, 1.2, 53248),
]


def slow_spec(dim, multiple_of, multiplier):
    """The smallest multiple of multiple_of that is >= the truncated 8/3 * dim (times the multiplier), by search."""
    target = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        target = int(multiplier * target)
    candidate = 0
    while candidate < target:
        candidate += multiple_of
    return candidate


@checks("swiglu_hidden_dim")
def published_llama_sizes(ex):
    """Llama-2 7B/13B/70B and Llama-3 8B/70B/405B give their released intermediate_size"""
    for model, dim, multiple_of, multiplier, expected in PUBLISHED:
        got = ex.swiglu_hidden_dim(dim, multiple_of=multiple_of, ffn_dim_multiplier=multiplier)
        expect(
            got == expected,
            f"wrong FFN size for {model}",
            input=f"dim={dim}, multiple_of={multiple_of}, ffn_dim_multiplier={multiplier}",
            expected=str(expected),
            got=str(got),
            hint="int(2 * 4 * dim / 3), then int(multiplier * h), then round UP to a multiple of multiple_of",
        )


@checks("swiglu_hidden_dim")
def default_arguments_and_int(ex):
    """defaults are multiple_of=256 and no multiplier; the result is a Python int"""
    got = ex.swiglu_hidden_dim(4096)
    expect(
        type(got) is int,
        "the result is not a Python int",
        input="dim=4096",
        expected="int",
        got=type(got).__name__,
        hint="nn.Linear needs an int size: use integer arithmetic (//), not math.ceil on floats returning floats",
    )
    expect(
        got == 11008,
        "wrong size with the default arguments",
        input="dim=4096 (multiple_of=256, ffn_dim_multiplier=None)",
        expected="11008",
        got=str(got),
        hint="the defaults are Llama-2's: multiple_of=256 and no multiplier",
    )


@checks("swiglu_hidden_dim")
def rounds_up_only_when_needed(ex):
    """matches a search for the smallest multiple at or above 8/3 * d, including values already on a multiple"""
    cases = [(96, 256, None), (192, 128, None), (48, 64, None), (100, 7, None), (4096, 1024, 1.3), (768, 64, 1.5)]
    cases += [(3, 7, None), (6, 1, None)]  # 8 is one above a multiple of 7; every size is a multiple of 1
    cases += [(int(torch.randint(8, 2048, ())), int(m), None) for m in torch.randint(1, 300, (20,))]
    for dim, multiple_of, multiplier in cases:
        got = ex.swiglu_hidden_dim(dim, multiple_of=multiple_of, ffn_dim_multiplier=multiplier)
        expected = slow_spec(dim, multiple_of, multiplier)
        expect(
            got == expected,
            "wrong rounding",
            input=f"dim={dim}, multiple_of={multiple_of}, ffn_dim_multiplier={multiplier}",
            expected=str(expected),
            got=str(got),
            hint="ceil to the next multiple: (h + m - 1) // m * m; a value already on a multiple stays",
        )


# ------------------------------------------------------------------------------------------ SwiGLU module


def hf_mlp(hidden, intermediate):
    from transformers.models.llama.modeling_llama import LlamaMLP

    mlp = LlamaMLP(tiny_llama_config(hidden_size=hidden, intermediate_size=intermediate))
    with torch.no_grad():
        for p in mlp.parameters():
            p.normal_(0, p.shape[1] ** -0.5)
    return mlp


@checks("SwiGLU")
def state_dict_matches_llama_mlp(ex):
    """state_dict keys and shapes equal LlamaMLP's: gate_proj/up_proj (h, d), down_proj (d, h), no biases"""
    module = ex.SwiGLU(24, 56)
    mine = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    want = {k: tuple(v.shape) for k, v in hf_mlp(24, 56).state_dict().items()}
    expect(
        mine == want,
        "state_dict differs from Hugging Face LlamaMLP's",
        input="SwiGLU(dim=24, hidden_dim=56)",
        expected=str(want),
        got=str(mine),
        hint="nn.Linear(dim, hidden_dim, bias=False) for gate_proj and up_proj, nn.Linear(hidden_dim, dim, bias=False)",
    )
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    expect(
        trainable == 3 * 24 * 56,
        "wrong number of trainable parameters",
        input="SwiGLU(dim=24, hidden_dim=56)",
        expected=str(3 * 24 * 56),
        got=str(trainable),
        hint="exactly three weight matrices of d * h entries each",
    )


@checks("SwiGLU")
def matches_hugging_face_llama_mlp(ex):
    """loads LlamaMLP's random weights and matches its output in fp32, bf16 and fp16"""
    for (d, h), dtype in (((32, 80), torch.float32), ((64, 160), torch.bfloat16), ((24, 56), torch.float16)):
        reference = hf_mlp(d, h)
        module = ex.SwiGLU(d, h)
        module.load_state_dict(reference.state_dict())
        x = torch.randn(2, 5, d)
        label = describe(x=x.to(dtype)) + f", LlamaMLP(hidden={d}, intermediate={h}) weights"
        with torch.no_grad():
            oracle = reference.double()(x.to(dtype).double())
            baseline = reference.to(dtype)(x.to(dtype))
            got = module.to(dtype)(x.to(dtype))
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label,
            hint="forward must call swiglu with self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight",
        )


@checks("SwiGLU")
def gradients_match_llama_mlp(ex):
    """backward gives every weight the same gradient as LlamaMLP (float64)"""
    reference = hf_mlp(16, 40).double()
    module = ex.SwiGLU(16, 40).double()
    module.load_state_dict(reference.state_dict())
    x = torch.randn(3, 4, 16, dtype=torch.float64)
    grad_out = torch.randn(3, 4, 16, dtype=torch.float64)
    module(x).backward(grad_out)
    reference(x).backward(grad_out)
    for name, param in reference.named_parameters():
        got = dict(module.named_parameters()).get(name)
        expect(
            got is not None and got.grad is not None,
            f"{name} got no gradient",
            input=describe(x=x),
            expected=f"{name}.grad set",
            got="None",
            hint="use the nn.Linear weights themselves in forward (no copies, no torch.no_grad)",
        )
        expect_close(got.grad, param.grad, input=describe(x=x), what=f"{name}.grad")
