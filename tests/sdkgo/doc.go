// Package sdkgo holds the integration tests that drive kvserve with the
// official Go client, github.com/openai/openai-go: chat completions
// streamed (through the SDK's ChatCompletionAccumulator) and not, a forced
// tool call whose arguments unmarshal into a Go struct, and the cached
// tokens of a request that shares a long system prompt with an earlier
// one. The server is the real `kvserve serve` binary with its synthetic
// model, started by package tests/sdk, once with each engine (the real
// forward pass and --engine sim); the tests are in openai_test.go.
package sdkgo
