"""Checks for p02.expert_parallel. References: the single-process MoE layer of p02.moe_router (`ex.moe_layer`, the
learner's own when it passes, its reference solution otherwise) and the float64 per-token loop of
`llm_algo.references.moe` on the concatenation of every rank's tokens, forward and gradients (autograd); gloo's
`dist.all_to_all_single` and `dist.all_gather_single` for the counts, and the autograd-aware
`torch.distributed.nn.functional.all_to_all_single` for the gradients of the all-to-all, run by the checks in the same
ranks (a world of 2 real processes, `llm_algo.distributed`); and a log of every `all_to_all_single` a rank posts
(the counts first, then the tokens with the split sizes that the routing implies)."""

import math
import warnings

import torch
import torch.distributed as dist

from llm_algo.check import Checks, expect, expect_close
from llm_algo.distributed import attempted, expect_ranks_ok, expect_ranks_refuse, run_ranks, run_subgroup
from llm_algo.distributed.collectives import all_gather_single
from llm_algo.distributed.subgroup import GROUP_HINT
from llm_algo.references.moe import moe_loop_spec, random_experts

checks = Checks("p02.expert_parallel")

P = 2  # one world for the whole lesson
DEADLINE_S = 8.0  # an all-to-all whose sizes disagree between ranks may wait forever: report it within this
FORBID = (
    "torch.distributed.nn.functional.all_to_all_single",
    "torch.distributed.nn.functional.all_to_all",
    "torch.distributed._functional_collectives.all_to_all_single_autograd",
)
INSTEAD = "write the autograd.Function around dist.all_to_all_single yourself (the autograd version is the reference)"
EXPERTS = ("w_gate", "w_up", "w_down")


# ------------------------------------------------------------------------------------------ in the ranks


class AllToAllLog:
    """In one rank: wrap dist.all_to_all_single and log (dtype, input rows, input splits, output splits) per call."""

    def __enter__(self):
        import torch.distributed.distributed_c10d as c10d

        self.calls, self._saved = [], []
        original, calls = c10d.all_to_all_single, self.calls

        def logged(output, input, output_split_sizes=None, input_split_sizes=None, *args, **kwargs):
            calls.append(
                (
                    str(input.dtype),
                    int(input.shape[0]) if input.dim() else 0,
                    None if input_split_sizes is None else [int(s) for s in input_split_sizes],
                    None if output_split_sizes is None else [int(s) for s in output_split_sizes],
                )
            )
            return original(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)

        for module in (dist, c10d):
            self._saved.append((module, module.all_to_all_single))
            module.all_to_all_single = logged
        return self

    def __exit__(self, *exc):
        for module, original in reversed(self._saved):
            module.all_to_all_single = original


def rank_exchange(learner, ranks, counts):
    """The learner's exchange and the reference: every rank's counts gathered, my experts' columns picked."""
    group = dist.new_group(ranks) if ranks is not None else None
    if ranks is not None and dist.get_rank() not in ranks:
        return None
    return exchange_on(learner, counts, group=group)


def exchange_on(learner, counts, group=None):
    """In a rank of `group`: the learner's exchange_counts and the reference."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    original = counts.clone()  # contiguous; `counts` itself goes to the learner as it came (maybe a strided view)
    mine = learner(counts, group)
    everyone = torch.empty(size * original.numel(), dtype=original.dtype)
    all_gather_single(everyone, original, group=group)
    local = original.numel() // size
    return mine, everyone.view(size, -1)[:, rank * local : (rank + 1) * local]


def rank_all_to_all(learner, output_splits, input_splits, x, upstream, group=None):
    """Forward and backward of the learner's all_to_all and of the autograd-aware torch version."""
    from torch.distributed.nn.functional import all_to_all_single

    rank = dist.get_rank(group)
    mine_in = x.detach().requires_grad_(x.is_floating_point())  # as it came: maybe a strided view
    out = learner(mine_in, output_splits[rank], input_splits[rank], group)
    ref_in = x.clone().requires_grad_(x.is_floating_point())
    ref_out = torch.empty((sum(output_splits[rank]), *x.shape[1:]), dtype=x.dtype)
    with warnings.catch_warnings():  # torch 2.13 deprecates it for _functional_collectives; it is still the reference
        warnings.simplefilter("ignore", FutureWarning)
        ref = all_to_all_single(ref_out, ref_in, output_splits[rank], input_splits[rank], group=group)
    if not x.is_floating_point():
        return out, ref, None, None
    if upstream is None:  # the gradient of a plain sum arrives as an expanded (stride 0, non-contiguous) tensor
        out.sum().backward()
        ref.sum().backward()
    else:
        (out * upstream).sum().backward()
        (ref * upstream).sum().backward()
    return out, ref, mine_in.grad, ref_in.grad


