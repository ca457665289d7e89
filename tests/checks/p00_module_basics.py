"""Checks for p00.module_basics. References: PyTorch's own bookkeeping (`named_parameters`, `named_buffers`,
`state_dict`, `load_state_dict(strict=...)`, `.to()` with dtypes and the `meta` device), `F.embedding` and
`torch.bincount` for the embedding, activations recomputed layer by layer for the hooks, and sample statistics
(mean, standard deviation over tens of thousands of draws) for the initialisation."""

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p00.module_basics")


# ------------------------------------------------------------------------------------------ ScaledEmbedding


@checks("scaled_embedding")
def registration_and_state_dict(ex):
    """weight is the only parameter; token_counts and embed_scale are buffers; state_dict = {weight, token_counts}"""
    emb = ex.ScaledEmbedding(11, 6, padding_idx=0)
    label = "ScaledEmbedding(11, 6, padding_idx=0)"
    params, buffers = dict(emb.named_parameters()), dict(emb.named_buffers())
    expect(
        list(params) == ["weight"],
        "the parameters are wrong",
        input=label,
        expected="['weight']",
        got=str(list(params)),
        hint="self.weight = nn.Parameter(...); constants and counters are buffers, not parameters",
    )
    expect_tensor(params["weight"], shape=(11, 6), dtype=torch.float32, input=label, what="weight")
    expect(
        sorted(buffers) == ["embed_scale", "token_counts"],
        "the buffers are wrong",
        input=label,
        expected="['embed_scale', 'token_counts']",
        got=str(sorted(buffers)),
        hint='self.register_buffer("token_counts", ...) and self.register_buffer("embed_scale", ..., persistent=False)',
    )
    expect_tensor(buffers["token_counts"], shape=(11,), dtype=torch.int64, input=label, what="token_counts")
    expect_tensor(buffers["embed_scale"], shape=(), dtype=torch.float32, input=label, what="embed_scale")
    expect(
        float(buffers["embed_scale"]) == float(torch.tensor(6**0.5)) and not bool(buffers["token_counts"].any()),
        "embed_scale must be sqrt(d_model) and token_counts must start at zero",
        input=label,
        expected=f"{6**0.5:.6f}, zeros",
        got=f"{float(buffers['embed_scale']):.6f}, {buffers['token_counts'].tolist()}",
    )
    expect(
        list(emb.state_dict()) == ["weight", "token_counts"],
        "the state_dict keys are wrong",
        input=label,
        expected="['weight', 'token_counts']",
        got=str(list(emb.state_dict())),
        hint="embed_scale is derived from d_model: persistent=False keeps it out of checkpoints",
    )
    expect(
        bool((params["weight"][0] == 0).all()) and float(params["weight"][1:].std()) > 0.5,
        "the padding row must be zero and the other rows ~ N(0, 1)",
        input=label,
        expected="weight[0] == 0, std of the rest ~ 1",
        got=f"weight[0] = {params['weight'][0].tolist()}",
        hint="torch.randn(vocab_size, d_model), then zero the padding_idx row before wrapping it in nn.Parameter",
    )


@checks("scaled_embedding")
def forward_matches_f_embedding(ex):
    """outputs equal F.embedding(ids, weight) * sqrt(d_model) (float64 oracle), gradients reach the weight rows"""
    emb = ex.ScaledEmbedding(50, 16)
    ids = torch.randint(0, 50, (3, 7))
    ids[0, :3] = 4  # a repeated token: its gradient is the sum of its uses
    out = emb(ids)
    label = describe(ids=ids) + ", ScaledEmbedding(50, 16)"
    expect_tensor(out, shape=(3, 7, 16), dtype=torch.float32, input=label)
    weight = emb.weight.detach().double()
    expect_close(out, F.embedding(ids, weight) * 16**0.5, input=label, hint="weight[ids] * embed_scale")
    upstream = torch.randn(3, 7, 16)
    out.backward(upstream)
    leaf = weight.clone().requires_grad_()
    (F.embedding(ids, leaf) * 16**0.5).backward(upstream.double())
    expect_close(
        emb.weight.grad,
        leaf.grad,
        input=label + ", backward of a random upstream gradient",
        what="weight.grad",
        hint="look rows up by indexing the Parameter itself (no .data, no detach) so gradients flow",
    )


