"""Checks for p02.lora. References: Hugging Face PEFT 0.21 (`LoraConfig`, `inject_adapter_in_model` on a one-layer
module, `get_peft_model` on a tiny Llama built locally from a config by `llm_algo.references.llama.causal_lm`): its
initialisation, scaling, outputs (PEFT run in float64 as the oracle, in float32 as the baseline), gradients, merged
weights, state-dict names and trainable counts; `torch.autograd.gradcheck`; and the `nn.Linear` shapes of a real
Llama-3-8B built on the `meta` device (nothing allocated, nothing downloaded)."""

import copy
import math
import warnings
from types import SimpleNamespace

import torch
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_close, expect_gradcheck, expect_refused, expect_tensor, one_thread
from llm_algo.references.hf import tiny_llama_config, transformers_module
from llm_algo.references.llama import causal_lm

checks = Checks("p02.lora")
checks.restrict(
    "lora_linear",
    "apply_lora",
    forbid=["peft"],
    instead="build the adapter from nn.Linear and tensor ops yourself (PEFT is the checks' reference)",
)
checks.restrict(
    "lora_parameter_count",
    forbid=["peft", "transformers"],
    instead="count from the config's fields in closed form (building the model is the checks' reference)",
)


class LinearLookAlike(nn.Module):
    """Has in_features, out_features, weight and bias like nn.Linear, but is not one (what a custom or quantized layer
    outside nn.Linear's hierarchy looks like): LoRALinear must refuse it rather than guess its layout."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.in_features, self.out_features = d_in, d_out
        self.weight = nn.Parameter(torch.randn(d_in, d_out))  # transposed, as GPT-2's Conv1D stores it
        self.bias = None

    def forward(self, x):
        return x @ self.weight


ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peft_module():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import peft
    return peft


def lora_config(r, alpha, target_modules, use_rslora=False):
    return peft_module().LoraConfig(
        r=r, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0, use_rslora=use_rslora
    )


class OneLayer(nn.Module):
    def __init__(self, base: nn.Linear):
        super().__init__()
        self.proj = base


def peft_linear(base: nn.Linear, r, alpha, use_rslora=False):
    """PEFT's lora.Linear around a copy of `base`, with a random B so that the adapter does something."""
    holder = peft_module().inject_adapter_in_model(lora_config(r, alpha, ["proj"], use_rslora), OneLayer(base))
    layer = holder.proj
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0.0, 0.5)
    return layer


def mine_like(ex, peft_layer, r, alpha, use_rslora=False, dtype=None):
    """The learner's LoRALinear with the PEFT layer's weights (base, A, B), optionally in another dtype."""
    base = copy.deepcopy(peft_layer.base_layer)
    mine = ex.LoRALinear(base.to(dtype) if dtype else base, r=r, alpha=alpha, use_rslora=use_rslora)
    with torch.no_grad():
        mine.lora_A.weight.copy_(peft_layer.lora_A["default"].weight)
        mine.lora_B.weight.copy_(peft_layer.lora_B["default"].weight)
    return mine


def as_double(peft_layer):
    return copy.deepcopy(peft_layer).double()


LINEAR_CASES = [  # (d_in, d_out, r, alpha, use_rslora, bias, leading shape of x)
    (16, 24, 4, 8.0, False, True, (2, 5)),
    (7, 5, 1, 1.0, False, False, (3,)),
    (33, 64, 8, 16.0, True, True, (1, 1, 9)),
    (40, 12, 6, 3.0, True, False, (4, 2)),
]


def case_label(d_in, d_out, r, alpha, use_rslora, bias, lead) -> str:
    return (
        f"nn.Linear({d_in}, {d_out}, bias={bias}), r={r}, alpha={alpha:g}, use_rslora={use_rslora}, x {lead + (d_in,)}"
    )


# ------------------------------------------------------------------------------------------ lora_linear


