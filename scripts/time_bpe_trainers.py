"""Time the p02.bpe_tokenizer reference trainers: the slow `train_bpe` and `train_bpe_incremental`.

Runs the notebook's solution cells (only those, so that neither torch nor matplotlib is imported) and prints the CPU
time (`time.process_time`, which other jobs on the machine do not inflate) of each step: a vocabulary of 500 (256
bytes + 243 merges + <|endoftext|>) on the shipped 16 KB corpus, then the same on a generated corpus of `--mb` MB.

    time python scripts/time_bpe_trainers.py             # the shipped corpus, then 1 MB (the slow trainer: ~10 s)
    time python scripts/time_bpe_trainers.py --mb 0      # the shipped corpus only
"""

from __future__ import annotations

import argparse
import json
import runpy
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "02_PyTorch_Algorithms" / "01_BPE_Tokenizer.ipynb"
CORPUS = ROOT / "02_PyTorch_Algorithms" / "data" / "bpe_corpus.txt"
PRELUDE = """
import heapq, multiprocessing, re, time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
END_OF_TEXT = "<|endoftext|>"
"""
MERGES = 243  # a vocabulary of 500


def solutions() -> dict:
    namespace: dict = {"__name__": "bpe_solutions"}
    exec(PRELUDE, namespace)
    for cell in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]:
        if "solution" in cell["metadata"].get("tags", []):
            exec(compile("".join(cell["source"]), f"<{NOTEBOOK.name} solution>", "exec"), namespace)
    return namespace


def cpu(step):
    start = time.process_time()
    result = step()
    return result, time.process_time() - start


def report(name: str, text: str, ns: dict, slow: bool) -> None:
    chunks, counting = cpu(lambda: ns["count_pretokens"](text))
    fast, incremental = cpu(lambda: ns["train_bpe_incremental"](chunks, MERGES))
    line = (
        f"{name}: {len(text.encode('utf-8')):,} bytes, {len(chunks):,} distinct chunks; CPU seconds: "
        f"count_pretokens {counting:.3f}, train_bpe_incremental {incremental:.3f}"
    )
    if slow:
        merges, recount = cpu(lambda: ns["train_bpe"](text, MERGES))
        line += f", train_bpe {recount:.2f} (same merges: {merges == fast})"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="size of the generated corpus in MB (0: skip it)")
    args = parser.parse_args()
    ns = solutions()
    report("shipped corpus", CORPUS.read_text(encoding="utf-8"), ns, slow=True)
    if args.mb > 0:
        make_corpus = runpy.run_path(str(ROOT / "scripts" / "make_bpe_corpus.py"))["make_corpus"]
        report(f"generated corpus (seed 7, {args.mb:g} MB)", make_corpus(7, int(args.mb * 1e6)), ns, slow=True)


if __name__ == "__main__":
    main()
