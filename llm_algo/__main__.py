"""The command line: lint, run, progress, doctor, bench, build, mutate, site, prebuild-cuda."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .notebook import NotebookError


def cmd_lint(args: argparse.Namespace) -> int:
    from .authoring.lint import lint

    errors = lint([Path(p) for p in args.paths] or None)
    for error in errors:
        print(error)
    print(
        f"lint: {len(errors)} problem{'s' * (len(errors) != 1)}" if errors else "lint: every lesson keeps the contract"
    )
    return 1 if errors else 0


def cmd_run(args: argparse.Namespace) -> int:
    from .headless import run_notebooks
    from .paths import lesson_notebooks

    paths = [Path(p) for p in args.notebooks] or (lesson_notebooks() if args.all else [])
    if not paths:
        print("name a notebook, or pass --all")
        return 2
    failures = 0
    for report in run_notebooks(paths, solutions=args.solutions, jobs=args.jobs):
        if isinstance(report, NotebookError):
            print(f"✗ {report}")
            failures += 1
            continue
        verdicts = ", ".join(f"{name}: {status}" for name, status in report.checks.items())
        mark = run_mark(report, solutions=args.solutions)
        failures += mark == "✗"
        print(
            f"{mark} {report.notebook} in {report.seconds:.1f} s — {verdicts or 'no check cells'}"
            + (f" — {report.error}" if report.error else "")
            + f"\n  executed copy: {report.executed_copy}"
        )
    return 1 if failures else 0


def run_mark(report, *, solutions: bool) -> str:
    """✗: the notebook did not run (or, with the solutions, a check did not pass); ✓: it ran and every check
    passed; · it ran, and the verdicts say what is left to do (a learner's notebook with failed or open exercises)."""
    if report.error or (solutions and not report.ok):
        return "✗"
    return "✓" if all(status == "passed" for status in report.checks.values()) else "·"


def cmd_progress(args: argparse.Namespace) -> int:
    if args.plot:
        from .progress_plot import NoResults, save_progress_plot

        try:
            print(f"wrote {save_progress_plot(args.out)}")
        except NoResults as exc:
            print(exc)
            return 1
        return 0
    from .messages import t
    from .progress import load_results, part_summary, render_table, results_path

    results = load_results()
    if not results:
        print(t("no results", path=results_path()))
    print(render_table(part_summary(results)))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import report

    print(report())
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from . import device as device_policy
    from .check.api import Exercise, load_checks
    from .grading.cache import find_lesson
    from .grading.execute import load_namespace

    if not device_policy.policy().has_cuda:
        print("benchmarks time kernels on a CUDA GPU; this machine has none (see `python -m llm_algo doctor`)")
        return 1
    import torch

    least = device_policy.MIN_TRITON_CAPABILITY  # below it, Triton lessons run in the interpreter
    if torch.cuda.get_device_capability() < least:
        major, minor = torch.cuda.get_device_capability()
        print(
            f"benchmarks need a GPU of compute capability {least[0]}.{least[1]}+ "
            f"(Ampere or newer); this {torch.cuda.get_device_name()} is {major}.{minor}, where the lessons' kernels "
            "run in Triton's interpreter: its timings would mean nothing"
        )
        return 1
    lesson = find_lesson(args.lesson)
    benchmark = load_checks(args.lesson).benchmark
    if benchmark is None:
        print(f"lesson {args.lesson} declares no benchmark")
        return 1
    mode = "learner" if args.mine else "solution"
    loaded = load_namespace(lesson, mode)  # in solution mode, `use(...)` takes earlier lessons' references
    table = Table(title=f"{args.lesson}: {'your kernel' if args.mine else 'reference solution'} vs baselines")
    for column in ("kernel", "shape", "ms (median)", "throughput"):
        table.add_column(column)
    for row in benchmark(Exercise(loaded.namespace, lesson.name)):
        table.add_row(row.name, row.shape, f"{row.ms:.4f}", f"{row.value:,.1f} {row.unit}")
    Console().print(table)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from .authoring.builder import HandEdited, build_all
    from .authoring.glossary import write_glossary
    from .authoring.part_index import write_part_readmes, write_readme

    try:
        written = build_all(args.lessons, force=args.force)
    except HandEdited as exc:
        print(f"build: {exc}")
        return 1
    for path in [*written, *write_part_readmes(), write_readme(), write_glossary()]:
        print(f"wrote {path}")
    return 0


def cmd_mutate(args: argparse.Namespace) -> int:
    from .mutation.report import command
    from .settings import CHECK_TIMEOUT, SettingError, resolve

    try:
        timeout = resolve(CHECK_TIMEOUT, cli=args.check_timeout)
    except SettingError as exc:
        print(exc)
        return 2

    def progress(mark: str) -> None:
        sys.stderr.write(mark)
        sys.stderr.flush()

    return command(
        args.lessons,
        every=args.all,
        exercise=args.exercise,
        limit=args.limit,
        json_path=args.json,
        timeout=timeout,
        out=lambda line: print(line, flush=True),
        progress=progress,
    )


def cmd_update(args: argparse.Namespace) -> int:
    from .update import UpdateError, update

    try:
        report = update(ref=args.ref)
    except UpdateError as exc:
        print(f"update: {exc}")
        return 1
    for line in report.lines():
        print(f"update: {line}")
    return 0


def cmd_site(args: argparse.Namespace) -> int:
    from .site.build import build_site

    build_site(args.out)
    return 0


def cmd_prebuild_cuda(args: argparse.Namespace) -> int:
    from .grading.prebuild_cuda import prebuild
    from .paths import is_lesson_path, lesson_notebooks

    notebooks = []
    for given in args.paths or [Path(".")]:
        if given.is_dir():
            notebooks += [nb for nb in lesson_notebooks() if nb.resolve().is_relative_to(given.resolve())]
        elif is_lesson_path(given):
            notebooks.append(given)
        else:
            print(f"prebuild-cuda: {given} is not a lesson notebook or a folder of them")
            return 2
    return 1 if prebuild(notebooks, args.jobs) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_algo", description="LLM Algo Lab: lessons, grading and tools")
    commands = parser.add_subparsers(dest="command", required=True)
    lint = commands.add_parser("lint", help="check that lesson notebooks keep the contract")
    lint.add_argument("paths", nargs="*", help="notebooks or folders (default: every lesson)")
    lint.set_defaults(func=cmd_lint)
    run = commands.add_parser("run", help="execute notebooks headlessly; the executed copy goes to .llm_algo/executed/")
    run.add_argument("notebooks", nargs="*")
    run.add_argument(
        "--solutions", action="store_true", help="run with the reference solutions in place of the exercises"
    )
    run.add_argument("--all", action="store_true", help="every lesson notebook")
    run.add_argument("--jobs", type=int, default=1, help="how many notebooks run at once, each in its own kernel")
    run.set_defaults(func=cmd_run)
    progress = commands.add_parser("progress", help="your per-part progress, from the last pytest runs")
    progress.add_argument("--plot", action="store_true", help="draw it per part and per lesson as a figure (PNG)")
    progress.add_argument("--out", type=Path, help="where --plot writes the figure (default .llm_algo/progress.png)")
    progress.set_defaults(func=cmd_progress)
    commands.add_parser("doctor", help="what this machine can run").set_defaults(func=cmd_doctor)
    update = commands.add_parser(
        "update", help="take the course's new version (git pull) and keep every exercise cell you wrote"
    )
    update.add_argument("--ref", help="merge this git ref (fast-forward only) instead of pulling")
    update.set_defaults(func=cmd_update)
    bench = commands.add_parser("bench", help="time a kernel lesson's reference solution (or yours) against PyTorch")
    bench.add_argument("lesson", help="lesson id, e.g. p03.softmax")
    bench.add_argument("--mine", action="store_true", help="time the kernel in your notebook instead of the reference")
    bench.set_defaults(func=cmd_bench)
    build = commands.add_parser(
        "build", help="(maintainers) write lesson notebooks from authoring/*.py and each part's README index"
    )
    build.add_argument("lessons", nargs="*", help="lesson ids (default: all)")
    build.add_argument("--force", action="store_true", help="overwrite notebooks edited by hand since they were built")
    build.set_defaults(func=cmd_build)
    mutate = commands.add_parser(
        "mutate",
        help="(authors) grade automatic mutants of the reference solutions; review every survivor",
        description="Generate small wrong versions of each exercise's reference solution (operator swaps, "
        "constants, axes, dropped casts and masks, deleted statements...) and grade each with the lesson's checks. "
        "Survivors are printed for review: kill each with a check, or record in "
        "tests/mutants/equivalent/<lesson>.txt why it is equivalent.",
    )
    mutate.add_argument("lessons", nargs="*", help="lesson ids (p02.rmsnorm) or notebook paths")
    mutate.add_argument("--all", action="store_true", help="every lesson")
    mutate.add_argument("--exercise", help="only this exercise's mutants")
    mutate.add_argument("--limit", type=int, help="grade at most N mutants per lesson (a fixed-seed sample)")
    mutate.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    mutate.add_argument("--check-timeout", help="seconds a check may run (default: the grader's setting)")
    mutate.set_defaults(func=cmd_mutate)
    site = commands.add_parser("site", help="build the course website (static HTML) from the notebooks")
    site.add_argument("--out", type=Path, help="the folder to write (default site/, ignored by git)")
    site.set_defaults(func=cmd_site)
    prebuild = commands.add_parser(
        "prebuild-cuda",
        help="(maintainers, on a GPU machine) build every CUDA C++ extension of these lessons and their mutants in "
        "parallel, so that a self-check only loads them",
    )
    prebuild.add_argument("paths", nargs="*", type=Path, help="notebooks or folders (default: every lesson)")
    prebuild.add_argument("--jobs", type=int, default=8, help="builds at once (default 8)")
    prebuild.set_defaults(func=cmd_prebuild_cuda)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
