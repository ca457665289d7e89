"""Checks for p01.fault_tolerance. References: a golden-section minimisation of Young's first-order waste and a grid
search of the exact goodput (for the intervals); Daly's published formula written out here; a Monte Carlo
simulation of exponential failures with a stated error (for the goodput); and, for the checkpoint writer, a forked
child process that the kernel kills with SIGXFSZ in the middle of writing (a file-size limit), after which the
previous checkpoint must load intact."""

import math
import os
import random
import resource
import signal
import tempfile

import torch

from llm_algo.check import Checks, expect, expect_close, expect_value_error

checks = Checks("p01.fault_tolerance")


def float64(value) -> torch.Tensor:
    return torch.tensor(float(value), dtype=torch.float64)


# ------------------------------------------------------------------------------------------ checkpoint_interval


def minimise(f, low: float, high: float) -> float:
    """Golden-section search for the minimum of a unimodal f on [low, high]."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    for _ in range(200):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if f(c) < f(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def exact_goodput(tau: float, delta: float, restart: float, mtbf: float) -> float:
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf))


HINT_YOUNG = "Young: tau = sqrt(2 * checkpoint_seconds * mtbf_seconds), the minimum of delta/tau + tau/(2M)"
HINT_DALY = "Daly: sqrt(2 d M) * (1 + sqrt(d/(2M))/3 + d/(2M)/9) - d for d < 2M, else M"


@checks("checkpoint_interval")
def young_minimises_first_order_waste(ex):
    """Young's interval is the minimum of delta/tau + tau/(2M) (golden-section search), seconds to days"""
    for delta, mtbf in ((60.0, 11160.0), (1.0, 3600.0), (300.0, 86400.0), (5.0, 40.0), (0.5, 1e7)):
        want = minimise(lambda tau, d=delta, m=mtbf: d / tau + tau / (2 * m), 1e-6, 1e9)
        got = ex.checkpoint_interval(delta, mtbf, "young")
        expect(
            abs(got - want) <= 1e-6 * want,
            "Young's interval is not the minimum of the first-order waste",
            input=f"checkpoint_seconds={delta}, mtbf_seconds={mtbf}",
            expected=f"{want:.6g} s",
            got=f"{got!r}",
            hint=HINT_YOUNG,
        )
    expect(
        ex.checkpoint_interval(60.0, 11160.0) == ex.checkpoint_interval(60.0, 11160.0, "young"),
        "the default method is not Young's",
        input="checkpoint_interval(60, 11160)",
        hint="method defaults to 'young'",
    )


@checks("checkpoint_interval")
def daly_formula_and_cap(ex):
    """Daly's estimate (published formula) for delta/M from 1e-5 to 1.9; M itself when delta >= 2M"""
    for delta, mtbf in ((60.0, 11160.0), (0.1, 1e4), (300.0, 3600.0), (190.0, 100.0), (1.0, 1.0)):
        r = delta / (2 * mtbf)
        want = math.sqrt(2 * delta * mtbf) * (1 + r**0.5 / 3 + r / 9) - delta
        got = ex.checkpoint_interval(delta, mtbf, "daly")
        expect_close(
            float64(got),
            float64(want),
            input=f"checkpoint_seconds={delta}, mtbf_seconds={mtbf}, daly",
            what="interval",
            hint=HINT_DALY,
        )
    for delta, mtbf in ((200.0, 100.0), (500.0, 100.0)):
        got = ex.checkpoint_interval(delta, mtbf, "daly")
        expect_close(
            float64(got),
            float64(mtbf),
            input=f"checkpoint_seconds={delta} >= 2 * mtbf_seconds={mtbf}",
            what="interval",
            hint="Daly caps the interval at M when delta >= 2M",
        )