def rank_ep_layer(learner, xs, weights, top_k, upstreams, dtype, backward, frozen_router=False, group=None):
    """This rank's tokens and experts through the learner's layer; output, gradients and the all-to-all log."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    local = weights["w_gate"].shape[0] // size
    experts = slice(rank * local, (rank + 1) * local)
    x = xs[rank].to(dtype).clone().requires_grad_(backward)
    router = weights["router_weight"].to(dtype).clone().requires_grad_(backward and not frozen_router)
    mine = {n: weights[n][experts].to(dtype).clone().requires_grad_(backward) for n in EXPERTS}
    with AllToAllLog() as log:
        y = learner(x, router, *(mine[n] for n in EXPERTS), top_k, group)
        if backward:
            (y * upstreams[rank].to(dtype)).sum().backward()
    grads = (x.grad, router.grad, {n: mine[n].grad for n in EXPERTS}) if backward else None
    return y, grads, log.calls


def rank_refuse(learner, args):
    return learner(*args)


# ------------------------------------------------------------------------------------------ in the grader


def in_ranks(fn, rank_fn, *, input, hint, args=(), rank_args=None):
    results = run_ranks(
        rank_fn, P, args=(fn, *args), rank_args=rank_args, forbid=FORBID, instead=INSTEAD, deadline=DEADLINE_S
    )
    return expect_ranks_ok(results, input=input, hint=hint)


def refused(fn, cases, errors_hint):
    for args, errors, label in cases:
        results = run_ranks(rank_refuse, P, args=(fn, args), forbid=FORBID, deadline=DEADLINE_S)
        expect_ranks_refuse(results, errors, input=label, hint=errors_hint)


def expect_equal(got, want, *, input, hint, what="output"):
    expect(
        isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape,
        f"{what}: wrong dtype or shape",
        input=input,
        expected=f"{tuple(want.shape)} {want.dtype}",
        got=f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__,
        hint=hint,
    )
    expect(
        torch.equal(got, want),
        f"{what} differs from the torch collective",
        input=input,
        expected=str(want.reshape(-1)[:8].tolist()),
        got=str(got.reshape(-1)[:8].tolist()),
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ exchange_counts

HINT_COUNTS = (
    "received = empty_like(counts); dist.all_to_all_single(received, counts) sends block j (the counts for rank j's "
    "experts) to rank j; view it as (p, E_local): row s came from rank s"
)


def counts_case(ex, E, ranks, high=50, strided=False):
    counts = [torch.randint(0, high, (E,)) for _ in range(P)]
    for c in counts:
        c[torch.randint(0, E, (1,))] = 0  # an expert that gets nothing from this rank
    if strided:  # every other element of a longer tensor: a legal (E,) view that is not contiguous
        counts = [torch.stack((c, torch.full_like(c, -1)), dim=1)[:, 0] for c in counts]
    label = f"counts (E={E},) int64 on each rank, " + ("world of 2" if ranks is None else f"group {ranks}")
    label += ", a strided (non-contiguous) view" if strided else ""
    values = in_ranks(
        ex.exchange_counts,
        rank_exchange,
        args=(ranks,),
        rank_args=[(c,) for c in counts],
        input=label,
        hint=HINT_COUNTS,
    )
    for rank in range(P) if ranks is None else ranks:
        mine, want = values[rank]
        expect_equal(mine, want, input=f"{label}, rank {rank}", hint=HINT_COUNTS, what="received counts")


@checks("exchange_counts")
def matches_all_gathered_counts(ex):
    """2 ranks, E = 4, 6 and 2 (one expert per rank), counts with zeros: row s = rank s's counts for my experts"""
    for E in (4, 6, 2):
        counts_case(ex, E, None)


