// RAII owners for FFmpeg objects and error checking, shared by the encoder, the recorder and
// their tests. Include only where FFmpeg's headers are wanted (the public headers avoid them).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace deskbox::streaming {

struct CodecContextDeleter {
    void operator()(AVCodecContext* context) const { avcodec_free_context(&context); }
};
struct FrameDeleter {
    void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct PacketDeleter {
    void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct SwsContextDeleter {
    void operator()(SwsContext* context) const { sws_freeContext(context); }
};
// An output or input format context; closes its file (unless the format has none) and frees.
struct OutputFormatDeleter {
    void operator()(AVFormatContext* context) const {
        if (context->pb && !(context->oformat->flags & AVFMT_NOFILE)) avio_closep(&context->pb);
        avformat_free_context(context);
    }
};

using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextDeleter>;
using OutputFormatPtr = std::unique_ptr<AVFormatContext, OutputFormatDeleter>;

// Drops a received packet's payload at scope exit (the AVPacket itself is reused).
class PacketUnref {
  public:
    explicit PacketUnref(AVPacket* packet) : packet_(packet) {}
    ~PacketUnref() { av_packet_unref(packet_); }
    PacketUnref(const PacketUnref&) = delete;
    PacketUnref& operator=(const PacketUnref&) = delete;

  private:
    AVPacket* packet_;
};

inline std::string av_error_text(int code) {
    char text[AV_ERROR_MAX_STRING_SIZE] = {};
    av_strerror(code, text, sizeof text);
    return text;
}

// Throws std::runtime_error "what: FFmpeg's message" for a negative status.
inline int check_av(int status, const std::string& what) {
    if (status < 0) throw std::runtime_error(what + ": " + av_error_text(status));
    return status;
}

}  // namespace deskbox::streaming
