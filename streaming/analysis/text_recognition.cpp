#include "streaming/analysis/text_recognition.hpp"

#include <omp.h>
#include <tesseract/baseapi.h>
#include <tesseract/resultiterator.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include <opencv2/imgproc.hpp>

#include "streaming/analysis/cv_view.hpp"

namespace deskbox::analysis {

namespace {

constexpr double kUpscale = 2.0;     // screen glyphs are ~8 px x-height; Tesseract likes ~20
constexpr int kEdgeThreshold = 60;   // gray-level step that counts as a glyph edge
constexpr int kCharacterGap = 9;     // px joined along a line (a space at 11 pt is ~7)
constexpr int kRuleLength = 40;      // straight runs this long are borders, not text
constexpr int kMinTextHeight = 5;    // px; smaller pieces are specks
constexpr int kMaxTextHeight = 100;  // px; larger ones are pictures
constexpr std::size_t kMaxIdleEngines = 4;
// White around the page: Tesseract misreads text that touches the image's edge (a region cut
// tight around a line read "sb-0d0b" as "sb-0@d0b").
constexpr int kMargin = 16;

void check_language(const std::string& lang) {
    if (lang.empty() || lang.size() > 64)
        throw ParameterError("lang", "expected a Tesseract language such as \"eng\"");
    for (char c : lang)
        if (!std::islower(static_cast<unsigned char>(c)) &&
            !std::isdigit(static_cast<unsigned char>(c)) && c != '_' && c != '+')
            throw ParameterError("lang", "expected a Tesseract language such as \"eng\"");
}

// The white page Tesseract reads: every piece of text dark on light, at kUpscale.
cv::Mat prepare_page(const ImageView& image) {
    cv::Mat gray;
    cv::cvtColor(as_mat(image), gray, cv::COLOR_BGRA2GRAY);
    cv::Mat edges, strong;
    cv::morphologyEx(gray, edges, cv::MORPH_GRADIENT,
                     cv::getStructuringElement(cv::MORPH_RECT, {2, 2}));
    cv::threshold(edges, strong, kEdgeThreshold, 255, cv::THRESH_BINARY);
    cv::Mat rules_h, rules_v;
    cv::morphologyEx(strong, rules_h, cv::MORPH_OPEN,
                     cv::getStructuringElement(cv::MORPH_RECT, {kRuleLength, 1}));
    cv::morphologyEx(strong, rules_v, cv::MORPH_OPEN,
                     cv::getStructuringElement(cv::MORPH_RECT, {1, kRuleLength}));
    cv::Mat rules = rules_h | rules_v;
    strong &= ~rules;
    cv::Mat joined, labels, stats, centroids;
    cv::morphologyEx(strong, joined, cv::MORPH_CLOSE,
                     cv::getStructuringElement(cv::MORPH_RECT, {kCharacterGap, 1}));
    const int count = cv::connectedComponentsWithStats(joined, labels, stats, centroids, 8);
    cv::Mat page(gray.size(), CV_8U, cv::Scalar(255));
    const cv::Rect whole(0, 0, gray.cols, gray.rows);
    for (int i = 1; i < count; ++i) {
        cv::Rect r(stats.at<int>(i, cv::CC_STAT_LEFT), stats.at<int>(i, cv::CC_STAT_TOP),
                   stats.at<int>(i, cv::CC_STAT_WIDTH), stats.at<int>(i, cv::CC_STAT_HEIGHT));
        if (r.height < kMinTextHeight || r.height > kMaxTextHeight || r.width < 3) continue;
        r = cv::Rect(r.x - 2, r.y - 2, r.width + 4, r.height + 4) & whole;
        cv::Mat piece = gray(r);
        cv::Mat dark_on_light;
        // Most of a text box is background: a dark mean means light text.
        if (cv::mean(piece)[0] < 128)
            dark_on_light = 255 - piece;
        else
            dark_on_light = piece.clone();
        cv::normalize(dark_on_light, dark_on_light, 0, 255, cv::NORM_MINMAX);
        dark_on_light.copyTo(page(r));
    }
    // Borders next to text would be read as "|" or "l" stuck to its first letter.
    cv::dilate(rules, rules, cv::getStructuringElement(cv::MORPH_RECT, {3, 3}));
    page.setTo(255, rules);
    cv::Mat framed, scaled;
    cv::copyMakeBorder(page, framed, kMargin, kMargin, kMargin, kMargin, cv::BORDER_CONSTANT,
                       cv::Scalar(255));
    cv::resize(framed, scaled, {}, kUpscale, kUpscale, cv::INTER_CUBIC);
    return scaled;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string squeeze_spaces(std::string_view s) {
    std::string out;
    for (char c : s) {
        const bool space = std::isspace(static_cast<unsigned char>(c));
        if (space) {
            if (!out.empty() && out.back() != ' ') out.push_back(' ');
        } else {
            out.push_back(c);
        }
    }
    if (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

}  // namespace

std::string OcrResult::text() const {
    std::string out;
    for (const auto& line : lines) {
        if (!out.empty()) out += '\n';
        out += line.text;
    }
    return out;
}

std::vector<TextMatch> find_text(const OcrResult& ocr, std::string_view query, bool exact) {
    const std::string wanted = squeeze_spaces(query);
    if (wanted.empty()) throw ParameterError("text", "expected some text to find");
    const std::string needle = exact ? wanted : lower(wanted);
    std::vector<TextMatch> out;
    std::size_t first_word = 0;
    for (std::size_t l = 0; l < ocr.lines.size(); ++l) {
        // The line's words joined by single spaces, and where each word starts in it.
        std::string line;
        std::vector<std::size_t> starts;
        std::size_t end_word = first_word;
        while (end_word < ocr.words.size() && ocr.words[end_word].line == int(l)) {
            if (!line.empty()) line += ' ';
            starts.push_back(line.size());
            line += ocr.words[end_word].text;
            ++end_word;
        }
        const std::string hay = exact ? line : lower(line);
        for (std::size_t at = hay.find(needle); at != std::string::npos;
             at = hay.find(needle, at + 1)) {
            const std::size_t stop = at + needle.size();
            // The words the occurrence touches.
            std::size_t w0 = 0;
            while (w0 + 1 < starts.size() && starts[w0 + 1] <= at) ++w0;
            std::size_t w1 = w0;
            while (w1 + 1 < starts.size() && starts[w1 + 1] < stop) ++w1;
            const std::size_t word_end = starts[w1] + ocr.words[first_word + w1].text.size();
            if (exact && (starts[w0] != at || word_end != stop)) continue;
            TextMatch match;
            double confidence = 0;
            for (std::size_t w = w0; w <= w1; ++w) {
                const auto& word = ocr.words[first_word + w];
                match.box = bounding(match.box, word.box);
                confidence += word.confidence;
                if (!match.text.empty()) match.text += ' ';
                match.text += word.text;
            }
            match.score = confidence / double(w1 - w0 + 1) / 100.0;
            out.push_back(std::move(match));
        }
        first_word = end_word;
    }
    return out;
}

struct TextRecognizer::Pool {
    std::mutex mutex;
    std::map<std::string, std::vector<std::unique_ptr<tesseract::TessBaseAPI>>> idle;
};

TextRecognizer::TextRecognizer() : pool_(std::make_unique<Pool>()) {}

namespace {

// Tesseract parallelises its LSTM with OpenMP teams of its own size; on a small host they
// oversubscribe the cores and spin (a 2-core machine took 13 s instead of 0.8 s for one
// screen). Calls already run side by side on our threads, so their OpenMP regions get one
// thread. GCC's libgomp keeps this setting per thread, so each calling thread sets it.
void one_openmp_thread_here() {
    thread_local bool done = false;
    if (!done) {
        omp_set_max_active_levels(0);
        done = true;
    }
}

}  // namespace

TextRecognizer::~TextRecognizer() = default;

TextRecognizer& TextRecognizer::shared() {
    static TextRecognizer recognizer;
    return recognizer;
}

std::vector<std::string> TextRecognizer::languages() {
    tesseract::TessBaseAPI api;
    if (api.Init(nullptr, "eng", tesseract::OEM_LSTM_ONLY) != 0) return {};
    std::vector<std::string> out;
    api.GetAvailableLanguagesAsVector(&out);
    return out;
}

OcrResult TextRecognizer::recognize(const ImageView& image, const std::string& lang) {
    check_language(lang);
    one_openmp_thread_here();
    if (image.empty()) throw ParameterError("region", "nothing to read");
    std::unique_ptr<tesseract::TessBaseAPI> engine;
    {
        std::lock_guard lock(pool_->mutex);
        auto& idle = pool_->idle[lang];
        if (!idle.empty()) {
            engine = std::move(idle.back());
            idle.pop_back();
        }
    }
    if (!engine) {
        engine = std::make_unique<tesseract::TessBaseAPI>();
        if (engine->Init(nullptr, lang.c_str(), tesseract::OEM_LSTM_ONLY) != 0)
            throw ParameterError("lang", "language '" + lang +
                                             "' is not installed (Debian: "
                                             "apt-get install tesseract-ocr-LANG)");
        engine->SetVariable("debug_file", "/dev/null");
        // The page is already dark on light; the inverted retry only costs time.
        engine->SetVariable("tessedit_do_invert", "0");
        engine->SetPageSegMode(tesseract::PSM_AUTO);
    }
    cv::Mat page = prepare_page(image);
    engine->SetImage(page.data, page.cols, page.rows, 1, int(page.step));
    engine->SetSourceResolution(int(96 * kUpscale));
    OcrResult result;
    if (engine->Recognize(nullptr) == 0) {
        std::unique_ptr<tesseract::ResultIterator> it(engine->GetIterator());
        if (it && !it->Empty(tesseract::RIL_WORD)) {
            do {
                std::unique_ptr<char[]> text(it->GetUTF8Text(tesseract::RIL_WORD));
                if (!text) continue;
                std::string word = squeeze_spaces(text.get());
                if (word.empty()) continue;
                const bool new_line =
                    result.lines.empty() || it->IsAtBeginningOf(tesseract::RIL_TEXTLINE);
                int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
                it->BoundingBox(tesseract::RIL_WORD, &x0, &y0, &x1, &y1);
                streaming::Rect box{int(x0 / kUpscale) - kMargin, int(y0 / kUpscale) - kMargin,
                                    int((x1 - x0) / kUpscale + 0.5),
                                    int((y1 - y0) / kUpscale + 0.5)};
                box = intersect(box, {0, 0, image.width, image.height});
                if (new_line) result.lines.push_back({});
                OcrLine& line = result.lines.back();
                const double confidence = it->Confidence(tesseract::RIL_WORD);
                result.words.push_back({word, box, confidence, int(result.lines.size()) - 1});
                if (!line.text.empty()) line.text += ' ';
                line.text += word;
                line.box = bounding(line.box, box);
                line.confidence += confidence;
            } while (it->Next(tesseract::RIL_WORD));
        }
    }
    std::vector<int> counts(result.lines.size(), 0);
    for (const auto& w : result.words) ++counts[std::size_t(w.line)];
    for (std::size_t i = 0; i < result.lines.size(); ++i)
        if (counts[i]) result.lines[i].confidence /= counts[i];
    engine->Clear();
    {
        std::lock_guard lock(pool_->mutex);
        auto& idle = pool_->idle[lang];
        if (idle.size() < kMaxIdleEngines) idle.push_back(std::move(engine));
    }
    return result;
}

}  // namespace deskbox::analysis
