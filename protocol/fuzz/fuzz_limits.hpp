// Limits the fuzz target decodes with; tests/protocol/corpus_test.cpp replays the seed corpus
// (protocol/fuzz/corpus, written by make_corpus.py) under the same ones.
#pragma once

#include "protocol/message.hpp"

namespace deskbox::protocol::fuzz {

// Small, so inputs reach the limit checks and the reservations they allow stay cheap.
inline constexpr Limits kFuzzLimits{
    .max_header_bytes = 4096, .max_body_bytes = 65536, .max_header_depth = 16};

}  // namespace deskbox::protocol::fuzz
