"""Realistic wrong versions of the p02.swiglu solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "swiglu",
        "silu_on_up_branch",
        "applies the activation to the up projection instead of the gate",
        [("return F.linear(F.silu(gate) * up, w_down)", "return F.linear(gate * F.silu(up), w_down)")],
    ),
    Mutant(
        "swiglu",
        "gelu_gate",
        "uses GELU (GeGLU) where Llama uses SiLU",
        [("F.silu(gate) * up", "F.gelu(gate) * up")],
    ),
    Mutant(
        "swiglu",
        "sigmoid_gate",
        "uses sigmoid (the original GLU) instead of silu = z * sigmoid(z)",
        [("F.silu(gate) * up", "torch.sigmoid(gate) * up")],
    ),
    Mutant(
        "swiglu",
        "no_up_projection",
        "forgets the up branch: a plain MLP with the gate weights",
        [("F.linear(F.silu(gate) * up, w_down)", "F.linear(F.silu(gate), w_down)")],
    ),
    Mutant(
        "swiglu_hidden_dim",
        "rounds_down",
        "floors to a multiple instead of rounding up",
        [("multiple_of * ((hidden + multiple_of - 1) // multiple_of)", "multiple_of * (hidden // multiple_of)")],
    ),
    Mutant(
        "swiglu_hidden_dim",
        "always_adds_a_multiple",
        "h // m + 1 multiples: one too many when h is already on a multiple",
        [("multiple_of * ((hidden + multiple_of - 1) // multiple_of)", "multiple_of * (hidden // multiple_of + 1)")],
    ),
    Mutant(
        "swiglu_hidden_dim",
        "multiplier_after_rounding",
        "scales by ffn_dim_multiplier after rounding to the multiple",
        [
            ("hidden = int(ffn_dim_multiplier * hidden)", "pass"),
            (
                "return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                "hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)\n"
                "    return hidden if ffn_dim_multiplier is None else int(ffn_dim_multiplier * hidden)",
            ),
        ],
    ),
    Mutant(
        "swiglu_hidden_dim",
        "no_two_thirds",
        "keeps the plain MLP's 4 * dim",
        [("hidden = int(2 * (4 * dim) / 3)", "hidden = 4 * dim")],
    ),
    Mutant(
        "SwiGLU",
        "linear_with_bias",
        "nn.Linear's default bias=True: keys that no Llama checkpoint has",
        [("self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)", "self.gate_proj = nn.Linear(dim, hidden_dim)")],
    ),
    Mutant(
        "SwiGLU",
        "gate_and_up_swapped",
        "passes up_proj's weight as the gate in forward",
        [
            (
                "swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)",
                "swiglu(x, self.up_proj.weight, self.gate_proj.weight, self.down_proj.weight)",
            )
        ],
    ),
    Mutant(
        "SwiGLU",
        "frozen_weights",
        "detaches the weights in forward, so nothing trains",
        [
            (
                "swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)",
                "swiglu(x, self.gate_proj.weight.detach(), self.up_proj.weight, self.down_proj.weight.detach())",
            )
        ],
    ),
]
