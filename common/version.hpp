// deskbox's version: what deskboxd's MCP server and the CLI report, and what CHANGELOG.md,
// server/api/openapi.json's info.version and the SDKs' versions say (kept equal by hand; the
// API test checks the OpenAPI document against this).
#pragma once

namespace deskbox {

inline constexpr const char* kDeskboxVersion = "0.2.0";

}  // namespace deskbox