@checks("lora_linear")
@one_thread()
def initialisation_as_peft(ex):
    """at init: B = 0, A Kaiming-uniform (bound 1/sqrt(d_in)), output equal to the base layer's, PEFT's names"""
    for d_in, d_out, r, alpha, use_rslora, bias, lead in LINEAR_CASES:
        label = case_label(d_in, d_out, r, alpha, use_rslora, bias, lead)
        base = nn.Linear(d_in, d_out, bias=bias)
        x = torch.randn(*lead, d_in)
        want = base(x).detach()
        layer = ex.LoRALinear(base, r=r, alpha=alpha, use_rslora=use_rslora)
        names = set(dict(layer.named_parameters()))
        want_names = {"base_layer.weight", "lora_A.weight", "lora_B.weight"} | ({"base_layer.bias"} if bias else set())
        expect(
            names == want_names,
            "the parameter names differ from PEFT's layout",
            input=label,
            expected=str(sorted(want_names)),
            got=str(sorted(names)),
            hint="attributes base_layer, lora_A = nn.Linear(d_in, r, bias=False), lora_B = nn.Linear(r, d_out, ...)",
        )
        expect_tensor(layer.lora_A.weight, shape=(r, d_in), dtype=base.weight.dtype, input=label, what="lora_A.weight")
        expect_tensor(layer.lora_B.weight, shape=(d_out, r), dtype=base.weight.dtype, input=label, what="lora_B.weight")
        expect(
            bool((layer.lora_B.weight == 0).all()),
            "lora_B is not zero at initialisation",
            input=label,
            expected="B = 0, so that the wrapped layer starts as the pretrained one",
            got=f"max |B| = {float(layer.lora_B.weight.abs().max()):.3g}",
            hint="nn.init.zeros_(self.lora_B.weight)",
        )
        bound = 1 / math.sqrt(d_in)
        a = layer.lora_A.weight.detach()
        expect(
            bool((a.abs() <= bound + 1e-7).all()) and bool((a != 0).any()),
            "lora_A is not Kaiming-uniform with a = sqrt(5) (uniform on [-1/sqrt(d_in), 1/sqrt(d_in)], not zero)",
            input=label,
            expected=f"nonzero, |A| <= {bound:.4f}",
            got=f"max |A| = {float(a.abs().max()):.4f}",
            hint="nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5)), as nn.Linear and PEFT do",
        )
        got = layer(x)
        expect(
            isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got.detach(), want),
            "at initialisation the output differs from the base layer's",
            input=label,
            expected="exactly base_layer(x)",
            got=f"max diff {float((got.detach() - want).abs().max()):.3g}" if got.shape == want.shape else "",
            hint="with B = 0 the adapter path adds exactly zero",
        )
        expect(
            math.isclose(
                float(layer.scaling),
                float(peft_linear(nn.Linear(d_in, d_out), r, alpha, use_rslora).scaling["default"]),
                rel_tol=1e-12,
            ),
            "the scaling differs from PEFT's",
            input=label,
            expected=f"{alpha / math.sqrt(r) if use_rslora else alpha / r:g}",
            got=repr(layer.scaling),
            hint="alpha / r, or alpha / sqrt(r) with use_rslora",
        )
    big = ex.LoRALinear(nn.Linear(256, 8), r=64, alpha=16.0)
    spread = float(big.lora_A.weight.detach().std())
    want_std = 1 / math.sqrt(3 * 256)
    expect(
        abs(spread / want_std - 1) < 0.05,
        "lora_A's spread is not Kaiming-uniform's",
        input="nn.Linear(256, 8), r=64: 16,384 entries of A",
        expected=f"std {want_std:.4f} (uniform on ±1/16)",
        got=f"std {spread:.4f}",
        hint="nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))",
    )


