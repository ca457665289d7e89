"""Realistic wrong versions of the p02.data_loading solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sample_batch",
        "last_start_never_drawn",
        "draws starts from randint(N - T - 1): the last valid window is never sampled",
        [("torch.randint(num_tokens - context_length, ", "torch.randint(num_tokens - context_length - 1, ")],
    ),
    Mutant(
        "sample_batch",
        "targets_not_shifted",
        "returns the inputs as targets (no shift by one): the model learns to copy its input",
        [("inputs, targets = windows[:, :-1], windows[:, 1:]", "inputs, targets = windows[:, :-1], windows[:, :-1]")],
    ),
    Mutant(
        "sample_batch",
        "ignores_the_generator",
        "draws the starts from the global RNG even when a generator is given",
        [("(batch_size,), generator=generator)", "(batch_size,))")],
    ),
    Mutant(
        "sample_batch",
        "no_int64_cast",
        "keeps the stream's dtype (uint16/int32 on disk): nn.Embedding wants int64 indices",
        [("windows = tokens[offsets].to(torch.int64)", "windows = tokens[offsets]")],
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
    ),
    Mutant(
        "sample_batch",
        "never_moved_to_device",
        "validates the device but returns the batch on the CPU",
        [("return inputs.to(device), targets.to(device)", "return inputs, targets")],
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
    ),
    Mutant(
        "pack_documents",
        "no_validation",
        "accepts a document that contains the EOS id",
        [("if bool((document == eos_id).any()):", "if False:")],
    ),
    Mutant(
        "packed_causal_mask",
        "strict_triangle",
        "uses j < i: a token cannot see itself, the first token of each document sees nothing (NaN)",
        [(".tril()  # j <= i", ".tril(-1)  # j <= i")],
    ),
    Mutant(
        "packed_causal_mask",
        "blocks_without_causality",
        "keeps the document blocks but forgets the causal triangle",
        [("return same_document & causal", "return same_document")],
    ),
    Mutant(
        "packed_causal_mask",
        "causal_without_blocks",
        "a plain causal mask: tokens attend across document boundaries",
        [("return same_document & causal", "return causal.expand_as(same_document)")],
    ),
    Mutant(
        "packed_causal_mask",
        "upper_triangle",
        "triu instead of tril: every token reads the future of its document",
        [(".tril()  # j <= i", ".triu()  # j <= i")],
    ),
    Mutant(
        "checkpoint",
        "weights_only",
        "saves and restores the model's weights only (AdamW restarts from zero moments)",
        [('    optimizer.load_state_dict(state["optimizer"])\n', "")],
    ),
    Mutant(
        "checkpoint",
        "no_scheduler",
        "does not restore the scheduler: the warmup starts again after every restart",
        [('    scheduler.load_state_dict(state["scheduler"])\n', "")],
    ),
    Mutant(
        "checkpoint",
        "no_generator",
        "does not restore the sampler's generator: the resumed run draws other batches",
        [('    generator.set_state(state["generator"])\n', "")],
    ),
    Mutant(
        "checkpoint",
        "no_global_rng",
        "does not restore the global RNG: dropout draws other masks after the restart",
        [('    torch.set_rng_state(state["cpu_rng"])\n', "")],
    ),
    Mutant(
        "checkpoint",
        "pickles_the_generator",
        "saves the generator object itself: torch.load(weights_only=True) refuses the file",
        [
            ('"generator": generator.get_state(),', '"generator": generator,'),
            ('generator.set_state(state["generator"])', 'generator.set_state(state["generator"].get_state())'),
        ],
    ),
    Mutant(
        "checkpoint",
        "step_lost",
        "returns 0 instead of the saved step",
        [('return int(state["step"])', "return 0")],
    ),
]
