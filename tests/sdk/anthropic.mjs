// kvserve through the official Anthropic Node SDK (npm `@anthropic-ai/sdk`).
//
// The client is built from the environment as a user's would be:
// ANTHROPIC_BASE_URL (the server's root) and ANTHROPIC_API_KEY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { fixture, weatherTool, assertWeatherArgs, assertOutputTokens, constrainedMaxTokens } from './common.mjs';

const fx = fixture();
const client = new Anthropic({ maxRetries: 0, timeout: 60_000 });
const model = fx.model;

const tool = { name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters };

/**
 * Asserts a message's usage: the three input counts add up to the prompt,
 * each is as expected, and the output is within max_tokens.
 */
function assertUsage(usage, { promptTokens, read = 0, creation = 0, maxTokens, hitLimit }) {
  assert.ok(usage, 'usage missing');
  assert.equal(usage.cache_read_input_tokens, read, 'usage.cache_read_input_tokens');
  assert.equal(usage.cache_creation_input_tokens, creation, 'usage.cache_creation_input_tokens');
  assert.equal(usage.input_tokens, promptTokens - read - creation, 'usage.input_tokens');
  if (usage.cache_creation) {
    assert.equal(usage.cache_creation.ephemeral_5m_input_tokens + usage.cache_creation.ephemeral_1h_input_tokens, creation,
      'usage.cache_creation splits cache_creation_input_tokens');
  }
  if (maxTokens !== undefined) assertOutputTokens(usage.output_tokens, maxTokens, hitLimit, 'usage.output_tokens');
}

function assertMessageShape(msg) {
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.model, model);
  assert.ok(Array.isArray(msg.content), 'content is an array of blocks');
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(msg.stop_reason), `stop_reason ${msg.stop_reason}`);
}

// Tests run in order. This is the tenant's first request, so nothing is
// cached; later hello requests find its full blocks.
test('messages.create', async () => {
  const maxTokens = 8;
  const msg = await client.messages.create({ model, max_tokens: maxTokens, messages: fx.hello.messages });
  assertMessageShape(msg);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), `stop_reason ${msg.stop_reason}`);
  assert.equal(msg.stop_sequence ?? null, null);
  for (const b of msg.content) {
    assert.equal(b.type, 'text');
    assert.equal(typeof b.text, 'string');
  }
  assertUsage(msg.usage, { promptTokens: fx.hello.promptTokens, maxTokens, hitLimit: msg.stop_reason === 'max_tokens' });
});

test('messages.stream: events in order, text deltas and finalMessage agree', async () => {
  const maxTokens = 8;
  const stream = client.messages.stream({ model, max_tokens: maxTokens, messages: fx.hello.messages });
  const events = [];
  let text = '';
  stream.on('text', (delta) => { text += delta; });
  for await (const ev of stream) events.push(ev);
  const msg = await stream.finalMessage();

  const types = events.map((e) => e.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.filter((t) => t === 'message_delta').length, 1, 'one message_delta');
  assert.equal(types.at(-2), 'message_delta');
  // Every block is started, filled and stopped in order, one at a time.
  let open = -1, next = 0;
  for (const ev of events.slice(1, -2)) {
    if (ev.type === 'content_block_start') {
      assert.equal(open, -1, 'blocks do not overlap');
      assert.equal(ev.index, next++);
      open = ev.index;
    } else if (ev.type === 'content_block_delta') {
      assert.equal(ev.index, open);
      assert.equal(ev.delta.type, 'text_delta');
    } else if (ev.type === 'content_block_stop') {
      assert.equal(ev.index, open);
      open = -1;
    } else if (ev.type !== 'ping') {
      assert.fail(`unexpected event ${ev.type}`);
    }
  }
  assert.equal(open, -1, 'every block is stopped');

  const start = events[0].message;
  assert.match(start.id, /^msg_/);
  assert.equal(start.id, msg.id);
  assertUsage(start.usage, { promptTokens: fx.hello.promptTokens, read: fx.hello.cachedTokens });
  const delta = events.at(-2);
  assert.equal(delta.delta.stop_reason, msg.stop_reason);

  assertMessageShape(msg);
  assert.equal(msg.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), text);
  assertUsage(msg.usage, {
    promptTokens: fx.hello.promptTokens, read: fx.hello.cachedTokens, maxTokens, hitLimit: msg.stop_reason === 'max_tokens',
  });
  assert.equal(msg.usage.output_tokens, delta.usage.output_tokens);
});

