#!/usr/bin/env python3
"""Tandem's CUDA engine against transformers, on the same random checkpoint (a GPU kit step).

Usage: compare_transformers.py OUTDIR

run.sh runs it with TANDEM_KIT_DIR (the kit) and TANDEM_KIT_STEP_SECONDS (the time the step may
take; default 120) set. Python 3 standard library, torch and transformers only.

For each architecture, a reduced-depth random checkpoint at the real widths (the released
config.json with fewer layers, one of each layer kind; vocabulary, hidden size, heads and experts
as released: 5.3 GB for Qwen3.5, 4.1 GB for Nemotron) is written by the kit's
tandem-make-checkpoint into a temporary directory. A few prompts of random token ids then go
through
  - Tandem's CUDA model: the kit's cuda_benchmark in logits mode (tests/bench/cuda_bench_logits.h):
    logits at the first positions (prefills of each prefix), at the whole prompt (prefill), and
    along a greedy continuation (decode steps), plus the greedy tokens;
  - transformers (Qwen3_5MoeForCausalLM for the text model, NemotronHForCausalLM) on the GPU, fed
    the prompt plus Tandem's greedy tokens, in BF16 and then in fp32 (the weights are BF16 values,
    so fp32 is the exact reference; BF16 shows how far transformers' own BF16 run is from it).

Reported per architecture: max and 90th-percentile |logit difference| of Tandem against the fp32
reference (per row: the max over the vocabulary), the same for transformers' BF16 run, argmax
agreement per row, and greedy agreement (Tandem's greedy tokens against the reference's argmax
along the same tokens). An architecture passes when every row whose reference top-2 margin exceeds
CLEAR_MARGIN has Tandem's argmax equal to the reference's, and the 90th-percentile row error is
within max(ABS_TOL, BF16_FACTOR x transformers' BF16 one). A transformers without the class (or
whose weight layout differs) is reported as skipped, never failed.

Writes OUTDIR/compare.json and OUTDIR/compare.md (a table for the summary) and the logs of the
kit tools; the last line printed is the summary run.sh shows. Time-boxed: it stops itself before
the step's limit and reports what it finished (an unfinished architecture is "incomplete", not
failed). Exit status: 0 when nothing failed and something
was compared, 77 when nothing could be compared, 1 when an architecture failed.
"""
import gc
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Reduced depth, real widths: each layer kind once.
QWEN_LAYER_TYPES = ["linear_attention", "full_attention"]
NEMOTRON_PATTERN = "M*E"
SEED = 1
# Prompt lengths: 80 crosses the gated delta rule's 64-token chunk.
PROMPT_LENGTHS = (5, 17, 80)
STEPS = 8  # greedy tokens per prompt
POSITIONS = 8  # prompt prefixes prefilled one by one (per-position logits)
# Pass criteria (see the module docstring). 0.5 is run.sh's e2e clear margin.
CLEAR_MARGIN = 0.5
ABS_TOL = 0.05
BF16_FACTOR = 1.5
# Time: keep this much of the step's limit for reporting; start a model only with this much left.
MARGIN_SECONDS = 10
MIN_MODEL_SECONDS = 35
DISK_BYTES_NEEDED = 12 << 30

MODELS = [
    # (architecture, transformers class, released config, checkpoint GB)
    ("qwen3_5_moe", "Qwen3_5MoeForCausalLM", "workers/model/configs/qwen3_5_moe/config.json", 5.3),
    ("nemotron_h", "NemotronHForCausalLM", "workers/model/configs/nemotron_h/config.json", 4.1),
]


START = time.monotonic()


def log(msg):
    print(f"[compare {time.monotonic() - START:5.1f}s] {msg}", flush=True)


class State:
    """What the report needs; shared with the watchdog and the signal handler."""

    def __init__(self, outdir, deadline):
        self.outdir = outdir
        self.deadline = deadline
        self.lock = threading.RLock()  # the signal handler may run while the main thread holds it
        self.results = {}  # architecture -> result dict
        self.facts = {}
        self.children = []
        self.tmp = None
        self.done = False

    def left(self):
        return self.deadline - time.monotonic()


