"""Source of 01_Hardware_Math_Systems/17_Fault_Tolerance.ipynb (build with `python -m llm_algo build
p01.fault_tolerance`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.fault_tolerance",
        path="01_Hardware_Math_Systems/17_Fault_Tolerance.ipynb",
        title_en="Checkpointing and failures",
        title_zh="检查点与故障",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.params_and_flops"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 大规模训练一定会出故障：Llama 3 在 16k 张 H100 上 54 天内有 419 次意外中断，约每 3 小时一次。
        - 检查点 (checkpoint) 间隔 $\tau$ 的取舍：太密浪费写检查点的时间 $\delta$，太疏则故障时丢失更多计算。
          Young 公式 $\tau^* = \sqrt{2\delta M}$（$M$ 为平均故障间隔 MTBF），Daly 给出高阶修正。
        - 指数分布故障下的期望有效吞吐 (goodput) 有闭式：$\tau / \big(M e^{R/M} (e^{(\tau+\delta)/M} - 1)\big)$，
          $R$ 为重启时间；用蒙特卡洛模拟验证。
        - 原子写 (atomic write)：先写临时文件、`flush` + `fsync`，再 `os.replace` 改名；进程在写到一半被杀，
          旧检查点仍完好。直接覆盖写会留下截断的文件。
        - 评分时会真的在子进程写到一半时把它杀掉。
        {易错点}

        Long training runs fail, and not rarely. Meta's Llama 3 report (arXiv:2407.21783, Sec. 3.3.4) counts 466 job
        interruptions in a 54-day snapshot of pre-training on up to 16,384 H100 GPUs, 419 of them unexpected (78%
        attributed to hardware): one unplanned stop every 3.1 hours, and they still kept more than 90% effective
        training time. Every failure throws away the work done since the last checkpoint, plus the time to restart;
        every checkpoint costs the time to write it. This lesson computes the best interval between checkpoints, the
        fraction of time that is left for training (goodput), and writes the checkpoint so that a crash *during*
        the write cannot destroy the last good one.

        **You will implement** Young's and Daly's checkpoint intervals, the exact expected goodput under exponential
        failures, and an atomic, resumable checkpoint save/load. **Graded against** a numerical minimisation of the
        waste model, a Monte Carlo simulation of failures with a stated error, and a child process that the grader
        kills with a signal in the middle of writing your checkpoint.
    """
    )
    lesson.md(r"""
        ## 1. The trade-off, with symbols

        | symbol | meaning | unit |
        | --- | --- | --- |
        | $\tau$ | useful compute between two checkpoints (the interval) | s |
        | $\delta$ | time to write one checkpoint (training stalls meanwhile) | s |
        | $R$ | time to restart after a failure: reschedule, reload the checkpoint, warm up | s |
        | $M$ | mean time between failures of the *whole job* (MTBF, 平均故障间隔) | s |

        A job's MTBF is the per-node MTBF divided by the number of nodes: failures of 2,000 independent servers add
        up. **Young's first-order model** (J. W. Young, *A first order approximation to the optimum checkpoint
        interval*, CACM 1974): per segment of $\tau + \delta$, the waste is the checkpoint $\delta$, plus, with
        probability about $(\tau + \delta)/M$, a failure that loses on average half the segment. Per unit of useful
        time, to first order,

        $$
        \text{waste}(\tau) \approx \frac{\delta}{\tau} + \frac{\tau}{2M}
        \quad\Rightarrow\quad \frac{d}{d\tau} = -\frac{\delta}{\tau^2} + \frac{1}{2M} = 0
        \quad\Rightarrow\quad \tau_{\text{Young}} = \sqrt{2 \delta M}.
        $$

        **Daly's higher-order estimate** (J. T. Daly, *A higher order estimate of the optimum checkpoint interval for
        restart dumps*, Future Generation Computer Systems, 2006) keeps more terms of the exact model below:

        $$
        \tau_{\text{Daly}} = \sqrt{2\delta M}\left[1 + \frac13 \sqrt{\frac{\delta}{2M}} + \frac19 \frac{\delta}{2M}\right]
        - \delta \quad (\delta < 2M), \qquad \tau_{\text{Daly}} = M \quad (\delta \ge 2M).
        $$

        With Llama 3's $M \approx 3.1$ h and, say, $\delta = 60$ s, Young gives $\sqrt{2 \cdot 60 \cdot 11160}
        \approx 1157$ s: a checkpoint about every 19 minutes.

        ## 2. Exercise `checkpoint_interval`

        Return $\tau$ in seconds for `method="young"` or `"daly"`. Refuse `checkpoint_seconds <= 0`,
        `mtbf_seconds <= 0` and any other method (`ValueError`).
    """)
    lesson.setup(r"""
        import math
        import os
        import tempfile

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.exercise(
        "checkpoint_interval",
        r'''
        def checkpoint_interval(checkpoint_seconds: float, mtbf_seconds: float, method: str = "young") -> float:
            """The checkpoint interval tau (seconds of useful work between checkpoints): Young's or Daly's."""
            # TODO: refuse non-positive times and unknown methods (ValueError)
            # TODO: Young: sqrt(2 delta M); Daly: the bracketed correction minus delta, or M when delta >= 2M
            ### BEGIN SOLUTION
            if checkpoint_seconds <= 0 or mtbf_seconds <= 0:
                raise ValueError("checkpoint_seconds and mtbf_seconds must be positive")
            young = math.sqrt(2 * checkpoint_seconds * mtbf_seconds)
            if method == "young":
                return young
            if method != "daly":
                raise ValueError(f"method must be 'young' or 'daly', not {method!r}")
            if checkpoint_seconds >= 2 * mtbf_seconds:
                return float(mtbf_seconds)
            ratio = checkpoint_seconds / (2 * mtbf_seconds)
            return young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_seconds
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Expected goodput, exactly

        Model failures as a Poisson process of rate $1/M$ (exponential gaps, no memory). A segment needs $t = \tau +
        \delta$ seconds without a failure. A task of length $s$ that restarts from scratch at each failure takes
        $M (e^{s/M} - 1)$ seconds on average. The first attempt of a segment either succeeds or, after
        $\mathbb{E}[\min(X, t)] = M (1 - e^{-t/M})$ seconds, fails with probability $1 - e^{-t/M}$; every later
        attempt must also redo the restart, a task of length $R + t$. Adding up,

        $$
        \mathbb{E}[\text{time per segment}] = M (1 - e^{-t/M}) + (1 - e^{-t/M})\, M \big(e^{(R+t)/M} - 1\big)
        = M e^{R/M} \left(e^{(\tau + \delta)/M} - 1\right),
        $$

        Daly's expected wall time per segment, and the goodput (有效训练时间占比) is the useful part of it:

        $$
        G(\tau) = \frac{\tau}{M e^{R/M} \left(e^{(\tau+\delta)/M} - 1\right)} \in (0, 1).
        $$

        For $M \to \infty$ it tends to $\tau / (\tau + \delta)$, the cost of checkpointing alone.

        ## 4. Exercise `expected_goodput`

        Return $G$ as a float. Refuse `interval <= 0`, `checkpoint_seconds < 0`, `restart_seconds < 0`,
        `mtbf_seconds <= 0` (`ValueError`). `math.expm1` keeps $e^{x} - 1$ accurate when $x$ is tiny.
    """)
    lesson.exercise(
        "expected_goodput",
        r'''
        def expected_goodput(interval: float, checkpoint_seconds: float, restart_seconds: float,
                             mtbf_seconds: float) -> float:
            """Expected fraction of wall time spent on useful work, exponential failures of mean mtbf_seconds."""
            # TODO: validate (ValueError)
            # TODO: expected wall time of one segment (restarts included), then the useful fraction
            ### BEGIN SOLUTION
            if interval <= 0 or checkpoint_seconds < 0 or restart_seconds < 0 or mtbf_seconds <= 0:
                raise ValueError("need interval > 0, mtbf_seconds > 0 and non-negative checkpoint/restart times")
            segment = interval + checkpoint_seconds  # must run without a failure
            wall = mtbf_seconds * math.exp(restart_seconds / mtbf_seconds) * math.expm1(segment / mtbf_seconds)
            return interval / wall
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Goodput against the interval

        $M = 3.1$ h (Llama 3's rate of unexpected interruptions), $R = 10$ min, and checkpoints of 10 s, 60 s and
        5 min. The dots are Young's and Daly's intervals.
    """)
    lesson.code(r"""
        M, R = 3.1 * 3600, 600.0
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for delta in (10.0, 60.0, 300.0):
            taus = [30 * 1.05**i for i in range(120)]
            try:
                goodput = [expected_goodput(t, delta, R, M) for t in taus]
                young, daly = checkpoint_interval(delta, M, "young"), checkpoint_interval(delta, M, "daly")
                who = "yours"
            except NotImplementedError:
                goodput = [t / (M * math.exp(R / M) * math.expm1((t + delta) / M)) for t in taus]
                young = math.sqrt(2 * delta * M)
                r = delta / (2 * M)
                daly = young * (1 + math.sqrt(r) / 3 + r / 9) - delta
                who = "formula"
            line, = ax.plot([t / 60 for t in taus], [100 * g for g in goodput], label=f"δ = {delta:.0f} s")
            best = max(goodput)
            print(f"delta {delta:5.0f} s: Young {young / 60:6.1f} min, Daly {daly / 60:6.1f} min, "
                  f"best goodput {100 * best:.2f}% ({who})")
            for tau, marker in ((young, "o"), (daly, "s")):
                g = tau / (M * math.exp(R / M) * math.expm1((tau + delta) / M))
                ax.plot(tau / 60, 100 * g, marker, color=line.get_color())
        ax.set_xscale("log"); ax.set_xlabel("checkpoint interval τ (minutes)"); ax.set_ylabel("goodput (%)")
        ax.set_ylim(70, 100); ax.grid(alpha=0.3); ax.legend(fontsize=8)
        ax.set_title("M = 3.1 h, R = 10 min (o Young, ■ Daly)")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        The curve is flat near its top: with $\delta = 60$ s, half or twice the optimal interval costs about 2 points
        of goodput (85.3% to 83.2%), a tenth or ten times costs 24 to 31 points. The restart alone sets a ceiling:
        even with free checkpoints, $R = 10$ min every 3.1 hours caps goodput near $1 - R/M \approx 95\%$. Cheaper checkpoints (asynchronous writes, sharded saves, in-memory copies on peer nodes) move the whole
        curve up and the optimum to shorter intervals, and the restart time $R$ is paid on every failure whatever
        the interval: that is why large runs invest as much in fast restarts as in fast checkpoints.

        ## 5. A checkpoint that survives a crash while it is written

        A checkpoint of a large model is written for seconds to minutes, and the process can die at any moment:
        a node fails, the scheduler preempts the job, the disk fills up. If the save *overwrites* the previous file,
        a crash mid-write leaves a truncated file under the only name you have: the run has lost both the old and the
        new checkpoint. The standard recipe, used by every serious trainer, makes the switch from old to new a single
        atomic step:

        1. write the new checkpoint to a **temporary file in the same directory** (same filesystem, so that the
           rename below is atomic);
        2. `flush()` and `os.fsync()` it, so the bytes are on the disk and not only in the page cache;
        3. `os.replace(temporary, path)`: POSIX `rename(2)` replaces the name atomically, so a reader sees either the
           old file or the new one, never a mix;
        4. `fsync` the directory, so the rename itself survives a power loss.

        A crash before step 3 leaves the old checkpoint intact and, at worst, a stray temporary file, which
        `load_checkpoint` must ignore (and `save_checkpoint` may overwrite).

        ## 6. Exercise `save_checkpoint` / `load_checkpoint`

        `save_checkpoint(state, path)` writes a dict of tensors and Python values (`torch.save`) atomically to
        `path`. `load_checkpoint(path)` returns the last complete checkpoint (`torch.load`) or `None` when there is
        none. The grader writes one checkpoint, then runs your `save_checkpoint` in a child process with a file-size
        limit, so that the kernel kills it with `SIGXFSZ` halfway through writing the next, larger one, and finally
        calls your `load_checkpoint`.
    """)
    lesson.exercise(
        "save_checkpoint",
        r'''
        def save_checkpoint(state: dict, path: str) -> None:
            """Write state to path atomically: a crash at any moment leaves either the old or the new checkpoint."""
            # TODO: a temporary file in the same directory as path (tempfile.mkstemp(dir=...))
            # TODO: torch.save into it, flush, os.fsync; then os.replace onto path; then fsync the directory
            # TODO: if anything fails, remove the temporary file and re-raise
            ### BEGIN SOLUTION
            directory = os.path.dirname(os.path.abspath(path))
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=".ckpt-", suffix=".tmp")
            try:
                with os.fdopen(handle, "wb") as file:
                    torch.save(state, file)
                    file.flush()
                    os.fsync(file.fileno())  # the bytes are on disk before the name points at them
                os.replace(temporary, path)  # atomic: readers see the old file or the new one
            except BaseException:
                if os.path.exists(temporary):
                    os.remove(temporary)
                raise
            directory_handle = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(directory_handle)  # the rename itself is durable
            finally:
                os.close(directory_handle)
            ### END SOLUTION


        def load_checkpoint(path: str):
            """The last complete checkpoint saved at path, or None when there is none yet."""
            # TODO: None when path does not exist; otherwise torch.load it (temporary files are never read)
            ### BEGIN SOLUTION
            if not os.path.exists(path):
                return None
            return torch.load(path, weights_only=True)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Resuming a run

        A toy loop that saves every 5 steps and "crashes" at step 13; the rerun resumes from step 10 with the same
        model, optimizer and random state, and ends where an uninterrupted run ends.
    """)
    lesson.code(r"""
        def train(total_steps, path, crash_at=None):
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            start = 0
            try:
                saved = load_checkpoint(path)
            except NotImplementedError:
                saved = None
            if saved is not None:
                model.load_state_dict(saved["model"]); optimizer.load_state_dict(saved["optimizer"])
                torch.set_rng_state(saved["rng"]); start = saved["step"]
                print(f"resumed at step {start}")
            for step in range(start, total_steps):
                if step == crash_at:
                    print(f"crash at step {step}")
                    return None
                x = torch.randn(8, 4)
                loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                if (step + 1) % 5 == 0:
                    state = {"step": step + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "rng": torch.get_rng_state()}
                    try:
                        save_checkpoint(state, path)
                    except NotImplementedError:
                        pass
            return model.weight.detach().clone()


        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "run.pt")
            train(20, path, crash_at=13)
            resumed = train(20, path)
        with tempfile.TemporaryDirectory() as folder:
            straight = train(20, os.path.join(folder, "run.pt"))
        print("resumed run == uninterrupted run:", torch.equal(resumed, straight))
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`checkpoint_interval`.** Young's formula balances the two first-order wastes; Daly's adds the next terms
        and caps the interval at $M$ when a checkpoint costs more than two MTBFs (no interval then does much good).
        The usual mistakes: *$\sqrt{\delta M}$* (the factor 2 of the half-segment lost on average),
        *$\sqrt{2\delta/M}$* (units: the interval must grow with $M$), *Daly without the $-\delta$*.

        **`expected_goodput`.** The mistakes: *the restart paid without its own risk* ($R$ added instead of the
        factor $e^{R/M}$: restarts fail too), *$\tau$ alone must survive* (the checkpoint write is part of the segment
        that has to finish), and *$e^x - 1$ by `math.exp(x) - 1`*, which loses digits at large $M$ (here a
        precision detail; in a float32 version of this formula it is the whole answer).

        **`save_checkpoint` / `load_checkpoint`.** The mistakes: *`torch.save(state, path)` directly* (a kill
        mid-write leaves a truncated zip that `torch.load` rejects: the old checkpoint is gone), *a temporary file
        in `/tmp`* (another filesystem: `os.replace` is no longer atomic, or fails with `EXDEV`), and *loading the
        temporary file when it is there* ("it is newer"): it is exactly the file a crash leaves half-written, and *the
        temporary file never removed when `torch.save` raises* (an unpicklable object in the state: every failed save
        leaves one more partial file on the disk; the checks save such a state and list the directory). A kill
        cannot test `fsync` (the page cache survives a process death, not a power loss), which is why it is a rule to
        follow rather than a check.

        **Production.** PyTorch Distributed Checkpoint (`torch.distributed.checkpoint`) writes one shard per rank
        plus a metadata file written last, which plays the role of the rename; `dcp.async_save` copies the state to
        CPU memory and writes in the background, so $\delta$ seen by training is the copy, not the write. Megatron
        and NeMo keep the last few checkpoints and a `latest` marker updated after the shards are complete.
        Gemini-style in-memory checkpoints (keeping copies on peer hosts' RAM) shrink both $\delta$ and $R$; the
        Llama 3 report attributes its >90% effective training time to automation that restarts the job quickly.
    """)
    lesson.mistakes()
    return lesson
