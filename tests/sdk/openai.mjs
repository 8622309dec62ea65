// kvserve through the official OpenAI Node SDK (npm `openai`).
//
// The client is built from the environment as a user's would be:
// OPENAI_BASE_URL (the server's /v1) and OPENAI_API_KEY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixture, weatherTool, assertWeatherArgs, parseJSON, assertCount, assertOutputTokens, constrainedMaxTokens } from './common.mjs';

const fx = fixture();
const client = new OpenAI({ maxRetries: 0, timeout: 60_000 });
const model = fx.model;
const seed = 7;

function assertUsage(usage, { promptTokens, maxTokens, hitLimit, cachedTokens }) {
  assert.ok(usage, 'usage missing');
  assert.equal(usage.prompt_tokens, promptTokens, 'usage.prompt_tokens');
  assertOutputTokens(usage.completion_tokens, maxTokens, hitLimit, 'usage.completion_tokens');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, 'usage.total_tokens');
  assert.equal(usage.prompt_tokens_details?.cached_tokens, cachedTokens, 'usage.prompt_tokens_details.cached_tokens');
}

test('models.list names the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.deepEqual(ids, [model]);
});

// Tests run in order. This is the tenant's first chat request, so nothing
// is cached; the hello requests after it find its blocks.
test('chat.completions.create, not streamed', async () => {
  const maxTokens = 8;
  const res = await client.chat.completions.create({ model, messages: fx.hello.messages, max_tokens: maxTokens, seed });
  assert.equal(res.object, 'chat.completion');
  assert.match(res.id, /^chatcmpl-/);
  assert.equal(res.model, model);
  assert.ok(Number.isInteger(res.created) && res.created > 1.6e9, `created ${res.created}`);
  assert.equal(res.choices.length, 1);
  const [choice] = res.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(['stop', 'length'].includes(choice.finish_reason), `finish_reason ${choice.finish_reason}`);
  assert.equal(choice.message.tool_calls, undefined);
  assertUsage(res.usage, { promptTokens: fx.hello.promptTokens, maxTokens, hitLimit: choice.finish_reason === 'length', cachedTokens: 0 });
});

test('chat.completions.create, streamed with stream_options.include_usage', async () => {
  const maxTokens = 8;
  const stream = await client.chat.completions.create({
    model, messages: fx.hello.messages, max_tokens: maxTokens, seed,
    stream: true, stream_options: { include_usage: true },
  });
  let id, finish, usage, text = '', chunks = 0, roleChunks = 0, afterUsage = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    id ??= chunk.id;
    assert.equal(chunk.id, id, 'every chunk carries the same id');
    assert.equal(chunk.model, model);
    if (usage) afterUsage++;
    if (chunk.usage) {
      usage = chunk.usage;
      assert.deepEqual(chunk.choices, [], 'the usage chunk has no choices');
      continue;
    }
    assert.equal(chunk.usage ?? null, null, 'usage only in the last chunk');
    assert.equal(chunk.choices.length, 1);
    const [c] = chunk.choices;
    assert.equal(c.index, 0);
    if (c.delta.role) {
      assert.equal(c.delta.role, 'assistant');
      roleChunks++;
    }
    if (typeof c.delta.content === 'string') text += c.delta.content;
    if (c.finish_reason) {
      assert.equal(finish, undefined, 'one finish_reason');
      finish = c.finish_reason;
    }
  }
  assert.match(id, /^chatcmpl-/);
  assert.ok(chunks >= 3, `${chunks} chunks`);
  assert.equal(roleChunks, 1, 'the role comes once, first');
  assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
  assert.equal(afterUsage, 0, 'the usage chunk is the last');
  assert.equal(typeof text, 'string');
  assertUsage(usage, { promptTokens: fx.hello.promptTokens, maxTokens, hitLimit: finish === 'length', cachedTokens: fx.hello.cachedTokens });
});

test('chat.completions.stream accumulates into finalChatCompletion', async () => {
  const maxTokens = 6;
  const stream = client.chat.completions.stream({
    model, messages: fx.hello.messages, max_tokens: maxTokens, seed, stream_options: { include_usage: true },
  });
  let deltas = '';
  stream.on('content', (delta) => { deltas += delta; });
  const res = await stream.finalChatCompletion();
  const [choice] = res.choices;
  assert.equal(choice.message.role, 'assistant');
  assert.equal(choice.message.content ?? '', deltas, 'final content is the concatenated deltas');
  assertUsage(res.usage, { promptTokens: fx.hello.promptTokens, maxTokens, hitLimit: choice.finish_reason === 'length', cachedTokens: fx.hello.cachedTokens });
});

