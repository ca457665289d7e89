"""Realistic wrong versions of the p00.tensor_basics solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "move_batch",
        "casts_every_tensor",
        "casts ids and masks to the model dtype too (token 128001 becomes 128000 in bfloat16)",
        [("moved[name] = value.to(device=device)  ", "moved[name] = value.to(device=device, dtype=dtype)  ")],
        mistake_zh="把 ids 和 mask 也转成模型的数据类型（token 128001 在 bfloat16 中变成 128000）",
    ),
    Mutant(
        "move_batch",
        "integers_left_behind",
        "moves only the floating tensors to the device",
        [("moved[name] = value.to(device=device)  ", "moved[name] = value  ")],
        mistake_zh="只把浮点张量移到设备上",
    ),
    Mutant(
        "move_batch",
        "modifies_caller_dict",
        "assigns into the caller's dict and returns it",
        [("    moved = {}\n", "    moved = batch\n")],
        mistake_zh="直接写入调用者的 dict 并返回它",
    ),
    Mutant(
        "masks",
        "no_cache_offset",
        "forgets the offset S - T: a decoding query sees only key 0",
        [("return keys <= queries + offset ", "return keys <= queries ")],
        mistake_zh="忘了偏移 S - T：解码时的 query 只能看到 key 0",
    ),
    Mutant(
        "masks",
        "strict_inequality",
        "uses < instead of <=: a token cannot attend to itself",
        [("return keys <= queries + offset ", "return keys < queries + offset ")],
        mistake_zh="用 < 而不是 <=：token 不能关注自己",
    ),
    Mutant(
        "masks",
        "minus_inf_bias",
        "fills the masked places with -inf",
        [("torch.finfo(dtype).min)", 'float("-inf"))')],
        mistake_zh="被屏蔽的位置填 -inf",
    ),
    Mutant(
        "masks",
        "float32_minimum_everywhere",
        "uses float32's minimum for every dtype (it overflows to -inf in float16)",
        [("torch.finfo(dtype).min)", "torch.finfo(torch.float32).min)")],
        mistake_zh="对所有数据类型都用 float32 的最小值（在 float16 中溢出为 -inf）",
    ),
    Mutant(
        "masks",
        "calls_tril",
        "builds the mask with torch.tril (the reference)",
        [
            (
                "return keys <= queries + offset ",
                "return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(offset) ",
            )
        ],
        mistake_zh="用 torch.tril（即参考实现）构造掩码",
    ),
    Mutant(
        "masked_reductions",
        "divides_by_length",
        "divides the masked sum by the length of the axis instead of the count of real entries",
        [("count = weights.sum(dim=dim, keepdim=keepdim).clamp(min=1)", "count = x.shape[dim]")],
        mistake_zh="掩码求和后除以该轴的长度，而不是真实元素的个数",
    ),
    Mutant(
        "masked_reductions",
        "no_clamp",
        "divides by the count without clamping: a row with no real entry gives NaN",
        [
            (
                "count = weights.sum(dim=dim, keepdim=keepdim).clamp(min=1)",
                "count = weights.sum(dim=dim, keepdim=keepdim)",
            )
        ],
        mistake_zh="除以计数时不做 clamp：没有真实元素的行得到 NaN",
    ),
    Mutant(
        "masked_reductions",
        "half_precision_sum",
        "sums in the input dtype (no float32 compute)",
        [("compute = torch.promote_types(x.dtype, torch.float32)", "compute = x.dtype")],
        mistake_zh="在输入的数据类型下求和（没有用 float32 计算）",
    ),
    Mutant(
        "masked_reductions",
        "argmax_over_time",
        "takes the argmax over the time axis instead of the vocabulary",
        [("predictions = logits.argmax(dim=-1)", "predictions = logits.argmax(dim=-2)")],
        mistake_zh="沿时间轴而不是词表轴取 argmax",
    ),
    Mutant(
        "masked_reductions",
        "ignored_in_denominator",
        "divides by all positions, ignored ones included",
        [("/ keep.sum().to(torch.float32)", "/ float(targets.numel())")],
        mistake_zh="除以全部位置数，被忽略的位置也算在内",
    ),
]
