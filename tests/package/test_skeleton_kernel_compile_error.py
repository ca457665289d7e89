"""On a GPU, Triton compiles a kernel skeleton instead of running it, and `raise NotImplementedError` inside
`@triton.jit` is a compile error, not a NotImplementedError. The grader must still call that *not attempted*
(found on the H200: the untouched Triton lessons graded as failed there)."""

from __future__ import annotations

from llm_algo.check import CheckSpec
from llm_algo.grading.run import run_check


def compile_error(message: str) -> Exception:
    """An exception of the class Triton raises, with the text its compiler writes (source excerpt, then reason)."""
    error_type = type("UnsupportedLanguageConstruct", (Exception,), {"__module__": "triton.compiler.errors"})
    return error_type(message)


def spec_raising(exc: Exception) -> CheckSpec:
    def check(ex):
        raise exc

    return CheckSpec("p03.tiny", "add", "calls_the_kernel", "calls the kernel", check)


def test_compile_error_of_a_skeleton_kernel_is_not_attempted() -> None:
    exc = compile_error(
        "at 12:4:\n    pid = tl.program_id(0)\n    raise NotImplementedError  # your code here\n    ^\nunsupported AST node type: Raise"
    )
    result = run_check(spec_raising(exc), {}, "01_Tiny.ipynb", triton=True)
    assert result.outcome == "not_attempted"


def test_other_compile_errors_still_fail() -> None:
    exc = compile_error(
        "at 3:8:\n    x = tl.load(x_ptr + offs, mask=mask)\n        ^\nNameError('offs is not defined')"
    )
    result = run_check(spec_raising(exc), {}, "01_Tiny.ipynb", triton=True)
    assert result.outcome == "failed"
    assert "UnsupportedLanguageConstruct" in result.summary


def test_the_text_alone_outside_triton_is_a_failure() -> None:
    result = run_check(spec_raising(ValueError("raise NotImplementedError")), {}, "01_Tiny.ipynb", triton=True)
    assert result.outcome == "failed"
