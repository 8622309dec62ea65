#!/usr/bin/env bash
# Side by side: `kvserve bench serve` (chat and agent workloads) against the
# real engine and against the simulator calibrated on it, on one model.
# Prints TTFT p50 and output tokens/s of each, and their ratio.
#
# usage: scripts/sim-vs-model.sh [MODEL.gguf] [bench serve flags...]
# (default model: a synthetic SmolLM2-135M Q8_0 generated into $WORK)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-$(mktemp -d)}
BIN=$WORK/kvserve
go build -o "$BIN" ./cmd/kvserve
MODEL=${1:-}
shift || true
if [[ -z "$MODEL" ]]; then
	MODEL=$WORK/smollm2-135m-q8_0.gguf
	[[ -f $MODEL ]] || "$BIN" model synth --shape smollm2-135m --type q8_0 --seed 1 -o "$MODEL" >/dev/null 2>&1
fi
PROFILE=$WORK/profile.json
[[ -f $PROFILE ]] || "$BIN" sim calibrate -m "$MODEL" -o "$PROFILE" 2>&1 | tail -1
PORT=${PORT:-18080}
BENCH=(-c 4 -n 40 --max-tokens 64 --prompt-scale 0.25 --ignore-eos "$@")

run() { # engine workload -> json file
	local engine=$1 workload=$2 out=$3 args=()
	[[ $engine == sim ]] && args=(--engine sim --sim-profile "$PROFILE")
	"$BIN" serve -m "$MODEL" --addr 127.0.0.1:$PORT --data-dir "$WORK/data" "${args[@]}" 2>"$WORK/serve-$engine.log" &
	local pid=$!
	for _ in $(seq 600); do
		curl -sf http://127.0.0.1:$PORT/ready >/dev/null && break
		sleep 0.1
	done
	"$BIN" bench serve --url http://127.0.0.1:$PORT --workload "$workload" "${BENCH[@]}" --json -q >"$out"
	kill $pid
	wait $pid || true
}

printf '%-6s %-6s %12s %14s\n' workload engine ttft_p50_ms output_tok_s
for w in ${WORKLOADS:-chat agent}; do
	for e in model sim; do
		run $e $w "$WORK/$w-$e.json"
		python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%-6s %-6s %12.1f %14.1f" % (sys.argv[2], sys.argv[3], r["ttft_ms"]["p50"], r["output_tokens_per_s"]))' "$WORK/$w-$e.json" $w $e
	done
	python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); print("%-6s sim/model: TTFT p50 %.2f, output tok/s %.2f" % (sys.argv[3], s["ttft_ms"]["p50"]/m["ttft_ms"]["p50"], s["output_tokens_per_s"]/m["output_tokens_per_s"]))' "$WORK/$w-model.json" "$WORK/$w-sim.json" $w
done
