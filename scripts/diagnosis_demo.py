"""One learner mistake per part, diagnosed by name: each is written by hand (not a mutant's text), run through the
notebook's `check()` as a learner's cell would be, and the report's diagnosis line printed.

    python scripts/diagnosis_demo.py
"""

from __future__ import annotations

import io
import linecache
from contextlib import redirect_stdout

from llm_algo.grading.cache import find_lesson
from llm_algo.grading.execute import load_namespace
from llm_algo.session import setup_lesson

MISTAKES = [  # (lesson, exercise, what the learner got wrong, the learner's cell)
    (
        "p00.activations",
        "gelu",
        "the tanh form without the sqrt(2/pi) factor",
        """
def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError("bad approximate")
    y = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if approximate == "tanh":
        return (0.5 * y * (1 + torch.tanh(y + 0.044715 * y ** 3))).to(x.dtype)
    return (0.5 * y * (1 + torch.erf(y / 2 ** 0.5))).to(x.dtype)
""",
    ),
    (
        "p01.kv_cache_math",
        "kv_bytes_per_token",
        "counts only the keys",
        """
def kv_bytes_per_token(config, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    if config.model_type == "deepseek_v3":
        return config.num_hidden_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * size
    if config.model_type not in ("llama", "qwen3", "mixtral"):
        raise ValueError(config.model_type)
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * config.num_key_value_heads * d * size
""",
    ),
    (
        "p02.rmsnorm",
        "rms_norm",
        "divides by the standard deviation (mean subtracted) instead of the root mean square",
        """
def rms_norm(x, weight, eps=1e-6):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    var = ((xf - xf.mean(dim=-1, keepdim=True)) ** 2).mean(dim=-1, keepdim=True)
    return (xf / torch.sqrt(var + eps)).to(x.dtype) * weight
""",
    ),
    (
        "p03.softmax",
        "softmax",
        "pads the masked lanes with 0 (written as a separate cast, unlike the mutant)",
        (
            'x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)',
            "x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0)\n    x = x.to(tl.float32)",
        ),
    ),
]


def diagnose(lesson_id: str, exercise: str, source) -> list[str]:
    lesson = find_lesson(lesson_id)
    namespace = load_namespace(lesson, "solution").namespace
    if isinstance(source, tuple):  # a change to the reference solution's cell, written by hand
        solution = lesson.solution_cell(exercise).source
        old, new = source
        indent = next(line for line in solution.splitlines() if old in line).split(old)[0]
        source = solution.replace(old, new.replace("\n    ", "\n" + indent))
        assert source != solution
    filename = f"<learner cell {lesson_id}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    out = io.StringIO()
    with redirect_stdout(out):
        setup_lesson(lesson_id, namespace).check(exercise)
    lines = out.getvalue().splitlines()
    return [lines[1]] + [line.strip() for line in lines if "diagnosis:" in line or "fix that first" in line][:2]


if __name__ == "__main__":
    for lesson_id, exercise, mistake, source in MISTAKES:
        print(f"{lesson_id} — the learner's mistake: {mistake}")
        for line in diagnose(lesson_id, exercise, source):
            print(f"    {line}")
