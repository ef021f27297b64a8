#!/usr/bin/env python3
"""Builds the routing classifier's labelled data: train.jsonl, heldout.jsonl and
heldout_sources.jsonl.

Sources (data/sources/, licences and attribution in its README). Each kind of traffic has
sources trained on whole and one held out whole, never trained on (TRAINED and HELD_OUT below):
  - math word problems -> accuracy_critical: GSM8K train trained on; SVAMP held out
  - factoid questions -> accuracy_critical: EntityQuestions, SQuAD's questions and QALD's
    trained on; WebQuestions and Mintaka's complex questions held out
  - questions and claims that need knowledge and several steps -> accuracy_critical: HotpotQA
    and FOLIO trained on; CREAK's claims (as true-or-false questions) held out
  - multi-step tasks for an agent with tools -> accuracy_critical: TaskBench, Seal-Tools, BFCL's
    multi-call requests and T-Eval's planning requests trained on; MetaTool's multi-tool queries
    and NesTools' tasks held out
  - code -> accuracy_critical: MBPP (tasks and stubs), StaQC's SQL titles, SEDE's query titles
    and GPTeacher's code instructions trained on (MBPP's held-out tasks below); BIRD's
    questions over a database held out
  - short requests to a task-oriented assistant -> latency_critical: CLINC150 (less the
    intents that ask for general knowledge), NLU++, TOPv2 and the Virtual Assistant sample's
    commands trained on; Banking77 held out; terse smart-home and media commands (the voice
    sources and Almond's device commands trained on; Home Assistant's test sentences held out)
  - dialogue turns and chit-chat -> latency_critical: Taskmaster's user turns, the
    personality chit-chat, PersonaChat and CaSiNo's small talk trained on; the chatterbot corpus
    held out
  - labelling prompts -> latency_critical: T0's amazon_polarity, dbpedia_14 and PAWS prompts
    (one source each), SNLI pairs in FLAN's templates, XED's emotion prompts, Tatoeba
    language identification and clickbait headlines trained on;
    self-instruct's classification seed tasks and poem-sentiment's promptsource prompts held
    out
  - Examples written for Tandem here, from templates (source "tandem/<family>"): code, code
    how-to questions, code stubs, knowledge and reasoning questions, short arithmetic word
    problems and agentic planning (accuracy_critical); extraction, summarization,
    classification and triage, steps inside agent loops and task-oriented chat turns
    (latency_critical).

Every example carries its source, so the trainer can hold out whole sources in turn
(tandem-train-classifier --cross_validate). The fixed held-out files, used for the shipped
model's evaluation and by ctest:
  - heldout_sources.jsonl: the whole sources never trained on (HELD_OUT and SVAMP): traffic
    from sources the model has never seen;
  - heldout.jsonl: phrasings never trained on from the trained sources: for every templated
    family whole templates (the last one or two of the family), and for MBPP whole tasks (both
    kinds of example of a task): ids 1-10 and a hashed fifth.
Exact duplicates are dropped, and a held-out text that also occurs in train is dropped.
Deterministic: the same inputs always give the same files. Standard library only.
Usage: make_dataset.py [OUT_DIR]   (default: data/ beside this script)
"""
import gzip
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
A, L = "accuracy_critical", "latency_critical"
# (file under data/sources without .jsonl.gz, class, field holding the text): trained on whole.
TRAINED = (
    ("gsm8k_questions", A, "text"),  # math word problems
    ("entityquestions", A, "text"),  # factoid questions about entities
    ("hotpotqa", A, "text"),  # multi-hop and comparison questions
    ("fever", A, "text"),  # claims to verify
    ("hover", A, "text"),  # many-hop claims to verify
    ("csqa2", A, "text"),  # yes/no commonsense questions
    ("folio", A, "text"),  # premises and a conclusion to judge
    ("taskbench", A, "text"),  # multi-step tasks for an agent with tools
    ("staqc_sql", A, "text"),  # SQL how-to question titles
    ("gpteacher_code", A, "text"),  # code-writing instructions
    ("squad", A, "text"),  # factoid questions written from Wikipedia paragraphs
    ("qald", A, "text"),  # questions over a knowledge base, written by its challenge organisers
    ("sealtools", A, "text"),  # multi-step requests for an agent with tools
    ("bfcl", A, "text"),  # requests that need several function calls
    ("teval", A, "text"),  # T-Eval's requests that need a plan over several tools
    ("sede", A, "text"),  # Stack Exchange Data Explorer query titles and descriptions
    ("pubmedqa", A, "text"),  # yes/no biomedical research questions
    ("medquad", A, "text"),  # medical knowledge questions (symptoms, causes, treatment)
    ("snli_flan", L, "text"),  # sentence-pair entailment labelling (FLAN's templates)
    ("xed_emotion", L, "text"),  # emotion labelling of subtitle lines
    ("tatoeba_langid", L, "text"),  # which language is this sentence in
    ("clickbait", L, "text"),  # is this headline clickbait
    ("clinc150", L, "text"),  # short requests to a task-oriented assistant
    ("nlupp", L, "text"),
    ("taskmaster", L, "text"),  # user turns of ordering and booking dialogues
    ("personality_chat", L, "text"),  # chit-chat to an assistant
    ("personachat", L, "text"),  # open chit-chat turns
    ("ovos_skills", L, "text"),  # voice-assistant commands and questions (weather, time, ...)
    ("ovos_mycroft", L, "text"),
    ("ovos_media", L, "text"),  # media playback commands
    ("topv2", L, "text"),  # requests to an assistant: weather, alarms, reminders, music, navigation
    ("thingpedia", L, "text"),  # commands to the Almond assistant: devices, media, timers
    ("botframework_va", L, "text"),  # a virtual assistant's example commands: email, music, lists
    ("casino", L, "text"),  # small talk between two people planning a camping trip
    ("bitext_support", L, "text"),  # customer-support requests: orders, refunds, accounts
)
# Held out whole, never trained on: at least one per kind of traffic (and SVAMP, below).
HELD_OUT = (
    ("webquestions", A),  # factoid questions, as entityquestions
    ("mintaka", A),  # complex questions about entities, as hotpotqa and qald
    ("bird", A),  # questions over a database, as sede
    ("creak", A),  # true-or-false claims that need knowledge and reasoning, as fever and hotpotqa
    ("boolq", A),  # yes/no questions that need knowledge, as hotpotqa's comparisons
    ("metatool", A),  # requests that need several tools, as taskbench
    ("nestools", A),  # tasks that need nested tool calls, as sealtools
    ("banking77", L),  # short requests to an assistant, as clinc150 and nlupp
    ("homeassistant", L),  # terse smart-home and media commands
    ("chatterbot", L),  # chit-chat, as personality_chat
    ("selfinstruct_classify", L),  # labelling instructions, as t0/*
    ("poem_sentiment", L),  # sentiment labelling of verses (promptsource's templates)
)
SOURCE_NAMES = {"gsm8k_questions": "gsm8k"}
# CLINC150 intents whose answer is general knowledge rather than the assistant's own state or a
# quick action ("what does lethargic mean", "how do i jump start my car", "tell me a fun fact
# about koalas"): knowledge work is accuracy_critical, so they are left out rather than taught
# as latency_critical.
CLINC150_KNOWLEDGE = frozenset((
    "calculator", "calories", "carry_on", "cook_time", "definition", "fun_fact",
    "improve_credit_score", "ingredient_substitution", "ingredients_list", "international_visa",
    "jump_start", "meaning_of_life", "measurement_conversion", "nutrition_info", "oil_change_how",
    "plug_type", "recipe", "spelling", "tire_change", "translate", "travel_suggestion",
    "timezone", "vaccines"))
T0_DATASET = re.compile(r"^(amazon_polarity|dbpedia_14|paws_labeled_final)")


def read_source(name):
    """The rows of data/sources/NAME.jsonl.gz."""
    with gzip.open(os.path.join(SRC, name + ".jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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

    # Public sources (data/sources/README.md), by kind of traffic: each kind has sources trained
    # on whole and one held out whole, never trained on.
    for name, label, field in TRAINED:
        for r in read_source(name):
            if name == "clinc150" and r["intent"] in CLINC150_KNOWLEDGE:
                continue
            add(train, r[field], label, SOURCE_NAMES.get(name, name))
    for r in read_source("t0_classify"):
        # One source per underlying dataset: sentiment, topic and paraphrase labelling.
        add(train, r["text"], "latency_critical", "t0/" + T0_DATASET.match(r["template"]).group(1))
    for name, label in HELD_OUT:
        for r in read_source(name):
            add(heldout_sources, r["text"], label, name)
    for r in read_source("svamp"):
        add(heldout_sources, (r["body"].strip() + " " + r["question"].strip()).strip(),
            "accuracy_critical", "svamp")
    for r in read_source("mbpp"):
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
    unique_heldout = []
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