@checks("exchange_counts")
def large_counts_and_a_group_of_one(ex):
    """counts above 2**31 stay exact (int64); a strided view of the counts; a group of one rank receives its own"""
    counts_case(ex, 4, None, high=2**40)
    counts_case(ex, 6, None, strided=True)
    counts_case(ex, 4, [1])


@checks("exchange_counts")
def refuses_bad_counts(ex):
    """E = 5 on 2 ranks, (2, 2) counts (ValueError); float32 or int32 counts (TypeError): every rank, at once"""
    refused(
        ex.exchange_counts,
        [
            ((torch.zeros(5, dtype=torch.int64),), (ValueError,), "counts (5,) on 2 ranks"),
            ((torch.zeros(2, 2, dtype=torch.int64),), (ValueError,), "counts (2, 2)"),
            ((torch.zeros(4),), (TypeError,), "counts (4,) float32"),
            ((torch.zeros(4, dtype=torch.int32),), (TypeError,), "counts (4,) int32"),
        ],
        "validate the dtype (int64) and that p divides E before the all-to-all",
    )


# ------------------------------------------------------------------------------------------ all_to_all

HINT_A2A = (
    "forward: out = x.new_empty((sum(output_splits), *x.shape[1:])); dist.all_to_all_single(out, x, output_splits, "
    "input_splits); backward: the same with the gradient and the two split lists swapped"
)


def random_splits():
    """input_splits[r] for each rank (with a zero), and the output_splits they imply."""
    input_splits = [[int(n) for n in torch.randint(0, 5, (P,))] for _ in range(P)]
    input_splits[0][1] = 0  # rank 0 sends nothing to rank 1
    output_splits = [[input_splits[src][dst] for src in range(P)] for dst in range(P)]
    return output_splits, input_splits


def a2a_case(ex, tail, dtype, strided=False, plain_sum=False):
    output_splits, input_splits = random_splits()
    xs = [(torch.randn(sum(input_splits[r]), *tail) * 8).to(dtype) for r in range(P)]
    if strided:  # every other column of a wider tensor: rows that are not contiguous in memory
        xs = [torch.stack((x, torch.zeros_like(x)), dim=-1)[..., 0] for x in xs]
    ups = [None if plain_sum else torch.randn(sum(output_splits[r]), *tail).to(dtype) for r in range(P)]
    label = f"rows of shape {tail} {dtype}, input_splits per rank {input_splits}" + (", strided x" if strided else "")
    values = in_ranks(
        ex.all_to_all,
        rank_all_to_all,
        args=(output_splits, input_splits),
        rank_args=list(zip(xs, ups, strict=True)),
        input=label,
        hint=HINT_A2A,
    )
    return values, label


@checks("all_to_all")
def forward_matches_all_to_all_single(ex):
    """uneven splits with a zero, rows (3,), (2, 2) and (), float32 (also strided), bf16, int64: all_to_all_single"""
    for tail, dtype, strided in (
        ((3,), torch.float32, False),
        ((2, 2), torch.bfloat16, False),
        ((), torch.int64, False),
        ((3,), torch.float32, True),
    ):
        values, label = a2a_case(ex, tail, dtype, strided)
        for rank, (out, ref, _, _) in enumerate(values):
            expect_equal(out, ref, input=f"{label}, rank {rank}", hint=HINT_A2A)


@checks("all_to_all")
def backward_matches_autograd_all_to_all(ex):
    """float64, float32, and loss = y.sum() (an expanded gradient): dx equals the autograd-aware all_to_all_single's"""
    for tail, dtype, plain_sum in (
        ((3,), torch.float64, False),
        ((4,), torch.float32, False),
        ((2,), torch.float64, True),
    ):
        values, label = a2a_case(ex, tail, dtype, plain_sum=plain_sum)
        label += ", loss = y.sum()" if plain_sum else ", loss = sum(y * random)"
        for rank, (_, _, grad, ref_grad) in enumerate(values):
            expect(
                grad is not None,
                "no gradient reaches x",
                input=f"{label}, rank {rank}",
                expected="x.grad",
                got="None",
                hint="wrap the collective in a torch.autograd.Function and call it with .apply",
            )
            expect_equal(grad, ref_grad, input=f"{label}, rank {rank}", hint=HINT_A2A, what="d loss / d x")


