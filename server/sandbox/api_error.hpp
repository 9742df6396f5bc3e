// ApiError now lives in server/http/ (below every other server folder, so the generic HTTP and
// JSON helpers there can throw it). This header stays for sandbox/ and the files the Sandbox
// split of issue 28 is rewriting; it goes when sandbox/ stops throwing HTTP statuses.
#pragma once

#include "server/http/api_error.hpp"
