"""Realistic wrong versions of the p02.activation_checkpointing solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "checkpoint",
        "forward_records_graph",
        "runs the function with grad enabled in forward, so every activation is saved anyway",
        [
            (
                "with torch.no_grad():\n            return function(*inputs)",
                "with torch.enable_grad():\n            return function(*inputs).detach()",
            )
        ],
        mistake_zh="forward 中在开启梯度的情况下运行函数，每个激活照样被保存",
    ),
    Mutant(
        "checkpoint",
        "rng_not_restored",
        "re-runs the function without restoring the RNG state, so dropout draws different masks",
        [("torch.set_rng_state(ctx.rng_state)", "pass")],
        mistake_zh="重新运行函数前不恢复随机数状态，dropout 抽到不同的掩码",
    ),
    Mutant(
        "checkpoint",
        "rng_not_forked",
        "restores the saved RNG state for the re-run but never puts the current one back",
        [("with torch.random.fork_rng(devices=[]):                     # leave the global RNG untouched", "if True:")],
        mistake_zh="重算时恢复了保存的随机数状态，却从不把当前状态放回去",
    ),
    Mutant(
        "checkpoint",
        "ignores_grad_output",
        "backpropagates output.sum() through the re-run instead of the incoming gradient",
        [("torch.autograd.backward(output, grad_output)", "output.sum().backward()")],
        mistake_zh="对重算结果的 output.sum() 做反向，而不是用传入的梯度",
    ),
    Mutant(
        "checkpoint",
        "no_refusal",
        "does not refuse inputs that do not require grad (the parameters silently get no gradient)",
        [("if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):", "if False:")],
        mistake_zh="不拒绝不需要梯度的输入（参数默默得不到梯度）",
    ),
    Mutant(
        "checkpoint",
        "no_gradient_slot_for_function",
        "returns one gradient per tensor input only, forgetting the None for the `function` argument of forward",
        [
            (
                "return (None, *(x.grad if x.requires_grad else None for x in inputs))",
                "return tuple(x.grad if x.requires_grad else None for x in inputs)",
            )
        ],
        mistake_zh="只为每个张量输入返回一个梯度，忘了 forward 的 `function` 参数对应的 None",
    ),
    Mutant(
        "checkpointed_stack",
        "only_first_block",
        "checkpoints only the first block and runs the rest normally",
        [('if policy == "full":', 'if policy == "full" and block is blocks[0]:')],
        mistake_zh="只对第一个块做检查点，其余照常运行",
    ),
    Mutant(
        "checkpointed_stack",
        "full_cuts_the_graph",
        "feeds each checkpointed block a fresh leaf (as the backward does), cutting the gradient to earlier blocks",
        [("x = checkpoint(block, x)", "x = checkpoint(block, x.detach().requires_grad_())")],
        mistake_zh="给每个做检查点的块喂一个新的叶子张量（像反向那样），切断了通往前面各块的梯度",
    ),
    Mutant(
        "checkpointed_stack",
        "attention_not_checkpointed",
        "passes the block's own attention core without checkpointing it",
        [("lambda q, k, v, core=core: checkpoint(core, q, k, v)", "core")],
        mistake_zh="块自己的注意力核心直接传过去，没有做检查点",
    ),
    Mutant(
        "checkpointed_stack",
        "unknown_policy_is_none",
        "treats any unknown policy as 'none'",
        [('if policy not in ("none", "full", "attention"):', "if False:")],
        mistake_zh="把任何未知的策略当作 'none'",
    ),
    Mutant(
        "checkpoint",
        "calls_the_builtin",
        "delegates to torch.utils.checkpoint",
        [
            (
                "return CheckpointFunction.apply(function, *inputs)",
                "return torch.utils.checkpoint.checkpoint(function, *inputs, use_reentrant=False)",
            )
        ],
        mistake_zh="交给 torch.utils.checkpoint 去做",
    ),
]