@checks("checkpoint_interval")
def daly_is_near_the_true_optimum(ex):
    """the exact goodput at Daly's interval is within 0.05% of its maximum (grid search), closer than Young's"""
    for delta, restart, mtbf in ((60.0, 600.0, 11160.0), (600.0, 60.0, 7200.0), (30.0, 0.0, 1800.0)):
        best_tau = minimise(lambda tau, d=delta, r=restart, m=mtbf: -exact_goodput(tau, d, r, m), 1e-3, 20 * mtbf)
        best = exact_goodput(best_tau, delta, restart, mtbf)
        daly = exact_goodput(ex.checkpoint_interval(delta, mtbf, "daly"), delta, restart, mtbf)
        young = exact_goodput(ex.checkpoint_interval(delta, mtbf, "young"), delta, restart, mtbf)
        expect(
            best - daly <= 5e-4 * best and daly >= young - 1e-12,
            "Daly's interval is not close to the optimum of the exact model",
            input=f"checkpoint_seconds={delta}, restart={restart}, mtbf_seconds={mtbf}",
            expected=f"goodput >= {best * (1 - 5e-4):.6f} (best {best:.6f} at tau={best_tau:.1f} s)",
            got=f"{daly:.6f} (Young's interval gives {young:.6f})",
            hint=HINT_DALY,
        )


@checks("checkpoint_interval")
def refuses_bad_inputs(ex):
    """non-positive times and unknown methods: ValueError"""
    ex.checkpoint_interval(60.0, 3600.0, "daly")  # first: it works at all
    for args in ((0.0, 3600.0, "young"), (60.0, 0.0, "young"), (-1.0, 3600.0, "daly"), (60.0, 3600.0, "lazy")):
        expect_value_error(lambda args=args: ex.checkpoint_interval(*args), f"checkpoint_interval{args}", "validate")


# ------------------------------------------------------------------------------------------ expected_goodput


