// kvserve through Google's official Gen AI Node SDK (npm `@google/genai`).
//
// The key comes from the environment (GEMINI_API_KEY, sent as
// x-goog-api-key); the server from httpOptions.baseUrl, as a user points the
// SDK at a Gemini-compatible server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GoogleGenAI, FunctionCallingConfigMode, Type, ApiError } from '@google/genai';
import { fixture, weatherTool, assertWeatherArgs, assertOutputTokens, constrainedMaxTokens } from './common.mjs';

const fx = fixture();
const ai = new GoogleGenAI({ httpOptions: { baseUrl: fx.url, timeout: 60_000 } });
const model = fx.model;

/** Asserts a response's usageMetadata against the expected counts. */
function assertUsage(u, { promptTokens, cachedTokens, maxTokens, hitLimit }) {
  assert.ok(u, 'usageMetadata missing');
  assert.equal(u.promptTokenCount, promptTokens, 'usageMetadata.promptTokenCount');
  assert.equal(u.cachedContentTokenCount ?? 0, cachedTokens, 'usageMetadata.cachedContentTokenCount');
  const candidates = u.candidatesTokenCount ?? 0;
  assertOutputTokens(candidates, maxTokens, hitLimit, 'usageMetadata.candidatesTokenCount');
  assert.equal(u.totalTokenCount, u.promptTokenCount + candidates + (u.thoughtsTokenCount ?? 0), 'usageMetadata.totalTokenCount');
}

function assertTextCandidate(res) {
  assert.equal(res.candidates?.length, 1, 'one candidate');
  const [c] = res.candidates;
  assert.equal(c.content.role, 'model');
  assert.ok(Array.isArray(c.content.parts ?? []), 'parts is an array');
  for (const p of c.content.parts ?? []) assert.equal(typeof p.text, 'string', `part ${JSON.stringify(p)}`);
  assert.ok(['STOP', 'MAX_TOKENS'].includes(c.finishReason), `finishReason ${c.finishReason}`);
  return c;
}

// Tests run in order. This is the tenant's first request, so nothing is
// cached; later hello requests find its full blocks.
test('models.generateContent', async () => {
  const maxTokens = 8;
  const res = await ai.models.generateContent({ model, contents: 'Hello', config: { maxOutputTokens: maxTokens } });
  const c = assertTextCandidate(res);
  assert.equal(typeof res.text, 'string');
  assert.equal(res.modelVersion, model);
  assert.equal(typeof res.responseId, 'string');
  assert.ok(res.responseId.length > 0);
  assertUsage(res.usageMetadata, { promptTokens: fx.hello.promptTokens, cachedTokens: 0, maxTokens, hitLimit: c.finishReason === 'MAX_TOKENS' });
});

test('models.generateContentStream: chunks, one finishReason, usage in the last', async () => {
  const maxTokens = 8;
  const stream = await ai.models.generateContentStream({ model, contents: 'Hello', config: { maxOutputTokens: maxTokens } });
  let text = '', chunks = 0, finish, usage, id;
  for await (const chunk of stream) {
    chunks++;
    id ??= chunk.responseId;
    assert.equal(chunk.responseId, id, 'one responseId');
    assert.ok(finish === undefined, 'no chunk after the one with finishReason');
    const [c] = chunk.candidates ?? [];
    if (c) {
      assert.equal(c.content?.role ?? 'model', 'model');
      for (const p of c.content?.parts ?? []) text += p.text ?? '';
      if (c.finishReason) finish = c.finishReason;
    }
    if (chunk.usageMetadata) usage = chunk.usageMetadata;
  }
  assert.ok(chunks >= 2, `${chunks} chunks`);
  assert.ok(['STOP', 'MAX_TOKENS'].includes(finish), `finishReason ${finish}`);
  assert.equal(typeof text, 'string');
  assertUsage(usage, { promptTokens: fx.hello.promptTokens, cachedTokens: fx.hello.cachedTokens, maxTokens, hitLimit: finish === 'MAX_TOKENS' });
});

