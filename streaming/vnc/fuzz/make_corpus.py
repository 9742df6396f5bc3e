#!/usr/bin/env python3
"""Writes the seed corpus for vnc_handshake_fuzz, independently of libvncserver's client.

Each file is what an RFB client sends, byte for byte, except that where VNC authentication's
16-byte response would be, the file holds the 8-byte password the client types; the fuzz target
encrypts the server's challenge with it (see vnc_handshake_fuzz.cpp). The fuzz server's control
password is "fuzz-ctl", its view-only password "fuzz-viw", its screen 64x48.

handshake-* seeds complete the handshake (tests/streaming/vnc/vnc_corpus_test.cpp checks that
handshake-38-control gets a ServerInit with the screen's size); msg-* seeds add client messages
after it; bad-* seeds break the handshake or a message.

    python3 streaming/vnc/fuzz/make_corpus.py streaming/vnc/fuzz/corpus
"""
import pathlib
import struct
import sys
import zlib

CONTROL, VIEW_ONLY = b"fuzz-ctl", b"fuzz-viw"
VNC_AUTH = 2

# Encodings (rfbproto.h), as signed 32-bit values where the protocol defines them negative.
RAW, COPYRECT, RRE, CORRE, HEXTILE, ZLIB, TIGHT, ZLIBHEX, ULTRA, TRLE, ZRLE, ZYWRLE = (
    0, 1, 2, 4, 5, 6, 7, 8, 9, 15, 16, 17)
TIGHT_PNG = -260
XCURSOR, RICH_CURSOR, POINTER_POS = -240, -239, -232
LAST_RECT, NEW_FB_SIZE, EXT_DESKTOP_SIZE = -224, -223, -308
QUALITY_5, COMPRESS_6 = -32 + 5, -256 + 6
KEYBOARD_LED, SUPPORTED_MESSAGES, SUPPORTED_ENCODINGS, SERVER_IDENTITY = (
    -0x20000, -0x1FFFF, -0x1FFFE, -0x1FFFD)
XVP = -309
EXTENDED_CLIPBOARD = 0xC0A1E5CE - (1 << 32)

CLIP_TEXT, CLIP_CAPS, CLIP_REQUEST, CLIP_PEEK, CLIP_NOTIFY, CLIP_PROVIDE = (
    1, 1 << 24, 1 << 25, 1 << 26, 1 << 27, 1 << 28)


def handshake(version=b"RFB 003.008\n", password=CONTROL, shared=1):
    """ProtocolVersion, the security type choice (3.7+), the password slot, ClientInit."""
    choice = b"" if version < b"RFB 003.007" else bytes([VNC_AUTH])
    return version + choice + password + bytes([shared])


def pixel_format(bpp, depth, big_endian, true_colour, maxes, shifts):
    return struct.pack(">BBBBHHHBBB3x", bpp, depth, big_endian, true_colour, *maxes, *shifts)


def set_pixel_format(fmt):
    return struct.pack(">B3x", 0) + fmt


def set_encodings(*encodings, count=None):
    n = len(encodings) if count is None else count
    return struct.pack(">BxH", 2, n) + b"".join(struct.pack(">i", e) for e in encodings)


def update_request(incremental=0, x=0, y=0, w=64, h=48):
    return struct.pack(">BBHHHH", 3, incremental, x, y, w, h)


def key(down, keysym):
    return struct.pack(">BBxxI", 4, down, keysym)


def pointer(mask, x, y):
    return struct.pack(">BBHH", 5, mask, x, y)


def cut_text(text, length=None):
    return struct.pack(">BxxxI", 6, len(text) if length is None else length) + text


def extended_cut_text(payload):
    # Negative length: the extended clipboard format (only after its pseudo-encoding).
    return struct.pack(">Bxxxi", 6, -len(payload)) + payload


def clipboard_provide(text):
    # zlib stream of (u32 size, bytes) per format; flushed, not finished: libvncserver's inflate
    # loop wants Z_OK for the last item too.
    body = struct.pack(">I", len(text)) + text
    z = zlib.compressobj()
    return struct.pack(">I", CLIP_PROVIDE | CLIP_TEXT) + z.compress(body) + z.flush(zlib.Z_SYNC_FLUSH)


BGR233 = pixel_format(8, 8, 0, 1, (7, 7, 3), (0, 3, 6))
RGB565 = pixel_format(16, 16, 0, 1, (31, 63, 31), (11, 5, 0))
BGRX_BE = pixel_format(32, 24, 1, 1, (255, 255, 255), (0, 8, 16))
CURSORS = (RICH_CURSOR, POINTER_POS, XCURSOR)

full = handshake()
all_messages = (set_pixel_format(RGB565) + set_encodings(HEXTILE, RAW, *CURSORS, NEW_FB_SIZE)
                + update_request() + key(1, 0x61) + key(0, 0x61) + pointer(1, 10, 20)
                + pointer(0, 10, 20) + cut_text(b"h\xe9llo") + update_request(1))

