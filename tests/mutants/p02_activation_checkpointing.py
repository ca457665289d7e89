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
    ),
    Mutant(
        "checkpoint",
        "rng_not_restored",
        "re-runs the function without restoring the RNG state, so dropout draws different masks",
        [("torch.set_rng_state(ctx.rng_state)", "pass")],
    ),
    Mutant(
        "checkpoint",
        "rng_not_forked",
        "restores the saved RNG state for the re-run but never puts the current one back",
        [("with torch.random.fork_rng(devices=[]):                     # leave the global RNG untouched", "if True:")],
    ),
    Mutant(
        "checkpoint",
        "ignores_grad_output",
        "backpropagates output.sum() through the re-run instead of the incoming gradient",
        [("torch.autograd.backward(output, grad_output)", "output.sum().backward()")],
    ),
    Mutant(
        "checkpoint",
        "no_refusal",
        "does not refuse inputs that do not require grad (the parameters silently get no gradient)",
        [("if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):", "if False:")],
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
    ),
    Mutant(
        "checkpointed_stack",
        "only_first_block",
        "checkpoints only the first block and runs the rest normally",
        [('if policy == "full":', 'if policy == "full" and block is blocks[0]:')],
    ),
    Mutant(
        "checkpointed_stack",
        "full_cuts_the_graph",
        "feeds each checkpointed block a fresh leaf (as the backward does), cutting the gradient to earlier blocks",
        [("x = checkpoint(block, x)", "x = checkpoint(block, x.detach().requires_grad_())")],
    ),
    Mutant(
        "checkpointed_stack",
        "attention_not_checkpointed",
        "passes the block's own attention core without checkpointing it",
        [("lambda q, k, v, core=core: checkpoint(core, q, k, v)", "core")],
    ),
    Mutant(
        "checkpointed_stack",
        "unknown_policy_is_none",
        "treats any unknown policy as 'none'",
        [('if policy not in ("none", "full", "attention"):', "if False:")],
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
    ),
]
