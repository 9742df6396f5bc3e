#!/usr/bin/env python3
"""Writes the seed corpus of egress_parsers_fuzz into corpus/ (byte 0 picks the parser:
0 sniff, 1 DNS query, 2 DNS answer for example.org/A with id 0x1234, 3 authority). ClientHellos
come from Python's own TLS client (ssl.MemoryBIO), so they are what real clients send."""
import os
import ssl
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def client_hello(server_name, maximum=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if maximum:
        ctx.maximum_version = maximum
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def name(text):
    return b"".join(bytes([len(l)]) + l.encode() for l in text.split(".")) + b"\0"


def query(qname, qtype=1, qid=0x1234, flags=0x0100):
    return struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 0) + name(qname) + struct.pack(">HH", qtype, 1)


def answer(records, qid=0x1234):
    body = name("example.org") + struct.pack(">HH", 1, 1)
    for owner, rtype, rdata in records:
        body += name(owner) + struct.pack(">HHIH", rtype, 1, 300, len(rdata)) + rdata
    return struct.pack(">HHHHHH", qid, 0x8180, 1, len(records), 0, 0) + body


SEEDS = {
    "sniff-tls13-sni.bin": b"\0" + client_hello("example.org"),
    "sniff-tls12-sni.bin": b"\0" + client_hello("www.example.org", ssl.TLSVersion.TLSv1_2),
    "sniff-tls-no-sni.bin": b"\0" + client_hello(None),
    "sniff-http.bin": b"\0GET /index.html HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\n\r\n",
    "sniff-http-absolute.bin": b"\0GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n",
    "sniff-http-ipv6.bin": b"\0GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n",
    "sniff-connect.bin": b"\0CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n",
    "sniff-http2.bin": b"\0PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "sniff-ssh.bin": b"\0SSH-2.0-OpenSSH_9.2\r\n",
    "dns-query-a.bin": b"\1" + query("example.org"),
    "dns-query-aaaa.bin": b"\1" + query("www.example.org", 28),
    "dns-query-edns.bin": b"\1" + query("example.org")[:10] + b"\0\1" + query("example.org")[12:]
                           + b"\0\0\x29\x10\0\0\0\0\0\0\0",
    "dns-answer-a.bin": b"\2" + answer([("example.org", 1, bytes([93, 184, 216, 34]))]),
    "dns-answer-cname.bin": b"\2" + answer([("example.org", 5, name("edge.cdn.example")),
                                            ("edge.cdn.example", 1, bytes([1, 2, 3, 4])),
                                            ("edge.cdn.example", 1, bytes([10, 0, 0, 1]))]),
    "dns-answer-rebind.bin": b"\2" + answer([("example.org", 1, bytes([127, 0, 0, 1]))]),
    "dns-answer-aaaa-mix.bin": b"\2" + answer([("example.org", 28, bytes(16)),
                                               ("example.org", 1, bytes([8, 8, 8, 8]))]),
    "authority-host-port.bin": b"\3example.org:443",
    "authority-ipv6.bin": b"\3[::1]:8080",
    "authority-literal.bin": b"\x031.2.3.4",
}

os.makedirs(OUT, exist_ok=True)
for file_name, data in SEEDS.items():
    with open(os.path.join(OUT, file_name), "wb") as f:
        f.write(data)
print(f"wrote {len(SEEDS)} seeds to {OUT}")
