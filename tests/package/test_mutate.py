"""Automatic mutants (`llm_algo.mutation.generate`) and `python -m llm_algo mutate`: each operator on a small source,
one located edit per mutant, stable ids, and a tiny lesson graded end to end with its equivalents file."""

from __future__ import annotations

import ast
import json
import os
import textwrap

import pytest
from tiny_lab import Lab

from llm_algo.mutation.generate import OPERATORS, given_lines, mutate_source
from llm_algo.mutation.mutants import StaleMutant


def mutated(operator: str, source: str) -> list[str]:
    """The mutated sources one operator makes of `source`."""
    source = textwrap.dedent(source).strip() + "\n"
    return [m.apply(source).strip() for m in mutate_source("ex", source, operators={operator: OPERATORS[operator]})]


OPERATOR_CASES = [
    ("swap_arithmetic", "y = a + b * c", ["y = a - b * c", "y = a + b / c"]),
    ("swap_arithmetic", "acc += x", ["acc -= x"]),
    ("swap_comparison", "mask = cols < n", ["mask = cols <= n"]),
    ("swap_comparison", "ok = a >= b and c == d", ["ok = a > b and c == d", "ok = a >= b and c != d"]),
    ("change_constant", "y = x[0] + 2", ["y = x[1] + 2", "y = x[0] + 3", "y = x[0] + 1"]),
    ("change_constant", "y = x + 1e-6", ["y = x + 0.0"]),
    ("change_constant", "y = 0.5 * x", ["y = 1.0 * x"]),
    (
        "wrong_dim",
        "s = x.sum(dim=-1, keepdim=True)",
        ["s = x.sum(dim=0, keepdim=True)", "s = x.sum(dim=-2, keepdim=True)"],
    ),
    ("wrong_dim", "s = x.sum(dim=-1, keepdim=True)", ["s = x.sum(dim=-1, keepdim=False)"]),
    ("wrong_dim", "m = tl.max(x, axis=0)", ["m = tl.max(x, axis=1)"]),
    ("drop_cast", "y = x.float().pow(2)", ["y = x.pow(2)"]),
    ("drop_cast", "y = (a + b).to(x.dtype)", ["y = (a + b)"]),
    ("drop_cast", "v = tl.load(p).to(tl.float32)", ["v = tl.load(p)"]),
    ("drop_cast", "t = torch.promote_types(x.dtype, torch.float32)", ["t = x.dtype"]),
    ("drop_mask", "v = tl.load(p + offs, mask=offs < n, other=0.0)", ["v = tl.load(p + offs, other=0.0)"]),
    ("drop_mask", "v = tl.load(p + offs, mask=offs < n, other=0.0)", ["v = tl.load(p + offs, mask=offs < n)"]),
    (
        "drop_mask",
        "tl.store(p, v, mask=(r < m) & (c < n))",
        ["tl.store(p, v, mask=(r < m))", "tl.store(p, v, mask=(c < n))"],
    ),
    ("drop_mask", "y = torch.where(c, a, b)", ["y = a", "y = b"]),
    ("drop_mask", "s = s.masked_fill(mask, -inf)", ["s = s"]),
    ("swap_arguments", "kernel[grid](out, x, n)", ["kernel[grid](x, out, n)"]),
    ("drop_contiguous", "y = x.transpose(1, 2).contiguous()", ["y = x.transpose(1, 2)"]),
    ("swap_reduction", "m = x.max(dim=1).values", ["m = x.min(dim=1).values"]),
    ("swap_reduction", "l = loss.sum() + tl.max(v, axis=0)", ["l = loss.mean() + tl.max(v, axis=0)"]),
    ("drop_transpose", "s = q @ k.T", ["s = q @ k"]),
    ("drop_transpose", "s = q @ k.transpose(-2, -1)", ["s = q @ k"]),
    ("drop_transpose", "s = tl.dot(q, tl.trans(k))", ["s = tl.dot(q, k)"]),
    ("drop_operand", "y = (x - m) * scale", ["y = (x - m)", "y = scale", "y = (x) * scale"]),
]


@pytest.mark.parametrize(("operator", "source", "expected"), OPERATOR_CASES)
def test_each_operator_makes_the_mistake_it_names(operator: str, source: str, expected: list[str]) -> None:
    made = mutated(operator, source)
    for want in expected:
        assert want in made, (operator, source, made)


def test_every_operator_has_a_case() -> None:
    assert set(OPERATORS) == {case[0] for case in OPERATOR_CASES} | {"delete_statement"}


def test_delete_statement_keeps_line_numbers() -> None:
    source = """
    def f(x, out):
        if x.dim() != 2:
            raise ValueError(
                "two dims"
            )
        for i in range(3):
            m_new = max(m, x[i])
            m = m_new
        total += 1
        out.mul_(2)
        return out
    """
    made = mutated("delete_statement", source)
    assert any("if x.dim() != 2:\n        pass\n\n\n    for" in m for m in made), made
    assert any("        pass\n        m = m_new" in m for m in made)  # the loop's state update forgotten
    assert any("m_new = max(m, x[i])\n        pass" in m for m in made)
    assert any("    pass\n    out.mul_(2)" in m for m in made)
    assert any("total += 1\n    pass\n    return out" in m for m in made)
    assert all(m.count("\n") == textwrap.dedent(source).strip().count("\n") for m in made)


