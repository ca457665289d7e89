"""Source of 02_PyTorch_Algorithms/45_Pipeline_Parallel.ipynb (build with `python -m llm_algo build p02.pipeline_parallel`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.pipeline_parallel",
        path="02_PyTorch_Algorithms/45_Pipeline_Parallel.ipynb",
        title_en="Pipeline parallelism: GPipe and 1F1B schedules over micro-batches",
        title_zh="流水线并行：GPipe 与 1F1B 微批次调度",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p01.collectives_cost", "p02.grad_accum_clip", "p02.tensor_parallel"],
    )
    lesson.title(
        intro=r"""
        Tensor parallelism splits every layer, but it all-reduces activations twice per layer and so stays inside
        one NVLink node. To spread a model over more GPUs, **pipeline parallelism** (流水线并行, PP) gives each of
        $p$ GPUs a contiguous block of layers, a *stage*; the only traffic is one activation tensor forward and one
        gradient backward between neighbouring stages, cheap enough for the network between nodes. Megatron-LM
        trained a 1-trillion-parameter GPT on 3072 A100s with 8-way tensor and 64-way pipeline parallelism at 52% of
        peak throughput (Narayanan et al., 2021, *Efficient Large-Scale Language Model Training on GPU Clusters
        Using Megatron-LM*). The price is the **bubble**: stage $p$ waits for the first micro-batch to cross the
        pipeline, and stage 1 waits for the last gradient to come back.

        **You will implement** the two classic schedules as data (per stage, the ordered list of forward and backward
        ops over $m$ micro-batches: GPipe and 1F1B) with the number of activations each stage keeps alive; a
        simulator that times any schedule and measures its bubble; and the runtime that executes a schedule in real
        `torch.distributed` processes (gloo on this CPU, NCCL on GPUs), one stage per rank, exchanging activations
        and gradients with `isend`/`recv`. **Graded against** hand-derived schedule tables, the order in which
        `torch.distributed.pipelining`'s `ScheduleGPipe` and `Schedule1F1B` really run their micro-batches (recorded
        in gloo worlds of 2 to 4 processes by `scripts/make_pipeline_orders.py`), the
        closed form $(p-1)/(m+p-1)$ of the bubble, an independent longest-path timing, and the gradients of
        single-process training of the whole model on the whole batch, in a world of 3 processes and on a group of 2
        ranks inside a world of 3 whose other rank must receive nothing (with a frozen and an unused parameter).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：张量并行每层都要 all-reduce，只能留在一台机器内；流水线并行把连续的层分给 $p$ 个 stage，相邻 stage 之间只传一次激活（前向）和一次梯度（反向），可以跨机器。
        - **微批次**：把 batch 切成 $m$ 个 micro-batch 依次送入流水线；每个 stage 的每个 micro-batch 有一个前向 F 和一个反向 B。
        - **气泡（bubble）**：流水线填充和排空时的空闲；GPipe 与 1F1B 的气泡比例都是 $\dfrac{p-1}{m+p-1}$，只有增大 $m$ 才能减小。
        - **GPipe**：先做完全部 $m$ 个前向再做全部反向，每个 stage 要同时保存 $m$ 份激活。
        - **1F1B**：stage $s$ 先做 $\min(p-s-1, m)$ 个前向预热，然后前向与反向交替，最后排空；同一时刻最多保存 $\min(p-s, m)$ 份激活，与 $m$ 无关。
        - **实现**：发送用 `isend`（非阻塞），接收用 `recv`；每个微批次的 loss 除以 $m$，梯度才等于整批训练的梯度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Stages, micro-batches, and the bubble

        Cut a model of $L$ layers into $p$ stages of $L/p$ layers; stage $s$ lives on rank $s$. A batch goes through
        stage 0, then its output (the activation, shape $(b, T, H)$) is sent to stage 1, and so on; the backward
        travels the other way, each stage sending the gradient of its input to the previous one. With the whole batch
        at once, only one stage works at any time: $p-1$ of $p$ GPUs idle.

        GPipe (Huang et al., 2019) splits the batch into $m$ **micro-batches**. Stage $s$ runs the forward of
        micro-batch $i$ (op $F_i$) as soon as it has stage $s-1$'s output for it, so different stages work on
        different micro-batches at the same time. Gradients of the micro-batches accumulate in the parameters and
        the optimizer steps once per batch, as with gradient accumulation (`p02.grad_accum_clip`): if each
        micro-batch's loss is divided by $m$, the accumulated gradient is exactly the gradient of the mean loss over
        the batch.

        **The bubble.** Let a forward take $t_f$ and a backward $t_b$ on every stage, and ignore communication. The
        last stage can start $F_0$ only at $(p-1)t_f$; stage 0 can run its last backward only after it has come
        back through all stages. Both GPipe and 1F1B finish at

        $$T = (m + p - 1)(t_f + t_b),$$

        while each stage is busy $m(t_f + t_b)$. So the idle fraction of the $p \times T$ GPU-time is

        $$\text{bubble} = 1 - \frac{m (t_f + t_b)}{(m + p - 1)(t_f + t_b)} = \frac{p - 1}{m + p - 1}.$$

        With $p = 8$ stages and $m = 8$ micro-batches that is 47% idle; $m = 64$ brings it to 9.9%. GPipe's authors
        found the bubble negligible once $m \ge 4p$ (Huang et al., 2019). Larger $m$ with a fixed batch
        means smaller micro-batches, which use the GPU less well: that trade-off sets $m$ in practice.

        ## 2. Two schedules, one bubble, different memory

        A schedule is, for each stage, the order in which it runs its $2m$ ops.

        **GPipe**: all forwards, then all backwards, on every stage: $F_0 F_1 \dots F_{m-1} B_0 B_1 \dots B_{m-1}$
        (backwards in micro-batch order, as `torch.distributed.pipelining.ScheduleGPipe` runs them). Stage $s$ keeps the
        activations of every micro-batch from its $F_i$ to its $B_i$: $m$ of them at the peak.

        **1F1B** (PipeDream-Flush, Narayanan et al., 2019/2021; Megatron-LM's default): stage $s$ runs
        $w_s = \min(p - s - 1, m)$ **warm-up** forwards, then alternates one forward and one backward
        ($F_{w_s} B_0 F_{w_s + 1} B_1 \dots$) while forwards remain, then **cools down** with the remaining backwards.
        The last stage ($w = 0$) runs $F_0 B_0 F_1 B_1 \dots$. A backward frees its micro-batch's activations, so
        stage $s$ never keeps more than $\min(p - s, m)$: the memory is bounded by the pipeline depth, not by $m$.
        The bubble is the same as GPipe's; the memory saved is what lets $m$ grow to shrink the bubble.

        For $p = 4$, $m = 6$:

        | stage | 1F1B order | peak activations |
        | --- | --- | --- |
        | 0 | F0 F1 F2 **F3 B0 F4 B1 F5 B2** B3 B4 B5 | 4 |
        | 1 | F0 F1 **F2 B0 F3 B1 F4 B2 F5 B3** B4 B5 | 3 |
        | 2 | F0 **F1 B0 F2 B1 F3 B2 F4 B3 F5 B4** B5 | 2 |
        | 3 | **F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5** | 1 |

        (bold: the steady 1F1B phase). Interleaved 1F1B (several smaller stages per GPU) divides the bubble by the
        number of chunks per GPU at the price of more communication; zero-bubble schedules split the backward into
        input-gradient and weight-gradient ops to fill the bubble. Both are variations on the same data structure
        you write first.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F

        from llm_algo.distributed import run_ranks
    """)
    lesson.md(r"""
        ## 3. Exercise `pipeline_schedule`: the schedules as data

        `pipeline_schedule(kind, num_stages, num_microbatches)` returns a list with one list per stage of
        `("F", i)` and `("B", i)` tuples in execution order, for `kind` `"gpipe"` or `"1f1b"` as in section 2.
        Refuse an unknown kind or non-positive sizes with `ValueError` (`TypeError` for sizes that are not ints).
        `peak_in_flight(ops)` returns the largest number of micro-batches that one stage's op list holds at once:
        forward done, backward not yet.
    """)
    lesson.exercise(
        "pipeline_schedule",
        r'''
        def pipeline_schedule(kind: str, num_stages: int, num_microbatches: int) -> list[list[tuple[str, int]]]:
            """Per stage s = 0 .. num_stages - 1, its ordered ops ("F", i) / ("B", i), i = 0 .. num_microbatches - 1."""
            if not isinstance(num_stages, int) or not isinstance(num_microbatches, int):
                raise TypeError(f"sizes must be ints, got {num_stages!r} and {num_microbatches!r}")
            if num_stages < 1 or num_microbatches < 1:
                raise ValueError(f"need at least one stage and one micro-batch, got {num_stages} and {num_microbatches}")
            if kind not in ("gpipe", "1f1b"):
                raise ValueError(f"unknown schedule {kind!r}: expected 'gpipe' or '1f1b'")
            p, m = num_stages, num_microbatches
            schedule = []
            for stage in range(p):
                # TODO: GPipe: every forward in order, then every backward in order
                # TODO: 1F1B: min(p - stage - 1, m) warm-up forwards; then one forward and one backward while
                # TODO:       forwards remain; then the remaining backwards
                ### BEGIN SOLUTION
                if kind == "gpipe":
                    ops = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
                else:
                    warmup = min(p - stage - 1, m)
                    ops = [("F", i) for i in range(warmup)]
                    for i in range(m - warmup):  # steady state: the forward of i + warmup, then the backward of i
                        ops += [("F", i + warmup), ("B", i)]
                    ops += [("B", i) for i in range(m - warmup, m)]  # cool-down
                ### END SOLUTION
                schedule.append(ops)
            return schedule


        def peak_in_flight(ops: list[tuple[str, int]]) -> int:
            """The most micro-batches whose forward ran on this stage and whose backward has not yet."""
            # TODO: walk the ops, +1 at a forward, -1 at a backward, keep the maximum
            ### BEGIN SOLUTION
            live = peak = 0
            for op, _ in ops:
                live += 1 if op == "F" else -1
                peak = max(peak, live)
            return peak
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `simulate_pipeline`: timing a schedule, measuring its bubble

        Given a schedule (any, not only the two above), a forward time and a backward time, compute when each op runs.
        Each stage runs its ops in its list's order, one at a time. An op waits for its stage and for the op whose
        result it needs:

        - $F_i$ on stage $s > 0$ needs $F_i$ on stage $s - 1$ (the activation);
        - $B_i$ on stage $s < p - 1$ needs $B_i$ on stage $s + 1$ (the gradient of its output), and on every stage
          $B_i$ needs that stage's own $F_i$ (its saved activation).

        Communication is free in this model. `simulate_pipeline` returns `{(op, stage, i): (start, end)}`. A schedule
        that cannot finish (a backward listed before its forward, two stages waiting for each other) must raise
        `ValueError` naming a stuck stage; so must a schedule in which a stage does not run each `F` and `B` of the
        same micro-batches exactly once. Loop over "sweeps" of the stages a bounded number of times (every sweep must
        run at least one op) so that a bad schedule can never make it loop forever. `bubble_fraction` is the idle
        share of the $p \times$ makespan GPU-time.
    """)
    lesson.exercise(
        "simulate_pipeline",
        r'''
        def simulate_pipeline(schedule, t_forward=1.0, t_backward=2.0):
            """schedule: per stage, its ordered ops ("F", i) / ("B", i) -> {(op, stage, i): (start, end)}."""
            p = len(schedule)
            for stage, ops in enumerate(schedule):
                forwards = sorted(i for op, i in ops if op == "F")
                backwards = sorted(i for op, i in ops if op == "B")
                if len(forwards) + len(backwards) != len(ops) or forwards != backwards or len(set(forwards)) != len(forwards):
                    raise ValueError(f"stage {stage} must run F and B of the same micro-batches exactly once, got {ops}")
            times = {}
            total = sum(len(ops) for ops in schedule)
            # TODO: keep, per stage, the position of its next op and the time it becomes free
            # TODO: repeat at most `total` sweeps over the stages: run each stage's next ops while their dependency
            # TODO:   is done (start = max(stage free, dependency's end)); stop when a sweep runs nothing
            # TODO: raise ValueError (naming a stuck stage and its next op) if some op never ran
            ### BEGIN SOLUTION
            position, free = [0] * p, [0.0] * p
            for _ in range(total):
                progressed = False
                for stage in range(p):
                    while position[stage] < len(schedule[stage]):
                        op, i = schedule[stage][position[stage]]
                        if op == "F":
                            needs = [("F", stage - 1, i)] if stage > 0 else []
                        else:
                            needs = [("F", stage, i)] + ([("B", stage + 1, i)] if stage < p - 1 else [])
                        if any(need not in times for need in needs):
                            break  # this stage waits; the others may unblock it
                        start = max([free[stage]] + [times[need][1] for need in needs])
                        free[stage] = start + (t_forward if op == "F" else t_backward)
                        times[(op, stage, i)] = (start, free[stage])
                        position[stage] += 1
                        progressed = True
                if not progressed:
                    break
            if len(times) < total:
                stuck = next(s for s in range(p) if position[s] < len(schedule[s]))
                raise ValueError(f"the schedule deadlocks: stage {stuck} waits forever at {schedule[stuck][position[stuck]]}")
            ### END SOLUTION
            return times


        def bubble_fraction(schedule, t_forward=1.0, t_backward=2.0) -> float:
            """Idle share of the p x makespan GPU-time of the simulated schedule."""
            # TODO: simulate; makespan = the latest end; busy = the sum of all op durations
            ### BEGIN SOLUTION
            times = simulate_pipeline(schedule, t_forward, t_backward)
            makespan = max(end for _, end in times.values())
            busy = sum(end - start for start, end in times.values())
            return 1.0 - busy / (len(schedule) * makespan)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The two schedules on a timeline

        Four stages, eight micro-batches, $t_b = 2 t_f$: your simulator's start times drawn as a Gantt chart (blue:
        forward, orange: backward, the number is the micro-batch). Same length, same white triangles (the bubble);
        look at how many micro-batches each stage has started but not finished at any moment.
    """)
    lesson.code(r"""
        def draw(ax, kind, p=4, m=8):
            schedule = pipeline_schedule(kind, p, m)
            times = simulate_pipeline(schedule, 1.0, 2.0)
            for (op, stage, i), (start, end) in times.items():
                ax.barh(stage, end - start, left=start, color="C0" if op == "F" else "C1", edgecolor="white")
                ax.text((start + end) / 2, stage, str(i), ha="center", va="center", fontsize=7, color="white")
            peaks = [peak_in_flight(ops) for ops in schedule]
            ax.set(title=f"{kind}: bubble {bubble_fraction(schedule, 1.0, 2.0):.0%}, peak activations per stage {peaks}",
                   xlabel="time (t_f = 1, t_b = 2)", ylabel="stage", yticks=range(p))
            ax.invert_yaxis()

        try:
            fig, axes = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True)
            draw(axes[0], "gpipe"); draw(axes[1], "1f1b")
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("pipeline_schedule and simulate_pipeline are not written yet")
    """)
    lesson.md(r"""
        ## 5. Exercise `pipeline_stage`: running a schedule in real processes

        Now the schedule runs for real: rank $s$ of the group holds stage $s$ (an `nn.Module` with its layers) and calls
        `run_pipeline_stage` with its own op list. For each op:

        - `("F", i)`: stage 0 takes micro-batch `microbatches[i]`; the others receive the activation from rank
          $s - 1$ into a fresh buffer of `activation_shape` (dtype and device of the micro-batches) and mark it
          `requires_grad_()`, since its gradient must travel back. Run the stage. The last stage computes
          `loss_fn(output, targets[i]) / m` (the mean over micro-batches, as gradient accumulation does) and records
          the unscaled loss; the others **send** the output (detached) to rank $s + 1$. Keep the input and the output
          (or the loss) for the backward.
        - `("B", i)`: take back what `F` kept and forget it (that is what frees the activation). The last stage calls
          `backward()` on its loss; the others receive the gradient of their output from rank $s + 1$ and call
          `output.backward(grad)`. Every stage but the first sends its input's gradient to rank $s - 1$.

        **Sends must not block.** On gloo (and NCCL) a blocking `dist.send` waits until the peer posts the matching
        `recv`. In 1F1B's steady state, stage $s$ sends an activation forward while stage $s + 1$ sends a gradient
        backward: with blocking sends each waits for the other forever. Use `dist.isend`, keep its work handle (and
        the tensor) and `wait()` on all of them at the end; receives may block, because a valid schedule always sends
        before the peer needs it. Neighbours are `dist.get_global_rank(group, s ± 1)` when a group is given.

        Validate before communicating (`ValueError`): as many targets as micro-batches, and an op list that runs `F`
        and `B` of every micro-batch exactly once. Return `{"losses": [...], "peak_in_flight": int}`: the last stage's
        per-micro-batch losses in the order computed (an empty list elsewhere) and the most activations this stage held
        at once. The checks do not take that figure's word for it: they follow every tensor autograd saves during each
        call of your stage by weak reference, and count how many micro-batches' activations are really alive at each
        backward. `torch.distributed.pipelining` is the checks' reference and forbidden here.
    """)
    lesson.exercise(
        "pipeline_stage",
        r'''
        def run_pipeline_stage(stage, ops, microbatches, targets, loss_fn, activation_shape, group=None) -> dict:
            """Run this rank's ops; gradients accumulate in `stage`'s parameters as for the mean loss over the batch.

            stage: this rank's nn.Module; ops: its ordered ("F", i) / ("B", i); microbatches: m tensors (read by stage 0);
            targets: m tensors (read by the last stage); loss_fn(output, target) -> scalar;
            activation_shape: the shape of one micro-batch's activation between stages.
            """
            m = len(microbatches)
            if len(targets) != m:
                raise ValueError(f"{m} micro-batches but {len(targets)} targets")
            if sorted(i for op, i in ops if op == "F") != list(range(m)) or sorted(i for op, i in ops if op == "B") != list(range(m)):
                raise ValueError(f"ops must run F and B of each of the {m} micro-batches exactly once, got {ops}")
            rank, world = dist.get_rank(group), dist.get_world_size(group)
            first, last = rank == 0, rank == world - 1

            def neighbour(r):
                return r if group is None else dist.get_global_rank(group, r)

            dtype, device = microbatches[0].dtype, microbatches[0].device
            kept, sends, losses, peak = {}, [], [], 0
            for op, i in ops:
                # TODO: "F": input (micro-batch or received activation that requires grad), stage forward;
                # TODO:      last stage: loss / m (record the unscaled loss); others: isend the detached output
                # TODO:      keep (input, output or loss); update peak
                # TODO: "B": pop what F kept; loss.backward() or receive the output's gradient and backward it;
                # TODO:      every stage but the first isends its input's gradient to the previous rank
                ### BEGIN SOLUTION
                if op == "F":
                    if first:
                        x = microbatches[i]
                    else:
                        x = torch.empty(activation_shape, dtype=dtype, device=device)
                        dist.recv(x, neighbour(rank - 1), group=group)
                        x.requires_grad_()  # its gradient goes back to the previous stage
                    y = stage(x)
                    if last:
                        loss = loss_fn(y, targets[i])
                        losses.append(loss.detach())
                        kept[i] = (x, loss / m)  # each micro-batch's share of the mean loss
                    else:
                        out = y.detach()
                        sends.append((dist.isend(out, neighbour(rank + 1), group=group), out))
                        kept[i] = (x, y)
                    peak = max(peak, len(kept))
                else:
                    x, y = kept.pop(i)  # dropping the references frees this micro-batch's activations
                    if last:
                        y.backward()
                    else:
                        grad = torch.empty_like(y)
                        dist.recv(grad, neighbour(rank + 1), group=group)
                        y.backward(grad)
                    if not first:
                        sends.append((dist.isend(x.grad, neighbour(rank - 1), group=group), x.grad))
                ### END SOLUTION
            for work, _ in sends:
                work.wait()
            return {"losses": losses, "peak_in_flight": peak}
    ''',
    )
    lesson.md(r"""
        ## 6. Your pipeline, live

        Three real processes, a 3-stage MLP, 6 micro-batches under 1F1B: each rank prints its peak activation count and
        how far its gradients are from single-process training of the whole model on the whole batch. It needs the
        `pipeline_schedule` and `pipeline_stage` exercises.
    """)
    lesson.code(r"""
        def pipeline_demo(schedule_ops, m):
            rank, p = dist.get_rank(), dist.get_world_size()
            torch.manual_seed(0)  # the same model and data in every rank
            model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(p)])
            x, y = torch.randn(m * 4, 16), torch.randn(m * 4, 16)
            result = run_pipeline_stage(model[rank], schedule_ops[rank], list(x.chunk(m)), list(y.chunk(m)),
                                        F.mse_loss, (4, 16))
            mine = [p.grad.clone() for p in model[rank].parameters()]
            model.zero_grad()
            F.mse_loss(model(x), y).backward()  # the whole model on the whole batch, in this process
            error = max((a - p.grad).abs().max().item() for a, p in zip(mine, model[rank].parameters()))
            return rank, result["peak_in_flight"], error

        try:
            ops = pipeline_schedule("1f1b", 3, 6)
            for result in run_ranks(pipeline_demo, 3, args=(ops, 6), deadline=30):
                if result.ok:
                    rank, peak, error = result.value
                    print(f"stage {rank}: peak {peak} activations kept (1F1B bound min(p - s, m) = {min(3 - rank, 6)}); "
                          f"max |grad - single-process grad| = {error:.1e}")
                elif result.error_type == "NotImplementedError":
                    print(f"stage {result.rank}: run_pipeline_stage is not written yet")
                else:
                    print(result.describe(), result.traceback[-600:], sep="\n")
        except NotImplementedError:
            print("pipeline_schedule is not written yet")
    """)
    lesson.md(r"""
        ## 7. Reading the numbers: why the pipeline crosses nodes and tensor parallelism does not

        Per micro-batch, a stage boundary carries one activation forward and one gradient backward, each
        $b \cdot T \cdot H$ elements. For Llama-3-70B ($H = 8192$, 80 layers) with micro-batches of one 4096-token
        sequence in bf16, that is 64 MiB each way. Over an assumed 25 GB/s between nodes (a 200 Gb/s NIC) it takes
        about 2.7 ms, while the stage's compute for that micro-batch with $p = 8$ (10 layers,
        $6 \cdot 4096 \cdot 10 \cdot 856\text{M} \approx 210$ TFLOP forward and backward) takes about 0.5 s at an
        assumed 400 TFLOP/s: under 1%. Tensor parallelism would instead all-reduce $4 \times 64$ MiB per *layer*
        (`p02.tensor_parallel`). These are α-β model estimates with stated assumptions; measured NCCL numbers on real
        GPUs are pending (issue 20).

        The cost of PP is the bubble, not the bytes. The curve below is $(p-1)/(m+p-1)$; the dots are your simulator.
    """)
    lesson.code(r"""
        micro = [1, 2, 4, 8, 16, 32, 64]
        plt.figure(figsize=(6.5, 3.5))
        for p, color in ((4, "C0"), (8, "C1"), (16, "C2")):
            plt.plot(micro, [(p - 1) / (m + p - 1) for m in micro], color=color, label=f"p = {p}: (p-1)/(m+p-1)")
            try:
                plt.plot(micro, [bubble_fraction(pipeline_schedule("1f1b", p, m)) for m in micro], "o", color=color)
            except NotImplementedError:
                pass  # dots appear once pipeline_schedule and simulate_pipeline are written
        plt.xscale("log", base=2); plt.xlabel("micro-batches m"); plt.ylabel("idle fraction (bubble)")
        plt.title("Pipeline bubble, GPipe and 1F1B alike"); plt.grid(alpha=0.3); plt.legend(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`pipeline_schedule`.** GPipe is two comprehensions. For 1F1B the warm-up count `min(p - s - 1, m)` is the
        whole idea: stage $s$ must have pushed enough micro-batches into the pipe for the first gradient to come back
        exactly when its warm-up ends, which takes $p - s - 1$ forwards of the stages after it. The steady loop pairs
        the forward of $i + w$ with the backward of $i$, so the number in flight stays $w + 1 = p - s$. PyTorch's
        `Schedule1F1B` writes it as $p - s$ warm-up forwards followed by "one backward, one forward": the same order.
        `peak_in_flight` is a running count.

        **`simulate_pipeline`.** A list-scheduling simulation: each op starts at the later of its stage's free time and
        its dependency's end. Sweeping the stages repeatedly (at most once per op) resolves the cross-stage waits
        without recursion, and a sweep that runs nothing is a proof of deadlock. The makespan is
        $(m + p - 1)(t_f + t_b)$ for both schedules, which is why the bubble is the same.

        **`run_pipeline_stage`.** The received activation is a leaf that requires grad: after `y.backward(grad)` its
        `.grad` is exactly what the previous stage's output needs. `y.detach()` is sent, not `y`: communication is not
        part of the autograd graph; the graph is cut at each stage boundary and stitched by hand with the gradient
        message. `kept.pop(i)` is where 1F1B's memory saving actually happens. The `isend` handles keep their tensors
        alive and are waited on at the end; those are detached outputs that share storage with `y`, so this teaching
        runtime still holds each sent activation's buffer until it returns (a production runtime waits for each send
        by its micro-batch's backward, or frees the output as soon as it is sent, as Megatron does). The checks count
        the tensors autograd saved for backward and what still references them, not the send buffers.

        **The usual mistakes, and why they are wrong**:
        - 1F1B with one warm-up forward too many (`p - s`): the right ops in a different order, one more activation held;
          the steady phase written as backward-then-forward: the last stage runs $B_0$ before $F_0$, which the
          simulator and the tables reject.
        - `peak_in_flight` counting forwards only (it would say $m$ for every schedule).
        - a backward that waits only for its own stage's forward, not for the next stage's gradient: too early start
          times, a bubble too small.
        - blocking `dist.send`: GPipe still runs, 1F1B deadlocks (the check reports the ranks as hung at the deadline).
        - neighbours addressed as `rank ± 1` on the default group instead of `neighbour(rank ± 1)` with `group=`:
          right in a world of its own; on a sub-group those ranks are a bystander or the stage itself.
        - the loss not divided by $m$: gradients $m$ times too large; the saved activations never dropped: the
          numbers are right but 1F1B holds $m$ activations like GPipe. The checks measure this rather than read
          `peak_in_flight`: code that parks every micro-batch's input and output in a second list and reports the
          textbook peak from its own counter is rejected all the same.

        **What production systems do.** Megatron-Core's `forward_backward_pipelining_without_interleaving` is this
        1F1B loop, with `send_forward_recv_backward`-style fused calls (`batch_isend_irecv`) so that each step overlaps
        its send and receive, and with the activations' memory freed as soon as they are sent (only the stage's input
        is kept, the output is deallocated). `torch.distributed.pipelining` (`PipelineStage`, `ScheduleGPipe`,
        `Schedule1F1B`, `ScheduleInterleaved1F1B`, `ScheduleZBVZeroBubble`) splits a model with `pipe_split` or by
        hand and runs exactly these op lists; its multi-stage schedules are literally tables of actions per rank.
        DeepSpeed's `PipelineEngine` uses the same 1F1B order. Real stages are not balanced (the first holds the
        embedding, the last the LM head and the loss), so layer assignment is tuned to even out $t_f$ and $t_b$,
        and activation recomputation (`p02.activation_checkpointing`) is combined with 1F1B to fit larger
        micro-batches.
    """)
    lesson.mistakes()
    return lesson
