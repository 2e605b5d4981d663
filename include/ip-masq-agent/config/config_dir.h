// SPDX-License-Identifier: Apache-2.0
// --config-dir: which files of a directory are the config, and how their configs merge.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// The files taken from the directory are those whose names start with this (Azure
// ip-masq-agent-v2's convention), and not with "." (a ConfigMap volume's "..data" and
// its timestamped folders).
inline constexpr std::string_view kConfigDirPrefix = "ip-masq";
// More matching files than this is a mistake (a directory of backups, the wrong
// directory), not a config: a projected volume of ConfigMaps has two or three. The bound
// keeps each look at the directory to a few dozen opens and reads.
inline constexpr size_t kMaxConfigDirFiles = 64;
// The files together hold at most what one config file may: the bounds on memory and on
// parsing that docs/configuration.md ("Limits") gives hold for either flag.
inline constexpr size_t kMaxConfigDirBytes = kMaxConfigFileBytes;
// Directory entries looked at, matching or not: a bound on the listing's loop.
inline constexpr size_t kMaxConfigDirEntries = 100000;

// Whether a directory entry of this name is a config file, if it is a regular file.
bool isConfigDirName(std::string_view name);

// The paths ("DIR/name") of the config files directly in `dir`: matching names that are
// regular files once symlinks are followed (a dangling symlink, a FIFO, a socket or a
// subdirectory is skipped, and never opened), in byte order of the names. nullopt: the
// directory does not exist. More than kMaxConfigDirFiles is an error naming the count.
Result<std::optional<std::vector<std::string>>> listConfigDir(const std::string &dir);

// The files of `dir` read so far hold `total` bytes: an error once that is more than
// kMaxConfigDirBytes.
Status checkConfigDirBytes(const std::string &dir, size_t total);

// Merge the configs of several files, each as parseConfig made it (`files` holds its
// path, and its entries' origins index it). The result does not depend on the order of
// `parts`: they are taken in byte order of their paths, as listConfigDir gives them.
// - nonMasqueradeCIDRs, masqueradeCIDRs and masqueradeSourceCIDRs are unions: a prefix
//   listed in several files is kept once, with the origin of the first file; the
//   built-in defaults apply only if no file gives nonMasqueradeCIDRs.
// - masqLinkLocal and masqLinkLocalIPv6 are true if any file says true.
// - cidrLimit is the largest the files give and bounds each merged list; resyncInterval
//   the shortest they give. A file without the key does not count; if none gives it,
//   the default holds (64, 60s).
// - nonMasqueradeDiscovery is there if any file gives it (each file's section names its
//   `within`): within, routeProtocols and routeInterfaces are unions (within at most
//   kMaxWithinCIDRs in all), flannelSubnetEnv and cniConfDir may be repeated but not
//   contradicted, holdDown is the longest a file gives (30s if none does).
// - Origins are remapped into the merged `files`; warnings (and of them the unknown keys')
//   are all kept.
// No part: the defaults. One part: that part as it is.
Result<LoadedConfig> mergeConfigs(std::vector<LoadedConfig> parts, const ConfigFlags &flags);

} // namespace ipmasq
