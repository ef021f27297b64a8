#!/usr/bin/env python3
"""Writes a 505-token tokenizer.json for the golden checkpoints (vocabulary 512), which ship none.

Usage: tiny_tokenizer.py QWEN3_TOKENIZER_JSON OUT_JSON

It is the start of Qwen3's byte-level BPE (tests/tokenizer/qwen3): the 256 byte tokens, the
first merges (ids below 500, with their pre-tokenizer, normalizer and decoder unchanged) and
the chat template's control tokens at ids 500-504. The golden models' weights are random, so
their answers are meaningless; what matters is that the CPU and CUDA engines tokenize, template
and decode identically, and this exercises the real tokenizer code on both.
"""
import json
import sys

KEEP = 500
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def main():
    src, out = sys.argv[1:3]
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    vocab = {piece: i for piece, i in tok["model"]["vocab"].items() if i < KEEP}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    by_content = {t["content"]: t for t in tok["added_tokens"]}
    tok["added_tokens"] = [dict(by_content[s], id=KEEP + k) for k, s in enumerate(SPECIALS)]
    tok["post_processor"] = None
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
