// What a microVM guest is told at boot: its config disk (config.img), shell assignments the
// initramfs's init sources (images/microvm/init).
#pragma once

#include <string>

#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// Single-quoted for a POSIX shell: the config disk is sourced by the initramfs's busybox sh.
std::string shell_quote(const std::string& value);

// Identity, then "$@" = environment (K=V...) followed by the entry's argv; padded to whole
// sectors.
std::string guest_config(const SandboxSpec& spec);

}  // namespace deskbox::runtime
