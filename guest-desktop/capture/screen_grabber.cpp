#include "guest-desktop/capture/screen_grabber.hpp"

#include <X11/Xutil.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include <cerrno>
#include <cstring>

#include "x11/error_trap.hpp"

namespace deskbox::capture {

void XImageDeleter::operator()(XImage* image) const {
    if (image) XDestroyImage(image);
}

// One System V segment attached both here and in the server. It is marked for removal
// (IPC_RMID) as soon as both sides are attached, so the kernel frees it when the last
// attachment goes away, even if this process is killed.
struct ScreenGrabber::ShmSegment {
    Display* display = nullptr;
    XShmSegmentInfo info{};
    bool server_attached = false;
    std::size_t size = 0;

    ~ShmSegment() {
        if (server_attached) {
            XShmDetach(display, &info);
            XSync(display, False);
        }
        if (info.shmaddr && info.shmaddr != reinterpret_cast<char*>(-1)) ::shmdt(info.shmaddr);
        if (info.shmid >= 0) ::shmctl(info.shmid, IPC_RMID, nullptr);  // no-op if removed
    }
};

ScreenGrabber::ScreenGrabber(Display* display, std::optional<bool> use_xshm)
    : display_(display), root_(DefaultRootWindow(display)) {
    XWindowAttributes attributes{};
    if (!XGetWindowAttributes(display_, root_, &attributes))
        throw CaptureError("cannot read the root window's attributes");
    visual_ = attributes.visual;
    depth_ = attributes.depth;
    width_ = attributes.width;
    height_ = attributes.height;
    check_pixel_format();

    if (use_xshm.value_or(true)) {
        if (!try_attach_shm(xshm_reason_) && use_xshm.value_or(false))
            throw CaptureError("use_xshm: XShm was required but is unavailable: " + xshm_reason_);
    }
}

ScreenGrabber::~ScreenGrabber() = default;

void ScreenGrabber::check_pixel_format() {
    int bits_per_pixel = 0;
    int count = 0;
    if (XPixmapFormatValues* formats = XListPixmapFormats(display_, &count)) {
        for (int i = 0; i < count; ++i)
            if (formats[i].depth == depth_) bits_per_pixel = formats[i].bits_per_pixel;
        XFree(formats);
    }
    bool bgrx = (depth_ == 24 || depth_ == 32) && bits_per_pixel == 32 &&
                visual_->red_mask == 0xff0000 && visual_->green_mask == 0x00ff00 &&
                visual_->blue_mask == 0x0000ff && ImageByteOrder(display_) == LSBFirst;
    if (!bgrx) {
        char masks[96];
        std::snprintf(masks, sizeof masks, "red 0x%lx green 0x%lx blue 0x%lx", visual_->red_mask,
                      visual_->green_mask, visual_->blue_mask);
        throw CaptureError("unsupported screen pixel format: depth " + std::to_string(depth_) +
                           ", " + std::to_string(bits_per_pixel) + " bits per pixel, " + masks +
                           ", " + (ImageByteOrder(display_) == LSBFirst ? "LSB" : "MSB") +
                           " first; capture needs depth 24 at 32 bpp little-endian BGRX");
    }
}

bool ScreenGrabber::try_attach_shm(std::string& reason) {
    int opcode = 0, event_base = 0, error_base = 0;
    int major = 0, minor = 0;
    Bool pixmaps = False;
    // Asking XShmQueryVersion first would make Xlib print a warning when it is missing.
    if (!XQueryExtension(display_, "MIT-SHM", &opcode, &event_base, &error_base) ||
        !XShmQueryVersion(display_, &major, &minor, &pixmaps)) {
        reason = "the X server has no MIT-SHM extension";
        return false;
    }
    auto segment = std::make_unique<ShmSegment>();
    segment->display = display_;
    segment->info.shmid = -1;
    segment->size = static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_) * 4;
    segment->info.shmid = ::shmget(IPC_PRIVATE, segment->size, IPC_CREAT | 0600);
    if (segment->info.shmid < 0) {
        reason = std::string("shmget failed: ") + std::strerror(errno);
        return false;
    }
    segment->info.shmaddr = static_cast<char*>(::shmat(segment->info.shmid, nullptr, 0));
    if (segment->info.shmaddr == reinterpret_cast<char*>(-1)) {
        reason = std::string("shmat failed: ") + std::strerror(errno);
        return false;
    }
    segment->info.readOnly = False;
    {
        // A remote server, or one in another IPC namespace, answers the attach with an error.
        x11::XErrorTrap trap(display_);
        XShmAttach(display_, &segment->info);
        if (trap.sync_and_check()) {
            reason = "the X server cannot attach our segment: " + trap.first_error();
            return false;
        }
    }
    segment->server_attached = true;
    ::shmctl(segment->info.shmid, IPC_RMID, nullptr);
    shm_ = std::move(segment);
    return true;
}

ImageView ScreenGrabber::grab(const Rect& requested) {
    Rect area = intersect(requested, screen());
    if (area.empty()) throw CaptureError("grab: the area lies outside the screen");
    x11::XErrorTrap trap(display_);
    if (shm_) {
        // XShmGetImage fills image->width x image->height from (x, y) at
        // image->data - shmaddr, rows padded to 32 bits: a header of the area's size over the
        // start of the segment gives tightly packed rows.
        XImagePtr header(XShmCreateImage(display_, visual_, static_cast<unsigned>(depth_), ZPixmap,
                                         nullptr, &shm_->info, static_cast<unsigned>(area.width),
                                         static_cast<unsigned>(area.height)));
        if (!header) throw CaptureError("XShmCreateImage failed");
        header->data = shm_->info.shmaddr;
        Status ok = XShmGetImage(display_, root_, header.get(), area.x, area.y, AllPlanes);
        std::size_t stride = static_cast<std::size_t>(header->bytes_per_line);
        header->data = nullptr;  // the segment is not the image's to free
        if (!ok || trap.caught())
            throw CaptureError("XShmGetImage failed: " +
                               (trap.caught() ? trap.first_error() : std::string("no reply")));
        return {reinterpret_cast<const std::uint8_t*>(shm_->info.shmaddr), stride, area};
    }
    image_.reset();
    image_.reset(XGetImage(display_, root_, area.x, area.y, static_cast<unsigned>(area.width),
                           static_cast<unsigned>(area.height), AllPlanes, ZPixmap));
    if (!image_ || trap.caught())
        throw CaptureError("XGetImage failed: " +
                           (trap.caught() ? trap.first_error() : std::string("no reply")));
    if (image_->bits_per_pixel != 32)
        throw CaptureError("XGetImage returned " + std::to_string(image_->bits_per_pixel) +
                           " bits per pixel, expected 32");
    return {reinterpret_cast<const std::uint8_t*>(image_->data),
            static_cast<std::size_t>(image_->bytes_per_line), area};
}

}  // namespace deskbox::capture