@checks("scaled_embedding")
def counts_only_in_training_mode(ex):
    """token_counts adds each id's occurrences per forward in train mode, and stays put in eval mode"""
    emb = ex.ScaledEmbedding(9, 4)
    batches = [torch.randint(0, 9, (2, 5)) for _ in range(3)]
    for ids in batches:
        emb(ids)
    want = sum(torch.bincount(ids.flatten(), minlength=9) for ids in batches)
    label = "three (2, 5) batches in train mode, ScaledEmbedding(9, 4)"
    expect(
        torch.equal(emb.token_counts, want),
        "token_counts does not count the ids seen in training",
        input=label,
        expected=str(want.tolist()),
        got=str(emb.token_counts.tolist()),
        hint="token_counts += torch.bincount(ids.flatten(), minlength=vocab_size), under torch.no_grad()",
    )
    expect(
        not emb.token_counts.requires_grad and emb.token_counts.dtype == torch.int64,
        "token_counts became part of autograd, or changed dtype",
        input=label,
        expected="int64, requires_grad False",
        got=f"{emb.token_counts.dtype}, requires_grad {emb.token_counts.requires_grad}",
    )
    emb.eval()
    emb(torch.randint(0, 9, (4, 6)))
    expect(
        torch.equal(emb.token_counts, want),
        "token_counts changed during an eval-mode forward",
        input=label + ", then one forward after model.eval()",
        expected=str(want.tolist()),
        got=str(emb.token_counts.tolist()),
        hint="update only `if self.training:`; eval and generation must not change training statistics",
    )


@checks("scaled_embedding")
def moves_and_casts_with_the_module(ex):
    """.to(bfloat16) casts weight and embed_scale (not the int64 counter); .to('meta') moves every tensor"""
    emb = ex.ScaledEmbedding(20, 3072).to(torch.bfloat16)
    label = "ScaledEmbedding(20, 3072).to(torch.bfloat16)"
    expect(
        emb.embed_scale.dtype == torch.bfloat16 and emb.token_counts.dtype == torch.int64,
        "embed_scale did not follow .to(bfloat16), or the counter was cast",
        input=label,
        expected="embed_scale bfloat16 (sqrt(3072) rounds to 55.5), token_counts int64",
        got=f"embed_scale {getattr(emb.embed_scale, 'dtype', None)}, token_counts {emb.token_counts.dtype}",
        hint="a plain tensor attribute is not cast by .to(); register it as a buffer",
    )
    ids = torch.randint(0, 20, (2, 3))
    out = emb(ids)
    want = F.embedding(ids, emb.weight.detach()) * torch.tensor(3072**0.5, dtype=torch.bfloat16)
    expect_tensor(out, shape=(2, 3, 3072), dtype=torch.bfloat16, input=label)
    expect(
        torch.equal(out, want),
        "bf16 output differs from weight[ids] * bf16(sqrt(3072)) = weight[ids] * 55.5",
        input=label + ", " + describe(ids=ids),
        expected=f"{want[0, 0, :3].tolist()} ...",
        got=f"{out[0, 0, :3].tolist()} ...",
        hint="multiply by embed_scale cast to the weight's dtype, as Gemma does",
    )
    meta = ex.ScaledEmbedding(5, 4).to("meta")
    tensors = {"weight": meta.weight, "token_counts": meta.token_counts, "embed_scale": meta.embed_scale}
    stuck = [name for name, t in tensors.items() if not isinstance(t, torch.Tensor) or t.device.type != "meta"]
    expect(
        not stuck,
        "some tensors did not move with .to('meta') (the meta device stands in for a GPU here)",
        input="ScaledEmbedding(5, 4).to('meta')",
        expected="weight, token_counts, embed_scale all on meta",
        got="left behind: " + ", ".join(stuck),
        hint="register every tensor as a parameter or buffer; plain attributes stay where they were created",
    )


