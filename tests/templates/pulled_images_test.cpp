// The record of pulled registry images: which digest a tag was last pulled at, and which
// images no template stands on and nobody used for a while (what the service removes).
#include "server/templates/pulled_images.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"

using deskbox::TempDir;
using deskbox::templates::PulledImages;
using namespace std::chrono_literals;

namespace {

const std::string kOld = "reg.test:5000/team/app@sha256:" + std::string(64, 'a');
const std::string kNew = "reg.test:5000/team/app@sha256:" + std::string(64, 'b');
const std::string kTag = "reg.test:5000/team/app:1";

}  // namespace

TEST(PulledImages, ATagFollowsItsLastPullAcrossRestarts) {
    TempDir dir("deskbox-pulls");
    const auto file = dir.path() / "pulls.json";
    const auto now = std::chrono::system_clock::now();
    {
        PulledImages record(file);
        EXPECT_FALSE(record.pinned_for(kTag));
        record.used(kTag, kOld, now);
        EXPECT_EQ(record.pinned_for(kTag), kOld);
        record.used(kTag, kNew, now);  // the tag moved on the registry
    }
    PulledImages again(file);
    EXPECT_EQ(again.pinned_for(kTag), kNew);
    EXPECT_FALSE(again.pinned_for("reg.test:5000/team/app:2"));
}

TEST(PulledImages, UnusedImagesAreTakenOnlyPastTheirKeepTimeAndUnlessKept) {
    TempDir dir("deskbox-pulls");
    const auto file = dir.path() / "pulls.json";
    const auto now = std::chrono::system_clock::now();
    PulledImages record(file);
    record.used(kTag, kOld, now - 48h);
    record.used("", kNew, now - 1h);  // pulled by digest: no tag names it
    EXPECT_TRUE(record.take_unused({kOld}, now - 24h).empty()) << "a template stands on it";
    EXPECT_EQ(record.take_unused({}, now - 24h), std::vector<std::string>{kOld});
    EXPECT_FALSE(record.pinned_for(kTag)) << "forgotten with its image";
    EXPECT_TRUE(record.take_unused({}, now - 24h).empty()) << "used an hour ago";
    EXPECT_EQ(PulledImages(file).take_unused({}, now), std::vector<std::string>{kNew})
        << "the record on disk says the same";
    EXPECT_TRUE(PulledImages(file).take_unused({}, now).empty());
}

TEST(PulledImages, ATornRecordIsStartedAgain) {
    TempDir dir("deskbox-pulls");
    const auto file = dir.path() / "pulls.json";
    std::ofstream(file) << "{\"images\": {\"x\": [";
    PulledImages record(file);
    EXPECT_TRUE(record.take_unused({}, std::chrono::system_clock::now()).empty());
    record.used(kTag, kOld, std::chrono::system_clock::now());
    EXPECT_EQ(PulledImages(file).pinned_for(kTag), kOld);
}
