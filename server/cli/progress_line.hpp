// The line on stderr that says what a long command (a template build) is doing, redrawn in
// place; nothing when stderr is not a terminal.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstddef>
#include <ostream>
#include <string>

namespace deskbox::cli {

class ProgressLine {
  public:
    ProgressLine(std::ostream& err, bool enabled) : err_(err), enabled_(enabled) {}
    ~ProgressLine() { clear(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    bool enabled() const { return enabled_; }
    void show(std::string text) {
        if (!enabled_) return;
        winsize size{};
        std::size_t width = 80;
        if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 10) width = size.ws_col;
        for (auto& c : text)
            if (c == '\n' || c == '\r' || c == '\t') c = ' ';
        if (text.size() >= width) text = text.substr(0, width - 4) + "...";
        err_ << "\r\033[K" << text << std::flush;
        shown_ = true;
    }
    void clear() {
        if (!shown_) return;
        err_ << "\r\033[K" << std::flush;
        shown_ = false;
    }

  private:
    std::ostream& err_;
    bool enabled_;
    bool shown_ = false;
};

}  // namespace deskbox::cli