test('models.countTokens counts the prompt generateContent runs', async () => {
  const res = await ai.models.countTokens({ model, contents: 'Hello' });
  assert.equal(res.totalTokens, fx.hello.promptTokens);
});

test('a shared systemInstruction: cachedContentTokenCount on the second request', async () => {
  const { system, users, promptTokens, cachedTokens } = fx.cache;
  assert.ok(cachedTokens > 0 && cachedTokens % fx.blockSize === 0, `fixture cachedTokens ${cachedTokens}`);
  const ask = (user) => ai.models.generateContent({ model, contents: user, config: { systemInstruction: system, maxOutputTokens: 2 } });
  const first = await ask(users[0]);
  assertUsage(first.usageMetadata, { promptTokens: promptTokens[0], cachedTokens: 0, maxTokens: 2, hitLimit: first.candidates[0].finishReason === 'MAX_TOKENS' });
  const second = await ask(users[1]);
  assertUsage(second.usageMetadata, { promptTokens: promptTokens[1], cachedTokens, maxTokens: 2, hitLimit: second.candidates[0].finishReason === 'MAX_TOKENS' });
});

test('function calling with mode ANY: a functionCall whose args follow the schema', async () => {
  const res = await ai.models.generateContent({
    model, contents: 'What will the weather be in Lima this week?',
    config: {
      maxOutputTokens: constrainedMaxTokens,
      tools: [{
        functionDeclarations: [{
          name: weatherTool.name, description: weatherTool.description,
          parameters: {
            type: Type.OBJECT,
            properties: {
              city: { type: Type.STRING, enum: ['Paris', 'Tokyo', 'Lima'] },
              days: { type: Type.INTEGER, minimum: 1, maximum: 14 },
            },
            required: ['city', 'days'],
          },
        }],
      }],
      toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY, allowedFunctionNames: [weatherTool.name] } },
    },
  });
  assert.equal(res.candidates?.length, 1);
  assert.equal(res.candidates[0].finishReason, 'STOP');
  const calls = res.functionCalls;
  assert.equal(calls?.length, 1, `parts ${JSON.stringify(res.candidates[0].content?.parts)}`);
  assert.equal(calls[0].name, weatherTool.name);
  assertWeatherArgs(calls[0].args);
  assertOutputTokens(res.usageMetadata.candidatesTokenCount, constrainedMaxTokens, false, 'usageMetadata.candidatesTokenCount');
});

test('function calling with mode ANY, streamed, parametersJsonSchema: the call arrives whole', async () => {
  const stream = await ai.models.generateContentStream({
    model, contents: 'Forecast for Paris, please.',
    config: {
      maxOutputTokens: constrainedMaxTokens,
      tools: [{ functionDeclarations: [{ name: weatherTool.name, description: weatherTool.description, parametersJsonSchema: weatherTool.parameters }] }],
      toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY } },
    },
  });
  const calls = [];
  let finish;
  for await (const chunk of stream) {
    for (const fc of chunk.functionCalls ?? []) calls.push(fc);
    if (chunk.candidates?.[0]?.finishReason) finish = chunk.candidates[0].finishReason;
  }
  assert.equal(finish, 'STOP');
  assert.equal(calls.length, 1, `calls ${JSON.stringify(calls)}`);
  assert.equal(calls[0].name, weatherTool.name);
  assertWeatherArgs(calls[0].args);
});

