#include "server/templates/pulled_images.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"

namespace deskbox::templates {

using nlohmann::json;

namespace {

std::int64_t seconds(PulledImages::Time at) {
    return std::chrono::duration_cast<std::chrono::seconds>(at.time_since_epoch()).count();
}

}  // namespace

PulledImages::PulledImages(std::filesystem::path file) : file_(std::move(file)) {
    std::ifstream in(file_);
    if (!in) return;
    try {
        const json record = json::parse(in);
        for (const auto& [pinned, entry] : record.at("images").items()) {
            Entry e;
            e.tags = entry.value("tags", std::set<std::string>{});
            e.last_used = entry.value("last_used", std::int64_t{0});
            images_[pinned] = std::move(e);
        }
    } catch (const json::exception&) {
        images_.clear();  // a torn record (written whole, so only by hand): start again
    }
}

void PulledImages::used(const std::string& tag_reference, const std::string& pinned, Time at) {
    if (!tag_reference.empty())
        for (auto& [other, entry] : images_)
            if (other != pinned) entry.tags.erase(tag_reference);  // the tag moved
    auto& entry = images_[pinned];
    if (!tag_reference.empty()) entry.tags.insert(tag_reference);
    entry.last_used = std::max(entry.last_used, seconds(at));
    save();
}

std::optional<std::string> PulledImages::pinned_for(const std::string& tag_reference) const {
    for (const auto& [pinned, entry] : images_)
        if (entry.tags.count(tag_reference)) return pinned;
    return std::nullopt;
}

std::vector<std::string> PulledImages::take_unused(const std::set<std::string>& keep, Time cutoff) {
    std::vector<std::string> out;
    for (auto it = images_.begin(); it != images_.end();) {
        if (!keep.count(it->first) && it->second.last_used <= seconds(cutoff)) {
            out.push_back(it->first);
            it = images_.erase(it);
        } else {
            ++it;
        }
    }
    if (!out.empty()) save();
    return out;
}

void PulledImages::save() const {
    json images = json::object();
    for (const auto& [pinned, entry] : images_)
        images[pinned] = {{"tags", entry.tags}, {"last_used", entry.last_used}};
    atomic_file::write(file_, json{{"images", images}}.dump(1) + "\n");
}

}  // namespace deskbox::templates
