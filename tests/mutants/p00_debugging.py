"""Realistic wrong versions of the p00.debugging solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "first_nonfinite_module",
        "isnan_only",
        "looks for nan only: an fp16 overflow (inf) goes unnoticed",
        [("not torch.isfinite(t).all()", "bool(torch.isnan(t).any())")],
    ),
    Mutant(
        "first_nonfinite_module",
        "last_bad_module",
        "keeps the last module with a bad output (always the root) instead of the first",
        [("if bad and not first:\n", "if bad:\n                first.clear()\n")],
    ),
    Mutant(
        "first_nonfinite_module",
        "top_level_only",
        "hooks only the direct children (named_children), too coarse to find the layer",
        [("for name, module in model.named_modules()]", "for name, module in model.named_children()]")],
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
    ),
    Mutant(
        "first_nan_backward",
        "whole_message",
        "returns the whole error message instead of the function's name",
        [("return found.group(1)", "return str(error)")],
    ),
    Mutant(
        "first_nan_backward",
        "swallows_errors",
        "returns None for every RuntimeError",
        [("if found is None:\n                    raise", "if found is None:\n                    return None")],
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
    ),
    Mutant(
        "first_nan_backward",
        "no_anomaly_mode",
        "runs the backward without anomaly mode, so the nan is never reported",
        [("with torch.autograd.detect_anomaly():", "if True:")],
    ),
]
