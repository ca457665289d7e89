"""Checks for p01.parallelism_planner. References: `transformers` models (Llama 3 70B and 405B, Mixtral-8x7B, random
small Llama and Mixtral configs) built on the `meta` device, every parameter tensor cut with `torch.chunk` along the
dimension Megatron-LM cuts it and assigned to its pipeline stage by name; a ZeRO spec that pads a flat buffer and
shards it state by state; the 1F1B schedule run operation by operation to count the micro-batches alive on each
stage; every collective of a step listed and priced by its step-by-step ring or pairwise schedule; the ZeRO paper's
1.5x for stage 3; and a brute-force search over every (dp, tp, pp, ep, ZeRO, checkpointing) tuple with the validity
rules written out one by one."""

import math
import random
import warnings
from collections import Counter
from functools import cache

import torch

from llm_algo.check import Checks, expect, expect_exact_int, expect_value_error, reference_only
from llm_algo.references.hf import config_of, transformers_module

checks = Checks("p01.parallelism_planner")
checks.restrict(
    "params_per_gpu",
    forbid=("transformers",),
    instead="count from the config's fields (the models transformers builds are the checks' reference)",
)

LLAMA3_70B = dict(
    vocab_size=128256,
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    tie_word_embeddings=False,
)
LLAMA3_405B = dict(
    vocab_size=128256,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
    num_key_value_heads=8,
    tie_word_embeddings=False,
)
MIXTRAL_8X7B = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    num_local_experts=8,
    num_experts_per_tok=2,
    tie_word_embeddings=False,
)
PUBLISHED = {
    "Llama-3-70B": ("LlamaConfig", LLAMA3_70B),
    "Llama-3.1-405B": ("LlamaConfig", LLAMA3_405B),
    "Mixtral-8x7B": ("MixtralConfig", MIXTRAL_8X7B),
}


def frozen(fields: dict) -> tuple:
    return tuple(sorted(fields.items()))


def make_config(kind: str, fields: dict):
    return config_of(kind, dict(fields))


def label_of(kind: str, fields: dict) -> str:
    for name, (published_kind, published) in PUBLISHED.items():
        if kind == published_kind and fields == published:
            return name
    return f"{kind}(" + ", ".join(f"{k}={v}" for k, v in fields.items() if k != "tie_word_embeddings") + ")"


# ------------------------------------------------------------------------------------------ the sharded meta model


@cache
def meta_shapes(kind: str, fields: tuple) -> tuple:
    """(name, shape) of every parameter of the model transformers builds from the config (on meta: shapes only)."""
    config = make_config(kind, dict(fields))
    with reference_only(), torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers_module().AutoModelForCausalLM.from_config(config)
    return tuple((name, tuple(p.shape)) for name, p in model.named_parameters())


