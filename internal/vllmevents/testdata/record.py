#!/usr/bin/python3
"""Writes the recorded vLLM KV event batches the tests read (testdata/array,
testdata/map), from vLLM's documented schema (vllm/distributed/kv_events.py):
a batch is [ts, events, data_parallel_rank]; an event is tagged with its type
and is a positional array in vLLM before its switch to named fields (trailing
fields at their defaults omitted, as msgspec's omit_defaults does) and a map
after it. The "array" recording uses integer block hashes (unsigned 64-bit,
small and negative ones too), the "map" one 32-byte hashes.

Needs Debian's python3-msgpack. Run it from this directory; the files it
writes are committed, so the tests need no Python.
"""
import hashlib
import os

import msgpack

BS = 16


def toks(start, blocks):
    return list(range(start, start + blocks * BS))


def int_hash(label):
    return {
        "a1": 0xA000000000000001, "a2": 0xA000000000000002, "a3": 0xA000000000000003, "a4": 0xA000000000000004,
        "b1": 1001, "b2": 1002, "c1": -5, "l1": 77, "m1": 88,
    }[label]


def bytes_hash(label):
    return hashlib.sha256(label.encode()).digest()


def stored(form, h, hashes, parent, tokens, extra_keys=None, medium="GPU", lora_name=None, block_size=BS):
    if form == "map":
        ev = {"type": "BlockStored", "block_hashes": [h(x) for x in hashes],
              "parent_block_hash": h(parent) if parent else None, "token_ids": tokens,
              "block_size": block_size, "lora_id": None, "medium": medium, "lora_name": lora_name}
        if extra_keys is not None:
            ev["extra_keys"] = extra_keys
        ev["group_idx"] = 0
        ev["kv_cache_spec_kind"] = "full_attention"
        return ev
    ev = ["BlockStored", [h(x) for x in hashes], h(parent) if parent else None, tokens, block_size,
          None, medium, lora_name]
    if extra_keys is not None:
        ev.append(extra_keys)
    return ev


def removed(form, h, hashes, medium="GPU"):
    if form == "map":
        return {"type": "BlockRemoved", "block_hashes": [h(x) for x in hashes], "medium": medium, "group_idx": 0}
    return ["BlockRemoved", [h(x) for x in hashes], medium]


def cleared(form):
    return {"type": "AllBlocksCleared"} if form == "map" else ["AllBlocksCleared"]


def batches(form, h):
    return [
        # 0: tenant A's three blocks (its salt on the first), tenant B's two.
        [stored(form, h, ["a1", "a2", "a3"], None, toks(100, 3), [["salt-a"], None, None]),
         stored(form, h, ["b1", "b2"], None, toks(200, 2), [["salt-b"], None])],
        # 1: another client's block (no salt), an adapter's block.
        [stored(form, h, ["c1"], None, toks(300, 1), [None]),
         stored(form, h, ["l1"], None, toks(400, 1), [["salt-a"]], lora_name="adapter-1")],
        # 2: A's conversation goes on; B's second block is evicted from the
        # pool and offloaded to host memory.
        [stored(form, h, ["a4"], "a3", toks(148, 1), [None]),
         removed(form, h, ["b2"]),
         stored(form, h, ["b2"], "b1", toks(216, 1), [None], medium="CPU")],
        # 3: a block of another size; an event type this schema does not know.
        [stored(form, h, ["m1"], None, toks(500, 2), [["salt-a"]], block_size=2 * BS),
         {"type": "BlockTouched", "block_hashes": [h("a1")]} if form == "map" else ["BlockTouched", [h("a1")]]],
        # 4: A's last block is evicted.
        [removed(form, h, ["a4"])],
        # 5: the prefix cache is reset.
        [cleared(form)],
    ]


def main():
    for form, h in (("array", int_hash), ("map", bytes_hash)):
        os.makedirs(form, exist_ok=True)
        for i, events in enumerate(batches(form, h)):
            with open(os.path.join(form, "%03d.msgpack" % i), "wb") as f:
                f.write(msgpack.packb([1764000000.0 + i, events, 0], use_bin_type=True))


if __name__ == "__main__":
    main()
