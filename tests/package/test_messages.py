"""The engine's own words in two languages (llm_algo.messages): every message in both, Chinese under
LLM_ALGO_LANG=zh, and English exactly as it was."""

from __future__ import annotations

import ast
import subprocess
import sys
import time

import pytest
from test_layers import PACKAGE
from tiny_lab import Lab

from llm_algo.messages import LANGUAGE, LANGUAGES, MESSAGES, fields_of, language, t
from llm_algo.outcome import CheckResult, Outcome, render, symbol
from llm_algo.progress import render_table
from llm_algo.session_report import CheckReport

FAILED = CheckResult(
    key="rms_norm::random_shapes",
    outcome=Outcome.FAILED,
    description="random shapes",
    summary="values differ",
    input="x: (2, 3)",
    expected="1.0",
    got="2.0",
    hint="the variance",
    path="cpu",
)
PASSED = CheckResult(key="rms_norm::hand_checked", outcome=Outcome.PASSED, description="hand-checked", path="cpu")
SUMMARY = {"02_PyTorch_Algorithms": {"lessons": 1, "exercises": 2, "passed": 1, "failed": 1, "not attempted": 0}}
SUMMARY["02_PyTorch_Algorithms"]["needs a GPU"] = 0


@pytest.fixture
def english(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANGUAGE.env, raising=False)


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANGUAGE.env, "zh")


def test_every_message_has_both_languages_with_the_same_fields() -> None:
    for key, texts in MESSAGES.items():
        assert set(texts) == set(LANGUAGES), key
        assert all(text.strip() for text in texts.values()), key
        assert fields_of(texts["zh"]) == fields_of(texts["en"]), key


def test_every_message_the_package_asks_for_is_in_the_table() -> None:
    asked = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # t(column) over a list of ids is covered by the rendering tests below
            call = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "t" and node.args
            if call and isinstance(node.args[0], ast.Constant):
                asked.add(node.args[0].value)
    assert asked <= set(MESSAGES), sorted(asked - set(MESSAGES))
    assert {o.label for o in Outcome} <= set(MESSAGES)
    from llm_algo.session import WHY_NOT_YOURS

    assert set(WHY_NOT_YOURS.values()) <= set(MESSAGES)


def test_english_is_what_it_always_was(english: None) -> None:
    assert language() == "en"
    assert [symbol(o) for o in Outcome] == [
        "✅ passed",
        "❌ failed",
        "⏳ not attempted",
        "🖥 needs a GPU",
        "⏸ not run",
        "⏭ skipped",
    ]
    assert render(FAILED) == (
        "check random_shapes (random shapes) [cpu]: failed\n"
        "  values differ\n"
        "  input:          x: (2, 3)\n"
        "  expected:       1.0\n"
        "  got:            2.0\n"
        "  likely mistake: the variance"
    )
    report = CheckReport("p02.rmsnorm", "rms_norm", (PASSED, FAILED))
    assert report.headline() == "rms_norm: ❌ failed (1/2 checks passed)"
    assert CheckReport("p02.rmsnorm", "rms_norm", (), not_graded=True).headline() == (
        "rms_norm: ⏸ not run (nothing was graded)"
    )
    assert CheckReport("p02.rmsnorm", "rms_norm", (), deferred=True).headline() == (
        "rms_norm: ⏭ graded by the self-check"
    )
    assert "<th>check</th><th>result</th><th>ran on</th><th>input</th><th>expected</th><th>got</th>" in (
        report._repr_html_()
    )
    assert "<th>mismatch</th><th>likely mistake</th>" in report._repr_html_()
    table = render_table(SUMMARY)
    assert "Progress (exercises)" in table and "not attempted" in table and "total" in table


def test_chinese_under_the_language_setting(chinese: None) -> None:
    assert language() == "zh"
    assert symbol(Outcome.PASSED) == "✅ 通过"
    assert symbol(Outcome.NOT_ATTEMPTED) == "⏳ 未作答"
    headline, summary, given = render(FAILED).splitlines()[:3]
    assert headline == "检查 random_shapes（random shapes） [cpu]：未通过"
    assert summary == "  values differ"  # the check's own message: the lesson's words stay English
    assert given.startswith("  输入:") and given.endswith("x: (2, 3)")
    report = CheckReport("p02.rmsnorm", "rms_norm", (PASSED, FAILED))
    assert report.headline() == "rms_norm: ❌ 未通过 (1/2 项检查通过)"
    assert "<th>可能的错误</th>" in report._repr_html_()
    table = render_table(SUMMARY)
    for heading in ("进度（按练习计）", "部分", "课程", "练习", "通过", "未作答", "需要 GPU", "合计"):
        assert heading in table


def test_the_graders_fixed_messages_follow_the_language(chinese: None) -> None:
    from llm_algo.grading.run import ran_past_time_limit, time_limit, timed_out

    with (
        pytest.raises(TimeoutError, match=r"^check 'loop' 运行超过 0.2 秒（死循环？）$"),
        time_limit(0.2, "check 'loop'"),
    ):
        while True:
            time.sleep(0.01)
    assert t("not run after a gate", name="'bounds'") == "未运行：安全检查 'bounds' 先失败了；请先修好它，再看其他检查"
    assert ran_past_time_limit("raised TimeoutError: " + timed_out("check 'loop'", 60))  # `mutate` still tells


def test_an_unknown_language_warns_and_stays_english(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANGUAGE.env, "fr")
    with pytest.warns(UserWarning, match=r"\$LLM_ALGO_LANG='fr' is not valid: must be one of en, zh"):
        assert t("passed") == "passed"
    monkeypatch.setenv(LANGUAGE.env, "zh_CN.UTF-8")
    assert t("passed") == "通过"


def test_pytest_speaks_chinese_end_to_end(lab: Lab) -> None:
    """The setting reaches the grading processes: a learner's `pytest` run, in Chinese."""
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb")  # untouched
    lab.add_lesson("p02.wrong", "03_Wrong.ipynb", exercise_source="def add_one(x):\n    return x - 1\n")

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rs"],
        cwd=lab.root,
        env=lab.env() | {LANGUAGE.env: "zh"},
        capture_output=True,
        text=True,
        timeout=240,
    )

    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert '未作答：02_Tiny.ipynb, exercise "add_one" 仍然抛出 NotImplementedError' in output
    assert "检查 adds_one_to_two" in output and "：未通过" in output  # the failure's headline
    assert "add_one(2) is wrong" in output  # the lesson's own message stays English
    for heading in ("你的进度（保存在 .llm_algo/results.json）", "部分", "未作答", "合计"):
        assert heading in output
