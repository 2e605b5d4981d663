// SPDX-License-Identifier: Apache-2.0
// The config's location (file or directory) and the one load path from content to config.
#include "ip-masq-agent/config/config_location.h"

#include <filesystem>
#include <sys/stat.h>

#include <fmt/format.h>

#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/policy.h"

namespace ipmasq {

namespace {

Result<ConfigContent> readConfigDir(const std::string &dir)
{
	auto listing = listConfigDir(dir);
	if (!listing)
		return fail(listing.error());
	ConfigContent content;
	if (!*listing)
		return content;
	size_t total = 0;
	for (std::string &path : **listing) {
		// Refuse before reading what the stat already shows to be too much.
		struct stat st {};
		if (stat(path.c_str(), &st) == 0 && st.st_size > 0)
			if (auto fits = checkConfigDirBytes(dir, total + static_cast<size_t>(st.st_size)); !fits)
				return fail(fits.error());
		auto text = readConfigText(path);
		if (!text)
			return fail(text.error());
		if (!*text)
			continue; // removed since the listing: as if it had not been there
		total += (*text)->size();
		if (auto fits = checkConfigDirBytes(dir, total); !fits)
			return fail(fits.error());
		content.files.push_back({std::move(path), std::move(**text)});
	}
	return content;
}

} // namespace

std::string ConfigLocation::flag() const
{
	return fmt::format("{}={}", isDirectory() ? "--config-dir" : "--config", escaped(path));
}

Result<ConfigContent> readConfigContent(const ConfigLocation &location)
{
	if (location.isDirectory())
		return readConfigDir(location.path);
	auto text = readConfigText(location.path);
	if (!text)
		return fail(text.error());
	if (!*text)
		return ConfigContent::absent();
	return ConfigContent::single(location.path, std::move(**text));
}

Result<LoadedConfig> loadConfigContent(const ConfigContent &content, const ConfigFlags &flags)
{
	std::vector<LoadedConfig> parts;
	parts.reserve(content.files.size());
	for (const ConfigFile &file : content.files) {
		auto parsed = parseConfig(file.text, file.path, flags);
		if (!parsed)
			return fail(parsed.error());
		parts.push_back(std::move(*parsed));
	}
	auto merged = mergeConfigs(std::move(parts), flags);
	if (!merged)
		return fail(merged.error());
	if (auto status = checkConfigPolicy(*merged); !status)
		return fail(status.error());
	return merged;
}

Result<LoadedConfig> loadConfig(const ConfigLocation &location, const ConfigFlags &flags)
{
	auto content = readConfigContent(location);
	if (!content)
		return fail(content.error());
	return loadConfigContent(*content, flags);
}

std::string describeConfigOrigin(const ConfigLocation &location, const LoadedConfig &loaded)
{
	if (!location.isDirectory())
		return loaded.fromFile ? escaped(location.path)
				       : fmt::format("(built-in defaults: {} not found)",
						     ipmasq::quoted(location.path));
	if (!loaded.fromFile)
		return fmt::format("(built-in defaults: no file in {} whose name starts with {})",
				   ipmasq::quoted(location.path), ipmasq::quoted(kConfigDirPrefix));
	std::vector<std::string> names;
	for (const std::string &file : loaded.config.files)
		names.push_back(escaped(std::filesystem::path(file).filename().string()));
	return fmt::format("{} ({})", escaped(location.path), fmt::join(names, ", "));
}

} // namespace ipmasq