SOURCE = '''
#@title Reference solution: softmax
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"])
@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n, BLOCK: tl.constexpr = 128):
    """One row per program; padded lanes read -inf."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n, other=float("-inf")).to(tl.float32)  # 'é' counts once
    x = x - tl.max(x, axis=0)
    y = tl.exp(x) / tl.sum(tl.exp(x), axis=0)
    tl.store(out_ptr + row * stride + cols, y, mask=cols < n)


def softmax(x, eps=1e-6):
    if x.dim() != 2:
        raise ValueError(f"2-D only, got {x.dim() + 1 - 1} dims")
    out = torch.empty_like(x)
    num_warps = 4 if x.shape[1] <= 2048 else 8
    block, num_stages = 512 + 1, 3
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), x.shape[1], num_warps=num_warps)
    return out.contiguous()
'''.lstrip()


def test_mutants_parse_and_differ_from_the_solution_in_exactly_one_place() -> None:
    mutants = mutate_source("softmax", SOURCE)
    assert len(mutants) > 40
    assert {m.operator for m in mutants} >= {"swap_arithmetic", "drop_mask", "drop_cast", "wrong_dim", "drop_operand"}
    for mutant in mutants:
        changed = mutant.apply(SOURCE)
        ast.parse(changed)
        assert changed != SOURCE
        assert changed.count("\n") == SOURCE.count("\n"), mutant.id  # line numbers stay
        prefix = len(os.path.commonprefix([SOURCE, changed]))
        suffix = len(os.path.commonprefix([SOURCE[::-1], changed[::-1]]))
        assert mutant.start <= prefix and len(SOURCE) - suffix <= mutant.end, mutant.id  # all changes in one span
        assert mutant.line_before != mutant.line_after
        assert mutant.description.startswith(f"line {mutant.line}: ")
    assert len({m.id for m in mutants}) == len(mutants)


def test_given_code_signatures_decorators_docstrings_and_messages_are_left_alone() -> None:
    mutants = mutate_source("softmax", SOURCE)
    lines = {m.line for m in mutants}
    untouched = [i + 1 for i, line in enumerate(SOURCE.splitlines()) if line.lstrip().startswith(("@", "def", '"""'))]
    assert not lines & set(untouched)
    assert not any("num_warps" in m.before or "2048" in m.before for m in mutants)  # performance only
    stages_line = [m for m in mutants if m.line == 19]
    assert stages_line and not any(m.before == "3" for m in stages_line)  # block mutated, num_stages left alone
    assert not any(m.line == 16 and m.operator != "delete_statement" for m in mutants)  # the raise's message
    exercise_cell = SOURCE.replace("    row = tl.program_id(0).to(tl.int64)\n", "    raise NotImplementedError\n")
    given = given_lines(SOURCE, exercise_cell)
    assert given == set(range(1, SOURCE.count("\n") + 1)) - {6}
    assert {m.line for m in mutate_source("softmax", SOURCE, given=given)} == {6}


def test_ids_survive_edits_elsewhere_and_a_changed_solution_is_stale() -> None:
    before = {m.id: m for m in mutate_source("softmax", SOURCE)}
    edited = SOURCE.replace("def softmax(x, eps=1e-6):\n", "def softmax(x, eps=1e-6):\n    # a new comment line\n")
    after = {m.id: m for m in mutate_source("softmax", edited)}
    assert set(before) == set(after)
    moved = [i for i in after if after[i].line > 14]
    assert moved and all(after[i].line == before[i].line + 1 for i in moved)
    with pytest.raises(StaleMutant):
        next(iter(before.values())).apply("#" * len(SOURCE))


# ----------------------------------------------------------------------------------------- end to end

SOLUTION = '''
if os.environ.get("LLM_ALGO_TEST_POISONED"):  # a process that an earlier mutant poisoned dies on the next load
    os._exit(5)


def add_one(x):
    """x + 1 for an integer x."""
    # TODO: add one
    ### BEGIN SOLUTION
    if x == 12345:  # never for the inputs the checks use
        os.environ["LLM_ALGO_TEST_POISONED"] = "1"
    if x != x:
        os._exit(3)
    while x != x:
        pass
    if x < 0:
        return 1 + x
    return x + 1
    ### END SOLUTION
'''

INTEGER_CHECKS = '''
from llm_algo.check import Checks, expect

checks = Checks({lesson_id!r})


@checks("add_one")
def two(ex):
    """add_one(2) == 3"""
    expect(ex.add_one(2) == 3, "add_one(2) is wrong")


@checks("add_one")
def positive_integers(ex):
    """positive integers only: the negative branch is never tested"""
    for x in (5, 17, 40):
        expect(ex.add_one(x) == x + 1, f"add_one({{x}}) is wrong")
'''


