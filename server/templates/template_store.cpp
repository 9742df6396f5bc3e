#include "server/templates/template_store.hpp"

#include <algorithm>
#include <fstream>
#include <set>

#include "common/atomic_file.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;
using nlohmann::json;

json StoredTemplate::to_json() const {
    return {{"name", ref.name},
            {"tag", ref.tag},
            {"image_id", image_id},
            {"definition", definition},
            {"base", base},
            {"base_digest", base_digest},
            {"pulled", pulled},
            {"layers", layers},
            {"build_seconds", build_seconds},
            {"bytes", bytes},
            {"created_at", created_at},
            {"build_id", build_id},
            {"image_config", image_config}};
}

StoredTemplate StoredTemplate::from_json(const json& j) {
    StoredTemplate t;
    t.ref.name = j.at("name").get<std::string>();
    t.ref.tag = j.at("tag").get<std::string>();
    t.image_id = j.at("image_id").get<std::string>();
    t.definition = j.at("definition");
    t.base = j.value("base", "");
    t.base_digest = j.value("base_digest", "");
    t.pulled = j.value("pulled", std::vector<std::string>{});
    t.layers = j.value("layers", std::size_t{0});
    t.build_seconds = j.value("build_seconds", 0.0);
    t.bytes = j.value("bytes", std::uint64_t{0});
    t.created_at = j.value("created_at", "");
    t.build_id = j.value("build_id", "");
    t.image_config = j.value("image_config", json());
    return t;
}

TemplateStore::TemplateStore(fs::path dir) : dir_(std::move(dir)) {
    fs::create_directories(dir_ / "store");
    fs::create_directories(dir_ / "images");
}

fs::path TemplateStore::record_path(const TemplateRef& ref) const {
    return dir_ / "store" / ref.name / (ref.tag + ".json");
}

fs::path TemplateStore::image_dir(const std::string& image_id) const {
    return dir_ / "images" / image_id;
}

fs::path TemplateStore::rootfs_of(const std::string& image_id) const {
    return image_dir(image_id) / "rootfs";
}

std::optional<StoredTemplate> TemplateStore::find(const TemplateRef& ref) const {
    std::lock_guard lock(mutex_);
    std::ifstream in(record_path(ref));
    if (!in) return std::nullopt;
    try {
        return StoredTemplate::from_json(json::parse(in));
    } catch (const json::exception&) {
        return std::nullopt;  // a record cut short by a power loss: as if absent
    }
}

std::vector<StoredTemplate> TemplateStore::list() const {
    std::vector<StoredTemplate> out;
    std::error_code ec;
    std::vector<TemplateRef> refs;
    for (const auto& name : fs::directory_iterator(dir_ / "store", ec))
        for (const auto& tag : fs::directory_iterator(name.path(), ec))
            if (tag.path().extension() == ".json")
                refs.push_back({name.path().filename(), tag.path().stem()});
    for (const auto& ref : refs)
        if (auto found = find(ref)) out.push_back(std::move(*found));
    std::sort(out.begin(), out.end(), [](const StoredTemplate& a, const StoredTemplate& b) {
        return a.ref.str() < b.ref.str();
    });
    return out;
}

void TemplateStore::put(const StoredTemplate& stored) {
    std::lock_guard lock(mutex_);
    fs::create_directories(record_path(stored.ref).parent_path());
    atomic_file::write(record_path(stored.ref), stored.to_json().dump(2) + "\n",
                       {0644, atomic_file::Durability::power_loss});
    generation_.fetch_add(1);
}

bool TemplateStore::remove(const TemplateRef& ref) {
    std::lock_guard lock(mutex_);
    std::error_code ec;
    bool removed = fs::remove(record_path(ref), ec);
    fs::remove(record_path(ref).parent_path(), ec);  // only when empty
    generation_.fetch_add(1);
    return removed;
}

std::size_t TemplateStore::collect_garbage(const std::function<bool(const fs::path&)>& in_use) {
    std::set<std::string> named;
    for (const auto& t : list()) named.insert(t.image_id);
    std::size_t removed = 0;
    std::error_code ec;
    std::vector<fs::path> candidates;
    for (const auto& image : fs::directory_iterator(dir_ / "images", ec)) {
        const auto name = image.path().filename().string();
        if (named.count(name) || name.starts_with(".tmp-")) continue;  // kept, or being made
        if (!name.starts_with(".") && in_use(image.path() / "rootfs")) continue;
        candidates.push_back(image.path());
    }
    for (const auto& path : candidates) {
        // Renamed first, so a half-deleted rootfs never looks complete.
        auto doomed = dir_ / "images" / (".gone-" + path.filename().string());
        if (!path.filename().string().starts_with(".")) fs::rename(path, doomed, ec);
        fs::remove_all(ec ? path : doomed, ec);
        if (!ec) ++removed;
    }
    return removed;
}

}  // namespace deskbox::templates
