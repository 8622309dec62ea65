// Package cluster joins gateways and workers over NATS: the same engine
// requests and outputs that cross api.Backend in one process travel as
// versioned JSON messages between processes (docs/cluster.md).
//
// A worker (StartWorker) serves one engine: it announces itself and its
// load with a heartbeat every second, takes requests on a subject named by
// its id and streams their outputs back to the reply inbox the gateway
// gave, publishes its KV events with their sequence numbers, and answers
// snapshot requests so a consumer that missed events can resync. A gateway
// follows the workers' heartbeats (Registry) and dispatches through
// Backend, an api.Backend whose choice of worker is a Picker: least loaded
// for now, the KV-aware router next.
//
// Nothing here is a home-made transport: NATS carries every message, and
// an embedded NATS server (StartServer) serves development clusters and
// tests. Core NATS delivers at most once, so every stream is numbered and
// every wait is bounded by the peer's heartbeat: a lost message or a dead
// peer ends a request with an error, never a hang.
package cluster
