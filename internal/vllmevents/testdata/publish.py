#!/usr/bin/python3
"""A vLLM-style KV event publisher on libzmq (pyzmq) for the interop test:
binds a PUB socket and a ROUTER replay socket the way vLLM's
ZmqEventPublisher does, sends [topic, 8-byte big-endian seq, batch], and
answers a replay request [id, "", start seq] with [id, "", seq, batch] per
buffered batch and [id, "", -1, ""] at the end.

Usage: publish.py PUB_ENDPOINT REPLAY_ENDPOINT TOPIC DIR. It publishes
empty batches every 20 ms until a line arrives on stdin, then DIR's batches
0-4, leaving batch 2 out of the PUB stream (only in the replay buffer),
then serves replays until stdin closes.
"""
import os
import select
import sys
import time

import zmq

EMPTY = bytes([0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00])


def main():
    pub_ep, replay_ep, topic, folder = sys.argv[1:5]
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.bind(pub_ep)
    router = ctx.socket(zmq.ROUTER)
    router.bind(replay_ep)
    buffer = []

    def send(payload, publish=True):
        seq = len(buffer)
        buffer.append(payload)
        if publish:
            pub.send_multipart((topic.encode(), seq.to_bytes(8, "big"), payload))

    def serve_replays():
        while router.poll(0):
            client, _, start = router.recv_multipart()
            start = int.from_bytes(start, "big")
            for seq, payload in enumerate(buffer):
                if seq >= start:
                    router.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            router.send_multipart((client, b"", (-1).to_bytes(8, "big", signed=True), b""))

    stdin = sys.stdin.fileno()
    while not select.select([stdin], [], [], 0.02)[0]:
        send(EMPTY)
        serve_replays()
    sys.stdin.readline()
    files = sorted(f for f in os.listdir(folder) if f.endswith(".msgpack"))[:5]
    for i, name in enumerate(files):
        with open(os.path.join(folder, name), "rb") as f:
            send(f.read(), publish=(i != 2))
    while True:
        serve_replays()
        if select.select([stdin], [], [], 0.01)[0] and not sys.stdin.readline():
            return


if __name__ == "__main__":
    main()
