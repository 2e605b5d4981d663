// SPDX-License-Identifier: Apache-2.0
// --config-dir: the listing of a directory's config files, and the merge of their configs.
#include "ip-masq-agent/config/config_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/policy.h"

namespace ipmasq {

namespace {

std::string joinPath(const std::string &dir, const std::string &name)
{
	return (std::filesystem::path(dir) / name).string();
}

tl::unexpected<Error> cannotList(const std::string &dir, int err)
{
	return fail(fmt::format("{}: cannot list the config directory: {}", escaped(dir),
				std::strerror(err)),
		    err);
}

// The files of `list` (by index into merged.files) that gave entries to it.
std::string filesOf(const Config &config, const std::vector<Prefix> &list)
{
	std::vector<uint32_t> files;
	for (const Prefix &prefix : list)
		if (!prefix.origin.builtIn() && prefix.origin.file < config.files.size())
			files.push_back(prefix.origin.file);
	std::sort(files.begin(), files.end());
	files.erase(std::unique(files.begin(), files.end()), files.end());
	std::vector<std::string> names;
	for (uint32_t file : files)
		names.push_back(escaped(config.files[file]));
	return fmt::format("{}", fmt::join(names, ", "));
}

// Append `from` (one file's list) to `to`, its origins moved by `fileOffset`.
// Entries of one file, its origins moved past the files merged before it.
template<typename Entry>
void appendRemapped(std::vector<Entry> &to, std::vector<Entry> &&from, uint32_t fileOffset)
{
	to.reserve(to.size() + from.size());
	for (Entry &entry : from) {
		if (!entry.origin.builtIn())
			entry.origin.file += fileOffset;
		to.push_back(std::move(entry));
	}
}

// A name listed by several files is kept once, where it is first listed.
void keepFirstOfEachName(std::vector<InterfacePattern> &list)
{
	std::vector<InterfacePattern> kept;
	for (InterfacePattern &pattern : list)
		if (std::find(kept.begin(), kept.end(), pattern) == kept.end())
			kept.push_back(std::move(pattern));
	list = std::move(kept);
}

// A key that is one value (outputAddress, flannelSubnetEnv, cniConfDir): files may repeat
// it, never contradict it. `show` writes a value for the message.
template<typename Value, typename Show>
Status mergeOneValue(const Config &merged, std::optional<Value> &out, std::optional<Value> in,
		     uint32_t fileOffset, const std::string &key, Show show)
{
	if (!in)
		return {};
	in->origin.file += fileOffset;
	if (!out) {
		out = std::move(in);
		return {};
	}
	if (*out == *in)
		return {};
	return fail(fmt::format("{}: {}: {} contradicts {} at {}: the files must agree on it, or "
				"only one of them may set it", describeOrigin(merged, in->origin), key,
				show(*in), show(*out), describeOrigin(merged, out->origin)));
}

Status mergeOutputAddress(const Config &merged, std::optional<OutputAddress> &out,
			  std::optional<OutputAddress> in, uint32_t fileOffset, const char *key)
{
	return mergeOneValue(merged, out, std::move(in), fileOffset, key,
			     [](const OutputAddress &address) { return address.toString(); });
}

Status mergeDiscoveryPath(const Config &merged, std::optional<DiscoveryPath> &out,
			  std::optional<DiscoveryPath> in, uint32_t fileOffset, const char *key)
{
	return mergeOneValue(merged, out, std::move(in), fileOffset, std::string("nonMasqueradeDiscovery.") + key,
			     [](const DiscoveryPath &path) { return ipmasq::quoted(path.path); });
}

// nonMasqueradeDiscovery of one more file (its origins moved by `fileOffset`, the merged
// files already holding its own): within, routeProtocols and routeInterfaces are unions,
// the paths must agree, holdDown is the longest that a file gives.
Status mergeDiscovery(LoadedConfig &merged, NonMasqueradeDiscovery in, bool holdDownGiven,
		      uint32_t fileOffset)
{
	std::optional<NonMasqueradeDiscovery> &out = merged.config.nonMasqueradeDiscovery;
	if (!out) {
		out.emplace();
		out->written = in.written;
		out->written.origin.file += fileOffset;
	}
	appendRemapped(out->within, std::move(in.within), fileOffset);
	for (const RouteProtocol &protocol : in.routeProtocols)
		if (std::find(out->routeProtocols.begin(), out->routeProtocols.end(), protocol) ==
		    out->routeProtocols.end())
			out->routeProtocols.push_back(protocol);
	appendRemapped(out->routeInterfaces, std::move(in.routeInterfaces), fileOffset);
	if (holdDownGiven)
		out->holdDown = merged.holdDownGiven ? std::max(out->holdDown, in.holdDown) : in.holdDown;
	merged.holdDownGiven = merged.holdDownGiven || holdDownGiven;
	if (auto s = mergeDiscoveryPath(merged.config, out->flannelSubnetEnv,
					std::move(in.flannelSubnetEnv), fileOffset, "flannelSubnetEnv");
	    !s)
		return s;
	return mergeDiscoveryPath(merged.config, out->cniConfDir, std::move(in.cniConfDir),
				  fileOffset, "cniConfDir");
}

// snatGuard of one more file: one section per config, given by one file (two guards of
// different limits or modes cannot both hold; one file owns it).
Status mergeSnatGuard(Config &merged, SnatGuard in, uint32_t fileOffset)
{
	in.written.origin.file += fileOffset;
	for (Prefix &prefix : in.exempt)
		prefix.origin.file += fileOffset;
	if (merged.snatGuard)
		return fail(fmt::format("{}: snatGuard: the section is also given at {}: only one of the "
					"files may give it", describeOrigin(merged, in.written.origin),
					describeOrigin(merged, merged.snatGuard->written.origin)));
	merged.snatGuard = std::move(in);
	return {};
}

// A prefix listed by several files is kept once, where the first file (in the merged
// order) lists it; repeats within one file stay, as they do with --config.
void keepFirstFileOfEachPrefix(std::vector<Prefix> &list)
{
	std::vector<uint32_t> order(list.size());
	std::iota(order.begin(), order.end(), 0);
	const auto key = [&list](uint32_t i) { return std::tie(list[i].network, list[i].length); };
	// Stable: among equal prefixes the first in the list, so of the first file, leads.
	std::stable_sort(order.begin(), order.end(),
			 [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
	std::vector<bool> drop(list.size(), false);
	for (size_t start = 0; start < order.size();) {
		size_t end = start + 1;
		while (end < order.size() && key(order[end]) == key(order[start]))
			end++;
		const uint32_t firstFile = list[order[start]].origin.file;
		for (size_t i = start + 1; i < end; i++)
			drop[order[i]] = list[order[i]].origin.file != firstFile;
		start = end;
	}
	size_t kept = 0;
	for (size_t i = 0; i < list.size(); i++)
		if (!drop[i])
			list[kept++] = std::move(list[i]);
	list.resize(kept);
}

Status checkMergedLimit(const Config &config, const std::vector<Prefix> &list, const char *key)
{
	const size_t limit = std::min(static_cast<size_t>(config.cidrLimit), kMaxNonMasqueradeCIDRs);
	if (list.size() <= limit)
		return {};
	return fail(fmt::format("{}: {}: the files together list {} entries, more than {} ({}; "
				"link-local is not counted). Remove entries, or raise cidrLimit in "
				"one of the files",
				filesOf(config, list), key, list.size(),
				limit == kMaxNonMasqueradeCIDRs && static_cast<size_t>(config.cidrLimit) > limit
					? "the most the agent takes"
					: "the largest cidrLimit of the files",
				limit));
}

// One file's config merged into what the files before it made: lists appended (their
// origins moved past those files), the flags or-ed, the limits by the rules of
// docs/configuration.md, outputAddress at most once.
Status mergeInto(LoadedConfig &merged, LoadedConfig part)
{
	Config &out = merged.config;
	Config &in = part.config;
	const auto offset = static_cast<uint32_t>(out.files.size());
	if (in.nonMasqueradeCIDRsGiven) {
		out.nonMasqueradeCIDRsGiven = true;
		appendRemapped(out.nonMasqueradeCIDRs, std::move(in.nonMasqueradeCIDRs), offset);
	}
	appendRemapped(out.masqueradeCIDRs, std::move(in.masqueradeCIDRs), offset);
	appendRemapped(out.masqueradeSourceCIDRs, std::move(in.masqueradeSourceCIDRs), offset);
	appendRemapped(out.outputInterfaces, std::move(in.outputInterfaces), offset);
	appendRemapped(out.nonMasqueradeInterfaces, std::move(in.nonMasqueradeInterfaces), offset);
	out.masqLinkLocal = out.masqLinkLocal || in.masqLinkLocal;
	out.masqLinkLocalIPv6 = out.masqLinkLocalIPv6 || in.masqLinkLocalIPv6;
	// A file that leaves a key out does not vote with the default.
	if (part.cidrLimitGiven)
		out.cidrLimit = merged.cidrLimitGiven ? std::max(out.cidrLimit, in.cidrLimit) : in.cidrLimit;
	if (part.resyncIntervalGiven)
		out.resyncInterval = merged.resyncIntervalGiven
			? std::min(out.resyncInterval, in.resyncInterval)
			: in.resyncInterval;
	merged.cidrLimitGiven = merged.cidrLimitGiven || part.cidrLimitGiven;
	merged.resyncIntervalGiven = merged.resyncIntervalGiven || part.resyncIntervalGiven;
	for (std::string &file : in.files)
		out.files.push_back(std::move(file));
	// After the files, so that a message can name both.
	if (auto s = mergeOutputAddress(out, out.outputAddress, std::move(in.outputAddress), offset,
					outputAddressKey(Family::ipv4));
	    !s)
		return s;
	if (auto s = mergeOutputAddress(out, out.outputAddressIPv6, std::move(in.outputAddressIPv6),
					offset, outputAddressKey(Family::ipv6));
	    !s)
		return s;
	if (in.nonMasqueradeDiscovery)
		if (auto s = mergeDiscovery(merged, std::move(*in.nonMasqueradeDiscovery), part.holdDownGiven, offset); !s)
			return s;
	if (in.snatGuard)
		if (auto s = mergeSnatGuard(out, std::move(*in.snatGuard), offset); !s)
			return s;
	for (std::string &warning : part.warnings)
		merged.warnings.push_back(std::move(warning));
	for (std::string &unknown : part.unknownKeys)
		merged.unknownKeys.push_back(std::move(unknown));
	merged.fromFile = merged.fromFile || part.fromFile;
	return {};
}

} // namespace

bool isConfigDirName(std::string_view name)
{
	return name.substr(0, kConfigDirPrefix.size()) == kConfigDirPrefix;
}

Result<std::optional<std::vector<std::string>>> listConfigDir(const std::string &dir)
{
	using Listing = std::optional<std::vector<std::string>>;
	// A name that starts with "ip-masq" never starts with ".": a ConfigMap volume's
	// "..data" and "..2026_11_23_...", and dotfiles such as an editor's swap file, are
	// left out by this test alone.
	DirListing listing = listRegularFiles(dir, isConfigDirName, kMaxConfigDirFiles,
					      kMaxConfigDirEntries);
	switch (listing.outcome) {
	case DirListing::Outcome::names: break;
	case DirListing::Outcome::absent: return Listing();
	case DirListing::Outcome::notDirectory:
		return fail(fmt::format("{}: not a directory; --config-dir must name a directory "
					"(for one file, use --config)", escaped(dir)),
			    ENOTDIR);
	case DirListing::Outcome::tooManyEntries:
		return fail(fmt::format("{}: more than {} entries; --config-dir must name a "
					"directory of config files, such as a ConfigMap volume",
					escaped(dir), kMaxConfigDirEntries),
			    E2BIG);
	case DirListing::Outcome::tooManyFiles:
		return fail(fmt::format("{}: more than {} files whose names start with {}; at "
					"most {} are taken: remove files, or merge them into fewer",
					escaped(dir), kMaxConfigDirFiles, kConfigDirPrefix,
					kMaxConfigDirFiles),
			    E2BIG);
	case DirListing::Outcome::failed:
		if (!listing.name.empty())
			return fail(fmt::format("{}: cannot tell what it is: {}",
						escaped(joinPath(dir, listing.name)),
						std::strerror(listing.errnum)),
				    listing.errnum);
		return cannotList(dir, listing.errnum);
	}
	std::vector<std::string> paths;
	paths.reserve(listing.names.size());
	for (const std::string &name : listing.names)
		paths.push_back(joinPath(dir, name));
	return Listing(std::move(paths));
}

Status checkConfigDirBytes(const std::string &dir, size_t total)
{
	if (total <= kMaxConfigDirBytes)
		return {};
	return fail(fmt::format("{}: the config files together are {} bytes or more, more than the {} "
				"MiB ({} bytes) they may have together; remove files from the "
				"directory, or shorten the lists: adjacent and overlapping CIDRs can be "
				"merged into fewer",
				escaped(dir), total, kMaxConfigDirBytes / (1024 * 1024), kMaxConfigDirBytes),
		    EFBIG);
}

Result<LoadedConfig> mergeConfigs(std::vector<LoadedConfig> parts, const ConfigFlags &flags)
{
	if (parts.empty()) {
		LoadedConfig defaults;
		defaults.config = defaultConfig(flags);
		return defaults;
	}
	if (parts.size() == 1)
		return std::move(parts.front());

	const auto firstFile = [](const LoadedConfig &part) {
		return part.config.files.empty() ? std::string() : part.config.files.front();
	};
	std::stable_sort(parts.begin(), parts.end(), [&](const LoadedConfig &a, const LoadedConfig &b) {
		return firstFile(a) < firstFile(b);
	});

	LoadedConfig merged;
	for (LoadedConfig &part : parts)
		if (auto s = mergeInto(merged, std::move(part)); !s)
			return fail(s.error());
	Config &out = merged.config;
	if (!out.nonMasqueradeCIDRsGiven)
		out.nonMasqueradeCIDRs = defaultNonMasqueradeCIDRs(flags);

	keepFirstOfEachName(out.outputInterfaces);
	keepFirstOfEachName(out.nonMasqueradeInterfaces);
	if (out.nonMasqueradeDiscovery) {
		keepFirstOfEachName(out.nonMasqueradeDiscovery->routeInterfaces);
		keepFirstFileOfEachPrefix(out.nonMasqueradeDiscovery->within);
		const auto &within = out.nonMasqueradeDiscovery->within;
		if (within.size() > kMaxWithinCIDRs)
			return fail(fmt::format("{}: nonMasqueradeDiscovery.within: the files together list "
						"{} entries, more than {}: merge them into fewer",
						filesOf(out, within), within.size(), kMaxWithinCIDRs));
	}
	for (auto [list, key] : {std::pair{&out.nonMasqueradeCIDRs, "nonMasqueradeCIDRs"},
				 std::pair{&out.masqueradeCIDRs, "masqueradeCIDRs"},
				 std::pair{&out.masqueradeSourceCIDRs, "masqueradeSourceCIDRs"}}) {
		keepFirstFileOfEachPrefix(*list);
		if (auto status = checkMergedLimit(out, *list, key); !status)
			return fail(status.error());
	}
	return merged;
}

} // namespace ipmasq
