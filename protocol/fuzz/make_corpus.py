#!/usr/bin/env python3
"""Writes the seed corpus for frame_decoder_fuzz, independently of the C++ encoder.

Each file is one fuzzer input: byte 0 picks how the fuzzer splits the stream into feeds, the
rest is the byte stream. valid-* files must decode without error and invalid-* files must fail
(tests/protocol/corpus_test.cpp checks both), under the fuzzer's limits: header <= 4096 bytes,
body <= 65536 bytes, nesting <= 16.

    python3 protocol/fuzz/make_corpus.py protocol/fuzz/corpus
"""
import json
import pathlib
import struct
import sys

HELLO, REQUEST, RESPONSE, EVENT, STREAM = 1, 2, 3, 4, 5


def frame(kind, header, body=b"", header_bytes=None):
    h = header_bytes if header_bytes is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<IBI", 5 + len(h) + len(body), kind, len(h)) + h + body


def raw(frame_length, kind, header_length, rest=b""):
    return struct.pack("<IBI", frame_length, kind, header_length) + rest


hello = frame(HELLO, {"protocol": "deskbox-agent", "version": 1, "role": "agent",
                      "screen": {"width": 1280, "height": 720}, "display": ":1", "pid": 42})
request = frame(REQUEST, {"id": 7, "method": "files.write", "params": {"path": "/tmp/é.txt"}},
                b"hello\x00world")
ok = frame(RESPONSE, {"id": 7, "result": {"size": 11}})
error = frame(RESPONSE, {"id": 8, "error": {"code": "invalid_action", "message": "x out of range",
                                            "field": "actions[0].x", "completed": 0}})
damage = frame(EVENT, {"event": "damage", "seq": 1, "x": 0, "y": 0, "width": 10, "height": 25,
                       "format": "bgrx"}, bytes(range(256)) * 3 + b"\xff" * 232)
stream_eof = frame(STREAM, {"stream": 3, "eof": True})
deep_ok = frame(EVENT, {"event": "nest"}, header_bytes=b'{"a":' + b"[" * 15 + b"]" * 15 + b"}")

cases = {
    "valid-hello": hello,
    "valid-request-body": request,
    "valid-response": ok,
    "valid-response-error": error,
    "valid-damage-1000": damage,
    "valid-stream-eof": stream_eof,
    "valid-empty-object": frame(EVENT, {}),
    "valid-nesting-16": deep_ok,
    "valid-all-kinds": hello + request + ok + error + damage + stream_eof,
    "valid-empty-input": b"",
    "invalid-frame-length-0": raw(0, EVENT, 0),
    "invalid-frame-length-4": raw(4, EVENT, 0),
    "invalid-kind-0": raw(7, 0, 2, b"{}"),
    "invalid-kind-9": raw(7, 9, 2, b"{}"),
    "invalid-header-longer-than-frame": raw(7, EVENT, 3, b"{}"),
    "invalid-header-array": frame(EVENT, None, header_bytes=b"[1,2]"),
    "invalid-header-string": frame(EVENT, None, header_bytes=b'"x"'),
    "invalid-header-empty": frame(EVENT, None, header_bytes=b""),
    "invalid-json": frame(EVENT, None, header_bytes=b'{"a":}'),
    "invalid-json-trailing": frame(EVENT, None, header_bytes=b'{"a":1} x'),
    "invalid-utf8": frame(EVENT, None, header_bytes=b'{"a":"\xc3\x28"}'),
    "invalid-header-over-limit": raw(5 + 5000, EVENT, 5000),
    "invalid-body-over-limit": raw(5 + 2 + 70000, EVENT, 2, b"{}"),
    "invalid-frame-huge": raw(0xFFFFFFFF, EVENT, 2, b"{}"),
    "invalid-nesting-17": frame(EVENT, None, header_bytes=b'{"a":' + b"[" * 16 + b"]" * 16 + b"}"),
    "invalid-truncated-body": hello + damage[:-10],
    "invalid-truncated-prefix": hello + damage[:6],
    "invalid-garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "invalid-after-valid": ok + raw(7, 200, 2, b"{}"),
}

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "corpus")
out.mkdir(parents=True, exist_ok=True)
for seed, (name, data) in enumerate(sorted(cases.items())):
    (out / f"{name}.bin").write_bytes(bytes([seed * 37 % 256]) + data)
print(f"wrote {len(cases)} files to {out}")
