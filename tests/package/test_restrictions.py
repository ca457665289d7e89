"""Declared restrictions (llm_algo.check.restrictions): the shortcuts a reviewer found are rejected with one line that
names the forbidden call and where it was made; correct alternatives, the checks' own references and Triton's
launcher stay allowed; a violation that the learner's code (or a check) swallows still fails.

The shortcuts are written into the exercise cells of real lessons copied into a tiny lab, the way
test_broken_notebooks.py edits notebooks, and graded as a learner's notebook is."""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_lab import EXERCISE_CELL, MAIN_REPO, Lab

from llm_algo.check import load_checks
from llm_algo.grading.execute import load_namespace
from llm_algo.grading.run import check_exercise
from llm_algo.notebook import Lesson, read_lesson
from llm_algo.outcome import CheckResult
from llm_algo.paths import lesson_notebooks
from llm_algo.session import setup_lesson

FORBIDS = "which this exercise forbids"


def copy_lesson(lab: Lab, notebook: str) -> Path:
    """A lesson of this checkout (its notebook and its checks) inside the lab, where its cells can be edited."""
    source = MAIN_REPO / notebook
    target = lab.root / notebook
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    module = read_lesson(source).id.replace(".", "_") + ".py"
    shutil.copy(MAIN_REPO / "tests" / "checks" / module, lab.root / "tests" / "checks" / module)
    return target


def write_exercise(path: Path, exercise: str, source: str, *, below_the_skeleton: bool = False) -> None:
    """The learner's edit: the exercise cell of `exercise` now holds `source` (below the untouched skeleton: the
    kernel still raises NotImplementedError, and `source` redefines the wrapper)."""

    def edit(notebook: dict) -> None:
        cell = next(
            c
            for c in notebook["cells"]
            if "exercise" in c["metadata"].get("tags", []) and c["metadata"]["llm_algo"]["exercise"] == exercise
        )
        skeleton = "".join(cell["source"]) + "\n\n" if below_the_skeleton else ""
        cell["source"] = skeleton + textwrap.dedent(source).strip() + "\n"

    Lab.edit_notebook(path, edit)


def grade(path: Path, exercise: str) -> list[CheckResult]:
    """The exercise's checks against the learner's notebook, in this process."""
    lesson = read_lesson(path)
    registry = load_checks(lesson.id)
    return check_exercise(registry.for_exercise(exercise), load_namespace(lesson, "learner"), lesson, registry)


def shortcut(lab: Lab, notebook: str, exercise: str, source: str) -> list[CheckResult]:
    path = copy_lesson(lab, notebook)
    write_exercise(path, exercise, source)
    return grade(path, exercise)


def expect_rejected(results: list[CheckResult], *fragments: str) -> None:
    """Most checks fail, and every failure is the one line that names the call, where, and what to do instead."""
    failed = [r for r in results if r.outcome == "failed"]
    assert results and len(failed) >= len(results) - 1, [(r.key, r.outcome, r.summary) for r in results]
    for result in failed:
        assert FORBIDS in result.summary or "without launching" in result.summary, result.summary
        for fragment in fragments:
            assert fragment in result.summary, (fragment, result.summary)


def expect_all_pass(results: list[CheckResult]) -> None:
    assert results and all(r.outcome == "passed" for r in results), [(r.key, r.summary) for r in results]


RMSNORM = "02_PyTorch_Algorithms/02_RMSNorm.ipynb"
ATTENTION = "02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb"
CROSS_ENTROPY = "02_PyTorch_Algorithms/13_Cross_Entropy.ipynb"
ADAMW = "02_PyTorch_Algorithms/14_AdamW.ipynb"
FLASH_FWD = "03_Triton_Kernels/10_Flash_Attention_Fwd.ipynb"


# ----------------------------------------------------------------------------- the reviewer's shortcuts