def reduced_config(arch, path):
    with open(os.path.join(ROOT, path)) as f:
        cfg = json.load(f)
    if arch == "qwen3_5_moe":
        # The text model alone (Qwen3_5MoeForCausalLM): tensors under "model.", no vision tower.
        text = dict(cfg["text_config"])
        text.update(
            model_type="qwen3_5_moe_text",
            architectures=["Qwen3_5MoeForCausalLM"],
            num_hidden_layers=len(QWEN_LAYER_TYPES),
            layer_types=list(QWEN_LAYER_TYPES),
            mtp_num_hidden_layers=0,
            tie_word_embeddings=False,
        )
        return text
    cfg.update(num_hidden_layers=len(NEMOTRON_PATTERN), hybrid_override_pattern=NEMOTRON_PATTERN)
    return cfg


def prompts(vocab):
    rng = random.Random(SEED)
    return [
        {"id": f"p{i}", "tokens": [rng.randrange(vocab) for _ in range(n)]}
        for i, n in enumerate(PROMPT_LENGTHS)
    ]


def start_child(state, argv, log_path):
    with open(log_path, "w") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    with state.lock:
        state.children.append(p)
    return p


def wait_child(state, p, what):
    """Waits for p within the deadline; returns its exit status or raises on timeout."""
    try:
        return p.wait(timeout=max(1.0, state.left()))
    except subprocess.TimeoutExpired:
        p.kill()
        raise TimeoutError(f"{what} did not finish within the step's time")


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
        return " / ".join(lines[-n:])
    except OSError:
        return "(no log)"


def load_hf(cls, hf_dir, arch, torch, transformers):
    kwargs = {"output_loading_info": True}
    if arch == "nemotron_h":
        kwargs["use_mamba_kernels"] = False  # hub kernels need the network; the torch path is exact
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    dtype_key = "dtype" if version >= (4, 56) else "torch_dtype"
    kwargs[dtype_key] = torch.bfloat16
    model, info = cls.from_pretrained(hf_dir, **kwargs)
    problems = {k: [str(x) for x in info.get(k) or []]
                for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    problems = {k: v for k, v in problems.items() if v}
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    return model, problems


def hf_logits(model, seqs, torch):
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s], device="cuda", dtype=torch.long)
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
            if logits.shape[0] != len(s):
                raise RuntimeError(f"transformers gave {logits.shape[0]} rows for {len(s)} tokens")
            out.append(logits)
    return out


def read_tandem(prefix, torch):
    with open(prefix + ".json") as f:
        meta = json.load(f)
    with open(prefix + ".f32", "rb") as f:
        raw = bytearray(f.read())
    rows, vocab = meta["rows"], meta["vocab"]
    if len(raw) != rows * vocab * 4:
        raise RuntimeError(f"{prefix}.f32 holds {len(raw)} bytes, expected {rows} x {vocab} x 4")
    return meta, torch.frombuffer(raw, dtype=torch.float32).view(rows, vocab).cuda()


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else 0.0


def compare_rows(meta, tandem, ref32, ref16):
    """Per-row errors and agreement; ref32/ref16: per prompt, [positions][vocab] on the GPU."""
    err, err16, agree, clear_bad, rows = [], [], 0, [], 0
    greedy_agree, greedy_total, first_divergence = 0, 0, None
    for k, p in enumerate(meta["prompts"]):
        for r in p["rows"]:
            t, a, b = tandem[r["row"]], ref32[k][r["position"]], ref16[k][r["position"]]
            e = (t - a).abs().max().item()
            err.append(e if math.isfinite(e) else math.inf)  # a NaN in Tandem's logits fails
            e16 = (b - a).abs().max().item()
            if math.isfinite(e16):  # a NaN in transformers' BF16 run widens no tolerance
                err16.append(e16)
            top = a.topk(2).values
            margin = (top[0] - top[1]).item()
            same = int(t.argmax().item()) == int(a.argmax().item())
            agree += same
            rows += 1
            if not same and margin > CLEAR_MARGIN:
                clear_bad.append(f"{p['id']}@{r['position']} ({r['path']}, margin {margin:.2f})")
        n = len(p["tokens"])
        for j, g in enumerate(p["generated"]):
            greedy_total += 1
            if g == int(ref32[k][n - 1 + j].argmax().item()):
                greedy_agree += 1
            elif first_divergence is None:
                top = ref32[k][n - 1 + j].topk(2).values
                margin = (top[0] - top[1]).item()
                first_divergence = f"greedy first differs: {p['id']} step {j} (margin {margin:.3f})"
    p90, p90_16 = percentile(err, 0.9), percentile(err16, 0.9)
    tol = max(ABS_TOL, BF16_FACTOR * p90_16)
    res = {
        "rows": rows,
        "max_abs_dlogit": max(err),
        "p90_abs_dlogit": p90,
        "median_abs_dlogit": percentile(err, 0.5),
        "hf_bf16_max_abs_dlogit": max(err16, default=0.0),
        "hf_bf16_p90_abs_dlogit": p90_16,
        "tolerance_p90": tol,
        "argmax_agree": agree,
        "clear_margin_disagreements": clear_bad,
        "greedy_agree": greedy_agree,
        "greedy_total": greedy_total,
        "first_greedy_divergence": first_divergence,
    }
    ok = not clear_bad and p90 <= tol
    res["status"] = "pass" if ok else "fail"
    notes = []
    if p90 > tol:
        notes.append(f"p90 row error {p90:.4f} > tolerance {tol:.4f}")
    if clear_bad:
        notes.append("argmax differs at clear margins: " + ", ".join(clear_bad[:5]))
    if notes:
        res["note"] = "; ".join(notes)
    return res


