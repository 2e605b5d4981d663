// SPDX-License-Identifier: Apache-2.0
// The agent's config file: YAML/JSON parsing with upstream's semantics and precise errors.
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/unique_fd.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <regex>
#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace ipmasq {

namespace {

const char *const kRfc1918[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"};
const char *const kOtherReserved[] = {
	"100.64.0.0/10",   // RFC 6598, carrier-grade NAT
	"192.0.0.0/24",    // RFC 6890, IETF protocol assignments
	"192.0.2.0/24",    // RFC 5737, TEST-NET-1
	"192.88.99.0/24",  // RFC 7526, deprecated 6to4 relay anycast
	"198.18.0.0/15",   // RFC 2544, benchmarking
	"198.51.100.0/24", // RFC 5737, TEST-NET-2
	"203.0.113.0/24",  // RFC 5737, TEST-NET-3
	"240.0.0.0/4",     // RFC 1112, former class E
};

Prefix builtinPrefix(const char *text)
{
	// Built-in constants are valid by construction; a failure here is a programming error.
	return parsePrefix(text).value();
}

std::string lower(std::string_view s)
{
	std::string out(s);
	std::transform(out.begin(), out.end(), out.begin(),
		       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	return out;
}

const char *nodeKind(const YAML::Node &node)
{
	switch (node.Type()) {
	case YAML::NodeType::Map: return "a mapping";
	case YAML::NodeType::Sequence: return "a list";
	case YAML::NodeType::Null: return "null";
	case YAML::NodeType::Scalar: return node.Tag() == "!" ? "a quoted string" : "a scalar";
	default: return "nothing";
	}
}

// Go's JSON decoder (which upstream feeds YAML through) treats a quoted scalar as a
// string: `cidrLimit: "64"` fails there, so it fails here too, instead of guessing.
bool isPlainScalar(const YAML::Node &node)
{
	return node.IsScalar() && node.Tag() != "!";
}

class Parser
{
public:
	Parser(const std::string &source, const ConfigFlags &flags) : source_(source), flags_(flags) {}

	Result<LoadedConfig> parse(std::string_view text);

private:
	// "file:line:col: key: " for a node, so every message points at what to edit.
	std::string where(const YAML::Node &node, std::string_view key) const
	{
		const YAML::Mark mark = node.Mark();
		if (mark.is_null())
			return fmt::format("{}: {}: ", source_, key);
		return fmt::format("{}:{}:{}: {}: ", source_, mark.line + 1, mark.column + 1, key);
	}

	Status readCidrs(const YAML::Node &node, Config &config);
	Status readInt(const YAML::Node &node, const char *key, int &out);
	Status readBool(const YAML::Node &node, const char *key, bool &out);
	Status readDuration(const YAML::Node &node, LoadedConfig &loaded);
	Status validate(const YAML::Node &cidrsNode, const Config &config);

	const std::string &source_;
	const ConfigFlags &flags_;
};

Result<LoadedConfig> Parser::parse(std::string_view text)
{
	LoadedConfig loaded;
	loaded.config = defaultConfig(flags_);
	loaded.fromFile = true;

	YAML::Node root;
	try {
		root = YAML::Load(std::string(text));
	} catch (const YAML::ParserException &e) {
		return fail(fmt::format("{}:{}:{}: YAML syntax error: {} (the file must be YAML or JSON "
					"with keys such as nonMasqueradeCIDRs)",
					source_, e.mark.line + 1, e.mark.column + 1, e.msg));
	}
	if (!root || root.IsNull())
		return loaded; // an empty file, or only comments: all defaults
	if (!root.IsMap())
		return fail(fmt::format("{}: the config must be a mapping of keys such as "
					"nonMasqueradeCIDRs and cidrLimit, but it is {}",
					source_, nodeKind(root)));

	YAML::Node cidrsNode;
	try {
		for (const auto &entry : root) {
			const std::string key = entry.first.as<std::string>();
			const YAML::Node &value = entry.second;
			const std::string k = lower(key);
			const char *canonical = nullptr;
			Status status;
			if (k == "nonmasqueradecidrs") {
				canonical = "nonMasqueradeCIDRs";
				cidrsNode = value;
				status = readCidrs(value, loaded.config);
			} else if (k == "cidrlimit") {
				canonical = "cidrLimit";
				status = readInt(value, canonical, loaded.config.cidrLimit);
			} else if (k == "masqlinklocal") {
				canonical = "masqLinkLocal";
				status = readBool(value, canonical, loaded.config.masqLinkLocal);
			} else if (k == "masqlinklocalipv6") {
				canonical = "masqLinkLocalIPv6";
				status = readBool(value, canonical, loaded.config.masqLinkLocalIPv6);
			} else if (k == "resyncinterval") {
				canonical = "resyncInterval";
				status = readDuration(value, loaded);
			} else {
				loaded.warnings.push_back(fmt::format(
					"{}ignoring unknown key (known keys: nonMasqueradeCIDRs, "
					"cidrLimit, masqLinkLocal, masqLinkLocalIPv6, resyncInterval)",
					where(entry.first, key)));
				continue;
			}
			if (!status)
				return fail(status.error());
			// Upstream matches keys case-insensitively (Go's encoding/json); so do we,
			// but point out the spelling that every other tool expects.
			if (key != canonical)
				loaded.warnings.push_back(fmt::format(
					"{}read as \"{}\"; please spell it exactly so",
					where(entry.first, key), canonical));
		}
	} catch (const YAML::Exception &e) {
		return fail(fmt::format("{}:{}:{}: {}", source_, e.mark.line + 1,
					e.mark.column + 1, e.msg));
	}

	if (auto status = validate(cidrsNode, loaded.config); !status)
		return fail(status.error());
	return loaded;
}

Status Parser::readCidrs(const YAML::Node &node, Config &config)
{
	config.nonMasqueradeCIDRs.clear();
	if (node.IsNull())
		return {}; // an explicit null empties the list, as in upstream
	if (!node.IsSequence())
		return fail(fmt::format("{}expected a list of CIDR strings such as [\"10.0.0.0/8\"], "
					"got {}", where(node, "nonMasqueradeCIDRs"), nodeKind(node)));
	for (size_t i = 0; i < node.size(); i++) {
		const YAML::Node item = node[i];
		const std::string key = fmt::format("nonMasqueradeCIDRs[{}]", i);
		if (!item.IsScalar())
			return fail(fmt::format("{}expected a CIDR string such as \"10.0.0.0/8\", got {}",
						where(item, key), nodeKind(item)));
		auto prefix = parsePrefix(item.Scalar());
		if (!prefix)
			return fail(prefix.error().withContext(where(item, key)));
		if (prefix->network.family == Family::ipv6 && !flags_.enableIpv6)
			return fail(fmt::format("{}\"{}\" is an IPv6 CIDR but IPv6 is not enabled: start "
						"the agent with --enable-ipv6, or remove this entry",
						where(item, key), item.Scalar()));
		config.nonMasqueradeCIDRs.push_back(std::move(*prefix));
	}
	return {};
}

Status Parser::readInt(const YAML::Node &node, const char *key, int &out)
{
	if (node.IsNull())
		return {}; // null keeps the default, as Go's decoder does
	static const std::regex integer("[+-]?[0-9]+");
	if (!isPlainScalar(node) || !std::regex_match(node.Scalar(), integer))
		return fail(fmt::format("{}expected a whole number such as 64, got {} \"{}\"",
					where(node, key), nodeKind(node),
					node.IsScalar() ? node.Scalar() : ""));
	errno = 0;
	const long value = std::strtol(node.Scalar().c_str(), nullptr, 10);
	if (errno == ERANGE || value < 0 || value > 1000000000)
		return fail(fmt::format("{}{} is out of range (use a number from 0 to 1000000000)",
					where(node, key), node.Scalar()));
	out = static_cast<int>(value);
	return {};
}

Status Parser::readBool(const YAML::Node &node, const char *key, bool &out)
{
	if (node.IsNull())
		return {};
	bool value = false;
	if (!isPlainScalar(node) || !YAML::convert<bool>::decode(node, value))
		return fail(fmt::format("{}expected true or false, got {} \"{}\"", where(node, key),
					nodeKind(node), node.IsScalar() ? node.Scalar() : ""));
	out = value;
	return {};
}

Status Parser::readDuration(const YAML::Node &node, LoadedConfig &loaded)
{
	if (node.IsNull())
		return {};
	if (!node.IsScalar())
		return fail(fmt::format("{}expected a duration string such as \"60s\", got {}",
					where(node, "resyncInterval"), nodeKind(node)));
	const std::string &text = node.Scalar();
	static const std::regex number("[+-]?[0-9]+(\\.[0-9]*)?([eE][+-]?[0-9]+)?");
	if (isPlainScalar(node) && std::regex_match(text, number))
		return fail(fmt::format("{}{} is a bare number; like upstream, the agent needs a "
					"duration with a unit: write \"{}s\" for {} seconds",
					where(node, "resyncInterval"), text, text, text));
	auto duration = parseGoDuration(text);
	if (!duration)
		return fail(duration.error().withContext(where(node, "resyncInterval")));
	if (*duration < kMinResyncInterval) {
		loaded.warnings.push_back(fmt::format(
			"{}{} is below the minimum; using {} (a shorter interval would only burn CPU: "
			"config changes are picked up at once anyway)",
			where(node, "resyncInterval"), text, formatGoDuration(kMinResyncInterval)));
		*duration = kMinResyncInterval;
	}
	loaded.config.resyncInterval = *duration;
	return {};
}

Status Parser::validate(const YAML::Node &cidrsNode, const Config &config)
{
	// Upstream's guard against really bad mistakes: link-local is not counted.
	const size_t n = config.nonMasqueradeCIDRs.size();
	if (n > static_cast<size_t>(config.cidrLimit)) {
		const std::string at = cidrsNode ? where(cidrsNode, "nonMasqueradeCIDRs")
						 : fmt::format("{}: nonMasqueradeCIDRs: ", source_);
		return fail(fmt::format("{}{} entries, more than cidrLimit ({}; link-local is not "
					"counted). Remove entries, or raise cidrLimit in the same file",
					at, n, config.cidrLimit));
	}
	return {};
}

} // namespace

std::vector<Prefix> defaultNonMasqueradeCIDRs(const ConfigFlags &flags)
{
	std::vector<Prefix> out;
	for (const char *text : kRfc1918)
		out.push_back(builtinPrefix(text));
	if (flags.nomasqAllReservedRanges)
		for (const char *text : kOtherReserved)
			out.push_back(builtinPrefix(text));
	return out;
}

Config defaultConfig(const ConfigFlags &flags)
{
	Config config;
	config.nonMasqueradeCIDRs = defaultNonMasqueradeCIDRs(flags);
	return config;
}

Result<LoadedConfig> parseConfig(std::string_view text, const std::string &source,
				 const ConfigFlags &flags)
{
	return Parser(source, flags).parse(text);
}

Result<std::optional<std::string>> readConfigText(const std::string &path)
{
	const auto cannotRead = [&](int err) {
		return fail(fmt::format("{}: cannot read the config file: {}", path, std::strerror(err)),
			    err);
	};
	UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
	if (!fd.isValid())
		return errno == ENOENT ? Result<std::optional<std::string>>(std::nullopt)
				       : cannotRead(errno);
	struct stat st {};
	if (fstat(fd.get(), &st) != 0)
		return cannotRead(errno);
	if (S_ISDIR(st.st_mode))
		return fail(fmt::format("{}: is a directory; --config must name the file itself "
					"(for a ConfigMap volume, the key's file inside it)", path),
			    EISDIR);
	std::string text;
	char buf[65536];
	for (;;) {
		const ssize_t n = read(fd.get(), buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cannotRead(errno);
		if (n == 0)
			break;
		text.append(buf, static_cast<size_t>(n));
	}
	return std::optional<std::string>(std::move(text));
}

Result<LoadedConfig> parseConfigText(const std::optional<std::string> &text, const std::string &path,
				     const ConfigFlags &flags)
{
	if (!text) {
		LoadedConfig loaded;
		loaded.config = defaultConfig(flags);
		return loaded;
	}
	return parseConfig(*text, path, flags);
}

Result<LoadedConfig> loadConfigFile(const std::string &path, const ConfigFlags &flags)
{
	auto text = readConfigText(path);
	if (!text)
		return fail(text.error());
	return parseConfigText(*text, path, flags);
}

std::string describeConfig(const Config &config)
{
	std::vector<std::string> cidrs;
	for (const Prefix &prefix : config.nonMasqueradeCIDRs)
		cidrs.push_back(prefix.toString());
	return fmt::format("nonMasqueradeCIDRs=[{}] cidrLimit={} masqLinkLocal={} "
			   "masqLinkLocalIPv6={} resyncInterval={}",
			   fmt::join(cidrs, ","), config.cidrLimit, config.masqLinkLocal,
			   config.masqLinkLocalIPv6, formatGoDuration(config.resyncInterval));
}

} // namespace ipmasq