@checks("lora_linear")
@one_thread()
def forward_matches_peft(ex):
    """with PEFT's weights (B random): float32 outputs as close to PEFT in float64 as PEFT's own float32"""
    for d_in, d_out, r, alpha, use_rslora, bias, lead in LINEAR_CASES:
        label = case_label(d_in, d_out, r, alpha, use_rslora, bias, lead) + ", B ~ N(0, 0.5²)"
        reference = peft_linear(nn.Linear(d_in, d_out, bias=bias), r, alpha, use_rslora)
        mine = mine_like(ex, reference, r, alpha, use_rslora)
        x = torch.randn(*lead, d_in)
        with torch.no_grad():
            got = mine(x)
            oracle = as_double(reference)(x.double())
            baseline = reference(x)
        expect_tensor(got, shape=oracle.shape, dtype=torch.float32, input=label)
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label,
            hint="base_layer(x) + lora_B(lora_A(x)) * scaling, with scaling alpha / r (alpha / sqrt(r) for rsLoRA)",
        )


@checks("lora_linear")
def gradients_reach_the_adapters_only(ex):
    """backward: no gradient for the frozen base; A, B and x get PEFT's gradients; gradcheck in float64"""
    d_in, d_out, r, alpha = 9, 6, 3, 6.0
    label = f"nn.Linear({d_in}, {d_out}) float64, r={r}, alpha={alpha:g}, x (2, 4, {d_in})"
    fresh = ex.LoRALinear(nn.Linear(d_in, d_out).double(), r=r, alpha=alpha)
    x = torch.randn(2, 4, d_in, dtype=torch.float64)
    fresh(x).pow(2).sum().backward()
    grad_b = fresh.lora_B.weight.grad
    expect(
        fresh.base_layer.weight.grad is None and not fresh.base_layer.weight.requires_grad,
        "the base layer is trainable",
        input=label,
        expected="base_layer.weight.requires_grad == False, no .grad",
        got=f"requires_grad={fresh.base_layer.weight.requires_grad}",
        hint="freeze the wrapped layer: base_layer.requires_grad_(False)",
    )
    expect(
        grad_b is not None and bool((grad_b != 0).any()),
        "lora_B gets no gradient at initialisation",
        input=label,
        expected="a nonzero gradient for B at step 0 (A is random)",
        got="None" if grad_b is None else "all zeros",
        hint="A must be random and B zero; with A = 0 nothing can ever learn",
    )
    reference = as_double(peft_linear(nn.Linear(d_in, d_out), r, alpha))
    mine = mine_like(ex, reference, r, alpha)
    xs = [x.clone().requires_grad_(True), x.clone().requires_grad_(True)]
    for layer, xi in ((mine, xs[0]), (reference, xs[1])):
        (layer(xi) * torch.linspace(-1, 1, d_out, dtype=torch.float64)).sum().backward()
    for what, got, want in (
        ("grad of lora_A", mine.lora_A.weight.grad, reference.lora_A["default"].weight.grad),
        ("grad of lora_B", mine.lora_B.weight.grad, reference.lora_B["default"].weight.grad),
        ("grad of x", xs[0].grad, xs[1].grad),
    ):
        expect(got is not None, f"{what} is missing", input=label, expected="a gradient", got="None", hint="")
        expect_close(got, want, input=label + ", B random", what=what, hint="the adapter path must be differentiable")

    def functional(x, a, b):
        params = {"lora_A.weight": a, "lora_B.weight": b}
        return torch.func.functional_call(mine, params, (x,))

    expect_gradcheck(
        functional,
        (
            torch.randn(3, d_in, dtype=torch.float64, requires_grad=True),
            torch.randn(r, d_in, dtype=torch.float64, requires_grad=True),
            torch.randn(d_out, r, dtype=torch.float64, requires_grad=True),
        ),
        input=label + ": gradcheck over x, A and B",
        hint="use the lora_A and lora_B modules in forward (no .detach(), no .data)",
    )


