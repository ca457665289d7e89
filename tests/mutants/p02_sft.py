"""Realistic wrong versions of the p02.sft solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "render_chat",
        "no_newline_after_end",
        "forgets the newline after <|im_end|>: the next header is glued to the end token",
        [
            (
                'parts.append(f"{IM_START}{role}\\n{content}{IM_END}\\n")',
                'parts.append(f"{IM_START}{role}\\n{content}{IM_END}")',
            )
        ],
        mistake_zh="忘了 <|im_end|> 之后的换行：下一个头粘在结束 token 上",
    ),
    Mutant(
        "render_chat",
        "space_instead_of_newline",
        "separates the role from the content with a space",
        [
            (
                'parts.append(f"{IM_START}{role}\\n{content}{IM_END}\\n")',
                'parts.append(f"{IM_START}{role} {content}{IM_END}\\n")',
            )
        ],
        mistake_zh="角色与内容之间用空格分隔",
    ),
    Mutant(
        "render_chat",
        "generation_header_without_newline",
        "opens the assistant turn without its newline: the model's first token must be a newline",
        [('parts.append(f"{IM_START}assistant\\n")', 'parts.append(f"{IM_START}assistant")')],
        mistake_zh="开启 assistant 轮次时没有换行：模型的第一个 token 必须是换行",
    ),
    Mutant(
        "render_chat",
        "system_anywhere",
        "accepts a system message in the middle of the conversation",
        [('if role == "system" and index != 0:', 'if role == "system" and index < 0:')],
        mistake_zh="接受出现在对话中间的 system 消息",
    ),
    Mutant(
        "chat_input_and_labels",
        "headers_trained",
        "labels the assistant's role header too (the span starts at <|im_start|>)",
        [('start = cursor + len(IM_START + message["role"] + "\\n")', "start = cursor")],
        mistake_zh="assistant 的角色头也打了标签（区间从 <|im_start|> 开始）",
    ),
    Mutant(
        "chat_input_and_labels",
        "end_token_not_trained",
        "leaves <|im_end|> out of the answer span: the model never learns to stop",
        [('end = start + len(message["content"] + IM_END)', 'end = start + len(message["content"])')],
        mistake_zh="答案区间不含 <|im_end|>：模型永远学不会停下",
    ),
    Mutant(
        "chat_input_and_labels",
        "spans_drift",
        "forgets the newline between messages when advancing: later spans drift by one character per message",
        [("cursor = end + 1  # the newline after IM_END", "cursor = end  # the newline after IM_END")],
        mistake_zh="前进时忘了消息之间的换行：后面的区间每条消息偏移一个字符",
    ),
    Mutant(
        "chat_input_and_labels",
        "no_mask",
        "trains on every token (prompts included)",
        [
            (
                "labels = torch.where(in_answer, input_ids, torch.full_like(input_ids, -100))",
                "labels = input_ids.clone()",
            )
        ],
        mistake_zh="在每个 token 上训练（包括提示）",
    ),
    Mutant(
        "sft_loss",
        "no_shift",
        "scores labels[:, t] with logits[:, t] (no shift by one)",
        [("targets = labels[:, 1:]", "targets = labels[:, :-1]")],
        mistake_zh="用 logits[:, t] 给 labels[:, t] 打分（没有错开一位）",
    ),
    Mutant(
        "sft_loss",
        "mean_over_all_positions",
        "divides by every position, masked ones included",
        [("return losses.sum() / valid.sum()", "return losses.mean()")],
        mistake_zh="除以全部位置数，被屏蔽的也算在内",
    ),
    Mutant(
        "sft_loss",
        "empty_rows_kept",
        "keeps rows without targets in the sequence mean (0 / 0 = NaN)",
        [("return (losses.sum(dim=1)[rows] / counts[rows]).mean()", "return (losses.sum(dim=1) / counts).mean()")],
        mistake_zh="没有目标的行也计入序列平均（0 / 0 = NaN）",
    ),
    Mutant(
        "sft_loss",
        "sequence_as_token",
        "computes the token mean for reduction='sequence'",
        [("return (losses.sum(dim=1)[rows] / counts[rows]).mean()", "return losses.sum() / valid.sum()")],
        mistake_zh="reduction='sequence' 时算的是 token 平均",
    ),
    Mutant(
        "sft_loss",
        "no_upcast",
        "takes log_softmax in the logits' dtype (bfloat16)",
        [("compute_dtype = torch.promote_types(logits.dtype, torch.float32)", "compute_dtype = logits.dtype")],
        mistake_zh="在 logits 的数据类型（bfloat16）下做 log_softmax",
    ),
    Mutant(
        "sft_loss",
        "calls_the_builtin",
        "uses F.cross_entropy, the builtin the exercise asks you to write",
        [
            (
                "return losses.sum() / valid.sum()",
                "return F.cross_entropy(logits[:, :-1].to(compute_dtype).flatten(0, 1), targets.flatten())",
            )
        ],
        mistake_zh="用了练习要你自己写的内置函数 F.cross_entropy",
    ),
    Mutant(
        "pack_sft",
        "first_label_kept",
        "copies every label, so each example's last token predicts the next example's first",
        [("packed_labels[r, start + 1 : start + n] = labels[1:]", "packed_labels[r, start : start + n] = labels")],
        mistake_zh="复制了每个标签，每个样本的最后一个 token 去预测下一个样本的第一个",
    ),
    Mutant(
        "pack_sft",
        "positions_not_reset",
        "numbers positions across the whole row",
        [
            (
                "position_ids[r, start : start + n] = torch.arange(n)",
                "position_ids[r, start : start + n] = torch.arange(start, start + n)",
            )
        ],
        mistake_zh="位置编号贯穿整行",
    ),
    Mutant(
        "pack_sft",
        "row_overfilled",
        "closes a row only when it is already over the limit",
        [
            ("if used + ids.numel() > max_length:", "if used + ids.numel() > max_length + 1:"),
            (
                "input_ids = torch.full((len(rows), max_length), pad_id",
                "input_ids = torch.full((len(rows), max_length + 1), pad_id",
            ),
            (
                "packed_labels = torch.full((len(rows), max_length), -100",
                "packed_labels = torch.full((len(rows), max_length + 1), -100",
            ),
            (
                "position_ids = torch.zeros((len(rows), max_length)",
                "position_ids = torch.zeros((len(rows), max_length + 1)",
            ),
        ],
        mistake_zh="一行超出上限之后才关闭它",
    ),
    Mutant(
        "pack_sft",
        "truncates_long_examples",
        "silently truncates an example longer than max_length instead of refusing it",
        [
            (
                "if ids.numel() == 0 or ids.shape != labels.shape or ids.numel() > max_length:",
                "ids, labels = ids[:max_length], labels[:max_length]\n        if ids.numel() == 0 or ids.shape != labels.shape:",
            )
        ],
        mistake_zh="默默截断超过 max_length 的样本，而不是拒绝",
    ),
]