@pytest.mark.parametrize(
    "source",
    [
        "def rms_norm(x, weight, eps=1e-6):\n    return F.rms_norm(x, (x.shape[-1],), weight, eps)",
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    dtype = torch.promote_types(x.dtype, torch.float32)\n"
        "    return F.rms_norm(x.to(dtype), (x.shape[-1],), weight.to(dtype), eps).to(x.dtype)",
    ],
    ids=["plain", "with_the_upcast"],
)
def test_rms_norm_through_f_rms_norm_is_rejected(lab: Lab, source: str) -> None:
    results = shortcut(lab, RMSNORM, "rms_norm", source)
    expect_rejected(
        results, "calls F.rms_norm at 02_PyTorch_Algorithms/02_RMSNorm.ipynb, cell ", '(exercise "rms_norm")'
    )


def test_adamw_that_subclasses_torch_adamw_is_rejected(lab: Lab) -> None:
    results = shortcut(lab, ADAMW, "adamw_optimizer", "class AdamW(torch.optim.AdamW):\n    pass")
    expect_rejected(results, "`AdamW` is a subclass of torch.optim.AdamW")


def test_adamw_step_that_delegates_to_torch_is_rejected(lab: Lab) -> None:
    source = """
        from torch.optim.adamw import adamw

        @torch.no_grad()
        def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, beta1, beta2, eps, weight_decay,
                       max_exp_avg_sq=None):
            amsgrad = max_exp_avg_sq is not None
            adamw([param], [grad], [exp_avg], [exp_avg_sq], [max_exp_avg_sq] if amsgrad else [],
                  [torch.tensor(float(step - 1))], amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr,
                  weight_decay=weight_decay, eps=eps, maximize=False)
    """
    results = shortcut(lab, ADAMW, "adamw_step", source)
    expect_rejected(results, "calls torch.optim.adamw.adamw at", '(exercise "adamw_step"), line 7')


def test_logsumexp_through_torch_logsumexp_is_rejected(lab: Lab) -> None:
    results = shortcut(lab, CROSS_ENTROPY, "logsumexp", "def logsumexp(x):\n    return torch.logsumexp(x, dim=-1)")
    expect_rejected(results, "calls torch.logsumexp at", '(exercise "logsumexp"), line 2')


def test_attention_through_sdpa_is_rejected(lab: Lab) -> None:
    source = """
        def attention(q, k, v, *, causal=False, key_padding_mask=None):
            B, H_q, S_q, D = q.shape
            H_kv, S_k = k.shape[1], k.shape[2]
            if H_q % H_kv:
                raise ValueError(f"{H_q} query heads, {H_kv} KV heads")
            allowed = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device)
            allowed = (allowed.tril(S_k - S_q) if causal else allowed)[None, None]
            if key_padding_mask is not None:
                allowed = allowed & key_padding_mask[:, None, None, :].bool()
            dtype = torch.promote_types(q.dtype, torch.float32)
            out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=allowed, enable_gqa=True)
            return torch.where(allowed.any(-1, keepdim=True), out, 0.0).to(q.dtype)
    """
    results = shortcut(lab, ATTENTION, "attention", source)
    expect_rejected(results, "calls F.scaled_dot_product_attention at", '(exercise "attention"), line 11')


def test_flash_attention_without_a_kernel_is_rejected(lab: Lab) -> None:
    """The wrapper computes out with SDPA and the LSE with torch.logsumexp; no Triton kernel runs (graded by pytest
    in a child process, with Triton's interpreter, as a learner's run is)."""
    path = copy_lesson(lab, FLASH_FWD)
    write_exercise(
        path,
        "flash_attention_fwd",
        """
        def flash_attention_fwd(q, k, v, causal=False, sm_scale=None, block_m=None, block_n=None):
            if q.dtype not in (torch.float16, torch.bfloat16) or q.shape[-1] not in (16, 32, 64, 128):
                raise ValueError("unsupported")
            if q.shape[1] % k.shape[1] or (causal and q.shape[2] != k.shape[2]) or k.shape != v.shape:
                raise ValueError("bad shapes")
            scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
            keys = k.float().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            scores = q.float() @ keys.transpose(-1, -2) * scale
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
            return out, torch.logsumexp(scores, dim=-1)
        """,
        below_the_skeleton=True,
    )
    run = lab.run_pytest(FLASH_FWD)
    items = run.of("10_Flash_Attention_Fwd")
    assert items.pop("flash_attention_fwd::kernel_stays_inside_its_output")[0] == "skipped", run.output  # not attempted
    assert items.pop("flash_attention_fwd::matches_sdpa_at_scale")[0] == "skipped", run.output  # compiled Triton only
    assert items.pop("flash_attention_fwd::offsets_past_2_31_elements")[0] == "skipped", run.output  # the same
    # "refuse or be correct" (issue 16): this wrapper refuses the inputs it may not support before calling SDPA, which
    # that check accepts; the exercise still fails on every check below
    items.pop("flash_attention_fwd::refuses_or_computes_what_it_may_not_support")
    assert len(items) >= 5, run.output  # every other check of the exercise: all fail below
    for name, (outcome, message) in items.items():
        assert outcome == "failed", (name, message)
        assert "calls F.scaled_dot_product_attention at" in message and FORBIDS in message, message


