"""Checks for p02.swiglu. References: the float64 closed form with `F.silu`, Hugging Face `LlamaMLP` and
`Phi3MLP` (fused gate_up_proj) built locally from tiny random configs, float64 autograd through the closed form and
`gradcheck`, derivatives worked out by hand, and the published FFN sizes of Llama-2 and Llama-3."""

import math

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_refused,
    expect_tensor,
    reference_only,
)
from llm_algo.check.restrictions import AUTOGRAD
from llm_algo.references.hf import config_of, tiny_llama_config

checks = Checks("p02.swiglu")
checks.restrict(
    "SwiGLUFunction",
    forbid=AUTOGRAD,
    instead="write each gradient from section 6's chain rule with tensor ops (autograd is the checks' reference)",
)

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


# ------------------------------------------------------------------------------------------ SwiGLUFunction


def autograd_gradients(x, weights, grad_out):
    """The reference: autograd through the closed form, on fresh leaves."""
    with reference_only():
        leaves = [t.detach().clone().requires_grad_() for t in (x, *weights)]
        out = closed_form(*leaves)
        out.backward(grad_out)
    return out.detach(), [leaf.grad for leaf in leaves]


def learner_gradients(ex, x, weights, grad_out):
    leaves = [t.detach().clone().requires_grad_() for t in (x, *weights)]
    out = ex.SwiGLUFunction.apply(*leaves)
    out.backward(grad_out)
    return out.detach(), [leaf.grad for leaf in leaves]


class DirectContext:
    """The `ctx` of a direct call: what save_for_backward stores, saved_tensors gives back."""

    needs_input_grad = (True, True, True, True)

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


def learner_gradients_called_directly(ex, x, weights, grad_out):
    """forward and backward called by this check, as autograd would call them. Autograd's engine runs a backward
    without the restriction's torch watch (no TorchFunctionMode inside the engine), so a direct call is what lets the
    restriction see an autograd call inside the learner's backward."""
    ctx = DirectContext()
    with torch.no_grad():
        out = ex.SwiGLUFunction.forward(ctx, x.clone(), *(w.clone() for w in weights))
        grads = ex.SwiGLUFunction.backward(ctx, grad_out.clone())
    return out, list(grads)


GRAD_NAMES = ("grad_x", "grad_w_gate", "grad_w_up", "grad_w_down")
GRAD_HINTS = {
    "grad_x": "grad_x = grad_gate @ w_gate + grad_up @ w_up: x feeds both projections, so both paths add up",
    "grad_w_gate": "grad_w_gate = grad_gate^T x (summed over rows), grad_gate = grad_a * up * silu'(gate) with "
    "silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z)))",
    "grad_w_up": "grad_w_up = grad_up^T x with grad_up = grad_a * silu(gate) (silu of the gate, not the gate itself)",
    "grad_w_down": "grad_w_down = grad_out^T a with a = silu(gate) * up, summed over the rows (not averaged)",
}


@checks("SwiGLUFunction")
def hand_checkable_scalar_case(ex):
    """d = h = 1: y = w_d silu(w_g x) (w_u x); the four derivatives worked out on paper"""
    x, wg, wu, wd = 0.5, 1.5, -2.0, 0.75
    g, u = wg * x, wu * x
    sig = 1 / (1 + math.exp(-g))
    silu, dsilu = g * sig, sig * (1 + g * (1 - sig))
    expected = {  # dy/d(each input), for grad_out = 1
        "grad_x": wd * (dsilu * wg * u + silu * wu),
        "grad_w_gate": wd * dsilu * x * u,
        "grad_w_up": wd * silu * x,
        "grad_w_down": silu * u,
    }
    inputs = [torch.tensor([[value]], dtype=torch.float64) for value in (x, wg, wu, wd)]
    out, grads = learner_gradients(ex, inputs[0], inputs[1:], torch.ones(1, 1, dtype=torch.float64))
    label = "x=[[0.5]], w_gate=[[1.5]], w_up=[[-2]], w_down=[[0.75]], grad_out=1"
    expect_close(out, torch.tensor([[wd * silu * u]], dtype=torch.float64), input=label, hint="the forward of swiglu")
    for name, grad in zip(GRAD_NAMES, grads, strict=True):
        expect(grad is not None, f"backward returned no {name}", input=label, hint="return four gradients")
        expect_close(
            grad, torch.tensor([[expected[name]]], dtype=torch.float64), input=label, what=name, hint=GRAD_HINTS[name]
        )


@checks("SwiGLUFunction")
def gradcheck_float64(ex):
    """torch.autograd.gradcheck in float64 through x (2, 3, 4) and the three weights (h = 6)"""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    weights = [w.requires_grad_(True) for w in random_weights(4, 6)]
    expect_gradcheck(
        ex.SwiGLUFunction.apply,
        (x, *weights),
        input=describe(x=x, w_gate=weights[0], w_down=weights[2]),
        hint="each gradient is the chain rule through one forward line, read bottom-up (section 6)",
    )


