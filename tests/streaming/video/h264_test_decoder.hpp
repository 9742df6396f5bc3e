// FFmpeg's software H.264 decoder for tests, single-threaded and low-delay so a packet's
// picture comes out as soon as that packet goes in; pictures are converted back to BGRX with
// the matrix and range the stream signals (H264Encoder: BT.601, limited range).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "streaming/types.hpp"
#include "streaming/video/ffmpeg_util.hpp"

namespace deskbox::streaming {

class H264TestDecoder {
  public:
    H264TestDecoder() {
        const AVCodec* codec = avcodec_find_decoder(AV_CODEC_ID_H264);
        if (!codec) throw std::runtime_error("no h264 decoder");
        context_.reset(avcodec_alloc_context3(codec));
        context_->thread_count = 1;
        context_->flags |= AV_CODEC_FLAG_LOW_DELAY;
        check_av(avcodec_open2(context_.get(), codec, nullptr), "open decoder");
        frame_.reset(av_frame_alloc());
        packet_.reset(av_packet_alloc());
    }

    struct Picture {
        int width = 0;
        int height = 0;
        std::vector<std::uint8_t> bgrx;
        bool keyframe = false;
        ImageView view() const {
            return {bgrx.data(), width, height, static_cast<std::size_t>(width) * 4};
        }
    };

    // Feeds one packet; returns the pictures that came out.
    // `matrix` and `range`, when given, receive what the stream's VUI says.
    std::vector<Picture> decode(const std::vector<std::uint8_t>& annexb,
                                AVColorSpace* matrix = nullptr, AVColorRange* range = nullptr) {
        check_av(av_new_packet(packet_.get(), static_cast<int>(annexb.size())), "packet");
        std::copy(annexb.begin(), annexb.end(), packet_->data);
        int sent = avcodec_send_packet(context_.get(), packet_.get());
        av_packet_unref(packet_.get());
        check_av(sent, "send_packet");
        std::vector<Picture> pictures;
        while (avcodec_receive_frame(context_.get(), frame_.get()) == 0) {
            Picture& picture = pictures.emplace_back();
            picture.width = frame_->width;
            picture.height = frame_->height;
            picture.keyframe = frame_->key_frame != 0;
            if (matrix) *matrix = frame_->colorspace;
            if (range) *range = frame_->color_range;
            picture.bgrx.resize(static_cast<std::size_t>(picture.width) * picture.height * 4);
            SwsContextPtr scaler(sws_getContext(frame_->width, frame_->height,
                                                static_cast<AVPixelFormat>(frame_->format),
                                                frame_->width, frame_->height, AV_PIX_FMT_BGR0,
                                                SWS_BILINEAR, nullptr, nullptr, nullptr));
            // SWS_CS_* numbers are the AVColorSpace ones; unknown values give BT.601.
            const int* coefficients = sws_getCoefficients(frame_->colorspace);
            int full_range = frame_->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
            sws_setColorspaceDetails(scaler.get(), coefficients, full_range, coefficients, 1, 0,
                                     1 << 16, 1 << 16);
            std::uint8_t* out[4] = {picture.bgrx.data(), nullptr, nullptr, nullptr};
            int out_stride[4] = {picture.width * 4, 0, 0, 0};
            sws_scale(scaler.get(), frame_->data, frame_->linesize, 0, frame_->height, out,
                      out_stride);
            av_frame_unref(frame_.get());
        }
        return pictures;
    }

  private:
    CodecContextPtr context_;
    FramePtr frame_;
    PacketPtr packet_;
};

}  // namespace deskbox::streaming
