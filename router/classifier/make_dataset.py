#!/usr/bin/env python3
"""Builds the routing classifier's labelled data: train.jsonl and heldout.jsonl.

Sources (data/sources/, licences beside them):
  - GSM8K train questions (MIT, OpenAI): math word problems -> accuracy_critical
  - CLINC150 train+val utterances (CC BY 3.0, Larson et al. 2019): short assistant requests
    -> latency_critical
  - Examples written for Tandem here, from templates: code, knowledge and reasoning questions and
    agentic planning (accuracy_critical); extraction, summarization, classification and triage,
    and steps inside agent loops (latency_critical).

The held-out split takes every example whose hash falls in the last 10%, and for the templated
categories whole templates are held out, so the evaluation sees phrasings it never trained on.
Deterministic: the same inputs always give the same files.
Usage: make_dataset.py [OUT_DIR]   (default: data/ beside this script)
"""
import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "data", "sources")
rng = random.Random(20261201)

LANGS = ["Python", "C++", "Rust", "Go", "Java", "TypeScript", "JavaScript", "Kotlin", "SQL", "Bash",
         "Haskell", "C#", "Swift", "Ruby", "Scala"]
TASKS = ["parses an ISO 8601 date", "merges two sorted lists", "detects a cycle in a linked list",
         "implements an LRU cache", "computes the edit distance of two strings",
         "reads a CSV file and groups rows by a column", "retries an HTTP request with backoff",
         "validates an email address", "serializes a tree to JSON", "finds the median of a stream",
         "implements a thread-safe queue", "parses command-line flags",
         "rate-limits calls with a token bucket", "walks a directory recursively",
         "deduplicates records by key", "computes a rolling average",
         "implements binary search over a rotated array", "topologically sorts a dependency graph",
         "streams a large file line by line", "memoizes an expensive function"]
ERRORS = ["a segmentation fault", "a null pointer exception", "an index out of range error",
          "a deadlock", "a race condition", "a borrow checker error", "a stack overflow",
          "a type error", "a memory leak", "an off-by-one error"]
SNIPPETS = ["def f(xs):\n    for i in range(len(xs)+1):\n        print(xs[i])",
            "for (int i = 0; i <= n; ++i) { sum += a[i]; }",
            "let v = vec![1, 2, 3];\nlet first = &v[0];\nv.push(4);\nprintln!(\"{}\", first);",
            "SELECT name, COUNT(*) FROM orders GROUP BY customer_id;",
            "func worker(ch chan int) { for { v := <-ch; fmt.Println(v) } }",
            "const total = items.reduce((a, b) => a + b.price);",
            "std::vector<int> v; v.reserve(10); v[3] = 1;",
            "while read line; do echo $line | cut -d, -f2; done < data.csv"]
CONCEPTS = [("quantum entanglement", "physics"), ("CRISPR gene editing", "biology"),
            ("the Byzantine generals problem", "distributed systems"),
            ("monetary policy transmission", "economics"), ("the halting problem", "computer science"),
            ("plate tectonics", "geology"), ("the Treaty of Westphalia", "history"),
            ("Bayesian inference", "statistics"), ("the Krebs cycle", "biochemistry"),
            ("general relativity", "physics"), ("transformer attention", "machine learning"),
            ("the CAP theorem", "databases"), ("Godel's incompleteness theorems", "logic"),
            ("photosynthesis", "biology"), ("the French Revolution", "history"),
            ("public key cryptography", "security"), ("supply and demand elasticity", "economics"),
            ("the immune response to vaccines", "medicine"), ("black hole evaporation", "astrophysics"),
            ("consensus with Raft", "distributed systems")]
PAIRS = [("TCP", "UDP"), ("mitosis", "meiosis"), ("stocks", "bonds"), ("RAM", "ROM"),
         ("a virus", "a bacterium"), ("common law", "civil law"), ("B-trees", "LSM trees"),
         ("classical", "operant conditioning"), ("Keynesian", "monetarist economics"),
         ("optimistic", "pessimistic locking"), ("weather", "climate"), ("DNA", "RNA")]

