"""Checks for p05.distributed_training, graded on outcomes in real 4-rank gloo worlds (`llm_algo.distributed`).

References, independent of the solutions: the grid from a reshape of the ranks into a (dp, tp) table (rows are TP
groups, columns DP groups); the Hugging Face `LlamaForCausalLM` itself for the model's logits and gradients; and
single-process training of that Hugging Face model on the whole batches with `torch.optim.AdamW` for the loss curve
and the final logits (only the order of float32 sums differs)."""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, one_thread, reference_only
from llm_algo.distributed import attempted, expect_ranks_ok, expect_ranks_refuse, run_ranks

checks = Checks("p05.distributed_training")

WORLD, TP = 4, 2
DEADLINE = 90.0
PRELOAD = ("torch._dynamo", "torch.optim")  # the first AdamW of a process imports these: not the learner's time
FORBID = ("torch.nn.parallel.DistributedDataParallel",)
INSTEAD = "wrap the model in your DDP from p02.ddp"
STEPS, BATCH, SEQ = 6, 8, 16
LR = 1e-2  # not train_2d's default 3e-3: a train_2d that ignores its lr is caught

_cache: dict = {}


def in_world(fn, *args, deadline=DEADLINE):
    return run_ranks(fn, WORLD, args=args, deadline=deadline, preload=PRELOAD, forbid=FORBID, instead=INSTEAD)


# ---------------------------------------------------------------------------------------------- grid_groups


def grid_by_reshape(world_size: int, tp: int):
    table = torch.arange(world_size).view(world_size // tp, tp)  # row = DP replica, column = TP rank
    return [row.tolist() for row in table], [column.tolist() for column in table.T]


@checks("grid_groups")
def grid_matches_a_dp_by_tp_table(ex):
    """the groups of worlds 1-12 with every tp that divides them equal the rows and columns of a (dp, tp) table"""
    for world_size in range(1, 13):
        for tp in (t for t in range(1, world_size + 1) if world_size % t == 0):
            got = ex.grid_groups(world_size, tp)
            want = grid_by_reshape(world_size, tp)
            expect(
                isinstance(got, tuple) and len(got) == 2 and [list(g) for g in got[0]] == want[0],
                "wrong TP groups",
                input=f"world_size={world_size}, tp={tp}",
                expected=f"TP groups {want[0]} (consecutive ranks)",
                got=repr(got)[:160],
                hint="TP group k is ranks k*tp .. k*tp + tp - 1",
            )
            expect(
                [list(g) for g in got[1]] == want[1],
                "wrong DP groups",
                input=f"world_size={world_size}, tp={tp}",
                expected=f"DP groups {want[1]} (ranks with the same rank % tp)",
                got=repr(got[1])[:160],
                hint="DP group j is ranks j, j + tp, j + 2 tp, ...",
            )


@checks("grid_groups")
def each_rank_in_one_group_of_each_kind(ex):
    """world 8, tp 2 and tp 4: every rank in exactly one TP and one DP group, which meet only in it"""
    for tp in (2, 4):
        tp_groups, dp_groups = ex.grid_groups(8, tp)
        for rank in range(8):
            mine_tp = [g for g in tp_groups if rank in g]
            mine_dp = [g for g in dp_groups if rank in g]
            expect(
                len(mine_tp) == 1 and len(mine_dp) == 1 and set(mine_tp[0]) & set(mine_dp[0]) == {rank},
                "a rank is not in exactly one TP group and one DP group meeting only in it",
                input=f"world_size=8, tp={tp}, rank {rank}",
                expected="one TP group, one DP group, intersection {rank}",
                got=f"TP {mine_tp}, DP {mine_dp}",
                hint="the grid is a table: each rank is one cell, in one row and one column",
            )


@checks("grid_groups")
def grid_refuses_what_is_not_a_grid(ex):
    """tp not dividing the world, sizes below 1: ValueError; floats and bools: TypeError"""
    for args, errors, label in [
        ((6, 4), (ValueError,), "world_size=6, tp=4 (4 does not divide 6)"),
        ((4, 0), (ValueError,), "tp=0"),
        ((0, 1), (ValueError,), "world_size=0"),
        ((4, 2.0), (TypeError,), "tp=2.0 (a float)"),
        ((True, 1), (TypeError,), "world_size=True (a bool)"),
    ]:
        expect_refused(
            lambda args=args: ex.grid_groups(*args), label, "validate before building the groups", errors=errors
        )


# ---------------------------------------------------------------------------------------------- the model


def make_model(seed: int = 0, dtype=torch.float32):
    from llm_algo.references.hf import tiny_llama_config, transformers_module

    torch.manual_seed(seed)
    config = tiny_llama_config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    return transformers_module().LlamaForCausalLM(config).to(dtype)


def config_of(model) -> dict:
    c = model.config
    return {
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_layers": c.num_hidden_layers,
        "num_heads": c.num_attention_heads,
        "num_kv_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_parameters["rope_theta"],
    }


def batches_of(steps: int, batch: int, seq: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 60, (batch, seq + 1), generator=g) for _ in range(steps)]