@checks("lora_linear")
@one_thread()
def merge_unmerge_round_trip(ex):
    """float64: merge puts PEFT's delta weight into W0, keeps the output, is idempotent; unmerge restores W0"""
    for d_in, d_out, r, alpha, use_rslora, bias, lead in LINEAR_CASES:
        label = case_label(d_in, d_out, r, alpha, use_rslora, bias, lead) + ", float64, B random"
        reference = as_double(peft_linear(nn.Linear(d_in, d_out, bias=bias), r, alpha, use_rslora))
        mine = mine_like(ex, reference, r, alpha, use_rslora)
        w0 = mine.base_layer.weight.detach().clone()
        x = torch.randn(*lead, d_in, dtype=torch.float64)
        with torch.no_grad():
            before = mine(x)
            delta = reference.get_delta_weight("default")
            mine.merge()
            expect(
                mine.merged is True, "merge() did not set merged", input=label, expected="True", got=repr(mine.merged)
            )
            expect_close(
                mine.base_layer.weight.detach(),
                w0 + delta,
                input=label,
                what="base weight after merge()",
                hint="W0 += scaling * lora_B.weight @ lora_A.weight  (d_out, r) @ (r, d_in)",
            )
            expect_close(
                mine(x),
                before,
                input=label,
                what="output after merge()",
                hint="once merged, forward must not add the adapter path a second time",
            )
            mine.merge()
            expect_close(
                mine.base_layer.weight.detach(),
                w0 + delta,
                input=label,
                what="base weight after a second merge()",
                hint="merge() on a merged layer is a no-op (check self.merged first)",
            )
            mine.unmerge()
            mine.unmerge()
            expect(
                mine.merged is False,
                "unmerge() did not clear merged",
                input=label,
                expected="False",
                got=repr(mine.merged),
            )
            expect_close(
                mine.base_layer.weight.detach(),
                w0,
                input=label,
                what="base weight after merge, merge, unmerge, unmerge",
                hint="unmerge subtracts the same scaling * B @ A, once",
            )
            expect_close(mine(x), before, input=label, what="output after unmerge()", hint="")


@checks("lora_linear")
def float32_merge_like_peft(ex):
    """float32 merge: the merged weight is as close to the float64 one as PEFT's own float32 merge"""
    d_in, d_out, r, alpha = 48, 20, 8, 16.0
    label = f"nn.Linear({d_in}, {d_out}) float32, r={r}, alpha={alpha:g}, B random"
    reference = peft_linear(nn.Linear(d_in, d_out), r, alpha)
    oracle_layer = as_double(reference)
    mine = mine_like(ex, reference, r, alpha)
    with torch.no_grad():
        oracle = oracle_layer.base_layer.weight + oracle_layer.get_delta_weight("default")
        reference.merge()
        mine.merge()
    expect_tensor(mine.base_layer.weight, shape=(d_out, d_in), dtype=torch.float32, input=label, what="merged weight")
    expect_close(
        mine.base_layer.weight.detach(),
        oracle,
        baseline=reference.base_layer.weight.detach(),
        input=label,
        what="merged weight",
        hint="add scaling * B @ A to the weight in place, in the weight's dtype",
    )


@checks("lora_linear")
def refuses_bad_arguments(ex):
    """rank 0 (ValueError) and a base layer that is not nn.Linear (TypeError) are refused by the constructor; r=1 works"""
    for use_rslora in (False, True):
        expect_refused(
            lambda use_rslora=use_rslora: ex.LoRALinear(nn.Linear(4, 4), r=0, alpha=1.0, use_rslora=use_rslora),
            input=f"nn.Linear(4, 4), r=0, use_rslora={use_rslora}",
            hint="raise ValueError when r < 1, before anything divides by r",
            errors=(ValueError, TypeError),
        )
    for base in (nn.Embedding(10, 4), LinearLookAlike(6, 3)):
        expect_refused(
            lambda base=base: ex.LoRALinear(base, r=2, alpha=4.0),
            input=f"{type(base).__name__} (not an nn.Linear), r=2",
            hint="raise TypeError unless isinstance(base_layer, nn.Linear)",
            errors=(ValueError, TypeError),
        )
    layer = ex.LoRALinear(nn.Linear(5, 3), r=1, alpha=2.0)
    expect(
        tuple(layer.lora_A.weight.shape) == (1, 5) and float(layer.scaling) == 2.0,
        "rank 1 is a valid rank",
        input="nn.Linear(5, 3), r=1, alpha=2",
        expected="lora_A (1, 5), scaling 2.0",
        got=f"lora_A {tuple(layer.lora_A.weight.shape)}, scaling {layer.scaling}",
        hint="refuse r < 1 only",
    )


