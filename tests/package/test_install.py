"""install.py, the README's install command: which torch build it asks pip for (issue 19, item 1)."""

from __future__ import annotations

import importlib.util
import re
import tomllib

from llm_algo.paths import repo_root


def installer():
    spec = importlib.util.spec_from_file_location("course_install", repo_root() / "install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_torch_range_is_pyprojects():
    with (repo_root() / "pyproject.toml").open("rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    torch = next(d for d in dependencies if re.match(r"torch\b", d))
    assert torch == installer().TORCH_RANGE


def test_a_cpu_machine_gets_the_cpu_index(monkeypatch):
    install = installer()
    monkeypatch.setattr(install.platform, "system", lambda: "Linux")
    args, what = install.torch_command("cpu", lambda url: True)
    assert args == [install.TORCH_RANGE, "--index-url", install.CPU_INDEX] and "CPU build" in what


def test_only_pypi_reachable_still_installs_and_says_what_it_took(monkeypatch):
    install = installer()
    monkeypatch.setattr(install.platform, "system", lambda: "Linux")
    args, what = install.torch_command("cpu", lambda url: False)
    assert args == [install.NEWEST_GRADED] and what.startswith("warning:") and "CUDA build" in what


def test_a_gpu_machine_and_macos_take_pypi(monkeypatch):
    install = installer()
    monkeypatch.setattr(install.platform, "system", lambda: "Linux")
    assert install.torch_command("gpu", lambda url: True)[0] == [install.TORCH_RANGE]
    monkeypatch.setattr(install.platform, "system", lambda: "Darwin")
    assert install.torch_command("cpu", lambda url: True)[0] == [install.TORCH_RANGE]


def test_ci_installs_with_the_readmes_command():
    readme = (repo_root() / "README.md").read_text(encoding="utf-8")
    ci = (repo_root() / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npython install.py " in readme and "\npython install.py --cpu --dev" in ci