def test_a_wrapper_that_computes_without_its_kernel_is_rejected(lab: Lab) -> None:
    """No builtin this time, only tensor arithmetic: the result did not come from a kernel of the notebook."""
    path = copy_lesson(lab, FLASH_FWD)
    write_exercise(
        path,
        "flash_attention_fwd",
        """
        def flash_attention_fwd(q, k, v, causal=False, sm_scale=None, block_m=None, block_n=None):
            scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
            group = q.shape[1] // k.shape[1]
            keys, values = (t.float().repeat_interleave(group, dim=1) for t in (k, v))
            scores = q.float() @ keys.transpose(-1, -2) * scale
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
            m = scores.amax(-1, keepdim=True)
            weights = (scores - m).exp()
            total = weights.sum(-1, keepdim=True)
            return (weights / total @ values).to(q.dtype), (m + total.log()).squeeze(-1)
        """,
        below_the_skeleton=True,
    )
    run = lab.run_pytest(FLASH_FWD, "-k", "identical_keys or matches_sdpa_causal")
    items = run.of("10_Flash_Attention_Fwd")
    assert len(items) == 2, run.output
    for name, (outcome, message) in items.items():
        assert outcome == "failed", (name, message)
        assert "returned a result without launching a Triton kernel of this notebook" in message, message


# ----------------------------------------------------------------------------- what stays allowed


def test_correct_alternatives_pass_and_the_checks_references_are_allowed(lab: Lab) -> None:
    """Another order of operations, `lerp_`, `torch.softmax` with a fix for empty rows: all pass, while the checks
    compute their references with F.rms_norm, torch.optim.AdamW and SDPA in the same process."""
    rms_norm = """
        def rms_norm(x, weight, eps=1e-6):
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            mean_square = (xc * xc).sum(dim=-1, keepdim=True) / x.shape[-1]
            return (xc / torch.sqrt(mean_square + eps) * weight.to(xc.dtype)).to(x.dtype)
    """
    adamw_step = """
        @torch.no_grad()
        def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, beta1, beta2, eps, weight_decay,
                       max_exp_avg_sq=None):
            param.mul_(1 - lr * weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            second = exp_avg_sq if max_exp_avg_sq is None else torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
            denom = (second.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
    """
    attention = """
        def repeat_kv(x, n_rep):
            return x if n_rep == 1 else torch.cat([x[:, h : h + 1].expand(-1, n_rep, -1, -1) for h in range(x.shape[1])], 1)

        def attention(q, k, v, *, causal=False, key_padding_mask=None):
            B, H_q, S_q, D = q.shape
            H_kv, S_k = k.shape[1], k.shape[2]
            if H_q % H_kv:
                raise ValueError(f"{H_q} query heads, {H_kv} KV heads")
            dtype = torch.promote_types(q.dtype, torch.float32)
            k, v = repeat_kv(k, H_q // H_kv).to(dtype), repeat_kv(v, H_q // H_kv).to(dtype)
            allowed = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device)
            allowed = (allowed.tril(S_k - S_q) if causal else allowed)[None, None]
            if key_padding_mask is not None:
                allowed = allowed & key_padding_mask[:, None, None, :].bool()
            scores = (q.to(dtype) @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~allowed, float("-inf"))
            probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
            return (probs @ v).to(q.dtype)
    """
    expect_all_pass(shortcut(lab, RMSNORM, "rms_norm", rms_norm))
    expect_all_pass(shortcut(lab, ADAMW, "adamw_step", adamw_step))
    path = copy_lesson(lab, ATTENTION)
    write_exercise(path, "attention", attention)
    expect_all_pass(grade(path, "attention"))


