"""Checks for p02.reward_model. References: Hugging Face `LlamaForSequenceClassification` (tiny random config,
num_labels=1, pad id 0) on left- and right-padded batches, its pooling written out as a loop over each row's mask;
TRL's reward-trainer loss (-logsigmoid(chosen - rejected - margin).mean() + center_rewards_coefficient *
mean((chosen + rejected)^2)) as a float64 closed form with log1p/exp; torch.autograd.gradcheck; and a tiny reward
model trained with a float64-checked loss on a synthetic preference set, which must reach 95% held-out accuracy."""

import torch
import torch.nn as nn

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
)
from llm_algo.references.hf import tiny_llama_config, transformers_module
from llm_algo.references.llama import randomize_

checks = Checks("p02.reward_model")

POOL_HINT = "the rightmost position where the mask is set: (arange(L) * mask).argmax(-1), then gather"


def padded_mask(lengths: list[int], length: int, left: list[bool]) -> torch.Tensor:
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, (n, is_left) in enumerate(zip(lengths, left, strict=True)):
        mask[row, length - n :] = 1 if is_left else 0
        if not is_left:
            mask[row, :n] = 1
    return mask


def loop_last_token(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = []
    for row in range(values.shape[0]):
        last = max(t for t in range(values.shape[1]) if bool(mask[row, t]))
        out.append(values[row, last].double())
    return torch.stack(out)


# ------------------------------------------------------------------------------------------ last_token_rewards


@checks("last_token_rewards")
def pools_by_hand(ex):
    """two rows by hand: right padded (last real at 1) and left padded (last real at 3)"""
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1]])
    got = ex.last_token_rewards(values, mask)
    case = "values [[1, 2, 3, 4], [5, 6, 7, 8]], mask [[1, 1, 0, 0], [0, 0, 1, 1]]"
    expect_tensor(got, shape=(2,), dtype=torch.float32, input=case, hint=POOL_HINT)
    expect_close(got, torch.tensor([2.0, 8.0], dtype=torch.float64), input=case, hint=POOL_HINT)


@checks("last_token_rewards")
def pools_like_a_loop_on_any_padding(ex):
    """random values, left/right/mixed padding, bool and int masks, a batch of one, float64 and bfloat16"""
    cases = [
        ([3, 7, 1, 5], [False, False, True, True], torch.float32, torch.long),
        ([9], [True], torch.float64, torch.bool),
        ([2, 9, 4], [True, False, False], torch.bfloat16, torch.int32),
    ]
    for lengths, left, dtype, mask_dtype in cases:
        values = torch.randn(len(lengths), 9).to(dtype)
        mask = padded_mask(lengths, 9, left).to(mask_dtype)
        got = ex.last_token_rewards(values, mask)
        case = describe(values=values, mask=mask) + f", lengths {lengths}, left padded {left}"
        expect_tensor(got, shape=(len(lengths),), dtype=dtype, input=case, hint=POOL_HINT + " (keep values' dtype)")
        expect_close(got, loop_last_token(values, mask), input=case, hint=POOL_HINT)


@checks("last_token_rewards")
def pools_like_llama_for_sequence_classification(ex):
    """the score head's values, pooled by you, equal LlamaForSequenceClassification's logits (left and right padding)"""
    with reference_only():
        transformers = transformers_module()
        config = tiny_llama_config(num_labels=1, pad_token_id=0)
        hf = randomize_(transformers.LlamaForSequenceClassification(config))
        mask = padded_mask([6, 2, 9, 4], 9, [False, True, False, True])
        ids = torch.randint(1, config.vocab_size, (4, 9)) * mask  # pad id 0 on padding only
        with torch.no_grad():
            values = hf.score(hf.model(input_ids=ids, attention_mask=mask).last_hidden_state).squeeze(-1)  # (B, L)
            want = hf(input_ids=ids, attention_mask=mask).logits[:, 0]
    got = ex.last_token_rewards(values, mask)
    expect_close(
        got,
        want.double(),
        input=f"tiny Llama values {describe(values=values)}, rows of 6, 2, 9, 4 real tokens, right/left/right/left",
        baseline=want,
        hint=POOL_HINT,
    )