test('forced tool_choice: a parsed tool call whose JSON arguments follow the schema', async () => {
  const maxTokens = constrainedMaxTokens;
  const res = await client.chat.completions.create({
    model, max_tokens: maxTokens, seed,
    messages: [{ role: 'user', content: 'What will the weather be in Lima this week?' }],
    tools: [{ type: 'function', function: weatherTool }],
    tool_choice: { type: 'function', function: { name: weatherTool.name } },
  });
  const [choice] = res.choices;
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.role, 'assistant');
  assert.ok(choice.message.content === null || choice.message.content === '', `content ${JSON.stringify(choice.message.content)}`);
  assert.equal(choice.message.tool_calls?.length, 1, 'one tool call');
  const [call] = choice.message.tool_calls;
  assert.equal(call.type, 'function');
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0);
  assert.equal(call.function.name, weatherTool.name);
  assertWeatherArgs(parseJSON(call.function.arguments));
  assertOutputTokens(res.usage.completion_tokens, maxTokens, false);
});

test('tool_choice required, streamed: argument deltas assemble into schema-valid JSON', async () => {
  const maxTokens = constrainedMaxTokens;
  const stream = await client.chat.completions.create({
    model, max_tokens: maxTokens, seed, stream: true,
    messages: [{ role: 'user', content: 'Forecast for Paris, please.' }],
    tools: [{ type: 'function', function: weatherTool }],
    tool_choice: 'required',
  });
  const calls = [];
  let finish;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const d of c.delta.tool_calls ?? []) {
        assert.ok(Number.isInteger(d.index), 'tool call deltas carry an index');
        calls[d.index] ??= { id: '', name: '', args: '' };
        const call = calls[d.index];
        if (d.id) call.id = d.id;
        if (d.function?.name) call.name += d.function.name;
        if (d.function?.arguments) call.args += d.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1, 'one tool call');
  assert.ok(calls[0].id.length > 0, 'the call has an id');
  assert.equal(calls[0].name, weatherTool.name);
  assertWeatherArgs(parseJSON(calls[0].args));
});

test('response_format json_schema: the content is JSON that follows the schema', async () => {
  const res = await client.chat.completions.create({
    model, max_tokens: constrainedMaxTokens, seed,
    messages: [{ role: 'user', content: 'Pick a city and a number of days.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'forecast', schema: weatherTool.parameters, strict: true } },
  });
  const [choice] = res.choices;
  assert.equal(choice.finish_reason, 'stop');
  assertWeatherArgs(parseJSON(choice.message.content));
});

test('a shared long system prompt: cached_tokens are the shared full blocks', async () => {
  const { system, users, promptTokens, cachedTokens } = fx.cache;
  assert.ok(cachedTokens > 0 && cachedTokens % fx.blockSize === 0, `fixture cachedTokens ${cachedTokens}`);
  const ask = (user) => client.chat.completions.create({
    model, max_tokens: 2, seed,
    messages: [{ role: 'system', content: system }, { role: 'user', content: user }],
  });
  const first = await ask(users[0]);
  assertUsage(first.usage, { promptTokens: promptTokens[0], maxTokens: 2, hitLimit: first.choices[0].finish_reason === 'length', cachedTokens: 0 });
  const second = await ask(users[1]);
  assertUsage(second.usage, { promptTokens: promptTokens[1], maxTokens: 2, hitLimit: second.choices[0].finish_reason === 'length', cachedTokens });
});

test('completions.create with text and token-id prompts, streamed and not', async () => {
  const maxTokens = 5;
  const res = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: maxTokens, seed });
  assert.equal(res.object, 'text_completion');
  assert.match(res.id, /^cmpl-/);
  assert.equal(res.choices.length, 1);
  assert.equal(typeof res.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(res.choices[0].finish_reason));
  assertCount(res.usage.prompt_tokens, 'usage.prompt_tokens');
  assert.ok(res.usage.prompt_tokens > 0);
  assertOutputTokens(res.usage.completion_tokens, maxTokens, res.choices[0].finish_reason === 'length', 'usage.completion_tokens');
  assert.equal(res.usage.total_tokens, res.usage.prompt_tokens + res.usage.completion_tokens);

  // Token ids are used as given: the prompt is exactly that long.
  const ids = Array.from({ length: 37 }, (_, i) => 300 + 11 * i);
  const stream = await client.completions.create({
    model, prompt: ids, max_tokens: maxTokens, seed, stream: true, stream_options: { include_usage: true },
  });
  let usage, finish, text = '';
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
  assert.equal(typeof text, 'string');
  assert.equal(usage?.prompt_tokens, ids.length);
  assertOutputTokens(usage.completion_tokens, maxTokens, finish === 'length', 'usage.completion_tokens');
});

test('an unknown model: NotFoundError with status 404', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: fx.hello.messages, max_tokens: 1 }),
    (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.type, 'invalid_request_error');
      assert.equal(err.code, 'model_not_found');
      assert.equal(err.param, 'model');
      return true;
    },
  );
});

test('a wrong API key: AuthenticationError with status 401', async () => {
  const wrong = new OpenAI({ apiKey: 'sk-not-a-key', maxRetries: 0 });
  await assert.rejects(
    wrong.chat.completions.create({ model, messages: fx.hello.messages, max_tokens: 1 }),
    (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 401);
      return true;
    },
  );
});
