"""Earlier lessons loaded once per process: what `use(...)` needs (a lesson's namespace in a mode, the learner's
verdict on one exercise, a checks registry), memoised by lesson, mode and the content of the code that ran.

A lesson's setup cell may itself borrow from earlier lessons, so an entry also remembers the fingerprints of every
lesson it borrowed from; it is used again only while all of them are unchanged (a learner who fixes an earlier
notebook and re-runs a later setup cell gets the fix). Notebooks are parsed again only when their file changed.
The learner's verdicts are also kept on disk (.llm_algo/verdicts/), keyed by everything they depend on, so that
a new kernel does not run an earlier lesson's checks again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..check.api import Checks, load_checks
from ..notebook import Lesson, Mode, NotebookError, read_lesson
from ..outcome import CheckResult
from ..paths import checks_module_path, lesson_notebooks, repo_root, state_dir
from ..settings import GRADE_UNTOUCHED, resolve
from ..state_files import write_atomically
from .execute import LoadedLesson, load_namespace
from .run import check_exercise

Fingerprint = tuple[str, str, str]  # (notebook path, mode, code hash)

# Whether an exercise cell still holding its skeleton is graded for real (the self-check) or called not attempted
# on sight (a learner's run); None: the setting (environment, default) decides.
GRADE_UNTOUCHED_NOW: ContextVar[bool | None] = ContextVar("llm_algo_grade_untouched", default=None)


def grade_untouched() -> bool:
    forced = GRADE_UNTOUCHED_NOW.get()
    return bool(resolve(GRADE_UNTOUCHED)) if forced is None else forced


@dataclass
class _Loaded:
    loaded: LoadedLesson | None
    error: Exception | None  # the notebook did not run (its setup cell failed)
    borrowed: set[Fingerprint]  # this lesson's own fingerprint and those of every lesson its cells borrowed from
    verdicts: dict[tuple[str, str], list[CheckResult]] = field(default_factory=dict)  # (exercise, checks hash)


_files: dict[Path, tuple[str, Lesson]] = {}
_namespaces: dict[Fingerprint, _Loaded] = {}
_registries: dict[tuple[str, str], Checks] = {}
_borrowing: ContextVar[set[Fingerprint] | None] = ContextVar("llm_algo_borrowing", default=None)


def clear() -> None:
    _files.clear()
    _namespaces.clear()
    _registries.clear()


def lesson_at(path: Path) -> Lesson:
    """The notebook at `path`, parsed again only when the file's content changed (hashing it is much cheaper than
    parsing it; a file's time stamp may not change between two quick writes)."""
    stamp = hashlib.sha1(path.read_bytes()).hexdigest()
    cached = _files.get(path)
    if cached is None or cached[0] != stamp:
        cached = (stamp, read_lesson(path))
        _files[path] = cached
    return cached[1]


def _fingerprint(lesson: Lesson, mode: Mode) -> Fingerprint:
    return (str(lesson.path), mode, lesson.code_hash(mode))


def _still_current(fingerprint: Fingerprint) -> bool:
    path, mode, code = fingerprint
    try:
        return lesson_at(Path(path)).code_hash(mode) == code
    except Exception:  # gone, unreadable, no longer a lesson
        return False


def _note_borrowed(fingerprints: set[Fingerprint]) -> None:
    """Tell the load in progress (if any: a setup cell calling `use`) which lessons it depends on."""
    outer = _borrowing.get()
    if outer is not None:
        outer.update(fingerprints)


def namespace(lesson: Lesson, mode: Mode) -> LoadedLesson:
    """The lesson's namespace in `mode`, loaded quietly once per content; raises what loading raised."""
    fingerprint = _fingerprint(lesson, mode)
    entry = _namespaces.get(fingerprint)
    if entry is None or not all(_still_current(f) for f in entry.borrowed):
        borrowed = {fingerprint}
        token = _borrowing.set(borrowed)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                entry = _Loaded(load_namespace(lesson, mode), None, borrowed)
        except NotebookError as exc:  # remembered too: a broken notebook is not run again until it changes
            entry = _Loaded(None, exc, borrowed)
        finally:
            _borrowing.reset(token)
        _namespaces[fingerprint] = entry
    _note_borrowed(entry.borrowed)
    if entry.error is not None:
        raise entry.error
    return entry.loaded


@lru_cache(maxsize=1)
def _lesson_index() -> dict[str, Path]:
    index = {}
    for path in lesson_notebooks():
        try:
            index[lesson_at(path).id] = path
        except (NotebookError, OSError):
            continue
    return index


def find_lesson(lesson_id: str) -> Lesson:
    path = _lesson_index().get(lesson_id)
    if path is None:
        raise NotebookError(f"no lesson with id {lesson_id!r} in this checkout")
    try:
        return lesson_at(path)
    except FileNotFoundError:
        return read_lesson(path)  # says which notebook is gone


def registry(lesson_id: str) -> Checks:
    """The lesson's checks, imported again only when the checks module changed."""
    path = checks_module_path(lesson_id)
    key = (lesson_id, _file_hash(path))
    if key not in _registries:
        _registries[key] = load_checks(lesson_id)
    return _registries[key]


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def learner_verdict(lesson: Lesson, exercise: str, learner: LoadedLesson) -> list[CheckResult]:
    """The results of the exercise's checks on the learner's namespace (from `namespace(lesson, "learner")`),
    run once per content of the notebook and of the checks, and kept on disk for the next process."""

    checks = registry(lesson.id)
    entry = _namespaces[_fingerprint(lesson, "learner")]
    key = (exercise, _file_hash(checks_module_path(lesson.id)))
    if key not in entry.verdicts:
        stored = _verdict_file(lesson.id, exercise, entry.borrowed)
        results = _read_verdict(stored)
        if results is None:
            with contextlib.redirect_stdout(io.StringIO()):
                results = check_exercise(checks.for_exercise(exercise), learner, lesson, checks)
            _write_verdict(stored, results)
        entry.verdicts[key] = results
    return entry.verdicts[key]


# ----------------------------------------------------------------------------- verdicts kept between processes
# A later lesson's setup cell in a new kernel (or a grading child) need not run an earlier lesson's checks again
# when nothing they depend on has changed: the learner's code (and that of every lesson it borrowed from), the
# checks, the package, torch and the device. Kept under .llm_algo/verdicts/, one small file per verdict.


@lru_cache(maxsize=1)
def _package_fingerprint() -> str:
    import platform

    import torch

    from .. import device

    digest = hashlib.sha1()
    package = Path(__file__).parent.parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + path.read_bytes())
    digest.update(f"{torch.__version__} {platform.python_version()} {device.policy().describe()}".encode())
    return digest.hexdigest()


def _checks_fingerprint() -> str:
    digest = hashlib.sha1()
    folder = repo_root() / "tests" / "checks"
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def _verdict_file(lesson_id: str, exercise: str, borrowed: set[Fingerprint]) -> Path:
    what = json.dumps([lesson_id, exercise, sorted(borrowed), _checks_fingerprint(), _package_fingerprint()])
    return state_dir() / "verdicts" / f"{hashlib.sha256(what.encode()).hexdigest()[:32]}.json"


def _read_verdict(path: Path) -> list[CheckResult] | None:
    try:
        return [CheckResult(key, outcome) for key, outcome in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return None


def _write_verdict(path: Path, results: list[CheckResult]) -> None:
    with contextlib.suppress(OSError):  # a read-only checkout grades as before, only slower
        write_atomically(path, json.dumps([[r.key, str(r.outcome)] for r in results]))
