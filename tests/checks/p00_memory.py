"""Checks for p00.memory. References: storages built here with known sizes; the storages that a real training step
of a tiny Hugging Face Llama allocates (gradients after backward, `torch.optim.SGD`/`AdamW` states after a step),
counted by address; closed forms for the saved activations of an MLP, an `exp` chain and a fused QKV projection;
and `torch.cuda.memory_allocated` on a GPU."""

import torch
import torch.nn as nn

from llm_algo.check import Checks, describe, expect, expect_refused, expect_value_error, one_thread, reference_only
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import causal_lm

checks = Checks("p00.memory")


def counted(tensors):
    """The checks' own count: distinct storages by address (a loop over a set, written independently)."""
    seen, total = set(), 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def expect_bytes(got, expected, label, hint):
    expect(
        isinstance(got, int) and not isinstance(got, bool) and got == expected,
        "wrong number of bytes",
        input=label,
        expected=f"{expected} bytes (int)",
        got=f"{got!r} ({type(got).__name__})",
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ storage_bytes


@checks("storage_bytes")
def storage_of_views_and_clones(ex):
    """a slice, a transpose and a view keep their whole storage; a clone has its own; each block counted once"""
    logits = torch.randn(4, 16, 50)  # (B, T, V) float32: 12,800 bytes
    last = logits[:, -1]  # (4, 50) view
    cases = [
        ([last], 4 * 16 * 50 * 4, "last = logits[:, -1] of logits (4, 16, 50) float32"),
        ([last.clone()], 4 * 50 * 4, "logits[:, -1].clone()"),
        ([logits, last, logits.transpose(1, 2), logits.view(64, 50)], 4 * 16 * 50 * 4, "logits and three views of it"),
        ([logits, last.clone()], 4 * 16 * 50 * 4 + 4 * 50 * 4, "logits and a clone of its last position"),
    ]
    for tensors, expected, label in cases:
        expect_bytes(
            ex.storage_bytes(tensors),
            expected,
            label,
            "count untyped_storage().nbytes() once per storage address (data_ptr), not numel() * element_size()",
        )


@checks("storage_bytes")
def storage_dtypes_none_and_generators(ex):
    """bf16/int64/bool storages, None entries skipped, a generator, an empty list"""
    w = torch.randn(7, 3).to(torch.bfloat16)
    ids = torch.randint(0, 10, (5,))
    mask = torch.ones(2, 9, dtype=torch.bool)
    grads = [None, w.grad, torch.zeros(3)]
    cases = [
        ([w, ids, mask], 7 * 3 * 2 + 5 * 8 + 2 * 9, "bf16 (7, 3), int64 (5,), bool (2, 9)"),
        (grads, 3 * 4, "[None, None, float32 (3,)]: parameters without gradients"),
        ((t for t in (w, w.T, ids)), 7 * 3 * 2 + 5 * 8, "a generator of w, w.T and ids"),
        ([], 0, "an empty list"),
    ]
    for tensors, expected, label in cases:
        expect_bytes(ex.storage_bytes(tensors), expected, label, "skip None; element sizes: bf16 2, int64 8, bool 1")


@checks("storage_bytes")
def storage_matches_model_parameters(ex):
    """the parameters of a tiny Llama with tied embeddings: the shared embedding / LM head is one storage"""
    with reference_only():
        model = causal_lm(tiny_llama_config(tie_word_embeddings=True))
        parameters = list(model.named_parameters(remove_duplicate=False))
        expected = counted(p for _, p in parameters)
    expect_bytes(
        ex.storage_bytes(p for _, p in parameters),
        expected,
        "the named_parameters(remove_duplicate=False) of a tiny Llama with tie_word_embeddings=True",
        "embed_tokens.weight and lm_head.weight are one tensor: one storage address, counted once",
    )


@checks("storage_bytes")
def storage_refuses_non_tensors(ex):
    """a NumPy array or a number in the list: TypeError"""
    for bad, label in [([torch.zeros(2), 3.0], "[tensor, 3.0]"), ([torch.zeros(2).numpy()], "[a NumPy array]")]:
        expect_refused(
            lambda bad=bad: ex.storage_bytes(bad),
            label,
            "raise TypeError for anything that is not a tensor or None",
            errors=(TypeError,),
        )


# ------------------------------------------------------------------------------------------ training_state_bytes


def train_one_step(model, optimizer):
    """One real step on a batch of token ids; returns the bytes actually allocated by it, by kind."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    make = {
        "sgd": lambda: torch.optim.SGD(trainable, lr=1e-3),
        "momentum": lambda: torch.optim.SGD(trainable, lr=1e-3, momentum=0.9),
        "adamw": lambda: torch.optim.AdamW(trainable, lr=1e-3, foreach=False),
    }[optimizer]()
    ids = torch.randint(0, model.config.vocab_size, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    make.step()
    states = [value for state in make.state.values() for value in state.values() if isinstance(value, torch.Tensor)]
    return {
        "parameters": counted(model.parameters()),
        "gradients": counted(p.grad for p in model.parameters()),
        "optimizer": counted(states),
    }


def compare_state(ex, model, optimizer, label):
    predicted = ex.training_state_bytes(model, optimizer)  # before the step, as the exercise asks
    expect(
        isinstance(predicted, dict) and set(predicted) == {"parameters", "gradients", "optimizer"},
        "wrong result type",
        input=label,
        expected='a dict with keys "parameters", "gradients", "optimizer"',
        got=repr(predicted)[:200],
    )
    with reference_only():
        measured = train_one_step(model, optimizer)
    for kind in ("parameters", "gradients", "optimizer"):
        expect_bytes(
            predicted[kind],
            measured[kind],
            f"{label}, {optimizer}: {kind}",
            {
                "parameters": "every parameter once (model.parameters() skips the tied duplicate), numel * element_size",
                "gradients": "only parameters with requires_grad get a .grad, in the parameter's dtype",
                "optimizer": "SGD 0, momentum 1, AdamW 2 copies of the trainable bytes (in the parameter's dtype), "
                "plus a 4-byte float32 step tensor per trainable parameter for AdamW",
            }[kind],
        )


@checks("training_state_bytes")
@one_thread()
def state_matches_a_real_step(ex):
    """a tiny Llama (float32, untied) trained one step with SGD, SGD with momentum and AdamW"""
    for optimizer in ("sgd", "momentum", "adamw"):
        with reference_only():
            model = causal_lm().train()
        compare_state(ex, model, optimizer, "tiny Llama (2 layers, hidden 64), float32, untied embeddings")


@checks("training_state_bytes")
@one_thread()
def state_tied_and_bf16(ex):
    """tied embeddings counted once; a bf16 model keeps bf16 gradients and AdamW states (and float32 steps)"""
    with reference_only():
        tied = causal_lm(tiny_llama_config(tie_word_embeddings=True)).train()
    compare_state(ex, tied, "adamw", "tiny Llama, float32, tie_word_embeddings=True")
    with reference_only():
        half = causal_lm().to(torch.bfloat16).train()
    compare_state(ex, half, "adamw", "tiny Llama in bfloat16")
    with reference_only():
        half = causal_lm().to(torch.bfloat16).train()
    compare_state(ex, half, "momentum", "tiny Llama in bfloat16")


@checks("training_state_bytes")
@one_thread()
def state_with_frozen_parameters(ex):
    """frozen embeddings and layer 0 (as in fine-tuning): parameters counted, no gradients or states for them"""
    for optimizer in ("adamw", "momentum"):
        with reference_only():
            model = causal_lm().train()
            model.model.embed_tokens.weight.requires_grad_(False)
            for p in model.model.layers[0].parameters():
                p.requires_grad_(False)
        compare_state(ex, model, optimizer, "tiny Llama with embed_tokens and layers[0] frozen")


@checks("training_state_bytes")
def state_refuses_unknown_optimizer(ex):
    """an optimizer name that is not sgd, momentum or adamw: ValueError"""
    model = nn.Linear(3, 2)
    for name in ("adam8bit", "AdamW", ""):
        expect_value_error(
            lambda name=name: ex.training_state_bytes(model, name),
            f"optimizer={name!r}",
            "accept exactly 'sgd', 'momentum' and 'adamw'",
        )


@checks("training_state_bytes", requires_cuda=True)
@one_thread()
def state_matches_cuda_memory_allocated(ex):
    """on a GPU: torch.cuda.memory_allocated grows by the predicted gradients and AdamW states (512-byte rounding)"""
    with reference_only():
        model = causal_lm().cuda().train()
    predicted = ex.training_state_bytes(model, "adamw")
    tensors = len(list(model.parameters()))
    with reference_only():
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        for p in model.parameters():
            p.grad = torch.randn_like(p)  # what backward allocates: one gradient per parameter
        torch.cuda.synchronize()
        after_grads = torch.cuda.memory_allocated()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        optimizer.step()  # the step counters stay on the CPU (capturable=False): only the moments are on the GPU
        torch.cuda.synchronize()
        after_step = torch.cuda.memory_allocated()
    slack = 512 * tensors  # the caching allocator rounds every block up to a multiple of 512 bytes
    for kind, measured, expected in [
        ("gradients", after_grads - before, predicted["gradients"]),
        ("optimizer (GPU part)", after_step - after_grads, predicted["optimizer"] - 4 * tensors),
    ]:
        expect(
            expected <= measured <= expected + slack,
            f"{kind}: memory_allocated disagrees with the prediction",
            input="tiny Llama on cuda, float32, AdamW",
            expected=f"{expected} bytes (up to {slack} more for 512-byte rounding)",
            got=f"{measured} bytes allocated",
            hint="gradients: the trainable bytes; AdamW: two moments in the parameter's dtype",
        )


# ------------------------------------------------------------------------------------------ saved_activation_bytes


class FusedQKV(nn.Module):
    """One projection to (B, T, 3d), split into q, k, v views, scores q k^T and their softmax."""

    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # three views of one (B, T, 3d) block
        scores = q @ k.transpose(-2, -1)  # (B, T, T)
        return scores.softmax(-1) @ v


class ExpSquare(nn.Module):
    def forward(self, x):
        e = torch.exp(x)  # exp saves its output e
        return e * e  # mul saves e twice: one storage


@checks("saved_activation_bytes")
@one_thread()
def saved_mlp_closed_form(ex):
    """MLP Linear(d, 4d) -> GELU -> Linear(4d, d) on x (B, T, d): (1 + 4 + 4) B T d elements, fp32 and bf16"""
    for (B, T, d), dtype, grad in [((2, 5, 8), torch.float32, False), ((3, 4, 6), torch.bfloat16, True)]:
        mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(dtype)
        x = torch.randn(B, T, d, dtype=dtype, requires_grad=grad)
        expected = 9 * B * T * d * x.element_size()
        label = describe(x=x) + f", requires_grad={grad}, MLP d -> 4d -> d"
        expect_bytes(
            ex.saved_activation_bytes(mlp, x),
            expected,
            label,
            "saved: x, the GELU input and the GELU output; the weights (and their transposed views) are parameters",
        )


@checks("saved_activation_bytes")
@one_thread()
def saved_views_share_one_block(ex):
    """exp then e * e: one storage; a fused QKV projection: q, k, v saved as views of one (B, T, 3d) block"""
    x = torch.randn(4, 6, requires_grad=True)
    expect_bytes(
        ex.saved_activation_bytes(ExpSquare(), x),
        4 * 6 * 4,
        describe(x=x) + ", e = exp(x); e * e",
        "exp saves e, and e * e saves e twice: count each storage once",
    )
    B, T, d = 2, 5, 8
    module = FusedQKV(d)
    x = torch.randn(B, T, d)
    # saved: x (for the weight's gradient), the qkv block (q, k, v views), the softmax output
    expected = (B * T * d + B * T * 3 * d + B * T * T) * 4
    expect_bytes(
        ex.saved_activation_bytes(module, x),
        expected,
        describe(x=x) + ", fused QKV projection then attention",
        "q, k and v are views of one storage: count it once; skip the projection weight",
    )


@checks("saved_activation_bytes")
@one_thread()
def saved_tiny_llama_layer_scales_with_tokens(ex):
    """a tiny Llama's activations double with the batch, and the count ignores every parameter"""
    with reference_only():
        model = causal_lm().train()
    ids = torch.randint(0, 128, (1, 16))
    one = ex.saved_activation_bytes(model, ids)
    two = ex.saved_activation_bytes(model, ids.repeat(2, 1))
    parameter_bytes = counted(model.parameters())
    expect(
        isinstance(one, int) and one > 0 and two > one,
        "the activation count does not grow with the batch",
        input="tiny Llama, ids (1, 16) then (2, 16)",
        expected="0 < bytes(1 sequence) < bytes(2 sequences)",
        got=f"{one!r} then {two!r}",
        hint="count inside saved_tensors_hooks while the forward runs",
    )
    expect(
        abs(two - 2 * one) < one // 4,
        "the count is not proportional to the tokens",
        input="tiny Llama, ids (1, 16) then (2, 16)",
        expected=f"about {2 * one} bytes for two sequences (twice {one})",
        got=f"{two} bytes (the parameters hold {parameter_bytes})",
        hint="skip every storage that belongs to a parameter (a saved W.T is a view of W's storage)",
    )


@checks("saved_activation_bytes")
@one_thread()
def saved_nothing_without_grad(ex):
    """no tensor requires grad (frozen model, plain input): autograd saves nothing, 0 bytes"""
    mlp = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 6)).requires_grad_(False)
    x = torch.randn(3, 6)
    expect_bytes(
        ex.saved_activation_bytes(mlp, x),
        0,
        describe(x=x) + ", every parameter frozen",
        "count only what the pack hook receives; nothing is saved when nothing requires grad",
    )