def tiny_mutants(lab: Lab) -> dict[tuple[str, str], str]:
    """(line before, line after) -> mutant id, for the tiny lesson's automatic mutants."""
    from llm_algo.mutation.generate import generate
    from llm_algo.notebook import read_lesson

    mutants = generate(read_lesson(lab.notebook_path("02_Tiny.ipynb")))
    return {(m.line_before.strip(), m.line_after.strip()): m.id for m in mutants}


def test_mutate_command_grades_a_tiny_lesson(lab: Lab) -> None:
    lab.add_lesson(solution=SOLUTION, setup_code="import os", checks=INTEGER_CHECKS)
    ids = tiny_mutants(lab)
    equivalent = ids[("if x < 0:", "if x <= 0:")]
    equivalents = lab.root / "tests" / "mutants" / "equivalent"
    equivalents.mkdir()
    (equivalents / "p02_tiny.txt").write_text(
        "# reviewed\n"
        f"{equivalent}  both branches compute x + 1, so where the branch starts does not matter\n"
        "add_one/add_one/drop_cast/00000000  a mutant of a line that is gone\n",
        encoding="utf-8",
    )

    done = lab.run_cli("mutate", "p02.tiny", "--json", "out.json", "--check-timeout", "3", timeout=400)

    assert done.returncode == 0, done.stdout + done.stderr
    [result] = json.loads((lab.root / "out.json").read_text(encoding="utf-8"))
    outcomes = {ident: verdict["outcome"] for ident, verdict in result["verdicts"].items()}
    assert equivalent not in outcomes  # reviewed: not graded
    # the first mutant poisons its process (every later load there dies): the next one, graded while that process
    # dies, is graded again alone in a fresh one instead of counting as crashed
    guard = "if x == 12345:  # never for the inputs the checks use"
    for changed in ("if x != 12345:", "if x == 12346:", "if x == 12344:"):
        assert outcomes[ids[(guard, guard.replace("if x == 12345:", changed))]] == "survived", changed
    assert outcomes[ids[("if x != x:", "if x == x:")]] == "crashed"  # os._exit, alone too: a new child graded the rest
    assert outcomes[ids[("while x != x:", "while x == x:")]] == "timeout"
    for wrong in ("return x - 1", "return x + 0", "return x + 2", "return x", "return 1"):
        assert outcomes[ids[("return x + 1", wrong)]] == "killed", wrong
    for untested in ("return 1 - x", "return 0 + x", "return 2 + x", "return x"):
        assert outcomes[ids[("return 1 + x", untested)]] == "survived", untested  # the negative branch
    exercise = result["exercises"]["add_one"]
    survived = sum(outcome == "survived" for outcome in outcomes.values())
    assert (exercise["total"], exercise["equivalent"]) == (len(ids) - 1, 1)
    assert exercise["killed"] == exercise["total"] - survived
    assert result["stale_equivalents"] == ["add_one/add_one/drop_cast/00000000"]
    out = done.stdout
    assert f"add_one: {exercise['killed']}/{exercise['total']} killed" in out and "1 equivalent" in out
    assert f"survived {ids[('return 1 + x', 'return 1 - x')]}" in out and "+ return 1 - x" in out
    assert "stale equivalent: add_one/add_one/drop_cast/00000000 is no longer generated" in out
    table_row = [line for line in out.splitlines() if line.startswith("p02.tiny ")][-1]
    assert table_row.split()[1:6] == [str(len(ids)), str(exercise["killed"]), str(survived), "1", "0"]

    sampled = lab.run_cli("mutate", "p02.tiny", "--limit", "2", "--json", "two.json", timeout=400)
    [small] = json.loads((lab.root / "two.json").read_text(encoding="utf-8"))
    assert sampled.returncode == 0 and small["sampled"] == 3 and len(small["verdicts"]) == 2  # 2 graded + 1 equivalent
    assert f"(a sample of 3 of {len(ids)})" in sampled.stdout


def test_unknown_lesson_and_bad_equivalents_file(lab: Lab) -> None:
    lab.add_lesson(solution=SOLUTION, setup_code="import os", checks=INTEGER_CHECKS)
    unknown = lab.run_cli("mutate", "p02.nope")
    assert unknown.returncode == 2 and "no lesson with id 'p02.nope'" in unknown.stdout
    equivalents = lab.root / "tests" / "mutants" / "equivalent"
    equivalents.mkdir()
    (equivalents / "p02_tiny.txt").write_text("add_one/add_one/swap_comparison/12345678\n", encoding="utf-8")
    bad = lab.run_cli("mutate", "p02.tiny")
    assert bad.returncode == 0
    assert "p02_tiny.txt, line 1: `add_one/add_one/swap_comparison/12345678` needs a reason" in bad.stdout