cases = {
    # Handshakes that log in.
    "handshake-38-control": full,
    "handshake-37-control": handshake(b"RFB 003.007\n"),
    "handshake-33-control": handshake(b"RFB 003.003\n"),
    "handshake-38-view-only": handshake(password=VIEW_ONLY) + key(1, 0x62) + pointer(1, 1, 1)
    + cut_text(b"nope"),
    "handshake-38-exclusive": handshake(shared=0),
    # Each client message after a handshake, with valid fields.
    "msg-set-pixel-format": full + set_pixel_format(BGR233) + update_request(),
    "msg-set-encodings-tight": full + set_encodings(TIGHT, QUALITY_5, COMPRESS_6, *CURSORS,
                                                    LAST_RECT) + update_request(),
    "msg-set-encodings-zrle-be": full + set_pixel_format(BGRX_BE)
    + set_encodings(ZRLE, ZYWRLE, TRLE, ZLIBHEX) + update_request(),
    "msg-set-encodings-zlib-rre": full + set_encodings(ZLIB, RRE, CORRE, ULTRA, COPYRECT)
    + update_request() + update_request(1, 8, 8, 16, 16),
    "msg-pseudo-encodings": full + set_encodings(RAW, NEW_FB_SIZE, EXT_DESKTOP_SIZE, KEYBOARD_LED,
                                                 SUPPORTED_MESSAGES, SUPPORTED_ENCODINGS,
                                                 SERVER_IDENTITY, XVP, TIGHT_PNG)
    + update_request() + struct.pack(">BxBB", 250, 1, 2),  # xvp reboot
    "msg-key-pointer": full + key(1, 0xFFE1) + key(1, 0x41) + key(0, 0x41) + key(0, 0xFFE1)
    + key(1, 0xDEAD) + pointer(4, 63, 47) + pointer(0, 63, 47) + pointer(8, 5, 5)
    + pointer(0, 65535, 65535),
    "msg-cut-text": full + cut_text(b"caf\xe9 \x00 na\xefve"),
    "msg-all": full + all_messages,
    "msg-extended-clipboard": full + set_encodings(RAW, EXTENDED_CLIPBOARD)
    + extended_cut_text(struct.pack(">II", CLIP_CAPS | CLIP_TEXT, 1 << 20))
    + extended_cut_text(clipboard_provide("grüße\r\n".encode() + b"\x00"))
    + extended_cut_text(struct.pack(">I", CLIP_REQUEST | CLIP_TEXT))
    + extended_cut_text(struct.pack(">I", CLIP_PEEK)),
    "msg-set-desktop-size": full + set_encodings(RAW, EXT_DESKTOP_SIZE)
    + struct.pack(">BxHHBx", 251, 128, 96, 1) + struct.pack(">IHHHHI", 1, 0, 0, 128, 96, 0),
    "msg-scale": full + struct.pack(">BBxx", 8, 2) + update_request()
    + struct.pack(">BBxx", 15, 4) + update_request(),
    "msg-ultra-extras": full + struct.pack(">BBxx", 9, 1) + struct.pack(">BBHH", 10, 1, 3, 3)
    + struct.pack(">BxxxI", 11, 5) + b"hello" + struct.pack(">BxxxI", 11, 0xFFFFFFFF),
    # Broken handshakes.
    "bad-version-33-short": b"RFB 003.003",
    # Fewer bytes than libvncserver's WebSocket peek wants: it used to spin on them for good.
    "bad-three-bytes": b"RFB",
    "bad-version-999": b"RFB 999.999\n" + bytes([VNC_AUTH]) + CONTROL + b"\x01",
    "bad-version-garbage": b"HELO deskbox\r\n\x00\xff" * 3,
    "bad-truncated-before-password": full[:13],
    "bad-truncated-in-password": full[:17],
    "bad-wrong-password": handshake(password=b"guessme!") + key(1, 0x63),
    "bad-security-none": b"RFB 003.008\n\x01\x01",
    "bad-websocket-upgrade": b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n",
    # Broken messages.
    "bad-cut-text-huge": full + cut_text(b"abc", length=0x7FFFFFFF),
    "bad-set-encodings-huge": full + set_encodings(RAW, HEXTILE, count=0xFFFF),
    "bad-pixel-format-12bpp": full + set_pixel_format(pixel_format(12, 12, 0, 1, (15, 15, 15), (8, 4, 0))) + update_request(),
    "bad-unknown-message": full + b"\x80" + b"\x00" * 15,
    "bad-update-off-screen": full + update_request(0, 60, 40, 1000, 1000)
    + update_request(0, 65535, 65535, 65535, 65535),
    # A rect of width or height 0 made libvncserver divide by its width: SIGFPE (found by fuzzing).
    "bad-update-zero-width-zlib": full + set_encodings(ZLIB, COPYRECT) + update_request(0, 8, 0, 0, 48),
    "bad-update-zero-height-ultra": full + set_encodings(ULTRA) + update_request(0, 0, 8, 64, 0)
    + update_request(1, 64, 48, 0, 0),
    "bad-update-zero-size-tight": full + set_encodings(TIGHT, CORRE) + update_request(0, 3, 3, 0, 0),
}

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "corpus")
out.mkdir(parents=True, exist_ok=True)
for old in out.glob("*.bin"):
    old.unlink()
for name, data in sorted(cases.items()):
    (out / f"{name}.bin").write_bytes(data)
print(f"wrote {len(cases)} files to {out}")