@checks("all_to_all")
def refuses_bad_splits(ex):
    """3 split sizes on 2 ranks, a negative one (input or output), input_splits not summing to the rows: ValueError"""
    x = torch.zeros(5, 2)
    refused(
        ex.all_to_all,
        [
            ((x, [2, 3], [1, 1, 3]), (ValueError,), "x (5, 2), input_splits [1, 1, 3] on 2 ranks"),
            ((x, [2, 3], [6, -1]), (ValueError,), "x (5, 2), input_splits [6, -1]"),
            ((x, [2, 3], [2, 2]), (ValueError,), "x (5, 2), input_splits [2, 2] (4 rows)"),
            ((x, [2, 3, 0], [2, 3]), (ValueError,), "x (5, 2), output_splits [2, 3, 0] on 2 ranks"),
            ((x, [6, -1], [2, 3]), (ValueError,), "x (5, 2), output_splits [6, -1]"),
        ],
        "check the split lists (p entries, >= 0, input_splits summing to x.shape[0]) before the all-to-all",
    )


# ------------------------------------------------------------------------------------------ ep_moe_layer

HINT_EP = (
    "order = argsort(flat experts, stable); token_of = order // k; dispatch x[token_of] with send splits "
    "bincount(...).view(p, E_local).sum(1); local expert = arange(E_local).repeat(p).repeat_interleave(received); "
    "combine with the splits swapped; multiply by gates.reshape(-1)[order]; index_add into token_of"
)


def ep_case(tokens, E, top_k, H=8, F=12, skew=1.5):
    """Per-rank tokens, weights (float64) with a router skewed towards the first experts, upstream gradients."""
    weights = random_experts(E, H, F)
    weights["router_weight"] = weights["router_weight"] + torch.linspace(skew, -skew, E)[:, None] / math.sqrt(H)
    xs = [torch.randn(T, H, dtype=torch.float64) for T in tokens]
    upstreams = [torch.randn(T, H, dtype=torch.float64) for T in tokens]
    return xs, weights, upstreams


def single_process(ex, xs, weights, top_k, upstreams, dtype):
    """The single-process layer of p02.moe_router (in dtype) and the float64 loop, on all ranks' tokens at once:
    outputs (T_all, H) and, for the loop, the gradients of sum(y * upstream)."""
    everything = torch.cat(xs)  # (T_all, H)
    names = ("router_weight", *EXPERTS)
    with torch.no_grad():
        layer = ex.moe_layer(everything.to(dtype)[None], *(weights[n].to(dtype) for n in names), top_k, None)[0]
    x = everything.clone().requires_grad_()
    spec = {n: weights[n].clone().requires_grad_() for n in names}
    y = moe_loop_spec(x, spec, top_k)
    (y * torch.cat(upstreams)).sum().backward()
    return layer, y.detach(), x.grad, {n: spec[n].grad for n in names}


def run_ep(ex, xs, weights, top_k, upstreams, dtype, backward, label):
    return in_ranks(
        ex.ep_moe_layer,
        rank_ep_layer,
        args=(xs, weights, top_k, upstreams, dtype, backward),
        input=label,
        hint=HINT_EP,
    )


def ep_label(xs, E, top_k, dtype):
    return f"tokens per rank {[x.shape[0] for x in xs]}, H={xs[0].shape[1]}, E={E}, top_k={top_k}, {dtype}, 2 ranks"


@checks("ep_moe_layer")
def forward_matches_single_process_moe(ex):
    """uneven tokens per rank, E = 4 and 6, k = 2 and 1, float64 and float32: your p02.moe_router layer on all tokens"""
    for tokens, E, top_k, dtype in (
        ((7, 5), 4, 2, torch.float64),
        ((9, 4), 6, 2, torch.float32),
        ((3, 8), 4, 1, torch.float64),
    ):
        xs, weights, upstreams = ep_case(tokens, E, top_k)
        label = ep_label(xs, E, top_k, dtype)
        values = run_ep(ex, xs, weights, top_k, upstreams, dtype, False, label)
        layer, loop, _, _ = single_process(ex, xs, weights, top_k, upstreams, dtype)
        start = 0
        for rank, (y, _, _) in enumerate(values):
            rows = slice(start, start + tokens[rank])
            start += tokens[rank]
            expect_close(
                y,
                loop[rows],
                baseline=layer[rows] if dtype != torch.float64 else None,
                input=f"{label}, rank {rank} (tokens {rows.start}..{rows.stop - 1} of the single-process batch)",
                hint=HINT_EP,
            )