# ------------------------------------------------------------------------------------------ apply_lora


APPLY_CASES = [  # (config overrides, targets, r, alpha, use_rslora)
    ({}, ["q_proj", "v_proj"], 4, 8.0, False),
    ({"num_key_value_heads": 4, "tie_word_embeddings": True}, ALL_LINEAR, 2, 16.0, True),
    ({"num_key_value_heads": 1, "num_hidden_layers": 3}, ["o_proj", "down_proj", "gate_proj"], 3, 6.0, False),
]


def apply_label(overrides, targets, r, alpha, use_rslora) -> str:
    return f"tiny Llama {overrides or 'GQA 4/2'}, targets {targets}, r={r}, alpha={alpha:g}, rslora={use_rslora}"


def peft_and_mine(ex, overrides, targets, r, alpha, use_rslora):
    """(PEFT's PeftModel, the learner's model) from the same random tiny Llama."""
    base = causal_lm(tiny_llama_config(**overrides))
    theirs = peft_module().get_peft_model(copy.deepcopy(base), lora_config(r, alpha, targets, use_rslora))
    mine = ex.apply_lora(base, targets, r=r, alpha=alpha, use_rslora=use_rslora)
    return theirs, mine


def peft_name(name: str) -> str:
    """PEFT's state-dict name under the lesson's: the PeftModel prefix and the adapter name dropped."""
    return name.removeprefix("base_model.model.").replace(".default.", ".")


@checks("apply_lora")
@one_thread()
def names_and_trainable_match_peft(ex):
    """state-dict names and the trainable parameters are PEFT's (prefix and adapter name aside)"""
    for case in APPLY_CASES:
        theirs, mine = peft_and_mine(ex, *case)
        label = apply_label(*case)
        expect(
            isinstance(mine, nn.Module),
            "apply_lora did not return the model",
            input=label,
            expected="the model",
            got=type(mine).__name__,
            hint="return model",
        )
        want_keys = [peft_name(k) for k in theirs.state_dict()]
        got_keys = list(mine.state_dict())
        missing, extra = sorted(set(want_keys) - set(got_keys)), sorted(set(got_keys) - set(want_keys))
        expect(
            not missing and not extra,
            "the state-dict names differ from PEFT's",
            input=label,
            expected=f"e.g. {missing[:2]}" if missing else f"{len(want_keys)} names",
            got=f"e.g. {extra[:2]}" if extra else f"{len(got_keys)} names",
            hint="wrap exactly the nn.Linear layers whose last name part is a target, with your LoRALinear",
        )
        want_trainable = [peft_name(n) for n, p in theirs.named_parameters() if p.requires_grad]
        got_trainable = [n for n, p in mine.named_parameters() if p.requires_grad]
        expect(
            got_trainable == want_trainable,
            "the trainable parameters differ from PEFT's",
            input=label,
            expected=f"{len(want_trainable)} lora_A/lora_B weights, e.g. {want_trainable[:2]}",
            got=f"{len(got_trainable)}: {[n for n in got_trainable if n not in want_trainable][:3] or got_trainable[:3]}",
            hint="freeze the whole model first, then wrap: only the new lora_A and lora_B train",
        )


