"""Realistic wrong versions of the p02.fsdp solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # ------------------------------------------------------------------ flat_shard
    Mutant(
        "flat_shard",
        "offset_from_numel",
        "starts rank r's shard at floor(r * N / p) instead of r * S",
        [
            (
                "padded[rank * shard_size : (rank + 1) * shard_size].clone()",
                "padded[rank * numel // world_size : rank * numel // world_size + shard_size].clone()",
            )
        ],
        mistake_zh="rank r 的分片从 floor(r * N / p) 开始，而不是 r * S",
    ),
    Mutant(
        "flat_shard",
        "floor_shard_size",
        "S = N // p: the last N % p elements belong to nobody",
        [("shard_size = -(-numel // world_size)", "shard_size = numel // world_size")],
        mistake_zh="S = N // p：最后 N % p 个元素不属于任何人",
    ),
    Mutant(
        "flat_shard",
        "padding_at_the_front",
        "puts the zeros before the parameters, so every rank's offsets move",
        [
            (
                "torch.cat([flat, flat.new_zeros(world_size * shard_size - numel)])",
                "torch.cat([flat.new_zeros(world_size * shard_size - numel), flat])",
            )
        ],
        mistake_zh="把零补在参数之前，每个 rank 的偏移都移动了",
    ),
    Mutant(
        "flat_shard",
        "shard_is_a_view",
        "returns a slice of the padded buffer: every rank keeps all p*S elements alive",
        [
            (
                "padded[rank * shard_size : (rank + 1) * shard_size].clone()",
                "padded[rank * shard_size : (rank + 1) * shard_size]",
            )
        ],
        mistake_zh="返回填充缓冲区的切片：每个 rank 都让全部 p*S 个元素继续存活",
    ),
    Mutant(
        "flat_shard",
        "unflatten_copies",
        "clones the buffer before splitting: the parameters are copies, not views of the gathered buffer",
        [("pieces = flat[: sum(sizes)].split(sizes)", "pieces = flat[: sum(sizes)].clone().split(sizes)")],
        mistake_zh="切分前先 clone 了缓冲区：参数是副本，而不是收集来的缓冲区的视图",
    ),
    # ------------------------------------------------------------------ all_gather_shard
    Mutant(
        "all_gather_shard",
        "sum_not_mean",
        "returns the sum of the ranks' gradients: p times the gradient of the mean loss",
        [
            (
                "return (grad_shard / world_size).to(ctx.shard_dtype), None, None",
                "return grad_shard.to(ctx.shard_dtype), None, None",
            )
        ],
        mistake_zh="返回各 rank 梯度之和：是平均损失梯度的 p 倍",
    ),
    Mutant(
        "all_gather_shard",
        "reduce_in_compute_dtype",
        "reduce-scatters the bf16/fp16 gradient and upcasts the result",
        [
            ("grad_full = grad_full.to(torch.float32).contiguous()", "grad_full = grad_full.contiguous()"),
            ("dtype=torch.float32, device=grad_full.device", "dtype=grad_full.dtype, device=grad_full.device"),
        ],
        mistake_zh="对 bf16/fp16 梯度做 reduce-scatter，再把结果升精度",
    ),
    Mutant(
        "all_gather_shard",
        "gather_fp32_then_cast",
        "all-gathers the fp32 shards and casts the result: twice the bytes on the wire and in memory",
        [
            (
                "dtype=compute_dtype, device=shard.device)",
                "dtype=shard.dtype, device=shard.device)",
            ),
            (
                "all_gather_single(full, shard.detach().to(compute_dtype).contiguous(), group=group)",
                "all_gather_single(full, shard.detach().contiguous(), group=group)\n        full = full.to(compute_dtype)",
            ),
        ],
        mistake_zh="all-gather fp32 的分片再转换结果：网络上和显存里的字节都翻倍",
    ),
    Mutant(
        "all_gather_shard",
        "all_reduce_and_slice",
        "all-reduces the whole gradient and keeps its own slice (an all-reduce is a reduce-scatter plus an all-gather)",
        [
            (
                "reduce_scatter_single(grad_shard, grad_full, group=ctx.group)",
                "dist.all_reduce(grad_full, group=ctx.group)\n"
                "        rank, size = dist.get_rank(ctx.group), grad_shard.numel()\n"
                "        grad_shard = grad_full[rank * size : (rank + 1) * size]",
            )
        ],
        mistake_zh="对整个梯度做 all-reduce 再取自己的切片（all-reduce 等于 reduce-scatter 加 all-gather）",
    ),
    Mutant(
        "all_gather_shard",
        "collectives_on_the_world",
        "forgets group= in the collectives: they run on the whole world, whatever group the unit was given",
        [
            (
                "all_gather_single(full, shard.detach().to(compute_dtype).contiguous(), group=group)",
                "all_gather_single(full, shard.detach().to(compute_dtype).contiguous())",
            ),
            (
                "reduce_scatter_single(grad_shard, grad_full, group=ctx.group)",
                "reduce_scatter_single(grad_shard, grad_full)",
            ),
        ],
        mistake_zh="集合通信忘了传 group=：不管单元拿到的是哪个组，都在整个 world 上运行",
    ),
    Mutant(
        "all_gather_shard",
        "no_shape_validation",
        "accepts a 2-D shard (and flattens it silently)",
        [("if shard.dim() != 1:", "if False:")],
        mistake_zh="接受二维分片（并默默展平）",
    ),
    # ------------------------------------------------------------------ fsdp_unit
    Mutant(
        "fsdp_unit",
        "kept_for_backward",
        "no saved-tensor hooks: autograd keeps every unit's gathered buffer until backward",
        [("with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):", "if True:")],
        mistake_zh="没有 saved-tensor hook：autograd 把每个单元收集来的缓冲区一直留到反向",
    ),
    Mutant(
        "fsdp_unit",
        "buffer_kept_on_self",
        "stores the gathered buffer on the unit, so it is never freed",
        [
            (
                "gathered = flat.untyped_storage().data_ptr()",
                "gathered = flat.untyped_storage().data_ptr()\n        self._flat = flat",
            )
        ],
        mistake_zh="把收集来的缓冲区存在单元上，它永远不会被释放",
    ),
    Mutant(
        "fsdp_unit",
        "pack_matches_parameter_objects",
        "recognises saved parameters by identity: autograd saves views (weight.t()), and the closure holds the views",
        [
            (
                "if t.untyped_storage().data_ptr() == gathered:",
                "if any(t is v for v in params.values()):",
            )
        ],
        mistake_zh="按对象身份识别保存的参数：autograd 保存的是视图（weight.t()），闭包持有这些视图",
    ),
    Mutant(
        "fsdp_unit",
        "regather_at_every_unpack",
        "all-gathers again for every saved tensor instead of once per backward of the unit",
        [("if self._regathered is None:  # the first saved parameter this backward needs", "if True:")],
        mistake_zh="每个保存的张量都重新 all-gather 一次，而不是每个单元的反向只做一次",
    ),
    Mutant(
        "fsdp_unit",
        "regathered_never_freed",
        "never frees the buffer gathered for backward: the next step's backward uses stale weights",
        [("flat.register_hook(self._free_regathered)", "pass")],
        mistake_zh="为反向收集的缓冲区从不释放：下一步的反向用的是过期的权重",
    ),
    Mutant(
        "fsdp_unit",
        "full_parameters_kept",
        "shards the parameters but leaves the full ones on the module",
        [("setattr(module.get_submodule(owner), leaf, None)", "pass")],
        mistake_zh="切分了参数，却把完整的参数留在模块上",
    ),
    Mutant(
        "fsdp_unit",
        "inputs_not_cast",
        "runs bf16 parameters on fp32 inputs",
        [
            (
                "args = tuple(a.to(self.compute_dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)",
                "args = tuple(args)",
            )
        ],
        mistake_zh="bf16 参数作用在 fp32 输入上",
    ),
    Mutant(
        "fsdp_unit",
        "every_rank_takes_rank_0s_shard",
        "shards with rank 0 everywhere: every rank holds (and updates) the same slice",
        [
            (
                "flatten_shard([p for _, p in named], rank, world_size)",
                "flatten_shard([p for _, p in named], 0, world_size)",
            )
        ],
        mistake_zh="到处都按 rank 0 切分：每个 rank 持有（并更新）同一个切片",
    ),
    Mutant(
        "fsdp_unit",
        "rank_and_size_of_the_world",
        "shards by the world's rank and size instead of the group's",
        [
            (
                "rank, world_size = dist.get_rank(group), dist.get_world_size(group)",
                "rank, world_size = dist.get_rank(), dist.get_world_size()",
            )
        ],
        mistake_zh="按 world 的 rank 和大小而不是组的来切分",
    ),
    Mutant(
        "fsdp_unit",
        "hook_always_registered",
        "registers the free hook even without a graph: torch.no_grad() inference raises",
        [("if flat.requires_grad:  # runs once", "if True:  # runs once")],
        mistake_zh="没有计算图时也注册释放 hook：torch.no_grad() 推理会报错",
    ),
    # ------------------------------------------------------------------ full_state_dict
    Mutant(
        "full_state_dict",
        "every_rank_returns_it",
        "returns the full model on every rank",
        [("if dist.get_rank(unit.group) == 0:", "if True:")],
        mistake_zh="每个 rank 都返回完整模型",
    ),
    Mutant(
        "full_state_dict",
        "compute_dtype_copy",
        "gathers the bf16 compute copy instead of the fp32 master",
        [("master = unit.shard.detach()", "master = unit.shard.detach().to(unit.compute_dtype)")],
        mistake_zh="收集的是 bf16 的计算副本，而不是 fp32 的主权重",
    ),
    Mutant(
        "full_state_dict",
        "views_not_copies",
        "returns views into the gathered buffer (on the CPU .to('cpu') copies nothing)",
        [('view.to("cpu", copy=True)', 'view.to("cpu")')],
        mistake_zh="返回收集来的缓冲区的视图（在 CPU 上 .to('cpu') 什么都不复制）",
    ),
    Mutant(
        "full_state_dict",
        "wrapper_name_in_keys",
        "keeps the unit's own attribute in the keys: 1.module.fc1.weight",
        [('f"{prefix}.{name}" if prefix else name', 'f"{prefix}.module.{name}" if prefix else name')],
        mistake_zh="键里保留了单元自己的属性名：1.module.fc1.weight",
    ),
    Mutant(
        "full_state_dict",
        "loop_variable_keeps_a_view",
        "copies out in a for loop: its loop variable, a view, keeps the unit's buffer alive while the next is gathered",
        [
            (
                "state.update(\n"
                "                {\n"
                '                    f"{prefix}.{name}" if prefix else name: view.to("cpu", copy=True)  # owns its bytes\n'
                "                    for name, view in zip(unit.names, unflatten(full, unit.shapes))\n"
                "                }\n"
                "            )",
                "for name, view in zip(unit.names, unflatten(full, unit.shapes)):\n"
                '                state[f"{prefix}.{name}" if prefix else name] = view.to("cpu", copy=True)',
            )
        ],
        mistake_zh="在 for 循环里复制出来：循环变量是一个视图，在收集下一个单元时让本单元的缓冲区继续存活",
    ),
    Mutant(
        "all_gather_shard",
        "ignores_group",
        "takes the world size of the whole world and gathers and reduce-scatters on the default group, ignoring "
        "`group`",
        [
            ("world_size = dist.get_world_size(group)", "world_size = dist.get_world_size()"),
            ("world_size = dist.get_world_size(ctx.group)", "world_size = dist.get_world_size()"),
            (
                "all_gather_single(full, shard.detach().to(compute_dtype).contiguous(), group=group)",
                "all_gather_single(full, shard.detach().to(compute_dtype).contiguous())",
            ),
            (
                "reduce_scatter_single(grad_shard, grad_full, group=ctx.group)",
                "reduce_scatter_single(grad_shard, grad_full)",
            ),
        ],
        mistake_zh="用整个 world 的大小，并在默认进程组上做 all-gather 和 reduce-scatter，忽略了 `group`",
    ),
    Mutant(
        "fsdp_unit",
        "ignores_group",
        "shards by the world's rank and size and gathers without passing its group on (the default group)",
        [
            (
                "rank, world_size = dist.get_rank(group), dist.get_world_size(group)",
                "rank, world_size = dist.get_rank(), dist.get_world_size()",
            ),
            (
                "flat = AllGatherShard.apply(self.shard, self.compute_dtype, self.group)",
                "flat = AllGatherShard.apply(self.shard, self.compute_dtype)",
            ),
            (
                "self._regathered = AllGatherShard.apply(self.shard, self.compute_dtype, self.group)",
                "self._regathered = AllGatherShard.apply(self.shard, self.compute_dtype)",
            ),
        ],
        mistake_zh="按整个 world 的 rank 和大小切分，all-gather 时没有把 group 传下去（用了默认进程组）",
    ),
    Mutant(
        "fsdp_unit",
        "shards_frozen_params",
        "flattens every parameter, frozen or not, into the trainable shard: a frozen parameter gets a gradient and the "
        "optimizer trains it",
        [("module.named_parameters() if p.requires_grad]", "module.named_parameters()]")],
        mistake_zh="把所有参数（不论是否冻结）都展平进可训练的分片：冻结参数得到梯度，被优化器训练",
    ),
]
