#include "bench/streaming/busy_screen.hpp"

#include <random>
#include <string>

#include <opencv2/imgproc.hpp>

namespace deskbox::bench {
namespace {

std::string random_words(std::mt19937& rng, int characters) {
    static const char letters[] = "etaoinshrdlucmfwypvbgkjqxz";
    std::string line;
    while (static_cast<int>(line.size()) < characters) {
        int word = 2 + static_cast<int>(rng() % 9);
        for (int i = 0; i < word; ++i) line += letters[std::min<unsigned>(rng() % 26, rng() % 26)];
        line += rng() % 7 == 0 ? ", " : " ";
    }
    line[0] = static_cast<char>(std::toupper(line[0]));
    return line;
}

void draw_window(cv::Mat& bgr, std::mt19937& rng, cv::Rect area, const std::string& title) {
    area &= cv::Rect(0, 0, bgr.cols, bgr.rows);
    if (area.empty()) return;
    cv::Mat window = bgr(area);
    window.setTo(cv::Scalar(250, 250, 250));
    // Title bar with a slight gradient.
    int bar = std::min(30, area.height);
    for (int y = 0; y < bar; ++y) window.row(y).setTo(cv::Scalar(90 + y, 60 + y, 40 + y));
    cv::putText(window, title, {10, 20}, cv::FONT_HERSHEY_SIMPLEX, 0.5, {255, 255, 255}, 1,
                cv::LINE_AA);
    cv::rectangle(window, cv::Rect(0, 0, area.width, area.height), {120, 120, 120}, 1);
    // A toolbar with buttons.
    int x = 8;
    for (int i = 0; i < 6 && x + 70 < area.width; ++i, x += 78) {
        cv::rectangle(window, cv::Rect(x, bar + 6, 70, 22), {220, 215, 210}, cv::FILLED);
        cv::rectangle(window, cv::Rect(x, bar + 6, 70, 22), {160, 160, 160}, 1);
        cv::putText(window, random_words(rng, 5).substr(0, 6), {x + 8, bar + 22},
                    cv::FONT_HERSHEY_SIMPLEX, 0.4, {40, 40, 40}, 1, cv::LINE_AA);
    }
    // Paragraphs of text, like a browser or an editor.
    int chars = std::max(10, (area.width - 24) / 8);
    for (int y = bar + 52; y < area.height - 8; y += 18) {
        if (rng() % 9 == 0) continue;  // paragraph break
        cv::Scalar ink = rng() % 11 == 0 ? cv::Scalar(180, 80, 20) : cv::Scalar(30, 30, 30);
        cv::putText(window, random_words(rng, chars - static_cast<int>(rng() % 20)), {12, y},
                    cv::FONT_HERSHEY_SIMPLEX, 0.45, ink, 1, cv::LINE_AA);
    }
}

}  // namespace

cv::Mat make_busy_screen(int width, int height, unsigned seed) {
    std::mt19937 rng(seed);
    cv::Mat bgr(height, width, CV_8UC3);
    // Wallpaper: diagonal two-colour gradient.
    for (int y = 0; y < height; ++y) {
        auto* row = bgr.ptr<cv::Vec3b>(y);
        for (int x = 0; x < width; ++x) {
            double t = (static_cast<double>(x) / width + static_cast<double>(y) / height) / 2;
            row[x] = cv::Vec3b(static_cast<uchar>(120 + 100 * t), static_cast<uchar>(60 + 80 * t),
                               static_cast<uchar>(30 + 40 * (1 - t)));
        }
    }
    // Windows, overlapping, most of the screen covered.
    draw_window(bgr, rng, {40, 60, width * 55 / 100, height * 80 / 100}, "Editor - notes.txt");
    draw_window(bgr, rng, {width * 45 / 100, 90, width * 52 / 100, height * 60 / 100},
                "Browser - Example Domain");
    draw_window(bgr, rng,
                {width * 30 / 100, height * 62 / 100, width * 45 / 100, height * 34 / 100},
                "Terminal");
    // A photo-like patch: smooth colour field with grain, inside the browser.
    cv::Rect photo(width * 50 / 100, 200, std::min(320, width / 4), std::min(200, height / 4));
    photo &= cv::Rect(0, 0, width, height);
    cv::Mat patch(photo.size(), CV_8UC3);
    cv::randn(patch, cv::Scalar(0, 0, 0), cv::Scalar(20, 20, 20));
    for (int y = 0; y < patch.rows; ++y)
        for (int x = 0; x < patch.cols; ++x) {
            cv::Vec3b& p = patch.at<cv::Vec3b>(y, x);
            double u = static_cast<double>(x) / patch.cols, v = static_cast<double>(y) / patch.rows;
            p = cv::Vec3b(cv::saturate_cast<uchar>(p[0] + 200 * v),
                          cv::saturate_cast<uchar>(p[1] + 90 + 100 * u * v),
                          cv::saturate_cast<uchar>(p[2] + 220 * (1 - v) * u));
        }
    cv::GaussianBlur(patch, patch, {3, 3}, 0);
    patch.copyTo(bgr(photo));
    // A noise patch: a playing video or a canvas animation.
    cv::Rect noise(width - 200, height - 170, 160, 120);
    cv::randu(bgr(noise), cv::Scalar(0, 0, 0), cv::Scalar(256, 256, 256));
    // Top panel with a clock and task names.
    cv::rectangle(bgr, cv::Rect(0, 0, width, 28), {45, 45, 45}, cv::FILLED);
    cv::putText(bgr, "Activities   Editor   Browser   Terminal", {10, 19}, cv::FONT_HERSHEY_SIMPLEX,
                0.5, {230, 230, 230}, 1, cv::LINE_AA);
    cv::putText(bgr, "Tue 14:32", {width - 110, 19}, cv::FONT_HERSHEY_SIMPLEX, 0.5, {230, 230, 230},
                1, cv::LINE_AA);

    cv::Mat bgrx;
    cv::cvtColor(bgr, bgrx, cv::COLOR_BGR2BGRA);
    std::vector<cv::Mat> planes;
    cv::split(bgrx, planes);
    planes[3].setTo(0);
    cv::merge(planes, bgrx);
    return bgrx;
}

}  // namespace deskbox::bench