test('cache_control on a long system block: cache creation, then cache read', async () => {
  const { system, users, promptTokens, cachedTokens, systemTokens } = fx.cache;
  assert.ok(cachedTokens > 0 && cachedTokens % fx.blockSize === 0, `fixture cachedTokens ${cachedTokens}`);
  const params = (user) => ({
    model, max_tokens: 2,
    system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: user }],
  });

  const counted = await client.messages.countTokens({ model, system: params(users[0]).system, messages: params(users[0]).messages });
  assert.equal(counted.input_tokens, promptTokens[0], 'count_tokens');

  const first = await client.messages.create(params(users[0]));
  assertUsage(first.usage, { promptTokens: promptTokens[0], read: 0, creation: systemTokens, maxTokens: 2, hitLimit: first.stop_reason === 'max_tokens' });
  assert.ok(first.usage.cache_creation_input_tokens > 0, 'the first call creates the cache');

  const second = await client.messages.create(params(users[1]));
  assertUsage(second.usage, {
    promptTokens: promptTokens[1], read: cachedTokens, creation: Math.max(0, systemTokens - cachedTokens),
    maxTokens: 2, hitLimit: second.stop_reason === 'max_tokens',
  });
  assert.ok(second.usage.cache_read_input_tokens > 0, 'the second call reads the cache');
});

test('messages.countTokens counts the prompt a messages request runs', async () => {
  const res = await client.messages.countTokens({ model, messages: fx.hello.messages });
  assert.equal(res.input_tokens, fx.hello.promptTokens);
});

test('forced tool_choice {type: tool}: a tool_use block whose input follows the schema', async () => {
  const maxTokens = constrainedMaxTokens;
  const msg = await client.messages.create({
    model, max_tokens: maxTokens, tools: [tool], tool_choice: { type: 'tool', name: tool.name },
    messages: [{ role: 'user', content: 'What will the weather be in Lima this week?' }],
  });
  assertMessageShape(msg);
  assert.equal(msg.stop_reason, 'tool_use');
  const uses = msg.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, `content ${JSON.stringify(msg.content)}`);
  assert.match(uses[0].id, /^toolu_/);
  assert.equal(uses[0].name, tool.name);
  assertWeatherArgs(uses[0].input);
  assertOutputTokens(msg.usage.output_tokens, maxTokens, false, 'usage.output_tokens');
});

test('tool_choice {type: any}, streamed: input_json deltas assemble into the final tool_use input', async () => {
  const stream = client.messages.stream({
    model, max_tokens: constrainedMaxTokens, tools: [tool], tool_choice: { type: 'any' },
    messages: [{ role: 'user', content: 'Forecast for Paris, please.' }],
  });
  let partial = '';
  stream.on('inputJson', (delta) => { partial += delta; });
  const msg = await stream.finalMessage();
  assert.equal(msg.stop_reason, 'tool_use');
  const uses = msg.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, `content ${JSON.stringify(msg.content)}`);
  assert.equal(uses[0].name, tool.name);
  assertWeatherArgs(uses[0].input);
  assert.deepEqual(JSON.parse(partial), uses[0].input, 'the deltas spell the input');
});

test('an unknown model: NotFoundError with status 404', async () => {
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', max_tokens: 1, messages: fx.hello.messages }),
    (err) => {
      assert.ok(err instanceof Anthropic.NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.error?.type, 'error');
      assert.equal(err.error?.error?.type, 'not_found_error');
      assert.ok(err.requestID, 'request-id header');
      return true;
    },
  );
});

test('a wrong API key: AuthenticationError with status 401', async () => {
  const wrong = new Anthropic({ apiKey: 'sk-not-a-key', maxRetries: 0 });
  await assert.rejects(
    wrong.messages.create({ model, max_tokens: 1, messages: fx.hello.messages }),
    (err) => {
      assert.ok(err instanceof Anthropic.AuthenticationError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 401);
      assert.equal(err.error?.error?.type, 'authentication_error');
      return true;
    },
  );
});
