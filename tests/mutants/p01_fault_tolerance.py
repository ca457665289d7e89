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
    ),
    Mutant(
        "checkpoint_interval",
        "daly_without_cap",
        "no cap at M when delta >= 2M",
        [("if checkpoint_seconds >= 2 * mtbf_seconds:", "if checkpoint_seconds >= 2 * mtbf_seconds and False:")],
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
    ),
    Mutant(
        "expected_goodput",
        "exp_minus_one",
        "math.exp(x) - 1 instead of math.expm1(x): digits lost when failures are rare",
        [("math.expm1(segment / mtbf_seconds)", "(math.exp(segment / mtbf_seconds) - 1)")],
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
    ),
    Mutant(
        "save_checkpoint",
        "temporary_in_tmp",
        "makes the temporary file in the system temp directory (maybe another filesystem: rename not atomic)",
        [("tempfile.mkstemp(dir=directory,", "tempfile.mkstemp(dir=tempfile.gettempdir(),")],
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
    ),
    Mutant(
        "save_checkpoint",
        "missing_is_error",
        "raises FileNotFoundError when there is no checkpoint yet instead of returning None",
        [("    if not os.path.exists(path):\n        return None\n", "")],
    ),
]