@checks("last_token_rewards")
def pooling_refuses_bad_input(ex):
    """mismatched shapes, 1-D values, a row without a real token: ValueError"""
    values = torch.randn(2, 5)
    cases = [
        ((values, torch.ones(2, 4, dtype=torch.long)), "mask (2, 4) for values (2, 5)"),
        ((values[0], torch.ones(5, dtype=torch.long)), "1-D values"),
        ((values, torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])), "row 1 has no real token"),
    ]
    for args, why in cases:
        expect_value_error(
            lambda args=args: ex.last_token_rewards(*args),
            input=f"last_token_rewards with {why}",
            hint="validate the shapes; a row without a real token has no reward (its argmax would silently be 0)",
        )


# ------------------------------------------------------------------------------------------ bradley_terry_loss

BT_HINT = (
    "loss = mean(softplus(-(r_c - r_r - margin))) + coef * mean((r_c + r_r)^2); accuracy = mean(r_c > r_r); "
    "mean_margin = mean(r_c - r_r)"
)


def trl_loss(chosen, rejected, margin=None, coefficient=0.0) -> torch.Tensor:
    """TRL's reward-trainer loss in float64: -log sigmoid(z) written as log1p(exp(-|z|)) + max(-z, 0)."""
    z = chosen.double() - rejected.double() - (0.0 if margin is None else torch.as_tensor(margin).double())
    loss = (torch.log1p(torch.exp(-z.abs())) + torch.clamp(-z, min=0)).mean()
    return loss + coefficient * ((chosen.double() + rejected.double()) ** 2).mean()


def unpack(got, case: str):
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "bradley_terry_loss must return (loss, accuracy, mean_margin)",
        input=case,
        expected="a tuple of 3 tensors",
        got=type(got).__name__,
    )
    return got


@checks("bradley_terry_loss")
def loss_matches_trl_closed_form(ex):
    """random rewards, with no margin, a float margin, a per-pair margin, and centring; float32 and float64"""
    for batch, dtype, margin, coefficient in (
        (7, torch.float32, None, 0.0),
        (1, torch.float64, 0.5, 0.0),
        (12, torch.float64, "per pair", 0.01),
        (5, torch.float32, None, 0.1),
    ):
        chosen, rejected = torch.randn(batch, dtype=dtype) * 2, torch.randn(batch, dtype=dtype) * 2
        margin_value = torch.rand(batch, dtype=dtype) if margin == "per pair" else margin
        case = describe(chosen=chosen, rejected=rejected) + f", margin={margin}, center_coefficient={coefficient}"
        loss, _, _ = unpack(ex.bradley_terry_loss(chosen, rejected, margin_value, coefficient), case)
        expect_tensor(loss, shape=(), dtype=dtype, input=case, what="loss")
        expect_close(loss, trl_loss(chosen, rejected, margin_value, coefficient), input=case, what="loss", hint=BT_HINT)


@checks("bradley_terry_loss")
def metrics_by_hand(ex):
    """accuracy with a tie (a tie is wrong) and the mean margin, worked out by hand"""
    chosen = torch.tensor([2.0, 0.5, 1.0, -1.0])
    rejected = torch.tensor([1.0, 0.5, 3.0, -4.0])
    case = "chosen [2, 0.5, 1, -1], rejected [1, 0.5, 3, -4] (pair 1 is a tie)"
    _, accuracy, mean_margin = unpack(ex.bradley_terry_loss(chosen, rejected), case)
    expect_close(accuracy, torch.tensor(0.5, dtype=torch.float64), input=case, what="accuracy", hint=BT_HINT)
    expect_close(mean_margin, torch.tensor(0.5, dtype=torch.float64), input=case, what="mean_margin", hint=BT_HINT)
    chosen_grad = chosen.clone().requires_grad_()
    _, accuracy, mean_margin = ex.bradley_terry_loss(chosen_grad, rejected)
    expect(
        not accuracy.requires_grad and not mean_margin.requires_grad,
        "the metrics carry a gradient",
        input=case + ", chosen requires grad",
        expected="detached accuracy and mean_margin",
        got=f"requires_grad {accuracy.requires_grad}, {mean_margin.requires_grad}",
        hint="compute the metrics under torch.no_grad()",
    )