ACCURACY_TEMPLATES = {
    "code_write": ["Write a {lang} function that {task}.",
                   "Implement, in {lang}, code that {task}. Include tests.",
                   "can you write me some {lang} that {task}",
                   "I need a {lang} class that {task}; handle errors properly.",
                   "hey, quick one: how do I write {lang} that {task}?",
                   "Generate a {lang} program that {task} and explain the complexity.",
                   "Please code up something in {lang} which {task}.",
                   "Can you show me idiomatic {lang} that {task}?"],
    "code_fix": ["Fix the bug in this {lang} code:\n```\n{snippet}\n```",
                 "Why does this code cause {error}?\n```\n{snippet}\n```",
                 "my {lang} program crashes with {error}, here is the code: {snippet}",
                 "This compiles but gives wrong results, what's wrong?\n{snippet}",
                 "Debug this for me:\n```\n{snippet}\n```\nIt fails with {error}.",
                 "Review this {lang} snippet and explain what is wrong:\n{snippet}"],
    "code_design": ["Design a {lang} module that {task}, and explain the trade-offs.",
                    "What architecture would you use for a service that {task} at scale?",
                    "Propose an API in {lang} for a library that {task}.",
                    "How should I structure tests for {lang} code that {task}?",
                    "How would you refactor a {lang} codebase where a function {task} to be testable?"],
    "knowledge": ["Explain {concept} as it is understood in {field}.",
                  "What are the open research questions about {concept}?",
                  "how does {concept} actually work",
                  "Teach me {concept} like I'm a graduate student in {field}.",
                  "What did the key papers on {concept} show, and what remains disputed?",
                  "Write a detailed essay on {concept} for a {field} journal.",
                  "Give a rigorous explanation of {concept} with references to key results in {field}.",
                  "What is the difference between {a} and {b}? Be precise."],
    "reasoning": ["Prove that the sum of the first n odd numbers is n squared.",
                  "Compare {a} and {b} step by step and justify which is better for a bank.",
                  "Derive the expected value of {n} rolls of a fair die and explain why.",
                  "If a train leaves at {m} am going {n} km/h, when does it arrive 300 km away? Show your work.",
                  "Is it possible that {a} outperforms {b}? Reason carefully before answering.",
                  "A bag has {m} red and {n} blue balls. What is the probability of drawing two red ones?",
                  "Analyze the trade-offs between {a} and {b} for a system serving {n} users."],
    "agentic_plan": ["You are an autonomous agent with tools: search, browser, python, file_write. "
                     "Plan and carry out a multi-step task: build a report on {concept} with "
                     "citations and a chart.",
                     "Act as a coding agent. The repository has failing tests in the {lang} module "
                     "that {task}. Investigate, edit the files and make the tests pass.",
                     "Research {concept} using the web tools, then write a summary with sources and "
                     "a list of follow-up experiments.",
                     "You can call {tool} and python. Work out a plan to migrate our {lang} service "
                     "that {task}, execute it, and report what changed.",
                     "Using the available tools, book a trip: compare three flight options, check "
                     "the weather, and write an itinerary for {n} days."],
}

TICKETS = ["I was charged twice for my subscription this month", "the app crashes when I open settings",
           "I can't reset my password", "please cancel my order 4412", "the invoice shows the wrong VAT number",
           "my package never arrived", "how do I add a second user to my account",
           "the dashboard is very slow since yesterday", "I want a refund for the last purchase",
           "my card was declined but money left my account"]
DOCS = ["The meeting moved the launch to March because the supplier missed two deadlines; marketing "
        "will prepare a new plan by Friday.",
        "Revenue grew 12% quarter on quarter, driven by enterprise deals, while churn stayed flat at 3%.",
        "The patient reported mild headaches for a week; blood pressure was normal and no medication "
        "was prescribed.",
        "Our team fixed the login outage within 40 minutes; the root cause was an expired certificate.",
        "The city council approved the new bike lanes, with construction starting in the spring.",
        "Alice will handle the customer call, Bob the slides, and the budget review is postponed."]
PEOPLE = ["Maria Gonzalez", "John Smith", "Wei Chen", "Aisha Khan", "Lars Nilsson", "Priya Patel"]
TOOLS = ["search", "calculator", "weather", "calendar", "sql", "email", "browser"]