@checks("scaled_embedding")
def checkpoint_round_trip_and_strict(ex):
    """state_dict -> a fresh layer (strict) gives the same outputs and counts; an nn.Embedding checkpoint needs strict=False"""
    trained = ex.ScaledEmbedding(30, 8)
    trained(torch.randint(0, 30, (4, 9)))
    fresh = ex.ScaledEmbedding(30, 8)
    result = fresh.load_state_dict(trained.state_dict(), strict=True)
    ids = torch.randint(0, 30, (2, 5))
    trained.eval()
    fresh.eval()
    expect(
        torch.equal(fresh(ids), trained(ids)) and torch.equal(fresh.token_counts, trained.token_counts),
        "a strict state_dict round trip does not reproduce the layer",
        input="ScaledEmbedding(30, 8), one training forward, state_dict loaded into a fresh one",
        expected="equal outputs and equal token_counts",
        got=f"load_state_dict returned {result}",
        hint="every tensor that must survive (weight, token_counts) has to be a parameter or persistent buffer",
    )
    embedding = nn.Embedding(30, 8)
    target = ex.ScaledEmbedding(30, 8)
    try:
        target.load_state_dict(embedding.state_dict(), strict=True)
        strict_refused = False
    except RuntimeError:
        strict_refused = True
    result = target.load_state_dict(embedding.state_dict(), strict=False)
    expect(
        strict_refused and list(result.missing_keys) == ["token_counts"] and not result.unexpected_keys,
        "loading an nn.Embedding checkpoint gives the wrong missing/unexpected keys",
        input="nn.Embedding(30, 8).state_dict() into ScaledEmbedding(30, 8)",
        expected="strict=True raises; strict=False: missing ['token_counts'], unexpected []",
        got=f"strict raised: {strict_refused}, missing {list(result.missing_keys)}, "
        f"unexpected {list(result.unexpected_keys)}",
        hint="embed_scale must be non-persistent, so it is neither saved nor expected",
    )
    expect(
        torch.equal(target.weight.detach(), embedding.weight.detach()),
        "the weight was not loaded from the nn.Embedding checkpoint",
        input="nn.Embedding(30, 8).state_dict() into ScaledEmbedding(30, 8), strict=False",
        expected="the same weight",
        got="a different weight",
        hint='name the parameter "weight", as nn.Embedding does',
    )


@checks("scaled_embedding")
def bad_ids_refused(ex):
    """ids equal to vocab_size or negative are refused with ValueError"""
    emb = ex.ScaledEmbedding(10, 4)
    for ids, label in [(torch.tensor([[1, 10]]), "an id = vocab_size = 10"), (torch.tensor([[-1, 2]]), "an id = -1")]:
        expect_value_error(lambda i=ids: emb(i), f"ScaledEmbedding(10, 4), {label}", "check 0 <= ids < vocab_size")
    expect(
        not emb.token_counts.any(),
        "a refused batch was still counted",
        input="ScaledEmbedding(10, 4) after two refused batches",
        expected="token_counts all zero",
        got=str(emb.token_counts.tolist()),
        hint="validate before updating any state",
    )


# ------------------------------------------------------------------------------------------ record_outputs


class TinyBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