@checks("bradley_terry_loss")
def stable_at_large_gaps(ex):
    """gaps of +-300 in float32: a finite loss equal to the closed form (no log(sigmoid) underflow)"""
    chosen = torch.tensor([-150.0, 150.0, 0.3, 80.0])
    rejected = torch.tensor([150.0, -150.0, 0.1, -80.0])
    case = "chosen [-150, 150, 0.3, 80], rejected [150, -150, 0.1, -80] float32"
    loss, _, _ = unpack(ex.bradley_terry_loss(chosen, rejected), case)
    expect(
        bool(torch.isfinite(loss)),
        "the loss is not finite at a large gap",
        input=case,
        expected=f"{float(trl_loss(chosen, rejected)):.4f}",
        got=str(float(loss)),
        hint="use F.softplus(-gap) (or -F.logsigmoid(gap)), not torch.log(torch.sigmoid(gap))",
    )
    expect_close(loss, trl_loss(chosen, rejected), input=case, what="loss", hint=BT_HINT)


@checks("bradley_terry_loss")
def gradients_pass_gradcheck(ex):
    """torch.autograd.gradcheck in float64 with a margin and centring"""
    chosen = torch.randn(5, dtype=torch.float64, requires_grad=True)
    rejected = torch.randn(5, dtype=torch.float64, requires_grad=True)
    margin = torch.rand(5, dtype=torch.float64)
    expect_gradcheck(
        lambda c, r: ex.bradley_terry_loss(c, r, margin, 0.05)[0],
        (chosen, rejected),
        input=describe(chosen=chosen, rejected=rejected) + ", margin (5,), center_coefficient=0.05",
        hint="build the loss from differentiable ops",
    )


@checks("bradley_terry_loss")
def loss_refuses_bad_input(ex):
    """mismatched or empty rewards, a margin of the wrong shape, a negative coefficient: ValueError"""
    a, b = torch.randn(4), torch.randn(4)
    cases = [
        ((a, b[:3]), {}, "(4,) and (3,) rewards"),
        ((torch.randn(0), torch.randn(0)), {}, "empty rewards"),
        ((a.view(2, 2), b.view(2, 2)), {}, "2-D rewards"),
        ((a, b), {"margin": torch.ones(3)}, "margin (3,) for 4 pairs"),
        ((a, b), {"margin": torch.ones(4, 1)}, "margin (4, 1): it would broadcast to 4 x 4 gaps"),
        ((a, b), {"center_coefficient": -0.1}, "center_coefficient=-0.1"),
    ]
    for args, kwargs, why in cases:
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.bradley_terry_loss(*args, **kwargs),
            input=f"bradley_terry_loss with {why}",
            hint="validate shapes, the margin and the coefficient",
        )


# ------------------------------------------------------------------------------------------ RewardModel


class HiddenStates(nn.Module):
    """A Hugging Face LlamaModel called as backbone(input_ids, attention_mask) -> last_hidden_state."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        with reference_only():
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class MeanEmbedding(nn.Module):
    """The checks' toy causal backbone: masked running mean of token embeddings, (B, L, d)."""

    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)

    def forward(self, input_ids, attention_mask):
        real = attention_mask.to(self.embed.weight.dtype).unsqueeze(-1)
        return (self.embed(input_ids) * real).cumsum(1) / real.cumsum(1).clamp_min(1)


