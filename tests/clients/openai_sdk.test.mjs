// The official `openai` npm SDK against a real Tandem gateway's HTTP front (started by
// tests/integration/openai_sdk_test.cc, which passes the addresses and keys in the environment).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(`${process.env.TANDEM_NODE_MODULES}/`);
const { OpenAI } = require('openai');

const baseURL = process.env.TANDEM_OPENAI_URL;
const client = new OpenAI({ baseURL, apiKey: process.env.TANDEM_API_KEY, maxRetries: 0 });
const prompt = [{ role: 'user', content: 'Write a Python function that reverses a list.' }];

async function metric(name, labels) {
  const text = await (await fetch(`${process.env.TANDEM_METRICS_URL}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) {
      sum += Number(line.split(' ').pop());
    }
  }
  return sum;
}

async function eventually(check, what) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('models lists the routing names and auto', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), ['auto', 'nemotron', 'qwen']);
});

test('a whole chat answers with usage and the routing headers', async () => {
  const before = await metric('tandem_gateway_requests_total', { api: 'openai', code: 'OK' });
  const { data, response } = await client.chat.completions
    .create({ model: 'auto', messages: prompt, max_tokens: 8, reasoning_effort: 'none' })
    .withResponse();
  assert.equal(data.object, 'chat.completion');
  assert.match(data.model, /^(qwen|nemotron)$/);
  assert.equal(response.headers.get('x-tandem-model'), data.model);
  assert.ok(response.headers.get('x-tandem-rule'));
  assert.equal(data.id, `chatcmpl-${response.headers.get('x-tandem-request-id')}`);
  const choice = data.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.ok(choice.message.content.length > 0);
  assert.equal(choice.finish_reason, 'length');
  assert.equal(data.usage.completion_tokens, 8);
  assert.ok(data.usage.prompt_tokens > 0);
  assert.equal(data.usage.total_tokens, data.usage.prompt_tokens + 8);
  await eventually(async () =>
    (await metric('tandem_gateway_requests_total', { api: 'openai', code: 'OK' })) > before,
  'the request counted with api="openai"');
});

test('`user` or x-session-id names a session, and each answer carries its route token', async () => {
  const turn = (token) => Number(token.split('.').at(-3));  // VERSION.MODEL.TURN.EXPIRES.MAC
  const ask = (extra, headers = {}) => client.chat.completions
    .create({ model: 'auto', messages: prompt, max_tokens: 2, ...extra }, { headers })
    .withResponse();
  const first = await ask({ user: 'alice-1' });
  const t1 = first.response.headers.get('x-tandem-session-token');
  assert.equal(turn(t1), 1);
  const second = await ask({ user: 'alice-1' }, { 'x-tandem-session-token': t1 });
  assert.equal(turn(second.response.headers.get('x-tandem-session-token')), 2);
  // The header names the session over `user`: a new one here.
  const named = await ask({ user: 'alice-1' }, { 'x-session-id': 'conv-9' });
  assert.equal(turn(named.response.headers.get('x-tandem-session-token')), 1);
  // Without either, no session.
  const none = await ask({});
  assert.equal(none.response.headers.get('x-tandem-session-token'), null);
  assert.ok(none.response.headers.get('x-tandem-reasoning'));
});

test('a pinned model serves, by routing name and by upstream id', async () => {
  const ids = {};
  for await (const m of client.models.list()) ids[m.id] = m.root;
  for (const model of ['nemotron', ids.qwen]) {
    const r = await client.chat.completions.create({ model, messages: prompt, max_tokens: 2 });
    assert.equal(r.model, model === 'nemotron' ? 'nemotron' : 'qwen');
  }
});

test('thinking arrives as reasoning_content', async () => {
  const r = await client.chat.completions.create({
    model: 'qwen', messages: prompt, max_tokens: 4, reasoning_effort: 'high' });
  // The simulator never closes its think block: all of it is reasoning.
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  assert.equal(r.choices[0].message.content, '');
});

test('a streamed chat relays deltas, the finish reason and the usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'auto', messages: prompt, max_completion_tokens: 6, reasoning_effort: 'none',
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].delta.content ?? '';
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(chunks >= 3);
  assert.ok(text.length > 0);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 6);
});

test('tools, the calls an assistant made and their results travel the whole path', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const r = await client.chat.completions.create({
    model: 'qwen', tools, tool_choice: 'auto', max_tokens: 4, reasoning_effort: 'none',
    messages: [
      ...prompt,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '-3C and snow' },
    ],
  });
  assert.equal(r.choices[0].finish_reason, 'length');
  await assert.rejects(
    client.chat.completions.create({ model: 'qwen', messages: prompt, tools,
      tool_choice: 'required' }),
    (e) => e.status === 400 && e.param === 'tool_choice');
  await assert.rejects(
    client.chat.completions.create({ model: 'qwen', messages: prompt,
      tools: [{ type: 'function', function: { name: 'bad name!' } }] }),
    (e) => e.status === 400 && e.param === 'tools[0].function.name');
});

test('a wrong key is refused with 401', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'not-a-key', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model: 'auto', messages: prompt }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 &&
      e.error.type === 'authentication_error');
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  // RFC 9110: a 401 names the scheme it wants.
  const raw = await fetch(`${baseURL}/models`, { headers: { authorization: 'Bearer not-a-key' } });
  assert.equal(raw.status, 401);
  assert.equal(raw.headers.get('www-authenticate'), 'Bearer');
});

test('a bad field is a 400 naming it', async () => {
  for (const [extra, param] of [[{ n: 2 }, 'n'], [{ temperature: 7 }, 'temperature'],
    [{ frobnicate: true }, 'frobnicate'], [{ max_tokens: 0 }, 'max_tokens']]) {
    await assert.rejects(
      client.chat.completions.create({ model: 'auto', messages: prompt, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === param &&
        e.error.type === 'invalid_request_error',
      `param ${param}`);
  }
  await assert.rejects(
    client.chat.completions.create({ model: 'auto', messages: [{ role: 'user',
      content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] }),
    (e) => e.status === 400 && e.param === 'messages[0].content[0].image_url.url');
});

test('an image_url data URL reaches the vision model', async () => {
  // A 4x3 RGB PNG, inline: images come only as data: URLs.
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAQAAAADCAIAAAA7ljmRAAAAKklEQVR4nA3HMQEAMAzDMAMriMDpaSgBUYCbPgEOLh5CnLjx8lOnbr36AOO3DflsbMvSAAAAAElFTkSuQmCC';
  const { data, response } = await client.chat.completions
    .create({ model: 'auto', max_tokens: 4, reasoning_effort: 'none', messages: [{ role: 'user', content: [
      { type: 'text', text: 'What is in this picture?' },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${png}`, detail: 'auto' } }] }] })
    .withResponse();
  assert.equal(data.model, 'qwen');
  assert.equal(response.headers.get('x-tandem-model'), 'qwen');
  assert.ok(data.choices[0].message.content.length > 0);
});

