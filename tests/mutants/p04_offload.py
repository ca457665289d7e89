"""Realistic wrong versions of the p04.offload solution; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "offloaded_adamw",
        "prefetch_after_update",
        "prefetches group g + 1 only after updating g: every update waits for its own copy (no overlap)",
        [
            (
                "            if g + 1 < len(self.groups):\n                self._prefetch(g + 1)\n            self._update(g)",
                "            self._update(g)\n            if g + 1 < len(self.groups):\n                self._prefetch(g + 1)",
            )
        ],
        mistake_zh="更新完第 g 组后才预取第 g + 1 组：每次更新都要等自己的拷贝（没有重叠）",
    ),
    Mutant(
        "offloaded_adamw",
        "prefetch_everything",
        "prefetches every group before the first update: all the moments are on the device at once",
        [
            (
                "        self._prefetch(0)\n",
                "        for g in range(len(self.groups)):\n            self._prefetch(g)\n",
            ),
            ("            if g + 1 < len(self.groups):\n                self._prefetch(g + 1)\n", ""),
        ],
        mistake_zh="在第一次更新前预取所有组：全部动量同时驻留在设备上",
    ),
    Mutant(
        "offloaded_adamw",
        "blocking_copy_back",
        "copies the moments back without non_blocking: the CPU stalls on every group",
        [("host.copy_(device_copy, non_blocking=True)", "host.copy_(device_copy)")],
        mistake_zh="拷回动量时没有 non_blocking：CPU 在每一组上都停下等待",
    ),
    Mutant(
        "offloaded_adamw",
        "no_copy_back",
        "updates the staged moments but never writes them back: the host moments stay zero",
        [
            (
                "            for host, device_copy in zip(self.host_state[i], staged):\n"
                "                host.copy_(device_copy, non_blocking=True)\n",
                "",
            )
        ],
        mistake_zh="更新了暂存的动量，却从不写回：主机上的动量一直是零",
    ),
    Mutant(
        "offloaded_adamw",
        "step_count_per_group",
        "increments the step count once per group instead of once per step (wrong bias corrections)",
        [
            ("        self.t += 1\n", ""),
            ("            self._update(g)", "            self.t += 1\n            self._update(g)"),
        ],
        mistake_zh="每组都把步数加一，而不是每步加一（偏差校正错误）",
    ),
    Mutant(
        "offloaded_adamw",
        "staged_never_dropped",
        "keeps every staged group after its update: device memory grows to all of the moments",
        [("        del self.staged[g]\n", "")],
        mistake_zh="更新后仍保留每个暂存组：设备内存增长到容纳全部动量",
    ),
    Mutant(
        "offloaded_adamw",
        "to_returns_the_host_tensor",
        "stages with t.to(device, non_blocking=True), which on a CPU is the host tensor itself",
        [
            (
                "torch.empty_like(t, device=self.device).copy_(t, non_blocking=True)",
                "t.to(self.device, non_blocking=True)",
            )
        ],
        mistake_zh="用 t.to(device, non_blocking=True) 暂存，而在 CPU 上它返回的就是主机张量本身",
    ),
    Mutant(
        "offloaded_adamw",
        "no_beta_check",
        "does not validate betas",
        [("or not all(0.0 <= b < 1.0 for b in betas)", "")],
        mistake_zh="不校验 betas",
    ),
    Mutant(
        "offloaded_adamw",
        "master_not_copied_into_param",
        "updates the fp32 master but never copies it into the bf16 parameter: the model does not train",
        [("                p.copy_(master)\n", "")],
        mistake_zh="更新了 fp32 主权重，却从不拷回 bf16 参数：模型没有训练",
    ),
    Mutant(
        "offloaded_adamw",
        "master_moments_in_param_dtype",
        "keeps the moments in the parameter's bf16 with master weights: precision lost where it matters most",
        [("dtype = torch.float32 if master_weights else p.dtype", "dtype = p.dtype")],
        mistake_zh="有主权重时仍把动量存成参数的 bf16：在最需要精度的地方丢了精度",
    ),
    Mutant(
        "offloaded_adamw",
        "no_prefetch",
        "issues the prefetch copies on the current stream (no `with self.side:`): each copy waits for the update "
        "before it, so nothing is prefetched",
        [
            (
                "        with self.side:\n            self.staged[g] = [",
                "        with contextlib.nullcontext():\n            self.staged[g] = [",
            )
        ],
        mistake_zh="在当前流上发出预取拷贝（没有 `with self.side:`）：每次拷贝都要等前一组更新完成，实际上没有预取",
    ),
    Mutant(
        "offloaded_adamw",
        "no_event_wait",
        "updates a group without waiting for the event of its copy: the update may read moments still arriving",
        [("        self.side.wait(g)\n        self.side.hand_over(", "        self.side.hand_over(")],
        mistake_zh="更新一组之前没有等待其拷贝的事件：更新可能读到尚未拷贝完成的动量",
    ),
    Mutant(
        "offloaded_adamw",
        "event_before_copies",
        "records the event before issuing the copies: waiting on it does not wait for them",
        [
            (
                "        with self.side:\n            self.staged[g] = [",
                "        self.side.record(g)\n        with self.side:\n            self.staged[g] = [",
            ),
            ("            ]\n        self.side.record(g)\n", "            ]\n"),
        ],
        mistake_zh="在发出拷贝之前就记录事件：等待这个事件并不会等到拷贝完成",
    ),
    Mutant(
        "offloaded_adamw",
        "no_hand_over",
        "never hands the staged tensors over to the current stream (no record_stream): the allocator may reuse "
        "their memory while the update still reads it",
        [("        self.side.hand_over([t for staged in self.staged[g] for t in staged])\n", "")],
        mistake_zh="没有把暂存张量交给当前流（没有 record_stream）：缓存分配器可能在更新还在读取时复用这块内存",
    ),
    Mutant(
        "offloaded_adamw",
        "no_final_synchronize",
        "returns from step() without synchronizing: the next step may read host moments whose copies back have not "
        "landed",
        [("        self.side.synchronize()  # the last copies", "        pass  # the last copies")],
        mistake_zh="step() 结束时没有同步：下一步可能读到拷回尚未完成的主机动量",
    ),
    Mutant(
        "offloaded_adamw",
        "never_releases_staged",
        "moves each updated group from self.staged into a list of spent buffers that it never frees: memory() sums "
        "self.staged and reports two groups while every group stays on the device",
        [("        del self.staged[g]\n", "        self.spent = getattr(self, 'spent', []) + [self.staged.pop(g)]\n")],
        mistake_zh="把更新完的组从 self.staged 移进一个从不释放的“已用缓冲区”列表：memory() 只统计 self.staged，报告两组，"
        "而设备上一直留着所有组",
    ),
    Mutant(
        "offloaded_adamw",
        "keeps_last_group",
        "keeps the group it has just updated in an attribute (to reuse its buffers, which it never does): three "
        "groups on the device during each update while memory() reports two",
        [("        del self.staged[g]\n", "        self.previous = self.staged.pop(g)\n")],
        mistake_zh="把刚更新完的组留在一个属性里（说是为了复用缓冲区，却从未复用）：每次更新时设备上有三组，而 memory() 报告两组",
    ),
]