# ----------------------------------------------------------------------------- mechanics, on a tiny lesson

RESTRICTED_CHECKS = '''
import torch

from llm_algo.check import Checks, expect, expect_close

checks = Checks({lesson_id!r})
checks.restrict("add_one", forbid=[torch.add], instead="add with the + operator")


@checks("add_one")
def matches_torch_add(ex):
    """the reference is torch.add itself: the checks may call what the learner may not"""
    x = torch.randn(5)
    expect_close(ex.add_one(x), torch.add(x.double(), 1), input="x (5,)")


@checks("add_one")
def runs_under_torch_compile(ex):
    """the check compiles the learner's function (Dynamo traces the watching mode)"""
    x = torch.randn(3)
    expect_close(torch.compile(ex.add_one, backend="eager")(x), x.double() + 1, input="x (3,)")


@checks("add_one")
def swallows_errors_itself(ex):
    """a check that catches every exception cannot hide a forbidden call"""
    try:
        ex.add_one(torch.ones(2))
    except Exception:
        pass
    expect(True, "unreachable")
'''


def tiny_results(lab: Lab, exercise_source: str) -> list[CheckResult]:
    path = lab.add_lesson(exercise_source=exercise_source, checks=RESTRICTED_CHECKS)
    return grade(path, "add_one")


def by_check(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.key.split("::")[1]: r for r in results}


def test_a_forbidden_call_fails_the_check_with_its_place(lab: Lab) -> None:
    results = by_check(tiny_results(lab, "import torch\n\ndef add_one(x):\n    return torch.add(x, 1)\n"))
    assert results["matches_torch_add"].outcome == "failed"
    assert results["matches_torch_add"].summary == (
        f"calls torch.add at 02_PyTorch_Algorithms/02_Tiny.ipynb, {EXERCISE_CELL}, line 4, {FORBIDS}: "
        "add with the + operator"
    )


def test_a_swallowed_violation_still_fails(lab: Lab) -> None:
    """Swallowed by the learner's code (which then answers correctly), or by a check that catches everything."""
    source = "import torch\n\ndef add_one(x):\n    try:\n        return torch.add(x, 1)\n    except Exception:\n        return x + 1\n"
    results = by_check(tiny_results(lab, source))
    for check in ("matches_torch_add", "swallows_errors_itself"):
        assert results[check].outcome == "failed", results[check]
        assert results[check].summary.startswith("calls torch.add at") and ", line 5, " in results[check].summary


def test_an_alias_of_the_forbidden_function_is_rejected(lab: Lab) -> None:
    results = tiny_results(lab, "import functools\nimport torch\n\nadd_one = functools.partial(torch.add, other=1)\n")
    assert [r.outcome for r in results] == ["failed"] * 3
    assert all(r.summary.startswith(f"`add_one` is torch.add, {FORBIDS}") for r in results)


def test_the_operator_is_not_the_forbidden_function(lab: Lab) -> None:
    """Restrict the call, not the computation: `x + 1` (Tensor.add) passes, under torch.compile too."""
    expect_all_pass(tiny_results(lab, "def add_one(x):\n    return x + 1\n"))