@checks("ep_moe_layer")
def keeps_the_dtype_of_x(ex):
    """bf16 and float32 tokens and weights: the output is (T, H) in x's dtype on every rank, and finite"""
    for dtype in (torch.bfloat16, torch.float32):
        xs, weights, upstreams = ep_case((5, 6), 4, 2)
        label = ep_label(xs, 4, 2, dtype)
        values = run_ep(ex, xs, weights, 2, upstreams, dtype, False, label)
        for rank, (y, _, _) in enumerate(values):
            expect(
                isinstance(y, torch.Tensor) and y.shape == xs[rank].shape and y.dtype == dtype,
                "the output does not keep the shape and dtype of x",
                input=f"{label}, rank {rank}",
                expected=f"{tuple(xs[rank].shape)} {dtype}",
                got=f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__,
                hint="the gates are float32 (route_topk computes in at least float32): cast them to x.dtype before "
                "multiplying, and accumulate into x.new_zeros(T, H)",
            )
            expect(
                bool(torch.isfinite(y).all()),
                "the output has NaN or inf",
                input=f"{label}, rank {rank}",
                expected="finite values",
                got=f"{int((~torch.isfinite(y)).sum())} non-finite elements",
                hint=HINT_EP,
            )


@checks("ep_moe_layer")
def gradients_match_single_process_moe(ex):
    """float64: d loss/d x on each rank, d/d router_weight summed over ranks, each rank's slice of the expert grads"""
    tokens, E, top_k = (6, 9), 4, 2
    xs, weights, upstreams = ep_case(tokens, E, top_k)
    label = ep_label(xs, E, top_k, torch.float64) + ", loss = sum(y * random)"
    values = run_ep(ex, xs, weights, top_k, upstreams, torch.float64, True, label)
    _, _, x_grad, weight_grads = single_process(ex, xs, weights, top_k, upstreams, torch.float64)
    local = E // P
    start = 0
    for rank, (_, grads, _) in enumerate(values):
        mine_x, _, mine_experts = grads
        rows = slice(start, start + tokens[rank])
        start += tokens[rank]
        pairs = [("x", mine_x, x_grad[rows])] + [
            (n, mine_experts[n], weight_grads[n][rank * local : (rank + 1) * local]) for n in EXPERTS
        ]
        for name, got, want in pairs:
            expect(
                got is not None,
                f"no gradient reaches {name} on rank {rank}",
                input=label,
                expected=f"d loss / d {name}",
                got="None",
                hint="the all-to-alls must be differentiable (your AllToAll), and nothing detached",
            )
            expect_close(got, want, input=f"{label}, rank {rank}", what=f"d loss / d {name}", hint=HINT_EP)
    router = [grads[1] for _, grads, _ in values]
    expect(
        all(g is not None for g in router),
        "no gradient reaches router_weight",
        input=label,
        expected="d loss / d router_weight on every rank",
        got="None",
        hint="the router learns through the gates: multiply by them without detaching",
    )
    expect_close(
        router[0] + router[1],
        weight_grads["router_weight"],
        input=label + ", router_weight's gradient summed over the 2 ranks",
        what="d loss / d router_weight",
        hint="each rank's gates multiply its own tokens' results after the combine, in the sorted order",
    )


def routed_counts(x, router_weight, top_k, E):
    """Rows each rank must send to each rank: top-k of the float64 softmax, counted per owning rank."""
    experts = torch.topk(torch.softmax(x @ router_weight.T, dim=-1), top_k, dim=-1).indices  # (T, k)
    per_expert = torch.bincount(experts.reshape(-1), minlength=E)
    return per_expert.view(P, -1).sum(dim=1).tolist()


