// Reading text on the screen: Tesseract (its C++ API, LSTM engine) after a preparation made for
// screens rather than paper.
//
// Tesseract's page layout analysis expects dark text on a light page; a desktop has light text on
// dark panels next to dark text on light windows, and large empty areas it mistakes for
// pictures. So text is found first (edges, closed along the line, long rules removed), each
// piece is copied onto a white page with its polarity made dark-on-light and its contrast
// stretched, the page is scaled 2x (screen fonts are small for Tesseract), and Tesseract reads
// that page with its layout analysis. Boxes come back in the image's pixels.
//
// Engines take ~70 ms to load a language, so a pool keeps them (one per call in flight). Calls
// may run on any threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "streaming/analysis/picture.hpp"

namespace deskbox::analysis {

struct OcrWord {
    std::string text;
    streaming::Rect box;
    double confidence = 0;  // 0..100, Tesseract's
    int line = 0;           // index into OcrResult::lines
};

struct OcrLine {
    std::string text;  // its words, joined by one space
    streaming::Rect box;
    double confidence = 0;  // the mean of its words'
};

struct OcrResult {
    std::vector<OcrLine> lines;  // in reading order
    std::vector<OcrWord> words;  // line by line, left to right
    std::string text() const;    // the lines, joined by '\n'
};

// A phrase found in OCR output: the words it covers, their union box, their mean confidence.
struct TextMatch {
    std::string text;  // the words as read
    streaming::Rect box;
    double score = 0;  // 0..1
};

// Occurrences of `query` (runs of whitespace count as one space) in reading order. Default: a
// case-insensitive substring of a line (the box is the words it touches); exact: whole words,
// case-sensitive. Throws ParameterError("text") for an empty query.
std::vector<TextMatch> find_text(const OcrResult& ocr, std::string_view query, bool exact);

class TextRecognizer {
  public:
    TextRecognizer();
    ~TextRecognizer();
    TextRecognizer(const TextRecognizer&) = delete;
    TextRecognizer& operator=(const TextRecognizer&) = delete;

    // One per process: engines are expensive and the languages are the machine's.
    static TextRecognizer& shared();

    // Reads `image` (BGRX). `lang`: Tesseract language names joined by '+' ("eng",
    // "eng+deu"); throws ParameterError("lang") for a malformed or uninstalled one.
    OcrResult recognize(const ImageView& image, const std::string& lang = "eng");

    // The installed languages (from the tessdata folder).
    std::vector<std::string> languages();

  private:
    struct Pool;
    std::unique_ptr<Pool> pool_;
};

}  // namespace deskbox::analysis
