// What every route reads and answers with, in one include: JSON bodies and answers
// (server/http/json_body.hpp) and the query string (server/http/query.hpp). Both live in
// server/http/ so mcp/ and cluster/, below api/, use them without reaching up.
#pragma once

#include "server/http/api_error.hpp"
#include "server/http/json_body.hpp"
#include "server/http/query.hpp"