@checks("apply_lora")
@one_thread()
def logits_match_peft(ex):
    """with PEFT's adapter weights loaded (B random): logits as close to PEFT in float64 as PEFT's float32"""
    for case in APPLY_CASES:
        theirs, mine = peft_and_mine(ex, *case)
        label = apply_label(*case) + ", B ~ N(0, 0.02²), input ids (2, 7)"
        with torch.no_grad():
            for name, p in theirs.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
        state = {peft_name(k): v for k, v in theirs.state_dict().items()}
        incompatible = mine.load_state_dict(state, strict=False)
        expect(
            not incompatible.missing_keys and not incompatible.unexpected_keys,
            "PEFT's adapter weights do not load into your model",
            input=label,
            expected="every name matches",
            got=f"missing {incompatible.missing_keys[:2]}, unexpected {incompatible.unexpected_keys[:2]}",
            hint="LoRALinear's attributes are base_layer, lora_A and lora_B",
        )
        ids = torch.randint(0, 128, (2, 7))
        with torch.no_grad():
            got = mine(input_ids=ids).logits
            baseline = theirs(input_ids=ids).logits
            oracle = copy.deepcopy(theirs).double()(input_ids=ids).logits
        expect_close(
            got, oracle, baseline=baseline, input=label, what="logits", hint="each LoRALinear must add its path"
        )


@checks("apply_lora")
@one_thread()
def trainable_counts_match_peft(ex):
    """trainable and total parameter counts equal PEFT's get_nb_trainable_parameters(); lm_head not wrapped"""
    for case in APPLY_CASES:
        theirs, mine = peft_and_mine(ex, *case)
        label = apply_label(*case)
        want_trainable, want_total = theirs.get_nb_trainable_parameters()
        got_trainable = sum(p.numel() for p in mine.parameters() if p.requires_grad)
        got_total = sum(p.numel() for p in mine.parameters())
        expect(
            (got_trainable, got_total) == (want_trainable, want_total),
            "the parameter counts differ from PEFT's",
            input=label,
            expected=f"trainable {want_trainable:,} of {want_total:,}",
            got=f"trainable {got_trainable:,} of {got_total:,}",
            hint="freeze every parameter (embeddings, norms, lm_head); wrap only the targets",
        )
        expect(
            isinstance(mine.lm_head, nn.Linear) and type(mine.lm_head) is nn.Linear,
            "the output head was wrapped",
            input=label,
            expected="lm_head stays an nn.Linear",
            got=type(mine.lm_head).__name__,
            hint="match the last name component against target_modules",
        )


@checks("apply_lora")
@one_thread()
def refuses_targets_that_match_nothing(ex):
    """a target list that matches no nn.Linear ("qproj", "c_attn") is refused"""
    for targets in (["qproj"], ["c_attn", "c_proj"]):
        model = causal_lm(tiny_llama_config(num_hidden_layers=1))
        expect_refused(
            lambda model=model, targets=targets: ex.apply_lora(model, targets, r=2, alpha=4.0),
            input=f"tiny Llama, target_modules={targets}",
            hint="raise ValueError when no module matched (PEFT does too)",
            errors=(ValueError, TypeError),
        )


# ------------------------------------------------------------------------------------------ lora_parameter_count


COUNT_CASES = [  # (config overrides, targets, r)
    ({}, ["q_proj", "v_proj"], 4),
    ({"hidden_size": 48, "num_key_value_heads": 1}, ALL_LINEAR, 3),  # head_dim 16 != 48 // 4
    ({"num_key_value_heads": 4, "num_hidden_layers": 3}, ["k_proj", "o_proj", "up_proj"], 8),
    ({"intermediate_size": 100, "num_attention_heads": 8, "head_dim": 8}, ["gate_proj", "down_proj", "v_proj"], 5),
]