test('an unknown model is a 404', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: prompt }),
    (e) => e instanceof OpenAI.NotFoundError && e.error.code === 'model_not_found');
});

test('a tenant over its quota gets 429 with Retry-After', async () => {
  const limited = new OpenAI({ baseURL, apiKey: process.env.TANDEM_LIMITED_KEY, maxRetries: 0 });
  let refused = null;
  for (let i = 0; i < 3 && refused === null; i++) {
    try {
      await limited.chat.completions.create({ model: 'auto', messages: prompt, max_tokens: 1 });
    } catch (e) {
      refused = e;
    }
  }
  assert.ok(refused instanceof OpenAI.RateLimitError, String(refused));
  assert.equal(refused.status, 429);
  assert.ok(Number(refused.headers.get('retry-after')) >= 1);
  assert.ok(Number(refused.headers.get('retry-after-ms')) > 0);
});

test('a deadline that passes is a 504', async () => {
  await assert.rejects(
    client.chat.completions.create(
      { model: 'qwen', messages: prompt, max_tokens: 4000, reasoning_effort: 'none' },
      { headers: { 'x-tandem-timeout-ms': '100' } }),
    (e) => e.status === 504 && e.error.type === 'timeout_error');
});

test('a wrong method and an unknown path are refused in OpenAI\'s error form', async () => {
  const base = process.env.TANDEM_OPENAI_URL;
  const auth = { authorization: `Bearer ${process.env.TANDEM_API_KEY}` };
  const get = await fetch(`${base}/chat/completions`, { headers: auth });
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST, OPTIONS');
  assert.equal((await get.json()).error.type, 'invalid_request_error');
  const post = await fetch(`${base}/models`, { method: 'POST', headers: auth, body: '{}' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD, OPTIONS');
  const missing = await fetch(`${base}/embeddings`, { method: 'POST', headers: auth, body: '{}' });
  assert.equal(missing.status, 404);
  const body = await missing.json();
  assert.match(body.error.message, /no such endpoint/);
  assert.equal(body.error.code, null);  // a path, not a model, was not found
});

test('a client that goes away cancels the generation', async () => {
  const before = await metric('tandem_gateway_requests_total', { api: 'openai', code: 'CANCELLED' });
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: 'qwen', messages: prompt, max_tokens: 4000, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      chunks++;
      controller.abort();  // the SDK then ends the iteration (or throws, by version)
    }
  } catch (e) {
    assert.match(e.name, /Abort/);
  }
  assert.ok(chunks >= 1);
  await eventually(async () =>
    (await metric('tandem_gateway_requests_total', { api: 'openai', code: 'CANCELLED' })) > before,
  'the cancelled request counted with api="openai"');
});
