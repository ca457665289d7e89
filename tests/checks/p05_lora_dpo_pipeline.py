"""Checks for p05.lora_dpo_pipeline, graded on outcomes. References written here, independently of the solutions:
the SFT loss recomputed with `F.cross_entropy` (ignore_index -100) over the whole SFT set; completion
log-probabilities with `F.cross_entropy` per row; DPO's implicit reward beta * (log pi - log pi_ref) against the SFT
model; a greedy rule judge for the win rate; base weights compared bit for bit (`torch.equal`); the merge compared
with the adapter model's logits in float64 and by the package's tolerance policy in float32. The SFT model that the
DPO checks start from is trained by this module's own loop (apply_lora of p02.lora, already graded there, and
cross-entropy), not by the learner's sft_stage.

Thresholds (stated in the lesson): SFT loss < 1.2 within 60 steps; held-out reward margin > 0.5, reward accuracy
>= 0.9, win rate against the SFT model >= 0.7."""

import copy

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error, one_thread, reference_only

checks = Checks("p05.lora_dpo_pipeline")

SFT_THRESHOLD = 1.2
MARGIN_THRESHOLD = 0.5
ACCURACY_THRESHOLD = 0.9
WIN_THRESHOLD = 0.7
LOGGED_MARGIN_THRESHOLD = 0.25  # training pairs (rule against a random answer), mean of the last 5 steps
BETA = 0.1

_cache: dict = {}


def _cached(key, make):
    """One training run per (function object, purpose): the function is kept in the key's value so its id is not
    reused while the entry lives."""
    if key not in _cache:
        _cache[key] = make()
    return _cache[key]


def answer_loss(model, input_ids, labels) -> float:
    """Mean next-token cross-entropy over the labelled tokens of the whole set (the reference SFT loss)."""
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), labels[:, 1:].reshape(-1)).item()


def completion_logps(model, input_ids, prompt_len) -> torch.Tensor:
    """(M,) float64: sum of log p(token) over the completion tokens, by cross-entropy."""
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, prompt_len - 1 : -1].double()  # predicts the completion
        targets = input_ids[:, prompt_len:]
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
        return -nll.view(targets.shape).sum(-1)


def base_weights(model) -> dict[str, torch.Tensor]:
    """Every non-adapter tensor under the base model's name (".base_layer" removed)."""
    return {name.replace(".base_layer", ""): value for name, value in model.state_dict().items() if "lora_" not in name}


def names_of_adapters(ex, model) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, ex.LoRALinear)]


def learner_sft(ex):
    def run():
        base = ex.make_base()
        before = {k: v.clone() for k, v in base.state_dict().items()}
        with one_thread():
            model, losses = ex.sft_stage(base, ex.SFT_IDS, ex.SFT_LABELS, steps=60)
        return ex.sft_stage, base, before, model, losses

    return _cached(("sft", id(ex.sft_stage)), run)[1:]


def reference_sft(ex):
    """The SFT model the DPO checks start from: this module's own loop (cross-entropy on the answers)."""

    def run():
        with reference_only(), one_thread():
            torch.manual_seed(0)
            model = ex.apply_lora(copy.deepcopy(ex.make_base()), ex.TARGETS, r=8, alpha=16.0)
            optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
            generator = torch.Generator().manual_seed(1)
            for _ in range(60):
                rows = torch.randint(0, ex.SFT_IDS.shape[0], (32,), generator=generator)
                logits = model(input_ids=ex.SFT_IDS[rows]).logits[:, :-1]
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ex.SFT_LABELS[rows][:, 1:].reshape(-1))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return model.eval().requires_grad_(False)

    model = copy.deepcopy(_cached(("reference_sft", id(ex.apply_lora)), lambda: (ex.apply_lora, run()))[1])
    for name, param in model.named_parameters():  # the SFT stage leaves the adapters trainable
        param.requires_grad_("lora_" in name)
    return model


