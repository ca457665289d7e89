"""The words the grading engine says to a learner, in English and 简体中文: one table keyed by an English id, and
`t(key, **fields)`, which renders an entry in the language that $LLM_ALGO_LANG names (`en`, the default, or `zh`).

Only the engine's own strings live here (outcome names, table headings, the fixed messages of the grader and of a
check cell). A lesson's check messages and hints are written by its author, in English, and stay English.
"""

from __future__ import annotations

import string
import warnings

from .settings import Setting, SettingError, resolve

LANGUAGES = ("en", "zh")


def language_code(text: str) -> str:
    value = text.strip().lower().replace("_", "-").split("-")[0]  # zh, zh-CN, zh_CN.UTF-8
    if value not in LANGUAGES:
        raise ValueError(f"must be one of {', '.join(LANGUAGES)}")
    return value


LANGUAGE = Setting(
    name="lang",
    env="LLM_ALGO_LANG",
    ini="llm_algo_lang",
    default="en",
    parse=language_code,
    help="the language of the grader's own messages: en or zh (a lesson's check messages stay English)",
)

MESSAGES: dict[str, dict[str, str]] = {
    # Outcomes (llm_algo.outcome): the ids are the English labels, which results and summaries also use as keys.
    "passed": {"en": "passed", "zh": "通过"},
    "failed": {"en": "failed", "zh": "未通过"},
    "not attempted": {"en": "not attempted", "zh": "未作答"},
    "needs a GPU": {"en": "needs a GPU", "zh": "需要 GPU"},
    "not run": {"en": "not run", "zh": "未运行"},
    "skipped": {"en": "skipped", "zh": "已跳过"},
    # A check's result as text, and the check cell's table (llm_algo.outcome.render, llm_algo.session_report).
    "check headline": {
        "en": "check {name} ({description}){ran_on}: {outcome}",
        "zh": "检查 {name}（{description}）{ran_on}：{outcome}",
    },
    "check": {"en": "check", "zh": "检查"},
    "result": {"en": "result", "zh": "结果"},
    "ran on": {"en": "ran on", "zh": "运行于"},
    "input": {"en": "input", "zh": "输入"},
    "expected": {"en": "expected", "zh": "期望值"},
    "got": {"en": "got", "zh": "实际值"},
    "mismatch": {"en": "mismatch", "zh": "差异"},
    "likely mistake": {"en": "likely mistake", "zh": "可能的错误"},
    "error": {"en": "error", "zh": "错误"},
    "checks passed": {"en": "{passed}/{total} checks passed", "zh": "{passed}/{total} 项检查通过"},
    "nothing was graded": {"en": "nothing was graded", "zh": "未评分"},
    "graded by the self-check": {"en": "graded by the self-check", "zh": "由自检评分"},
    # The progress table (llm_algo.progress) and what surrounds it.
    "Progress (exercises)": {"en": "Progress (exercises)", "zh": "进度（按练习计）"},
    "Your progress": {
        "en": "Your progress (saved in .llm_algo/results.json)",
        "zh": "你的进度（保存在 .llm_algo/results.json）",
    },
    "part": {"en": "part", "zh": "部分"},
    "lessons": {"en": "lessons", "zh": "课程"},
    "exercises": {"en": "exercises", "zh": "练习"},
    "total": {"en": "total", "zh": "合计"},
    "no results": {
        "en": "No results yet ({path} is missing): run `pytest` to grade your notebooks.",
        "zh": "还没有评分结果（{path} 不存在）：运行 `pytest` 批改你的 notebook。",
    },
    # The grader's fixed messages (llm_algo.grading.run).
    "time limit": {
        "en": "{what} took longer than {seconds} s (an infinite loop?)",
        "zh": "{what} 运行超过 {seconds} 秒（死循环？）",
    },
    "not run after a time-out": {
        "en": "not run: check {name} ran past its time limit (an infinite loop?); fix that one first",
        "zh": "未运行：检查 {name} 超过了时间限制（死循环？）；请先修好它",
    },
    "not run after a gate": {
        "en": "not run: the safety check {name} failed first; fix that one before the others",
        "zh": "未运行：安全检查 {name} 先失败了；请先修好它，再看其他检查",
    },
    "needs CUDA": {"en": "needs a CUDA GPU; this machine has none", "zh": "需要 CUDA GPU；本机没有"},
    "needs capability": {
        "en": "needs a CUDA GPU of compute capability {need}+; this machine's is {have}",
        "zh": "需要计算能力 {need}+ 的 CUDA GPU；本机为 {have}",
    },
    "needs GPU memory": {
        "en": "needs a CUDA GPU with {need} GiB of memory or more; this machine's has {have} GiB",
        "zh": "需要显存至少 {need} GiB 的 CUDA GPU；本机为 {have} GiB",
    },
    "needs compiled Triton": {
        "en": "needs Triton compiled on a GPU of compute capability 8.0+; here kernels run in the interpreter",
        "zh": "需要在计算能力 8.0+ 的 GPU 上编译运行 Triton；本机的算子在解释器中运行",
    },
    "still raises NotImplementedError": {
        "en": "still raises NotImplementedError{where}",
        "zh": "仍然抛出 NotImplementedError{where}",
    },
    "not attempted in pytest": {
        "en": "not attempted: {where} still raises NotImplementedError; fill in the exercise cell",
        "zh": "未作答：{where} 仍然抛出 NotImplementedError；请完成练习单元",
    },
    " at {where}": {"en": " at {where}", "zh": "（位置：{where}）"},
    "the exercise cell raises NotImplementedError": {
        "en": "the exercise cell raises NotImplementedError",
        "zh": "练习单元仍然抛出 NotImplementedError",
    },
    # A check cell that grades nothing (llm_algo.session).
    "run the exercise cell first": {
        "en": "nothing named {names} is defined in this kernel yet: run the setup cell and the exercise cell for "
        "{exercise!r} first (after a kernel restart, run the cells above this one again)",
        "zh": "当前内核中还没有定义 {names}：请先运行 setup 单元和练习 {exercise!r} 的单元"
        "（内核重启后，需要重新运行本单元上方的单元）",
    },
    "defined by the solution cell": {
        "en": "`{name}` is the reference solution's: the solution cell after STOP defined it last (did you use "
        "Run All?). Run your own exercise cell for {exercise!r} again, then this check cell; nothing was graded.",
        "zh": "`{name}` 来自参考答案：STOP 之后的答案单元最后定义了它（是否使用了 Run All？）。"
        "请重新运行你自己的练习 {exercise!r} 单元，再运行本检查单元；本次未评分。",
    },
    # What `use()` took from an earlier lesson, and why (llm_algo.session).
    "using": {
        "en": "{name}: using {source} from {notebook}{saved} — {reason}",
        "zh": "{name}：使用{source}，来自 {notebook}{saved} — {reason}",
    },
    "yours": {"en": "yours", "zh": "你的实现"},
    "reference": {"en": "reference", "zh": "参考实现"},
    " as saved at {time}": {"en": " as saved at {time}", "zh": "（保存于 {time}）"},
    "grading the reference solutions": {"en": "grading the reference solutions", "zh": "正在为参考答案评分"},
    "your notebook does not run": {
        "en": "your notebook does not run ({error})",
        "zh": "你的 notebook 无法运行（{error}）",
    },
    "all checks pass": {
        "en": "all {passed} checks of exercise {exercise!r} pass",
        "zh": "练习 {exercise!r} 的全部 {passed} 项检查通过",
    },
    "yours fails": {
        "en": "yours fails ({passed}/{total} checks pass)",
        "zh": "你的实现未通过（{passed}/{total} 项检查通过）",
    },
    "yours is not attempted": {
        "en": "yours is not attempted ({passed}/{total} checks pass)",
        "zh": "你的实现尚未作答（{passed}/{total} 项检查通过）",
    },
    "yours needs a GPU": {
        "en": "yours needs a GPU to be graded ({passed}/{total} checks pass)",
        "zh": "你的实现需要 GPU 才能评分（{passed}/{total} 项检查通过）",
    },
}


_warned: set[str] = set()  # invalid values already warned about: once each, not on every string


def language() -> str:
    """`en` or `zh`, from $LLM_ALGO_LANG (read on every call, so a notebook can switch); an unknown value warns
    once and reads as English."""
    try:
        return str(resolve(LANGUAGE))
    except SettingError as exc:
        if str(exc) not in _warned:
            _warned.add(str(exc))
            warnings.warn(f"{exc}; the grader's messages stay English", stacklevel=3)
        return str(LANGUAGE.default)


def t(key: str, **fields: object) -> str:
    """The message `key` in the learner's language, its `{fields}` filled in."""
    text = MESSAGES[key][language()]
    return text.format(**fields) if fields else text


def fields_of(text: str) -> set[str]:
    """The `{field}` names a message fills in (a test keeps them the same in both languages)."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}
