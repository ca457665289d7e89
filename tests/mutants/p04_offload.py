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
        mistake_zh="更新完第 g 组才预取第 g + 1 组：每次更新都要等自己的拷贝（没有重叠）",
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
        mistake_zh="第一次更新前就预取所有组：全部矩估计同时在设备上",
    ),
    Mutant(
        "offloaded_adamw",
        "blocking_copy_back",
        "copies the moments back without non_blocking: the CPU stalls on every group",
        [("host.copy_(device_copy, non_blocking=True)", "host.copy_(device_copy)")],
        mistake_zh="拷回矩估计时不用 non_blocking：每一组 CPU 都要停下来等",
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
        mistake_zh="更新了暂存的矩估计却从不写回：主机上的矩估计一直是零",
    ),
    Mutant(
        "offloaded_adamw",
        "step_count_per_group",
        "increments the step count once per group instead of once per step (wrong bias corrections)",
        [
            ("        self.t += 1\n", ""),
            ("            self._update(g)", "            self.t += 1\n            self._update(g)"),
        ],
        mistake_zh="步数每组加一次而不是每步加一次（偏差修正错了）",
    ),
    Mutant(
        "offloaded_adamw",
        "staged_never_dropped",
        "keeps every staged group after its update: device memory grows to all of the moments",
        [("        del self.staged[g]\n", "")],
        mistake_zh="每个暂存组更新后仍然保留：设备显存涨到装下全部矩估计",
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
        mistake_zh="用 t.to(device, non_blocking=True) 暂存，在 CPU 上它就是主机张量本身",
    ),
    Mutant(
        "offloaded_adamw",
        "no_beta_check",
        "does not validate betas",
        [("or not all(0.0 <= b < 1.0 for b in betas)", "")],
        mistake_zh="不检查 betas",
    ),
    Mutant(
        "offloaded_adamw",
        "master_not_copied_into_param",
        "updates the fp32 master but never copies it into the bf16 parameter: the model does not train",
        [("                p.copy_(master)\n", "")],
        mistake_zh="更新了 fp32 主权重却从不拷进 bf16 参数：模型没有在训练",
    ),
    Mutant(
        "offloaded_adamw",
        "master_moments_in_param_dtype",
        "keeps the moments in the parameter's bf16 with master weights: precision lost where it matters most",
        [("dtype = torch.float32 if master_weights else p.dtype", "dtype = p.dtype")],
        mistake_zh="有主权重时矩估计却保存在参数的 bf16 里：在最需要精度的地方丢了精度",
    ),
]