@checks("SwiGLUFunction")
def matches_autograd_over_shapes_and_dtypes(ex):
    """forward and backward (called directly) equal autograd of the closed form: 1-D to 4-D x, odd sizes, 4 dtypes"""
    for (shape, d, h), dtype in zip(CASES + CASES[2:3], DTYPES[::-1] + [torch.float32], strict=True):
        x = torch.randn(shape, dtype=torch.float64).to(dtype)
        weights = random_weights(d, h, dtype)
        grad_out = torch.randn(shape, dtype=torch.float64).to(dtype)
        label = describe(x=x, w_gate=weights[0], w_down=weights[2], grad_out=grad_out)
        got_out, got = learner_gradients_called_directly(ex, x, weights, grad_out)
        oracle_out, oracle = autograd_gradients(x.double(), [w.double() for w in weights], grad_out.double())
        baseline_out, baseline = autograd_gradients(x, weights, grad_out)
        expect_close(got_out, oracle_out, baseline=baseline_out, input=label, hint="the forward of swiglu")
        for name, grad, want, base, like in zip(GRAD_NAMES, got, oracle, baseline, (x, *weights), strict=True):
            expect_tensor(
                grad,
                shape=like.shape,
                dtype=dtype,
                input=label,
                what=name,
                hint="return each gradient in its input's shape and dtype (reshape grad_x back)",
            )
            expect_close(grad, want, baseline=base, input=label, what=name, hint=GRAD_HINTS[name])


@checks("SwiGLUFunction")
def refuses_weights_that_do_not_fit(ex):
    """w_up of another hidden size, w_down transposed, or weights for another d: ValueError before any GEMM"""
    x = torch.randn(3, 8)
    w_gate, w_up, w_down = random_weights(8, 12, torch.float32)
    bad = [
        ("w_up (13, 8)", (w_gate, torch.randn(13, 8), w_down)),
        ("w_down (12, 8): transposed", (w_gate, w_up, torch.randn(12, 8))),
        ("w_gate, w_up (12, 9) for x (3, 8)", (torch.randn(12, 9), torch.randn(12, 9), torch.randn(9, 12))),
    ]
    for description, weights in bad:
        expect_refused(
            lambda weights=weights: ex.SwiGLUFunction.apply(x, *weights),
            input=f"x (3, 8), w_gate (12, 8), {description}",
            hint="check w_gate.shape == w_up.shape == (h, x.shape[-1]) and w_down.shape == (x.shape[-1], h) first",
            errors=(ValueError,),
        )


# ------------------------------------------------------------------------------------------ FusedSwiGLU


class MatmulRecorder(TorchDispatchMode):
    """Records the output shape of every matrix multiplication that reaches the dispatcher."""

    GEMMS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.mv", "aten.dot")

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func.overloadpacket) in self.GEMMS:
            self.shapes.append(tuple(out.shape))
        return out


def phi3_mlp(hidden, intermediate):
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    fields = dict(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        hidden_act="silu",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    with reference_only():
        mlp = Phi3MLP(config_of("Phi3Config", fields))
        with torch.no_grad():
            for p in mlp.parameters():
                p.normal_(0, p.shape[1] ** -0.5)
    return mlp


@checks("FusedSwiGLU")
def from_unfused_matches_llama_mlp(ex):
    """from_unfused(LlamaMLP): [gate; up] stacked, same output in fp32 and bf16, and the fused gradient is
    [grad W_gate; grad W_up]"""
    for (d, h), dtype in (((24, 56), torch.float32), ((32, 80), torch.bfloat16)):
        reference = hf_mlp(d, h).to(dtype)
        fused = ex.FusedSwiGLU.from_unfused(reference)
        label = f"FusedSwiGLU.from_unfused(LlamaMLP(hidden={d}, intermediate={h}) in {dtype})"
        weight = fused.gate_up_proj.weight
        expect_tensor(
            weight,
            shape=(2 * h, d),
            dtype=dtype,
            input=label,
            what="gate_up_proj.weight",
            hint="copy into a module in the source's dtype and device",
        )
        expect(
            torch.equal(weight[:h], reference.gate_proj.weight) and torch.equal(weight[h:], reference.up_proj.weight),
            "gate_up_proj.weight is not [gate_proj.weight; up_proj.weight]",
            input=label,
            expected="rows 0..h-1 = gate_proj.weight, rows h..2h-1 = up_proj.weight",
            got="another arrangement",
            hint="torch.cat((w_gate, w_up), dim=0): the gate first, as vLLM's shard 0 and Phi-3's checkpoints",
        )
        x = torch.randn(2, 5, d).to(dtype)
        with torch.no_grad():
            oracle = hf_mlp_copy(reference).double()(x.double())
            baseline = reference(x)
            got = fused(x)
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label + ", x (2, 5, d)")
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label + ", x (2, 5, d)",
            hint="forward: one gate_up_proj GEMM, gate = first h columns, up = last h, silu(gate) * up",
        )
    reference = hf_mlp(16, 40).double()
    fused = ex.FusedSwiGLU.from_unfused(reference)
    x, grad_out = torch.randn(3, 4, 16, dtype=torch.float64), torch.randn(3, 4, 16, dtype=torch.float64)
    reference(x).backward(grad_out)
    fused(x).backward(grad_out)
    label = "FusedSwiGLU.from_unfused(LlamaMLP(16, 40)) float64, backward"
    grad = fused.gate_up_proj.weight.grad
    expect(
        grad is not None,
        "gate_up_proj.weight got no gradient",
        input=label,
        hint="from_unfused must return trainable leaf parameters (copy under torch.no_grad)",
    )
    want = torch.cat((reference.gate_proj.weight.grad, reference.up_proj.weight.grad))
    expect_close(
        grad,
        want,
        input=label,
        what="gate_up_proj.weight.grad",
        hint="the fused gradient stacks the two gradients: [grad W_gate; grad W_up]",
    )
    expect_close(
        fused.down_proj.weight.grad, reference.down_proj.weight.grad, input=label, what="down_proj.weight.grad"
    )


