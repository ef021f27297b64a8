// A tool round trip with the official `openai` npm SDK against a real gateway whose workers
// answer as the shipped models do when they call a tool (tests/integration/tool_calls_test.cc).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(`${process.env.TANDEM_NODE_MODULES}/`);
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: process.env.TANDEM_OPENAI_URL, apiKey: 'none', maxRetries: 0 });
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
}];
const ask = [{ role: 'user', content: 'What is the weather in Oslo?' }];
const base = { model: 'qwen', tools, reasoning_effort: 'none', max_tokens: 64 };

test('a call, its result, and the answer from it', async () => {
  const first = await client.chat.completions.create({ ...base, messages: ask });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'Let me check.\n\n');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Oslo', days: 2 });

  const second = await client.chat.completions.create({
    ...base,
    messages: [...ask, choice.message,
      { role: 'tool', tool_call_id: call.id, content: '-3C, snow' }],
  });
  assert.equal(second.choices[0].finish_reason, 'stop');
  assert.equal(second.choices[0].message.content, 'It is -3C and snowing in Oslo.');
  assert.equal(second.choices[0].message.tool_calls, undefined);
});

test('a streamed call arrives as a tool_calls delta', async () => {
  const stream = await client.chat.completions.create({ ...base, messages: ask, stream: true });
  let content = '';
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    content += delta.content ?? '';
    for (const c of delta.tool_calls ?? []) calls.push(c);
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(content, 'Let me check.\n\n');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].index, 0);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Oslo', days: 2 });
  assert.equal(finish, 'tool_calls');
});