class ReferenceUnavailable(Exception):
    """transformers cannot serve as the reference here (a skip, not a failure of Tandem)."""


def write_inputs(arch, cfg, ckpt):
    """The prompts file, and a directory transformers loads: config.json without the tandem_*
    marks, the checkpoint's weights linked."""
    work = os.path.dirname(ckpt)
    prompts_path = os.path.join(work, f"{arch}-prompts.jsonl")
    with open(prompts_path, "w") as f:
        for p in prompts(cfg["vocab_size"]):
            f.write(json.dumps(p) + "\n")
    hf_dir = os.path.join(work, f"{arch}-hf")
    os.makedirs(hf_dir, exist_ok=True)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    for name in os.listdir(ckpt):
        if name.endswith(".safetensors") or name.endswith(".index.json"):
            os.symlink(os.path.join(ckpt, name), os.path.join(hf_dir, name))
    return prompts_path, hf_dir, os.path.join(work, f"{arch}-tandem")


def load_reference(cls, hf_dir, arch, torch, transformers):
    try:
        model, problems = load_hf(cls, hf_dir, arch, torch, transformers)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises
        raise ReferenceUnavailable(f"transformers {transformers.__version__} could not load it: "
                                   f"{type(e).__name__}: {e}") from e
    if problems:
        note = "; ".join(f"{k}: {', '.join(v[:4])}{' ...' if len(v) > 4 else ''}"
                         for k, v in problems.items())
        del model
        raise ReferenceUnavailable(f"transformers {transformers.__version__}'s {cls.__name__} does "
                                   f"not load this layout ({note})")
    return model


def reference_logits(model, seqs, torch, transformers):
    """transformers' logits along `seqs`: (fp32, BF16), per sequence [positions][vocab]."""
    try:
        ref16 = hf_logits(model, seqs, torch)
        model.float()
        ref32 = hf_logits(model, seqs, torch)
    except Exception as e:  # noqa: BLE001
        raise ReferenceUnavailable(f"transformers {transformers.__version__} forward failed: "
                                   f"{type(e).__name__}: {e}") from e
    return ref32, ref16


def compare_model(state, arch, cls_name, cfg, writer, ckpt, kit, torch, transformers):
    """One architecture: returns its result dict."""
    t0 = time.monotonic()
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return {"status": "skipped",
                "note": f"transformers {transformers.__version__} has no {arch} ({cls_name})"}
    if state.left() < MIN_MODEL_SECONDS:
        return {"status": "skipped", "note": f"out of time ({state.left():.0f} s of the step left)"}
    if wait_child(state, writer, "tandem-make-checkpoint") != 0:
        return {"status": "error",
                "note": "tandem-make-checkpoint failed: " + tail(writer.log_path)}
    prompts_path, hf_dir, prefix = write_inputs(arch, cfg, ckpt)
    tandem_log = os.path.join(state.outdir, f"tandem-{arch}.log")
    tandem = start_child(state, [
        os.path.join(kit, "bin", "cuda_benchmark"), f"--checkpoint={ckpt}",
        f"--logits_prompts={prompts_path}", f"--logits_out={prefix}", f"--logits_steps={STEPS}",
        f"--logits_positions={POSITIONS}"], tandem_log)
    model = None
    try:
        log(f"{arch}: loading {cls_name} while Tandem's CUDA model runs the prompts")
        model = load_reference(cls, hf_dir, arch, torch, transformers)
        if wait_child(state, tandem, "cuda_benchmark --logits_prompts") != 0:
            return {"status": "fail", "note": "Tandem's CUDA model failed: " + tail(tandem_log)}
        meta, tandem_rows = read_tandem(prefix, torch)
        seqs = [p["tokens"] + p["generated"][:-1] for p in meta["prompts"]]
        log(f"{arch}: transformers on Tandem's tokens, BF16 then fp32")
        ref32, ref16 = reference_logits(model, seqs, torch, transformers)
        res = compare_rows(meta, tandem_rows, ref32, ref16)
    except ReferenceUnavailable as e:
        return {"status": "skipped", "note": str(e)}
    finally:
        if tandem.poll() is None:
            tandem.kill()
        del model
        gc.collect()
        torch.cuda.empty_cache()
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def model_line(arch, r):
    if "max_abs_dlogit" not in r:
        return f"{arch}: {r['status']}: {r.get('note', '')}"
    return (f"{arch}: {r['status']}, max|dlogit| {r['max_abs_dlogit']:.3f} "
            f"(p90 {r['p90_abs_dlogit']:.3f}; "
            f"transformers BF16 {r['hf_bf16_max_abs_dlogit']:.3f}), "
            f"argmax {r['argmax_agree']}/{r['rows']}, "
            f"greedy {r['greedy_agree']}/{r['greedy_total']}")


