"""Realistic wrong versions of the p02.adamw solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "adamw_step",
        "no_bias_correction",
        "divides by sqrt(v) + eps with the raw moments (no bias correction)",
        [
            ("bias_correction1 = 1 - beta1**step", "bias_correction1 = 1"),
            ("bias_correction2 = 1 - beta2**step", "bias_correction2 = 1"),
        ],
        mistake_zh="用未做偏差修正的原始矩估计除以 sqrt(v) + eps",
    ),
    Mutant(
        "adamw_step",
        "eps_inside_sqrt",
        "puts eps under the square root: sqrt(v_hat + eps)",
        [
            (
                "denom = second_moment.sqrt() / math.sqrt(bias_correction2) + eps",
                "denom = (second_moment / bias_correction2 + eps).sqrt()",
            )
        ],
        mistake_zh="把 eps 放进根号里：sqrt(v_hat + eps)",
    ),
    Mutant(
        "adamw_step",
        "eps_before_bias_correction",
        "adds eps to sqrt(v) before dividing by sqrt(1 - beta2^t)",
        [
            (
                "denom = second_moment.sqrt() / math.sqrt(bias_correction2) + eps",
                "denom = (second_moment.sqrt() + eps) / math.sqrt(bias_correction2)",
            )
        ],
        mistake_zh="先给 sqrt(v) 加 eps，再除以 sqrt(1 - beta2^t)",
    ),
    Mutant(
        "adamw_step",
        "adam_with_l2",
        "adds weight_decay * param to the gradient (Adam + L2) instead of decoupled decay",
        [
            (
                "param.mul_(1 - lr * weight_decay)",
                "grad = grad + weight_decay * param",
            )
        ],
        mistake_zh="把 weight_decay * param 加到梯度上（Adam + L2），而不是解耦的权重衰减",
    ),
    Mutant(
        "adamw_step",
        "decay_without_lr",
        "shrinks by (1 - weight_decay), forgetting that torch scales the decay by the learning rate",
        [("param.mul_(1 - lr * weight_decay)", "param.mul_(1 - weight_decay)")],
        mistake_zh="按 (1 - weight_decay) 收缩，忘了 torch 会用学习率缩放衰减",
    ),
    Mutant(
        "adamw_step",
        "decay_after_update",
        "applies the decay after the Adam update instead of to the old weights",
        [
            ("param.mul_(1 - lr * weight_decay)", "pass"),
            (
                "param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)",
                "param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)\n    param.mul_(1 - lr * weight_decay)",
            ),
        ],
        mistake_zh="在 Adam 更新之后才做衰减，而不是作用在旧权重上",
    ),
    Mutant(
        "adamw_step",
        "no_sqrt_on_bias_correction2",
        "divides sqrt(v) by 1 - beta2^t instead of by its square root",
        [("second_moment.sqrt() / math.sqrt(bias_correction2)", "second_moment.sqrt() / bias_correction2")],
        mistake_zh="sqrt(v) 除以 1 - beta2^t，而不是它的平方根",
    ),
    Mutant(
        "adamw_step",
        "amsgrad_max_unused",
        "updates the AMSGrad maximum but still divides by sqrt(v)",
        [("second_moment = max_exp_avg_sq", "pass")],
        mistake_zh="更新了 AMSGrad 的最大值，却仍然除以 sqrt(v)",
    ),
    Mutant(
        "adamw_optimizer",
        "decays_parameters_without_grad",
        "applies weight decay to every parameter, also those with no gradient this step",
        [
            (
                "continue  # not used in this forward",
                'p.mul_(1 - group["lr"] * group["weight_decay"])\n                    continue  #',
            )
        ],
        mistake_zh="给每个参数都做权重衰减，包括这一步没有梯度的参数",
    ),
    Mutant(
        "adamw_optimizer",
        "defaults_not_group",
        "reads weight_decay and lr from self.defaults instead of the parameter's group",
        [
            ('lr=group["lr"]', 'lr=self.defaults["lr"]'),
            ('weight_decay=group["weight_decay"]', 'weight_decay=self.defaults["weight_decay"]'),
        ],
        mistake_zh="从 self.defaults 而不是参数所在的组读取 weight_decay 和 lr",
    ),
    Mutant(
        "adamw_optimizer",
        "step_as_python_int",
        "keeps state['step'] as a Python int (not torch's float32 scalar tensor)",
        [
            ('state["step"] = torch.tensor(0.0)', 'state["step"] = 0'),
            ('int(state["step"].item())', 'int(state["step"])'),
        ],
        mistake_zh="把 state['step'] 存成 Python int（而不是 torch 的 float32 标量张量）",
    ),
    Mutant(
        "adamw_optimizer",
        "amsgrad_state_not_passed",
        "creates the AMSGrad state but never passes it to the update",
        [('max_exp_avg_sq=state.get("max_exp_avg_sq")', "max_exp_avg_sq=None")],
        mistake_zh="创建了 AMSGrad 状态，却从没把它传给更新函数",
    ),
    Mutant(
        "weight_decay_param_groups",
        "name_rule_bias_only",
        "exempts parameters named '*bias' only, so LayerNorm/RMSNorm gains and scalar gates are decayed",
        [("(decay if p.dim() >= 2 else no_decay)", '(decay if not _name.endswith("bias") else no_decay)')],
        mistake_zh="只豁免名为 '*bias' 的参数，LayerNorm/RMSNorm 的增益和标量门控也被衰减了",
    ),
    Mutant(
        "weight_decay_param_groups",
        "dim_greater_than_two",
        "decays only parameters with more than 2 dimensions: no linear layer or embedding is decayed",
        [("p.dim() >= 2", "p.dim() > 2")],
        mistake_zh="只衰减维数大于 2 的参数：线性层和嵌入都没有被衰减",
    ),
    Mutant(
        "weight_decay_param_groups",
        "frozen_included",
        "puts frozen (requires_grad=False) parameters into the groups",
        [("if not p.requires_grad:", "if False:")],
        mistake_zh="把冻结的（requires_grad=False）参数也放进了分组",
    ),
    Mutant(
        "adamw_step",
        "amsgrad_max_of_corrected",
        "keeps the AMSGrad maximum of the bias-corrected v_hat instead of the raw v (torch maxes the raw v)",
        [
            (
                "torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)",
                "torch.maximum(max_exp_avg_sq, exp_avg_sq / bias_correction2, out=max_exp_avg_sq)",
            ),
            ("second_moment = max_exp_avg_sq", "second_moment = max_exp_avg_sq * bias_correction2"),
        ],
        mistake_zh="AMSGrad 取偏差修正后 v_hat 的最大值，而不是原始 v 的（torch 对原始 v 取最大）",
    ),
    Mutant(
        "adamw_optimizer",
        "subclasses_the_builtin",
        "inherits from torch.optim.AdamW, whose machinery then runs instead of the learner's",
        [
            ("class AdamW(torch.optim.Optimizer):", "class AdamW(torch.optim.AdamW):"),
            (
                "super().__init__(params, defaults)",
                "super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)",
            ),
        ],
        mistake_zh="继承 torch.optim.AdamW，运行的是它的机制而不是你写的",
    ),
    Mutant(
        "adamw_step",
        "delegates_to_torch",
        "calls PyTorch's functional AdamW for the update",
        [
            (
                "param.mul_(1 - lr * weight_decay)                              # decoupled: never enters m or v",
                "from torch.optim.adam import adam\n"
                "    amsgrad = max_exp_avg_sq is not None\n"
                "    adam([param], [grad], [exp_avg], [exp_avg_sq], [max_exp_avg_sq] if amsgrad else [],\n"
                "         [torch.tensor(float(step - 1))], foreach=False, amsgrad=amsgrad, beta1=beta1, beta2=beta2,\n"
                "         lr=lr, weight_decay=weight_decay, eps=eps, maximize=False, decoupled_weight_decay=True)\n"
                "    return",
            )
        ],
        mistake_zh="调用 PyTorch 的函数式 AdamW 做更新",
    ),
    Mutant(
        "adamw_step",
        "zeroes_grad",
        "zeroes the gradient it was handed after the update (zero_grad's job, and the caller's tensor)",
        [
            (
                "param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)",
                "param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)\n    grad.zero_()",
            )
        ],
        mistake_zh="更新后把传入的梯度清零（这是 zero_grad 的职责，而且梯度张量属于调用者）",
    ),
    Mutant(
        "adamw_optimizer",
        "default_eps",
        "passes the default eps (1e-8) to adamw_step instead of the group's",
        [('eps=group["eps"],', "eps=1e-8,")],
        mistake_zh="向 adamw_step 传入默认的 eps（1e-8），而不是参数组里的 eps",
    ),
]
