// Atoms by name for one connection: each name goes to the server once, and the names a call
// does not know yet go together (XInternAtoms: one round trip for many).
#pragma once

#include <X11/Xlib.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace deskbox::x11 {

class AtomCache {
  public:
    explicit AtomCache(Display* display) : display_(display) {}
    AtomCache(const AtomCache&) = delete;
    AtomCache& operator=(const AtomCache&) = delete;

    // The atoms of `names`, in order (created if the server has none yet). None for names the
    // server could not answer (a lost connection); those are asked again next time.
    std::vector<Atom> intern(const std::vector<std::string>& names);
    Atom intern_one(const std::string& name) { return intern(std::vector<std::string>{name})[0]; }

  private:
    Display* display_;
    std::mutex mutex_;
    std::unordered_map<std::string, Atom> atoms_;
};

}  // namespace deskbox::x11
