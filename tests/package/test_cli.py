"""`python -m llm_algo progress`, `doctor` and `lint` as a learner or CI runs them."""

from __future__ import annotations

import json
import re

from tiny_lab import PART, Lab


def table_row(output: str, first_column: str) -> list[str]:
    """The cells of the table row that starts with `first_column` (rich draws columns with │, ┃ in the header)."""
    for line in output.replace("┃", "│").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells[0] == first_column:
            return cells
    raise AssertionError(f"no row {first_column!r} in:\n{output}")


def test_progress_prints_the_table_that_pytest_wrote(lab: Lab) -> None:
    lab.add_lesson("p02.healthy", "01_Healthy.ipynb", solved=True)
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb")  # untouched
    lab.add_lesson("p02.wrong", "03_Wrong.ipynb", exercise_source="def add_one(x):\n    return x - 1\n")

    before = lab.run_cli("progress")
    assert before.returncode == 0 and "No results yet" in before.stdout

    run = lab.run_pytest()
    assert run.returncode == 1, run.output
    results = json.loads((lab.root / ".llm_algo" / "results.json").read_text(encoding="utf-8"))
    assert set(results["p02.healthy"].values()) == {"passed"}
    assert set(results["p02.tiny"].values()) == {"not_attempted"}
    assert "failed" in results["p02.wrong"].values()

    done = lab.run_cli("progress")

    assert done.returncode == 0, done.stderr
    assert "No results yet" not in done.stdout
    header = table_row(done.stdout, "part")
    assert header == ["part", "lessons", "exercises", "passed", "failed", "not attempted", "needs a GPU"]
    assert table_row(done.stdout, PART) == [PART, "3", "3", "1", "1", "1", "0"]
    assert table_row(done.stdout, "total") == ["total", "3", "3", "1", "1", "1", "0"]


def test_doctor_reports_the_machine_and_each_lesson(lab: Lab) -> None:
    lab.add_lesson()
    broken = lab.add_lesson("p02.broken", "03_Broken.ipynb")
    broken.write_text("{", encoding="utf-8")

    done = lab.run_cli("doctor")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in ("Python", "torch", "triton", "CUDA"):
        assert any(line.startswith(f"{name} ") for line in lines), (name, done.stdout)
    python = next(line for line in lines if line.startswith("Python "))
    assert python.split()[1].startswith("3.")
    cuda = next(line for line in lines if line.startswith("CUDA "))
    assert "not available" in cuda or "compute capability" in cuda
    torch_line = next(line for line in lines if line.startswith("torch "))
    assert re.search(r"\((CPU|CUDA [\d.]+) build\)$", torch_line), torch_line  # which build, not just a version
    assert any(line.startswith("nvcc ") for line in lines)
    assert re.search(r"^  p02\.tiny +native PyTorch on (cpu|cuda)$", done.stdout, re.MULTILINE), done.stdout
    assert f"{PART}/03_Broken.ipynb: cannot be graded: {PART}/03_Broken.ipynb: not valid JSON" in done.stdout


def test_lint_command_exit_status(lab: Lab) -> None:
    path = lab.add_lesson()
    good = lab.run_cli("lint")
    assert (good.returncode, good.stdout.strip()) == (0, "lint: every lesson keeps the contract")

    lab.edit_cell(path, "check", lambda cell: cell.update(source='check("add_one")\nprint(1)'))
    bad = lab.run_cli("lint")

    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [
        f'{PART}/02_Tiny.ipynb, cell 5 (check "add_one"): a check cell holds exactly check("add_one")',
        "lint: 1 problem",
    ]


def test_doctor_warns_about_a_cuda_build_without_a_gpu(monkeypatch) -> None:
    import torch

    from llm_algo import device, doctor

    no_gpu = device.DevicePolicy(device="cpu", triton_path="interpreter", gpu_name=None, capability=None)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert "CUDA build of torch on a machine without a usable GPU" in doctor.build_warning(no_gpu)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert doctor.build_warning(no_gpu) is None


def test_doctor_does_not_promise_triton_where_it_is_missing(monkeypatch) -> None:
    from llm_algo import device, doctor

    policy = device.DevicePolicy(device="cpu", triton_path="interpreter", gpu_name=None, capability=None)
    monkeypatch.setattr(doctor, "triton_installed", lambda: False)
    assert "triton is not installed" in doctor.how_it_runs("cpu", True, policy)


def test_bench_without_a_gpu_fails(lab: Lab) -> None:
    lab.add_lesson()
    done = lab.run_cli("bench", "p02.tiny")
    if "this machine has none" in done.stdout:
        assert done.returncode == 1