class TinyLM(nn.Module):
    """Embedding, two blocks, the first one used twice (a shared layer, as in ALBERT or looped transformers),
    a final norm and an untied head."""

    def __init__(self, vocab=17, d=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([TinyBlock(d), TinyBlock(d)])
        self.norm = nn.RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        x = self.blocks[0](x)
        x = self.blocks[0](x)  # shared: runs twice
        x = self.blocks[1](x)
        return self.head(self.norm(x))


def manual_trace(model, ids):
    """The activations of TinyLM, recomputed step by step without hooks."""
    with torch.no_grad():
        b0, b1 = model.blocks
        x0 = model.embed(ids)
        h0 = b0.norm(x0)
        u0 = b0.up(h0)
        d0 = b0.down(F.silu(u0))
        x1 = x0 + d0
        h1 = b0.norm(x1)
        u1 = b0.up(h1)
        d1 = b0.down(F.silu(u1))
        x2 = x1 + d1
        u2 = b1.up(b1.norm(x2))
        d2 = b1.down(F.silu(u2))
        x3 = x2 + d2
        logits = model.head(model.norm(x3))
    return {
        "blocks.0.up": [u0, u1],
        "blocks.0.down": [d0, d1],
        "blocks.1.up": [u2],
        "blocks.1.down": [d2],
        "head": [logits],
        "blocks.0": [x1, x2],
        "blocks.1": [x3],
    }


def expect_records(records, want, label):
    expect(
        isinstance(records, dict) and sorted(records) == sorted(want),
        "recorded the wrong modules",
        input=label,
        expected=str(sorted(want)),
        got=str(sorted(records)) if isinstance(records, dict) else type(records).__name__,
        hint="names from model.named_modules(); only modules that are instances of `types`",
    )
    for name, values in want.items():
        got = records[name]
        expect(
            isinstance(got, list) and len(got) == len(values),
            f"wrong number of recorded calls for {name!r}",
            input=label,
            expected=f"{len(values)} output(s), one per call",
            got=f"{len(got) if isinstance(got, list) else type(got).__name__}",
            hint="append every call's output to a list: a shared module runs more than once",
        )
        for i, (g, w) in enumerate(zip(got, values, strict=True)):
            expect_close(g, w.double(), input=label, what=f"records[{name!r}][{i}]", hint="record the output")


def hooks_left(model):
    return sum(len(m._forward_hooks) for m in model.modules())


@checks("record_outputs")
def linear_layers_of_a_tiny_lm(ex):
    """every nn.Linear of a tiny LM, the shared block's layers twice, in call order, equal to a manual trace"""
    model = TinyLM()
    ids = torch.randint(0, 17, (2, 5))
    output, records = ex.record_outputs(model, ids, types=(nn.Linear,))
    want = manual_trace(model, ids)
    label = "TinyLM (blocks.0 runs twice), ids (2, 5), types=(nn.Linear,)"
    expect_close(output, want["head"][0].double(), input=label, what="model output", hint="return model(*args)")
    linears = ("blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down", "head")
    expect_records(records, {name: want[name] for name in linears}, label)


@checks("record_outputs")
def several_types_and_custom_modules(ex):
    """types=(TinyBlock,): the blocks' outputs; the model itself is recorded under '' when it matches"""
    model = TinyLM()
    ids = torch.randint(0, 17, (1, 4))
    _, records = ex.record_outputs(model, ids, types=(TinyBlock,))
    want = manual_trace(model, ids)
    expect_records(records, {"blocks.0": want["blocks.0"], "blocks.1": want["blocks.1"]}, "TinyLM, types=(TinyBlock,)")
    _, records = ex.record_outputs(model, ids, types=(TinyLM, nn.Embedding))
    expect_records(
        records,
        {"": want["head"], "embed": [model.embed(ids).detach()]},
        "TinyLM, types=(TinyLM, nn.Embedding): the root module is named ''",
    )


class AttentionBlock(nn.Module):
    """nn.MultiheadAttention returns a tuple (output, attention weights), as older Hugging Face layers did."""

    def __init__(self, d=8):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x):
        return x + self.attn(x, x, x, need_weights=True)[0]


@checks("record_outputs")
def tuple_outputs_record_their_first_element(ex):
    """a module that returns a tuple (nn.MultiheadAttention: output, weights) is recorded by its first element"""
    model = AttentionBlock()
    x = torch.randn(2, 5, 8)
    _, records = ex.record_outputs(model, x, types=(nn.MultiheadAttention,))
    with torch.no_grad():
        want = model.attn(x, x, x, need_weights=True)[0]
    expect_records(records, {"attn": [want]}, "AttentionBlock, x (2, 5, 8), types=(nn.MultiheadAttention,)")


