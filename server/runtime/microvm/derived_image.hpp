// The microVM image of a template built on a shipped one (a rootfs of the template store,
// server/templates/template_store.hpp): images/build_microvm.py never sees it, so the runtime
// makes its image the first time a sandbox of it starts, once per rootfs:
//   <image dir>/bases.json              written with the rootfs: {"shipped_rootfs": [paths],
//                                       "boot_from": [paths]}: the shipped templates' rootfs
//                                       it was built FROM, and the one whose kernel boots it
//                                       when it stands on none (an import: `minimal`)
//   <image dir>/microvm/vmlinuz         hard links (else copies) of the first base's boot files:
//   <image dir>/microvm/initramfs.img   the kernel and init do not depend on the rootfs
//   <image dir>/microvm/rootfs.ext4     mkfs.ext4 -d of the rootfs (read-only, sparse)
//   <image dir>/microvm/build.json      {"derived_from", "rootfs_image_seconds", ...}
//   <image dir>/microvm/snapshots/<key> its template snapshots
// (<image dir> is the rootfs's parent.) The folder appears whole (made beside, renamed), and
// goes with the image folder when the store collects it. Neither the rootfs nor the base's
// files are ever written: the store's rootfs shares its files with the base's (hard links).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace deskbox::runtime {

// The record naming a rootfs's bases, beside it.
std::filesystem::path derived_bases_file(const std::filesystem::path& template_rootfs);
// True if `template_rootfs` has a bases record (a template built from a Dockerfile or imported).
bool is_derived_template(const std::filesystem::path& template_rootfs);
// The microVM dir of the first base (then boot_from) that has vmlinuz and initramfs.img;
// nullopt if none has.
// Throws RuntimeError if the record cannot be read.
std::optional<std::filesystem::path> derived_boot_dir(const std::filesystem::path& template_rootfs);

struct DerivedImageMade {
    std::filesystem::path dir;  // <image dir>/microvm
    double seconds = 0;         // making rootfs.ext4 (mkfs.ext4 -d and the mtime fix)
};
// Makes <image dir>/microvm from the rootfs and `boot_dir`'s kernel and initramfs, through a
// temp folder beside it (leftover temp folders of a killed server are removed first). The
// caller serialises makers of one rootfs. Throws RuntimeError naming the tool's complaint.
DerivedImageMade make_derived_image(const std::filesystem::path& template_rootfs,
                                    const std::filesystem::path& boot_dir,
                                    const std::string& mkfs_ext4);

}  // namespace deskbox::runtime
