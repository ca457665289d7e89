"""One precedence rule per setting (CLI, environment, ini, default), and how the progress table counts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny_lab import PART, Lab

from llm_algo.progress import part_summary, save_results
from llm_algo.settings import CHECK_TIMEOUT, SettingError, resolve


def test_cli_beats_environment_beats_ini_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECK_TIMEOUT.env, raising=False)
    assert resolve(CHECK_TIMEOUT) == CHECK_TIMEOUT.default == 60.0
    assert resolve(CHECK_TIMEOUT, ini="30") == 30.0
    monkeypatch.setenv(CHECK_TIMEOUT.env, "20")
    assert resolve(CHECK_TIMEOUT, ini="30") == 20.0
    assert resolve(CHECK_TIMEOUT, cli="5", ini="30") == 5.0


@pytest.mark.parametrize(
    ("source", "raw", "named"),
    [("cli", "0", "--check-timeout='0'"), ("ini", "soon", "ini option llm_algo_check_timeout='soon'")],
)
def test_an_invalid_value_names_its_source(monkeypatch: pytest.MonkeyPatch, source: str, raw: str, named: str) -> None:
    monkeypatch.delenv(CHECK_TIMEOUT.env, raising=False)
    with pytest.raises(SettingError, match=f"^{named} is not valid"):
        resolve(CHECK_TIMEOUT, **{source: raw})


def test_an_invalid_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECK_TIMEOUT.env, "-1")
    with pytest.raises(SettingError, match=r"^\$LLM_ALGO_CHECK_TIMEOUT='-1' is not valid: must be a positive"):
        resolve(CHECK_TIMEOUT)


def test_results_merge_so_a_partial_run_keeps_the_rest(lab: Lab) -> None:
    lab.add_lesson("p02.healthy", "01_Healthy.ipynb")
    lab.add_lesson()
    save_results({"p02.healthy": {"add_one::adds_one_to_two": "passed", "add_one::random_integers": "failed"}})
    save_results({"p02.healthy": {"add_one::random_integers": "passed"}, "p02.tiny": {"mutant::add_one::x": "passed"}})

    results = json.loads((lab.root / ".llm_algo" / "results.json").read_text(encoding="utf-8"))
    assert results["p02.healthy"] == {"add_one::adds_one_to_two": "passed", "add_one::random_integers": "passed"}
    assert part_summary(results) == {
        PART: {"lessons": 2, "exercises": 2, "passed": 2, "failed": 0, "not attempted": 0, "needs a GPU": 0}
    }
    assert part_summary(results, only={"p02.tiny"}) == {
        PART: {"lessons": 1, "exercises": 1, "passed": 1, "failed": 0, "not attempted": 0, "needs a GPU": 0}
    }


def test_a_corrupt_results_file_is_kept_aside_not_silently_dropped(lab: Lab) -> None:
    state = lab.root / ".llm_algo"
    state.mkdir()
    (state / "results.json").write_text('{"p02.tiny": {"add_one::adds', encoding="utf-8")  # a kill mid-write
    with pytest.warns(UserWarning, match="was not valid JSON.*kept as results.json.corrupt-"):
        save_results({"p02.healthy": {"add_one::random_integers": "passed"}})
    assert json.loads((state / "results.json").read_text(encoding="utf-8")) == {
        "p02.healthy": {"add_one::random_integers": "passed"}
    }
    (aside,) = state.glob("results.json.corrupt-*")
    assert aside.read_text(encoding="utf-8").startswith('{"p02.tiny"')


def test_two_processes_saving_at_once_both_keep_their_results(lab: Lab) -> None:
    """Each process merges under the lock: no update is lost, whatever the interleaving."""
    script = (
        "import sys\nfrom llm_algo.progress import save_results\n"
        "for i in range(40):\n"
        "    save_results({sys.argv[1]: {f'ex::check{i}': 'passed'}})\n"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", script, lesson], env=lab.env(), cwd=lab.root)
        for lesson in ("p02.one", "p02.two")
    ]
    assert [run.wait(timeout=120) for run in runs] == [0, 0]
    results = json.loads((lab.root / ".llm_algo" / "results.json").read_text(encoding="utf-8"))
    assert {lesson: len(checks) for lesson, checks in results.items()} == {"p02.one": 40, "p02.two": 40}
