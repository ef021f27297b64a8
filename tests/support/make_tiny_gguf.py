#!/usr/bin/env python3
"""Writes a tiny random-weight GGUF model for llama-server, the real peer of the upstream-engine
tests: a 2-layer llama-architecture transformer (64-wide) with the Qwen3.5 tokenizer and the
chat template of the model it stands in for (its thinking switch and tool-call format). A
measuring tool: its answers are meaningless. Nothing is downloaded; the vocabulary and template
come from the llama.cpp source that scripts/build_llama_server.sh caches (MIT licence).

  PYTHONPATH=$CACHE/gguf-py /usr/bin/python3 make_tiny_gguf.py CACHE OUT.gguf [qwen|nemotron|qwen-tools]

"qwen-tools" is the Qwen3.5 stand-in wired to call a tool: its greedy answer always starts with
"<tool_call>", so llama-server's own tool-call grammar (which takes over at that text) writes a
whole call of a declared tool, and its parser returns it as structured tool_calls.
"""
import sys

import numpy as np
import gguf


def main():
    cache, out = sys.argv[1], sys.argv[2]
    model = sys.argv[3] if len(sys.argv) > 3 else "qwen"
    template_file = {
        "qwen": "Qwen3.5-4B.jinja",
        "qwen-tools": "Qwen3.5-4B.jinja",
        "nemotron": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    }[model]
    vocab = gguf.GGUFReader(f"{cache}/models/ggml-vocab-qwen35.gguf")
    tokens = vocab.fields["tokenizer.ggml.tokens"].contents()
    token_types = vocab.fields["tokenizer.ggml.token_type"].contents()
    merges = vocab.fields["tokenizer.ggml.merges"].contents()
    with open(f"{cache}/models/{template_file}") as f:
        template = f.read()

    n_vocab, n_embd, n_ff, n_layer, n_head = len(tokens), 64, 128, 2, 4
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"tandem-tiny-{model}")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    im_end = tokens.index("<|im_end|>")
    w.add_eos_token_id(im_end)
    w.add_bos_token_id(vocab.fields["tokenizer.ggml.bos_token_id"].contents())
    w.add_pad_token_id(vocab.fields["tokenizer.ggml.padding_token_id"].contents())
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    rng = np.random.default_rng(20261205)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))

    if model == "qwen-tools":
        add_tool_caller_head(w, rng, tokens, n_embd, im_end)
    else:
        t("token_embd.weight", n_vocab, n_embd)
        # A zero final norm makes every logit 0: greedy decoding then always picks the first token
        # ("!") and never an end-of-generation token, so answers run to max_tokens, as tests need.
        w.add_tensor("output_norm.weight", np.zeros(n_embd, dtype=np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        # In "qwen-tools" no layer writes to the residual stream (zero output projections): the
        # last hidden state is the current token's embedding, and the head decides from it alone.
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            if model == "qwen-tools" and n == "attn_output":
                w.add_tensor(f"blk.{i}.{n}.weight", np.zeros((n_embd, n_embd), np.float16))
            else:
                t(f"blk.{i}.{n}.weight", n_embd, n_embd)
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        if model == "qwen-tools":
            w.add_tensor(f"blk.{i}.ffn_down.weight", np.zeros((n_embd, n_ff), np.float16))
        else:
            t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_tool_caller_head(w, rng, tokens, n_embd, im_end):
    """Embeddings and output head of a next-token table. After a token ending in a blank line (the
    end of the generation prompt with thinking off) the model writes "<", "tool", "_call", ">"
    (the text "<tool_call>", where llama-server's tool-call grammar takes over); after any other
    token it ends its turn, so the grammar's call is closed and nothing follows it."""
    chain = [tokens.index(s) for s in ("<", "tool", "_call", ">")]
    embd = rng.standard_normal((len(tokens), n_embd)) * 0.02
    out = rng.standard_normal((len(tokens), n_embd)) * 0.02
    embd[:, 5] = 1.0  # axis 5: any other token, followed by the end of the turn
    out[im_end] = 0.0
    out[im_end, 5] = 4.0
    for i, token in enumerate(tokens):
        if token.endswith("\u010a\u010a"):  # axis 0: a blank line, followed by "<"
            embd[i, 5] = 0.0
            embd[i, 0] = 1.0
    out[chain] = 0.0
    out[chain[0], 0] = 4.0
    for k in range(4):  # axis k + 1: the chain's k-th token, followed by the next one
        embd[chain[k]] = 0.0
        embd[chain[k], k + 1] = 1.0
        after = chain[k + 1] if k < 3 else im_end
        out[after, k + 1] = 4.0
    w.add_tensor("token_embd.weight", embd.astype(np.float16))
    w.add_tensor("output.weight", out.astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))


if __name__ == "__main__":
    main()
