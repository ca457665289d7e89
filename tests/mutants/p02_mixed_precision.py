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
        mistake_zh="遇到 inf/NaN 会降低缩放，却仍然用坏掉的梯度调用 optimizer.step()",
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
        mistake_zh="溢出后不重置增长计数器，缩放过早地涨回去",
    ),
    Mutant(
        "DynamicLossScaler",
        "unscale_by_multiplying",
        "multiplies the gradients by the scale instead of dividing",
        [("p.grad.div_(self.scale)", "p.grad.mul_(self.scale)")],
        mistake_zh="梯度乘以缩放而不是除以缩放",
    ),
    Mutant(
        "DynamicLossScaler",
        "no_unscale",
        "checks the scaled gradients for inf but never unscales them (steps are `scale` times too large)",
        [("p.grad.div_(self.scale)                          # exact: the scale is a power of two", "pass")],
        mistake_zh="检查了缩放后的梯度是否有 inf，却从不反缩放（步长大了 scale 倍）",
    ),
    Mutant(
        "DynamicLossScaler",
        "loss_scaled_in_fp16",
        "multiplies a 16-bit loss by the scale in 16 bits (overflows to inf for any loss above 1 at 2**16)",
        [("return loss.to(torch.promote_types(loss.dtype, torch.float32)) * self.scale", "return loss * self.scale")],
        mistake_zh="16 位的损失在 16 位下乘以缩放（缩放为 2**16 时任何大于 1 的损失都溢出为 inf）",
    ),
    Mutant(
        "DynamicLossScaler",
        "grows_every_step",
        "grows the scale after every clean step",
        [("if self.growth_tracker == self.growth_interval:", "if True:")],
        mistake_zh="每个干净的步之后都增大缩放",
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
        mistake_zh="增大缩放后不重置计数器，缩放只涨一次就再也不涨",
    ),
    Mutant(
        "DynamicLossScaler",
        "nan_not_detected",
        "only looks for inf, so a NaN gradient goes through",
        [("not bool(torch.isfinite(p.grad).all())", "bool(torch.isinf(p.grad).any())")],
        mistake_zh="只找 inf，NaN 梯度直接通过",
    ),
    Mutant(
        "MasterWeights",
        "master_not_fp32",
        "keeps the 'master' in the model's 16-bit dtype (a detached copy only)",
        [("nn.Parameter(p.detach().to(torch.float32))", "nn.Parameter(p.detach().clone())")],
        mistake_zh="“主权重”保持模型的 16 位数据类型（只是一份 detach 的副本）",
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
        mistake_zh="每一步都从舍入后的模型权重重新导出主权重，小的更新全丢了",
    ),
    Mutant(
        "MasterWeights",
        "no_copy_back",
        "never copies the updated masters into the model",
        [("p.copy_(master)                                      # round to nearest into bf16/fp16", "pass")],
        mistake_zh="从不把更新后的主权重复制回模型",
    ),
    Mutant(
        "MasterWeights",
        "grads_not_cleared",
        "leaves the model's gradients in place after the step",
        [("p.grad = None", "pass")],
        mistake_zh="step 之后保留模型的梯度",
    ),
    Mutant(
        "MasterWeights",
        "fp32_accepted",
        "wraps parameters of any dtype",
        [("if p.dtype not in (torch.float16, torch.bfloat16):", "if not p.is_floating_point():")],
        mistake_zh="任何数据类型的参数都包装",
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
        mistake_zh="用 PyTorch 融合的 AMP 内核做反缩放",
    ),
]
