"""Guard 6 of issue 27: a lesson's "usual mistakes" (English, and 易错点 in 本节要点) are generated from its mutants, and
the lint fails a sentence that says the checks catch something anywhere else (CONTRACT.md, section 5)."""

from __future__ import annotations

import pytest
from tiny_lab import ADD_ONE, CHECKS, MAIN_REPO, PART, Lab

import llm_algo.authoring.lint as lint_module
from llm_algo.authoring.builder import LessonBuilder, mistakes_zh_line, serialize
from llm_algo.authoring.lint import MISTAKES_PENDING, lint

NOTEBOOK = f"{PART}/02_Tiny.ipynb"
MUTANTS_ZH = """
from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant("add_one", "adds_two", "adds two instead of one", [("return x + 1", "return x + 2")],
           mistake_zh="加了 2 而不是 1"),
    Mutant("add_one", "doubles", "multiplies by two instead of adding one", [("return x + 1", "return x * 2")],
           mistake_zh="乘以 2 而不是加 1"),
    Mutant("add_one", "subtracts", "subtracts one", [("return x + 1", "return x - 1")], mistake_zh="减了 1"),
]
"""
HAND_WRITTEN = "## Reading the solution\n\nThe mistakes the checks catch: adding two, doubling."


def tiny_lesson(lab: Lab, *, mutants: str = MUTANTS_ZH, explanation: str = "Add one.", generated: bool = True) -> str:
    """Write the tiny lesson's checks and mutants, then build its notebook (with the generated block if
    `generated`): the block is read from the mutants file, so the notebook is built after it."""
    (lab.root / "tests" / "checks" / "p02_tiny.py").write_text(CHECKS.format(lesson_id="p02.tiny"), encoding="utf-8")
    (lab.root / "tests" / "mutants" / "p02_tiny.py").write_text(mutants, encoding="utf-8")
    lesson = LessonBuilder(
        id="p02.tiny", path=NOTEBOOK, title_en="Tiny", title_zh="小练习", difficulty="easy", device="cpu", minutes=5
    )
    summary = "## 本节要点\n\n- 给每个元素加一。\n" + ("{易错点}" if generated else "- **易错点**：加错常数。")
    lesson.title(intro=summary)
    lesson.setup("import torch")
    lesson.exercise("add_one", ADD_ONE)
    lesson.stop()
    lesson.md(explanation)
    if generated:
        lesson.mistakes()
    text = serialize(lesson.notebook())
    (lab.root / NOTEBOOK).write_text(text, encoding="utf-8")
    return text


def test_the_block_lists_every_mutant_and_the_summary_its_first_ones(lab: Lab) -> None:
    text = tiny_lesson(lab)
    for phrase in ("adds two instead of one — `adds_two`", "multiplies by two", "subtracts one — `subtracts`"):
        assert phrase in text
    assert "](../tests/mutants/p02_tiny.py)" in text  # the link works from the part folder
    # one exercise: the first six mutants of it, in the mutants file's order, in 本节要点
    assert "- **易错点**（每条都是一个变异体，检查必须拒绝它）：加了 2 而不是 1；乘以 2 而不是加 1；减了 1。" in text
    assert lint() == []


def test_the_summary_spreads_its_six_over_the_exercises() -> None:
    from llm_algo.mutation import Mutant

    mutants = [Mutant(ex, f"{ex}{i}", "x", [("a", "b")], mistake_zh=f"{ex}{i}") for ex in "abcd" for i in range(3)]
    assert mistakes_zh_line("p02.x", mutants).endswith("：a0；b0；c0；d0。")  # 6 // 4 = 1 each
    assert mistakes_zh_line("p02.x", mutants[:6]).endswith("：a0；a1；a2；b0；b1；b2。")  # 3 each


def test_a_hand_written_catch_claim_fails_the_lint(lab: Lab) -> None:
    """Without the guard the lint passed this lesson: its prose claims the checks catch two mistakes, unproved."""
    tiny_lesson(lab, explanation=HAND_WRITTEN)
    errors = lint()
    assert any(
        e.startswith(f"{NOTEBOOK}, cell ") and "says the checks catch something ('" in e and "the checks catch:" in e
        for e in errors
    ), errors


