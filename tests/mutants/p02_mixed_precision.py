"""Realistic wrong versions of the p02.mixed_precision solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "DynamicLossScaler",
        "steps_on_overflow",
        "backs off on inf/NaN but still calls optimizer.step() with the broken gradients",
        [
            (
                "self.growth_tracker = 0\n            return False",
                "self.growth_tracker = 0\n            optimizer.step()\n            return False",
            )
        ],
    ),
    Mutant(
        "DynamicLossScaler",
        "tracker_kept_on_backoff",
        "does not reset the growth tracker after an overflow, so the scale grows back too soon",
        [
            (
                "self.scale *= self.backoff_factor                   # skip the step entirely\n            self.growth_tracker = 0",
                "self.scale *= self.backoff_factor",
            )
        ],
    ),
    Mutant(
        "DynamicLossScaler",
        "unscale_by_multiplying",
        "multiplies the gradients by the scale instead of dividing",
        [("p.grad.div_(self.scale)", "p.grad.mul_(self.scale)")],
    ),
    Mutant(
        "DynamicLossScaler",
        "no_unscale",
        "checks the scaled gradients for inf but never unscales them (steps are `scale` times too large)",
        [("p.grad.div_(self.scale)                          # exact: the scale is a power of two", "pass")],
    ),
    Mutant(
        "DynamicLossScaler",
        "loss_scaled_in_fp16",
        "multiplies a 16-bit loss by the scale in 16 bits (overflows to inf for any loss above 1 at 2**16)",
        [("return loss.to(torch.promote_types(loss.dtype, torch.float32)) * self.scale", "return loss * self.scale")],
    ),
    Mutant(
        "DynamicLossScaler",
        "grows_every_step",
        "grows the scale after every clean step",
        [("if self.growth_tracker == self.growth_interval:", "if True:")],
    ),
    Mutant(
        "DynamicLossScaler",
        "tracker_kept_after_growth",
        "does not reset the tracker after growing, so the scale grows once and never again",
        [
            (
                "self.scale *= self.growth_factor\n            self.growth_tracker = 0",
                "self.scale *= self.growth_factor",
            )
        ],
    ),
    Mutant(
        "DynamicLossScaler",
        "nan_not_detected",
        "only looks for inf, so a NaN gradient goes through",
        [("not bool(torch.isfinite(p.grad).all())", "bool(torch.isinf(p.grad).any())")],
    ),
    Mutant(
        "MasterWeights",
        "master_not_fp32",
        "keeps the 'master' in the model's 16-bit dtype (a detached copy only)",
        [("nn.Parameter(p.detach().to(torch.float32))", "nn.Parameter(p.detach().clone())")],
    ),
    Mutant(
        "MasterWeights",
        "master_rebuilt_each_step",
        "re-derives the masters from the rounded model weights at every step, losing the small updates",
        [
            (
                "master.grad = None if p.grad is None else p.grad.to(torch.float32)",
                "master.copy_(p)\n        master.grad = None if p.grad is None else p.grad.to(torch.float32)",
            )
        ],
    ),
    Mutant(
        "MasterWeights",
        "no_copy_back",
        "never copies the updated masters into the model",
        [("p.copy_(master)                                      # round to nearest into bf16/fp16", "pass")],
    ),
    Mutant(
        "MasterWeights",
        "grads_not_cleared",
        "leaves the model's gradients in place after the step",
        [("p.grad = None", "pass")],
    ),
    Mutant(
        "MasterWeights",
        "fp32_accepted",
        "wraps parameters of any dtype",
        [("if p.dtype not in (torch.float16, torch.bfloat16):", "if not p.is_floating_point():")],
    ),
    Mutant(
        "DynamicLossScaler",
        "calls_the_builtin",
        "unscales with PyTorch's fused AMP kernel",
        [
            (
                "p.grad.div_(self.scale)                          # exact: the scale is a power of two",
                "torch._amp_foreach_non_finite_check_and_unscale_([p.grad], torch.zeros(1), "
                "torch.tensor(1.0 / self.scale))",
            )
        ],
    ),
]