def table_row(arch, r):
    shape = {"qwen3_5_moe": "layers " + "+".join(t.split("_")[0] for t in QWEN_LAYER_TYPES),
             "nemotron_h": f"pattern {NEMOTRON_PATTERN}"}[arch]
    note = (r.get("note") or r.get("first_greedy_divergence") or "").replace("|", "/")
    if "max_abs_dlogit" not in r:
        return f"| {arch} | **{r['status']}** | {shape} | | | | | | | {note} |"
    cells = [
        arch, f"**{r['status']}**", shape, str(r["rows"]),
        f"{r['max_abs_dlogit']:.4f} ({r['p90_abs_dlogit']:.4f})",
        f"{r['hf_bf16_max_abs_dlogit']:.4f} ({r['hf_bf16_p90_abs_dlogit']:.4f})",
        f"{r['argmax_agree']}/{r['rows']}", f"{r['greedy_agree']}/{r['greedy_total']}",
        f"{r['seconds']} s", note,
    ]
    return "| " + " | ".join(cells) + " |"


def write_reports(state):
    """compare.md and compare.json; returns (exit status, summary line)."""
    with state.lock:
        results = dict(state.results)
        facts = dict(state.facts)
    for arch, _, _, _ in MODELS:
        results.setdefault(arch, {"status": "incomplete",
                                  "note": "not finished within the step's time"})
    md = [
        "| model | result | reduced model | rows | max (p90) abs dlogit vs fp32 reference "
        "| transformers BF16: max (p90) | argmax agree | greedy tokens agree | time | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    md += [table_row(arch, r) for arch, r in results.items()]
    md += ["", (
        f"Pass: every row with a reference top-2 margin > {CLEAR_MARGIN} has the same argmax, and "
        f"the p90 row error is within max({ABS_TOL}, {BF16_FACTOR} x transformers' BF16 p90). "
        f"Rows: logits at prompt prefixes (1..{POSITIONS} tokens), the whole prompt and "
        f"{STEPS - 1} decode steps, for prompts of {', '.join(map(str, PROMPT_LENGTHS))} random "
        f"token ids; random weights (seed {SEED}); reference: transformers in fp32 on the GPU. "
        f"{facts.get('transformers') and 'transformers ' + facts['transformers'] or ''}")]
    with open(os.path.join(state.outdir, "compare.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    criteria = {"clear_margin": CLEAR_MARGIN, "abs_tol": ABS_TOL, "bf16_factor": BF16_FACTOR}
    with open(os.path.join(state.outdir, "compare.json"), "w") as f:
        json.dump({"facts": facts, "criteria": criteria, "results": results}, f, indent=1)
    statuses = [r["status"] for r in results.values()]
    if "fail" in statuses or "error" in statuses:
        code = 1
    elif "pass" in statuses:
        code = 0
    else:
        code = 77
    line = "; ".join(model_line(a, r) for a, r in results.items())
    return code, line + "; table: transformers/compare.md"


def finish(state, reason=None):
    """Kills what is still running, reports, removes the checkpoints, exits. Runs once."""
    with state.lock:
        if state.done:
            return
        state.done = True
        children = list(state.children)
    for p in children:
        if p.poll() is None:
            p.kill()
    if reason:
        log(reason)
    code, line = write_reports(state)
    if state.tmp:
        shutil.rmtree(state.tmp, ignore_errors=True)
    print(line, flush=True)
    os._exit(code)  # also from the watchdog thread, whatever the main thread is doing


def watchdog(state):
    while state.left() > 0:
        time.sleep(0.5)
    finish(state, "step time nearly spent: reporting what finished")


def skip_all(state, note):
    with state.lock:
        for arch, _, _, _ in MODELS:
            state.results.setdefault(arch, {"status": "skipped", "note": note})


def kit_problem(kit):
    """Why the kit cannot take part (None when it can)."""
    for tool in ("tandem-make-checkpoint", "cuda_benchmark"):
        if not os.access(os.path.join(kit, "bin", tool), os.X_OK):
            return f"no {tool} in the kit ({kit}/bin)"
    helpfull = subprocess.run([os.path.join(kit, "bin", "cuda_benchmark"), "--helpfull"],
                              capture_output=True, text=True, timeout=30).stdout
    if "--logits_prompts" not in helpfull:
        return "the kit's cuda_benchmark has no --logits_prompts: rebuild the kit"
    base = tempfile.gettempdir()
    if shutil.disk_usage(base).free < DISK_BYTES_NEEDED:
        return f"under {DISK_BYTES_NEEDED >> 30} GB free in {base} for the checkpoints"
    return None


def start_writers(state, kit):
    """Both checkpoints at once (tandem-make-checkpoint is single-threaded), while torch and
    transformers import. Returns [(arch, class name, config, writer, checkpoint dir)]."""
    state.tmp = tempfile.mkdtemp(prefix="tandem-compare-")
    jobs = []
    for arch, cls_name, path, gb in MODELS:
        cfg = reduced_config(arch, path)
        work = os.path.join(state.tmp, arch)
        os.makedirs(work)
        cfg_path = os.path.join(work, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        ckpt = os.path.join(work, "ckpt")
        log_path = os.path.join(state.outdir, f"make-checkpoint-{arch}.log")
        writer = start_child(state, [os.path.join(kit, "bin", "tandem-make-checkpoint"),
                                     f"--model_config={cfg_path}", f"--out={ckpt}",
                                     f"--seed={SEED}"], log_path)
        writer.log_path = log_path
        log(f"{arch}: writing a {gb} GB checkpoint")
        jobs.append((arch, cls_name, cfg, writer, ckpt))
    return jobs


def import_reference(state):
    """(torch, transformers), or None with every model marked skipped."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network on the GPU machine
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001 - any import failure means no reference
        skip_all(state, f"no torch or transformers ({type(e).__name__}: {e})")
        return None
    if not torch.cuda.is_available():
        skip_all(state, "torch sees no CUDA device")
        return None
    # fp32 is the exact reference: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    state.facts.update(torch=torch.__version__, transformers=transformers.__version__,
                       device=torch.cuda.get_device_name(0), seconds_limit=state.left())
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    return torch, transformers


def run(state, kit):
    problem = kit_problem(kit)
    if problem:
        skip_all(state, problem)
        return
    jobs = start_writers(state, kit)
    reference = import_reference(state)
    if reference is None:
        return
    torch, transformers = reference
    for arch, cls_name, cfg, writer, ckpt in jobs:
        try:
            res = compare_model(state, arch, cls_name, cfg, writer, ckpt, kit, torch, transformers)
        except Exception as e:  # noqa: BLE001 - one model's trouble must not stop the other
            res = {"status": "error", "note": f"{type(e).__name__}: {e}"}
        if writer.poll() is None:
            writer.kill()
        log(model_line(arch, res))
        with state.lock:
            state.results[arch] = res
        shutil.rmtree(os.path.dirname(ckpt), ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        print("usage: compare_transformers.py OUTDIR", file=sys.stderr)
        return 2
    outdir = os.path.abspath(sys.argv[1])
    os.makedirs(outdir, exist_ok=True)
    step = float(os.environ.get("TANDEM_KIT_STEP_SECONDS") or 120)
    state = State(outdir, START + step - MARGIN_SECONDS)
    kit = os.environ.get("TANDEM_KIT_DIR") or os.path.join(ROOT, "build-gpu-kit")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: finish(state, "terminated"))
    threading.Thread(target=watchdog, args=(state,), daemon=True).start()
    try:
        run(state, kit)
    except Exception as e:  # noqa: BLE001 - report it like any other result
        with state.lock:
            for arch, _, _, _ in MODELS:
                state.results.setdefault(arch, {"status": "error",
                                                "note": f"{type(e).__name__}: {e}"})
    finish(state)


if __name__ == "__main__":
    sys.exit(main())