def learner_dpo(ex):
    def run():
        sft_model = reference_sft(ex)
        before = {k: v.clone() for k, v in sft_model.state_dict().items()}
        with one_thread():
            policy, history = ex.dpo_stage(sft_model, ex.PAIR_CHOSEN, ex.PAIR_REJECTED, steps=40, beta=BETA)
        return ex.dpo_stage, sft_model, before, policy, history

    return _cached(("dpo", id(ex.dpo_stage)), run)[1:]


# ------------------------------------------------------------------------------------------------- sft_stage

SFT_INPUT = "60 steps on the shipped SFT set (256 rows), batch 32, lr 3e-2, r 8, alpha 16"


def answer_loss_with_grad(model, input_ids, labels):
    """The reference SFT loss of a batch, with gradients: next-token cross-entropy over the labelled tokens."""
    logits = model(input_ids=input_ids).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


SFT_OPTIONS = dict(steps=3, batch_size=4, lr=5e-2, r=4, alpha=3.0, seed=7)  # none of them sft_stage's default
SFT_OPTIONS_INPUT = "16 rows of the SFT set, steps=3, batch_size=4, lr=5e-2, r=4, alpha=3.0, seed=7"
ADAPTER_SEED = 11  # the global seed before apply_lora draws lora_A, for yours and the reference alike