@checks("record_outputs")
def detached_and_hooks_removed(ex):
    """recorded tensors do not hold the graph, and no hook is left on any module afterwards"""
    model = TinyLM()
    ids = torch.randint(0, 17, (2, 3))
    output, records = ex.record_outputs(model, ids, types=(nn.Linear, nn.RMSNorm))
    attached = [name for name, values in records.items() for v in values if v.requires_grad or v.grad_fn is not None]
    expect(
        not attached,
        "recorded outputs still require grad (each one keeps the autograd graph, and its memory, alive)",
        input="TinyLM in training mode, types=(nn.Linear, nn.RMSNorm)",
        expected="every recorded tensor detached",
        got="attached: " + ", ".join(attached[:4]),
        hint="append output.detach()",
    )
    expect(
        output.requires_grad,
        "the model output lost its graph",
        input="TinyLM, ids (2, 3)",
        expected="output.requires_grad True (only the records are detached)",
        got="False",
        hint="return the model's output as it is; run it without torch.no_grad()",
    )
    expect(
        hooks_left(model) == 0,
        "hooks are still registered after record_outputs returned",
        input="TinyLM, types=(nn.Linear, nn.RMSNorm)",
        expected="0 forward hooks left",
        got=f"{hooks_left(model)} left",
        hint="keep the handles returned by register_forward_hook and call handle.remove() on each",
    )
    counts = {name: len(values) for name, values in records.items()}
    model(ids)  # a later forward must not add records
    expect(
        counts == {name: len(values) for name, values in records.items()},
        "a later forward still appended to the records",
        input="TinyLM: record_outputs, then model(ids) again",
        expected=str(counts),
        got=str({name: len(values) for name, values in records.items()}),
        hint="remove the hooks before returning",
    )


@checks("record_outputs")
def hooks_removed_when_the_forward_raises(ex):
    """a forward that raises (a bad token id) propagates the error and still leaves no hook behind"""
    model = TinyLM()
    bad = torch.tensor([[1, 99]])  # 99 >= vocab size 17: nn.Embedding raises IndexError
    try:
        ex.record_outputs(model, bad, types=(nn.Linear, nn.Embedding))
    except NotImplementedError:
        raise
    except IndexError:
        pass
    else:
        expect(False, "the model's error was swallowed", input="TinyLM, ids with 99 >= 17", expected="IndexError")
    expect(
        hooks_left(model) == 0,
        "hooks stay registered after the forward raised",
        input="TinyLM, ids with 99 >= vocab size 17 (the forward raises)",
        expected="0 forward hooks left",
        got=f"{hooks_left(model)} left",
        hint="try: output = model(*args) finally: remove every handle",
    )


# ------------------------------------------------------------------------------------------ init_gpt2_style


