// SPDX-License-Identifier: Apache-2.0
// Flannel's subnet.env: KEY=VALUE lines, of which FLANNEL_NETWORK and FLANNEL_IPV6_NETWORK count.
#include "ip-masq-agent/node/flannel_subnet_env.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

constexpr std::string_view kIpv4Key = "FLANNEL_NETWORK";
constexpr std::string_view kIpv6Key = "FLANNEL_IPV6_NETWORK";

bool isKeyStart(char c) { return ascii::isLetter(c) || c == '_'; }
bool isKeyChar(char c) { return isKeyStart(c) || ascii::isDigit(c); }
bool isBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view trimmed(std::string_view text)
{
	while (!text.empty() && isBlank(text.front()))
		text.remove_prefix(1);
	while (!text.empty() && isBlank(text.back()))
		text.remove_suffix(1);
	return text;
}

// Parses one file; `at(line)` starts each message.
class SubnetEnvParser
{
public:
	explicit SubnetEnvParser(const std::string &source) : source_(source) {}

	Result<FlannelSubnetEnv> parse(std::string_view text);

private:
	std::string at(uint32_t line) const { return fmt::format("{}:{}: ", escaped(source_), line); }
	Status parseLine(std::string_view line, uint32_t number);
	Result<std::string_view> unquoted(std::string_view value, uint32_t number) const;
	Status addNetworks(std::string_view key, std::string_view value, uint32_t number);

	const std::string &source_;
	FlannelSubnetEnv env_;
	uint32_t ipv4Line_ = 0; // where each key was given, for "given twice"
	uint32_t ipv6Line_ = 0;
};

Result<FlannelSubnetEnv> SubnetEnvParser::parse(std::string_view text)
{
	uint32_t number = 0;
	while (!text.empty()) {
		const size_t end = std::min(text.find('\n'), text.size());
		number++;
		if (Status s = parseLine(text.substr(0, end), number); !s)
			return fail(s.error());
		text.remove_prefix(std::min(end + 1, text.size()));
	}
	if (ipv4Line_ == 0 && ipv6Line_ == 0)
		return fail(fmt::format("{}: holds neither FLANNEL_NETWORK nor FLANNEL_IPV6_NETWORK: "
					"flanneld writes one at least, so the file is not finished or "
					"not flanneld's subnet.env",
					escaped(source_)));
	return std::move(env_);
}

Status SubnetEnvParser::parseLine(std::string_view line, uint32_t number)
{
	const auto control = std::find_if(line.begin(), line.end(), [](char c) {
		const auto byte = static_cast<unsigned char>(c);
		return (byte < 0x20 && c != '\t') || byte == 0x7f;
	});
	if (control != line.end())
		return fail(fmt::format("{}holds a control byte {} (is this a text file?)", at(number),
					quoted(std::string_view(&*control, 1))));
	line = trimmed(line);
	if (line.empty() || line.front() == '#')
		return {};
	const size_t equals = line.find('=');
	const std::string_view key = line.substr(0, std::min(equals, line.size()));
	if (equals == std::string_view::npos || key.empty() || !isKeyStart(key.front()) ||
	    !std::all_of(key.begin(), key.end(), isKeyChar))
		return fail(fmt::format("{}{} is not KEY=VALUE: flanneld writes lines such as "
					"FLANNEL_NETWORK=10.244.0.0/16",
					at(number), quotedShort(line)));
	if (key != kIpv4Key && key != kIpv6Key)
		return {};
	auto value = unquoted(line.substr(equals + 1), number);
	if (!value)
		return fail(value.error());
	return addNetworks(key, *value, number);
}

// A value as a shell reads it: bare, or wholly in single or double quotes; no blanks or
// quotes otherwise (a shell would read them as something else).
Result<std::string_view> SubnetEnvParser::unquoted(std::string_view value, uint32_t number) const
{
	if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
	    value.back() == value.front())
		value = value.substr(1, value.size() - 2);
	const bool plain = std::none_of(value.begin(), value.end(), [](char c) {
		return isBlank(c) || c == '"' || c == '\'' || c == '\\' || c == '$' || c == '`';
	});
	if (!plain)
		return fail(fmt::format("{}{} holds blanks, quotes or shell syntax: write the CIDRs "
					"separated by commas, such as 10.244.0.0/16",
					at(number), quotedShort(value)));
	return value;
}

Status SubnetEnvParser::addNetworks(std::string_view key, std::string_view value, uint32_t number)
{
	const bool ipv6 = key == kIpv6Key;
	uint32_t &given = ipv6 ? ipv6Line_ : ipv4Line_;
	if (given != 0)
		return fail(fmt::format("{}{} is given twice (first at line {}): keep one", at(number),
					key, given));
	given = number;
	if (value.empty())
		return fail(fmt::format("{}{} is empty: it must name the pod network, such as {}",
					at(number), key, ipv6 ? "fd00:10:244::/56" : "10.244.0.0/16"));
	size_t count = 0;
	while (true) {
		const size_t comma = std::min(value.find(','), value.size());
		const std::string_view text = value.substr(0, comma);
		if (++count > kMaxFlannelNetworks)
			return fail(fmt::format("{}{} lists more than {} networks", at(number), key,
						kMaxFlannelNetworks));
		// parsePrefix quotes all of its input: a longer value is not a prefix, and quoted short.
		if (text.size() > kMaxPrefixTextBytes)
			return fail(fmt::format("{}{}: {} is not a CIDR", at(number), key,
						quotedShort(text)));
		auto prefix = parsePrefix(text);
		if (!prefix)
			return fail(prefix.error().withContext(fmt::format("{}{}: ", at(number), key)));
		if ((prefix->network.family == Family::ipv6) != ipv6)
			return fail(fmt::format("{}{}: {} is an {} CIDR; {} holds {} networks", at(number),
						key, quotedShort(text), familyName(prefix->network.family),
						key, ipv6 ? "IPv6" : "IPv4"));
		prefix->spelling.clear();
		env_.networks.push_back(FlannelNetwork{std::move(*prefix), std::string(key), number});
		if (comma == value.size())
			return {};
		value.remove_prefix(comma + 1);
	}
}

} // namespace

Result<FlannelSubnetEnv> parseFlannelSubnetEnv(std::string_view text, const std::string &source)
{
	return SubnetEnvParser(source).parse(text);
}

Result<std::optional<FlannelSubnetEnv>> readFlannelSubnetEnv(const std::string &path)
{
	FileRead read = readBoundedFile(path, kMaxSubnetEnvBytes);
	if (read.outcome == FileRead::Outcome::absent)
		return std::optional<FlannelSubnetEnv>();
	if (read.outcome != FileRead::Outcome::text)
		return fail(fileReadError(path, read, kMaxSubnetEnvBytes));
	auto env = parseFlannelSubnetEnv(read.text, path);
	if (!env)
		return fail(env.error());
	return std::optional<FlannelSubnetEnv>(std::move(*env));
}

} // namespace ipmasq
