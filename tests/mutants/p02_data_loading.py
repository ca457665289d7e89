"""Realistic wrong versions of the p02.data_loading solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sample_batch",
        "last_start_never_drawn",
        "draws starts from randint(N - T - 1): the last valid window is never sampled",
        [("torch.randint(num_tokens - context_length, ", "torch.randint(num_tokens - context_length - 1, ")],
        mistake_zh="起点从 randint(N - T - 1) 中抽：最后一个合法窗口永远抽不到",
    ),
    Mutant(
        "sample_batch",
        "targets_not_shifted",
        "returns the inputs as targets (no shift by one): the model learns to copy its input",
        [("inputs, targets = windows[:, :-1], windows[:, 1:]", "inputs, targets = windows[:, :-1], windows[:, :-1]")],
        mistake_zh="把输入当作目标返回（没有错开一位）：模型学会复制输入",
    ),
    Mutant(
        "sample_batch",
        "ignores_the_generator",
        "draws the starts from the global RNG even when a generator is given",
        [("(batch_size,), generator=generator)", "(batch_size,))")],
        mistake_zh="即使给了 generator，也从全局随机数发生器抽起点",
    ),
    Mutant(
        "sample_batch",
        "no_int64_cast",
        "keeps the stream's dtype (uint16/int32 on disk): nn.Embedding wants int64 indices",
        [("windows = tokens[offsets].to(torch.int64)", "windows = tokens[offsets]")],
        mistake_zh="保留数据流的数据类型（磁盘上的 uint16/int32）：nn.Embedding 要的是 int64 下标",
    ),
    Mutant(
        "sample_batch",
        "device_not_validated",
        "passes any device string through to torch (an unknown device fails later, not with a ValueError)",
        [
            (
                "    try:\n        device = torch.device(device)\n    except (RuntimeError, TypeError) as error:\n"
                '        raise ValueError(f"unknown device {device!r}: {error}") from None\n',
                "    device = torch.device(device)\n",
            )
        ],
        mistake_zh="任何设备字符串都直接传给 torch（未知设备到后面才出错，而不是报 ValueError）",
    ),
    Mutant(
        "sample_batch",
        "never_moved_to_device",
        "validates the device but returns the batch on the CPU",
        [("return inputs.to(device), targets.to(device)", "return inputs, targets")],
        mistake_zh="检查了设备，返回的批却还在 CPU 上",
    ),
    Mutant(
        "pack_documents",
        "positions_not_reset",
        "numbers positions across the whole packed row instead of restarting at 0 per document",
        [
            (
                "input_ids, labels, position_ids, document_ids = (torch.cat(pieces[key]) for key in pieces)",
                "input_ids, labels, position_ids, document_ids = (torch.cat(pieces[key]) for key in pieces)\n"
                "    position_ids = torch.arange(input_ids.numel())",
            )
        ],
        mistake_zh="位置编号贯穿整个打包行，而不是每个文档从 0 重新开始",
    ),
    Mutant(
        "pack_documents",
        "eos_predicts_next_document",
        "labels the EOS with the first token of the next document (plain shift over the row)",
        [
            (
                "input_ids, labels, position_ids, document_ids = (torch.cat(pieces[key]) for key in pieces)",
                "input_ids, labels, position_ids, document_ids = (torch.cat(pieces[key]) for key in pieces)\n"
                "    labels = torch.cat([input_ids[1:], torch.tensor([-100])])",
            )
        ],
        mistake_zh="把 EOS 的标签设为下一个文档的第一个 token（整行简单错位）",
    ),
    Mutant(
        "pack_documents",
        "eos_in_next_document",
        "gives each EOS the id of the next document, so the separator attends into the text after it",
        [
            (
                'pieces["document_ids"].append(torch.full((length + 1,), index))',
                'pieces["document_ids"].append(torch.cat([torch.full((length,), index), torch.tensor([index + 1])]))',
            ),
        ],
        mistake_zh="把每个 EOS 的文档编号设为下一个文档的，分隔符关注到了它之后的文本",
    ),
    Mutant(
        "pack_documents",
        "no_validation",
        "accepts a document that contains the EOS id",
        [("if bool((document == eos_id).any()):", "if False:")],
        mistake_zh="接受含有 EOS id 的文档",
    ),
    Mutant(
        "packed_causal_mask",
        "strict_triangle",
        "uses j < i: a token cannot see itself, the first token of each document sees nothing (NaN)",
        [(".tril()  # j <= i", ".tril(-1)  # j <= i")],
        mistake_zh="用 j < i：token 看不到自己，每个文档的第一个 token 什么也看不到（NaN）",
    ),
    Mutant(
        "packed_causal_mask",
        "blocks_without_causality",
        "keeps the document blocks but forgets the causal triangle",
        [("return same_document & causal", "return same_document")],
        mistake_zh="保留了文档块，却忘了因果三角",
    ),
    Mutant(
        "packed_causal_mask",
        "causal_without_blocks",
        "a plain causal mask: tokens attend across document boundaries",
        [("return same_document & causal", "return causal.expand_as(same_document)")],
        mistake_zh="普通的因果掩码：token 跨越文档边界做注意力",
    ),
    Mutant(
        "packed_causal_mask",
        "upper_triangle",
        "triu instead of tril: every token reads the future of its document",
        [(".tril()  # j <= i", ".triu()  # j <= i")],
        mistake_zh="用 triu 代替 tril：每个 token 都读到了本文档的未来",
    ),
    Mutant(
        "checkpoint",
        "weights_only",
        "saves and restores the model's weights only (AdamW restarts from zero moments)",
        [('    optimizer.load_state_dict(state["optimizer"])\n', "")],
        mistake_zh="只保存和恢复模型权重（AdamW 从零矩重新开始）",
    ),
    Mutant(
        "checkpoint",
        "no_scheduler",
        "does not restore the scheduler: the warmup starts again after every restart",
        [('    scheduler.load_state_dict(state["scheduler"])\n', "")],
        mistake_zh="不恢复调度器：每次重启后预热都重新开始",
    ),
    Mutant(
        "checkpoint",
        "no_generator",
        "does not restore the sampler's generator: the resumed run draws other batches",
        [('    generator.set_state(state["generator"])\n', "")],
        mistake_zh="不恢复采样器的 generator：恢复后的运行抽到不同的批",
    ),
    Mutant(
        "checkpoint",
        "no_global_rng",
        "does not restore the global RNG: dropout draws other masks after the restart",
        [('    torch.set_rng_state(state["cpu_rng"])\n', "")],
        mistake_zh="不恢复全局随机数发生器：重启后 dropout 抽到不同的掩码",
    ),
    Mutant(
        "checkpoint",
        "pickles_the_generator",
        "saves the generator object itself: torch.load(weights_only=True) refuses the file",
        [
            ('"generator": generator.get_state(),', '"generator": generator,'),
            ('generator.set_state(state["generator"])', 'generator.set_state(state["generator"].get_state())'),
        ],
        mistake_zh="保存 generator 对象本身：torch.load(weights_only=True) 拒绝这个文件",
    ),
    Mutant(
        "checkpoint",
        "step_lost",
        "returns 0 instead of the saved step",
        [('return int(state["step"])', "return 0")],
        mistake_zh="返回 0 而不是保存的步数",
    ),
]
