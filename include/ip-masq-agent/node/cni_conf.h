// SPDX-License-Identifier: Apache-2.0
// A CNI configuration directory's network configs (*.conflist, *.conf): the subnets of their
// host-local IPAM "ranges", parsed and read with bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// A network config is a few KB; one larger than this is not read.
inline constexpr size_t kMaxCniConfBytes = 256 * 1024;
// The files of the directory that are read, at most (a node has one or two; the runtime
// uses the first).
inline constexpr size_t kMaxCniConfFiles = 64;
// Directory entries looked at, matching or not: a bound on the listing's loop.
inline constexpr size_t kMaxCniConfDirEntries = 100000;
// host-local subnets in one file, at most.
inline constexpr size_t kMaxCniSubnets = 1024;
// JSON nested deeper than this is refused (a network config nests five levels).
inline constexpr size_t kMaxCniJsonDepth = 64;

// One subnet of a host-local range set.
struct CniSubnet {
	Prefix prefix;
	std::string plugin; // the "type" of the plugin whose ipam holds it ("bridge", "ptp")
	uint32_t line = 0;  // 1-based, where the subnet is written
};

struct CniConf {
	std::vector<CniSubnet> subnets; // in the file's order
};

// .conflist: {"plugins": [ {plugin}, ... ]}; .conf: one {plugin} at the top.
enum class CniConfForm { list, single };

// The form of a file of the directory by its name (*.conflist, *.conf, as libcni reads
// them), or nullopt: another file, or a dotfile (an editor's, a half-written temporary).
std::optional<CniConfForm> cniConfFormOf(std::string_view fileName);

// The subnets of every plugin whose "ipam" has "type": "host-local": each "subnet" of its
// "ranges" (a list of range sets, each a list of ranges) and the older single "subnet" of
// the ipam itself. Other IPAMs (calico-ipam, dhcp, ...) and other keys are not looked at.
// The whole text must be JSON (RFC 8259), at most kMaxCniJsonDepth deep (nlohmann's SAX
// parser, which does not recurse), except that a string may hold bytes that are not UTF-8
// and \u escapes of lone surrogates (as libcni's Go decoder reads them) and a number may
// be past a double's range (its value is not looked at); a subnet must be a CIDR with no
// host bits set (as host-local itself requires). Errors name `source`, the line and what
// is wrong.
Result<CniConf> parseCniConf(std::string_view text, const std::string &source, CniConfForm form);

// One file of the directory and what it holds, or why it could not be read.
struct CniConfFile {
	std::string path;
	Result<CniConf> conf;
};

// The *.conflist and *.conf files directly in `dir` (regular files, symlinks followed; at
// most kMaxCniConfFiles, each at most kMaxCniConfBytes), in byte order of their names,
// each parsed. nullopt: the directory does not exist (yet). An error: it cannot be listed,
// or is too large a directory; a file that cannot be read or parsed is an error of its
// own, in its CniConfFile, and the others are read.
Result<std::optional<std::vector<CniConfFile>>> readCniConfDir(const std::string &dir);

} // namespace ipmasq