test('an unknown model: ApiError with status 404', async () => {
  await assert.rejects(
    ai.models.generateContent({ model: 'no-such-model', contents: 'Hello', config: { maxOutputTokens: 1 } }),
    (err) => {
      assert.ok(err instanceof ApiError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.match(err.message, /NOT_FOUND/);
      return true;
    },
  );
});

test('a wrong API key: ApiError with status 401 UNAUTHENTICATED', async () => {
  const wrong = new GoogleGenAI({ apiKey: 'not-a-key', httpOptions: { baseUrl: fx.url } });
  await assert.rejects(
    wrong.models.generateContent({ model, contents: 'Hello', config: { maxOutputTokens: 1 } }),
    (err) => {
      assert.ok(err instanceof ApiError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 401);
      assert.match(err.message, /UNAUTHENTICATED/);
      return true;
    },
  );
});

test('caches: create, generateContent with cachedContent, get, list, update, delete, expiry; another tenant gets 404', async () => {
  const cc = fx.contextCache;
  const cache = await ai.caches.create({
    model,
    config: {
      displayName: 'sdk-document', systemInstruction: cc.system, ttl: '300s',
      contents: [{ role: 'user', parts: [{ text: cc.contents }] }],
    },
  });
  assert.match(cache.name, /^cachedContents\/[0-9a-f]{24}$/);
  assert.equal(cache.model, `models/${model}`);
  assert.equal(cache.displayName, 'sdk-document');
  assert.equal(cache.usageMetadata?.totalTokenCount, cc.tokenCount, 'usageMetadata.totalTokenCount');
  assert.equal(cache.contents, undefined, 'contents are input-only');
  const expire = Date.parse(cache.expireTime);
  assert.ok(expire > Date.now() + 240_000 && expire <= Date.now() + 300_000, `expireTime ${cache.expireTime}`);
  assert.ok(Date.parse(cache.createTime) <= Date.now() && cache.updateTime === cache.createTime);

  const res = await ai.models.generateContent({ model, contents: cc.question, config: { cachedContent: cache.name, maxOutputTokens: 2 } });
  assert.ok(res.usageMetadata.cachedContentTokenCount > 0, 'cachedContentTokenCount > 0');
  assertUsage(res.usageMetadata, { promptTokens: cc.promptTokens, cachedTokens: cc.cachedTokens, maxTokens: 2, hitLimit: res.candidates[0].finishReason === 'MAX_TOKENS' });

  const got = await ai.caches.get({ name: cache.name });
  assert.equal(got.name, cache.name);
  assert.equal(got.usageMetadata?.totalTokenCount, cc.tokenCount);

  const names = [];
  for await (const c of await ai.caches.list({ config: { pageSize: 10 } })) names.push(c.name);
  assert.ok(names.includes(cache.name), `list ${JSON.stringify(names)}`);

  const updated = await ai.caches.update({ name: cache.name, config: { ttl: '7200s' } });
  assert.ok(Date.parse(updated.expireTime) > expire + 3_000_000, `updated expireTime ${updated.expireTime}`);
  assert.ok(Date.parse(updated.updateTime) >= Date.parse(cache.updateTime));

  // Another tenant's key: the cache does not exist for it.
  const other = new GoogleGenAI({ apiKey: cc.otherApiKey, httpOptions: { baseUrl: fx.url } });
  const notFound = (err) => {
    assert.ok(err instanceof ApiError, `${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 404);
    assert.match(err.message, /NOT_FOUND/);
    return true;
  };
  await assert.rejects(other.caches.get({ name: cache.name }), notFound);
  await assert.rejects(other.caches.delete({ name: cache.name }), notFound);
  await assert.rejects(other.models.generateContent({ model, contents: cc.question, config: { cachedContent: cache.name, maxOutputTokens: 1 } }), notFound);
  const otherNames = [];
  for await (const c of await other.caches.list()) otherNames.push(c.name);
  assert.ok(!otherNames.includes(cache.name), 'another tenant lists the cache');

  await ai.caches.delete({ name: cache.name });
  await assert.rejects(ai.caches.get({ name: cache.name }), notFound);

  // Expiry is exact to the second: a cache of one second is gone after it.
  const brief = await ai.caches.create({ model, config: { systemInstruction: cc.system, ttl: '1s', contents: [{ role: 'user', parts: [{ text: cc.contents }] }] } });
  await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(brief.expireTime) - Date.now()) + 50));
  await assert.rejects(ai.caches.get({ name: brief.name }), notFound);
});

test('caches.create with a malformed ttl: ApiError 400 INVALID_ARGUMENT', async () => {
  await assert.rejects(
    ai.caches.create({ model, config: { systemInstruction: fx.contextCache.system, ttl: '10' } }),
    (err) => {
      assert.ok(err instanceof ApiError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 400);
      assert.match(err.message, /INVALID_ARGUMENT/);
      return true;
    },
  );
});