def scrambled(model):
    """Every parameter set to random values far from any init, so nothing passes by leaving defaults."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(3.0 + torch.rand_like(p))
    return model


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(300, 128, padding_idx=3)
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.LayerNorm(128), nn.Linear(128, 384), nn.GELU(), nn.Linear(384, 128, bias=False))]
        )
        self.final = nn.RMSNorm(128)
        self.norm_no_affine = nn.LayerNorm(128, elementwise_affine=False)
        self.conv = nn.Conv1d(4, 4, 3)  # not GPT-2's business: left alone


def apply_init(ex, model, std):
    return model.apply(functools.partial(ex.init_gpt2_style, std=std))


@checks("init_gpt2_style")
def weight_statistics(ex):
    """std 0.02: Linear and Embedding weights have mean ~0 and std ~0.02 over 38k-49k draws each"""
    model = scrambled(Mixed())
    apply_init(ex, model, 0.02)
    for name in ("embed.weight", "layers.0.1.weight", "layers.0.3.weight"):
        w = dict(model.named_parameters())[name].detach().double()
        if name == "embed.weight":
            w = torch.cat([w[:3], w[4:]])  # without the padding row
        n = w.numel()
        mean, std = float(w.mean()), float(w.std())
        expect(
            abs(mean) < 5 * 0.02 / n**0.5 and abs(std - 0.02) < 0.02 * 5 / (2 * n) ** 0.5,
            f"{name} does not look like N(0, 0.02^2)",
            input=f"Mixed model (scrambled first), std=0.02, {n} entries",
            expected="mean 0 +- 5 standard errors, std 0.02 +- 5 standard errors",
            got=f"mean {mean:.2e}, std {std:.5f}",
            hint="nn.init.normal_(w, mean=0.0, std=std): the second parameter is the standard deviation, not variance",
        )


@checks("init_gpt2_style")
def biases_norms_and_padding(ex):
    """Linear biases 0, LayerNorm/RMSNorm gains 1 and biases 0, the Embedding padding row 0, a Conv1d untouched"""
    model = scrambled(Mixed())
    conv_before = {k: v.clone() for k, v in model.conv.state_dict().items()}
    apply_init(ex, model, 0.05)
    label = "Mixed model (every parameter scrambled to 3..4 first), std=0.05"
    params = dict(model.named_parameters())
    wants = {
        "layers.0.1.bias": 0.0,
        "layers.0.0.weight": 1.0,
        "layers.0.0.bias": 0.0,
        "final.weight": 1.0,
    }
    for name, value in wants.items():
        p = params[name].detach()
        expect(
            bool((p == value).all()),
            f"{name} was not set to {value:g}",
            input=label,
            expected=f"all {value:g}",
            got=f"{p[:3].tolist()} ...",
            hint="biases zeros_, LayerNorm/RMSNorm weights ones_, LayerNorm biases zeros_",
        )
    expect(
        bool((params["embed.weight"][3] == 0).all()) and float(params["embed.weight"][4].abs().max()) < 1,
        "the embedding's padding row is not zero (or the others were not re-initialised)",
        input=label + ", nn.Embedding(300, 128, padding_idx=3)",
        expected="row 3 all zeros, other rows ~ N(0, 0.05^2)",
        got=f"row 3: {params['embed.weight'][3, :3].tolist()} ...",
        hint="after normal_, zero weight[padding_idx] under torch.no_grad()",
    )
    expect(
        all(torch.equal(model.conv.state_dict()[k], v) for k, v in conv_before.items()),
        "a module that is not Linear, Embedding or a norm was changed",
        input=label + ", an nn.Conv1d in the model",
        expected="Conv1d unchanged",
        got="changed",
        hint="only handle the types the exercise names; apply visits every module",
    )


@checks("init_gpt2_style")
def parameters_stay_trainable_leaves(ex):
    """after apply, parameters are still leaves that require grad, with no grad_fn: an optimizer can train them"""
    model = scrambled(Mixed())
    before = [id(p) for p in model.parameters()]
    apply_init(ex, model, 0.02)
    bad = [n for n, p in model.named_parameters() if not (p.is_leaf and p.requires_grad and p.grad_fn is None)]
    expect(
        not bad,
        "some parameters are no longer trainable leaves",
        input="Mixed model after model.apply(init_gpt2_style)",
        expected="every parameter a leaf with requires_grad=True",
        got=", ".join(bad[:4]),
        hint="change parameters in place under no_grad (nn.init.*_ does that); never rebind p = p * ...",
    )
    expect(
        [id(p) for p in model.parameters()] == before,
        "the parameter objects changed",
        input="Mixed model after model.apply(init_gpt2_style)",
        expected=f"the same {len(before)} nn.Parameter objects",
        got=f"{len(list(model.parameters()))} parameters, not all the original objects",
        hint="initialise the existing parameters in place; do not assign new tensors to module attributes",
    )
