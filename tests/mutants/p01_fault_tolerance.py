"""Realistic wrong versions of the p01.fault_tolerance solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "checkpoint_interval",
        "young_without_two",
        "sqrt(delta * M): forgets that a failure loses half a segment on average",
        [
            (
                "young = math.sqrt(2 * checkpoint_seconds * mtbf_seconds)",
                "young = math.sqrt(checkpoint_seconds * mtbf_seconds)",
            )
        ],
        mistake_zh="sqrt(delta * M)：忘了一次故障平均损失半个区间",
    ),
    Mutant(
        "checkpoint_interval",
        "young_units",
        "sqrt(2 * delta / M): the interval shrinks as failures get rarer",
        [
            (
                "young = math.sqrt(2 * checkpoint_seconds * mtbf_seconds)",
                "young = math.sqrt(2 * checkpoint_seconds / mtbf_seconds)",
            )
        ],
        mistake_zh="sqrt(2 * delta / M)：故障越少，间隔反而越短",
    ),
    Mutant(
        "checkpoint_interval",
        "daly_without_minus_delta",
        "Daly's bracket without the final - delta",
        [
            (
                "return young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_seconds",
                "return young * (1 + math.sqrt(ratio) / 3 + ratio / 9)",
            )
        ],
        mistake_zh="Daly 公式的括号后漏了 - delta",
    ),
    Mutant(
        "checkpoint_interval",
        "daly_without_cap",
        "no cap at M when delta >= 2M",
        [("if checkpoint_seconds >= 2 * mtbf_seconds:", "if checkpoint_seconds >= 2 * mtbf_seconds and False:")],
        mistake_zh="delta >= 2M 时没有把间隔封顶为 M",
    ),
    Mutant(
        "expected_goodput",
        "restart_without_risk",
        "adds the restart time per failure instead of the factor exp(R/M): restarts never fail",
        [
            (
                "wall = mtbf_seconds * math.exp(restart_seconds / mtbf_seconds) * math.expm1(segment / mtbf_seconds)",
                "wall = mtbf_seconds * math.expm1(segment / mtbf_seconds) + restart_seconds",
            )
        ],
        mistake_zh="每次故障加上重启时间，而不是乘因子 exp(R/M)：好像重启永远不会失败",
    ),
    Mutant(
        "expected_goodput",
        "checkpoint_outside_segment",
        "only tau must survive a failure: the checkpoint write is added afterwards, risk-free",
        [
            (
                "wall = mtbf_seconds * math.exp(restart_seconds / mtbf_seconds) * math.expm1(segment / mtbf_seconds)",
                "wall = mtbf_seconds * math.exp(restart_seconds / mtbf_seconds) * math.expm1(interval / mtbf_seconds)"
                " + checkpoint_seconds",
            )
        ],
        mistake_zh="只要求 tau 挺过故障：检查点写入是事后加上的，毫无风险",
    ),
    Mutant(
        "expected_goodput",
        "exp_minus_one",
        "math.exp(x) - 1 instead of math.expm1(x): digits lost when failures are rare",
        [("math.expm1(segment / mtbf_seconds)", "(math.exp(segment / mtbf_seconds) - 1)")],
        mistake_zh="用 math.exp(x) - 1 而不是 math.expm1(x)：故障罕见时丢失有效数字",
    ),
    Mutant(
        "save_checkpoint",
        "direct_write",
        "writes straight into path: a crash mid-write leaves a truncated checkpoint",
        [
            (
                'handle, temporary = tempfile.mkstemp(dir=directory, prefix=".ckpt-", suffix=".tmp")',
                "handle, temporary = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), path",
            )
        ],
        mistake_zh="直接写入 path：写到一半崩溃会留下截断的检查点",
    ),
    Mutant(
        "save_checkpoint",
        "temporary_in_tmp",
        "makes the temporary file in the system temp directory (maybe another filesystem: rename not atomic)",
        [("tempfile.mkstemp(dir=directory,", "tempfile.mkstemp(dir=tempfile.gettempdir(),")],
        mistake_zh="临时文件建在系统临时目录（可能在另一个文件系统上：rename 不是原子的）",
    ),
    Mutant(
        "save_checkpoint",
        "temporary_left_on_failure",
        "never removes the temporary file when torch.save fails (each failed save leaves a partial file behind)",
        [("os.remove(temporary)", "pass")],
        mistake_zh="torch.save 失败时从不删除临时文件（每次失败的保存都留下一个写了一半的文件）",
    ),
    Mutant(
        "save_checkpoint",
        "loads_temporary_file",
        "loads path + '.tmp' when it exists, as if it were newer",
        [
            (
                "    if not os.path.exists(path):\n        return None",
                "    if os.path.exists(path + '.tmp'):\n        return torch.load(path + '.tmp', weights_only=True)\n"
                "    if not os.path.exists(path):\n        return None",
            )
        ],
        mistake_zh="path + '.tmp' 存在时就加载它，好像它更新",
    ),
    Mutant(
        "save_checkpoint",
        "missing_is_error",
        "raises FileNotFoundError when there is no checkpoint yet instead of returning None",
        [("    if not os.path.exists(path):\n        return None\n", "")],
        mistake_zh="还没有检查点时抛出 FileNotFoundError，而不是返回 None",
    ),
]
