// The screen analysis's and recordings' request bodies read into typed requests without a
// server: defaults, what each field becomes, and an invalid-field error naming the field (under its
// prefix) for mistakes the API tests cannot reach cheaply. The API tests (AnalysisApi.*) check the
// same rules end to end on a real screen.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/sandbox/recording_request.hpp"
#include "server/sandbox/screen_request.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

template <typename F>
std::string field_of_error(F&& read) {
    try {
        read();
    } catch (const SandboxError& e) {
        EXPECT_EQ(e.fault(), SandboxFault::invalid) << e.what();
        return e.field();
    }
    return "(no error)";
}

TEST(ScreenRequest, LocateReadsTheSearchWithItsDefaults) {
    const TargetSpec text = read_locate_request({{"text", "Save"}});
    EXPECT_EQ(text.text, "Save");
    EXPECT_FALSE(text.image);
    EXPECT_EQ(text.lang, "eng");
    EXPECT_DOUBLE_EQ(text.search.threshold, 0.9);
    EXPECT_EQ(text.search.max_results, 10);
    EXPECT_FALSE(text.search.region);

    const TargetSpec tuned = read_locate_request(
        {{"text", "Save"}, {"exact", true}, {"region", {10, 20, 30, 40}}, {"max_results", 3}});
    EXPECT_TRUE(tuned.exact);
    EXPECT_EQ(tuned.search.max_results, 3);
    ASSERT_TRUE(tuned.search.region);
    EXPECT_EQ(*tuned.search.region, (streaming::Rect{10, 20, 30, 40}));

    EXPECT_EQ(field_of_error([] {
                  read_locate_request({{"text", "a"}, {"scales", {1}}});
              }),
              "scales");
    EXPECT_EQ(field_of_error([] {
                  read_locate_request({{"text", "a"}, {"region", {0, 0, 5}}});
              }),
              "region");
}

TEST(ScreenRequest, WaitChecksEachFieldAgainstItsKind) {
    const WaitRequest change = read_wait_request({{"until", "change"}, {"since", 7u}});
    EXPECT_EQ(change.until, "change");
    EXPECT_EQ(change.since, 7u);
    EXPECT_EQ(change.timeout_ms, 10'000);

    const WaitRequest stable = read_wait_request({{"until", "stable"}, {"stable_ms", 50}});
    EXPECT_EQ(stable.stable_ms, 50);
    EXPECT_FALSE(stable.since);

    EXPECT_EQ(read_wait_request({{"until", "gone"}, {"text", "Loading"}}).seek.text, "Loading");
    EXPECT_EQ(field_of_error([] {
                  read_wait_request({{"until", "stable"}, {"since", 1u}});
              }),
              "since");
    EXPECT_EQ(field_of_error([] {
                  read_wait_request({{"until", "image"}, {"text", "a"}});
              }),
              "image");
    EXPECT_EQ(field_of_error([] {
                  read_wait_request({{"until", "change"}, {"text", "a"}});
              }),
              "text");
    EXPECT_EQ(field_of_error([] {
                  read_wait_request({{"until", "change"}, {"since", -1}});
              }),
              "since");
    EXPECT_EQ(field_of_error([] {
                  read_wait_request({{"until", "change"}, {"timeout_ms", 120'001}});
              }),
              "timeout_ms");
}

TEST(ScreenRequest, OcrAndCompareReadTheirFields) {
    const OcrRequest ocr = read_ocr_request({{"lang", "deu"}, {"min_confidence", 60}});
    EXPECT_EQ(ocr.lang, "deu");
    EXPECT_DOUBLE_EQ(ocr.min_confidence, 60);
    EXPECT_EQ(read_ocr_request(json::object()).lang, "eng");
    EXPECT_EQ(field_of_error([] { read_ocr_request({{"langs", "eng"}}); }), "langs");

    EXPECT_EQ(field_of_error([] { read_compare_request({{"baseline", 1}}); }), "baseline");
    // The baseline is decoded before the mask is looked at.
    EXPECT_EQ(field_of_error([] {
                  read_compare_request({{"baseline", "bm90IGEgcG5n"}, {"mask", {{0, 0}}}});
              }),
              "baseline");
}

TEST(ScreenRequest, ATargetNamesItsFieldsUnderWhereItSat) {
    const TargetSpec target =
        read_target({R"({"text":"OK","index":2,"offset":[5,-3]})"}, "actions[1].target");
    EXPECT_EQ(target.field, "actions[1].target");
    EXPECT_EQ(target.index, 2);
    EXPECT_EQ(target.search.max_results, 3) << "as many as it takes to reach the index";
    EXPECT_EQ(target.offset.x, 5);
    EXPECT_EQ(target.offset.y, -3);
    EXPECT_EQ(target.timeout_ms, kDefaultTargetWaitMs);

    EXPECT_EQ(field_of_error([] { read_target({R"({"text":"OK","when":1})"}, "target"); }),
              "target.when");
    EXPECT_EQ(field_of_error(
                  [] { read_target({R"({"text":"OK","max_results":2})"}, "actions[0].target"); }),
              "actions[0].target.max_results");
    EXPECT_EQ(field_of_error([] { read_target({R"({"text":"OK","offset":[1]})"}, "target"); }),
              "target.offset");
}

// {"role", "name"}: an accessible element, found by the agent's accessibility.find.
TEST(ScreenRequest, ARoleTargetIsAnAccessibleFind) {
    const TargetSpec target = read_target(
        {R"({"role":"push button","name":"Save","states":["showing"],"index":1,"timeout_ms":300})"},
        "actions[0].target");
    ASSERT_TRUE(target.accessible);
    EXPECT_EQ((*target.accessible)["role"], "push button");
    EXPECT_EQ((*target.accessible)["name"], "Save");
    EXPECT_EQ((*target.accessible)["states"], json::array({"showing"}));
    EXPECT_GE((*target.accessible)["max_results"].get<int>(), 2) << "enough to reach the index";
    EXPECT_EQ(target.index, 1);
    EXPECT_EQ(target.timeout_ms, 300);
    EXPECT_FALSE(read_target({R"({"text":"Save"})"}, "target").accessible);

    EXPECT_EQ(field_of_error([] { read_target({R"({"role":7})"}, "target"); }), "target.role");
    EXPECT_EQ(field_of_error([] { read_target({R"({"role":"link","text":"x"})"}, "target"); }),
              "target.text");
    EXPECT_EQ(field_of_error([] { read_target({R"({"role":"link","name":["x"]})"}, "target"); }),
              "target.name");
}

TEST(RecordingRequest, OneReaderForTheRouteTheCreateAndTheRecord) {
    const RecordingRequest defaults = read_recording_request(json::object());
    EXPECT_FALSE(defaults.actions);
    EXPECT_EQ(defaults.fps, 30);
    const RecordingRequest asked = read_recording_request({{"actions", true}, {"fps", 12}});
    EXPECT_EQ(read_recording_request(asked.to_json()).to_json(), asked.to_json());
    EXPECT_EQ(field_of_error([] { read_recording_request({{"fps", 61}}); }), "fps");
    EXPECT_EQ(field_of_error([] { read_recording_request({{"fps", 0}}, "record"); }), "record.fps");
    EXPECT_EQ(field_of_error([] {
                  read_recording_request({{"audio", true}}, "record");
              }),
              "record.audio");
}

}  // namespace
}  // namespace deskbox::server