def llama3_stage_of_layers(layers: int, pp: int) -> list[int]:
    """Llama 3's placement: stages of ceil(L/pp) layers, the ends giving up the missing ones (first, last, second,
    second to last, ...); the stage of every layer in order."""
    size = -(-layers // pp)
    sizes = [size] * pp
    low, high, take_low = 0, pp - 1, True
    for _ in range(size * pp - layers):
        if take_low:
            sizes[low] -= 1
            low += 1
        else:
            sizes[high] -= 1
            high -= 1
        take_low = not take_low
    return [stage for stage, n in enumerate(sizes) for _ in range(n)]


# which dimension Megatron cuts over the TP ranks, by the parameter's name
TP_DIM = {
    "q_proj.weight": 0,
    "k_proj.weight": 0,
    "v_proj.weight": 0,
    "o_proj.weight": 1,
    "gate_proj.weight": 0,
    "up_proj.weight": 0,
    "down_proj.weight": 1,
    "embed_tokens.weight": 0,
    "lm_head.weight": 0,
    "experts.gate_up_proj": 1,  # (E, 2I, d): columns of the fused gate and up projections
    "experts.down_proj": 2,  # (E, d, I): rows of the down projection
}


@cache
def reference_stages(kind: str, fields: tuple, tp: int, pp: int, ep: int) -> tuple:
    """What rank 0 of each stage keeps: every meta tensor cut with torch.chunk (experts by EP on dim 0, then by TP)."""
    stage_of = llama3_stage_of_layers(dict(fields)["num_hidden_layers"], pp)
    stages = [{"layers": stage_of.count(s), "dense": 0, "expert": 0} for s in range(pp)]
    for name, shape in meta_shapes(kind, fields):
        parts = name.split(".")
        if "layers" in parts:
            stage = stage_of[int(parts[parts.index("layers") + 1])]
        elif "embed_tokens" in parts:
            stage = 0
        else:  # the final norm and the output head
            stage = pp - 1
        tensor = torch.empty(shape, device="meta")
        is_expert = ".experts." in name
        if is_expert:
            tensor = tensor.chunk(ep, dim=0)[0]
        dim = next((d for suffix, d in TP_DIM.items() if name.endswith(suffix)), None)
        if dim is not None:
            tensor = tensor.chunk(tp, dim=dim)[0]
        stages[stage]["expert" if is_expert else "dense"] += tensor.numel()
    return tuple(stages)


HINT_PARAMS = (
    "per layer: 2*d*(H + K)*head_dim / tp (q, o over H heads; k, v over K) + 2*d norms (replicated) + 3*d*I / tp, "
    "or for Mixtral E*d router (replicated) + (E / ep)*3*d*I / tp experts; embedding V*d / tp on stage 0, "
    "head V*d / tp + final norm d on the last stage; ceil(L / pp) layers, the ends giving up the missing ones"
)


def expect_stages(got, want, label: str, hint: str, keys: tuple, exact: bool = True) -> None:
    expect(
        isinstance(got, list) and len(got) == len(want),
        "not a list with one entry per pipeline stage",
        input=label,
        expected=f"list of {len(want)} dicts",
        got=f"{type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}",
        hint="return one dict per stage, stage 0 first",
    )
    for stage, (g, w) in enumerate(zip(got, want, strict=True)):
        expect(
            isinstance(g, dict) and set(g) == set(keys),
            f"stage {stage}: not a dict with the keys {', '.join(keys)}",
            input=label,
            expected=str(keys),
            got=repr(g)[:160],
            hint="one dict per stage with exactly these keys",
        )
        for key in keys:
            if exact:
                expect_exact_int(g[key], w[key], f"{label}, stage {stage}, {key!r}", hint, f"{key} count")
            else:
                expect(
                    isinstance(g[key], (int, float)) and math.isclose(g[key], w[key], rel_tol=1e-9, abs_tol=1e-6),
                    f"stage {stage}: wrong {key} bytes",
                    input=label,
                    expected=f"{w[key]:,.1f}",
                    got=f"{g[key]!r}"[:80],
                    hint=hint,
                )


# ------------------------------------------------------------------------------------------ params_per_gpu


@checks("params_per_gpu")
def published_models_on_meta(ex):
    """Llama-3-70B, Llama 3.1 405B on its published TP8 x PP16 (126 layers: 7, 8, ..., 8, 7), Mixtral-8x7B with EP"""
    cases = [
        ("Llama-3-70B", 8, 4, 1),
        ("Llama-3-70B", 4, 80, 1),
        ("Llama-3-70B", 1, 3, 1),
        ("Llama-3-70B", 2, 23, 1),  # 23 stages of 4 layers would be 92: 12 missing, from both ends
        ("Llama-3.1-405B", 8, 16, 1),
        ("Mixtral-8x7B", 2, 4, 4),
        ("Mixtral-8x7B", 1, 1, 8),
        ("Mixtral-8x7B", 8, 5, 2),
    ]
    for name, tp, pp, ep in cases:
        kind, fields = PUBLISHED[name]
        want = reference_stages(kind, frozen(fields), tp, pp, ep)
        got = ex.params_per_gpu(make_config(kind, fields), tp, pp, ep)
        expect_stages(
            got,
            want,
            f"{name}, tp={tp}, pp={pp}, ep={ep} (sharded meta model)",
            HINT_PARAMS,
            ("layers", "dense", "expert"),
        )


def random_fields(rng: random.Random) -> tuple[str, dict, list]:
    """A small Llama or Mixtral config and the (tp, pp, ep) grids it admits."""
    kind = rng.choice(["LlamaConfig", "MixtralConfig"])
    kv_heads = rng.choice([1, 2, 4])
    heads = kv_heads * rng.choice([1, 2, 3])
    head_dim = rng.choice([2, 4, 6])
    fields = dict(
        vocab_size=rng.choice([24, 36, 48, 60]),
        hidden_size=heads * head_dim,
        intermediate_size=rng.choice([12, 20, 24, 36]),
        num_hidden_layers=rng.randrange(1, 8),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=False,
    )
    experts = 1
    if kind == "MixtralConfig":
        experts = rng.choice([2, 4, 6])
        fields.update(num_local_experts=experts, num_experts_per_tok=rng.randrange(1, experts + 1))
    grids = [
        (tp, pp, ep)
        for tp in range(1, 13)
        for pp in range(1, fields["num_hidden_layers"] + 1)
        for ep in range(1, experts + 1)
        if heads % tp == kv_heads % tp == fields["intermediate_size"] % tp == fields["vocab_size"] % tp == 0
        and experts % ep == 0
    ]
    return kind, fields, grids


@checks("params_per_gpu")
def random_small_models_on_meta(ex):
    """random small Llama and Mixtral configs (GQA, 1-7 layers, pp not dividing L, ep up to E): every valid grid"""
    rng = random.Random(torch.initial_seed())
    for _ in range(10):
        kind, fields, grids = random_fields(rng)
        for tp, pp, ep in rng.sample(grids, min(5, len(grids))):
            want = reference_stages(kind, frozen(fields), tp, pp, ep)
            got = ex.params_per_gpu(make_config(kind, fields), tp, pp, ep)
            expect_stages(
                got,
                want,
                f"{label_of(kind, fields)}, tp={tp}, pp={pp}, ep={ep}",
                HINT_PARAMS,
                ("layers", "dense", "expert"),
            )


@checks("params_per_gpu")
def refuses_impossible_grids(ex):
    """tp=16 on 8 KV heads, tp not dividing the heads, MLP width or vocabulary, pp > L, ep on a dense model: ValueError"""
    llama, mixtral = make_config("LlamaConfig", LLAMA3_70B), make_config("MixtralConfig", MIXTRAL_8X7B)
    ex.params_per_gpu(llama, 8, 16, 1)  # first: it works at all
    small = dict(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    bad = [
        ("Llama-3-70B, tp=16 (64 heads but only 8 KV heads)", lambda: ex.params_per_gpu(llama, 16, 1, 1)),
        ("Llama-3-70B, tp=3", lambda: ex.params_per_gpu(llama, 3, 1, 1)),
        ("Llama-3-70B, pp=81 (80 layers)", lambda: ex.params_per_gpu(llama, 1, 81, 1)),
        ("Llama-3-70B, ep=2 (a dense model)", lambda: ex.params_per_gpu(llama, 1, 1, 2)),
        ("Llama-3-70B, tp=0", lambda: ex.params_per_gpu(llama, 0, 1, 1)),
        ("Llama-3-70B, pp=0", lambda: ex.params_per_gpu(llama, 1, 0, 1)),
        ("Mixtral-8x7B, ep=3 (8 experts)", lambda: ex.params_per_gpu(mixtral, 1, 1, 3)),
        ("Mixtral-8x7B, ep=0", lambda: ex.params_per_gpu(mixtral, 1, 1, 0)),
        ("a 4-head config with vocab 50, tp=4", lambda: ex.params_per_gpu(make_config("LlamaConfig", small), 4, 1, 1)),
        (
            "a 4-head config with MLP width 26, tp=4",
            lambda: ex.params_per_gpu(
                make_config("LlamaConfig", {**small, "vocab_size": 48, "intermediate_size": 26}), 4, 1, 1
            ),
        ),
        (
            "tie_word_embeddings=True",
            lambda: ex.params_per_gpu(make_config("LlamaConfig", {**small, "tie_word_embeddings": True}), 1, 1, 1),
        ),
        (
            "a Qwen3Config (model_type 'qwen3')",
            lambda: ex.params_per_gpu(make_config("Qwen3Config", {**small, "head_dim": 4}), 1, 1, 1),
        ),
    ]
    for label, call in bad:
        expect_value_error(call, label, "validate the model type, tied embeddings, and every divisibility rule first")


# ------------------------------------------------------------------------------------------ memory_per_gpu


def zero_states(count: int, stage: int, replicas: int) -> dict:
    """ZeRO on a flat buffer: padded with zeros to a multiple of the replicas, each state cut once its stage is on."""
    states = {}
    for key, element_bytes, first_sharded_stage in (("params", 2, 3), ("grads", 2, 2), ("optimizer", 4 + 4 + 4, 1)):
        elements = count
        if stage >= first_sharded_stage:
            elements = (count + (-count) % replicas) // replicas
        states[key] = element_bytes * elements
    return states


def one_f_one_b_peak(pp: int, micro_batches: int, stage: int) -> int:
    """Run stage `stage`'s 1F1B operations (warm-up forwards, then one forward one backward, then the cool-down
    backwards) and return the most micro-batches whose activations it holds at once."""
    warmup = min(pp - stage - 1, micro_batches)
    operations = ["F"] * warmup + ["F", "B"] * (micro_batches - warmup) + ["B"] * warmup
    alive = peak = 0
    for operation in operations:
        alive += 1 if operation == "F" else -1
        peak = max(peak, alive)
    assert alive == 0 and operations.count("F") == micro_batches
    return peak


def plan_tuple(plan) -> tuple:
    return (plan.dp, plan.tp, plan.pp, plan.ep, plan.zero_stage, plan.checkpointing)


def reference_memory(kind: str, fields: dict, plan: tuple, workload: tuple) -> list[dict]:
    dp, tp, pp, ep, zero, checkpointing = plan
    micro_batch, seq_len, global_batch, layer_bytes = workload
    m = global_batch // (dp * micro_batch)
    memory = []
    for stage, held in enumerate(reference_stages(kind, frozen(fields), tp, pp, ep)):
        dense, expert = zero_states(held["dense"], zero, dp), zero_states(held["expert"], zero, dp // ep)
        entry = {key: dense[key] + expert[key] for key in dense}
        alive = one_f_one_b_peak(pp, m, stage)
        per_layer = math.ceil(layer_bytes / tp)  # sequence parallelism
        if checkpointing:
            layer_input = math.ceil(micro_batch * seq_len * fields["hidden_size"] * 2 / tp)
            entry["activations"] = alive * held["layers"] * layer_input + per_layer
        else:
            entry["activations"] = alive * held["layers"] * per_layer
        memory.append(entry)
    return memory


def describe_plan(plan: tuple, workload: tuple) -> str:
    dp, tp, pp, ep, zero, checkpointing = plan
    micro_batch, seq_len, global_batch, layer_bytes = workload
    return (
        f"Plan(dp={dp}, tp={tp}, pp={pp}, ep={ep}, zero_stage={zero}, checkpointing={checkpointing}), "
        f"Workload(micro_batch={micro_batch}, seq_len={seq_len}, global_batch={global_batch}, "
        f"layer_activation_bytes={layer_bytes})"
    )


HINT_MEMORY = (
    "states: model_state_bytes(dense, zero, dp) + model_state_bytes(expert, zero, dp // ep); activations: "
    "min(pp - s, m) micro-batches x layers x ceil(A / tp), or with checkpointing x ceil(2*b*T*d / tp) + ceil(A / tp)"
)
MEMORY_KEYS = ("params", "grads", "optimizer", "activations")


def korthikanti_layer_bytes(fields: dict, micro_batch: int, seq_len: int) -> int:
    """sbh(34 + 5as/h) bytes (arXiv:2205.05198, eq. 1): a plausible per-layer activation size for the workloads."""
    s, b, h, a = seq_len, micro_batch, fields["hidden_size"], fields["num_attention_heads"]
    return s * b * h * 34 + 5 * a * s * s * b


def run_memory(ex, kind: str, fields: dict, plan: tuple, workload: tuple, label: str) -> None:
    want = reference_memory(kind, fields, plan, workload)
    got = ex.memory_per_gpu(make_config(kind, fields), ex.Plan(*plan), ex.Workload(*workload))
    expect_stages(got, want, f"{label}, {describe_plan(plan, workload)}", HINT_MEMORY, MEMORY_KEYS)


@checks("memory_per_gpu")
def published_models_every_zero_stage(ex):
    """Llama-3-70B and Mixtral-8x7B: ZeRO 0-3, EP groups, checkpointing, fewer micro-batches than stages"""
    llama_workload = (1, 8192, 512, korthikanti_layer_bytes(LLAMA3_70B, 1, 8192))
    llama_plans = [(8, 8, 1, 1, 1, False), (2, 8, 4, 1, 1, True), (64, 1, 1, 1, 3, False), (4, 4, 4, 1, 2, False)]
    llama_plans += [(64, 1, 1, 1, 0, True), (16, 4, 1, 1, 3, True)]
    for plan in llama_plans:
        run_memory(ex, "LlamaConfig", LLAMA3_70B, plan, llama_workload, "Llama-3-70B")
    run_memory(ex, "LlamaConfig", LLAMA3_70B, (4, 2, 8, 1, 1, False), (2, 4096, 16, 10**9 + 1), "Llama-3-70B")
    mixtral_workload = (2, 4096, 256, korthikanti_layer_bytes(MIXTRAL_8X7B, 2, 4096))
    for plan in ((8, 1, 4, 8, 1, False), (4, 2, 4, 2, 3, True), (16, 2, 1, 4, 0, False), (8, 4, 1, 4, 2, True)):
        run_memory(ex, "MixtralConfig", MIXTRAL_8X7B, plan, mixtral_workload, "Mixtral-8x7B")


def random_plan(rng: random.Random, grids: list) -> tuple[tuple, tuple]:
    tp, pp, ep = rng.choice(grids)
    dp = ep * rng.choice([1, 2, 3])
    micro_batch = rng.choice([1, 2, 3])
    m = rng.choice([1, 2, pp, pp + 3, 2 * pp + 1])
    workload = (micro_batch, rng.choice([5, 16, 33]), dp * micro_batch * m, rng.randrange(10**3, 10**7))
    return (dp, tp, pp, ep, rng.randrange(4), rng.random() < 0.5), workload


@checks("memory_per_gpu")
def random_small_models_and_plans(ex):
    """random small Llama and Mixtral configs, random valid plans (m below and above pp, odd sizes)"""
    rng = random.Random(torch.initial_seed())
    for _ in range(12):
        kind, fields, grids = random_fields(rng)
        for _ in range(3):
            plan, workload = random_plan(rng, grids)
            run_memory(ex, kind, fields, plan, workload, label_of(kind, fields))


@checks("memory_per_gpu")
def refuses_impossible_plans(ex):
    """ep not dividing dp, a global batch dp * micro_batch does not divide, ZeRO-4, an impossible tp: ValueError"""
    mixtral = make_config("MixtralConfig", MIXTRAL_8X7B)
    workload = ex.Workload(1, 4096, 64, 10**9)
    ex.memory_per_gpu(mixtral, ex.Plan(8, 1, 4, 8, 1, False), workload)  # first: it works at all
    bad = [
        ("Mixtral-8x7B, dp=4, ep=8", ex.Plan(4, 1, 4, 8, 1, False), workload),
        ("Mixtral-8x7B, dp=6, ep=4", ex.Plan(6, 1, 1, 4, 1, False), ex.Workload(1, 4096, 48, 10**9)),
        ("Mixtral-8x7B, dp=8, global batch 60", ex.Plan(8, 1, 4, 1, 1, False), ex.Workload(1, 4096, 60, 10**9)),
        (
            "Mixtral-8x7B, dp=8, micro_batch 16, global batch 64",
            ex.Plan(8, 1, 1, 1, 1, False),
            ex.Workload(16, 4096, 64, 10**9),
        ),
        ("Mixtral-8x7B, zero_stage=4", ex.Plan(8, 1, 1, 1, 4, False), workload),
        ("Mixtral-8x7B, tp=16 (8 KV heads)", ex.Plan(4, 16, 1, 1, 1, False), workload),
        ("Mixtral-8x7B, pp=33 (32 layers)", ex.Plan(2, 1, 33, 1, 1, False), workload),
    ]
    for label, plan, load in bad:
        expect_value_error(
            lambda plan=plan, load=load: ex.memory_per_gpu(mixtral, plan, load),
            f"{label}: {plan}, {load}",
            "validate with micro_batches(plan, workload) and params_per_gpu first",
        )


# ------------------------------------------------------------------------------------------ comm_bytes_per_gpu


def bytes_sent_per_rank(collective: str, ranks: int, nbytes: float) -> float:
    """Walk the schedule: a ring all-reduce is 2(p-1) steps, reduce-scatter, all-gather and pairwise all-to-all
    p-1 steps, each step one chunk of nbytes/p; a point-to-point send is one message."""
    if collective == "send":
        return nbytes
    steps = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}[collective] * (ranks - 1)
    return sum(nbytes / ranks for _ in range(steps))


def step_collectives(kind: str, fields: dict, plan: tuple, workload: tuple, stage: int, held: dict) -> Counter:
    """Every collective one GPU of the stage takes part in during a step: (group, collective, ranks, bytes) -> count."""
    dp, tp, pp, ep, zero, checkpointing = plan
    micro_batch, seq_len, global_batch, _ = workload
    m = global_batch // (dp * micro_batch)
    activation = micro_batch * seq_len * fields["hidden_size"] * 2
    passes = ["forward", "backward"] + (["recomputed forward"] if checkpointing else [])
    calls = Counter()
    for _pass in passes:  # Megatron: before attention and before the MLP, an all-reduce (AG + RS with SP)
        calls["tp", "all_reduce", tp, activation] += 2 * m * held["layers"]
        if kind == "MixtralConfig":  # dispatch to the experts, combine back
            calls["ep", "all_to_all", ep, fields["num_experts_per_tok"] * activation / tp] += 2 * m * held["layers"]
    if stage > 0:
        calls["pp", "send", 2, activation / tp] += m  # gradients to the previous stage
    if stage < pp - 1:
        calls["pp", "send", 2, activation / tp] += m  # activations to the next stage
    for count, ranks in ((held["dense"], dp), (held["expert"], dp // ep)):
        if zero == 3:  # ZeRO paper, Section 7.2.2: weights all-gathered for forward and backward
            calls["dp", "reduce_scatter", ranks, 2 * count] += 1
            calls["dp", "all_gather", ranks, 2 * count] += 2
        else:  # ZeRO-1/2: reduce-scatter + all-gather of the updated weights, as many bytes as an all-reduce
            calls["dp", "all_reduce", ranks, 2 * count] += 1
    return calls


def reference_comm(kind: str, fields: dict, plan: tuple, workload: tuple) -> list[dict]:
    dp, tp, pp, ep, zero, checkpointing = plan
    out = []
    for stage, held in enumerate(reference_stages(kind, frozen(fields), tp, pp, ep)):
        totals = dict.fromkeys(("tp", "pp", "dp", "ep"), 0.0)
        for (group, collective, ranks, nbytes), count in step_collectives(
            kind, fields, plan, workload, stage, held
        ).items():
            totals[group] += count * bytes_sent_per_rank(collective, ranks, nbytes)
        out.append(totals)
    return out


HINT_COMM = (
    "TP: m*layers*2*passes all-reduces of a = 2*b*T*d bytes, 2(tp-1)/tp*a each; PP: m*a/tp to each neighbour stage; "
    "DP: 2(p-1)/p*2P (3(p-1)/p for ZeRO-3) for the dense part over dp and the experts over dp/ep; "
    "EP: m*layers*2*passes all-to-alls of k*a/tp, (ep-1)/ep of it sent; passes = 3 with checkpointing"
)
COMM_KEYS = ("tp", "pp", "dp", "ep")


def run_comm(ex, kind: str, fields: dict, plan: tuple, workload: tuple, label: str) -> list:
    want = reference_comm(kind, fields, plan, workload)
    got = ex.comm_bytes_per_gpu(make_config(kind, fields), ex.Plan(*plan), ex.Workload(*workload))
    expect_stages(got, want, f"{label}, {describe_plan(plan, workload)}", HINT_COMM, COMM_KEYS, exact=False)
    return got


@checks("comm_bytes_per_gpu")
def published_models_collective_by_collective(ex):
    """Llama-3-70B and Mixtral-8x7B plans: every collective of the step priced by its ring or pairwise schedule"""
    llama_workload = (1, 8192, 512, 1)
    for plan in ((8, 8, 1, 1, 1, False), (2, 8, 4, 1, 1, True), (64, 1, 1, 1, 3, False), (4, 4, 4, 1, 2, False)):
        run_comm(ex, "LlamaConfig", LLAMA3_70B, plan, llama_workload, "Llama-3-70B")
    mixtral_workload = (2, 4096, 256, 1)
    for plan in ((8, 1, 4, 8, 1, False), (4, 2, 4, 2, 3, True), (16, 2, 1, 4, 0, False), (8, 4, 1, 4, 2, True)):
        run_comm(ex, "MixtralConfig", MIXTRAL_8X7B, plan, mixtral_workload, "Mixtral-8x7B")


@checks("comm_bytes_per_gpu")
def zero_paper_and_megatron_ratios(ex):
    """ZeRO paper: DP traffic of ZeRO-0/1/2 equal, ZeRO-3 1.5x; Megatron: 4 all-reduces per layer, 6 recomputing"""
    config = make_config("LlamaConfig", LLAMA3_70B)
    workload = ex.Workload(1, 8192, 512, 1)
    dp_bytes = [ex.comm_bytes_per_gpu(config, ex.Plan(8, 8, 1, 1, zero, False), workload)[0]["dp"] for zero in range(4)]
    expect(
        dp_bytes[0] > 0
        and math.isclose(dp_bytes[0], dp_bytes[1])
        and math.isclose(dp_bytes[1], dp_bytes[2])
        and math.isclose(dp_bytes[3], 1.5 * dp_bytes[2]),
        "the data-parallel traffic does not follow the ZeRO paper (Section 7.2)",
        input="Llama-3-70B, Plan(dp=8, tp=8, pp=1), ZeRO 0, 1, 2, 3",
        expected="equal for ZeRO 0-2 (2 Psi), 1.5x that for ZeRO-3 (3 Psi)",
        got=", ".join(f"{b / 1e9:.3f} GB" for b in dp_bytes),
        hint="ZeRO-3: reduce-scatter the gradients, all-gather the weights in forward and again in backward",
    )
    a = 2 * 8192 * 8192
    for checkpointing, all_reduces in ((False, 4), (True, 6)):
        got = ex.comm_bytes_per_gpu(config, ex.Plan(64, 8, 1, 1, 1, checkpointing), ex.Workload(1, 8192, 64, 1))[0]
        want = 80 * all_reduces * 2 * 7 / 8 * a  # 80 layers, one micro-batch per replica
        expect(
            math.isclose(got["tp"], want, rel_tol=1e-9),
            "wrong tensor-parallel traffic",
            input=f"Llama-3-70B, Plan(dp=64, tp=8, pp=1, checkpointing={checkpointing}), one micro-batch of 8192 tokens",
            expected=f"80 layers x {all_reduces} all-reduces x 2*(7/8) x {a / 1e6:.0f} MB = {want / 1e9:.2f} GB",
            got=f"{got['tp'] / 1e9:.4f} GB",
            hint="Megatron: 2 all-reduces per layer in the forward pass, 2 in the backward pass, 2 more recomputing",
        )


@checks("comm_bytes_per_gpu")
def random_small_models_and_plans_and_one_gpu(ex):
    """random small configs and valid plans (EP, ZeRO-3, checkpointing); one GPU sends nothing; bad plans refused"""
    rng = random.Random(torch.initial_seed())
    for _ in range(12):
        kind, fields, grids = random_fields(rng)
        for _ in range(3):
            plan, workload = random_plan(rng, grids)
            run_comm(ex, kind, fields, plan, workload, label_of(kind, fields))
    kind, fields = PUBLISHED["Mixtral-8x7B"]
    got = run_comm(ex, kind, fields, (1, 1, 1, 1, 3, True), (1, 64, 4, 1), "Mixtral-8x7B on one GPU")
    expect(
        all(value == 0 for value in got[0].values()),
        "one GPU sends bytes",
        input="Mixtral-8x7B, Plan(dp=1, tp=1, pp=1, ep=1)",
        expected="0 for every kind",
        got=str(got[0]),
        hint="every (p - 1) / p factor is 0 for p = 1, and a single stage has no neighbour",
    )
    mixtral = make_config(kind, fields)
    expect_value_error(
        lambda: ex.comm_bytes_per_gpu(mixtral, ex.Plan(4, 1, 1, 8, 1, False), ex.Workload(1, 64, 8, 1)),
        "Mixtral-8x7B, Plan(dp=4, ep=8)",
        "validate with micro_batches(plan, workload) first",
    )
    expect_value_error(
        lambda: ex.comm_bytes_per_gpu(mixtral, ex.Plan(2, 3, 1, 1, 1, False), ex.Workload(1, 64, 8, 1)),
        "Mixtral-8x7B, Plan(dp=2, tp=3)",
        "validate with params_per_gpu first",
    )


# ------------------------------------------------------------------------------------------ best_plan


def valid_plan(kind: str, fields: dict, plan: tuple, workload: tuple, num_gpus: int) -> bool:
    """The rules, one by one."""
    dp, tp, pp, ep, zero, checkpointing = plan
    micro_batch, _, global_batch, _ = workload
    experts = fields.get("num_local_experts", 1)
    rules = [
        dp * tp * pp == num_gpus,
        fields["num_attention_heads"] % tp == 0,
        fields["num_key_value_heads"] % tp == 0,
        fields["intermediate_size"] % tp == 0,
        fields["vocab_size"] % tp == 0,
        1 <= pp <= fields["num_hidden_layers"],
        experts % ep == 0,
        dp % ep == 0,
        global_batch % (dp * micro_batch) == 0,
        zero in (0, 1, 2, 3),
        checkpointing in (False, True),
    ]
    return all(rules)


def brute_force(kind: str, fields: dict, num_gpus: int, workload: tuple) -> list[tuple[tuple, int]]:
    """Every valid plan and the bytes on its fullest GPU, found by trying every tuple."""
    found = []
    for dp in range(1, num_gpus + 1):
        for tp in range(1, num_gpus + 1):
            for pp in range(1, num_gpus + 1):
                if dp * tp * pp != num_gpus:
                    continue
                for ep in range(1, dp + 1):
                    for zero in range(4):
                        for checkpointing in (False, True):
                            plan = (dp, tp, pp, ep, zero, checkpointing)
                            if valid_plan(kind, fields, plan, workload, num_gpus):
                                stages = reference_memory(kind, fields, plan, workload)
                                found.append((plan, max(sum(stage.values()) for stage in stages)))
    return found


def expect_best(ex, kind, fields, num_gpus, workload, budget, time_of, plans, label) -> None:
    fitting = [(time_of(plan), plan) for plan, fullest in plans if fullest <= budget]
    want = min(fitting)[0] if fitting else None
    timer = lambda plan: time_of(plan_tuple(plan))  # noqa: E731
    got = ex.best_plan(make_config(kind, fields), num_gpus, ex.Workload(*workload), budget, timer)
    where = f"{label}, {num_gpus} GPUs, budget {budget:,} B, Workload{workload}"
    if want is None:
        expect(
            got is None,
            "a plan was returned although none fits",
            input=where,
            expected="None",
            got=repr(got),
            hint="return None when no valid plan fits the budget",
        )
        return
    expect(
        got is not None,
        "no plan returned",
        input=where,
        expected=f"a plan taking {want:.6g}",
        got="None",
        hint="some valid plan fits: compare the fullest stage with the budget (<=)",
    )
    plan = plan_tuple(got)
    expect(
        valid_plan(kind, fields, plan, workload, num_gpus),
        "the plan is not valid",
        input=where,
        expected="dp*tp*pp == num_gpus and every divisibility rule",
        got=repr(got),
        hint="dp = num_gpus // (tp * pp) only when tp * pp divides num_gpus; ep must divide dp",
    )
    fullest = max(sum(stage.values()) for stage in reference_memory(kind, fields, plan, workload))
    expect(
        fullest <= budget,
        "the plan does not fit the budget",
        input=where,
        expected=f"fullest stage <= {budget:,} B",
        got=f"{got!r}: {fullest:,} B",
        hint="compare the largest stage total (all four entries), not the first stage's",
    )
    expect(
        time_of(plan) == want,
        "a faster plan fits",
        input=where,
        expected=f"step time {want:.6g} ({min(fitting)[1]})",
        got=f"{time_of(plan):.6g} ({got!r})",
        hint="try every divisor tp of num_gpus, every pp of num_gpus // tp, every ep of dp, ZeRO 0-3, both "
        "checkpointing settings",
    )


def random_times(seed: int):
    return lambda plan: random.Random(hash((seed, *plan))).random()


@checks("best_plan")
def brute_force_random_step_times(ex):
    """small configs on 1-12 GPUs, random step times, budgets from tight to loose: the fastest plan that fits"""
    rng = random.Random(torch.initial_seed())
    for _ in range(6):
        kind, fields, _ = random_fields(rng)
        num_gpus = rng.choice([1, 4, 6, 8, 12])
        micro_batch = rng.choice([1, 2])
        workload = (micro_batch, rng.choice([8, 16]), micro_batch * 24, rng.randrange(10**3, 10**5))
        plans = brute_force(kind, fields, num_gpus, workload)  # never empty: dp = num_gpus divides 24
        sizes = sorted(fullest for _, fullest in plans)
        for budget in (sizes[len(sizes) // 4], sizes[len(sizes) // 2], sizes[-1]):
            expect_best(
                ex,
                kind,
                fields,
                num_gpus,
                workload,
                budget,
                random_times(rng.randrange(10**9)),
                plans,
                label_of(kind, fields),
            )


@checks("best_plan")
def budget_is_inclusive_and_nothing_fits(ex):
    """a budget exactly equal to the fastest plan's memory admits it; a budget below every plan gives None"""
    rng = random.Random(torch.initial_seed())
    kind, fields = (
        "MixtralConfig",
        dict(
            vocab_size=48,
            hidden_size=24,
            intermediate_size=36,
            num_hidden_layers=6,
            num_attention_heads=6,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            tie_word_embeddings=False,
        ),
    )
    workload = (1, 16, 48, 54321)
    for num_gpus in (8, 12):
        plans = brute_force(kind, fields, num_gpus, workload)
        times = random_times(rng.randrange(10**9))
        fastest, fullest = min(plans, key=lambda item: times(item[0]))
        expect_best(ex, kind, fields, num_gpus, workload, fullest, times, plans, label_of(kind, fields))
        smallest = min(size for _, size in plans)
        expect_best(ex, kind, fields, num_gpus, workload, smallest - 1, times, plans, label_of(kind, fields))


@checks("best_plan")
def llama3_70b_on_64_gpus(ex):
    """Llama-3-70B on 64 GPUs at 72 GB, 8k tokens: against every tuple, with a bubble-and-TP step time"""
    workload = (1, 8192, 512, korthikanti_layer_bytes(LLAMA3_70B, 1, 8192))
    plans = brute_force("LlamaConfig", LLAMA3_70B, 64, workload)

    def bubble_and_links(plan):
        dp, tp, pp, ep, zero, checkpointing = plan
        m = 512 // dp
        slot = -(-80 // pp) / tp * (4 / 3 if checkpointing else 1)
        return (m + pp - 1) * slot + (math.inf if tp > 8 else 0.01 * tp) + 0.1 * (zero == 3) + 1e-6 * ep

    expect_best(ex, "LlamaConfig", LLAMA3_70B, 64, workload, 72 * 10**9, bubble_and_links, plans, "Llama-3-70B")