def rank_model(cls, state_dict, config, input_ids, tp_groups):
    """In every rank: create the TP groups (all of them, in order), build the model on this rank's group, and return
    its logits, d(sum of logits * fixed weights)/d(embedding), and its parameter count."""
    handles = [dist.new_group(g) for g in tp_groups]
    rank = dist.get_rank()
    group = next(h for h, g in zip(handles, tp_groups, strict=True) if rank in g)
    model = cls(state_dict, config, group)
    logits = model(input_ids)
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    embedding = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding)).weight
    grad = embedding.grad
    return logits.detach(), None if grad is None else grad.detach(), sum(p.numel() for p in model.parameters())


def hf_logits_and_embedding_grad(model, input_ids):
    with reference_only():
        model.zero_grad()
        logits = model(input_ids=input_ids).logits
        weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
        (logits * weights).sum().backward()
        return logits.detach(), model.model.embed_tokens.weight.grad.detach().clone()


def model_run(ex, dtype):
    key = ("model", id(ex.TinyLlama2D), dtype)
    if key not in _cache:
        attempted(lambda: ex.TinyLlama2D({}, {"num_layers": 1, "rms_norm_eps": 1e-6}, None))
        hf = make_model(dtype=dtype)
        input_ids = batches_of(1, 3, 12, seed=5)[0][:, :-1]
        tp_groups = [[0, 1], [2, 3]]
        results = in_world(rank_model, ex.TinyLlama2D, hf.state_dict(), config_of(hf), input_ids, tp_groups)
        values = expect_ranks_ok(
            results,
            input=f"world 4, TP groups {tp_groups}, input_ids (3, 12), {dtype}",
            hint="build every layer with group=tp_group; copy the weights of the state dict",
        )
        _cache[key] = (ex.TinyLlama2D, values, hf_logits_and_embedding_grad(hf, input_ids), hf)
    return _cache[key][1:]


@checks("TinyLlama2D")
@one_thread()
def logits_equal_hugging_face_float64(ex):
    """world 4, TP groups [0,1] and [2,3]: every rank's logits (3, 12, 64) and embedding gradient equal HF's (float64 model)"""
    values, (want, want_grad), _ = model_run(ex, torch.float64)
    for rank, (logits, grad, _) in enumerate(values):
        expect_close(
            logits,
            want,
            input=f"rank {rank}, float64",
            what="logits",
            hint="per layer: x + attention(norm1(x)), then x + mlp(norm2(x)); final norm; head",
        )
        expect(
            grad is not None,
            "the embedding got no gradient",
            input=f"rank {rank}",
            expected="a gradient",
            got="None",
            hint="nn.Embedding.from_pretrained(weight, freeze=False)",
        )
        # Llama's RMSNorm (HF's and the given one) takes its statistics in float32 whatever the input dtype, so a
        # float64 model's gradients agree to float32 round-off, not float64's
        expect_close(
            grad,
            want_grad,
            dtype=torch.float32,
            input=f"rank {rank}, float64 (RMSNorm statistics in float32)",
            what="embedding gradient",
            hint="check the residuals",
        )