@pytest.mark.parametrize(
    "sentence",
    [
        "A missing upcast is caught by the checks.",
        "The gradient check\ncatches a detached output.",
        "On a GPU the checks also catch a stale graph.",
        "**Usual mistakes**, each caught by a check:",
        "忘记除以 N 也能捕获。",
        "这种写法会被检查发现。",
    ],
)
def test_each_real_phrasing_is_a_claim(lab: Lab, sentence: str) -> None:
    tiny_lesson(lab, explanation=sentence)
    assert any("says the checks catch something" in e for e in lint()), sentence


def test_prose_about_checks_that_claims_nothing_passes(lab: Lab) -> None:
    tiny_lesson(lab, explanation="The checks run your function on random inputs. The chosen and rejected answers.")
    assert lint() == []


def test_a_pending_lesson_is_not_held_to_it_yet(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_lesson(lab, explanation=HAND_WRITTEN, generated=False)
    assert lint() != []
    monkeypatch.setattr(lint_module, "MISTAKES_PENDING", frozenset({"p02.tiny"}))
    assert lint() == []


def test_a_mutant_without_mistake_zh_fails_the_build_and_the_lint(lab: Lab) -> None:
    without = MUTANTS_ZH.replace(', mistake_zh="减了 1"', "")
    with pytest.raises(ValueError, match="mutants without mistake_zh.*subtracts"):
        tiny_lesson(lab, mutants=without)
    tiny_lesson(lab)
    (lab.root / "tests" / "mutants" / "p02_tiny.py").write_text(without, encoding="utf-8")
    assert any("cannot be generated from its mutants" in e and "subtracts" in e for e in lint())


def test_a_mutant_edited_without_rebuilding_is_caught(lab: Lab) -> None:
    """What tests/package/test_authoring_sync.py relies on: the notebook a source builds changes with its mutants,
    so a committed notebook older than its mutants file differs from the build; the lint says so too."""
    before = tiny_lesson(lab)
    reworded = MUTANTS_ZH.replace("subtracts one", "subtracts one instead of adding it")
    (lab.root / "tests" / "mutants" / "p02_tiny.py").write_text(reworded, encoding="utf-8")
    errors = lint()
    assert any("usual-mistakes block is not what the mutants file gives now" in e for e in errors), errors
    (lab.root / "tests" / "mutants" / "p02_tiny.py").write_text(
        MUTANTS_ZH.replace("减了 1", "减了一"), encoding="utf-8"
    )
    assert any("lacks the 易错点 line generated from the mutants" in e for e in lint())
    assert tiny_lesson(lab, mutants=reworded) != before


def test_the_pending_list_only_shrinks(real_repo) -> None:
    """Every lesson outside MISTAKES_PENDING generates its mistakes from its mutants, and a lesson that does is no
    longer listed (so the list is exactly the lessons still to migrate)."""
    sources = {
        p.stem.replace("_", ".", 1): p.read_text(encoding="utf-8") for p in (MAIN_REPO / "authoring").glob("p*.py")
    }
    assert sources
    uses = {lesson for lesson, text in sources.items() if "lesson.mistakes()" in text}
    assert not MISTAKES_PENDING - sources.keys(), "MISTAKES_PENDING names lessons that do not exist"
    assert not uses & MISTAKES_PENDING, (
        f"remove from MISTAKES_PENDING (they are migrated): {sorted(uses & MISTAKES_PENDING)}"
    )
    assert not sources.keys() - uses - MISTAKES_PENDING, (
        f"these lessons write their mistakes by hand: {sorted(sources.keys() - uses - MISTAKES_PENDING)}"
    )


def test_every_mutant_has_its_mistake_in_chinese(real_repo) -> None:
    """The migration is complete: every mutant of every lesson carries `mistake_zh` (本节要点 lists them)."""
    from llm_algo.authoring.builder import source_files
    from llm_algo.mutation.mutants import load_mutants

    missing = [
        f"{source.stem}::{m.exercise}::{m.name}"
        for source in source_files()
        for m in load_mutants(source.stem.replace("_", ".", 1))
        if not m.mistake_zh.strip()
    ]
    assert not missing, f"mutants without mistake_zh: {missing}"
