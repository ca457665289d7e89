"""Realistic wrong versions of the p02.pipeline_parallel solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "pipeline_schedule",
        "warmup_off_by_one",
        "1F1B warm-up of p - s forwards instead of p - s - 1: one more activation held on every stage",
        [("warmup = min(p - stage - 1, m)", "warmup = min(p - stage, m)")],
        mistake_zh="1F1B 预热做 p - s 次前向而不是 p - s - 1 次：每个阶段多持有一份激活",
    ),
    Mutant(
        "pipeline_schedule",
        "steady_state_backward_first",
        "the steady phase runs the backward before the forward: the last stage would run B0 before F0",
        [('ops += [("F", i + warmup), ("B", i)]', 'ops += [("B", i), ("F", i + warmup)]')],
        mistake_zh="稳态阶段先反向后前向：最后一个阶段会在 F0 之前运行 B0",
    ),
    Mutant(
        "pipeline_schedule",
        "gpipe_backward_reversed",
        "GPipe's backwards in reverse micro-batch order (not what ScheduleGPipe runs)",
        [('[("B", i) for i in range(m)]', '[("B", i) for i in reversed(range(m))]')],
        mistake_zh="GPipe 的反向按微批次逆序进行（ScheduleGPipe 并不这样运行）",
    ),
    Mutant(
        "pipeline_schedule",
        "peak_counts_forwards_only",
        "peak_in_flight counts the forwards and never subtracts the backwards",
        [('live += 1 if op == "F" else -1', 'live += 1 if op == "F" else 0')],
        mistake_zh="peak_in_flight 只数前向，从不减去反向",
    ),
    Mutant(
        "simulate_pipeline",
        "backward_ignores_next_stage",
        "a backward waits only for its own stage's forward, not for the gradient from the next stage",
        [('needs = [("F", stage, i)] + ([("B", stage + 1, i)] if stage < p - 1 else [])', 'needs = [("F", stage, i)]')],
        mistake_zh="反向只等本阶段的前向，不等下一阶段传回的梯度",
    ),
    Mutant(
        "simulate_pipeline",
        "forward_ignores_previous_stage",
        "a forward starts as soon as its stage is free, without the previous stage's activation",
        [('needs = [("F", stage - 1, i)] if stage > 0 else []', "needs = []")],
        mistake_zh="阶段一空闲就开始前向，不等上一阶段的激活",
    ),
    Mutant(
        "simulate_pipeline",
        "bubble_over_one_stage",
        "the bubble divides the busy time of all stages by the makespan of one stage",
        [("return 1.0 - busy / (len(schedule) * makespan)", "return 1.0 - busy / makespan / len(schedule) ** 2")],
        mistake_zh="气泡率用所有阶段的忙碌时间除以单个阶段的总时长",
    ),
    Mutant(
        "simulate_pipeline",
        "no_deadlock_error",
        "returns the ops it managed to time instead of reporting a deadlock",
        [
            (
                'raise ValueError(f"the schedule deadlocks: stage {stuck} waits forever at {schedule[stuck][position[stuck]]}")',
                "pass",
            )
        ],
        mistake_zh="返回它算出了时间的那些操作，而不是报告死锁",
    ),
    Mutant(
        "pipeline_stage",
        "blocking_send",
        "sends with the blocking dist.send: GPipe still runs, 1F1B's steady state deadlocks",
        [
            (
                "sends.append((dist.isend(out, neighbour(rank + 1), group=group), out))",
                "dist.send(out, neighbour(rank + 1), group=group)",
            ),
            (
                "sends.append((dist.isend(x.grad, neighbour(rank - 1), group=group), x.grad))",
                "dist.send(x.grad, neighbour(rank - 1), group=group)",
            ),
        ],
        mistake_zh="用阻塞的 dist.send 发送：GPipe 仍能运行，1F1B 的稳态会死锁",
    ),
    Mutant(
        "pipeline_stage",
        "loss_not_divided_by_m",
        "backpropagates each micro-batch's full loss: the accumulated gradient is m times the batch gradient",
        [("kept[i] = (x, loss / m)  # each micro-batch's share of the mean loss", "kept[i] = (x, loss)")],
        mistake_zh="每个微批次都用完整的损失做反向：累积的梯度是整批梯度的 m 倍",
    ),
    Mutant(
        "pipeline_stage",
        "activations_never_freed",
        "reads what F kept without removing it: right gradients, but 1F1B holds m activations like GPipe",
        [("x, y = kept.pop(i)  # dropping the references frees this micro-batch's activations", "x, y = kept[i]")],
        mistake_zh="读取 F 保存的内容却不删除：梯度对，但 1F1B 像 GPipe 一样持有 m 份激活",
    ),
    Mutant(
        "pipeline_stage",
        "never_frees_activations",
        "keeps every micro-batch's input and output until it returns, and reports the textbook peak from its own "
        "counter: right gradients, but 1F1B's stages hold m activations like GPipe",
        [
            ("kept, sends, losses, peak = {}, [], [], 0", "kept, sends, losses, peak, graveyard = {}, [], [], 0, []"),
            (
                "x, y = kept.pop(i)  # dropping the references frees this micro-batch's activations",
                "x, y = kept.pop(i); graveyard.append((x, y))",
            ),
        ],
        mistake_zh="把每个微批次的输入和输出一直保留到函数返回，却用自己的计数器报告教科书上的峰值：梯度正确，但 1F1B 的每个 stage 像 GPipe 一样保存 m 份激活",
    ),
    Mutant(
        "pipeline_stage",
        "ignores_group",
        "addresses its neighbours as rank - 1 and rank + 1 on the default group: right on a world of its own, but on "
        "a sub-group those are other ranks (a bystander, or itself)",
        [
            ("dist.recv(x, neighbour(rank - 1), group=group)", "dist.recv(x, rank - 1)"),
            (
                "sends.append((dist.isend(out, neighbour(rank + 1), group=group), out))",
                "sends.append((dist.isend(out, rank + 1), out))",
            ),
            ("dist.recv(grad, neighbour(rank + 1), group=group)", "dist.recv(grad, rank + 1)"),
            (
                "sends.append((dist.isend(x.grad, neighbour(rank - 1), group=group), x.grad))",
                "sends.append((dist.isend(x.grad, rank - 1), x.grad))",
            ),
        ],
        mistake_zh="在默认进程组上用 rank - 1 和 rank + 1 寻址相邻 stage：单独成一个 world 时正确，但在子进程组上这些是别的 rank（旁观者或它自己）",
    ),
    Mutant(
        "pipeline_stage",
        "received_grad_sent_back_unchanged",
        "sends the output gradient it received back to the previous stage instead of its input's gradient",
        [
            (
                "sends.append((dist.isend(x.grad, neighbour(rank - 1), group=group), x.grad))",
                "sends.append((dist.isend(grad if not last else x.grad, neighbour(rank - 1), group=group), x))",
            )
        ],
        mistake_zh="把收到的输出梯度原样发回上一阶段，而不是自己输入的梯度",
    ),
]