@checks("lora_parameter_count")
@one_thread()
def matches_peft_on_tiny_configs(ex):
    """tiny Llama configs (GQA, MQA, MHA, head_dim set apart from hidden // heads): PEFT's trainable count"""
    for overrides, targets, r in COUNT_CASES:
        config = tiny_llama_config(**overrides)
        model = peft_module().get_peft_model(causal_lm(config), lora_config(r, 2 * r, targets))
        want = model.get_nb_trainable_parameters()[0]
        got = ex.lora_parameter_count(config, r, targets)
        expect(
            isinstance(got, int) and got == want,
            "the count differs from PEFT's",
            input=f"tiny LlamaConfig {overrides or 'GQA 4/2'}, r={r}, targets {targets}",
            expected=f"{want:,}",
            got=repr(got),
            hint="k_proj/v_proj output num_key_value_heads * head_dim; use config.head_dim when it is set",
        )


@checks("lora_parameter_count")
@one_thread()
def llama3_8b_from_meta_modules(ex):
    """Llama-3-8B's config: equal to r * (in + out) summed over its nn.Linear modules (built on the meta device)"""
    transformers = transformers_module()
    config = tiny_llama_config(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    for r, targets in ((8, ["q_proj", "v_proj"]), (16, ALL_LINEAR), (64, ["k_proj", "down_proj"])):
        want = sum(
            r * (m.in_features + m.out_features)
            for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and name.split(".")[-1] in targets
        )
        got = ex.lora_parameter_count(config, r, targets)
        expect(
            got == want,
            "the Llama-3-8B count is wrong",
            input=f"Llama-3-8B config (hidden 4096, 32 layers, 32 heads, 8 KV heads), r={r}, targets {targets}",
            expected=f"{want:,}" + (" (the classic 3,407,872)" if want == 3_407_872 else ""),
            got=repr(got),
            hint="per layer r * (d_in + d_out) for each target; k/v output 8 * 128 = 1024, not 4096",
        )


@checks("lora_parameter_count")
def head_dim_absent_or_none(ex):
    """a config without head_dim (or head_dim=None) uses hidden_size // num_attention_heads"""
    fields = dict(
        hidden_size=96, intermediate_size=200, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2
    )
    # per layer: q 96+96, k and v 96+32 each, o 96+96, gate and up 96+200 each, down 200+96
    want = 3 * 5 * ((96 + 96) + 2 * (96 + 32) + (96 + 96) + 3 * (96 + 200))
    for config, what in (
        (SimpleNamespace(**fields), "no head_dim"),
        (SimpleNamespace(**fields, head_dim=None), "None"),
    ):
        got = ex.lora_parameter_count(config, 5, ALL_LINEAR)
        expect(
            isinstance(got, int) and got == want,
            "the count is wrong when head_dim is not given",
            input=f"config {fields}, head_dim: {what}, r=5, all seven projections",
            expected=f"{want:,}",
            got=repr(got),
            hint="head_dim = getattr(config, 'head_dim', None) or hidden_size // num_attention_heads",
        )


@checks("lora_parameter_count")
def refuses_unknown_projections_and_rank_zero(ex):
    """an unknown projection name ("qkv_proj") and r = 0 are refused with a ValueError; r = 1 is counted"""
    config = tiny_llama_config()
    expect_refused(
        lambda: ex.lora_parameter_count(config, 8, ["q_proj", "qkv_proj"]),
        input="tiny LlamaConfig, targets ['q_proj', 'qkv_proj']",
        hint="raise ValueError for a name that is not one of the seven Llama projections",
        errors=(ValueError,),
    )
    expect_refused(
        lambda: ex.lora_parameter_count(config, 0, ["q_proj"]),
        input="tiny LlamaConfig, r=0",
        hint="raise ValueError when r < 1",
        errors=(ValueError,),
    )
    got = ex.lora_parameter_count(config, 1, ["q_proj", "k_proj"])
    want = 2 * ((64 + 64) + (64 + 32))  # 2 layers; q: 64 -> 4 * 16, k: 64 -> 2 * 16
    expect(
        got == want,
        "the count at r = 1 is wrong",
        input="tiny LlamaConfig (hidden 64, 4 heads and 2 KV heads of 16, 2 layers), r=1, q_proj and k_proj",
        expected=str(want),
        got=repr(got),
        hint="r = 1 is a valid rank; refuse r < 1 only",
    )
