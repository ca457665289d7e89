"""Write tests/checks/data/p02_bpe_tokenizer_merges.json: the merges that the slow reference BPE of
tests/checks/p02_bpe_tokenizer.py learns from the lesson corpus, frozen so that the checks need not retrain it.

It holds, for 02_PyTorch_Algorithms/data/bpe_corpus.txt (its SHA-256 is recorded; the checks refuse a stale file):
300 merges with the lesson's tie-break (the smallest pair), 243 with CS336's (the greatest pair), and per merge of the
first list the total length of the distinct chunks that held the merged pair (what an incremental trainer touches).
Merges are stored as pairs of hex strings.

    python scripts/make_bpe_reference_merges.py     # rewrites the file; the committed copy must not change
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "tests" / "checks" / "p02_bpe_tokenizer.py"


def main() -> None:
    spec = importlib.util.spec_from_file_location("p02_bpe_tokenizer_checks", CHECKS)
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    chunks = checks.reference_chunk_counts(checks.corpus())
    touched: list[int] = []
    smaller = checks.spec_merges(chunks, checks.NUM_MERGES, checks.smallest_pair, touched)
    greater = checks.spec_merges(chunks, checks.VOCAB_500, checks.greatest_pair)
    data = {
        "corpus_sha256": hashlib.sha256(checks.corpus().encode("utf-8")).hexdigest(),
        "lexicographic_smaller": [[a.hex(), b.hex()] for a, b in smaller],
        "lexicographic_greater": [[a.hex(), b.hex()] for a, b in greater],
        "touched_per_merge": touched,
    }
    checks.REFERENCE_MERGES.parent.mkdir(parents=True, exist_ok=True)
    checks.REFERENCE_MERGES.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {checks.REFERENCE_MERGES.relative_to(ROOT)}: {len(smaller)} + {len(greater)} merges")


if __name__ == "__main__":
    main()
