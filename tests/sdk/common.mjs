// Helpers shared by the SDK test scripts.
//
// The Go test (sdk_test.go) starts a kvserve server and runs each script
// with `node --test`, passing the server in the SDKs' own environment
// variables (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...) and the exact token
// counts the server must report in KVSERVE_SDK_FIXTURE (JSON, see
// fixture() in sdk_test.go). The served model has random weights: the
// scripts assert shapes, types, usage arithmetic and constrained outputs,
// never text.
import assert from 'node:assert/strict';

/** The fixture the Go test computed for this script. */
export function fixture() {
  const raw = process.env.KVSERVE_SDK_FIXTURE;
  assert.ok(raw, 'KVSERVE_SDK_FIXTURE is not set: run these scripts through `go test ./tests/sdk`');
  const f = JSON.parse(raw);
  for (const key of ['url', 'model', 'apiKey', 'blockSize', 'hello', 'cache']) {
    assert.ok(f[key] !== undefined, `fixture lacks ${key}`);
  }
  return f;
}

/** The weather tool: its schema leaves the model a bounded choice. */
export const weatherTool = {
  name: 'get_weather',
  description: 'Weather forecast for a city',
  parameters: {
    type: 'object',
    properties: {
      city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] },
      days: { type: 'integer', minimum: 1, maximum: 14 },
    },
    required: ['city', 'days'],
    additionalProperties: false,
  },
};

/**
 * max_tokens for constrained outputs (tool calls, JSON schemas). A call of
 * weatherTool takes 58-82 tokens on the synthetic model (25 samples); the
 * grammar bounds whitespace and the schema bounds the values, so this
 * limit is never what ends a call.
 */
export const constrainedMaxTokens = 300;

/** Asserts that args (an object) is an instance of weatherTool's schema. */
export function assertWeatherArgs(args) {
  assert.equal(typeof args, 'object');
  assert.ok(args !== null && !Array.isArray(args), `arguments ${JSON.stringify(args)} are not an object`);
  assert.deepEqual(Object.keys(args).sort(), ['city', 'days'], `arguments ${JSON.stringify(args)}`);
  assert.ok(weatherTool.parameters.properties.city.enum.includes(args.city), `city ${JSON.stringify(args.city)}`);
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 14, `days ${JSON.stringify(args.days)}`);
}

/** Parses a JSON string, failing the test with the text if it is not JSON. */
export function parseJSON(text) {
  assert.equal(typeof text, 'string');
  try {
    return JSON.parse(text);
  } catch (e) {
    assert.fail(`not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
}

/** Asserts that n is a non-negative integer. */
export function assertCount(n, what) {
  assert.ok(Number.isInteger(n) && n >= 0, `${what} = ${JSON.stringify(n)}, want a non-negative integer`);
}

/**
 * Asserts the generated-token count of a sample cut at maxTokens or ended
 * by the model: exactly maxTokens when the stop reason says the limit was
 * hit, at most that otherwise.
 */
export function assertOutputTokens(n, maxTokens, hitLimit, what = 'output tokens') {
  assertCount(n, what);
  if (hitLimit) {
    assert.equal(n, maxTokens, `${what} of a sample cut at the limit`);
  } else {
    assert.ok(n <= maxTokens, `${what} = ${n}, want at most ${maxTokens}`);
  }
}
