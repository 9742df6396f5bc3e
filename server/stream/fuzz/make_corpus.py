#!/usr/bin/env python3
"""Writes the seed corpus of viewer_messages_fuzz into corpus/: byte 0 is 1 for a controlling
viewer, 0 for a watching one; then the messages, one per line, as the web viewer sends them."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def seed(control, *messages):
    lines = [m if isinstance(m, bytes) else json.dumps(m).encode() for m in messages]
    return bytes([1 if control else 0]) + b"\n".join(lines)


SEEDS = {
    "click-drag": seed(True, {"type": "pointer", "x": 10, "y": 10, "buttons": 0},
                       {"type": "pointer", "x": 10, "y": 10, "buttons": 1},
                       {"type": "pointer", "x": 200, "y": 150, "buttons": 1},
                       {"type": "pointer", "x": 200, "y": 150, "buttons": 0}),
    "right-middle-held": seed(True, {"type": "pointer", "x": 5, "y": 5, "buttons": 6}),
    "offscreen": seed(True, {"type": "pointer", "x": -50, "y": 99999, "buttons": 0},
                      {"type": "wheel", "x": 1e12, "y": 3, "dy": 2}),
    "wheel": seed(True, {"type": "wheel", "x": 100, "y": 100, "dx": -1, "dy": 3},
                  {"type": "wheel", "x": 100, "y": 100, "dy": 1000000}),
    "keys": seed(True, {"type": "key", "key": "Shift_L", "down": True},
                 {"type": "key", "keysym": 97, "down": True},
                 {"type": "key", "keysym": 97, "down": False},
                 {"type": "key", "key": "Shift_L", "down": False}),
    "key-held-on-leave": seed(True, {"type": "key", "key": "Control_L", "down": True}),
    "key-bad": seed(True, {"type": "key", "key": "NoSuchKey", "down": True},
                    {"type": "key", "keysym": 65, "down": "yes"}, {"type": "key", "down": True}),
    "text": seed(True, {"type": "text", "text": "hello \u65e5\u672c\u8a9e \U0001F600\n"}),
    "text-bad-utf8": seed(True, b'{"type":"text","text":"caf\xe9"}'),
    "text-wrong-type": seed(True, {"type": "text", "text": 42}),
    "ping": seed(False, {"type": "ping", "t": 1234.5}, {"type": "ping"}),
    "ping-structure": seed(True, b'{"type":"ping","t":[[[[[[[[1]]]]]]]]}'),
    "keyframe": seed(False, {"type": "keyframe"}),
    "view-only-input": seed(False, {"type": "pointer", "x": 1, "y": 1, "buttons": 1},
                            {"type": "text", "text": "no"}),
    "garbage": seed(True, b"not json", b"[1,2,3]", b'{"type":7}', b'{"type":"launch"}', b""),
    "long-type": seed(True, {"type": "\u00e9" * 40}),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
