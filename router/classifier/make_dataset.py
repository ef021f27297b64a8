#!/usr/bin/env python3
"""Builds the routing classifier's labelled data: train.jsonl, heldout.jsonl and
heldout_sources.jsonl.

Sources (data/sources/, licences and attribution beside them). Each kind of traffic that comes
from public data has one source (or more) trained on and another held out whole:
  - math word problems -> accuracy_critical: GSM8K train questions (MIT, OpenAI) trained on;
    SVAMP (MIT, Patel et al. 2021) held out whole
  - short requests to a task-oriented assistant -> latency_critical: CLINC150 train+val
    utterances (CC BY 3.0, Larson et al. 2019) and NLU++ banking and hotels utterances
    (CC BY 4.0, Casanueva et al. 2022) trained on; Banking77 train utterances (a hashed 2,000;
    CC BY 4.0, Casanueva et al. 2020) held out whole
  - MBPP tasks 1-10 and 511-974 (CC BY 4.0, Austin et al. 2021): the task descriptions
    ("mbpp/text") and bare function stubs made from the reference solutions ("mbpp/stub")
    -> accuracy_critical
  - Examples written for Tandem here, from templates (source "tandem/<family>"): code, code
    how-to questions, code stubs, knowledge and reasoning questions, short arithmetic word
    problems and agentic planning (accuracy_critical); extraction, summarization,
    classification and triage, steps inside agent loops and task-oriented chat turns
    (latency_critical).

Every example carries its source, so the trainer can hold out whole sources in turn
(tandem-train-classifier --cross_validate). The fixed held-out files, used for the shipped
model's evaluation and by ctest:
  - heldout_sources.jsonl: the whole sources never trained on (SVAMP, Banking77);
  - heldout.jsonl: those, plus for every templated family whole templates (the last one or two
    of the family), so it measures phrasings never trained on, and for MBPP whole tasks (both
    kinds of example of a task): ids 1-10 and a hashed fifth.
GSM8K, CLINC150 and NLU++ are trained on whole.
Exact duplicates are dropped, and a held-out text that also occurs in train is dropped.
Deterministic: the same inputs always give the same files. Standard library only.
Usage: make_dataset.py [OUT_DIR]   (default: data/ beside this script)
"""
import hashlib
import json
import os
import random
import re
import sys

sys.dont_write_bytecode = True  # ctest runs this from the source tree: leave no __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import templates  # noqa: E402  (beside this script)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "data", "sources")
PER_TEMPLATE = 150


def bucket(key, n):
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % n


def mbpp_stub(task_id, text, code):
    """A bare stub of the last top-level function of `code`, documented from `text`."""
    defs = re.findall(r"^def\s+(\w+)\s*\(([^)]*)\)\s*(->\s*[^:]+)?:", code, re.M)
    if not defs:
        return None
    name, args, ret = defs[-1]
    args = re.sub(r"\s+", " ", args).strip()
    doc = re.sub(r"^(Write|write|Wrtie)\s+an?\s+(python\s+)?(function|program)\s+(to|that|which)\s+",
                 "", text.strip())
    doc = doc[:1].upper() + doc[1:]
    sig = "def %s(%s)%s:" % (name, args, (" " + ret.strip()) if ret else "")
    variant = task_id % 4
    if variant == 0:
        return '%s\n    """%s"""\n' % (sig, doc)
    if variant == 1:
        return '%s\n    """%s"""\n    pass\n' % (sig, doc)
    if variant == 2:
        return '%s\n    """\n    %s\n    """\n    raise NotImplementedError\n' % (sig, doc)
    return "# %s\n%s\n    ...\n" % (doc, sig)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "data")
    os.makedirs(out_dir, exist_ok=True)
    train, heldout, heldout_sources = [], [], []

    def add(rows, text, label, source):
        rows.append({"text": text, "label": label, "source": source})

    # Trained on whole: GSM8K, CLINC150 and NLU++ (another source of their kind is held out whole).
    for line in open(os.path.join(SRC, "gsm8k_questions.jsonl")):
        add(train, json.loads(line)["text"], "accuracy_critical", "gsm8k")
    for line in open(os.path.join(SRC, "clinc150.jsonl")):
        add(train, json.loads(line)["text"], "latency_critical", "clinc150")
    for line in open(os.path.join(SRC, "nlupp.jsonl")):
        add(train, json.loads(line)["text"], "latency_critical", "nlupp")
    # Held out whole, never trained on: SVAMP (math word problems, as GSM8K) and Banking77
    # (short requests to a task-oriented assistant, as CLINC150).
    for line in open(os.path.join(SRC, "svamp.jsonl")):
        r = json.loads(line)
        add(heldout_sources, (r["body"].strip() + " " + r["question"].strip()).strip(),
            "accuracy_critical", "svamp")
    for line in open(os.path.join(SRC, "banking77.jsonl")):
        add(heldout_sources, json.loads(line)["text"], "latency_critical", "banking77")
    for line in open(os.path.join(SRC, "mbpp.jsonl")):
        r = json.loads(line)
        # Whole tasks held out: the model never sees any form of them.
        rows = heldout if r["task_id"] <= 10 or bucket("mbpp%d" % r["task_id"], 5) == 4 else train
        add(rows, r["text"], "accuracy_critical", "mbpp/text")
        stub = mbpp_stub(r["task_id"], r["text"], r["code"])
        if stub:
            add(rows, stub, "accuracy_critical", "mbpp/stub")

    rng = random.Random(20261201)
    for label, families in (("accuracy_critical", templates.ACCURACY),
                            ("latency_critical", templates.LATENCY)):
        for family in sorted(families):
            tpls = families[family]
            # The last template of a family is held out whole, the last two of large families.
            held = 2 if len(tpls) >= 12 else 1
            for ti, template in enumerate(tpls):
                rows = heldout if ti >= len(tpls) - held else train
                for _ in range(PER_TEMPLATE):
                    add(rows, templates.vary(templates.fill(template, rng), rng), label,
                        "tandem/" + family)

    seen = set()
    unique_train = []
    for r in train:
        if r["text"] not in seen:
            seen.add(r["text"])
            unique_train.append(r)
    unique_sources = []
    for r in heldout_sources:
        if r["text"] not in seen:
            seen.add(r["text"])
            unique_sources.append(r)
    unique_heldout = list(unique_sources)
    for r in heldout:
        if r["text"] not in seen:
            seen.add(r["text"])
            unique_heldout.append(r)
    random.Random(7).shuffle(unique_train)
    for name, rows in (("train.jsonl", unique_train), ("heldout.jsonl", unique_heldout),
                       ("heldout_sources.jsonl", unique_sources)):
        with open(os.path.join(out_dir, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print("train=%d heldout=%d heldout_sources=%d" % (len(unique_train), len(unique_heldout),
                                                      len(unique_sources)))


if __name__ == "__main__":
    main()