@checks("RewardModel")
@one_thread()
def matches_llama_for_sequence_classification(ex):
    """a LlamaModel backbone + your head loaded with HF's score weights equals LlamaForSequenceClassification"""
    with reference_only():
        transformers = transformers_module()
        config = tiny_llama_config(num_labels=1, pad_token_id=0)
        hf = randomize_(transformers.LlamaForSequenceClassification(config))
    model = ex.RewardModel(HiddenStates(hf.model), config.hidden_size)
    expect(
        isinstance(getattr(model, "score", None), nn.Linear) and model.score.bias is None,
        "the head is not a bias-free nn.Linear named `score`",
        input=f"RewardModel(LlamaModel, {config.hidden_size})",
        expected=f"score = nn.Linear({config.hidden_size}, 1, bias=False)",
        got=repr(getattr(model, "score", None)),
        hint="Hugging Face's score head has no bias; keep the name so that checkpoints load",
    )
    with torch.no_grad():
        model.score.weight.copy_(hf.score.weight)
    for left in (False, True):
        mask = padded_mask([5, 8, 2], 8, [left] * 3)
        ids = torch.randint(1, config.vocab_size, (3, 8)) * mask
        with reference_only(), torch.no_grad():
            want = hf(input_ids=ids, attention_mask=mask).logits[:, 0]
        with torch.no_grad():
            got = model(ids, mask)
        case = f"tiny Llama, rows of 5, 8, 2 real tokens, {'left' if left else 'right'} padded"
        expect_tensor(got, shape=(3,), dtype=torch.float32, input=case, what="rewards")
        expect_close(
            got,
            want.double(),
            input=case,
            baseline=want,
            what="rewards",
            hint="pass the attention mask to the backbone, score every position, pool at the last real token",
        )


@checks("RewardModel")
@one_thread()
def trains_to_95_percent_on_synthetic_preferences(ex):
    """your model + the checks' loss and AdamW, 100 steps on 500 synthetic pairs: >= 95% held-out accuracy"""
    vocab, length = 16, 12
    token_score = torch.randn(vocab)

    def pairs(count: int):
        ids = torch.zeros(2, count, length, dtype=torch.long)
        mask = torch.zeros(2, count, length, dtype=torch.long)
        for side in range(2):
            for i in range(count):
                n = int(torch.randint(3, length + 1, ()))
                where = slice(length - n, length) if torch.rand(()) < 0.5 else slice(0, n)
                ids[side, i, where] = torch.randint(1, vocab, (n,))
                mask[side, i, where] = 1
        score = (token_score[ids] * mask).sum(-1) / mask.sum(-1)  # (2, count)
        keep = (score[0] - score[1]).abs() > 0.05
        first = (score[0] > score[1])[:, None]
        chosen = torch.where(first, ids[0], ids[1])[keep], torch.where(first, mask[0], mask[1])[keep]
        rejected = torch.where(first, ids[1], ids[0])[keep], torch.where(first, mask[1], mask[0])[keep]
        return chosen, rejected

    (train_c, train_r), (test_c, test_r) = pairs(500), pairs(300)
    model = ex.RewardModel(MeanEmbedding(vocab, 8), 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    for _ in range(100):
        batch = torch.randint(len(train_c[0]), (64,))
        gap = model(train_c[0][batch], train_c[1][batch]) - model(train_r[0][batch], train_r[1][batch])
        loss = nn.functional.softplus(-gap).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = (model(*test_c) > model(*test_r)).float().mean().item()
    expect(
        accuracy >= 0.95,
        "the trained reward model ranks too few held-out pairs correctly",
        input=f"{len(train_c[0])} training pairs, {len(test_c[0])} held out, half left-padded, 100 AdamW steps",
        expected=">= 95% accuracy",
        got=f"{accuracy:.1%}",
        hint="the reward must be read at the last REAL token (left-padded rows end at L - 1, right-padded ones earlier)",
    )


@checks("RewardModel")
def refuses_mismatched_inputs(ex):
    """input_ids and attention_mask of different shapes: ValueError"""
    model = ex.RewardModel(MeanEmbedding(10, 4), 4)
    expect_value_error(
        lambda: model(torch.randint(1, 10, (2, 5)), torch.ones(2, 4, dtype=torch.long)),
        input="input_ids (2, 5), attention_mask (2, 4)",
        hint="check that input_ids and attention_mask have the same shape",
    )
