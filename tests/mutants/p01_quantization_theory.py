"""Realistic wrong versions of the p01.quantization_theory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "absmax_fake_quantize",
        "q_max_power_of_two",
        "q_max = 2**(bits-1) (128 for INT8): the absmax maps to a code that does not exist",
        [("q_max = 2 ** (bits - 1) - 1", "q_max = 2 ** (bits - 1)")],
    ),
    Mutant(
        "absmax_fake_quantize",
        "truncates",
        "truncates toward zero instead of rounding to nearest",
        [("torch.round(blocks / scale)", "torch.trunc(blocks / scale)")],
    ),
    Mutant(
        "absmax_fake_quantize",
        "channel_max_over_inputs",
        "per channel: the absmax over the output rows (one scale per input column)",
        [
            (
                "blocks = w.float()  # (out, in): one scale per output row",
                "blocks = w.float().T.contiguous()  # (in, out): wrong axis",
            ),
            (
                "w_hat = (q * scale).reshape(rows, cols).to(w.dtype)",
                "w_hat = (q * scale).T.reshape(rows, cols).to(w.dtype) if granularity == 'channel' "
                "else (q * scale).reshape(rows, cols).to(w.dtype)",
            ),
            ("return w_hat, scale  # (out, 1)", "return w_hat, scale[:rows]"),
        ],
    ),
    Mutant(
        "absmax_fake_quantize",
        "groups_down_columns",
        "groups of consecutive rows of a column instead of consecutive inputs of a row",
        [
            (
                "blocks = w.float().reshape(rows * (cols // group_size), group_size)",
                "blocks = w.float().T.reshape(rows * (cols // group_size), group_size)",
            ),
            (
                "w_hat = (q * scale).reshape(rows, cols).to(w.dtype)",
                "w_hat = ((q * scale).reshape(cols, rows).T if granularity == 'group' "
                "else (q * scale).reshape(rows, cols)).to(w.dtype)",
            ),
        ],
    ),
    Mutant(
        "absmax_fake_quantize",
        "no_zero_guard",
        "divides by a zero absmax: NaN in an all-zero group",
        [
            (
                "scale = torch.where(absmax > 0, absmax / q_max, torch.ones_like(absmax))",
                "scale = absmax / q_max",
            )
        ],
    ),
    Mutant(
        "absmax_fake_quantize",
        "returns_float32",
        "returns w_hat in float32 whatever w's dtype",
        [("w_hat = (q * scale).reshape(rows, cols).to(w.dtype)", "w_hat = (q * scale).reshape(rows, cols)")],
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "mid_tread_intervals",
        "2**bits - 1 intervals instead of 2**bits levels",
        [("step = 2 * clip / 2**bits", "step = 2 * clip / (2**bits - 1)")],
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "granular_everywhere",
        "counts rounding noise for clipped samples too (no P(|X| <= clip))",
        [("granular = step**2 / 12 * inside", "granular = step**2 / 12")],
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "one_tail",
        "adds the clipping error of one tail only",
        [
            (
                "clipping = 2 * ((1 + outer**2) * tail + (clip - 2 * outer) * density)",
                "clipping = (1 + outer**2) * tail + (clip - 2 * outer) * density",
            )
        ],
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "clipped_to_clip",
        "clipped samples land on clip, not on the outermost level clip - step / 2",
        [("outer = clip - step / 2", "outer = clip")],
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "no_plus_one",
        "forgets the Q(clip) term of the second moment: outer**2 * Q instead of (1 + outer**2) * Q",
        [("(1 + outer**2) * tail", "outer**2 * tail")],
    ),
]