LATENCY_TEMPLATES = {
    "extraction": ["Extract the person's name and email from: '{person} <{email}> wrote about the "
                   "renewal.' Respond only with JSON.",
                   "Pull the order number and date out of this message: 'Order {n} placed on "
                   "2026-0{m}-1{m}'. Output JSON with keys order_id and date.",
                   "get the phone number from: call {person} at 555-01{m}{m}",
                   "What company is mentioned here? '{person} from Acme signed the deal.' One word.",
                   "Return the amount and currency in '{ticket}, total {n} EUR' as JSON.",
                   "From the text '{doc}', list the dates and names mentioned as key-value pairs."],
    "summarization": ["Summarize in one sentence: {doc}", "TL;DR: {doc}",
                      "shorten this: {doc}", "Make this a headline: {doc}",
                      "Condense to 10 words: {doc}",
                      "Give me a one-line summary of this update: {doc}"],
    "classification": ["Classify this support ticket as billing, technical or account: '{ticket}'",
                       "Is the sentiment of this review positive or negative? '{ticket}'",
                       "spam or not spam: '{ticket}'",
                       "Which department should get this: '{ticket}'?",
                       "Tag this message with a topic: '{ticket}'",
                       "Label the intent of: '{ticket}'. Answer with one word.",
                       "Triage: how urgent is this, low, medium or high? '{ticket}'"],
    "agent_step": ["Observation: {tool} returned {n} results.\nThought: which tool next? Answer with "
                   "the tool name only.",
                   "Tool output: {{\"status\": \"ok\", \"rows\": {n}}}\nNext action?",
                   "Action: {tool}\nResult: done\nWhat now? Reply continue or finish.",
                   "Previous step: {tool} failed with timeout. Retry, skip or abort?",
                   "Route this sub-task to one of [{tool}, summarizer, coder]: '{ticket}'",
                   "You are a router inside a multi-agent system. Pick the agent for: '{ticket}'. "
                   "Reply with billing_agent, tech_agent or account_agent.",
                   "Step {m} of the loop: the {tool} call succeeded. Continue or stop?"],
}


def fill(template):
    lang = rng.choice(LANGS)
    concept, field = rng.choice(CONCEPTS)
    a, b = rng.choice(PAIRS)
    return template.format(lang=lang, task=rng.choice(TASKS), error=rng.choice(ERRORS),
                           snippet=rng.choice(SNIPPETS), concept=concept, field=field, a=a, b=b,
                           n=rng.randint(2, 5000), m=rng.randint(1, 9), ticket=rng.choice(TICKETS),
                           doc=rng.choice(DOCS), person=rng.choice(PEOPLE),
                           email="user%d@example.com" % rng.randint(1, 999), tool=rng.choice(TOOLS))


def held_out(key):
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10 == 9


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "data")
    os.makedirs(out_dir, exist_ok=True)
    train, heldout = [], []

    def add(text, label, source, holdout_key):
        (heldout if held_out(holdout_key) else train).append(
            {"text": text, "label": label, "source": source})

    for line in open(os.path.join(SRC, "gsm8k_questions.jsonl")):
        t = json.loads(line)["text"]
        add(t, "accuracy_critical", "gsm8k", t)
    for line in open(os.path.join(SRC, "clinc150.jsonl")):
        t = json.loads(line)["text"]
        add(t, "latency_critical", "clinc150", t)
    for label, groups in (("accuracy_critical", ACCURACY_TEMPLATES),
                          ("latency_critical", LATENCY_TEMPLATES)):
        for group, templates in groups.items():
            for ti, template in enumerate(templates):
                # Whole templates go to the held-out side: one per group (the last).
                key = "holdout" if ti == len(templates) - 1 else "train"
                for _ in range(400):
                    text = fill(template)
                    (heldout if key == "holdout" else train).append(
                        {"text": text, "label": label, "source": "tandem/" + group})
    rng.shuffle(train)
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", heldout)):
        with open(os.path.join(out_dir, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print("train=%d heldout=%d" % (len(train), len(heldout)))


if __name__ == "__main__":
    main()