def simulate_goodput(tau: float, delta: float, restart: float, mtbf: float, segments: int, rng) -> tuple:
    """Monte Carlo: each segment must run tau + delta without a failure; after a failure, restart + tau + delta.
    Returns (mean useful fraction, its standard error) over batches of segments."""
    fractions = []
    for _ in range(40):
        wall = 0.0
        for _ in range(segments // 40):
            need = tau + delta
            while True:
                gap = rng.expovariate(1 / mtbf)
                if gap >= need:
                    wall += need
                    break
                wall += gap
                need = restart + tau + delta
        fractions.append(tau * (segments // 40) / wall)
    mean = sum(fractions) / len(fractions)
    spread = math.sqrt(sum((f - mean) ** 2 for f in fractions) / (len(fractions) - 1))
    return mean, spread / math.sqrt(len(fractions))


HINT_GOODPUT = "G = tau / (M * exp(R/M) * (exp((tau + delta)/M) - 1)): the segment is tau + delta, restarts can fail"


@checks("expected_goodput")
def matches_a_failure_simulation(ex):
    """4000 simulated segments per case (failures rare to frequent): within 4 standard errors"""
    rng = random.Random(torch.initial_seed())
    for tau, delta, restart, mtbf in ((1000.0, 60.0, 600.0, 3000.0), (200.0, 50.0, 300.0, 400.0), (50, 0, 0, 100.0)):
        mean, error = simulate_goodput(tau, delta, restart, mtbf, 4000, rng)
        got = ex.expected_goodput(tau, delta, restart, mtbf)
        expect(
            abs(got - mean) <= 4 * error,
            "the expected goodput disagrees with the failure simulation",
            input=f"interval={tau}, checkpoint={delta}, restart={restart}, mtbf={mtbf}",
            expected=f"{mean:.4f} ± {4 * error:.4f} (4 standard errors, 4000 segments)",
            got=f"{got:.4f}",
            hint=HINT_GOODPUT,
        )


@checks("expected_goodput")
def closed_form_cases(ex):
    """exact values, including huge MTBFs (-> tau / (tau + delta)) where exp(x) - 1 loses digits"""
    cases = [(1000.0, 60.0, 600.0, 11160.0), (1.0, 1.0, 1.0, 1.0), (3600.0, 0.0, 0.0, 1e6), (120.0, 30.0, 0.0, 1e12)]
    for tau, delta, restart, mtbf in cases:
        want = exact_goodput(tau, delta, restart, mtbf)
        got = ex.expected_goodput(tau, delta, restart, mtbf)
        expect_close(
            float64(got),
            float64(want),
            input=f"interval={tau}, checkpoint={delta}, restart={restart}, mtbf={mtbf}",
            what="goodput",
            hint=HINT_GOODPUT + " (math.expm1 for exp(x) - 1)",
        )
    got = ex.expected_goodput(120.0, 30.0, 600.0, 1e15)
    expect(
        abs(got - 0.8) <= 1e-6,
        "without failures the goodput is not tau / (tau + delta)",
        input="interval=120, checkpoint=30, restart=600, mtbf=1e15",
        expected="0.8",
        got=repr(got),
        hint="math.expm1((tau + delta) / M), not math.exp(...) - 1, which rounds to 0 or garbage at huge M",
    )


@checks("expected_goodput")
def refuses_bad_inputs_goodput(ex):
    """interval <= 0, negative checkpoint or restart time, mtbf <= 0: ValueError; zero checkpoint/restart is fine"""
    ex.expected_goodput(100.0, 0.0, 0.0, 1000.0)  # zero costs are valid
    for args in ((0.0, 1.0, 1.0, 100.0), (10.0, -1.0, 1.0, 100.0), (10.0, 1.0, -1.0, 100.0), (10.0, 1.0, 1.0, 0.0)):
        expect_value_error(lambda args=args: ex.expected_goodput(*args), f"expected_goodput{args}", "validate")


# ------------------------------------------------------------------------------------------ save/load_checkpoint


def sample_state(step: int, size: int) -> dict:
    return {
        "step": step,
        "model": {"weight": torch.randn(size), "bias": torch.randn(3, dtype=torch.float64)},
        "rng": torch.get_rng_state(),
        "note": f"checkpoint {step}",
    }


def same_state(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def killed_while_saving(ex, state: dict, path: str, limit_bytes: int) -> int:
    """Run ex.save_checkpoint(state, path) in a forked child limited to files of limit_bytes: the kernel sends
    SIGXFSZ (default action: terminate) at the write that crosses it. Returns the child's wait status."""
    pid = os.fork()
    if pid == 0:  # the child: never return into the grader
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; restore the kernel's kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
            ex.save_checkpoint(state, path)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status


def expect_only_the_checkpoint(folder: str, summary: str, label: str, hint: str) -> None:
    """The directory of the checkpoint holds ckpt.pt and nothing else (no temporary file left behind)."""
    left = sorted(os.listdir(folder))
    expect(left == ["ckpt.pt"], summary, input=label, expected="['ckpt.pt']", got=str(left), hint=hint)


@checks("save_checkpoint")
def round_trip_and_overwrite(ex):
    """save then load gives the same tensors, dtypes and values; a second save replaces the first; none -> None"""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        expect(
            ex.load_checkpoint(path) is None,
            "no checkpoint yet, but load_checkpoint did not return None",
            input="an empty directory",
            hint="return None when path does not exist",
        )
        first, second = sample_state(5, 1000), sample_state(10, 37)
        ex.save_checkpoint(first, path)
        expect(
            same_state(first, ex.load_checkpoint(path)),
            "the loaded checkpoint differs from the saved one",
            input="state with step 5, a (1000,) tensor, a float64 bias, the RNG state",
            hint="torch.save/torch.load",
        )
        ex.save_checkpoint(second, path)
        loaded = ex.load_checkpoint(path)
        expect(
            same_state(second, loaded),
            "the second save did not replace the first",
            input="saved step 5, then step 10",
            expected="step 10",
            got=f"step {loaded and loaded.get('step')}",
            hint="os.replace the temporary file onto path",
        )
        expect_only_the_checkpoint(
            folder, "files left behind after two successful saves", folder, "the temporary file is renamed, not copied"
        )


@checks("save_checkpoint")
def survives_a_kill_mid_write(ex):
    """a child killed by the kernel (SIGXFSZ) halfway through saving: the previous checkpoint still loads intact"""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        old = sample_state(100, 2000)  # about 8 KB
        ex.save_checkpoint(old, path)
        status = killed_while_saving(ex, sample_state(200, 400_000), path, 256 * 1024)  # 1.6 MB, cut at 256 KB
        expect(
            os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXFSZ,
            "the child was not killed mid-write",
            input="save_checkpoint of a 1.6 MB state under a 256 KB file-size limit",
            expected="killed by SIGXFSZ while writing",
            got=f"exit status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"signal {os.WTERMSIG(status)}",
            hint="write the whole state with torch.save (one file), do not catch signals",
        )
        try:
            loaded = ex.load_checkpoint(path)
        except NotImplementedError:
            raise
        except Exception as error:
            expect(
                False,
                "the checkpoint on disk is corrupt after a crash mid-write",
                input="saved step 100, then a save of step 200 killed halfway",
                expected="step 100, intact",
                got=f"{type(error).__name__}: {str(error)[:100]}",
                hint="write to a temporary file in the same directory, then os.replace it onto path",
            )
        expect(
            same_state(old, loaded),
            "after a crash mid-write the previous checkpoint is not intact",
            input="saved step 100, then a save of step 200 killed halfway",
            expected="the step 100 checkpoint",
            got=f"{type(loaded).__name__}" + (f" step {loaded.get('step')}" if isinstance(loaded, dict) else ""),
            hint="never write into path itself: a temporary file, then os.replace",
        )
        ex.save_checkpoint(sample_state(300, 50), path)  # the next save works despite the debris
        expect(
            ex.load_checkpoint(path)["step"] == 300,
            "saving after a crash failed",
            input="step 300",
            hint="a leftover temporary file must not stop the next save",
        )


class Unpicklable:
    """A value torch.save cannot write: pickling it raises after part of the state is already in the file."""

    def __reduce__(self):
        raise TypeError("this object cannot be pickled (a stand-in for an open file or a lambda in the state)")


@checks("save_checkpoint")
def failed_save_leaves_no_temporary_file(ex):
    """a state torch.save cannot pickle: the error reaches the caller, the old checkpoint stays, no stray file"""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        good = sample_state(3, 500)
        ex.save_checkpoint(good, path)
        bad = {**sample_state(4, 500), "callback": Unpicklable()}
        label = "saved step 3, then save_checkpoint of a state holding an unpicklable object"
        try:
            ex.save_checkpoint(bad, path)
            raised = None
        except NotImplementedError:
            raise
        except Exception as error:
            raised = error
        expect(
            raised is not None,
            "save_checkpoint returned normally although torch.save failed",
            input=label,
            expected="the pickling error raised to the caller",
            got="returned None",
            hint="clean up in an except block and re-raise: a caller must know the checkpoint was not written",
        )
        expect_only_the_checkpoint(
            folder,
            "a failed save left a file behind",
            label,
            "except BaseException: remove the temporary file, then raise; every failed save would otherwise leave one "
            "more partial checkpoint on the disk",
        )
        expect(
            same_state(good, ex.load_checkpoint(path)),
            "the previous checkpoint changed after a failed save",
            input=label,
            expected="the step 3 checkpoint",
            hint="write to a temporary file; os.replace only after torch.save succeeded",
        )


@checks("save_checkpoint")
def ignores_debris_and_stays_in_the_directory(ex):
    """half-written temporary files next to the checkpoint are never loaded; the temporary file is made beside path"""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        expect(
            ex.load_checkpoint(path) is None,
            "load_checkpoint found a checkpoint in an empty directory",
            input="empty directory",
            hint="return None when path does not exist",
        )
        good = sample_state(7, 64)
        ex.save_checkpoint(good, path)
        for name in os.listdir(folder):
            if name != "ckpt.pt":
                os.remove(os.path.join(folder, name))
        with open(path, "rb") as file:
            payload = file.read()
        for debris in ("ckpt.pt.tmp", ".ckpt.pt.tmp", "ckpt.pt.partial", ".ckpt-123.tmp"):
            with open(os.path.join(folder, debris), "wb") as file:
                file.write(payload[: len(payload) // 3])  # what a crash leaves
        expect(
            same_state(good, ex.load_checkpoint(path)),
            "a half-written temporary file was loaded",
            input="ckpt.pt plus truncated temporary files beside it",
            expected="the ckpt.pt checkpoint",
            hint="load path itself, never a temporary file",
        )
        seen = []
        real_replace, real_rename = os.replace, os.rename

        def watching(real):
            def move(source, target, *args, **kwargs):
                seen.append((os.fspath(source), os.fspath(target)))
                return real(source, target, *args, **kwargs)

            return move

        os.replace, os.rename = watching(real_replace), watching(real_rename)
        try:
            ex.save_checkpoint(sample_state(8, 64), path)
        finally:
            os.replace, os.rename = real_replace, real_rename
        sources = [source for source, target in seen if os.path.abspath(target) == os.path.abspath(path)]
        expect(
            len(sources) == 1 and os.path.dirname(os.path.abspath(sources[0])) == os.path.abspath(folder),
            "the checkpoint was not renamed into place from a file in the same directory",
            input=path,
            expected=f"one os.replace(<temporary file in {folder}>, {path})",
            got=str(seen)[:200] if seen else "no os.replace or os.rename onto path",
            hint="tempfile.mkstemp(dir=os.path.dirname(path)) then os.replace(temporary, path): same filesystem",
        )