@checks("ep_moe_layer")
def counts_first_then_uneven_token_splits(ex):
    """the all-to-all log: the counts (E int64) first, then the T*k token rows with the routing's split sizes, and back"""
    tokens, E, top_k = (10, 3), 4, 2
    xs, weights, upstreams = ep_case(tokens, E, top_k, skew=2.5)
    label = ep_label(xs, E, top_k, torch.float64) + ", a router skewed towards experts 0 and 1 (rank 0's)"
    values = run_ep(ex, xs, weights, top_k, upstreams, torch.float64, False, label)
    sends = [routed_counts(x, weights["router_weight"], top_k, E) for x in xs]  # sends[src][dst]
    for rank, (_, _, calls) in enumerate(values):
        floats = [c for c in calls if "float" in c[0]]
        expect(
            len(calls) >= 3 and "int64" in calls[0][0] and calls[0][1] == E,
            "the token counts are not exchanged first",
            input=f"{label}, rank {rank}",
            expected=f"first all_to_all_single: the {E} int64 counts; then the tokens there and back",
            got=f"{len(calls)} all_to_all_single calls: " + "; ".join(f"{c[0]} {c[1]} rows" for c in calls[:4]),
            hint="exchange_counts(bincount(...)) before dispatching: a rank cannot know what it will receive",
        )
        want_send, want_recv = sends[rank], [sends[src][rank] for src in range(P)]
        dispatch = floats[0] if floats else ("", 0, None, None)
        expect(
            dispatch[1] == tokens[rank] * top_k and dispatch[2] == want_send and dispatch[3] == want_recv,
            "the dispatch does not send the routed rows with their split sizes",
            input=f"{label}, rank {rank}",
            expected=f"{tokens[rank] * top_k} rows (T*k, no padding), input splits {want_send}, output splits {want_recv}",
            got=f"{dispatch[1]} rows, input splits {dispatch[2]}, output splits {dispatch[3]}",
            hint="send splits = bincount(experts).view(p, E_local).sum(1); receive splits = exchange_counts(...).sum(1)",
        )
        combine = floats[1] if len(floats) > 1 else ("", 0, None, None)
        expect(
            combine[2] == want_recv and combine[3] == want_send,
            "the combine does not send the results back with the splits swapped",
            input=f"{label}, rank {rank}",
            expected=f"input splits {want_recv}, output splits {want_send}",
            got=f"input splits {combine[2]}, output splits {combine[3]}",
            hint="the combine returns each row to the rank it came from: the dispatch's splits, swapped",
        )