def test_a_live_kernel_namespace_is_watched_too(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    """In Jupyter the learner's globals are the IPython user namespace that setup_lesson binds."""
    lab.add_lesson(checks=RESTRICTED_CHECKS)
    namespace: dict = {"__name__": "__main__"}
    exec(compile("import torch\ndef add_one(x):\n    return torch.add(x, 1)\n", "<ipython-cell>", "exec"), namespace)
    session = setup_lesson("p02.tiny", namespace)
    capsys.readouterr()
    session.check("add_one")
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("add_one: ❌ failed")
    assert f"\n    calls torch.add at line 3 of `add_one`, {FORBIDS}: add with the + operator" in out


# ----------------------------------------------------------------------------- the declarations themselves


def kernel_wrapper_exercises(lesson: Lesson) -> set[str]:
    """Exercises whose solution defines a @triton.jit kernel and the Python code that launches it."""
    wrappers = set()
    for cell in lesson.tagged("solution"):
        definitions = [n for n in ast.parse(cell.source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        jitted = [n for n in definitions if any("triton.jit" in ast.unparse(d) for d in n.decorator_list)]
        if jitted and len(jitted) < len(definitions):
            wrappers.add(cell.solution)
    return wrappers


def test_every_declaration_names_an_exercise_and_every_kernel_wrapper_must_launch(real_repo: Path) -> None:
    for notebook in lesson_notebooks():
        lesson = read_lesson(notebook)
        registry = load_checks(lesson.id)
        assert set(registry.restrictions) <= set(registry.exercises()), (lesson.id, set(registry.restrictions))
        assert all(spec.restriction is registry.restrictions.get(spec.exercise) for spec in registry.specs)
        for exercise in kernel_wrapper_exercises(lesson):
            restriction = registry.restrictions.get(exercise)
            assert restriction is not None and restriction.kernel, f"{lesson.id}: {exercise} needs kernel=True"


PYTHON_RESTRICTED_CHECKS = '''
import fractions
import math

from llm_algo.check import Checks, expect, reference_only

checks = Checks({lesson_id!r})
checks.restrict("add_one", forbid=["fractions", math.fsum], instead="add one yourself")


@checks("add_one")
def adds_one(ex):
    """the checks may use what the learner may not: fractions and math.fsum, inside and outside reference_only"""
    want = fractions.Fraction(5, 2) + 1
    with reference_only():
        want = math.fsum([float(want)])
    expect(ex.add_one(2.5) == want, "add_one(2.5) is wrong", expected=repr(want))


@checks("add_one")
def adds_one_to_ints(ex):
    """integers"""
    expect(ex.add_one(41) == 42, "add_one(41) is wrong")
'''


@pytest.mark.parametrize(
    ("source", "call"),
    [
        ("import fractions\n\ndef add_one(x):\n    return float(fractions.Fraction(x) + 1)\n", "fractions.Fraction"),
        ("import math\n\ndef add_one(x):\n    return math.fsum([x, 1])\n", "math.fsum"),
    ],
    ids=["pure-Python code of a forbidden module", "a C function of the standard library"],
)
def test_forbidden_code_that_never_calls_torch_is_caught(lab: Lab, source: str, call: str) -> None:
    """The torch watch sees torch calls only; a forbidden module's Python code or a forbidden C function is caught by
    the Python-level watch, with the place of the call."""
    path = lab.add_lesson(exercise_source=source, checks=PYTHON_RESTRICTED_CHECKS)
    results = grade(path, "add_one")
    assert [r.outcome for r in results] == ["failed", "failed"], results
    assert all(r.summary.startswith(f"calls {call}") and ", line 4, " in r.summary for r in results), results


def test_allowed_code_passes_beside_a_python_level_restriction(lab: Lab) -> None:
    path = lab.add_lesson(exercise_source="def add_one(x):\n    return x + 1\n", checks=PYTHON_RESTRICTED_CHECKS)
    expect_all_pass(grade(path, "add_one"))


def test_a_forbidden_call_inside_a_learners_backward_is_caught(lab: Lab) -> None:
    """autograd's engine runs an `autograd.Function`'s backward without the torch-function mode that watches the
    check: a backward that hands its work to `torch.autograd.grad` (the forbidden reference) must still fail when it
    is reached through `.backward()`, as a learner's training loop reaches it."""
    path = copy_lesson(lab, "02_PyTorch_Algorithms/03_SwiGLU.ipynb")
    lesson = read_lesson(path)
    solution = lesson.solution_cell("SwiGLUFunction").source
    start = solution.index("    @staticmethod\n    def backward")
    cheat = (
        "    @staticmethod\n"
        "    def backward(ctx, grad_out):\n"
        "        x, w_gate, w_up, w_down, gate, up = ctx.saved_tensors\n"
        "        with torch.enable_grad():\n"
        "            inputs = [t.detach().requires_grad_(True) for t in (x, w_gate, w_up, w_down)]\n"
        "            out = F.linear(F.silu(F.linear(inputs[0], inputs[1])) * F.linear(inputs[0], inputs[2]), inputs[3])\n"
        "            return torch.autograd.grad(out, inputs, grad_out)\n"
    )
    write_exercise(path, "SwiGLUFunction", solution[:start] + cheat)
    registry = load_checks(lesson.id)
    namespace = load_namespace(read_lesson(path), "learner").namespace
    from llm_algo.check.restrictions import Enforcement
    from llm_algo.notebook import source_location

    def train_step() -> None:
        x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
        w = [torch.randn(5, 4, dtype=torch.float64, requires_grad=True) for _ in range(2)]
        w_down = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
        namespace["SwiGLUFunction"].apply(x, *w, w_down).sum().backward()

    restriction = registry.restrictions["SwiGLUFunction"]
    with (
        Enforcement(restriction, namespace, {}, source_location) as enforcement,
        pytest.raises(Exception, match="autograd"),
    ):
        train_step()
    assert "torch.autograd.grad" in enforcement.violation(passed=True)
    train_step()  # outside the check, the learner's class is as it was (the backward restored)


def test_aten_called_inside_the_learners_cpp_is_a_forbidden_call():
    """ATen inside an extension is invisible to the Python-level watch: compile_cuda hands the learner's source to
    the running check first, so `torch::matmul` in a matmul exercise's C++ fails it before anything is built, while
    the same text compiled by the checks' own code, comments and string literals, and other lessons' names pass."""
    from llm_algo.check.restrictions import MATMUL, Enforcement, Restriction, check_cpp_source, cpp_calls, cpp_names
    from llm_algo.cuda.inline import compile_cuda

    cheat = (
        "// a reference: torch::matmul(A, B)\n"
        "torch::Tensor gemm(torch::Tensor A, torch::Tensor B) {\n"
        '    TORCH_CHECK(A.dim() == 2, "A.matmul(B) needs 2-D A");\n'
        "    return at::matmul(A, B);\n"
        "}\n"
    )
    namespace: dict = {"__name__": "__lesson__", "compile_cuda": compile_cuda, "SOURCE": cheat}
    exec("def load():\n    return compile_cuda(SOURCE, ['gemm'], name='cheat')\n", namespace)
    restriction = Restriction(forbid=tuple(MATMUL), instead="multiply in your __global__ kernel")
    grader = {"__name__": "tests.checks.fake", "check_cpp_source": check_cpp_source, "SOURCE": cheat}
    exec("def reference():\n    check_cpp_source(SOURCE)\n", grader)
    namespace["reference"] = grader["reference"]
    exec("def through_the_checks():\n    reference()\n", namespace)
    with Enforcement(restriction, namespace, grader, lambda filename, lineno: "") as enforcement:
        namespace["through_the_checks"]()  # the checks' frame comes first outwards: their own C++ is theirs
        assert enforcement.violation(passed=True) == ""
        with pytest.raises(Exception, match=r"at::matmul.*line 4 of your CUDA source"):
            namespace["load"]()
    assert "at::matmul" in enforcement.violation(passed=True)
    check_cpp_source(cheat)  # no check running: nothing to enforce

    names = cpp_names(restriction.forbidden)
    assert cpp_calls("y = x.mm(w);", names) and cpp_calls("cublasGemmEx(handle);", names)
    assert cpp_calls(cheat.replace("return at::matmul(A, B);", "return A;"), names) is None
    assert cpp_calls("wmma::mma_sync(c, a, b, c); float m = std::numeric_limits<float>::max();", names) is None
