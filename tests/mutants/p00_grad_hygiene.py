"""Realistic wrong versions of the p00.grad_hygiene solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "freeze_and_predict",
        "no_eval",
        "runs under inference_mode but forgets model.eval(): dropout stays on",
        [("    model.eval()\n", "")],
        mistake_zh="在 inference_mode 下运行却忘了 model.eval()：dropout 仍然开着",
    ),
    Mutant(
        "freeze_and_predict",
        "no_grad_instead_of_inference_mode",
        "uses torch.no_grad() where inference_mode was asked",
        [("with torch.inference_mode():", "with torch.no_grad():")],
        mistake_zh="题目要求 inference_mode 却用了 torch.no_grad()",
    ),
    Mutant(
        "freeze_and_predict",
        "mode_not_restored_on_error",
        "restores the training flag after the call instead of in a finally block",
        [
            (
                "    try:\n        with torch.inference_mode():\n            return model(*inputs)\n"
                "    finally:\n        model.train(was_training)",
                "    with torch.inference_mode():\n        out = model(*inputs)\n    model.train(was_training)\n"
                "    return out",
            )
        ],
        mistake_zh="在调用之后而不是 finally 块里恢复 training 标志",
    ),
    Mutant(
        "freeze_and_predict",
        "plain_startswith",
        "selects names with name.startswith(prefix): layers.1 also freezes/unfreezes layers.10 and layers.11",
        [('return name == prefix or name.startswith(prefix + ".")', "return name.startswith(prefix)")],
        mistake_zh="用 name.startswith(prefix) 选参数名：layers.1 连带冻结/解冻了 layers.10 和 layers.11",
    ),
    Mutant(
        "freeze_and_predict",
        "never_unfreezes",
        "only ever sets requires_grad=False, so a second call cannot unfreeze",
        [("parameter.requires_grad_(keep)", "parameter.requires_grad_(False) if not keep else None")],
        mistake_zh="只会设置 requires_grad=False，第二次调用无法解冻",
    ),
    Mutant(
        "freeze_and_predict",
        "unknown_prefix_accepted",
        "does not check that each prefix selects something",
        [("    if unused:\n", "    if False:\n")],
        mistake_zh="不检查每个前缀是否真的选中了参数",
    ),
    Mutant(
        "accumulate_and_step",
        "zero_grad_in_loop",
        "clears the gradients inside the loop: only the last micro-batch survives",
        [
            ("    optimizer.zero_grad(set_to_none=True)\n", ""),
            ("        loss = loss_fn(", "        optimizer.zero_grad(set_to_none=True)\n        loss = loss_fn("),
        ],
        mistake_zh="在循环内清零梯度：只剩最后一个微批次的梯度",
    ),
    Mutant(
        "accumulate_and_step",
        "no_division_by_k",
        "backward on the undivided loss: a k times larger step",
        [("(loss / k).backward()", "loss.backward()")],
        mistake_zh="对未除以 k 的损失做 backward：步长大了 k 倍",
    ),
    Mutant(
        "accumulate_and_step",
        "step_in_loop",
        "steps after every micro-batch",
        [("        losses.append(loss.item())", "        optimizer.step()\n        losses.append(loss.item())")],
        mistake_zh="每个微批次之后都调用 step",
    ),
    Mutant(
        "accumulate_and_step",
        "no_zero_grad",
        "never clears the gradients: a previous step's leak in",
        [("    optimizer.zero_grad(set_to_none=True)\n", "")],
        mistake_zh="从不清零梯度：上一步的梯度混了进来",
    ),
    Mutant(
        "accumulate_and_step",
        "logs_tensors",
        "logs the loss tensors (each keeps its graph alive)",
        [("losses.append(loss.item())", "losses.append(loss)")],
        mistake_zh="记录的是损失张量（每个都让自己的计算图继续存活）",
    ),
    Mutant(
        "ema_update",
        "weights_swapped",
        "ema = (1 - decay) * ema + decay * param",
        [("ema_param.lerp_(params[name], 1.0 - decay)", "ema_param.lerp_(params[name], decay)")],
        mistake_zh="写成 ema = (1 - decay) * ema + decay * param",
    ),
    Mutant(
        "ema_update",
        "no_no_grad",
        "updates outside torch.no_grad(): an in-place write into a leaf that requires grad",
        [("    with torch.no_grad():\n", "    if True:\n")],
        mistake_zh="在 torch.no_grad() 之外更新：对需要梯度的叶子张量做原地写入",
    ),
    Mutant(
        "ema_update",
        "buffers_stale",
        "averages the parameters but never copies the buffers",
        [("ema_buffer.copy_(buffers[name])", "pass")],
        mistake_zh="只平均参数，从不复制 buffer",
    ),
    Mutant(
        "ema_update",
        "new_tensors",
        "assigns new tensors through .data instead of updating in place",
        [
            (
                "ema_param.lerp_(params[name], 1.0 - decay)",
                "ema_param.data = decay * ema_param.data + (1.0 - decay) * params[name].data",
            )
        ],
        mistake_zh="通过 .data 赋值新张量，而不是原地更新",
    ),
]