@checks("ep_moe_layer")
def refuses_bad_input(ex):
    """5 or 6 experts for 2 x 2 local ones, x (1, 4, 8) (ValueError); float32 x, float64 weights (TypeError)"""
    weights = random_experts(4, 8, 12)
    local = [weights[n][:2] for n in EXPERTS]
    x = torch.randn(4, 8, dtype=torch.float64)
    router5, router6 = torch.randn(5, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    refused(
        ex.ep_moe_layer,
        [
            ((x, router5, *local, 2), (ValueError,), "router_weight (5, 8), 2 local experts, 2 ranks"),
            ((x, router6, *local, 2), (ValueError,), "router_weight (6, 8), 2 local experts, 2 ranks (4 != 6)"),
            ((x[None], weights["router_weight"], *local, 2), (ValueError,), "x (1, 4, 8)"),
            ((x.float(), weights["router_weight"], *local, 2), (TypeError,), "x float32, weights float64"),
        ],
        "validate shapes, the expert count and dtypes before the first all-to-all",
    )


# ------------------------------------------------------------------------------------------ on a sub-group


def on_a_subgroup(fn, *, input, hint, args=(), member_args=None):
    """`fn` in the members of the group [1, 2] of a world of 3: rank 0 stands by and must receive nothing."""
    results = run_subgroup(
        fn,
        input=input,
        hint=hint,
        args=args,
        member_args=member_args,
        forbid=FORBID,
        instead=INSTEAD,
        deadline=DEADLINE_S,
    )
    return expect_ranks_ok(results, input=input, hint=f"{hint}; {GROUP_HINT}")


@checks("exchange_counts")
def counts_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3, E = 4: row s = group rank s's counts for my experts; rank 0, outside the
    group, receives nothing"""
    attempted(lambda: ex.exchange_counts(torch.zeros(4, dtype=torch.int64)))
    counts = [torch.randint(0, 50, (4,)) for _ in range(2)]
    label = "counts (E=4,) int64 on each member of the group [1, 2] of a world of 3"
    values = on_a_subgroup(
        exchange_on, args=(ex.exchange_counts,), member_args=[(c,) for c in counts], input=label, hint=HINT_COUNTS
    )
    for rank, (mine, want) in enumerate(values):
        expect_equal(mine, want, input=f"{label}, group rank {rank}", hint=HINT_COUNTS, what="received counts")


@checks("all_to_all")
def all_to_all_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3, uneven splits, float32 rows (3,): forward and backward equal torch's
    autograd all_to_all_single on the group; rank 0 receives nothing"""
    attempted(lambda: ex.all_to_all(torch.zeros(2, 3), [1, 1], [1, 1]))
    output_splits, input_splits = random_splits()
    xs = [torch.randn(sum(input_splits[r]), 3) for r in range(2)]
    ups = [torch.randn(sum(output_splits[r]), 3) for r in range(2)]
    label = f"rows (3,) float32, input_splits per member {input_splits}, the group [1, 2] of a world of 3"
    values = on_a_subgroup(
        rank_all_to_all,
        args=(ex.all_to_all, output_splits, input_splits),
        member_args=list(zip(xs, ups, strict=True)),
        input=label,
        hint=HINT_A2A + "; group=group in both",
    )
    for rank, (out, ref, grad, ref_grad) in enumerate(values):
        expect_equal(out, ref, input=f"{label}, group rank {rank}", hint=HINT_A2A)
        expect_close(grad, ref_grad, input=f"{label}, group rank {rank}", what="d loss / d x", hint=HINT_A2A)


@checks("ep_moe_layer")
def frozen_router_and_an_idle_expert_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3, float64, a frozen router (requires_grad=False) under which expert 3 never
    wins (its row is the mean of the others'): outputs and gradients equal the single-process loop, router.grad None,
    expert 3's gradients zero; rank 0 receives nothing"""
    attempted(lambda: ex.ep_moe_layer(torch.zeros(2, 8, dtype=torch.int64), *([torch.zeros(1)] * 4), 1))
    tokens, E, top_k = (6, 5), 4, 1
    for _ in range(20):  # group rank 1 owns experts 2 and 3: expert 2 must get a token, expert 3 none
        xs, weights, upstreams = ep_case(tokens, E, top_k, skew=0.5)
        weights["router_weight"][3] = weights["router_weight"][:3].mean(dim=0)  # never strictly the largest logit
        chosen = torch.cat(xs) @ weights["router_weight"].T
        if int((chosen.argmax(dim=-1) == 2).sum()) > 0:
            break
    label = ep_label(xs, E, top_k, torch.float64).replace("2 ranks", "the group [1, 2] of a world of 3")
    label += ", router frozen, expert 3 (group rank 1's) never chosen"
    values = on_a_subgroup(
        rank_ep_layer,
        args=(ex.ep_moe_layer, xs, weights, top_k, upstreams, torch.float64, True, True),
        input=label,
        hint=HINT_EP,
    )
    _, loop, x_grad, weight_grads = single_process(ex, xs, weights, top_k, upstreams, torch.float64)
    local, start = E // 2, 0
    for rank, (y, grads, _) in enumerate(values):
        rows = slice(start, start + tokens[rank])
        start += tokens[rank]
        where = f"{label}, group rank {rank}"
        expect_close(y, loop[rows], input=where, what="output", hint=HINT_EP)
        mine_x, router_grad, mine_experts = grads
        expect(
            router_grad is None,
            "the frozen router got a gradient",
            input=where,
            expected="router_weight.grad is None (requires_grad=False)",
            got=f"a {tuple(router_grad.shape)} gradient" if router_grad is not None else "None",
            hint="do not turn the router weight into a leaf that requires grad",
        )
        for name, got, want in [("x", mine_x, x_grad[rows])] + [
            (n, mine_experts[n], weight_grads[n][rank * local : (rank + 1) * local]) for n in EXPERTS
        ]:
            expect(
                got is not None,
                f"no gradient reaches {name}",
                input=where,
                expected=f"d loss / d {name} (zeros for an expert that got no token)",
                got="None",
                hint="an expert that receives no rows must still be part of the graph, or its gradient is None",
            )
            expect_close(got, want, input=where, what=f"d loss / d {name}", hint=HINT_EP)