def reference_sft_run(ex, base, input_ids, labels, options):
    """This module's loop with the given options: (losses float64, logits float64, adapter shapes) from a float64
    copy (the oracle), and (losses, logits) of a float32 copy (the baseline), both from the same initial adapters."""
    with reference_only(), one_thread():
        torch.manual_seed(ADAPTER_SEED)
        start = ex.apply_lora(copy.deepcopy(base), ex.TARGETS, r=options["r"], alpha=options["alpha"])
        shapes = {name: tuple(p.shape) for name, p in start.named_parameters() if "lora_" in name}
        runs = []
        for dtype in (torch.float64, torch.float32):
            model = copy.deepcopy(start).to(dtype).train()
            optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=options["lr"])
            generator = torch.Generator().manual_seed(options["seed"])
            losses = []
            for _ in range(options["steps"]):
                rows = torch.randint(0, input_ids.shape[0], (options["batch_size"],), generator=generator)
                loss = answer_loss_with_grad(model, input_ids[rows], labels[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            with torch.no_grad():
                logits = model.eval()(input_ids=input_ids[:8]).logits
            runs.append((torch.tensor(losses, dtype=dtype), logits))
    return runs, shapes


@checks("sft_stage")
def sft_options_match_the_reference_loop(ex):
    """lr, r, alpha, seed (none of them the default) on 3 steps: the losses, the adapters' shapes and the final logits
    equal this module's own loop with the same options; the same seed again gives the same losses"""
    base = ex.make_base()
    input_ids, labels = ex.SFT_IDS[:16], ex.SFT_LABELS[:16]
    ((oracle_losses, oracle_logits), (baseline_losses, baseline_logits)), shapes = reference_sft_run(
        ex, base, input_ids, labels, SFT_OPTIONS
    )
    runs = []
    for _ in range(2):
        torch.manual_seed(ADAPTER_SEED)
        with one_thread():
            runs.append(ex.sft_stage(base, input_ids, labels, **SFT_OPTIONS))
    (model, losses), (_, again) = runs
    got_shapes = {name: tuple(p.shape) for name, p in model.named_parameters() if "lora_" in name}
    expect(
        got_shapes == shapes,
        "the adapters do not have rank r",
        input=SFT_OPTIONS_INPUT,
        expected=f"lora_A (r, d_in), lora_B (d_out, r) with r = 4, e.g. {sorted(shapes.items())[:2]}",
        got=f"{sorted(got_shapes.items())[:2]}",
        hint="apply_lora(copy.deepcopy(base), TARGETS, r=r, alpha=alpha)",
    )
    expect(
        isinstance(losses, list) and len(losses) == SFT_OPTIONS["steps"],
        "the losses are not one float per step",
        input=SFT_OPTIONS_INPUT,
        expected="3 floats",
        got=repr(losses)[:100],
    )
    expect_close(
        torch.tensor(losses, dtype=torch.float32),
        oracle_losses,
        baseline=baseline_losses,
        input=SFT_OPTIONS_INPUT,
        what="SFT losses",
        hint="rows from torch.Generator().manual_seed(seed); AdamW(lr=lr); the scale alpha / r is apply_lora's",
    )
    with torch.no_grad():
        got_logits = model(input_ids=input_ids[:8]).logits
    expect_close(
        got_logits,
        oracle_logits,
        baseline=baseline_logits,
        input=SFT_OPTIONS_INPUT + ", logits of 8 rows after training",
        what="logits",
        hint="train the adapters made with r and alpha, at the lr given",
    )
    expect(
        again == losses,
        "the same seed did not give the same losses",
        input=SFT_OPTIONS_INPUT + ", run twice",
        expected=str(losses),
        got=str(again),
        hint="draw every row from a torch.Generator seeded with seed, created in sft_stage",
    )


@checks("sft_stage")
def sft_loss_falls(ex):
    """the SFT loss falls below 1.2 within 60 steps (recorded losses and the whole set's loss)"""
    base, _, model, losses = learner_sft(ex)
    expect(
        isinstance(losses, list) and len(losses) == 60 and all(isinstance(v, float) for v in losses),
        "the losses are not a list of one float per step",
        input=SFT_INPUT,
        expected="60 Python floats",
        got=f"{type(losses).__name__} of length {len(losses) if hasattr(losses, '__len__') else '?'}",
        hint="append loss.item() once per step",
    )
    last = sum(losses[-10:]) / 10
    with reference_only(), one_thread():
        full = answer_loss(model, ex.SFT_IDS, ex.SFT_LABELS)
        start = answer_loss(base, ex.SFT_IDS, ex.SFT_LABELS)
    expect(
        last < SFT_THRESHOLD and full < SFT_THRESHOLD,
        "the SFT loss did not fall below the threshold",
        input=SFT_INPUT,
        expected=f"mean of the last 10 recorded losses and the set's loss < {SFT_THRESHOLD} (base: {start:.2f})",
        got=f"last 10 recorded: {last:.3f}; whole set recomputed: {full:.3f}; first recorded: {losses[0]:.3f}",
        hint="sft_loss(logits, labels) on the drawn rows (labels, not input_ids), zero_grad, backward, step on the "
        "adapters",
    )


@checks("sft_stage")
def sft_base_untouched(ex):
    """only the LoRA parameters change: base weights bit-identical, in `base` and inside the adapter model"""
    base, before, model, _ = learner_sft(ex)
    expect(
        not names_of_adapters(ex, base) and base.state_dict().keys() == before.keys(),
        "the base model was changed: it holds adapters now",
        input=SFT_INPUT,
        expected="base left as it was (train a deep copy)",
        got=f"{len(names_of_adapters(ex, base))} LoRALinear modules inside base",
        hint="model = apply_lora(copy.deepcopy(base), ...): apply_lora changes the model in place",
    )
    changed = [name for name, value in base.state_dict().items() if not torch.equal(value, before[name])]
    inside = base_weights(model)
    expect(
        inside.keys() == before.keys(),
        "the adapter model's base weights do not have the base's names",
        input=SFT_INPUT,
        expected=f"{len(before)} tensors named as in the base",
        got=f"{sorted(set(inside) ^ set(before))[:4]}",
        hint="wrap with apply_lora on TARGETS",
    )
    changed += [f"(adapter model) {name}" for name, value in inside.items() if not torch.equal(value, before[name])]
    expect(
        not changed,
        "base weights changed during SFT",
        input=SFT_INPUT,
        expected="every base tensor bit-identical to before",
        got=f"{len(changed)} changed, e.g. {changed[:3]}",
        hint="give AdamW only [p for p in model.parameters() if p.requires_grad]; never turn gradients back on",
    )
    trainable = sorted({name.rsplit(".", 2)[-2] for name, p in model.named_parameters() if p.requires_grad})
    expect(
        trainable == ["lora_A", "lora_B"],
        "parameters other than the adapters are trainable",
        input=SFT_INPUT,
        expected="only lora_A and lora_B require grad",
        got=f"trainable kinds: {trainable}",
        hint="apply_lora freezes the model; leave it that way",
    )


@checks("sft_stage")
def sft_refuses_bad_input(ex):
    """steps < 1 and labels of another shape are refused with a ValueError"""
    base = ex.make_base()
    expect_value_error(
        lambda: ex.sft_stage(base, ex.SFT_IDS, ex.SFT_LABELS, steps=0),
        input="steps=0",
        hint="raise ValueError when steps < 1",
    )
    labels = torch.cat([ex.SFT_LABELS, ex.SFT_LABELS])  # more rows than inputs: indexing alone would not fail
    expect_value_error(
        lambda: ex.sft_stage(base, ex.SFT_IDS, labels, steps=1),
        input=describe(input_ids=ex.SFT_IDS, labels=labels),
        hint="raise ValueError when labels.shape != input_ids.shape",
    )
    with one_thread():
        _, losses = ex.sft_stage(base, ex.SFT_IDS[:8], ex.SFT_LABELS[:8], steps=1, batch_size=4)
    expect(
        len(losses) == 1,
        "steps=1 is not one step",
        input="steps=1",
        expected="1 loss",
        got=f"{len(losses)}",
        hint="refuse steps < 1 only",
    )


# ------------------------------------------------------------------------------------------------- dpo_stage

DPO_INPUT = "the checks' own SFT model; 40 steps on the 128 shipped pairs, batch 16, lr 2e-2, beta 0.1"


def heldout_outcome(ex, sft_model, policy):
    """(mean reward margin, reward accuracy, win rate) on the held-out pairs, with the SFT model as reference."""
    with reference_only(), one_thread():
        chosen, rejected = ex.HELD_CHOSEN, ex.HELD_REJECTED
        rewards_chosen = BETA * (completion_logps(policy, chosen, 4) - completion_logps(sft_model, chosen, 4))
        rewards_rejected = BETA * (completion_logps(policy, rejected, 4) - completion_logps(sft_model, rejected, 4))
        margins = rewards_chosen - rewards_rejected
        prompts, rule = chosen[:, :4], chosen[:, 4]
        with torch.no_grad():
            policy_ok = (policy(input_ids=prompts).logits[:, -1].argmax(-1) == rule).double()
            sft_ok = (sft_model(input_ids=prompts).logits[:, -1].argmax(-1) == rule).double()
        win = ((policy_ok > sft_ok).double() + 0.5 * (policy_ok == sft_ok).double()).mean().item()
    return margins.mean().item(), (margins > 0).double().mean().item(), win


def completion_logps_with_grad(model, input_ids, prompt_len):
    """(M,): sum of log p(token) over the tokens from prompt_len on, by cross-entropy, with gradients."""
    logits = model(input_ids=input_ids).logits[:, prompt_len - 1 : -1]
    targets = input_ids[:, prompt_len:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return -nll.view(targets.shape).sum(-1)


DPO_OPTIONS = dict(prompt_len=3, steps=3, lr=5e-2, batch_size=4, seed=9)  # prompt_len, lr, seed not the defaults
DPO_OPTIONS_INPUT = "a LoRA model with random B, 16 pairs, prompt_len=3, steps=3, lr=5e-2, batch_size=4, seed=9"
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def reference_dpo_metrics(sft_model, chosen, rejected, options, dtype):
    """This module's DPO loop in `dtype`: (steps, 4) metrics in METRICS order, computed before each step's update."""
    with reference_only(), one_thread():
        policy = copy.deepcopy(sft_model).to(dtype).train()
        reference = copy.deepcopy(sft_model).to(dtype).requires_grad_(False).eval()
        optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=options["lr"])
        generator = torch.Generator().manual_seed(options["seed"])
        rows = []
        for _ in range(options["steps"]):
            pairs = torch.randint(0, chosen.shape[0], (options["batch_size"],), generator=generator)
            ids = torch.cat([chosen[pairs], rejected[pairs]])
            mine = completion_logps_with_grad(policy, ids, options["prompt_len"])
            with torch.no_grad():
                theirs = completion_logps_with_grad(reference, ids, options["prompt_len"])
            good, bad = (BETA * (mine - theirs)).chunk(2)  # implicit rewards of the chosen and rejected rows
            loss = -F.logsigmoid(good - bad).mean()
            good, bad = good.detach(), bad.detach()
            rows.append([good.mean(), bad.mean(), (good - bad).mean(), (good > bad).to(dtype).mean()])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return torch.tensor(rows, dtype=dtype)


@checks("dpo_stage")
def dpo_options_match_the_reference_loop(ex):
    """prompt_len=3 (the last prompt token scored too), lr and seed (none of them the default) on 3 steps: every logged
    metric equals this module's own DPO loop with the same options; the same seed again gives the same metrics"""
    sft_model = adapter_model(ex, torch.float32)
    for name, param in sft_model.named_parameters():  # as after the SFT stage: the adapters trainable
        param.requires_grad_("lora_" in name)
    chosen, rejected = ex.PAIR_CHOSEN[:16], ex.PAIR_REJECTED[:16]
    oracle = reference_dpo_metrics(sft_model, chosen, rejected, DPO_OPTIONS, torch.float64)
    baseline = reference_dpo_metrics(sft_model, chosen, rejected, DPO_OPTIONS, torch.float32)
    runs = []
    for _ in range(2):
        with one_thread():
            runs.append(ex.dpo_stage(sft_model, chosen, rejected, beta=BETA, **DPO_OPTIONS)[1])
    history, again = runs
    expect(
        isinstance(history, list)
        and len(history) == DPO_OPTIONS["steps"]
        and all(isinstance(m, dict) and all(k in m for k in METRICS) for m in history),
        "the history is not one metrics dict per step",
        input=DPO_OPTIONS_INPUT,
        expected=f"3 dicts with {', '.join(METRICS)}",
        got=repr(history)[:120],
        hint="append the metrics that dpo_batch_loss returns, once per step",
    )
    got = torch.tensor([[m[k] for k in METRICS] for m in history], dtype=torch.float32)
    for column, name in enumerate(METRICS):
        expect_close(
            got[:, column],
            oracle[:, column],
            baseline=baseline[:, column],
            input=DPO_OPTIONS_INPUT,
            what=f"{name} per step",
            hint="completion_mask 1 from column prompt_len on; pairs from torch.Generator().manual_seed(seed); "
            "AdamW(lr=lr)",
        )
    expect(
        again == history,
        "the same seed did not give the same metrics",
        input=DPO_OPTIONS_INPUT + ", run twice",
        expected=str(history)[:120],
        got=str(again)[:120],
        hint="draw every batch from a torch.Generator seeded with seed, created in dpo_stage",
    )


@checks("dpo_stage")
def dpo_outcome_heldout(ex):
    """on 64 held-out pairs: reward margin > 0.5, reward accuracy >= 0.9, win rate against SFT >= 0.7"""
    sft_model, _, policy, _ = learner_dpo(ex)
    margin, accuracy, win = heldout_outcome(ex, sft_model, policy)
    expect(
        margin > MARGIN_THRESHOLD and accuracy >= ACCURACY_THRESHOLD and win >= WIN_THRESHOLD,
        "DPO did not move the policy towards the preferred answers on held-out prompts",
        input=DPO_INPUT,
        expected=f"margin > {MARGIN_THRESHOLD}, accuracy >= {ACCURACY_THRESHOLD}, win rate >= {WIN_THRESHOLD}",
        got=f"margin {margin:.3f}, accuracy {accuracy:.2f}, win rate {win:.2f}",
        hint="rows [chosen; rejected] in that order, dpo_batch_loss(policy, reference, ...), step on the policy's "
        "adapters; a negative margin means chosen and rejected are swapped",
    )


@checks("dpo_stage")
def dpo_reference_frozen(ex):
    """the logged margins rise from 0 (a frozen reference), and the SFT model and base weights are unchanged"""
    sft_model, before, policy, history = learner_dpo(ex)
    expect(
        isinstance(history, list) and len(history) == 40 and all("rewards/margins" in m for m in history),
        "the history is not one metrics dict per step",
        input=DPO_INPUT,
        expected="40 dicts from dpo_batch_loss",
        got=f"{type(history).__name__} of length {len(history) if hasattr(history, '__len__') else '?'}",
        hint="append the metrics that dpo_batch_loss returns, once per step",
    )
    first, last = history[0]["rewards/margins"], sum(m["rewards/margins"] for m in history[-5:]) / 5
    expect(
        abs(first) < 1e-6 and last > LOGGED_MARGIN_THRESHOLD,
        "the logged reward margins do not start at 0 and rise",
        input=DPO_INPUT,
        expected=f"step 1: 0 (policy = reference); mean of the last 5 > {LOGGED_MARGIN_THRESHOLD}",
        got=f"step 1: {first:.4f}; last 5: {last:.4f}",
        hint="the reference is a frozen deep copy of the SFT model, not the policy itself (then every reward is 0)",
    )
    changed = [name for name, value in sft_model.state_dict().items() if not torch.equal(value, before[name])]
    expect(
        not changed,
        "the SFT model was trained in place",
        input=DPO_INPUT,
        expected="sft_model bit-identical after dpo_stage",
        got=f"{len(changed)} tensors changed, e.g. {changed[:3]}",
        hint="policy = copy.deepcopy(sft_model): the SFT model is the reference and must stay as it was",
    )
    moved = [
        name
        for name, value in base_weights(policy).items()
        if not torch.equal(value, base_weights(sft_model)[name]) and "lora_" not in name
    ]
    expect(
        not moved,
        "base weights of the policy changed during DPO",
        input=DPO_INPUT,
        expected="only lora_A / lora_B differ between the policy and the SFT model",
        got=f"{moved[:3]}",
        hint="AdamW on [p for p in policy.parameters() if p.requires_grad]",
    )


@checks("dpo_stage")
def dpo_refuses_bad_input(ex):
    """steps < 1, beta <= 0 and chosen/rejected of different shapes are refused with a ValueError"""
    sft_model = reference_sft(ex)
    chosen, rejected = ex.PAIR_CHOSEN[:4], ex.PAIR_REJECTED[:4]
    expect_value_error(lambda: ex.dpo_stage(sft_model, chosen, rejected, steps=0), "steps=0", "steps < 1")
    expect_value_error(lambda: ex.dpo_stage(sft_model, chosen, rejected, steps=1, beta=0.0), "beta=0.0", "beta <= 0")
    expect_value_error(
        lambda: ex.dpo_stage(sft_model, chosen, rejected[:3], steps=1),
        describe(chosen=chosen, rejected=rejected[:3]),
        "chosen.shape != rejected.shape",
    )
    with one_thread():
        _, history = ex.dpo_stage(sft_model, chosen, rejected, steps=1, batch_size=2)
    expect(
        len(history) == 1,
        "steps=1 is not one step",
        input="steps=1",
        expected="1 metrics dict",
        got=f"{len(history)}",
        hint="refuse steps < 1 only",
    )


# -------------------------------------------------------------------------------------------- merge_adapters


def adapter_model(ex, dtype):
    """A base with adapters whose B is random (a nonzero delta), in `dtype`."""
    with reference_only():
        model = ex.apply_lora(
            copy.deepcopy(ex.make_base(seed=int(torch.randint(0, 1000, ())))), ex.TARGETS, r=4, alpha=8.0
        )
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0.0, 0.3)
        return model.to(dtype).eval()


@one_thread()
@checks("merge_adapters")
def merge_same_outputs(ex):
    """the merged model's logits equal the adapter model's: float64 to rounding, float32 by the tolerance policy"""
    for dtype in (torch.float64, torch.float32):
        model = adapter_model(ex, dtype)
        ids = torch.randint(4, 12, (3, 7))
        with torch.no_grad():
            want = model(input_ids=ids).logits
            got = ex.merge_adapters(model)(input_ids=ids).logits
            oracle = model.double()(input_ids=ids).logits  # the adapter model itself, in float64
        expect_close(
            got,
            oracle,
            input=describe(input_ids=ids, dtype=str(dtype)),
            baseline=want,
            dtype=dtype,
            hint="weight = W0 + scaling * lora_B.weight @ lora_A.weight (the scale, and B before A)",
            what="merged model's logits",
        )


@one_thread()
@checks("merge_adapters")
def merge_plain_model(ex):
    """no LoRALinear left, the base's parameter names, and the input model unchanged"""
    model = adapter_model(ex, torch.float32)
    ids = torch.randint(4, 12, (2, 5))
    with torch.no_grad():
        before_logits = model(input_ids=ids).logits
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = ex.merge_adapters(model)
    left = names_of_adapters(ex, merged)
    expect(
        not left,
        "the merged model still holds LoRALinear modules",
        input="a tiny Llama with adapters on the seven projections",
        expected="plain nn.Linear everywhere",
        got=f"{len(left)} left, e.g. {left[:2]}",
        hint="replace each LoRALinear on its parent (setattr) with an nn.Linear",
    )
    with reference_only():
        want_names = set(ex.make_base().state_dict())
    expect(
        set(merged.state_dict()) == want_names,
        "the merged model's parameter names are not the base model's",
        input="a tiny Llama with adapters",
        expected="the names of LlamaForCausalLM (…q_proj.weight)",
        got=f"differences: {sorted(set(merged.state_dict()) ^ want_names)[:4]}",
        hint="an nn.Linear under the wrapped layer's name, not the LoRALinear with its base_layer",
    )
    trainable = [name for name, p in merged.named_parameters() if p.requires_grad]
    expect(
        not trainable,
        "the merged linear layers are trainable",
        input="a tiny Llama with adapters",
        expected="every parameter frozen, like the base weights the merge replaces",
        got=f"{len(trainable)} trainable, e.g. {trainable[:2]}",
        hint="linear.requires_grad_(False) after filling it",
    )
    changed = [k for k, v in model.state_dict().items() if k not in before or not torch.equal(v, before[k])]
    with torch.no_grad():
        after_logits = model(input_ids=ids).logits
    expect(
        not changed and len(names_of_adapters(ex, model)) == 7 and torch.equal(after_logits, before_logits),
        "merge_adapters changed its input model",
        input="a tiny Llama with adapters",
        expected="the input keeps its 7 adapters, unmerged, and its outputs",
        got=f"{len(changed)} tensors changed; {len(names_of_adapters(ex, model))} adapters left",
        hint="merge a copy.deepcopy(model)",
    )


@checks("merge_adapters")
def merge_refuses_plain_model(ex):
    """a model without adapters is refused with a ValueError"""
    with reference_only():
        base = ex.make_base()
    expect_value_error(lambda: ex.merge_adapters(base), "a LlamaForCausalLM without LoRALinear", "nothing to merge")


class _WithBias(torch.nn.Module):
    """Two projections with biases (Qwen2's q/k/v have them), named as in a Llama so that apply_lora finds them."""

    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(6, 5, bias=True)
        self.down_proj = torch.nn.Linear(5, 3, bias=True)

    def forward(self, x):
        return self.down_proj(torch.relu(self.q_proj(x)))


@checks("merge_adapters")
def merge_keeps_bias(ex):
    """layers with a bias (as in Qwen2's attention): the merged output keeps it, float64"""
    with reference_only():
        model = ex.apply_lora(_WithBias().double(), ["q_proj", "down_proj"], r=2, alpha=4.0)
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.Linear) and module.bias is not None:
                    module.bias.normal_()
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_()
    x = torch.randn(4, 6, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
        got = ex.merge_adapters(model)(x)
    expect_close(
        got, want, input=describe(x=x), hint="copy the base layer's bias into the new nn.Linear", what="merged output"
    )
