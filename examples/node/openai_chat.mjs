// A chat through Tandem's OpenAI-compatible front with the official `openai` SDK, over TLS and
// with a tenant's API key. Node trusts the gateway's CA through NODE_EXTRA_CA_CERTS:
//
//   NODE_EXTRA_CA_CERTS=ca.pem TANDEM_API_KEY=KEY node openai_chat.mjs https://HOST:PORT/v1 "Hi"
//
// Run by tests/integration/openai_sdk_test.cc against a real gateway.
import OpenAI from 'openai';

const [baseURL, prompt = 'Hello there'] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.TANDEM_API_KEY });

// Whole: `model: 'auto'` lets Tandem's router choose; 'qwen' or 'nemotron' pins a model.
// reasoning_effort 'none' answers directly; 'low', 'medium' and 'high' think first, and the
// thinking comes in message.reasoning_content.
const { data: completion, response } = await client.chat.completions
  .create({
    model: 'auto',
    messages: [{ role: 'user', content: prompt }],
    max_completion_tokens: 16,
    reasoning_effort: 'none',
  })
  .withResponse();
console.log(`[${completion.model}, rule ${response.headers.get('x-tandem-rule')}]`,
            completion.choices[0].message.content);

// Streamed, with the usage in a last chunk.
const stream = await client.chat.completions.create({
  model: 'auto',
  messages: [{ role: 'user', content: prompt }],
  max_completion_tokens: 16,
  reasoning_effort: 'none',
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  process.stdout.write(chunk.choices[0]?.delta?.content ?? '');
  if (chunk.usage) console.log(`\n(${chunk.usage.total_tokens} tokens)`);
}
