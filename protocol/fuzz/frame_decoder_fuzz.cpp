// libFuzzer target for FrameDecoder. The first input byte picks how the rest is split into
// feeds; the rest is the byte stream. Checks, beyond "no crash, no sanitizer report":
//  - decoding in one feed and decoding in small pieces (mixing feed() and prepare()/commit())
//    give the same messages and the same error;
//  - every decoded message re-encodes and decodes back to itself.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/fuzz/fuzz_limits.hpp"
#include "protocol/message.hpp"

using deskbox::protocol::FrameDecoder;
using deskbox::protocol::Limits;
using deskbox::protocol::Message;
using deskbox::protocol::ProtocolError;

namespace {

constexpr Limits kLimits = deskbox::protocol::fuzz::kFuzzLimits;

struct Outcome {
    std::vector<Message> messages;
    std::string error;  // empty: no error
};

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "frame_decoder_fuzz: %s\n", what);
        std::abort();
    }
}

void drain(FrameDecoder& decoder, Outcome& outcome) {
    while (auto message = decoder.next()) outcome.messages.push_back(std::move(*message));
}

Outcome decode_whole(const std::uint8_t* data, std::size_t size) {
    Outcome outcome;
    FrameDecoder decoder(kLimits);
    try {
        decoder.feed({reinterpret_cast<const char*>(data), size});
        drain(decoder, outcome);
        decoder.finish();
    } catch (const ProtocolError& e) {
        outcome.error = e.what();
    }
    return outcome;
}

Outcome decode_pieces(std::uint8_t seed, const std::uint8_t* data, std::size_t size) {
    Outcome outcome;
    FrameDecoder decoder(kLimits);
    std::uint32_t state = seed * 2654435761u + 1;
    try {
        std::size_t offset = 0;
        while (offset < size) {
            state = state * 1103515245u + 12345u;
            const std::size_t piece = std::min<std::size_t>(size - offset, 1 + (state >> 16) % 97);
            if (state & 1) {
                decoder.feed({reinterpret_cast<const char*>(data) + offset, piece});
                offset += piece;
            } else {
                auto space = decoder.prepare(piece);
                check(!space.empty() && space.size() <= piece, "prepare() span size");
                std::memcpy(space.data(), data + offset, space.size());
                decoder.commit(space.size());
                offset += space.size();
            }
            drain(decoder, outcome);
        }
        decoder.finish();
    } catch (const ProtocolError& e) {
        outcome.error = e.what();
    }
    return outcome;
}

bool same_message(const Message& a, const Message& b) {
    return a.kind == b.kind && a.header == b.header && a.body == b.body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t seed = data[0];
    ++data;
    --size;

    const Outcome whole = decode_whole(data, size);
    const Outcome pieces = decode_pieces(seed, data, size);
    check(whole.messages.size() == pieces.messages.size(), "message count differs by split");
    for (std::size_t i = 0; i < whole.messages.size(); ++i)
        check(same_message(whole.messages[i], pieces.messages[i]), "message differs by split");
    check(whole.error == pieces.error, "error differs by split");

    // Re-serialising can lengthen a header ("1e2" dumps as "100.0"), hence roomier limits.
    const Limits roomy{.max_header_bytes = kLimits.max_header_bytes * 8,
                       .max_body_bytes = kLimits.max_body_bytes,
                       .max_header_depth = kLimits.max_header_depth};
    for (const Message& message : whole.messages) {
        const std::string encoded = deskbox::protocol::encode(message, roomy);
        FrameDecoder again(roomy);
        again.feed(encoded);
        auto decoded = again.next();
        check(decoded && same_message(*decoded, message), "re-encoded message differs");
        check(again.buffered() == 0 && !again.next(), "re-encoded message left bytes behind");
    }
    return 0;
}
