"""llm_algo.grading.prebuild_cuda: the CUDA C++ builds a self-check will need, found without building any."""

from pathlib import Path

from llm_algo.grading.prebuild_cuda import prebuild, requests_of, unique
from llm_algo.mutation.mutants import load_mutants
from llm_algo.paths import repo_root

CUDA_INTRO = repo_root() / "04_CUDA_Systems" / "01_CUDA_Intro.ipynb"


def test_finds_the_reference_build_and_one_per_cpp_mutant():
    requests = requests_of(CUDA_INTRO)
    reference = [r for r in requests if r.origin == "p04.cuda_intro"]
    assert reference and all("__global__" in r.cuda_source for r in reference)
    assert {r.name for r in reference} == {"p04_vector_add"}
    distinct = unique(requests)
    assert len(distinct) < len(requests)  # a mutant of the Python twin builds what the reference builds
    cpp_mutants = {m.name for m in load_mutants("p04.cuda_intro") if m.exercise == "vector_add_cuda"}
    origins = {r.origin.split("mutant ")[-1] for r in distinct}
    assert cpp_mutants and cpp_mutants <= origins  # every mutant of the C++ source is its own build


def test_without_nvcc_nothing_is_built(monkeypatch):
    import llm_algo.cuda.inline as inline

    monkeypatch.setattr(inline, "nvcc_path", lambda: None)
    lines = []
    assert prebuild([Path(CUDA_INTRO)], jobs=2, out=lines.append) == 0
    assert lines == ["prebuild-cuda: nvcc is not installed here; nothing to build"]
