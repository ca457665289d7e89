"""Project the self-check's time for a 120-lesson curriculum from today's lessons.

The lesson steps of `.ci/selfcheck` (`pytest --self-check`: every skeleton, solution and mutant, one child per
lesson; then every notebook headless, check cells deferred) run over today's lessons `--repeat` times, through the
same machinery and in fresh processes each time, so that 27 lessons four times over stand for about 120. The steps
that grow with the number of lessons (the lint, the learner view of a clean checkout) are timed once and scaled; the
rest (ruff, the package tests) are timed once as they are. The installation that `.ci/run` does first is not
counted. A benchmark, not a test: it prints numbers and fails only when a step fails.

    python scripts/bench_grading_scale.py               # 4 passes: the projection the target refers to
    python scripts/bench_grading_scale.py --repeat 1    # one pass: quicker, noisier
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_algo.paths import lesson_notebooks  # noqa: E402  (the checkout's package, whatever is installed)

TARGET_LESSONS = 120
TARGET_MINUTES = 15
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
PACKAGE_TESTS = [
    *PYTEST,
    "-n",
    "2",
    "tests/package",
    "--ignore=tests/package/test_lessons_headless.py",
    "--ignore=tests/package/test_authoring_sync.py",
]


def timed(name: str, command: list[str]) -> float:
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    print(f"  {name:<44} {seconds:7.1f} s", flush=True)
    if done.returncode != 0:
        print((done.stdout + done.stderr)[-3000:])
        sys.exit(f"{name} failed (exit code {done.returncode})")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=4, help="passes over today's lessons (default 4)")
    parser.add_argument("--skip-package-tests", action="store_true", help="leave the package tests out (counted 0)")
    args = parser.parse_args()
    lessons = len(lesson_notebooks(ROOT))
    print(f"{lessons} lessons, {args.repeat} pass{'es' * (args.repeat != 1)} ({lessons * args.repeat} lesson runs)")

    graded = headless = 0.0
    for repeat in range(1, args.repeat + 1):
        graded += timed(f"pass {repeat}: pytest --self-check", [*PYTEST, "--self-check"])
        headless += timed(f"pass {repeat}: headless runs", [*PYTEST, "tests/package/test_lessons_headless.py"])
    scaled = timed("lint", [sys.executable, "-m", "llm_algo", "lint"])
    scaled += timed("learner view of a clean checkout", PYTEST)
    fixed = timed("ruff", ["ruff", "check", "."]) + timed("ruff format", ["ruff", "format", "--check", "."])
    if not args.skip_package_tests:
        fixed += timed("package tests", PACKAGE_TESTS)

    runs = lessons * args.repeat
    per_lesson = (graded + headless) / runs
    projected = fixed + (per_lesson + scaled / lessons) * TARGET_LESSONS
    print(f"::: per lesson: {per_lesson:.1f} s ({graded / runs:.1f} s graded, {headless / runs:.1f} s headless)")
    print(f"::: today's {lessons} lessons: {(fixed + scaled + per_lesson * lessons) / 60:.1f} min")
    print(
        f"::: projected for {TARGET_LESSONS} lessons: {projected / 60:.1f} min "
        f"(target {TARGET_MINUTES} min; fixed steps {fixed:.0f} s, installation not counted)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