@checks("TinyLlama2D")
@one_thread()
def logits_equal_hugging_face_float32(ex):
    """the same in float32, within the tolerance of float32 sums in another order"""
    values, (same_dtype, _), _ = model_run(ex, torch.float32)
    with reference_only(), torch.no_grad():
        oracle = make_model(dtype=torch.float64)(input_ids=batches_of(1, 3, 12, seed=5)[0][:, :-1]).logits
    for rank, (logits, _, _) in enumerate(values):
        expect(
            logits.dtype == torch.float32,
            "the logits are not float32",
            input=f"rank {rank}, a float32 model",
            expected="float32",
            got=str(logits.dtype),
            hint="keep the dtype of the weights",
        )
        expect_close(logits, oracle, baseline=same_dtype, input=f"rank {rank}, float32", what="logits")


@checks("TinyLlama2D")
@one_thread()
def each_rank_holds_only_its_shards(ex):
    """with TP 2, a rank's parameters are the replicated ones plus half of every split weight"""
    values, _, hf = model_run(ex, torch.float64)
    c = hf.config
    split = c.num_hidden_layers * (
        (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim * c.hidden_size
        + c.num_attention_heads * c.head_dim * c.hidden_size
        + 3 * c.intermediate_size * c.hidden_size
    )
    total = sum(p.numel() for p in hf.parameters())
    want = total - split // 2
    for rank, (_, _, count) in enumerate(values):
        expect(
            count == want,
            "wrong number of parameters on a rank",
            input=f"rank {rank} of TP 2",
            expected=f"{want:,} (all {total:,} minus half of the {split:,} split weights)",
            got=f"{count:,}",
            hint="only attention and MLP are split (your ParallelAttention and ParallelSwiGLU); the rest is replicated",
        )


@checks("TinyLlama2D")
def model_refuses_a_missing_weight(ex):
    """a state dict without model.layers.1.mlp.up_proj.weight: KeyError naming it, on every rank"""
    attempted(lambda: ex.TinyLlama2D({}, {"num_layers": 1, "rms_norm_eps": 1e-6}, None))
    hf = make_model()
    missing = "model.layers.1.mlp.up_proj.weight"
    state = {k: v for k, v in hf.state_dict().items() if k != missing}
    results = in_world(rank_refuse_model, ex.TinyLlama2D, state, config_of(hf), [[0, 1], [2, 3]])
    expect_ranks_refuse(results, (KeyError,), input=f"state_dict without {missing!r}", hint="look up every name")
    expect(
        missing in results[0].message,
        "the KeyError does not name the missing tensor",
        input=f"state_dict without {missing!r}",
        expected=f"a message containing {missing!r}",
        got=results[0].message[:120],
    )


def rank_refuse_model(cls, state, config, tp_groups):
    handles = [dist.new_group(g) for g in tp_groups]
    rank = dist.get_rank()
    cls(state, config, next(h for h, g in zip(handles, tp_groups, strict=True) if rank in g))


# ---------------------------------------------------------------------------------------------- train_2d


def train_single(steps: int, dtype, lr: float = 3e-3):
    """One process, the HF model, the whole batches: (losses, final logits on batch 0)."""
    model = make_model(dtype=dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    batches = batches_of(steps, BATCH, SEQ)
    losses = []
    with reference_only():
        for batch in batches:
            logits = model(input_ids=batch[:, :-1]).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            final = model(input_ids=batches[0][:, :-1]).logits
    return torch.tensor(losses, dtype=torch.float64), final


def recorded(train_2d, *args):
    """In every rank: train_2d(*args), and the shapes of the token ids every nn.Embedding was called on meanwhile."""
    seen = []

    def record(module, inputs):
        if isinstance(module, torch.nn.Embedding):
            seen.append(tuple(inputs[0].shape))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        result = train_2d(*args)
    finally:
        handle.remove()
    return result, seen


def train_run(ex):
    key = ("train", id(ex.train_2d))
    if key not in _cache:
        attempted(lambda: ex.train_2d({}, {}, [], TP))
        hf = make_model()
        results = in_world(recorded, ex.train_2d, hf.state_dict(), config_of(hf), batches_of(STEPS, BATCH, SEQ), TP, LR)
        values = expect_ranks_ok(
            results,
            input=f"world 4 = DP 2 x TP 2, {STEPS} steps of batches ({BATCH}, {SEQ + 1}), lr={LR}",
            hint="every rank creates every group, in the same order; DDP over the DP group",
        )
        _cache[key] = (
            ex.train_2d,
            values,
            train_single(STEPS, torch.float64, LR),
            train_single(STEPS, torch.float32, LR),
        )
    return _cache[key][1:]


@checks("train_2d")
@one_thread()
def loss_curve_equals_one_process(ex):
    """DP 2 x TP 2 on 4 ranks, 6 AdamW steps at lr 1e-2: every rank's global losses equal one-process training of
    the HF model"""
    values, (oracle, _), (same_dtype, _) = train_run(ex)
    for rank, (value, _) in enumerate(values):
        losses = value["losses"] if isinstance(value, dict) else None
        expect(
            isinstance(losses, list) and len(losses) == STEPS,
            "losses missing or of the wrong length",
            input=f"rank {rank}",
            expected=f"a list of {STEPS} floats",
            got=repr(losses)[:100],
        )
        expect_close(
            torch.tensor(losses, dtype=torch.float32),
            oracle,
            baseline=same_dtype.float(),
            input=f"rank {rank}, {describe(steps=STEPS)}, lr={LR}",
            what="loss curve",
            hint="average gradients over the DP group only; record the mean of the replica losses over the DP group; "
            "AdamW with the lr given",
        )


@checks("train_2d")
@one_thread()
def final_logits_equal_one_process(ex):
    """after training, every rank's logits on the first batch equal the one-process model's"""
    values, (_, oracle), (_, same_dtype) = train_run(ex)
    for rank, (value, _) in enumerate(values):
        expect_close(
            value["logits"],
            oracle,
            baseline=same_dtype,
            input=f"rank {rank}, logits on batch 0 after {STEPS} steps",
            what="logits",
            hint="zero the gradients after each step; DDP over the DP group; the full batch for the final logits",
        )


@checks("train_2d")
@one_thread()
def each_replica_uses_its_own_rows(ex):
    """ranks 0, 1 (replica 0) train on rows (0, 4) of each batch of 8, ranks 2, 3 (replica 1) on rows (4, 8): 4 rows
    per forward pass (a forward hook on every nn.Embedding records the shapes)"""
    values, _, _ = train_run(ex)
    for rank, (value, seen) in enumerate(values):
        replica = rank // TP
        share = (BATCH // 2, SEQ)
        expect(
            seen[:STEPS] == [share] * STEPS,
            "a replica's model did not train on its share of each batch",
            input=f"rank {rank}, {STEPS} steps of batches ({BATCH}, {SEQ + 1}), DP 2",
            expected=f"{STEPS} forward passes on inputs {share}",
            got=f"the embedding saw inputs of shapes {seen[:STEPS]}",
            hint="each replica takes its B / dp rows (and the first T columns as inputs)",
        )
        want = (replica * BATCH // 2, (replica + 1) * BATCH // 2)
        expect(
            tuple(value["rows"]) == want,
            "wrong rows for this replica",
            input=f"rank {rank} (DP replica {replica}, TP rank {rank % TP}), batches of {BATCH}",
            expected=str(want),
            got=str(value["rows"]),
            hint="the replica index is the rank's position in its DP group (rank // tp); TP ranks share the rows",
        )


@checks("train_2d")
@one_thread()
def refuses_a_batch_the_replicas_cannot_share(ex):
    """a batch of 7 rows over 2 replicas: ValueError on every rank"""
    attempted(lambda: ex.train_2d({}, {}, [], TP))
    hf = make_model()
    results = in_world(ex.train_2d, hf.state_dict(), config_of(hf), batches_of(1, 7, SEQ), TP)
    expect_ranks_refuse(results, (ValueError,), input="one batch of 7 rows, DP 2", hint="check B % dp before training")