def hf_mlp_copy(mlp):
    import copy

    return copy.deepcopy(mlp)


@checks("FusedSwiGLU")
def loads_phi3_fused_checkpoint(ex):
    """a tiny Hugging Face Phi3MLP's state dict (gate_up_proj, down_proj) loads as is; outputs match in fp32, fp16"""
    for (d, h), dtype in (((24, 40), torch.float32), ((32, 72), torch.float16)):
        reference = phi3_mlp(d, h)
        module = ex.FusedSwiGLU(d, h)
        label = f"FusedSwiGLU({d}, {h}).load_state_dict(Phi3MLP(hidden={d}, intermediate={h}).state_dict()), {dtype}"
        mine = {k: tuple(v.shape) for k, v in module.state_dict().items()}
        want = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
        expect(
            mine == want,
            "state_dict differs from Hugging Face Phi3MLP's",
            input=label,
            expected=str(want),
            got=str(mine),
            hint="gate_up_proj = nn.Linear(d, 2h, bias=False), down_proj = nn.Linear(h, d, bias=False)",
        )
        module.load_state_dict(reference.state_dict())
        x = torch.randn(3, 7, d)
        with torch.no_grad():
            oracle = hf_mlp_copy(reference).double()(x.double())
            baseline = reference.to(dtype)(x.to(dtype))
            got = module.to(dtype)(x.to(dtype))
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label,
            hint="Phi-3 splits gate_up_proj's output in two halves, the gate first (chunk(2, dim=-1)); "
            "interleaving (::2) is gpt-oss's layout, not this one",
        )


@checks("FusedSwiGLU")
def one_gemm_for_gate_and_up(ex):
    """forward runs exactly two matrix multiplications: one of width 2h (gate and up), one of width d (down)"""
    for d, h, shape in ((16, 40, (2, 5, 16)), (8, 24, (7, 8))):
        module = ex.FusedSwiGLU(d, h)
        x = torch.randn(shape)
        with torch.no_grad(), MatmulRecorder() as recorder:
            module(x)
        widths = sorted(s[-1] for s in recorder.shapes)
        expect(
            widths == sorted([2 * h, d]),
            "forward does not run one GEMM for gate and up",
            input=f"FusedSwiGLU({d}, {h}), x {shape}",
            expected=f"two matrix multiplications, of output widths {2 * h} and {d}",
            got=f"{len(widths)}, of output widths {widths}",
            hint="one self.gate_up_proj(x) call gives (..., 2h); split that output, do not slice the weight in two",
        )


@checks("FusedSwiGLU")
def from_unfused_refuses_mismatched_weights(ex):
    """gate and up of different sizes, or a down_proj that does not fit them, are refused with a ValueError"""
    mlp = hf_mlp(16, 40)
    for description, attribute, shape in (
        ("up_proj (48, 16)", "up_proj", (48, 16)),
        ("down_proj (16, 48)", "down_proj", (16, 48)),
    ):
        broken = hf_mlp_copy(mlp)
        setattr(broken, attribute, torch.nn.Linear(shape[1], shape[0], bias=False))
        expect_refused(
            lambda broken=broken: ex.FusedSwiGLU.from_unfused(broken),
            input=f"LlamaMLP(16, 40) with {description}",
            hint="check up_proj.weight.shape == gate_proj.weight.shape == (h, d) and down_proj (d, h) first",
            errors=(ValueError,),
        )
