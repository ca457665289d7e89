"""Realistic wrong versions of the p00.debugging solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "first_nonfinite_module",
        "isnan_only",
        "looks for nan only: an fp16 overflow (inf) goes unnoticed",
        [("not torch.isfinite(t).all()", "bool(torch.isnan(t).any())")],
        mistake_zh="只找 nan：fp16 溢出产生的 inf 被漏掉",
    ),
    Mutant(
        "first_nonfinite_module",
        "last_bad_module",
        "keeps the last module with a bad output (always the root) instead of the first",
        [("if bad and not first:\n", "if bad:\n                first.clear()\n")],
        mistake_zh="记下最后一个输出异常的模块（总是根模块），而不是第一个",
    ),
    Mutant(
        "first_nonfinite_module",
        "top_level_only",
        "hooks only the direct children (named_children), too coarse to find the layer",
        [("for name, module in model.named_modules()]", "for name, module in model.named_children()]")],
        mistake_zh="只给直接子模块（named_children）挂 hook，粒度太粗，找不到出错的层",
    ),
    Mutant(
        "first_nonfinite_module",
        "hooks_not_removed",
        "removes the hooks only when the forward succeeds",
        [
            (
                "    try:\n        with torch.no_grad():\n            model(*args, **kwargs)\n    finally:\n",
                "    if True:\n        with torch.no_grad():\n            model(*args, **kwargs)\n    if True:\n",
            )
        ],
        mistake_zh="只有前向成功时才移除 hook",
    ),
    Mutant(
        "first_nonfinite_module",
        "first_tensor_of_tuple",
        "checks only the first tensor of a tuple output",
        [
            (
                "tensors = output if isinstance(output, (tuple, list)) else (output,)",
                "tensors = output[:1] if isinstance(output, (tuple, list)) else (output,)",
            )
        ],
        mistake_zh="输出为 tuple 时只检查第一个张量",
    ),
    Mutant(
        "first_nan_backward",
        "whole_message",
        "returns the whole error message instead of the function's name",
        [("return found.group(1)", "return str(error)")],
        mistake_zh="返回整条错误信息，而不是函数名",
    ),
    Mutant(
        "first_nan_backward",
        "swallows_errors",
        "returns None for every RuntimeError",
        [("if found is None:\n                    raise", "if found is None:\n                    return None")],
        mistake_zh="遇到任何 RuntimeError 都返回 None",
    ),
    Mutant(
        "first_nan_backward",
        "global_anomaly_mode",
        "switches anomaly mode on for the whole process and never off",
        [
            (
                "with torch.autograd.detect_anomaly():",
                "torch.autograd.set_detect_anomaly(True)\n        if True:",
            )
        ],
        mistake_zh="为整个进程打开异常检测模式（anomaly mode）且从不关闭",
    ),
    Mutant(
        "first_nan_backward",
        "no_anomaly_mode",
        "runs the backward without anomaly mode, so the nan is never reported",
        [("with torch.autograd.detect_anomaly():", "if True:")],
        mistake_zh="不开异常检测模式就做反向，nan 永远不会被报告",
    ),
]
